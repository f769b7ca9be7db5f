// ExampleParser unit tests with the expected values written down: every dtype bit-exact, FixedLen
// and VarLen layouts, defaults, decode: raw, packed/unpacked/mixed encodings, protobuf merge and
// oneof semantics, duplicate and unknown keys, malformed wire data, spec validation, and the parser
// cases 6-10 of ../shared/reference/bad-inputs.md. Records are encoded by hand here (independent of
// format/example_builder) so that every wire variant can be produced.
#include <catch2/catch.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/feature_spec.h"
#include "format/utf8.h"

using namespace ringfeed;
using namespace std::string_literals;

namespace {

constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// ---- wire encoding -------------------------------------------------------------------------

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Tag(uint32_t field, uint32_t wire) { return Varint(uint64_t{field} << 3 | wire); }
std::string Ld(uint32_t field, const std::string& payload) { return Tag(field, 2) + Varint(payload.size()) + payload; }
std::string Fixed32(uint32_t bits) { return std::string(reinterpret_cast<const char*>(&bits), 4); }

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

// List payloads (the content of a BytesList/FloatList/Int64List message).
std::string FloatsPacked(const std::vector<uint32_t>& bits) {
  std::string p;
  for (uint32_t b : bits) p += Fixed32(b);
  return Ld(1, p);
}
std::string FloatsUnpacked(const std::vector<uint32_t>& bits) {
  std::string p;
  for (uint32_t b : bits) p += Tag(1, 5) + Fixed32(b);
  return p;
}
std::string IntsPacked(const std::vector<int64_t>& v) {
  std::string p;
  for (int64_t x : v) p += Varint(static_cast<uint64_t>(x));
  return Ld(1, p);
}
std::string IntsUnpacked(const std::vector<int64_t>& v) {
  std::string p;
  for (int64_t x : v) p += Tag(1, 0) + Varint(static_cast<uint64_t>(x));
  return p;
}
std::string BytesL(const std::vector<std::string>& v) {
  std::string p;
  for (const auto& s : v) p += Ld(1, s);
  return p;
}

enum Kind : uint32_t { kBytesKind = 1, kFloatKind = 2, kInt64Kind = 3 };
// One list field of a Feature message.
std::string Feat(Kind kind, const std::string& list) { return Ld(kind, list); }
std::string FloatF(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float f : v) b.push_back(Bits(f));
  return Feat(kFloatKind, FloatsPacked(b));
}
std::string IntF(const std::vector<int64_t>& v) { return Feat(kInt64Kind, IntsPacked(v)); }
std::string BytesF(const std::vector<std::string>& v) { return Feat(kBytesKind, BytesL(v)); }

// One Features.feature map entry.
std::string Entry(const std::string& key, const std::string& feature) { return Ld(1, Ld(1, key) + Ld(2, feature)); }
std::string Example(const std::vector<std::string>& entries) {
  std::string all;
  for (const auto& e : entries) all += e;
  return Ld(1, all);
}

// ---- specs -----------------------------------------------------------------------------------

FeatureSpec Var(const std::string& name, DType dtype) {
  FeatureSpec s;
  s.name = name;
  s.type = FeatureType::kVarLen;
  s.dtype = dtype;
  return s;
}
FeatureSpec Fixed(const std::string& name, DType dtype, std::vector<int64_t> shape = {}) {
  FeatureSpec s;
  s.name = name;
  s.type = FeatureType::kFixedLen;
  s.dtype = dtype;
  s.shape = std::move(shape);
  return s;
}
FeatureSpec WithDefault(FeatureSpec s, std::vector<int64_t> d) {
  s.has_default = true;
  s.default_int64 = std::move(d);
  return s;
}
FeatureSpec WithDefault(FeatureSpec s, std::vector<float> d) {
  s.has_default = true;
  s.default_float = std::move(d);
  return s;
}
FeatureSpec WithDefault(FeatureSpec s, std::vector<std::string> d) {
  s.has_default = true;
  s.default_bytes = std::move(d);
  return s;
}
FeatureSpec Raw(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  FeatureSpec s = Fixed(name, dtype, std::move(shape));
  s.decode_raw = true;
  return s;
}

// ---- parsing and inspection ----------------------------------------------------------------

// A parser together with a batch built from its specs.
struct Harness {
  ExampleParser parser;
  ExampleBatch batch;
  ParseError error;
  Harness(FeatureSpecs specs, size_t capacity = 16) : parser(std::move(specs)), batch(parser.specs(), capacity) {}

  bool Parse(const std::string& bytes) {
    error = {};
    return parser.Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, batch, &error);
  }
  const Column& col(size_t f) const { return batch.column(f); }
};

template <typename T>
std::vector<T> Values(const Column& c) {
  auto s = c.as<T>();
  return {s.begin(), s.end()};
}

// Values of one row of a VarLen numeric column.
template <typename T>
std::vector<T> Row(const Column& c, size_t row) {
  auto all = c.as<T>();
  return {all.begin() + c.row_splits[row], all.begin() + c.row_splits[row + 1]};
}

std::vector<std::string> Strings(const Column& c) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < c.value_offsets.size(); ++i) {
    out.emplace_back(reinterpret_cast<const char*>(c.values.data()) + c.value_offsets[i],
                     static_cast<size_t>(c.value_offsets[i + 1] - c.value_offsets[i]));
  }
  return out;
}

std::vector<uint32_t> FloatBits(const Column& c) {
  std::vector<uint32_t> out;
  for (float f : c.as<float>()) out.push_back(Bits(f));
  return out;
}

// Rows and committed content of a batch, to check that a failed Parse left it unchanged.
struct Snapshot {
  size_t rows;
  std::vector<std::vector<uint8_t>> values;
  std::vector<std::vector<int64_t>> offsets, splits;

  explicit Snapshot(const ExampleBatch& b) : rows(b.rows()) {
    for (size_t i = 0; i < b.specs().size(); ++i) {
      const Column& c = b.column(i);
      const FeatureSpec& s = b.specs()[i];
      std::vector<uint8_t> v(c.values.begin(), c.values.end());
      if (s.type == FeatureType::kFixedLen && s.dtype != DType::kBytes) {
        // Only the committed rows of the preallocated area are meaningful.
        v.resize(rows * static_cast<size_t>(s.NumElements()) * DTypeSize(s.dtype));
      }
      values.push_back(std::move(v));
      offsets.emplace_back(c.value_offsets.begin(), c.value_offsets.end());
      splits.emplace_back(c.row_splits.begin(), c.row_splits.end());
    }
  }
  // Compares rows, column sizes and committed bytes.
  void Check(const ExampleBatch& b) const {
    Snapshot now(b);
    CHECK(now.rows == rows);
    for (size_t i = 0; i < values.size(); ++i) {
      INFO("column " << i << " (" << b.specs()[i].name << ")");
      const FeatureSpec& s = b.specs()[i];
      if (s.type == FeatureType::kFixedLen && s.dtype != DType::kBytes) {
        CHECK(b.column(i).values.size() == b.capacity() * static_cast<size_t>(s.NumElements()) * DTypeSize(s.dtype));
      }
      CHECK(now.values[i] == values[i]);
      CHECK(now.offsets[i] == offsets[i]);
      CHECK(now.splits[i] == splits[i]);
    }
  }
};

bool Contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// Expects Parse to fail, mention `key` and every string in `words`, and leave the batch unchanged.
void ExpectError(Harness& h, const std::string& bytes, const std::string& key, const std::vector<std::string>& words) {
  Snapshot before(h.batch);
  const bool ok = h.Parse(bytes);
  INFO("message: " << h.error.message);
  REQUIRE_FALSE(ok);
  CHECK(h.error.key == key);
  if (!key.empty()) CHECK(Contains(h.error.message, "'" + key + "'"));
  for (const auto& w : words) {
    INFO("expected word: " << w);
    CHECK(Contains(h.error.message, w));
  }
  before.Check(h.batch);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("a key with control or invisible characters is escaped in errors: the message is not garbled") {
  // A tab (from "\t" in a quoted YAML name), DEL or a zero-width space showed raw (helper-157).
  const std::string name = std::string("a\tb\x7F") + "c\u200Bd";
  Harness h({Fixed(name, DType::kInt64)});
  REQUIRE_FALSE(h.Parse(Example({Entry("other", IntF({1}))})));
  CHECK(h.error.key == name);
  CHECK_THAT(h.error.message, Catch::StartsWith("key 'a\\x09b\\x7Fc\\u200Bd': required feature is missing"));
  CHECK(QuotedName("price") == "'price'");
  CHECK(QuotedName("ü") == "'ü'");  // other UTF-8 as written
}

TEST_CASE("int64: negatives are 10-byte varints; INT64_MIN and INT64_MAX round-trip") {
  CHECK(Varint(static_cast<uint64_t>(int64_t{-1})).size() == 10);
  CHECK(Varint(static_cast<uint64_t>(kI64Min)).size() == 10);
  const std::vector<int64_t> v = {
      0, 1, -1, kI64Min, kI64Max, 127, 128, -128, int64_t{1} << 40, -(int64_t{1} << 40), kI64Min + 1, kI64Max - 1};
  Harness h({Var("v", DType::kInt64), Fixed("f", DType::kInt64, {12}), Fixed("s", DType::kInt64)});
  REQUIRE(h.Parse(Example({Entry("v", IntF(v)), Entry("f", IntF(v)), Entry("s", IntF({-1}))})));
  REQUIRE(h.Parse(Example({Entry("f", Feat(kInt64Kind, IntsUnpacked(v))), Entry("s", IntF({kI64Min}))})));
  CHECK(h.batch.rows() == 2);
  CHECK(Row<int64_t>(h.col(0), 0) == v);
  CHECK(Row<int64_t>(h.col(0), 1).empty());
  std::vector<int64_t> twice = v;
  twice.insert(twice.end(), v.begin(), v.end());
  CHECK(Values<int64_t>(h.col(1)).size() == 16 * 12);  // preallocated for capacity 16
  CHECK(std::vector<int64_t>(h.col(1).as<int64_t>().begin(), h.col(1).as<int64_t>().begin() + 24) == twice);
  CHECK(h.col(2).as<int64_t>()[0] == -1);
  CHECK(h.col(2).as<int64_t>()[1] == kI64Min);
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0, 12, 12});
}

TEST_CASE("float32: copied bit for bit (NaN payloads, signalling NaN, infinities, -0.0, denormals)") {
  const std::vector<uint32_t> bits = {
      0x7fc12345,  // quiet NaN with payload
      0x7f800001,  // signalling NaN
      0xffa00000,  // negative signalling NaN
      0xffffffff,  // all-ones NaN
      0x7f800000,  // +inf
      0xff800000,  // -inf
      0x80000000,  // -0.0
      0x00000000,  // +0.0
      0x00000001,  // smallest denormal
      0x807fffff,  // largest negative denormal
      0x7f7fffff,  // FLT_MAX
      Bits(2.4f),
  };
  Harness h({Var("v", DType::kFloat32), Fixed("f", DType::kFloat32, {3, 4}), Fixed("s", DType::kFloat32)});
  REQUIRE(h.Parse(
      Example({Entry("v", Feat(kFloatKind, FloatsPacked(bits))), Entry("f", Feat(kFloatKind, FloatsUnpacked(bits))),
               Entry("s", Feat(kFloatKind, FloatsPacked({0x80000000})))})));
  CHECK(FloatBits(h.col(0)) == bits);
  std::vector<uint32_t> fixed = FloatBits(h.col(1));
  fixed.resize(12);
  CHECK(fixed == bits);
  CHECK(FloatBits(h.col(2))[0] == 0x80000000u);
  CHECK(std::signbit(h.col(2).as<float>()[0]));
}

TEST_CASE("bytes: empty strings, embedded NULs, 0xff, long strings; FixedLen and VarLen layouts") {
  const std::string nul3("\0\0\0", 3);
  const std::vector<std::string> v = {"", std::string("a\0b", 3), nul3, "\xff", std::string(300, 'x'), ""};
  Harness h({Var("v", DType::kBytes), Fixed("f", DType::kBytes, {2, 3}), Fixed("s", DType::kBytes)});
  REQUIRE(h.Parse(Example({Entry("v", BytesF(v)), Entry("f", BytesF(v)), Entry("s", BytesF({""}))})));
  REQUIRE(h.Parse(Example(
      {Entry("v", BytesF({})), Entry("f", BytesF({"1", "2", "3", "4", "5", "6"})), Entry("s", BytesF({nul3}))})));
  CHECK(Strings(h.col(0)) == v);
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0, 6, 6});
  CHECK(h.col(0).value_offsets == std::vector<int64_t>{0, 0, 3, 6, 7, 307, 307});
  std::vector<std::string> f = v;
  for (const char* s : {"1", "2", "3", "4", "5", "6"}) f.push_back(s);
  CHECK(Strings(h.col(1)) == f);
  CHECK(h.col(1).row_splits.empty());
  CHECK(Strings(h.col(2)) == std::vector<std::string>{"", nul3});
}

TEST_CASE("FixedLen scalar and shaped features fill rows in row-major order") {
  Harness h({Fixed("s", DType::kInt64), Fixed("m", DType::kFloat32, {2, 3}), Fixed("z", DType::kInt64, {0}),
             Fixed("e", DType::kFloat32, {2, 0, 3})});
  for (int r = 0; r < 3; ++r) {
    std::vector<float> m;
    for (int k = 0; k < 6; ++k) m.push_back(static_cast<float>(r * 10 + k));
    REQUIRE(h.Parse(
        Example({Entry("s", IntF({r * 100})), Entry("m", FloatF(m)), Entry("z", IntF({})), Entry("e", FloatF({}))})));
  }
  CHECK(h.batch.rows() == 3);
  auto s = h.col(0).as<int64_t>();
  CHECK(std::vector<int64_t>(s.begin(), s.begin() + 3) == std::vector<int64_t>{0, 100, 200});
  auto m = h.col(1).as<float>();
  CHECK(std::vector<float>(m.begin(), m.begin() + 18) ==
        std::vector<float>{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25});
  CHECK(h.col(2).values.empty());
  CHECK(h.col(3).values.empty());
  // A zero-element shape needs zero values: one value is a count error.
  ExpectError(h,
              Example({Entry("s", IntF({1})), Entry("m", FloatF({1, 2, 3, 4, 5, 6})), Entry("z", IntF({1})),
                       Entry("e", FloatF({}))}),
              "z", {"1", "[0]"});
}

TEST_CASE("defaults: scalar broadcast, full list, bytes; used for a missing key and for Feature{}") {
  FeatureSpecs specs = {
      WithDefault(Fixed("ib", DType::kInt64, {3}), std::vector<int64_t>{7}),
      WithDefault(Fixed("il", DType::kInt64, {2, 2}), std::vector<int64_t>{kI64Min, -1, 0, kI64Max}),
      WithDefault(Fixed("fb", DType::kFloat32, {2}), std::vector<float>{-0.0f}),
      WithDefault(Fixed("fl", DType::kFloat32, {3}), std::vector<float>{1.5f, -INFINITY, FromBits(0x7fc00001)}),
      WithDefault(Fixed("bb", DType::kBytes, {2}), std::vector<std::string>{std::string("d\0", 2)}),
      WithDefault(Fixed("bl", DType::kBytes, {3}), std::vector<std::string>{"", "x", "yz"}),
      WithDefault(Fixed("bs", DType::kBytes), std::vector<std::string>{"dflt"}),
  };
  Harness h(specs);
  // Row 0: every key present; row 1: every key missing; row 2: every key a Feature{} (no list).
  REQUIRE(h.Parse(Example({Entry("ib", IntF({1, 2, 3})), Entry("il", IntF({4, 5, 6, 7})), Entry("fb", FloatF({8, 9})),
                           Entry("fl", FloatF({10, 11, 12})), Entry("bb", BytesF({"a", "b"})),
                           Entry("bl", BytesF({"c", "d", "e"})), Entry("bs", BytesF({"f"}))})));
  REQUIRE(h.Parse(Example({})));
  std::vector<std::string> empty_features;
  for (const auto& s : specs) empty_features.push_back(Entry(s.name, ""));
  REQUIRE(h.Parse(Example(empty_features)));
  REQUIRE(h.batch.rows() == 3);

  auto ib = h.col(0).as<int64_t>();
  CHECK(std::vector<int64_t>(ib.begin(), ib.begin() + 9) == std::vector<int64_t>{1, 2, 3, 7, 7, 7, 7, 7, 7});
  auto il = h.col(1).as<int64_t>();
  CHECK(std::vector<int64_t>(il.begin(), il.begin() + 12) ==
        std::vector<int64_t>{4, 5, 6, 7, kI64Min, -1, 0, kI64Max, kI64Min, -1, 0, kI64Max});
  auto fb = FloatBits(h.col(2));
  CHECK(std::vector<uint32_t>(fb.begin(), fb.begin() + 6) ==
        std::vector<uint32_t>{Bits(8), Bits(9), 0x80000000, 0x80000000, 0x80000000, 0x80000000});
  auto fl = FloatBits(h.col(3));
  CHECK(std::vector<uint32_t>(fl.begin(), fl.begin() + 9) == std::vector<uint32_t>{Bits(10), Bits(11), Bits(12),
                                                                                   Bits(1.5f), 0xff800000, 0x7fc00001,
                                                                                   Bits(1.5f), 0xff800000, 0x7fc00001});
  const std::string d0("d\0", 2);
  CHECK(Strings(h.col(4)) == std::vector<std::string>{"a", "b", d0, d0, d0, d0});
  CHECK(Strings(h.col(5)) == std::vector<std::string>{"c", "d", "e", "", "x", "yz", "", "x", "yz"});
  CHECK(Strings(h.col(6)) == std::vector<std::string>{"f", "dflt", "dflt"});
}

TEST_CASE("VarLen: row_splits delimit rows; missing, Feature{} and empty lists are rows of length 0") {
  Harness h({Var("i", DType::kInt64), Var("f", DType::kFloat32), Var("b", DType::kBytes)});
  REQUIRE(h.Parse(Example({Entry("i", IntF({1, 2})), Entry("f", FloatF({0.5f})), Entry("b", BytesF({"a", "", "c"}))})));
  REQUIRE(h.Parse(Example({})));
  REQUIRE(h.Parse(Example({Entry("i", ""), Entry("f", ""), Entry("b", "")})));
  REQUIRE(h.Parse(Example({Entry("i", IntF({})), Entry("f", FloatF({})), Entry("b", BytesF({}))})));
  REQUIRE(h.Parse(Example({Entry("i", IntF({-3})), Entry("f", FloatF({1, 2, 3})), Entry("b", BytesF({""}))})));
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0, 2, 2, 2, 2, 3});
  CHECK(Values<int64_t>(h.col(0)) == std::vector<int64_t>{1, 2, -3});
  CHECK(h.col(1).row_splits == std::vector<int64_t>{0, 1, 1, 1, 1, 4});
  CHECK(Values<float>(h.col(1)) == std::vector<float>{0.5f, 1, 2, 3});
  CHECK(h.col(2).row_splits == std::vector<int64_t>{0, 3, 3, 3, 3, 4});
  CHECK(Strings(h.col(2)) == std::vector<std::string>{"a", "", "c", ""});
}

TEST_CASE("decode: raw reinterprets one bytes value as little-endian values") {
  std::string img(784, '\0');
  for (size_t k = 0; k < img.size(); ++k) img[k] = static_cast<char>(k * 7 % 256);
  std::string i32;
  for (int32_t v : {1, -2, 0x7fffffff}) i32 += std::string(reinterpret_cast<const char*>(&v), 4);
  std::string f64;
  for (double v : {1.0 / 3.0, -0.0}) f64 += std::string(reinterpret_cast<const char*>(&v), 8);
  const std::string u16("\x01\x02\xff\xff", 4);

  Harness h({Raw("image", DType::kUInt8, {28, 28, 1}), Raw("i32", DType::kInt32, {3}), Raw("f64", DType::kFloat64, {2}),
             Raw("u16", DType::kUInt16, {2}), Raw("i8", DType::kInt8, {}), Raw("i64", DType::kInt64, {1}),
             Raw("f32", DType::kFloat32, {1})});
  const std::string i8("\x80", 1);
  const int64_t i64v = kI64Min;
  const float f32v = FromBits(0x7fc12345);
  auto record = [&](const std::string& image) {
    return Example({Entry("image", BytesF({image})), Entry("i32", BytesF({i32})), Entry("f64", BytesF({f64})),
                    Entry("u16", BytesF({u16})), Entry("i8", BytesF({i8})),
                    Entry("i64", BytesF({std::string(reinterpret_cast<const char*>(&i64v), 8)})),
                    Entry("f32", BytesF({std::string(reinterpret_cast<const char*>(&f32v), 4)}))});
  };
  REQUIRE(h.Parse(record(img)));
  REQUIRE(h.col(0).values.size() == 16 * 784);
  CHECK(std::memcmp(h.col(0).values.data(), img.data(), 784) == 0);
  CHECK(h.col(1).as<int32_t>()[0] == 1);
  CHECK(h.col(1).as<int32_t>()[1] == -2);
  CHECK(h.col(1).as<int32_t>()[2] == 0x7fffffff);
  CHECK(h.col(2).as<double>()[0] == 1.0 / 3.0);
  CHECK(std::signbit(h.col(2).as<double>()[1]));
  CHECK(h.col(3).as<uint16_t>()[0] == 0x0201);
  CHECK(h.col(3).as<uint16_t>()[1] == 0xffff);
  CHECK(h.col(4).as<int8_t>()[0] == -128);
  CHECK(h.col(5).as<int64_t>()[0] == kI64Min);
  CHECK(Bits(h.col(6).as<float>()[0]) == 0x7fc12345u);

  // Wrong byte counts, two values, an empty list, a missing key, a wrong list kind: errors.
  ExpectError(h, record(img.substr(0, 783)), "image", {"784", "783"});
  ExpectError(h, record(img + "x"), "image", {"784", "785"});
  ExpectError(h, Example({Entry("image", BytesF({img, img}))}), "image", {"784", "2 value"});
  ExpectError(h, Example({Entry("image", BytesF({}))}), "image", {"784", "0 value"});
  ExpectError(h, Example({Entry("i32", BytesF({i32}))}), "image", {"missing"});
  ExpectError(h, Example({Entry("image", IntF({1}))}), "image", {"int64_list", "bytes_list"});
  CHECK(h.batch.rows() == 1);
}

TEST_CASE("packed, unpacked and mixed encodings give the same values") {
  const std::vector<int64_t> iv = {-1, 0, 300, kI64Min, 5};
  const std::vector<uint32_t> fv = {0x7fc12345, Bits(1), 0x80000000, Bits(-7.25f), 0x7f800000};
  std::vector<std::string> int_variants = {
      IntsPacked(iv),
      IntsUnpacked(iv),
      IntsPacked({-1, 0}) + IntsUnpacked({300, kI64Min}) + IntsPacked({5}),
      IntsUnpacked({-1}) + IntsPacked({0, 300, kI64Min, 5}),
      IntsPacked({}) + IntsPacked({-1, 0, 300}) + IntsPacked({}) + IntsUnpacked({kI64Min, 5}),
  };
  std::vector<std::string> float_variants = {
      FloatsPacked(fv),
      FloatsUnpacked(fv),
      FloatsPacked({fv[0], fv[1]}) + FloatsUnpacked({fv[2], fv[3]}) + FloatsPacked({fv[4]}),
      FloatsUnpacked({fv[0]}) + FloatsPacked({fv[1], fv[2], fv[3], fv[4]}),
      FloatsPacked({}) + FloatsPacked({fv[0], fv[1], fv[2]}) + FloatsUnpacked({fv[3], fv[4]}),
  };
  for (size_t k = 0; k < int_variants.size(); ++k) {
    INFO("variant " << k);
    Harness h({Var("i", DType::kInt64), Fixed("f", DType::kFloat32, {5})});
    REQUIRE(h.Parse(
        Example({Entry("i", Feat(kInt64Kind, int_variants[k])), Entry("f", Feat(kFloatKind, float_variants[k]))})));
    CHECK(Values<int64_t>(h.col(0)) == iv);
    auto bits = FloatBits(h.col(1));
    CHECK(std::vector<uint32_t>(bits.begin(), bits.begin() + 5) == fv);
  }
}

TEST_CASE("duplicate keys: the last one wins, also when it is empty") {
  Harness h({Var("v", DType::kFloat32), WithDefault(Fixed("d", DType::kInt64, {3}), std::vector<int64_t>{9}),
             Fixed("n", DType::kBytes)});
  // Last non-empty wins.
  REQUIRE(h.Parse(Example({Entry("v", FloatF({1, 2})), Entry("d", IntF({1, 2, 3})), Entry("n", BytesF({"first"})),
                           Entry("v", FloatF({3})), Entry("d", IntF({4, 5, 6})), Entry("n", BytesF({"last"}))})));
  CHECK(Row<float>(h.col(0), 0) == std::vector<float>{3});
  CHECK(std::vector<int64_t>(h.col(1).as<int64_t>().begin(), h.col(1).as<int64_t>().begin() + 3) ==
        std::vector<int64_t>{4, 5, 6});
  CHECK(Strings(h.col(2)) == std::vector<std::string>{"last"});
  // Last is Feature{} (no list): missing -> empty row / default (protobuf map semantics; TF's fast
  // parser would keep the earlier FixedLen value, see tests/golden/edge_cases.json).
  REQUIRE(h.Parse(Example({Entry("v", FloatF({1, 2})), Entry("d", IntF({1, 2, 3})), Entry("n", BytesF({"x"})),
                           Entry("v", ""), Entry("d", ""), Entry("n", BytesF({"y"}))})));
  CHECK(Row<float>(h.col(0), 1).empty());
  CHECK(h.col(1).as<int64_t>()[3] == 9);
  CHECK(h.col(1).as<int64_t>()[5] == 9);
  // A required feature whose last duplicate is Feature{} is missing: an error.
  ExpectError(h, Example({Entry("n", BytesF({"x"})), Entry("n", "")}), "n", {"missing"});
  // Last is an empty list: VarLen row of length 0; FixedLen count error even with a default.
  REQUIRE(h.Parse(Example({Entry("v", FloatF({1})), Entry("v", FloatF({})), Entry("n", BytesF({"z"}))})));
  CHECK(Row<float>(h.col(0), 2).empty());
  ExpectError(h, Example({Entry("d", IntF({1, 2, 3})), Entry("d", IntF({})), Entry("n", BytesF({"z"}))}), "d",
              {"number of int64 values", "0", "[3]"});
  // A duplicate with another kind: the last kind counts.
  ExpectError(h, Example({Entry("v", FloatF({1})), Entry("v", IntF({1})), Entry("n", BytesF({"z"}))}), "v",
              {"int64_list", "float_list"});
  REQUIRE(h.Parse(Example({Entry("v", IntF({1})), Entry("v", FloatF({8})), Entry("n", BytesF({"z"}))})));
  CHECK(Row<float>(h.col(0), 3) == std::vector<float>{8});
  CHECK(h.batch.rows() == 4);
}

TEST_CASE("keys not in the spec are skipped without decoding, whatever their value holds") {
  Harness h({Var("f", DType::kFloat32)});
  const std::vector<std::string> garbage = {
      "\xff\xff\xff\xff\x0f",               // a tag that is not a valid field
      Tag(2, 2) + Varint(1000) + "abc",     // a length past the end of the value
      Feat(kFloatKind, Ld(1, "\x01\x02")),  // a packed float run of 2 bytes
      Feat(kInt64Kind, Ld(1, "\xff")),      // a truncated varint
      Tag(1, 3) + Tag(1, 4),                // a group
      std::string(50, '\xff'),
  };
  std::vector<std::string> entries;
  for (size_t k = 0; k < garbage.size(); ++k) entries.push_back(Entry("zz" + std::to_string(k), garbage[k]));
  entries.push_back(Entry("f", FloatF({1, 2})));
  entries.push_back(Entry("F", IntF({1})));     // case differs
  entries.push_back(Entry("ff", IntF({1})));    // prefix
  entries.push_back(Entry("", IntF({1})));      // empty key
  entries.push_back(Entry("f\0"s, IntF({1})));  // embedded NUL
  REQUIRE(h.Parse(Example(entries)));
  CHECK(Values<float>(h.col(0)) == std::vector<float>{1, 2});
}

TEST_CASE("unknown fields at every level are skipped (protobuf semantics)") {
  Harness h({Var("i", DType::kInt64), Fixed("f", DType::kFloat32, {2}), Var("b", DType::kBytes)});
  const std::string unknown = Tag(7, 0) + Varint(uint64_t{1} << 63) + Tag(8, 1) + std::string(8, '\x11') + Tag(9, 5) +
                              std::string(4, '\x22') + Ld(10, "junk");
  const std::string i_feature = unknown + Feat(kInt64Kind, IntsPacked({1, 2}) + unknown) + unknown;
  const std::string f_feature = Feat(kFloatKind, unknown + FloatsPacked({Bits(1), Bits(2)}));
  const std::string b_feature = Feat(kBytesKind, unknown + BytesL({"q"}) + unknown);
  const std::string features = unknown + Ld(1, unknown + Ld(1, "i") + unknown + Ld(2, i_feature) + unknown) +
                               Entry("f", f_feature) + unknown + Entry("b", b_feature) + Tag(1, 0) + Varint(3);
  REQUIRE(h.Parse(unknown + Ld(1, features) + unknown + Tag(1, 5) + Fixed32(0)));
  CHECK(Values<int64_t>(h.col(0)) == std::vector<int64_t>{1, 2});
  CHECK(Values<float>(h.col(1)).at(0) == 1);
  CHECK(Values<float>(h.col(1)).at(1) == 2);
  CHECK(Strings(h.col(2)) == std::vector<std::string>{"q"});
  // A list field with an unexpected wire type is not skipped but is an error (as in TF).
  Harness g({Var("f", DType::kFloat32)});
  ExpectError(g, Example({Entry("f", Feat(kFloatKind, Tag(1, 0) + Varint(1)))}), "f", {"malformed"});
  // A list field number with a non-LEN wire type inside Feature is an unknown field: missing.
  REQUIRE(g.Parse(Example({Entry("f", Tag(2, 0) + Varint(1))})));
  CHECK(g.col(0).row_splits == std::vector<int64_t>{0, 0});
}

TEST_CASE("a Feature with no list set is missing; an empty list that is set is not") {
  Harness var({Var("f", DType::kFloat32)});
  REQUIRE(var.Parse(Example({Entry("f", "")})));
  REQUIRE(var.Parse(Example({Ld(1, Ld(1, "f"))})));  // map entry with no value at all
  REQUIRE(var.Parse(Example({Entry("f", FloatF({}))})));
  CHECK(var.col(0).row_splits == std::vector<int64_t>{0, 0, 0, 0});

  Harness fixed({WithDefault(Fixed("f", DType::kFloat32, {3}), std::vector<float>{0.5f})});
  REQUIRE(fixed.Parse(Example({Entry("f", "")})));
  CHECK(Values<float>(fixed.col(0)).at(2) == 0.5f);
  // TensorFlow 2.21: "Number of float values != expected. Values size: 0 but output shape: [3]",
  // although the feature has a default.
  ExpectError(fixed, Example({Entry("f", FloatF({}))}), "f", {"number of float values", "0", "[3]"});
  Harness required({Fixed("f", DType::kFloat32, {3})});
  ExpectError(required, Example({Entry("f", "")}), "f", {"missing", "float32", "[3]"});
}

TEST_CASE("oneof: the last run of list fields wins; repeated lists of one kind merge") {
  Harness h({Var("x", DType::kFloat32), Var("y", DType::kInt64), Var("z", DType::kBytes)});
  // x: float_list [1], int64_list [5], float_list [2,3], float_list [4] -> [2,3,4].
  // y: float_list [1], then int64_list [5], int64_list [6] -> [5,6].
  // z: bytes_list [a], bytes_list [b] -> [a, b].
  REQUIRE(
      h.Parse(Example({Entry("x", FloatF({1}) + IntF({5}) + FloatF({2, 3}) + FloatF({4})),
                       Entry("y", FloatF({1}) + IntF({5}) + IntF({6})), Entry("z", BytesF({"a"}) + BytesF({"b"}))})));
  CHECK(Values<float>(h.col(0)) == std::vector<float>{2, 3, 4});
  CHECK(Values<int64_t>(h.col(1)) == std::vector<int64_t>{5, 6});
  CHECK(Strings(h.col(2)) == std::vector<std::string>{"a", "b"});
  // x ends with an int64_list: the float spec now sees the wrong kind.
  ExpectError(h, Example({Entry("x", FloatF({1}) + IntF({5}))}), "x", {"int64_list", "float_list"});
  // Malformed data inside an earlier (overridden) list is not decoded (protobuf would reject the
  // Example; TensorFlow would read that first list and fail).
  REQUIRE(h.Parse(Example({Entry("x", Feat(kInt64Kind, Ld(1, "\xff")) + FloatF({7}))})));
  CHECK(Row<float>(h.col(0), 1) == std::vector<float>{7});
}

TEST_CASE("repeated features fields merge; concatenated Examples behave like protobuf merging") {
  Harness h({Var("a", DType::kInt64), Var("b", DType::kInt64), Var("c", DType::kInt64)});
  REQUIRE(h.Parse(Example({Entry("a", IntF({1})), Entry("b", IntF({2}))}) +
                  Example({Entry("b", IntF({3})), Entry("c", IntF({4}))})));
  CHECK(Row<int64_t>(h.col(0), 0) == std::vector<int64_t>{1});
  CHECK(Row<int64_t>(h.col(1), 0) == std::vector<int64_t>{3});
  CHECK(Row<int64_t>(h.col(2), 0) == std::vector<int64_t>{4});
  // Two features fields inside one message, the second with only a Feature{} for a.
  REQUIRE(h.Parse(Ld(1, Entry("a", IntF({5}))) + Ld(1, Entry("a", ""))));
  CHECK(Row<int64_t>(h.col(0), 1).empty());
  REQUIRE(h.Parse(Ld(1, "") + Ld(1, Entry("c", IntF({6}))) + Ld(1, "")));
  CHECK(Row<int64_t>(h.col(2), 2) == std::vector<int64_t>{6});
}

TEST_CASE("map entries: value before key, missing key, key given twice") {
  Harness h({Var("k", DType::kInt64), Var("", DType::kInt64)});
  REQUIRE(h.Parse(Example({Ld(1, Ld(2, IntF({1})) + Ld(1, "k"))})));
  CHECK(Row<int64_t>(h.col(0), 0) == std::vector<int64_t>{1});
  REQUIRE(h.Parse(Example({Ld(1, Ld(2, IntF({2})))})));  // no key: key ""
  CHECK(Row<int64_t>(h.col(1), 1) == std::vector<int64_t>{2});
  REQUIRE(h.Parse(Example({Ld(1, Ld(1, "x") + Ld(1, "k") + Ld(2, IntF({3})))})));  // the last key counts
  CHECK(Row<int64_t>(h.col(0), 2) == std::vector<int64_t>{3});
  // Two values in one entry: protobuf would merge them, TensorFlow rejects the Example; so do we.
  ExpectError(h, Example({Ld(1, Ld(1, "k") + Ld(2, IntF({4})) + Ld(2, IntF({5})))}), "", {"two values"});
  // Even for a key that is not in the spec (the structure is malformed either way).
  ExpectError(h, Example({Ld(1, Ld(1, "other") + Ld(2, IntF({4})) + Ld(2, IntF({5})))}), "", {"two values"});
}

TEST_CASE("malformed and truncated wire data is an error, never a crash, and leaves the batch unchanged") {
  Harness h({Var("i", DType::kInt64), Fixed("f", DType::kFloat32, {3}), Var("b", DType::kBytes)});
  const std::string good = Example(
      {Entry("i", IntF({kI64Min, 1, -1})), Entry("f", FloatF({1, 2, 3})), Entry("b", BytesF({"hello", "", "world"}))});
  REQUIRE(h.Parse(good));
  REQUIRE(h.Parse(good));

  // Every strict prefix: a shorter Example is never valid here except the empty one (f is required).
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("prefix " << n);
    ExpectError(h, good.substr(0, n), n == 0 ? "f" : "", {});
  }
  // Every single-byte corruption: any outcome but a crash; a failure leaves the batch as it was.
  for (size_t n = 0; n < good.size(); ++n) {
    for (int x : {0x00, 0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[n] = static_cast<char>(bad[n] ^ x);
      if (h.batch.rows() == h.batch.capacity()) h.batch.Clear();
      Snapshot before(h.batch);
      if (!h.Parse(bad)) before.Check(h.batch);
    }
  }
  h.batch.Clear();

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"11-byte varint", Example({Entry("i", Feat(kInt64Kind, Ld(1, std::string(10, '\xff') + "\x01")))})},
      {"varint running past the packed run", Example({Entry("i", Feat(kInt64Kind, Ld(1, "\x01\xff")))})},
      {"packed float run of 5 bytes", Example({Entry("f", Feat(kFloatKind, Ld(1, std::string(5, '\0'))))})},
      {"packed run longer than the list", Example({Entry("f", Feat(kFloatKind, "\x0a\x0c" + std::string(4, '\0')))})},
      {"unpacked float cut short", Example({Entry("f", Feat(kFloatKind, Tag(1, 5) + "\0\0"))})},
      {"features length past the end", "\x0a\x7f" + Entry("i", IntF({1}))},
      {"entry length past Features", Ld(1, "\x0a\x7f" + Ld(1, "i"))},
      {"key length past the entry", Example({Ld(1, "\x0a\x09i")})},
      {"Feature length past the entry", Example({Ld(1, Ld(1, "i") + "\x12\x09")})},
      {"field number 0", Example({Entry("i", IntF({1}))}) + Tag(0, 0) + "\x01"},
      {"wire type 6", Example({Entry("i", IntF({1}))}) + "\x0e"},
      {"wire type 7", Example({Entry("i", IntF({1}))}) + "\x0f"},
      {"group at the top level", Example({Entry("i", IntF({1}))}) + Tag(5, 3) + Tag(5, 4)},
      {"truncated unknown top-level field", Example({Entry("i", IntF({1}))}) + Tag(9, 2) + Varint(6) + "abc"},
      {"truncated fixed64", Example({Entry("i", IntF({1}))}) + Tag(9, 1) + "1234"},
      {"truncated tag", Example({Entry("i", IntF({1}))}) + "\x80"},
      {"length varint > 2^63", Tag(1, 2) + std::string(9, '\xff') + "\x01"},
  };
  for (const auto& [what, bytes] : cases) {
    INFO(what);
    Snapshot before(h.batch);
    CHECK_FALSE(h.Parse(bytes));
    CHECK(Contains(h.error.message, "malformed"));
    before.Check(h.batch);
  }
  // The last feature fails after the first two were written: all of the row is rolled back.
  REQUIRE(h.Parse(good));
  ExpectError(h,
              Example({Entry("i", IntF({7, 7})), Entry("f", FloatF({4, 5, 6})),
                       Entry("b", Feat(kBytesKind, Ld(1, "abc") + Tag(1, 2) + Varint(100)))}),
              "b", {"malformed"});
  REQUIRE(h.Parse(good));
  CHECK(h.batch.rows() == 2);
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0, 3, 6});
  CHECK(Strings(h.col(2)) == std::vector<std::string>{"hello", "", "world", "hello", "", "world"});
}

TEST_CASE("a 10-byte varint keeps the low 64 bits") {
  Harness h({Var("i", DType::kInt64)});
  REQUIRE(h.Parse(Example({Entry("i", Feat(kInt64Kind, Ld(1, std::string(9, '\xff') + "\x7f")))})));
  CHECK(Values<int64_t>(h.col(0)) == std::vector<int64_t>{-1});
  REQUIRE(h.Parse(Example({Entry("i", Feat(kInt64Kind, Ld(1, std::string(9, '\x80') + "\x01")))})));
  CHECK(Row<int64_t>(h.col(0), 1) == std::vector<int64_t>{kI64Min});
  // Non-minimal encodings of small values are valid protobuf.
  REQUIRE(h.Parse(Example({Entry("i", Feat(kInt64Kind, Ld(1, std::string("\x81\x80\x80\x00", 4))))})));
  CHECK(Row<int64_t>(h.col(0), 2) == std::vector<int64_t>{1});
}

TEST_CASE("bad input 6: an Example with 20 million floats (80 MB) is parsed") {
  constexpr size_t kCount = 20'000'000;
  std::string payload(kCount * 4, '\0');
  for (size_t k = 0; k < kCount; ++k) {
    const float v = static_cast<float>(k);
    std::memcpy(payload.data() + k * 4, &v, 4);
  }
  const std::string record = Example({Entry("big", Feat(kFloatKind, Ld(1, payload))), Entry("n", IntF({42}))});
  CHECK(record.size() > 80'000'000);
  {
    Harness h({Var("big", DType::kFloat32), Fixed("n", DType::kInt64)}, 2);
    REQUIRE(h.Parse(record));
    auto v = h.col(0).as<float>();
    REQUIRE(v.size() == kCount);
    CHECK(v[0] == 0.0f);
    CHECK(v[12345] == 12345.0f);
    CHECK(v[kCount - 1] == static_cast<float>(kCount - 1));
    CHECK(h.col(0).row_splits == std::vector<int64_t>{0, static_cast<int64_t>(kCount)});
    CHECK(h.col(1).as<int64_t>()[0] == 42);
  }
  {
    Harness h({Fixed("big", DType::kFloat32, {5000, 4000})}, 1);
    REQUIRE(h.Parse(record));
    CHECK(std::memcmp(h.col(0).values.data(), payload.data(), payload.size()) == 0);
  }
  {
    Harness h({Fixed("big", DType::kFloat32, {kCount - 1})}, 1);
    ExpectError(h, record, "big", {"20000000", "19999999"});
  }
}

TEST_CASE("bad input 7: every wrong type pairing is an error naming key, expected and actual") {
  struct Kinds {
    DType dtype;
    std::string spec_list;  // what the spec expects
  };
  const std::vector<std::pair<std::string, std::string>> lists = {
      {"bytes_list", BytesF({"x"})}, {"float_list", FloatF({1})}, {"int64_list", IntF({1})}};
  const std::vector<Kinds> specs = {
      {DType::kBytes, "bytes_list"}, {DType::kFloat32, "float_list"}, {DType::kInt64, "int64_list"}};
  int pairings = 0;
  for (const auto& [actual, feature] : lists) {
    for (const auto& spec : specs) {
      for (bool fixed : {false, true}) {
        FeatureSpec s = fixed ? Fixed("key_" + actual, spec.dtype) : Var("key_" + actual, spec.dtype);
        if (fixed) {
          // A default must not mask the type error.
          s.has_default = true;
          s.default_int64 = {0};
          s.default_float = {0};
          s.default_bytes = {""};
        }
        Harness h({Var("ok", DType::kInt64), s});
        const std::string record = Example({Entry("ok", IntF({1, 2})), Entry(s.name, feature)});
        INFO(actual << " for spec " << spec.spec_list << (fixed ? " FixedLen" : " VarLen"));
        if (actual == spec.spec_list) {
          CHECK(h.Parse(record));
          continue;
        }
        ++pairings;
        ExpectError(h, record, s.name, {"data types don't match", actual, spec.spec_list});
        // The message says which is which.
        CHECK(Contains(h.error.message, "has " + actual));
        CHECK(Contains(h.error.message, "expects " + spec.spec_list));
        const std::string fits = actual == "float_list" ? "float32" : actual == "int64_list" ? "int64" : "bytes";
        CHECK(Contains(h.error.message, "; for this data use dtype: " + fits));
      }
    }
  }
  CHECK(pairings == 12);
  // decode: raw expects a bytes_list.
  Harness raw({Raw("r", DType::kUInt8, {4})});
  ExpectError(raw, Example({Entry("r", FloatF({1}))}), "r", {"float_list", "bytes_list", "decode: raw"});
}

TEST_CASE("bad input 8: shape [3] with 2 or 4 values is an error; an empty list with a default too") {
  Harness h({WithDefault(Fixed("v", DType::kInt64, {3}), std::vector<int64_t>{1, 2, 3})});
  ExpectError(h, Example({Entry("v", IntF({1, 2}))}), "v", {"number of int64 values", "2", "[3]"});
  ExpectError(h, Example({Entry("v", IntF({1, 2, 3, 4}))}), "v", {"number of int64 values", "4", "[3]"});
  // TensorFlow 2.21 errors here too (not the default): "Number of int64 values != expected.
  // Values size: 0 but output shape: [3]".
  ExpectError(h, Example({Entry("v", IntF({}))}), "v",
              {"number of int64 values", "0", "[3]",
               "(an empty list is not a missing feature: the default fills only records without it; for lists "
               "that may be empty, type: varlen)"});
  // A missing key and a Feature{} take the default.
  REQUIRE(h.Parse(Example({})));
  REQUIRE(h.Parse(Example({Entry("v", "")})));
  REQUIRE(h.Parse(Example({Entry("v", IntF({7, 8, 9}))})));
  auto v = h.col(0).as<int64_t>();
  CHECK(std::vector<int64_t>(v.begin(), v.begin() + 9) == std::vector<int64_t>{1, 2, 3, 1, 2, 3, 7, 8, 9});
  // Same for bytes and float.
  Harness b({Fixed("b", DType::kBytes, {3}), Fixed("f", DType::kFloat32, {3})});
  ExpectError(b, Example({Entry("b", BytesF({"a", "b"})), Entry("f", FloatF({1, 2, 3}))}), "b",
              {"number of bytes values", "2"});
  ExpectError(b, Example({Entry("b", BytesF({"a", "b", "c"})), Entry("f", FloatF({1, 2, 3, 4}))}), "f",
              {"number of float values", "4"});
}

TEST_CASE("bad input 9: VarLen int64 with lengths 3, 0, 1 and a record without the key") {
  Harness h({Var("v", DType::kInt64), Fixed("id", DType::kInt64)});
  REQUIRE(h.Parse(Example({Entry("v", IntF({10, -20, 30})), Entry("id", IntF({0}))})));
  REQUIRE(h.Parse(Example({Entry("v", IntF({})), Entry("id", IntF({1}))})));
  REQUIRE(h.Parse(Example({Entry("v", IntF({kI64Min})), Entry("id", IntF({2}))})));
  REQUIRE(h.Parse(Example({Entry("id", IntF({3}))})));
  CHECK(h.batch.rows() == 4);
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0, 3, 3, 4, 4});
  CHECK(Values<int64_t>(h.col(0)) == std::vector<int64_t>{10, -20, 30, kI64Min});
  std::vector<int64_t> lengths;
  for (size_t r = 0; r < 4; ++r) lengths.push_back(h.col(0).row_splits[r + 1] - h.col(0).row_splits[r]);
  CHECK(lengths == std::vector<int64_t>{3, 0, 1, 0});
  // Clear() empties the batch and keeps it usable.
  h.batch.Clear();
  CHECK(h.batch.rows() == 0);
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0});
  REQUIRE(h.Parse(Example({Entry("v", IntF({5})), Entry("id", IntF({9}))})));
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0, 1});
  CHECK(Values<int64_t>(h.col(0)) == std::vector<int64_t>{5});
}

TEST_CASE("bad input 10: a missing key without a default is an error naming the key") {
  Harness h({Var("present", DType::kInt64), Fixed("label", DType::kInt64), Fixed("weights", DType::kFloat32, {2, 2}),
             Fixed("name", DType::kBytes)});
  REQUIRE(h.Parse(
      Example({Entry("label", IntF({1})), Entry("weights", FloatF({1, 2, 3, 4})), Entry("name", BytesF({"n"}))})));
  ExpectError(
      h, Example({Entry("present", IntF({1})), Entry("weights", FloatF({1, 2, 3, 4})), Entry("name", BytesF({"n"}))}),
      "label", {"missing", "int64", "check its name against the record's features (ringfeedctl inspect --schema FILE)",
                "give the feature a default: value, or make it type: varlen"});
  ExpectError(h, Example({Entry("label", IntF({1})), Entry("name", BytesF({"n"}))}), "weights",
              {"missing", "float32", "[2, 2]"});
  ExpectError(h, Example({Entry("label", IntF({1})), Entry("weights", FloatF({1, 2, 3, 4})), Entry("name", "")}),
              "name", {"missing", "bytes"});
  CHECK(h.batch.rows() == 1);
}

TEST_CASE("errors after earlier features were written leave rows and columns exactly as before") {
  Harness h({Var("vi", DType::kInt64), Var("vb", DType::kBytes), Fixed("fb", DType::kBytes, {2}),
             Fixed("ff", DType::kFloat32, {2}), Var("vf", DType::kFloat32), Fixed("last", DType::kInt64)});
  auto record = [](const std::string& last) {
    return Example({Entry("vi", IntF({1, 2, 3})), Entry("vb", BytesF({"ab", "c"})), Entry("fb", BytesF({"x", "yy"})),
                    Entry("ff", FloatF({1, 2})), Entry("vf", FloatF({5})), last});
  };
  REQUIRE(h.Parse(record(Entry("last", IntF({1})))));
  REQUIRE(h.Parse(record(Entry("last", IntF({2})))));
  ExpectError(h, record(Entry("last", FloatF({1}))), "last", {"data types don't match"});
  ExpectError(h, record(Entry("last", IntF({1, 2}))), "last", {"number of int64 values"});
  ExpectError(h, record(Entry("other", IntF({1}))), "last", {"missing"});
  ExpectError(h, record(Entry("last", Feat(kInt64Kind, Ld(1, "\xff")))), "last", {"malformed"});
  CHECK(h.batch.rows() == 2);
  CHECK(h.col(0).row_splits == std::vector<int64_t>{0, 3, 6});
  CHECK(h.col(1).value_offsets == std::vector<int64_t>{0, 2, 3, 5, 6});
  CHECK(h.col(2).value_offsets == std::vector<int64_t>{0, 1, 3, 4, 6});
  REQUIRE(h.Parse(record(Entry("last", IntF({3})))));
  CHECK(h.col(4).row_splits == std::vector<int64_t>{0, 1, 2, 3});
  auto last = h.col(5).as<int64_t>();
  CHECK(std::vector<int64_t>(last.begin(), last.begin() + 3) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("a full batch throws; Lookup finds every spec name and nothing else") {
  Harness h({Var("a", DType::kInt64)}, 1);
  REQUIRE(h.Parse(Example({})));
  CHECK_THROWS_AS(h.Parse(Example({})), std::out_of_range);

  FeatureSpecs many;
  for (int k = 0; k < 300; ++k) {
    // Names sharing long prefixes and suffixes (the hash mixes only the ends).
    many.push_back(Var("feature_with_a_long_common_prefix_" + std::to_string(k) + "_and_suffix", DType::kInt64));
    many.push_back(Var(std::to_string(k), DType::kFloat32));
  }
  many.push_back(Var("", DType::kBytes));
  ExampleParser p(many);
  auto span = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  for (size_t k = 0; k < many.size(); ++k) CHECK(p.Lookup(span(many[k].name)) == static_cast<int>(k));
  for (const std::string miss : {"300", "feature_with_a_long_common_prefix_1_and_suffi", "x", "0 ", "00"}) {
    CHECK(p.Lookup(span(miss)) == -1);
  }
}

TEST_CASE("Check: what Parse accepts, with Parse's message; two parsers alternating on one thread; a record over 1 MiB") {
  auto span = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const ExampleParser ints({Fixed("label", DType::kInt64), Var("tag", DType::kBytes)});
  const ExampleParser floats({Fixed("label", DType::kFloat32)});
  const std::string int_label = Example({Entry("label", IntF({7})), Entry("tag", BytesF({"a", "b"}))});
  const std::string float_label = Example({Entry("label", FloatF({7}))});
  ParseError error;
  for (int round = 0; round < 2; ++round) {  // alternating parsers: each gets scratch of its own specs
    CHECK(ints.Check(span(int_label), &error));
    CHECK_FALSE(ints.Check(span(float_label), &error));
    CHECK(error.key == "label");
    CHECK_THAT(error.message, Catch::Contains("data types don't match"));
    CHECK(floats.Check(span(float_label), &error));
    CHECK_FALSE(floats.Check(span(int_label), &error));
    CHECK_FALSE(floats.Check(span("\x0a\x05"s), &error));  // truncated Features message
    CHECK(error.key.empty());
    CHECK_THAT(error.message, Catch::Contains("malformed Example"));
  }
  // A record over kCheckScratchKeepBytes, then small ones again.
  const std::string big(ExampleParser::kCheckScratchKeepBytes + 10, 'x');
  CHECK(ints.Check(span(Example({Entry("label", IntF({1})), Entry("tag", BytesF({big}))})), &error));
  CHECK(ints.Check(span(int_label), &error));
  CHECK_FALSE(ints.Check(span(float_label), &error));
}

TEST_CASE("Check keeps its scratch by the values' size, not the record's: one-byte varints parse to 8x") {
  auto span = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const ExampleParser parser({Var("ids", DType::kInt64)});
  ParseError error;
  // 160 Ki values of 1 byte each: a record of about 160 KiB (under the 1 MiB limit) whose row
  // holds 1.25 MiB of int64 values (over it).
  const std::string varints = Example({Entry("ids", IntF(std::vector<int64_t>(160 << 10, 5)))});
  REQUIRE(varints.size() < ExampleParser::kCheckScratchKeepBytes);
  REQUIRE(parser.Check(span(varints), &error));
  CHECK(ExampleParser::ThreadCheckScratchBytes() <= ExampleParser::kCheckScratchKeepBytes);
  // A row under the limit is kept for the next check.
  const std::string small = Example({Entry("ids", IntF(std::vector<int64_t>(1000, 5)))});
  REQUIRE(parser.Check(span(small), &error));
  CHECK(ExampleParser::ThreadCheckScratchBytes() >= 1000 * sizeof(int64_t));
  CHECK(ExampleParser::ThreadCheckScratchBytes() <= ExampleParser::kCheckScratchKeepBytes);
  // RowBytes: what the row takes, 8-byte aligned arrays: values, and row_splits {0, n}.
  CHECK(parser.RowBytes(span(varints)) == (160u << 10) * 8 + 2 * 8);
  CHECK(parser.RowBytes(span(small)) == 1000 * 8 + 2 * 8);
  const ExampleParser mixed({Fixed("label", DType::kFloat32), Var("tag", DType::kBytes)});
  // FixedLen float32 scalar: 4 bytes (8 aligned); bytes "ab", "c": 3 bytes (8), offsets {0, 2, 3},
  // row_splits {0, 2}.
  CHECK(mixed.RowBytes(span(Example({Entry("label", FloatF({1})), Entry("tag", BytesF({"ab", "c"}))}))) ==
        8 + 8 + 3 * 8 + 2 * 8);
}

TEST_CASE("inconsistent specs are rejected by the constructor") {
  auto rejects = [](FeatureSpecs specs) { CHECK_THROWS_AS(ExampleParser(std::move(specs)), std::invalid_argument); };
  rejects({Var("a", DType::kInt64), Var("a", DType::kFloat32)});
  rejects({Fixed("a", DType::kInt64, {-1})});
  rejects({Fixed("a", DType::kInt64, {-1, -1})});  // positive product, negative dims
  rejects({Fixed("a", DType::kUInt8, {4})});       // needs decode: raw
  rejects({Var("a", DType::kInt32)});
  rejects({Raw("a", DType::kBytes, {1})});
  {
    FeatureSpec s = Var("a", DType::kUInt8);
    s.decode_raw = true;  // raw is FixedLen only
    rejects({s});
  }
  rejects({WithDefault(Fixed("a", DType::kInt64, {3}), std::vector<int64_t>{1, 2})});
  rejects({WithDefault(Fixed("a", DType::kFloat32, {3}), std::vector<float>{})});
  rejects({WithDefault(Fixed("a", DType::kBytes, {3}), std::vector<std::string>{"a", "b"})});
  rejects({WithDefault(Fixed("a", DType::kBytes, {3}), std::vector<std::string>{})});
  {
    FeatureSpec s = Raw("a", DType::kUInt8, {4});
    s.has_default = true;
    s.default_int64 = {1};
    rejects({s});
  }
  // Fine: scalar broadcast and a full list; a zero-element shape with an empty default.
  CHECK_NOTHROW(ExampleParser({WithDefault(Fixed("a", DType::kBytes, {3}), std::vector<std::string>{"x"}),
                               WithDefault(Fixed("b", DType::kBytes, {2}), std::vector<std::string>{"x", "y"}),
                               WithDefault(Fixed("c", DType::kInt64, {0}), std::vector<int64_t>{}),
                               Raw("d", DType::kFloat64, {2})}));
  // Zero-element features: a default of nothing, a raw value of 0 bytes (no copies of 0 bytes
  // into a column that has no storage: UBSan flags memcpy with a null pointer).
  Harness h({WithDefault(Fixed("c", DType::kInt64, {0}), std::vector<int64_t>{}), Raw("r", DType::kUInt8, {2, 0}),
             Var("v", DType::kFloat32), Var("w", DType::kInt64)});
  REQUIRE(h.Parse(Example({Entry("r", BytesF({""})), Entry("v", FloatF({})), Entry("w", IntF({}))})));
  REQUIRE(
      h.Parse(Example({Entry("r", BytesF({""})), Entry("v", Feat(kFloatKind, FloatsPacked({}) + FloatsPacked({})))})));
  CHECK(h.batch.rows() == 2);
  CHECK(h.col(2).row_splits == std::vector<int64_t>{0, 0, 0});
  ExpectError(h, Example({Entry("r", BytesF({"x"}))}), "r", {"0 bytes", "1 value(s) of 1 bytes"});
}
