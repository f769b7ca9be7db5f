// Differential test: thousands of random tf.train.Examples serialised by libprotobuf (the schema in
// tests/proto/example.proto), parsed by libprotobuf and by ExampleParser, compared value by value
// (floats bit for bit).
//
// Encodings covered: packed numeric lists (tensorflow::Example), unpacked ones (the wire-identical
// tensorflow::ExampleUnpacked), Features whose bytes are the concatenation of several Feature
// messages (protobuf merge: repeated lists of one kind concatenate, a different kind switches the
// oneof), Feature{} without a list, keys not in the spec, and two serialised Examples concatenated
// (protobuf merge: the later map entry of a key wins). The reference for every record is
// libprotobuf parsing the very same bytes as tensorflow::Example.
//
// For every record four specs are checked: VarLen for every key (must succeed), FixedLen with the
// exact counts and defaults for absent keys (must succeed), one key with a wrong dtype (must fail
// naming it) and one key with a wrong count (must fail naming it). A second test parses records with
// consistent kinds into multi-row batches and checks row_splits. A third parses every record into
// external batches (caller memory) sized by ExampleParser::Measure, alone and in batches, and
// checks them against the owned batch and Measure against what Parse appended.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "example.pb.h"
#include "format/column_sizes.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/feature_spec.h"

using namespace ringfeed;

namespace {

constexpr uint64_t kSeed = 0x52494e4746454544ull;  // "RINGFEED"
constexpr int kRecords = 5000;

// Keys the specs ask for, and keys that only ever appear in records.
const std::vector<std::string> kSpecKeys = {
    "a", "b", "label", "image/encoded", "", "x_a_rather_long_feature_name_0123456789", "dup", "k\xc3\xbc"};
const std::vector<std::string> kOtherKeys = {"unknown", "A", "labels", "image/encoded2"};

using Rng = std::mt19937_64;

uint64_t Pick(Rng& rng, uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); }
bool Chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }

size_t RandomLength(Rng& rng) {
  const uint64_t r = Pick(rng, 100);
  if (r < 15) return 0;
  if (r < 75) return 1 + Pick(rng, 4);
  if (r < 97) return 5 + Pick(rng, 20);
  return 100 + Pick(rng, 300);
}

int64_t RandomInt64(Rng& rng) {
  static const int64_t special[] = {0,
                                    1,
                                    -1,
                                    127,
                                    128,
                                    -128,
                                    std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(),
                                    int64_t{1} << 35,
                                    -(int64_t{1} << 35)};
  switch (Pick(rng, 4)) {
    case 0:
      return special[Pick(rng, std::size(special))];
    case 1:
      return static_cast<int64_t>(rng());
    case 2:
      return static_cast<int64_t>(Pick(rng, 1000)) - 500;
    default:
      return static_cast<int64_t>(rng()) >> Pick(rng, 64);
  }
}

float RandomFloat(Rng& rng) {
  static const uint32_t special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7fc12345,
                                     0x7f800001, 0xffa00000, 0xffffffff, 0x00000001, 0x807fffff, 0x7f7fffff};
  uint32_t bits;
  switch (Pick(rng, 3)) {
    case 0:
      bits = special[Pick(rng, std::size(special))];
      break;
    case 1:
      bits = static_cast<uint32_t>(rng());
      break;
    default: {
      const float f = std::uniform_real_distribution<float>(-1000, 1000)(rng);
      std::memcpy(&bits, &f, 4);
    }
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string RandomBytes(Rng& rng) {
  size_t n = Pick(rng, 10) == 0 ? 0 : Pick(rng, 24);
  if (Pick(rng, 200) == 0) n = 1000 + Pick(rng, 3000);
  std::string s(n, '\0');
  for (char& c : s) c = Chance(rng, 0.2) ? '\0' : static_cast<char>(Pick(rng, 256));
  return s;
}

// kind: 0 = no list (Feature{}), 1 bytes, 2 float, 3 int64 (the Feature oneof field numbers).
template <typename FeatureT>
void FillFeature(Rng& rng, int kind, FeatureT* f) {
  const size_t n = RandomLength(rng);
  switch (kind) {
    case 1: {
      auto* l = f->mutable_bytes_list();
      for (size_t i = 0; i < n; ++i) l->add_value(RandomBytes(rng));
      break;
    }
    case 2: {
      auto* l = f->mutable_float_list();
      for (size_t i = 0; i < n; ++i) l->add_value(RandomFloat(rng));
      break;
    }
    case 3: {
      auto* l = f->mutable_int64_list();
      for (size_t i = 0; i < n; ++i) l->add_value(RandomInt64(rng));
      break;
    }
    default:
      break;
  }
}

// One serialised Feature message, packed or unpacked.
std::string RandomFeatureBytes(Rng& rng, int kind) {
  if (Chance(rng, 0.5)) {
    tensorflow::Feature f;
    FillFeature(rng, kind, &f);
    return f.SerializeAsString();
  }
  tensorflow::FeatureUnpacked f;
  FillFeature(rng, kind, &f);
  return f.SerializeAsString();
}

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Ld(uint32_t field, const std::string& payload) {
  return Varint(uint64_t{field} << 3 | 2) + Varint(payload.size()) + payload;
}

std::string RandomKey(Rng& rng) {
  return Chance(rng, 0.8) ? kSpecKeys[Pick(rng, kSpecKeys.size())] : kOtherKeys[Pick(rng, kOtherKeys.size())];
}

// `kind_of_key`: -1 = any kind per feature; else fixes the kind of every spec key (consistent mode).
int KindFor(Rng& rng, const std::string& key, const std::map<std::string, int>* kind_of_key) {
  if (Chance(rng, 0.08)) return 0;  // Feature{}
  if (kind_of_key != nullptr) {
    auto it = kind_of_key->find(key);
    if (it != kind_of_key->end()) return it->second;
  }
  return 1 + static_cast<int>(Pick(rng, 3));
}

// One serialised Example in one of three encodings.
std::string RandomExampleOnce(Rng& rng, const std::map<std::string, int>* kind_of_key) {
  const size_t keys = Pick(rng, 7);
  switch (Pick(rng, 3)) {
    case 0: {  // libprotobuf, packed
      tensorflow::Example ex;
      auto* map = ex.mutable_features()->mutable_feature();
      for (size_t i = 0; i < keys; ++i) {
        const std::string key = RandomKey(rng);
        tensorflow::Feature f;
        FillFeature(rng, KindFor(rng, key, kind_of_key), &f);
        (*map)[key] = f;
      }
      return ex.SerializeAsString();
    }
    case 1: {  // libprotobuf, unpacked
      tensorflow::ExampleUnpacked ex;
      auto* map = ex.mutable_features()->mutable_feature();
      for (size_t i = 0; i < keys; ++i) {
        const std::string key = RandomKey(rng);
        tensorflow::FeatureUnpacked f;
        FillFeature(rng, KindFor(rng, key, kind_of_key), &f);
        (*map)[key] = f;
      }
      return ex.SerializeAsString();
    }
    default: {  // map entries framed here, each Feature = 1..3 concatenated Feature messages
      std::string features;
      for (size_t i = 0; i < keys; ++i) {
        const std::string key = RandomKey(rng);
        std::string value;
        const size_t parts = 1 + Pick(rng, 3);
        const int first = KindFor(rng, key, kind_of_key);
        for (size_t p = 0; p < parts; ++p) {
          // Mostly the same kind (lists merge); sometimes another (the oneof switches).
          const int kind = (kind_of_key == nullptr && Chance(rng, 0.3)) ? 1 + static_cast<int>(Pick(rng, 3)) : first;
          value += RandomFeatureBytes(rng, kind);
        }
        features += Ld(1, Ld(1, key) + Ld(2, value));
      }
      std::string out = Ld(1, features);
      if (Chance(rng, 0.2)) out += Ld(1, "");                                // an empty Features
      if (Chance(rng, 0.2)) out = Varint(2 << 3 | 0) + Varint(rng()) + out;  // unknown varint field
      if (Chance(rng, 0.1)) out += Ld(7, RandomBytes(rng));                  // unknown LEN field
      return out;
    }
  }
}

std::string RandomExample(Rng& rng, const std::map<std::string, int>* kind_of_key = nullptr) {
  std::string out = RandomExampleOnce(rng, kind_of_key);
  // Two serialised Examples concatenated: protobuf merge; the later entry of a key wins.
  if (Chance(rng, 0.3)) out += RandomExampleOnce(rng, kind_of_key);
  return out;
}

// ---- the reference: libprotobuf's view of the record ----------------------------------------

struct RefFeature {
  int kind = 0;         // 0: missing or no list
  std::string numeric;  // little-endian values (int64 or float32)
  size_t count = 0;
  std::vector<std::string> strings;
};

std::map<std::string, RefFeature> Reference(const tensorflow::Example& ex) {
  std::map<std::string, RefFeature> out;
  for (const auto& [key, f] : ex.features().feature()) {
    RefFeature r;
    switch (f.kind_case()) {
      case tensorflow::Feature::kBytesList:
        r.kind = 1;
        for (const auto& s : f.bytes_list().value()) r.strings.push_back(s);
        r.count = r.strings.size();
        break;
      case tensorflow::Feature::kFloatList:
        r.kind = 2;
        r.count = static_cast<size_t>(f.float_list().value_size());
        r.numeric.assign(reinterpret_cast<const char*>(f.float_list().value().data()), r.count * 4);
        break;
      case tensorflow::Feature::kInt64List:
        r.kind = 3;
        r.count = static_cast<size_t>(f.int64_list().value_size());
        r.numeric.assign(reinterpret_cast<const char*>(f.int64_list().value().data()), r.count * 8);
        break;
      default:
        break;
    }
    out[key] = std::move(r);
  }
  return out;
}

DType DTypeOfKind(int kind) { return kind == 1 ? DType::kBytes : kind == 2 ? DType::kFloat32 : DType::kInt64; }

// Row `row` of column `c` (feature spec `s`) as a RefFeature-like pair.
std::vector<std::string> StringsOf(const Column& c, size_t begin, size_t end) {
  std::vector<std::string> out;
  for (size_t i = begin; i < end; ++i) {
    out.emplace_back(reinterpret_cast<const char*>(c.values.data()) + c.value_offsets[i],
                     static_cast<size_t>(c.value_offsets[i + 1] - c.value_offsets[i]));
  }
  return out;
}

void CheckFeatureRow(const FeatureSpec& s, const Column& c, size_t row, const RefFeature& want) {
  INFO("feature '" << s.name << "' row " << row << " kind " << want.kind << " count " << want.count);
  size_t begin, end;
  if (s.type == FeatureType::kVarLen) {
    begin = static_cast<size_t>(c.row_splits.at(row));
    end = static_cast<size_t>(c.row_splits.at(row + 1));
  } else {
    begin = row * static_cast<size_t>(s.NumElements());
    end = begin + static_cast<size_t>(s.NumElements());
  }
  if (s.dtype == DType::kBytes) {
    CHECK(StringsOf(c, begin, end) == want.strings);
  } else {
    const size_t elem = DTypeSize(s.dtype);
    CHECK(end - begin == want.count);
    REQUIRE(c.values.size() >= end * elem);
    CHECK(std::string(reinterpret_cast<const char*>(c.values.data()) + begin * elem, (end - begin) * elem) ==
          want.numeric);
  }
}

bool ParseWith(const ExampleParser& parser, ExampleBatch& batch, const std::string& bytes, ParseError* error) {
  return parser.Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, batch, error);
}

// A shape with `n` elements: [n], sometimes [a, b] or a scalar when n == 1.
std::vector<int64_t> ShapeFor(Rng& rng, size_t n) {
  if (n == 1 && Chance(rng, 0.5)) return {};
  for (int64_t a = 2; a * a <= static_cast<int64_t>(n); ++a) {
    if (n % static_cast<size_t>(a) == 0 && Chance(rng, 0.5)) return {a, static_cast<int64_t>(n) / a};
  }
  if (n == 0 && Chance(rng, 0.3)) return {3, 0};
  return {static_cast<int64_t>(n)};
}

}  // namespace

TEST_CASE("differential: random Examples, ExampleParser vs libprotobuf") {
  Rng rng(kSeed);
  size_t values_compared = 0, present = 0, merged_or_switched = 0, type_errors = 0, count_errors = 0;
  for (int iter = 0; iter < kRecords; ++iter) {
    const std::string bytes = RandomExample(rng);
    INFO("record " << iter << " (" << bytes.size() << " bytes)");
    tensorflow::Example ex;
    REQUIRE(ex.ParseFromString(bytes));
    const std::map<std::string, RefFeature> ref = Reference(ex);
    if (bytes.size() != ex.ByteSizeLong()) ++merged_or_switched;

    // 1. VarLen for every spec key, of the kind libprotobuf saw (random for absent keys).
    FeatureSpecs var;
    for (const std::string& key : kSpecKeys) {
      FeatureSpec s;
      s.name = key;
      s.type = FeatureType::kVarLen;
      auto it = ref.find(key);
      const int kind = (it != ref.end() && it->second.kind != 0) ? it->second.kind : 1 + static_cast<int>(Pick(rng, 3));
      s.dtype = DTypeOfKind(kind);
      var.push_back(s);
    }
    {
      ExampleParser parser(var);
      ExampleBatch batch(parser.specs(), 1);
      ParseError error;
      const bool ok = ParseWith(parser, batch, bytes, &error);
      INFO("error: " << error.message);
      REQUIRE(ok);
      for (size_t i = 0; i < var.size(); ++i) {
        auto it = ref.find(var[i].name);
        const RefFeature empty;
        const RefFeature& want = (it == ref.end()) ? empty : it->second;
        CheckFeatureRow(var[i], batch.column(i), 0, want);
        values_compared += want.count;
        present += want.kind != 0;
      }
    }

    // 2. FixedLen with the exact count; absent keys and Feature{} take a default.
    FeatureSpecs fixed;
    std::vector<RefFeature> expected;
    for (const std::string& key : kSpecKeys) {
      auto it = ref.find(key);
      FeatureSpec s;
      s.name = key;
      s.type = FeatureType::kFixedLen;
      RefFeature want;
      if (it != ref.end() && it->second.kind != 0) {
        want = it->second;
        s.dtype = DTypeOfKind(want.kind);
        s.shape = ShapeFor(rng, want.count);
      } else {
        want.kind = 1 + static_cast<int>(Pick(rng, 3));
        s.dtype = DTypeOfKind(want.kind);
        s.shape = ShapeFor(rng, Pick(rng, 4));
        const size_t n = static_cast<size_t>(s.NumElements());
        const bool broadcast = Chance(rng, 0.5);
        s.has_default = true;
        for (size_t k = 0; k < (broadcast ? 1 : n); ++k) {
          if (want.kind == 1) s.default_bytes.push_back(RandomBytes(rng));
          if (want.kind == 2) s.default_float.push_back(RandomFloat(rng));
          if (want.kind == 3) s.default_int64.push_back(RandomInt64(rng));
        }
        want.count = n;
        for (size_t k = 0; k < n; ++k) {
          const size_t src = broadcast ? 0 : k;
          if (want.kind == 1) want.strings.push_back(s.default_bytes[src]);
          if (want.kind == 2) want.numeric.append(reinterpret_cast<const char*>(&s.default_float[src]), 4);
          if (want.kind == 3) want.numeric.append(reinterpret_cast<const char*>(&s.default_int64[src]), 8);
        }
      }
      fixed.push_back(s);
      expected.push_back(want);
    }
    {
      ExampleParser parser(fixed);
      ExampleBatch batch(parser.specs(), 2);
      ParseError error;
      const bool ok = ParseWith(parser, batch, bytes, &error) && ParseWith(parser, batch, bytes, &error);
      INFO("error: " << error.message);
      REQUIRE(ok);  // two rows: the second at its offset
      for (size_t i = 0; i < fixed.size(); ++i) {
        CheckFeatureRow(fixed[i], batch.column(i), 0, expected[i]);
        CheckFeatureRow(fixed[i], batch.column(i), 1, expected[i]);
      }
    }

    // 3 and 4. One present key with a wrong dtype, then with a wrong count: an error naming it.
    std::vector<size_t> present_idx;
    for (size_t i = 0; i < kSpecKeys.size(); ++i) {
      auto it = ref.find(kSpecKeys[i]);
      if (it != ref.end() && it->second.kind != 0) present_idx.push_back(i);
    }
    if (!present_idx.empty()) {
      const size_t victim = present_idx[Pick(rng, present_idx.size())];
      const int kind = ref.at(kSpecKeys[victim]).kind;
      FeatureSpecs wrong_type = var;
      wrong_type[victim].dtype = DTypeOfKind(1 + (kind % 3));  // another kind
      if (Chance(rng, 0.5)) {                                  // FixedLen, with a default
        wrong_type[victim].type = FeatureType::kFixedLen;
        wrong_type[victim].has_default = true;
        wrong_type[victim].default_bytes = {"d"};
        wrong_type[victim].default_float = {1};
        wrong_type[victim].default_int64 = {1};
      }
      {
        ExampleParser parser(wrong_type);
        ExampleBatch batch(parser.specs(), 1);
        ParseError error;
        CHECK_FALSE(ParseWith(parser, batch, bytes, &error));
        CHECK(error.key == kSpecKeys[victim]);
        CHECK(error.message.find("data types don't match") != std::string::npos);
        CHECK(batch.rows() == 0);
        ++type_errors;
      }
      FeatureSpecs wrong_count = fixed;
      wrong_count[victim].shape = {static_cast<int64_t>(ref.at(kSpecKeys[victim]).count) + 1 +
                                   static_cast<int64_t>(Pick(rng, 2))};
      if (ref.at(kSpecKeys[victim]).count > 0 && Chance(rng, 0.5)) {
        wrong_count[victim].shape = {static_cast<int64_t>(ref.at(kSpecKeys[victim]).count) - 1};
      }
      {
        ExampleParser parser(wrong_count);
        ExampleBatch batch(parser.specs(), 1);
        ParseError error;
        CHECK_FALSE(ParseWith(parser, batch, bytes, &error));
        CHECK(error.key == kSpecKeys[victim]);
        CHECK(error.message.find("values != expected") != std::string::npos);
        CHECK(batch.rows() == 0);
        ++count_errors;
      }
    }
  }
  // The generator really produced what it is meant to.
  CHECK(values_compared > 100000);
  CHECK(present > 5000);
  CHECK(merged_or_switched > 500);
  CHECK(type_errors > 2000);
  CHECK(count_errors > 2000);
  WARN("differential: " << kRecords << " records, " << present << " present features, " << values_compared
                        << " values compared; " << merged_or_switched << " records not in canonical encoding; "
                        << type_errors << " type and " << count_errors << " count errors checked");
}

TEST_CASE("differential: consistent kinds parsed into multi-row batches") {
  Rng rng(kSeed + 1);
  std::map<std::string, int> kind_of_key;
  FeatureSpecs specs;
  for (size_t i = 0; i < kSpecKeys.size(); ++i) {
    const int kind = 1 + static_cast<int>(i % 3);
    kind_of_key[kSpecKeys[i]] = kind;
    FeatureSpec s;
    s.name = kSpecKeys[i];
    s.type = FeatureType::kVarLen;
    s.dtype = DTypeOfKind(kind);
    specs.push_back(s);
  }
  ExampleParser parser(specs);
  constexpr size_t kBatch = 37;
  ExampleBatch batch(parser.specs(), kBatch);
  std::vector<std::map<std::string, RefFeature>> rows;
  size_t checked_rows = 0, truncated = 0;
  auto check_batch = [&] {
    REQUIRE(batch.rows() == rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      for (size_t i = 0; i < specs.size(); ++i) {
        auto it = rows[r].find(specs[i].name);
        const RefFeature empty;
        CheckFeatureRow(specs[i], batch.column(i), r, it == rows[r].end() ? empty : it->second);
      }
      CHECK(batch.column(0).row_splits.size() == rows.size() + 1);
    }
    checked_rows += rows.size();
    batch.Clear();
    rows.clear();
  };
  for (int iter = 0; iter < kRecords; ++iter) {
    std::string bytes = RandomExample(rng, &kind_of_key);
    tensorflow::Example ex;
    REQUIRE(ex.ParseFromString(bytes));
    ParseError error;
    const bool ok = ParseWith(parser, batch, bytes, &error);
    INFO("record " << iter << ": " << error.message);
    REQUIRE(ok);
    rows.push_back(Reference(ex));
    // Now and then a truncated record that libprotobuf rejects: an error, and the batch stays as
    // it was.
    if (bytes.size() > 2 && Chance(rng, 0.1) && batch.rows() < kBatch) {
      const std::string cut = bytes.substr(0, 1 + Pick(rng, bytes.size() - 1));
      tensorflow::Example ignored;
      if (!ignored.ParseFromString(cut)) {
        const size_t before = batch.rows();
        CHECK_FALSE(ParseWith(parser, batch, cut, &error));
        REQUIRE(batch.rows() == before);
        ++truncated;
      }
    }
    if (batch.rows() == kBatch) check_batch();
  }
  check_batch();
  CHECK(checked_rows == kRecords);
  CHECK(truncated > 200);
}

namespace {

std::span<const uint8_t> SpanOf(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// Caller memory for an external batch sized by `sizes` (8-byte aligned words).
struct External {
  std::vector<uint64_t> words;
  std::vector<ColumnRegion> regions;
  External(const FeatureSpecs& specs, size_t rows, const ColumnSizes& sizes) {
    const std::vector<ColumnCapacity> caps = ColumnCapacities(specs, rows, sizes);
    words.resize(ColumnRegionsBytes(caps, 8) / 8 + 1);
    CarveColumnRegions({reinterpret_cast<uint8_t*>(words.data()), words.size() * 8}, caps, 8, &regions);
  }
};

void CheckSameBatches(const ExampleBatch& a, const ExampleBatch& b) {
  REQUIRE(a.rows() == b.rows());
  for (size_t i = 0; i < a.specs().size(); ++i) {
    const FeatureSpec& s = a.specs()[i];
    const Column& x = a.column(i);
    const Column& y = b.column(i);
    INFO("feature '" << s.name << "'");
    size_t n = x.values.size();
    if (s.type == FeatureType::kFixedLen && s.dtype != DType::kBytes) {
      n = a.rows() * static_cast<size_t>(s.NumElements()) * DTypeSize(s.dtype);
    } else {
      REQUIRE(y.values.size() == n);
    }
    CHECK((n == 0 || std::memcmp(x.values.data(), y.values.data(), n) == 0));
    CHECK(y.value_offsets == std::vector<int64_t>(x.value_offsets.begin(), x.value_offsets.end()));
    CHECK(y.row_splits == std::vector<int64_t>(x.row_splits.begin(), x.row_splits.end()));
  }
}

}  // namespace

TEST_CASE("differential: external batches sized by Measure equal owned ones; Measure bounds Parse") {
  Rng rng(kSeed + 2);
  // Specs that fit some records and not others: every kind and shape against every record.
  std::vector<FeatureSpecs> all(4);
  for (size_t i = 0; i < kSpecKeys.size(); ++i) {
    FeatureSpec s;
    s.name = kSpecKeys[i];
    s.type = FeatureType::kVarLen;
    s.dtype = DTypeOfKind(1 + static_cast<int>(i % 3));
    all[0].push_back(s);
    s.dtype = DType::kBytes;
    all[1].push_back(s);
    s.type = FeatureType::kFixedLen;
    s.shape = {static_cast<int64_t>(i % 3)};
    s.has_default = true;
    s.default_bytes = i % 2 ? std::vector<std::string>{"x"} : std::vector<std::string>(i % 3, "default");
    all[2].push_back(s);
    s.dtype = DTypeOfKind(1 + static_cast<int>((i + 1) % 3));
    s.type = i % 2 ? FeatureType::kFixedLen : FeatureType::kVarLen;
    s.shape = i % 2 ? std::vector<int64_t>{1} : std::vector<int64_t>{};
    s.has_default = i % 2 == 1;
    s.default_int64 = {-7};
    s.default_float = {0.5f};
    s.default_bytes = {"dflt"};
    all[3].push_back(s);
  }
  std::vector<std::string> records;
  for (int iter = 0; iter < kRecords; ++iter) {
    std::string bytes = RandomExample(rng);
    // Now and then a broken one: cut, or a flipped bit.
    if (bytes.size() > 2 && Chance(rng, 0.15)) bytes.resize(1 + Pick(rng, bytes.size() - 1));
    if (!bytes.empty() && Chance(rng, 0.15)) bytes[Pick(rng, bytes.size())] ^= static_cast<char>(1u << Pick(rng, 8));
    records.push_back(std::move(bytes));
  }
  size_t ok = 0, failed = 0, measured_features = 0;
  for (const FeatureSpecs& specs : all) {
    const ExampleParser parser(specs);
    constexpr size_t kBatch = 37;
    for (size_t first = 0; first < records.size(); first += kBatch) {
      const size_t n = std::min(kBatch, records.size() - first);
      ColumnSizes sum;
      for (size_t r = first; r < first + n; ++r) parser.Measure(SpanOf(records[r]), &sum);
      External memory(specs, n, sum);
      ExampleBatch owned(specs, n), external(specs, n, memory.regions);
      for (size_t r = first; r < first + n; ++r) {
        INFO("record " << r);
        ColumnSizes one;
        parser.Measure(SpanOf(records[r]), &one);
        ExampleBatch alone(specs, 1);
        External one_memory(specs, 1, one);
        ExampleBatch alone_external(specs, 1, one_memory.regions);
        ParseError e1, e2, e3, e4;
        const bool alone_ok = parser.Parse(SpanOf(records[r]), alone, &e1);
        REQUIRE(parser.Parse(SpanOf(records[r]), alone_external, &e2) == alone_ok);
        CHECK(e2.message == e1.message);
        CheckSameBatches(alone, alone_external);
        REQUIRE(parser.Parse(SpanOf(records[r]), owned, &e3) == alone_ok);
        REQUIRE(parser.Parse(SpanOf(records[r]), external, &e4) == alone_ok);
        CHECK(e4.message == e3.message);
        (alone_ok ? ok : failed) += 1;
        if (!alone_ok) continue;
        for (size_t i = 0; i < specs.size(); ++i) {
          if (specs[i].dtype != DType::kBytes && specs[i].type == FeatureType::kFixedLen) continue;
          CHECK(alone.column(i).values.size() <= one.features[i].value_bytes);
          if (specs[i].dtype == DType::kBytes) CHECK(alone.column(i).value_offsets.size() - 1 <= one.features[i].strings);
          ++measured_features;
        }
      }
      CheckSameBatches(owned, external);
    }
  }
  CHECK(ok > 3000);
  CHECK(failed > 3000);
  WARN("external batches: " << ok << " records parsed, " << failed << " failed, the same in both; "
                            << measured_features << " measured features checked");
}
