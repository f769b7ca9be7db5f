// Writes the seed corpus of reader_parser_fuzz (tests/fuzz/corpus/): small TFRecord files,
// plain, GZIP and ZLIB, of hand-encoded tf.train.Examples for the fuzz target's four feature
// specs, and a few broken ones (bad-inputs.md cases 1-5, 8-10). Each seed starts with the fuzz
// target's 3 mode bytes (see reader_parser_fuzz.cc).
//
//   cmake --build build-fuzz --target make_fuzz_corpus
//   build-fuzz/tests/fuzz/make_fuzz_corpus tests/fuzz/corpus
//
// Output is deterministic (gzip mtime 0), so regenerating gives byte-identical seeds. Seeds
// added later by hand (reproducers of fixed bugs, named repro-*) are not touched.
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/crc32c.h"
#include "format/tfrecord_writer.h"

namespace {

using ringfeed::Compression;

// ---- fuzz target's mode bytes -------------------------------------------------------------
enum Comp : uint8_t { kNone = 0, kGzip = 1, kZlib = 2, kAuto = 3 };
enum Backend : uint8_t { kIsal = 0, kZlibInflate = 1 };
enum Spec : uint8_t { kTaxi = 0, kImage = 1, kVarLen = 2, kEdge = 3 };
enum MaxRecord : uint8_t { kMax4MiB = 0, kMax16 = 1, kMax200 = 2, kMax1000 = 3 };

struct Mode {
  Comp comp = kNone;
  Backend backend = kIsal;
  Spec spec = kTaxi;
  bool no_verify = false;
  uint8_t capacity_index = 1;  // 1, 2, 3, 8
  uint8_t buffer = 0;          // buffer_bytes = 64 + 16 * buffer
  MaxRecord max = kMax4MiB;
  std::string Bytes() const {
    std::string s(3, '\0');
    s[0] = static_cast<char>(comp | backend << 2 | spec << 3 | (no_verify ? 1 : 0) << 5 | capacity_index << 6);
    s[1] = static_cast<char>(buffer);
    s[2] = static_cast<char>(max);
    return s;
  }
};

// ---- protobuf wire format of tf.train.Example ----------------------------------------------
void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void Tag(std::string& out, uint32_t field, uint32_t wire) { Varint(out, uint64_t{field} << 3 | wire); }
std::string Len(uint32_t field, const std::string& payload) {
  std::string out;
  Tag(out, field, 2);
  Varint(out, payload.size());
  return out + payload;
}

// List messages (field 1 = value), packed unless asked otherwise.
std::string Int64s(const std::vector<int64_t>& v, bool packed = true) {
  std::string out;
  if (packed) {
    std::string p;
    for (int64_t x : v) Varint(p, static_cast<uint64_t>(x));
    return v.empty() ? out : Len(1, p);
  }
  for (int64_t x : v) {
    Tag(out, 1, 0);
    Varint(out, static_cast<uint64_t>(x));
  }
  return out;
}
std::string Floats(const std::vector<float>& v, bool packed = true) {
  std::string out;
  if (packed) {
    std::string p(v.size() * 4, '\0');
    if (!v.empty()) std::memcpy(p.data(), v.data(), p.size());
    return v.empty() ? out : Len(1, p);
  }
  for (float x : v) {
    Tag(out, 1, 5);
    out.append(reinterpret_cast<const char*>(&x), 4);
  }
  return out;
}
std::string Bytes(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += Len(1, s);
  return out;
}
// Feature { bytes_list = 1 | float_list = 2 | int64_list = 3 }
std::string BytesF(const std::vector<std::string>& v) { return Len(1, Bytes(v)); }
std::string FloatF(const std::vector<float>& v, bool packed = true) { return Len(2, Floats(v, packed)); }
std::string Int64F(const std::vector<int64_t>& v, bool packed = true) { return Len(3, Int64s(v, packed)); }

using Entries = std::vector<std::pair<std::string, std::string>>;  // key, Feature message
// Example { Features features = 1 { map<string, Feature> feature = 1 } }
std::string ExampleOf(const Entries& entries) {
  std::string features;
  for (const auto& [key, feature] : entries) features += Len(1, Len(1, key) + Len(2, feature));
  return Len(1, features);
}

// ---- records for each spec ------------------------------------------------------------------
std::vector<std::string> TaxiRecords() {
  std::vector<std::string> r;
  r.push_back(ExampleOf({
      {"company", BytesF({"Flash Cab"})},
      {"dropoff_census_tract", Int64F({17031081500})},
      {"dropoff_latitude", FloatF({41.89f})},
      {"fare", FloatF({12.5f})},
      {"payment_type", BytesF({"Cash"})},
      {"pickup_community_area", Int64F({8})},
      {"tips", FloatF({2.0f})},
      {"trip_start_hour", Int64F({14})},
      {"pickup_lat_lon", FloatF({41.9f, -87.63f})},
      {"trip_seconds_hist", Int64F({60, 120, 180})},
      {"tags", BytesF({"x", "yz"})},
      {"trip_start_timestamp", Int64F({1420070400})},  // not in the spec: skipped
  }));
  // Only the required features; an empty company list (row of length 0).
  r.push_back(ExampleOf({{"fare", FloatF({7.25f})}, {"trip_start_hour", Int64F({0})}, {"company", BytesF({})}}));
  // Unpacked lists, a negative int64 (10-byte varint), a duplicate key (the last wins).
  r.push_back(ExampleOf({
      {"fare", FloatF({1.0f})},
      {"trip_start_hour", Int64F({-3}, false)},
      {"dropoff_census_tract", Int64F({1, -2, 3}, false)},
      {"fare", FloatF({99.5f}, false)},
      {"dropoff_latitude", FloatF({1.5f, 2.5f}, false)},
  }));
  // A Feature with no list set (missing: the default) and merged int64 lists (1 + 2 values).
  r.push_back(ExampleOf({
      {"payment_type", ""},
      {"fare", FloatF({3.0f})},
      {"trip_start_hour", Int64F({23})},
      {"trip_seconds_hist", Len(3, Int64s({5})) + Len(3, Int64s({6, 7}))},
  }));
  return r;
}

// Records that must fail to parse under the taxi spec (bad-inputs.md 7, 8, 10) and a good one.
std::vector<std::string> TaxiBadRecords() {
  std::vector<std::string> r;
  r.push_back(ExampleOf({{"fare", Int64F({3})}, {"trip_start_hour", Int64F({1})}}));        // type mismatch
  r.push_back(ExampleOf({{"fare", FloatF({1, 2})}, {"trip_start_hour", Int64F({1})}}));     // count 2 != 1
  r.push_back(ExampleOf({{"fare", FloatF({1})}}));                                           // missing key
  r.push_back(ExampleOf({{"fare", FloatF({})}, {"trip_start_hour", Int64F({1})}}));         // empty FixedLen
  r.push_back(ExampleOf({{"fare", FloatF({5})}, {"trip_start_hour", Int64F({2})}}));        // good
  std::string malformed = ExampleOf({{"fare", FloatF({5})}, {"trip_start_hour", Int64F({2})}});
  r.push_back(malformed.substr(0, malformed.size() - 3));                                    // cut short
  r.push_back(ExampleOf({{"fare", FloatF({5})}, {"trip_start_hour", Int64F({2})}, {"tags", BytesF({"one"})}}));
  return r;
}

std::vector<std::string> ImageRecords() {
  std::vector<std::string> r;
  for (int i = 0; i < 3; ++i) {
    std::string pixels(784, '\0');
    for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<char>((k * 7 + static_cast<size_t>(i) * 31) & 0xff);
    Entries e = {{"image", BytesF({pixels})}};
    if (i != 1) e.push_back({"label", Int64F({i})});  // record 1: label missing -> default -1
    r.push_back(ExampleOf(e));
  }
  r.push_back(ExampleOf({{"image", BytesF({std::string(783, 'x')})}, {"label", Int64F({9})}}));  // 783 != 784
  return r;
}

std::vector<std::string> VarLenRecords() {
  std::vector<std::string> r;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  r.push_back(ExampleOf({{"ids", Int64F({1, 2, 3})}, {"weights", FloatF({0.5f, -inf, nan})}, {"tokens", BytesF({"a", "", "ccc"})}}));
  r.push_back(ExampleOf({{"ids", Int64F({})}, {"weights", FloatF({})}, {"tokens", BytesF({})}}));
  r.push_back(ExampleOf({{"ids", Int64F({std::numeric_limits<int64_t>::min()})}, {"tokens", BytesF({"z"})}}));
  r.push_back(ExampleOf({{"unrelated", Int64F({7})}}));  // none of the keys: rows of length 0
  // Packed and unpacked values mixed in one list.
  r.push_back(ExampleOf({{"ids", Len(3, Int64s({4, 5}) + Int64s({6}, false))},
                         {"weights", Len(2, Floats({1}) + Floats({2}, false))}}));
  return r;
}

std::vector<std::string> EdgeRecords() {
  std::vector<std::string> r;
  std::string raw16(8, '\0'), raw64(16, '\0');
  for (size_t i = 0; i < raw16.size(); ++i) raw16[i] = static_cast<char>(i * 17);
  double d[2] = {1.5, -0.0};
  std::memcpy(raw64.data(), d, 16);
  Entries good = {{"vec", Int64F({1, 2, 3})},   {"mat", FloatF({1, 2, 3, 4})}, {"empty", FloatF({})},
                  {"raw16", BytesF({raw16})},   {"raw_f64", BytesF({raw64})},  {"pair", BytesF({"p", "qq"})},
                  {"", Int64F({5, 6})}};
  r.push_back(ExampleOf(good));
  good.push_back({"k", FloatF({2.5f})});
  r.push_back(ExampleOf(good));
  Entries bad = good;
  bad[0] = {"vec", Int64F({1, 2, 3, 4})};  // 4 values for shape [3]
  r.push_back(ExampleOf(bad));
  bad = good;
  bad[3] = {"raw16", BytesF({raw16, raw16})};  // two values for decode: raw
  r.push_back(ExampleOf(bad));
  return r;
}

// ---- files ----------------------------------------------------------------------------------
std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Framed(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) out += ringfeed::FrameRecord(r);
  return out;
}

// The file TFRecordWriter writes for these records.
std::string Written(const std::vector<std::string>& records, Compression c, int level = 6,
                    int strategy = Z_DEFAULT_STRATEGY) {
  char tmpl[] = "/tmp/ringfeed-corpus-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::close(fd);
  {
    ringfeed::WriterOptions o;
    o.compression = c;
    o.level = level;
    o.strategy = strategy;
    ringfeed::TFRecordWriter w(tmpl, o);
    for (const std::string& r : records) w.Write(r);
    w.Close();
  }
  std::string data = ReadFile(tmpl);
  ::unlink(tmpl);
  return data;
}

std::string RawDeflate(const std::string& in) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&z, in.size()) + 16, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void PutLE32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// One gzip member with the optional header fields FEXTRA, FNAME, FCOMMENT and FHCRC.
std::string GzipWithHeaderFields(const std::string& plain) {
  std::string h = {'\x1f', '\x8b', '\x08', '\x1e', 0, 0, 0, 0, 0, '\x03'};  // FHCRC|FEXTRA|FNAME|FCOMMENT
  std::string extra = "RF\x04\x00" "abcd";  // one subfield: id "RF", length 4
  h.push_back(static_cast<char>(extra.size()));
  h.push_back(0);
  h += extra;
  h += std::string("train-00000-of-00001.tfrecord") + '\0';
  h += std::string("written by make_corpus") + '\0';
  const uint32_t hcrc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(h.data()), static_cast<uInt>(h.size())));
  h.push_back(static_cast<char>(hcrc & 0xff));
  h.push_back(static_cast<char>((hcrc >> 8) & 0xff));
  std::string out = h + RawDeflate(plain);
  PutLE32(out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(plain.data()), static_cast<uInt>(plain.size()))));
  PutLE32(out, static_cast<uint32_t>(plain.size()));
  return out;
}

// A record header claiming `length` bytes, with a valid length CRC, and no payload.
std::string HugeHeader(uint64_t length) {
  std::string h(12, '\0');
  std::memcpy(h.data(), &length, 8);
  const uint32_t crc = ringfeed::MaskedCrc32c(h.data(), 8);
  std::memcpy(h.data() + 8, &crc, 4);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR   (writes the seed corpus of reader_parser_fuzz)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  size_t total = 0, count = 0;
  auto seed = [&](const std::string& name, const Mode& m, const std::string& file) {
    const std::string data = m.Bytes() + file;
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) throw std::runtime_error("cannot write " + dir + "/" + name);
    total += data.size();
    ++count;
  };

  const auto taxi = TaxiRecords(), image = ImageRecords(), varlen = VarLenRecords(), edge = EdgeRecords();
  const auto taxi_bad = TaxiBadRecords();

  // Valid files, every compression, both inflate backends, assorted buffers and batch sizes.
  seed("plain-taxi", {kNone, kIsal, kTaxi, false, 2, 0}, Written(taxi, Compression::kNone));
  seed("gzip-taxi-isal", {kGzip, kIsal, kTaxi, false, 1, 255}, Written(taxi, Compression::kGzip));
  seed("zlib-taxi-zlib", {kZlib, kZlibInflate, kTaxi, false, 3, 4}, Written(taxi, Compression::kZlib));
  seed("auto-gzip-taxi-zlib", {kAuto, kZlibInflate, kTaxi, false, 3, 0}, Written(taxi, Compression::kGzip));
  seed("plain-image", {kNone, kIsal, kImage, false, 1, 10}, Written(image, Compression::kNone));
  seed("gzip-image-isal", {kGzip, kIsal, kImage, false, 1, 0}, Written(image, Compression::kGzip));
  seed("zlib-image-isal", {kZlib, kIsal, kImage, false, 0, 2}, Written(image, Compression::kZlib));
  seed("plain-varlen", {kNone, kIsal, kVarLen, false, 3, 1}, Written(varlen, Compression::kNone));
  seed("gzip-varlen-zlib", {kGzip, kZlibInflate, kVarLen, false, 2, 0}, Written(varlen, Compression::kGzip));
  seed("auto-zlib-varlen-isal", {kAuto, kIsal, kVarLen, false, 2, 0}, Written(varlen, Compression::kZlib));
  seed("plain-edge", {kNone, kIsal, kEdge, false, 0, 0}, Written(edge, Compression::kNone));
  seed("gzip-edge-isal", {kGzip, kIsal, kEdge, false, 3, 3}, Written(edge, Compression::kGzip));
  seed("auto-plain-edge", {kAuto, kIsal, kEdge, false, 1, 0}, Written(edge, Compression::kNone));
  // Deflate variants: stored blocks, fixed Huffman, Huffman only.
  seed("gzip-stored-varlen-isal", {kGzip, kIsal, kVarLen, false, 1, 0}, Written(varlen, Compression::kGzip, 0));
  seed("gzip-fixed-taxi-isal", {kGzip, kIsal, kTaxi, false, 1, 0}, Written(taxi, Compression::kGzip, 9, Z_FIXED));
  seed("zlib-huffman-edge-zlib", {kZlib, kZlibInflate, kEdge, false, 1, 0},
       Written(edge, Compression::kZlib, 6, Z_HUFFMAN_ONLY));

  // Parse errors inside good frames; CRCs not checked (mutated payloads reach the parser).
  seed("plain-taxi-parse-errors", {kNone, kIsal, kTaxi, false, 1, 0}, Written(taxi_bad, Compression::kNone));
  seed("plain-varlen-noverify", {kNone, kIsal, kVarLen, true, 1, 0}, Written(varlen, Compression::kNone));
  seed("plain-edge-noverify", {kNone, kIsal, kEdge, true, 0, 0}, Written(edge, Compression::kNone));

  // Reader errors (bad-inputs.md 1-5).
  std::vector<std::string> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(ExampleOf({{"ids", Int64F({i, i * i})}}));
  const std::string ten_plain = Written(ten, Compression::kNone);
  std::string flipped = ten_plain;
  const size_t rec5 = 5 * ten_plain.size() / 10;  // all ten frames have the same size
  flipped[rec5 + 12 + 3] ^= 0x01;                  // payload byte: data CRC mismatch
  seed("plain-data-crc-flipped", {kNone, kIsal, kVarLen, false, 2, 0}, flipped);
  std::string bad_len = ten_plain;
  bad_len[rec5 + 1] ^= 0x40;  // length byte: length CRC mismatch
  seed("plain-length-crc-flipped", {kNone, kIsal, kVarLen, false, 2, 0}, bad_len);
  seed("plain-cut-in-header", {kNone, kIsal, kVarLen, false, 1, 0}, ten_plain.substr(0, rec5 + 7));
  seed("plain-cut-in-payload", {kNone, kIsal, kVarLen, false, 1, 0}, ten_plain.substr(0, rec5 + 12 + 3));
  seed("plain-cut-in-footer", {kNone, kIsal, kVarLen, false, 1, 0}, ten_plain.substr(0, rec5 + ten_plain.size() / 10 - 2));
  const std::string ten_gzip = Written(ten, Compression::kGzip);
  seed("gzip-cut-isal", {kGzip, kIsal, kVarLen, false, 1, 0}, ten_gzip.substr(0, ten_gzip.size() / 2));
  seed("gzip-cut-trailer-zlib", {kGzip, kZlibInflate, kVarLen, false, 1, 0}, ten_gzip.substr(0, ten_gzip.size() - 3));
  seed("plain-too-large-200", {kNone, kIsal, kTaxi, false, 1, 0, kMax200}, Written(taxi, Compression::kNone));
  seed("plain-length-2p64", {kNone, kIsal, kVarLen, false, 1, 0},
       Framed({varlen[0]}) + HugeHeader(~uint64_t{0}) + Framed({varlen[1]}));
  // 2^64 - 4: before the saturating fix the reader skipped 0 bytes and returned the next frame.
  seed("plain-length-2p64-minus-4", {kNone, kIsal, kVarLen, false, 1, 0},
       Framed({varlen[0]}) + HugeHeader(~uint64_t{0} - 3) + Framed({varlen[1]}));
  seed("plain-length-2p31", {kNone, kIsal, kVarLen, false, 1, 0}, Framed({varlen[0]}) + HugeHeader(uint64_t{1} << 31));
  seed("plain-empty", {kNone, kIsal, kTaxi, false, 1, 0}, "");
  seed("gzip-empty-isal", {kGzip, kIsal, kTaxi, false, 1, 0}, "");
  seed("auto-text-file", {kAuto, kIsal, kTaxi, false, 1, 0}, "this is a text file, not a .tfrecord\n");
  seed("gzip-read-as-plain", {kNone, kIsal, kVarLen, false, 1, 0}, Written(varlen, Compression::kGzip));
  seed("plain-read-as-gzip-isal", {kGzip, kIsal, kVarLen, false, 1, 0}, Written(varlen, Compression::kNone));
  seed("zlib-read-as-gzip-zlib", {kGzip, kZlibInflate, kVarLen, false, 1, 0}, Written(varlen, Compression::kZlib));

  // GZIP member layouts: optional header fields (header longer than the 64-byte buffer), two
  // members, trailing zeros, trailing garbage; data after a ZLIB stream.
  const std::string varlen_plain = Framed(varlen);
  seed("gzip-header-fields-isal", {kGzip, kIsal, kVarLen, false, 1, 0}, GzipWithHeaderFields(varlen_plain));
  seed("gzip-header-fields-zlib", {kGzip, kZlibInflate, kVarLen, false, 1, 0}, GzipWithHeaderFields(varlen_plain));
  const std::string two = Written(varlen, Compression::kGzip) + GzipWithHeaderFields(Framed(ten));
  seed("gzip-two-members-isal", {kGzip, kIsal, kVarLen, false, 2, 0}, two);
  seed("gzip-two-members-zeros-zlib", {kGzip, kZlibInflate, kVarLen, false, 2, 0}, two + std::string(5, '\0'));
  seed("gzip-trailing-garbage-isal", {kGzip, kIsal, kVarLen, false, 2, 0}, Written(varlen, Compression::kGzip) + "xy");
  seed("zlib-trailing-data-isal", {kZlib, kIsal, kVarLen, false, 2, 0}, Written(varlen, Compression::kZlib) + "\x01");

  std::fprintf(stderr, "make_fuzz_corpus: %zu seeds, %zu bytes, in %s\n", count, total, dir.c_str());
  return 0;
}
