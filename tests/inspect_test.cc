// `ringfeedctl inspect`, tested through the real binary (stdout, stderr, exit status) on files
// built here with TFRecordWriter and hand-encoded Examples, and on the real TFX files compared
// with TensorFlow's own view of them (tests/golden). Also: DecodeExample against ExampleParser on
// tricky and random encodings, and the --schema block round-tripped through the job config
// loader and ExampleParser.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "daemon/inspect.h"
#include "daemon/json_values.h"
#include "format/crc32c.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/tfrecord_reader.h"
#include "format/tfrecord_writer.h"
#include "tests/test_support.h"

extern char** environ;

namespace ringfeed {
namespace {

using testing::TempDir;
using Json = nlohmann::json;

const std::string kCtl = std::string(RINGFEED_BINARY_DIR) + "/daemon/ringfeedctl";

// ---------------------------------------------------------------------------------------------
// Running the binary

struct CtlResult {
  int status = -1;  // exit status; 128 + signal when killed
  std::string out, err;
  std::vector<std::string> OutLines() const { return Lines(out); }
  std::vector<std::string> ErrLines() const { return Lines(err); }
  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
};

CtlResult Ctl(const std::vector<std::string>& args) {
  TempDir dir;
  const std::string out_path = dir.file("stdout"), err_path = dir.file("stderr");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_strings = {kCtl};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawn(&pid, kCtl.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  CtlResult result;
  result.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  result.out = testing::ReadFile(out_path);
  result.err = testing::ReadFile(err_path);
  return result;
}

// ---------------------------------------------------------------------------------------------
// A tiny protobuf encoder for tf.train.Example (every field written by hand, so tests control
// packed/unpacked lists, duplicate keys, oneof switches and repeated `features` fields).

std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  s += static_cast<char>(v);
  return s;
}
std::string Tag(uint32_t field, uint32_t wire) { return Varint(uint64_t{field} << 3 | wire); }
std::string Len(uint32_t field, const std::string& payload) { return Tag(field, 2) + Varint(payload.size()) + payload; }
std::string Fixed32(float f) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &f, 4);
  return s;
}

// List payloads (the inside of BytesList / FloatList / Int64List).
std::string PackedInt64(const std::vector<int64_t>& values) {
  std::string packed;
  for (int64_t v : values) packed += Varint(static_cast<uint64_t>(v));
  return Len(1, packed);
}
std::string UnpackedInt64(const std::vector<int64_t>& values) {
  std::string s;
  for (int64_t v : values) s += Tag(1, 0) + Varint(static_cast<uint64_t>(v));
  return s;
}
std::string PackedFloat(const std::vector<float>& values) {
  std::string packed;
  for (float v : values) packed += Fixed32(v);
  return Len(1, packed);
}
std::string UnpackedFloat(const std::vector<float>& values) {
  std::string s;
  for (float v : values) s += Tag(1, 5) + Fixed32(v);
  return s;
}
std::string BytesValues(const std::vector<std::string>& values) {
  std::string s;
  for (const std::string& v : values) s += Len(1, v);
  return s;
}

// Feature payloads: one list of a kind (1 bytes, 2 float, 3 int64).
constexpr uint32_t kBytesList = 1, kFloatList = 2, kInt64List = 3;
std::string List(uint32_t kind, const std::string& list_payload) { return Len(kind, list_payload); }

std::string Entry(const std::string& key, const std::string& feature) { return Len(1, Len(1, key) + Len(2, feature)); }
std::string Features(const std::vector<std::string>& entries) {
  std::string s;
  for (const std::string& e : entries) s += e;
  return Len(1, s);
}
std::string Example(const std::vector<std::string>& entries) { return Features(entries); }

std::string Int64Entry(const std::string& key, const std::vector<int64_t>& v) { return Entry(key, List(kInt64List, PackedInt64(v))); }
std::string FloatEntry(const std::string& key, const std::vector<float>& v) { return Entry(key, List(kFloatList, PackedFloat(v))); }
std::string BytesEntry(const std::string& key, const std::vector<std::string>& v) { return Entry(key, List(kBytesList, BytesValues(v))); }

void WriteRecords(const std::string& path, const std::vector<std::string>& records, Compression compression = Compression::kNone) {
  TFRecordWriter writer(path, WriterOptions{compression});
  for (const std::string& r : records) writer.Write(r);
  writer.Close();
}

uint64_t OffsetOf(const std::vector<std::string>& records, size_t index) {
  uint64_t offset = 0;
  for (size_t i = 0; i < index; ++i) offset += kRecordHeaderBytes + records[i].size() + kRecordFooterBytes;
  return offset;
}

// ---------------------------------------------------------------------------------------------
// The small file whose output is asserted line by line.

std::vector<std::string> SmallRecords() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::string> r;
  // Record 0: every kind, special floats, extreme int64s, binary bytes, Feature{}, an empty list.
  r.push_back(Example({
      Int64Entry("i", {-7, 0, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}),
      FloatEntry("f", {0.1f, nan, inf, -inf, -0.0f, 1e-45f, 3.4028235e38f, 1e8f, 123456.79f, 1.0f}),
      BytesEntry("b", {"hello", std::string("\x00\xff\xfe", 3), ""}),
      Entry("none", ""),                               // Feature with no list set: kind null
      Entry("empty", List(kInt64List, "")),            // int64_list set, no values
      Entry("unpacked", List(kFloatList, UnpackedFloat({1.5f, -2.25f}))),
  }));
  // Record 1: protobuf merge rules. Duplicate key: the last wins; oneof: the last kind set wins
  // and later lists of that kind merge; packed + unpacked mix; a second `features` field merges;
  // unknown fields are skipped.
  r.push_back(Example({
                  Int64Entry("dup", {1}),
                  Entry("oneof", List(kInt64List, PackedInt64({1})) + List(kFloatList, PackedFloat({2.0f})) +
                                     List(kInt64List, PackedInt64({3})) + List(kInt64List, UnpackedInt64({4}))),
                  Entry("mixed", List(kInt64List, PackedInt64({1, 2}) + UnpackedInt64({3}) + PackedInt64({4}))),
                  BytesEntry("dup", {"x"}),
              }) +
              Tag(7, 0) + Varint(99) +  // unknown Example field
              Features({FloatEntry("late", {0.5f})}));
  // Record 2: an empty Example.
  r.push_back("");
  return r;
}

TEST_CASE("inspect prints one exact JSON line per record") {
  TempDir dir;
  const std::string path = dir.file("small.tfrecord");
  const std::vector<std::string> records = SmallRecords();
  WriteRecords(path, records);

  CtlResult r = Ctl({"inspect", path});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.err.empty());
  const std::string head = "{\"file\":\"" + path + "\",";
  const std::vector<std::string> expected = {
      head + "\"index\":0,\"offset\":0,\"features\":{"
             "\"b\":{\"kind\":\"bytes\",\"values\":[\"aGVsbG8=\",\"AP/+\",\"\"]},"
             "\"empty\":{\"kind\":\"int64\",\"values\":[]},"
             "\"f\":{\"kind\":\"float\",\"values\":[0.1,\"nan\",\"inf\",\"-inf\",-0.0,1e-45,3.4028235e+38,"
             "100000000.0,123456.79,1.0]},"
             "\"i\":{\"kind\":\"int64\",\"values\":[-7,0,9223372036854775807,-9223372036854775808]},"
             "\"none\":{\"kind\":null,\"values\":[]},"
             "\"unpacked\":{\"kind\":\"float\",\"values\":[1.5,-2.25]}}}",
      head + "\"index\":1,\"offset\":" + std::to_string(OffsetOf(records, 1)) + ",\"features\":{"
             "\"dup\":{\"kind\":\"bytes\",\"values\":[\"eA==\"]},"
             "\"late\":{\"kind\":\"float\",\"values\":[0.5]},"
             "\"mixed\":{\"kind\":\"int64\",\"values\":[1,2,3,4]},"
             "\"oneof\":{\"kind\":\"int64\",\"values\":[3,4]}}}",
      head + "\"index\":2,\"offset\":" + std::to_string(OffsetOf(records, 2)) + ",\"features\":{}}",
  };
  CHECK(r.OutLines() == expected);

  // The same records GZIP- and ZLIB-compressed: detected, same output apart from the file name
  // (offsets are in the uncompressed stream).
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    const std::string zpath = dir.file("small." + std::string(CompressionName(c)));
    WriteRecords(zpath, records, c);
    CtlResult z = Ctl({"inspect", zpath});
    CHECK(z.status == 0);
    std::vector<std::string> want = expected;
    for (std::string& line : want) line = "{\"file\":\"" + zpath + "\"," + line.substr(head.size());
    CHECK(z.OutLines() == want);
  }
}

TEST_CASE("inspect --bytes text prints bytes that are valid UTF-8 as text, the others as {\"base64\": ...}") {
  TempDir dir;
  const std::string path = dir.file("small.tfrecord");
  WriteRecords(path, SmallRecords());
  CtlResult r = Ctl({"inspect", "--bytes", "text", "--limit", "1", path});
  INFO(r.err);
  CHECK(r.status == 0);
  REQUIRE(r.OutLines().size() == 1);
  CHECK_THAT(r.OutLines()[0],
             Catch::Contains("\"b\":{\"kind\":\"bytes\",\"values\":[\"hello\",{\"base64\":\"AP/+\"},\"\"]}"));
  CHECK(Ctl({"inspect", "--bytes", "hex", path}).status == 2);
}

TEST_CASE("inspect: --limit reads the first records of each file; file names as given") {
  TempDir dir;
  WriteRecords(dir.file("a.tfrecord"), SmallRecords());
  WriteRecords(dir.file("b.tfrecord"), SmallRecords());
  const std::string relative = std::filesystem::relative(dir.file("b.tfrecord")).string();
  CtlResult r = Ctl({"inspect", "--limit", "2", dir.file("a.tfrecord"), relative});
  REQUIRE(r.status == 0);
  const auto lines = r.OutLines();
  REQUIRE(lines.size() == 4);
  CHECK(Json::parse(lines[1])["index"] == 1);
  CHECK(Json::parse(lines[2])["file"] == relative);
  CHECK(Json::parse(lines[2])["index"] == 0);
}

TEST_CASE("inspect on a directory: exit 2 naming the pattern for its files, nothing on stdout") {
  TempDir dir;
  WriteRecords(dir.file("a.tfrecord"), SmallRecords());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"inspect", "--schema", dir.path().string() + "/"},
        std::vector<std::string>{"inspect", dir.file("a.tfrecord"), dir.path().string()}}) {
    const CtlResult r = Ctl(args);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(" is a directory: inspect reads TFRecord files; name its files, e.g. " +
                                      dir.path().string() + "/* (the shell expands it)"));
  }
}

TEST_CASE("inspect on a pattern that matched no file (passed on by the shell): exit 1 saying so, nothing on stdout") {
  TempDir dir;
  WriteRecords(dir.file("a.tfrecord"), SmallRecords());
  for (const char* mode : {"--schema", "--count", "--verify"}) {
    const CtlResult r = Ctl({"inspect", mode, dir.file("a.tfrecord"), dir.file("*.tfrecord.gz")});
    INFO(mode << ": " << r.err);
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::StartsWith("ringfeedctl inspect: no file matches " + dir.file("*.tfrecord.gz") +
                                        " (the shell passes a pattern that matches nothing on as it is)"));
  }
  // A file whose name holds such a character is read as any other.
  WriteRecords(dir.file("odd[1].tfrecord"), SmallRecords());
  CHECK(Ctl({"inspect", "--count", dir.file("odd[1].tfrecord")}).status == 0);
}

TEST_CASE("inspect reports read and parse errors on stderr, goes on, and exits 1") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 6; ++i) records.push_back(Example({Int64Entry("n", {i})}));
  records[2] = "\xff";  // not an Example: a bad field tag
  const std::string path = dir.file("bad.tfrecord");
  std::string bytes = testing::FrameRecords(records);
  bytes[OffsetOf(records, 4) + kRecordHeaderBytes + 1] ^= 0x20;  // payload byte of record 4
  testing::WriteFile(path, bytes);

  for (const char* mode : {"", "--schema"}) {
    std::vector<std::string> args = {"inspect", path};
    if (*mode) args.insert(args.begin() + 1, mode);
    CtlResult r = Ctl(args);
    INFO(mode << "\n" << r.out << r.err);
    CHECK(r.status == 1);
    const auto err = r.ErrLines();
    REQUIRE(err.size() >= 2);
    CHECK(err[0] == path + ": record 2 at byte " + std::to_string(OffsetOf(records, 2)) + ": malformed Example: bad field tag");
    CHECK(err[1].rfind(path + ": record 4 at byte " + std::to_string(OffsetOf(records, 4)) + ": corrupted record data: ", 0) == 0);
    if (*mode == '\0') {
      std::vector<int64_t> seen;
      for (const std::string& line : r.OutLines()) seen.push_back(Json::parse(line)["index"]);
      CHECK(seen == std::vector<int64_t>{0, 1, 3, 5});
      CHECK(err.back() == "inspect: 2 problems (see above)");
    } else {
      CHECK(r.out.find("# ringfeedctl inspect --schema: 4 records in 1 file\n# 2 problems reading or decoding (see "
                       "stderr): what could not be read is not counted\n") == 0);
      CHECK(r.out.find("  n: {type: fixed, dtype: int64, shape: []}\n") != std::string::npos);
    }
  }

  CtlResult missing = Ctl({"inspect", dir.file("nope.tfrecord")});
  CHECK(missing.status == 1);
  CHECK(missing.err.find(dir.file("nope.tfrecord") + ": I/O error: cannot open") == 0);
  // A file that cannot be opened is a problem, not "1 record could not be read".
  CtlResult missing_schema = Ctl({"inspect", "--schema", dir.file("nope.tfrecord")});
  CHECK(missing_schema.status == 1);
  CHECK_THAT(missing_schema.out, Catch::Contains("\n# 1 problem reading or decoding (see stderr)"));
}

// ---------------------------------------------------------------------------------------------
// DecodeExample against ExampleParser (VarLen specs of the decoded kinds)

// What ExampleParser yields for `key` read as VarLen of `kind`, as FeatureValues.
FeatureValues ParseWithExampleParser(const std::string& example, const std::string& key, ListKind kind) {
  FeatureSpec spec;
  spec.name = key;
  spec.type = FeatureType::kVarLen;
  spec.dtype = kind == ListKind::kInt64 ? DType::kInt64 : kind == ListKind::kFloat ? DType::kFloat32 : DType::kBytes;
  ExampleParser parser({spec});
  ExampleBatch batch(parser.specs(), 1);
  ParseError error;
  const bool ok = parser.Parse({reinterpret_cast<const uint8_t*>(example.data()), example.size()}, batch, &error);
  INFO(error.message);
  REQUIRE(ok);
  const Column& c = batch.column(0);
  FeatureValues v;
  v.kind = kind;
  if (kind == ListKind::kInt64) v.int64_values.assign(c.as<int64_t>().begin(), c.as<int64_t>().end());
  if (kind == ListKind::kFloat) v.float_values.assign(c.as<float>().begin(), c.as<float>().end());
  if (kind == ListKind::kBytes) {
    for (size_t i = 0; i + 1 < c.value_offsets.size(); ++i) {
      v.bytes_values.emplace_back(reinterpret_cast<const char*>(c.values.data()) + c.value_offsets[i],
                                  static_cast<size_t>(c.value_offsets[i + 1] - c.value_offsets[i]));
    }
  }
  return v;
}

std::vector<uint32_t> FloatBits(const std::vector<float>& v) {
  std::vector<uint32_t> bits;
  for (float f : v) bits.push_back(std::bit_cast<uint32_t>(f));
  return bits;
}

void CheckAgainstExampleParser(const std::string& example) {
  ExampleFeatures features;
  std::string error;
  REQUIRE(DecodeExample({reinterpret_cast<const uint8_t*>(example.data()), example.size()}, &features, &error));
  for (const auto& [key, values] : features) {
    INFO("key " << key);
    // A Feature with no list: ExampleParser gives an empty VarLen row whatever the dtype.
    const ListKind kind = values.kind.value_or(ListKind::kInt64);
    FeatureValues expected = ParseWithExampleParser(example, key, kind);
    CHECK(values.size() == expected.size());
    CHECK(values.int64_values == expected.int64_values);
    CHECK(FloatBits(values.float_values) == FloatBits(expected.float_values));
    CHECK(values.bytes_values == expected.bytes_values);
    // ...and any other kind is "data types don't match" when the list is set.
    for (ListKind other : {ListKind::kBytes, ListKind::kFloat, ListKind::kInt64}) {
      if (!values.kind || other == *values.kind) continue;
      FeatureSpec spec;
      spec.name = key;
      spec.type = FeatureType::kVarLen;
      spec.dtype = other == ListKind::kInt64 ? DType::kInt64 : other == ListKind::kFloat ? DType::kFloat32 : DType::kBytes;
      ExampleParser parser({spec});
      ExampleBatch batch(parser.specs(), 1);
      ParseError parse_error;
      CHECK_FALSE(parser.Parse({reinterpret_cast<const uint8_t*>(example.data()), example.size()}, batch, &parse_error));
    }
  }
}

TEST_CASE("DecodeExample agrees with ExampleParser on tricky encodings") {
  for (const std::string& record : SmallRecords()) CheckAgainstExampleParser(record);
}

TEST_CASE("DecodeExample agrees with ExampleParser on random encodings") {
  std::mt19937_64 rng(20240611);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const std::vector<std::string> keys = {"a", "b", "c", "long_feature_name", ""};
  for (int round = 0; round < 400; ++round) {
    std::string example;
    const int features_fields = 1 + pick(2);
    for (int f = 0; f < features_fields; ++f) {
      std::vector<std::string> entries;
      for (int e = pick(6); e > 0; --e) {
        std::string feature;
        for (int l = pick(4); l > 0; --l) {  // several lists: oneof switches and merges
          const uint32_t kind = 1 + static_cast<uint32_t>(pick(3));
          std::string list;
          for (int part = pick(3); part > 0; --part) {
            const int n = pick(4);
            if (kind == kInt64List) {
              std::vector<int64_t> v;
              for (int i = 0; i < n; ++i) v.push_back(static_cast<int64_t>(rng()) >> pick(64));
              list += pick(2) ? PackedInt64(v) : UnpackedInt64(v);
            } else if (kind == kFloatList) {
              std::vector<float> v;
              for (int i = 0; i < n; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
              list += pick(2) ? PackedFloat(v) : UnpackedFloat(v);
            } else {
              std::vector<std::string> v;
              for (int i = 0; i < n; ++i) v.push_back(std::string(static_cast<size_t>(pick(5)), static_cast<char>(rng())));
              list += BytesValues(v);
            }
          }
          feature += List(kind, list);
        }
        entries.push_back(Entry(keys[static_cast<size_t>(pick(static_cast<int>(keys.size())))], feature));
      }
      example += Features(entries);
    }
    INFO("round " << round);
    CheckAgainstExampleParser(example);
  }
}

TEST_CASE("DecodeExample rejects malformed Examples") {
  ExampleFeatures features;
  std::string error;
  auto decode = [&](const std::string& bytes) {
    return DecodeExample({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, &features, &error);
  };
  CHECK_FALSE(decode("\xff"));
  CHECK(error == "malformed Example: bad field tag");
  CHECK_FALSE(decode(Len(1, "abc").substr(0, 3)));  // features length runs past the record
  CHECK(error == "malformed Example: features length exceeds the record");
  CHECK_FALSE(decode(Example({Entry("k", List(kFloatList, Len(1, "abc")))})));  // 3 bytes of packed floats
  CHECK(error == "key 'k': malformed Feature: bad float_list");
  CHECK_FALSE(decode(Example({Entry("k", List(kInt64List, Tag(1, 5) + Fixed32(1)))})));  // int64 as fixed32
  CHECK(error == "key 'k': malformed Feature: bad int64_list");
  CHECK_FALSE(decode(Example({Entry("k", List(kBytesList, "") + Tag(4, 3))})));  // a group
  CHECK(error == "key 'k': malformed Feature: bad field in Feature");
  CHECK(decode(Example({Entry("k", List(kInt64List, Tag(2, 0) + Varint(5) + UnpackedInt64({6})))})));  // unknown field 2
  CHECK(features["k"].int64_values == std::vector<int64_t>{6});
}

// tests/golden/edge_cases.json: ~45 hand-made Examples with what TensorFlow 2.21 (or, where the
// project deliberately follows protobuf, ringfeed) gives for VarLen i:int64, f:float32, b:bytes.
TEST_CASE("DecodeExample agrees with the TensorFlow edge cases") {
  const Json doc = Json::parse(testing::ReadFile(std::string(RINGFEED_SOURCE_DIR) + "/tests/golden/edge_cases.json"));
  std::map<std::string, std::string> data;
  for (const Json& r : doc["records"]) data[r["name"]] = r["data"];
  auto decode64 = [](const std::string& text) {
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : text) {
      const char* at = std::strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", c);
      if (c == '=' || at == nullptr) break;
      acc = acc << 6 | static_cast<uint32_t>(at - "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
      if ((bits += 6) >= 8) out += static_cast<char>(acc >> (bits -= 8) & 0xff);
    }
    return out;
  };
  // inspect decodes every key; TF never decodes keys outside its spec (here: garbage under "zz"
  // and "other").
  const std::set<std::string> every_key_decoded = {"unknown_key_garbage"};
  const std::map<std::string, ListKind> spec_kinds = {{"i", ListKind::kInt64}, {"f", ListKind::kFloat}, {"b", ListKind::kBytes}};
  int compared = 0;
  for (const Json& result : doc["results"]) {
    if (result["spec"] != "var") continue;
    const std::string name = result["record"];
    const Json& want = result.contains("ringfeed") ? result["ringfeed"] : result["tf"];
    const std::string bytes = decode64(data.at(name));
    ExampleFeatures features;
    std::string error;
    const bool ok = DecodeExample({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, &features, &error);
    INFO(name << ": " << error);
    ++compared;
    if (every_key_decoded.count(name) != 0) {
      CHECK_FALSE(ok);
      CHECK(error == "key 'other': malformed Feature: bad float_list");
      continue;
    }
    if (!want["ok"].get<bool>()) {
      // A malformed Example fails here too; a key-level error is a malformed Feature or a kind
      // other than the spec's (which inspect shows as it is).
      const std::string key = result["error_keys"][0];
      if (key.empty()) {
        CHECK_FALSE(ok);
      } else if (ok) {
        CHECK(features[key].kind != spec_kinds.at(key));
      }
      continue;
    }
    REQUIRE(ok);
    for (const auto& [key, kind] : spec_kinds) {
      const FeatureValues v = features.count(key) != 0 ? features[key] : FeatureValues{};
      CHECK((!v.kind || *v.kind == kind));
      const Json& w = want["features"][key];
      if (kind == ListKind::kInt64) CHECK(Json(v.int64_values) == w["values"]);
      if (kind == ListKind::kFloat) {
        CHECK(v.float_values.size() == w["count"].get<size_t>());
        std::string raw(v.float_values.size() * 4, '\0');
        if (!raw.empty()) std::memcpy(raw.data(), v.float_values.data(), raw.size());
        CHECK(raw == decode64(w["data"]));
      }
      if (kind == ListKind::kBytes) {
        std::vector<std::string> strings;
        for (const Json& s : w["strings"]) strings.push_back(decode64(s));
        CHECK(v.bytes_values == strings);
      }
    }
  }
  CHECK(compared >= 40);
}

TEST_CASE("Base64Encode matches RFC 4648") {
  auto b64 = [](const std::string& s) { return Base64Encode({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); };
  CHECK(b64("") == "");
  CHECK(b64("f") == "Zg==");
  CHECK(b64("fo") == "Zm8=");
  CHECK(b64("foo") == "Zm9v");
  CHECK(b64("foob") == "Zm9vYg==");
  CHECK(b64("fooba") == "Zm9vYmE=");
  CHECK(b64("foobar") == "Zm9vYmFy");
  CHECK(b64(std::string("\xfb\xff\xbf", 3)) == "+/+/");
}

TEST_CASE("BytesJson: text where the bytes are valid UTF-8 (RFC 3629), base64 where not") {
  auto text = [](const std::string& s) { return BytesJson(s, BytesFormat::kText); };
  CHECK(BytesJson("hello", BytesFormat::kBase64) == "aGVsbG8=");
  CHECK(text("") == "");
  CHECK(text("Credit Card") == "Credit Card");
  CHECK(text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // 2, 3, 4 bytes
  CHECK(text(std::string("a\0b", 3)) == std::string("a\0b", 3));  // NUL is valid UTF-8 (JSON escapes it)
  const auto base64 = [](const std::string& s) {
    return nlohmann::ordered_json{{"base64", Base64Encode({reinterpret_cast<const uint8_t*>(s.data()), s.size()})}};
  };
  for (const std::string& bad : {std::string("\x00\xff\xfe", 3), std::string("\xc0\xaf"),  // overlong '/'
                                std::string("\xe0\x80\xaf"), std::string("\xed\xa0\x80"),   // overlong, surrogate
                                std::string("\xf4\x90\x80\x80"), std::string("\xf5\x80\x80"),  // > U+10FFFF, F5 lead
                                std::string("\xff"), std::string("\xc3"), std::string("ab\x80")}) {  // cut, stray
    INFO(Base64Encode({reinterpret_cast<const uint8_t*>(bad.data()), bad.size()}));
    CHECK_FALSE(IsUtf8(bad));
    CHECK(text(bad) == base64(bad));
  }
}

// ---------------------------------------------------------------------------------------------
// Against TensorFlow (tests/golden, written by TF 2.21 from the same files)

std::string Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

// Every record of the golden file's files, as inspect prints it, equals what TF returned.
void CompareWithGolden(const std::string& golden_name, const std::string& data_dir) {
  const auto golden = CtlResult::Lines(Gunzip(std::string(RINGFEED_SOURCE_DIR) + "/tests/golden/" + golden_name));
  REQUIRE(golden.size() > 1);
  const Json header = Json::parse(golden[0]);
  std::vector<std::string> files;
  for (const auto& f : header["files"]) files.push_back(data_dir + "/" + f.get<std::string>());
  std::vector<std::string> args = {"inspect"};
  args.insert(args.end(), files.begin(), files.end());
  CtlResult r = Ctl(args);
  REQUIRE(r.status == 0);
  REQUIRE(r.err.empty());
  const auto lines = r.OutLines();
  REQUIRE(lines.size() == golden.size() - 1);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Json want = Json::parse(golden[i + 1]);
    const Json got = Json::parse(lines[i]);
    INFO(golden_name << " line " << i + 1 << "\n" << lines[i]);
    REQUIRE(got["file"] == files[want["file"].get<size_t>()]);
    REQUIRE(got["index"] == want["index"]);
    for (const auto& [name, kind] : got["features"].items()) {
      REQUIRE(header["features"].contains(name));
      if (!kind["kind"].is_null()) REQUIRE(kind["kind"] == header["features"][name]);
    }
    for (const auto& [name, dtype] : header["features"].items()) {
      const Json& want_values = want["features"][name];
      const Json got_values = got["features"].contains(name) ? got["features"][name]["values"] : Json::array();
      REQUIRE(got_values.size() == want_values.size());
      for (size_t k = 0; k < want_values.size(); ++k) {
        if (dtype == "float") {
          // TF's value is the float32 widened to double; ours is its shortest float32 string.
          REQUIRE(std::bit_cast<uint32_t>(static_cast<float>(got_values[k].get<double>())) ==
                  std::bit_cast<uint32_t>(static_cast<float>(want_values[k].get<double>())));
        } else {
          REQUIRE(got_values[k] == want_values[k]);
        }
      }
    }
  }
}

TEST_CASE("inspect shows the real taxi and penguin files as TensorFlow does") {
  const std::string tfx = testing::TfxDirOrSkip();
  if (tfx.empty()) return;
  CompareWithGolden("taxi.jsonl.gz", tfx);
  CompareWithGolden("penguin.jsonl.gz", tfx);
}

TEST_CASE("inspect --schema on TensorFlow's SequenceExample records says their feature lists are not read") {
  const std::string tfx = testing::TfxDirOrSkip();
  if (tfx.empty()) return;
  std::vector<std::string> args = {"inspect", "--schema"};
  for (const auto& e : std::filesystem::directory_iterator(tfx + "/tfrecord_sequence/Split-train")) {
    args.push_back(e.path().string());
  }
  CtlResult r = Ctl(args);
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK_THAT(r.err, Catch::Contains("schema: 10500 of 10500 records also hold feature lists (a "
                                    "tf.train.SequenceExample's feature_lists)"));
  CHECK_THAT(r.out, Catch::Contains("  f: {type: varlen, dtype: float32}"));
  // Plain Examples: no such line.
  args = {"inspect", "--schema"};
  for (const auto& e : std::filesystem::directory_iterator(tfx + "/csv_example_gen/Split-train")) {
    args.push_back(e.path().string());
  }
  CHECK_THAT(Ctl(args).err, !Catch::Contains("feature lists"));
}

std::vector<std::string> TaxiFiles(const std::string& tfx) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(tfx + "/csv_example_gen/Split-train")) {
    if (e.path().extension() == ".gz") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// ---------------------------------------------------------------------------------------------
// --count

TEST_CASE("inspect --count on the real files") {
  const std::string tfx = testing::TfxDirOrSkip();
  if (tfx.empty()) return;
  const Json counts = Json::parse(testing::ReadFile(std::string(RINGFEED_SOURCE_DIR) + "/tests/golden/counts.json"));
  const std::vector<std::string> taxi = TaxiFiles(tfx);
  REQUIRE(taxi.size() == 12);

  std::vector<std::string> args = {"inspect", "--count"};
  args.insert(args.end(), taxi.begin(), taxi.end());
  CtlResult r = Ctl(args);
  REQUIRE(r.status == 0);
  const auto lines = r.OutLines();
  REQUIRE(lines.size() == 14);
  CHECK(lines[0] == "records  file");
  for (size_t i = 0; i < taxi.size(); ++i) {
    const std::string rel = std::filesystem::relative(taxi[i], tfx).string();
    const std::string n = std::to_string(counts[rel].get<uint64_t>());
    CHECK(lines[i + 1] == std::string(7 - n.size(), ' ') + n + "  " + taxi[i]);
  }
  CHECK(lines[13] == "   9909  total (12 files)");

  args.insert(args.begin() + 2, "--json");
  CtlResult j = Ctl(args);
  REQUIRE(j.status == 0);
  const Json json = Json::parse(j.out);
  CHECK(json["records"] == 9909);
  CHECK(json["problems"] == 0);
  CHECK(json["files"].size() == 12);
  CHECK(json["files"][3] == Json({{"file", taxi[3]}, {"records", 825}, {"problems", 0}}));

  const std::string penguin = tfx + "/penguin/data/Split-train/data_tfrecord-00000-of-00001.gz";
  CtlResult p = Ctl({"inspect", "--count", penguin});
  CHECK(p.status == 0);
  CHECK(p.out == "records  file\n    234  " + penguin + "\n    234  total (1 file)\n");

  // --limit stops the count: the total says so (a limited count is not the dataset's size).
  CtlResult limited = Ctl({"inspect", "--count", "--limit", "5", penguin});
  CHECK(limited.status == 0);
  CHECK(limited.out == "records  file\n      5  " + penguin + "\n      5  total (1 file; --limit 5: at most that many of each file)\n");
  CtlResult limited_json = Ctl({"inspect", "--count", "--json", "--limit", "5", penguin});
  CHECK(Json::parse(limited_json.out)["limit"] == 5);
  CHECK(Json::parse(limited_json.out)["records"] == 5);
  CHECK_FALSE(json.contains("limit"));
}

TEST_CASE("inspect --count counts good records and flags files with problems") {
  TempDir dir;
  std::vector<std::string> records(5, Example({Int64Entry("n", {1})}));
  std::string bytes = testing::FrameRecords(records);
  bytes[OffsetOf(records, 1) + kRecordHeaderBytes] ^= 1;
  testing::WriteFile(dir.file("bad"), bytes);
  WriteRecords(dir.file("empty"), {});
  CtlResult r = Ctl({"inspect", "--count", dir.file("bad"), dir.file("empty")});
  CHECK(r.status == 1);
  CHECK(r.out == "records  file\n      4  " + dir.file("bad") + "  (1 problem, see stderr)\n      0  " + dir.file("empty") +
                     "\n      4  total (2 files)  (1 problem, see stderr)\n");
  CHECK(r.err.find(dir.file("bad") + ": record 1 at byte " + std::to_string(OffsetOf(records, 1)) + ": corrupted record data") == 0);
}

// ---------------------------------------------------------------------------------------------
// --verify

TEST_CASE("inspect --verify lists corrupt and truncated records") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 10; ++i) records.push_back(Example({Int64Entry("n", {i}), BytesEntry("s", {std::string(static_cast<size_t>(i) * 7, 'x')})}));
  const std::string good = dir.file("good.tfrecord"), flipped = dir.file("flipped.tfrecord"), cut = dir.file("cut.tfrecord");
  WriteRecords(good, records);
  std::string bytes = testing::FrameRecords(records);
  std::string flipped_bytes = bytes;
  flipped_bytes[OffsetOf(records, 5) + kRecordHeaderBytes + 3] ^= 0x01;  // one payload byte of record 5
  testing::WriteFile(flipped, flipped_bytes);
  testing::WriteFile(cut, bytes.substr(0, OffsetOf(records, 7) + kRecordHeaderBytes + 3));  // 3 bytes into record 7

  CtlResult ok = Ctl({"inspect", "--verify", good});
  CHECK(ok.status == 0);
  CHECK(ok.out == "verify: OK: 1 file, 10 good records, 0 problems\n");

  CtlResult r = Ctl({"inspect", "--verify", good, flipped, cut});
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  const auto lines = r.OutLines();
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == flipped + ": record 5 at byte " + std::to_string(OffsetOf(records, 5)) +
                        ": corrupted record data: data CRC mismatch over " + std::to_string(records[5].size()) + " bytes");
  CHECK(lines[1].rfind(cut + ": record 7 at byte " + std::to_string(OffsetOf(records, 7)) + ": truncated record: ", 0) == 0);
  CHECK(lines[2] == "verify: FAILED: 3 files, 26 good records, 2 problems in 2 files");

  CtlResult j = Ctl({"inspect", "--verify", "--json", good, flipped});
  CHECK(j.status == 1);
  const Json json = Json::parse(j.out);
  CHECK(json["ok"] == false);
  CHECK(json["records"] == 19);
  REQUIRE(json["problems"].size() == 1);
  CHECK(json["problems"][0]["file"] == flipped);
  CHECK(json["problems"][0]["index"] == 5);
  CHECK(json["problems"][0]["offset"] == OffsetOf(records, 5));
  CHECK(json["problems"][0]["kind"] == "corrupted record data");
  CHECK(json["problems"][0]["recoverable"] == true);

  // A corrupted length ends the file: said so, since the rest is unchecked.
  std::string bad_length = bytes;
  bad_length[OffsetOf(records, 2)] ^= 0x01;
  testing::WriteFile(dir.file("length"), bad_length);
  CtlResult l = Ctl({"inspect", "--verify", dir.file("length")});
  CHECK(l.status == 1);
  CHECK(l.out.find("record 2 at byte " + std::to_string(OffsetOf(records, 2)) + ": corrupted record length") != std::string::npos);
  CHECK(l.out.find("(the rest of this file cannot be checked)\nverify: FAILED: 1 file, 2 good records, 1 problem in 1 file\n") !=
        std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// --compression, --max-record-bytes

TEST_CASE("inspect --compression overrides detection; --max-record-bytes") {
  TempDir dir;
  const std::vector<std::string> records = SmallRecords();
  const std::string gz = dir.file("data.gz");
  WriteRecords(gz, records, Compression::kGzip);

  // The reader's hint names the config key (compression:); inspect's fix is its flag.
  CtlResult wrong = Ctl({"inspect", "--count", "--compression", "none", gz});
  CHECK(wrong.status == 1);
  CHECK_THAT(wrong.err, Catch::Contains("the file looks like gzip: use --compression gzip (or auto)") &&
                            !Catch::Contains("set compression:"));
  CHECK(Ctl({"inspect", "--count", "--compression", "gzip", gz}).status == 0);
  CHECK(Ctl({"inspect", "--count", "--compression", "zlib", gz}).status == 1);

  const std::string plain = dir.file("plain");
  WriteRecords(plain, records);
  const std::vector<std::vector<std::string>> modes = {{}, {"--verify"}, {"--verify", "--json"}};
  for (const std::vector<std::string>& mode : modes) {
    std::vector<std::string> args = {"inspect", "--compression", "gzip"};
    args.insert(args.end(), mode.begin(), mode.end());
    args.push_back(plain);
    const CtlResult plain_as_gzip = Ctl(args);
    INFO(plain_as_gzip.out << plain_as_gzip.err);
    CHECK(plain_as_gzip.status == 1);
    CHECK_THAT(plain_as_gzip.out + plain_as_gzip.err,
               Catch::Contains("the file looks like plain TFRecord: use --compression none (or auto)") &&
                   !Catch::Contains("set compression:"));
  }
  CtlResult big = Ctl({"inspect", "--max-record-bytes", "16B", plain});
  CHECK(big.status == 1);
  REQUIRE(big.OutLines().size() == 1);  // records 0 and 1 (> 16 bytes) are skipped, 2 is shown
  CHECK(Json::parse(big.OutLines()[0])["index"] == 2);
  CHECK(big.err.find(plain + ": record 0 at byte 0: record too large: length " + std::to_string(records[0].size()) +
                     " bytes exceeds max_record_bytes 16 (raise --max-record-bytes") == 0);
  CHECK(big.ErrLines()[1].find(": record 1 at byte " + std::to_string(OffsetOf(records, 1)) + ": record too large") != std::string::npos);

  // A length no file this size can hold (its CRC intact): no --max-record-bytes would fix it.
  std::string huge(8, '\0');
  const uint64_t length = uint64_t{1} << 62;
  std::memcpy(huge.data(), &length, 8);
  const uint32_t crc = MaskedCrc32c(huge.data(), 8);
  huge.append(reinterpret_cast<const char*>(&crc), 4);
  huge += std::string(100, 'x');
  const std::string corrupt = dir.file("huge-length");
  testing::WriteFile(corrupt, testing::FrameRecords({records[0]}) + huge);
  CtlResult cut = Ctl({"inspect", "--count", "--max-record-bytes", "1TiB", corrupt});
  CHECK(cut.status == 1);
  CHECK_THAT(cut.err, Catch::Contains(corrupt + ": record 1 at byte " + std::to_string(OffsetOf(records, 1)) +
                                      ": record too large: length 4611686018427387904 bytes exceeds max_record_bytes "
                                      "1099511627776 (the file has only 100 bytes after this header: the length is "
                                      "corrupt, or the file was cut short)"));
}

// ---------------------------------------------------------------------------------------------
// --schema

// Parses every record of `files` with the spec of the YAML `schema` output. Returns the count.
uint64_t ParseAllWithSchema(const std::string& schema_yaml, const std::vector<std::string>& files) {
  const JobConfig config = LoadJobConfigFromString("job: schema-test\nsource:\n  files: [x]\n" + schema_yaml, "schema.yaml");
  ExampleParser parser(config.features);
  ExampleBatch batch(parser.specs(), 1);
  uint64_t parsed = 0;
  for (const std::string& file : files) {
    TFRecordReader reader(file);
    Record record;
    ReadError read_error;
    TFRecordReader::Status status;
    while ((status = reader.Next(&record, &read_error)) == TFRecordReader::Status::kRecord) {
      batch.Clear();
      ParseError error;
      INFO(file << " record " << record.index);
      REQUIRE(parser.Parse(record.data, batch, &error));
      ++parsed;
    }
    REQUIRE(status == TFRecordReader::Status::kEnd);
  }
  return parsed;
}

TEST_CASE("inspect --schema summarizes features and emits a features: block that parses them") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 10; ++i) {
    std::vector<std::string> entries = {
        Int64Entry("label", {i}),
        FloatEntry("vec", {1.0f, 2.0f, static_cast<float>(i)}),
        BytesEntry("tags", std::vector<std::string>(static_cast<size_t>(1 + i % 2), "t")),
        Entry("never", ""),
        FloatEntry("odd name: x", {0.5f}),
        FloatEntry("null", {1.0f}),
    };
    if (i % 4 != 0) entries.push_back(Int64Entry("sometimes", {i, i}));
    if (i == 3) entries.push_back(Entry("sometimes_empty", List(kInt64List, "")));
    else entries.push_back(Int64Entry("sometimes_empty", {1}));
    records.push_back(Example(entries));
  }
  const std::string a = dir.file("a.tfrecord"), b = dir.file("b.tfrecord.gz");
  WriteRecords(a, {records.begin(), records.begin() + 6});
  WriteRecords(b, {records.begin() + 6, records.end()}, Compression::kGzip);

  CtlResult r = Ctl({"inspect", "--schema", a, b});
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  const std::string expected =
      "# ringfeedctl inspect --schema: 10 records in 2 files\n"
      "#\n"
      "# feature          kind   present           values per record\n"
      "# label            int64  10 (100%)         1\n"
      "# never            none   0 (0%)            0\n"
      "# null             float  10 (100%)         1\n"
      "# odd name: x      float  10 (100%)         1\n"
      "# sometimes        int64  7 (70.0%)         0-2\n"
      "# sometimes_empty  int64  9 (90.0%)         0-1\n"
      "# tags             bytes  10 (100%)         1-2\n"
      "# vec              float  10 (100%)         3\n"
      "#\n"
      "features:\n"
      "  label:           {type: fixed, dtype: int64, shape: []}\n"
      "  # never: left out: no record has a value list, so its kind is unknown\n"
      "  \"null\":          {type: fixed, dtype: float32, shape: []}\n"
      "  \"odd name: x\":   {type: fixed, dtype: float32, shape: []}\n"
      "  sometimes:       {type: varlen, dtype: int64}  # missing in 3 of 10 records (or type: fixed with a default:, which fills those)\n"
      "  sometimes_empty: {type: varlen, dtype: int64}  # an empty list in 1 of 10 records\n"
      "  tags:            {type: varlen, dtype: bytes}  # 1 to 2 values when present\n"
      "  vec:             {type: fixed, dtype: float32, shape: [3]}\n";
  CHECK(r.out == expected);
  CHECK(ParseAllWithSchema(r.out, {a, b}) == 10);

  CtlResult j = Ctl({"inspect", "--schema", "--json", a, b});
  REQUIRE(j.status == 0);
  const Json json = Json::parse(j.out);
  CHECK(json["records"] == 10);
  CHECK(json["features"][0] == Json({{"name", "label"}, {"kinds", {{"int64", 10}}}, {"present", 10}, {"min_values", 1},
                                     {"max_values", 1}, {"type", "fixed"}, {"dtype", "int64"}, {"shape", Json::array()}}));
  CHECK(json["features"][1]["type"].is_null());
  CHECK(json["features"][7]["shape"] == Json::array({3}));
}

TEST_CASE("inspect --schema: names beyond U+FFFF and with NUL bytes") {
  // JSON's ASCII escapes would write U+1F642 as the surrogate pair \ud83d\ude42, which the
  // YAML loader rejects: the key stays UTF-8. A name with a NUL byte is left out (the ring's
  // schema cannot hold it, and the config refuses it).
  TempDir dir;
  const std::string smile = "\xF0\x9F\x99\x82", e_acute = "\xC3\xA9t\xC3\xA9", nul = std::string("a\0b", 3);
  std::vector<std::string> records;
  for (int i = 0; i < 3; ++i) {
    records.push_back(Example({Int64Entry(smile, {i}), FloatEntry(e_acute, {0.5f}), Int64Entry(nul, {i})}));
  }
  const std::string path = dir.file("names.tfrecord");
  WriteRecords(path, records);
  CtlResult r = Ctl({"inspect", "--schema", path});
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("  \"" + smile + "\":") != std::string::npos);
  CHECK(r.out.find("  \"" + e_acute + "\":") != std::string::npos);
  CHECK(r.out.find("  # \"a\\u0000b\": left out: the name has a NUL byte") != std::string::npos);
  CHECK(ParseAllWithSchema(r.out, {path}) == 3);
}

TEST_CASE("inspect --schema: a name with DEL (0x7F) is written escaped, and the config loads and reads it") {
  // JSON leaves DEL raw; YAML allows it only escaped, and the config loader refuses the raw
  // byte anywhere in the file, the summary's comments too (helper-149).
  TempDir dir;
  const std::string del = "del\x7f";
  std::vector<std::string> records;
  for (int i = 0; i < 3; ++i) records.push_back(Example({Int64Entry(del, {i}), FloatEntry("x", {0.5f})}));
  const std::string path = dir.file("del.tfrecord");
  WriteRecords(path, records);
  CtlResult r = Ctl({"inspect", "--schema", path});
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find('\x7f') == std::string::npos);
  CHECK(r.out.find("  \"del\\u007F\": {type: fixed, dtype: int64") != std::string::npos);
  CHECK(ParseAllWithSchema(r.out, {path}) == 3);
}

TEST_CASE("inspect --schema with more features than a job holds: the first 256 in the block, the rest named, a note") {
  TempDir dir;
  std::vector<std::string> entries;
  for (int f = 0; f < 300; ++f) {
    char name[8];
    std::snprintf(name, sizeof name, "f%03d", f);
    entries.push_back(FloatEntry(name, {static_cast<float>(f)}));
  }
  const std::string path = dir.file("wide.tfrecord");
  WriteRecords(path, {Example(entries), Example(entries)});
  CtlResult r = Ctl({"inspect", "--schema", path});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.err == "schema: 44 more features than a job may hold (at most 256): the features block has the first 256 "
                 "in name order and lists the others as comments; keep the ones to train on\n");
  CHECK(r.out.find("  f255: {type: fixed, dtype: float32, shape: []}\n") != std::string::npos);
  CHECK(r.out.find("  # f256: left out: a job has at most 256 features\n") != std::string::npos);
  CHECK(r.out.find("  # f299: left out: a job has at most 256 features\n") != std::string::npos);
  CHECK(ParseAllWithSchema(r.out, {path}) == 2);
}

TEST_CASE("inspect --schema reports a feature seen with two kinds") {
  TempDir dir;
  const std::string path = dir.file("mixed.tfrecord");
  WriteRecords(path, {Example({Int64Entry("x", {1}), Int64Entry("ok", {1})}), Example({FloatEntry("x", {1.0f}), Int64Entry("ok", {2})})});
  CtlResult r = Ctl({"inspect", "--schema", path});
  CHECK(r.status == 1);
  const std::string kinds = "float in 1 record (first: " + path + " record 1), int64 in 1 record (first: " + path + " record 0)";
  CHECK(r.err == "schema: feature 'x' has two list kinds: " + kinds + "; no spec parses both, so it is left out of the features block\n");
  CHECK(r.out.find("# x        MIXED  2 (100%)          1\n") != std::string::npos);
  CHECK(r.out.find("features:\n  ok: {type: fixed, dtype: int64, shape: []}\n  # x: left out: two list kinds: " + kinds + "\n") !=
        std::string::npos);
}

TEST_CASE("inspect --schema with no feature to propose: exit 1 and why, not an empty block as a config") {
  // It printed `features: {}` (or a block of comments only) with exit 0, which check then
  // refused (helper-149).
  TempDir dir;
  const std::string empty = dir.file("empty.tfrecord");
  WriteRecords(empty, {});
  CtlResult r = Ctl({"inspect", "--schema", empty});
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  CHECK(r.out.find("# no features found\nfeatures: {}\n") != std::string::npos);
  CHECK(r.err == "schema: no feature to propose: the 0 records read hold no features (empty files, or "
                 "SequenceExamples with no context features); a job config needs at least one\n");
  r = Ctl({"inspect", "--schema", "--json", empty});  // the same exit status (it was 0: helper-150)
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Catch::StartsWith("schema: no feature to propose: the 0 records read hold no features"));
  const std::string mixed = dir.file("mixed.tfrecord");
  WriteRecords(mixed, {Example({Int64Entry("x", {1})}), Example({FloatEntry("x", {1.0f})})});
  r = Ctl({"inspect", "--schema", mixed});
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Catch::EndsWith("schema: no feature to propose: every feature is left out (see the comments); a job "
                                    "config needs at least one\n"));
}

TEST_CASE("inspect --schema on the real taxi files round-trips through the job config") {
  const std::string tfx = testing::TfxDirOrSkip();
  if (tfx.empty()) return;
  const std::vector<std::string> taxi = TaxiFiles(tfx);
  std::vector<std::string> args = {"inspect", "--schema"};
  args.insert(args.end(), taxi.begin(), taxi.end());
  CtlResult r = Ctl(args);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("# ringfeedctl inspect --schema: 9909 records in 12 files\n") == 0);
  CHECK(r.out.find("# company                 bytes  6548 (66.1%)      0-1\n") != std::string::npos);
  CHECK(r.out.find("  company:                {type: varlen, dtype: bytes}    # missing in 3361 of 9909 records (or type: fixed with a default:, which fills those)\n") !=
        std::string::npos);
  CHECK(r.out.find("  fare:                   {type: fixed, dtype: float32, shape: []}\n") != std::string::npos);
  CHECK(ParseAllWithSchema(r.out, taxi) == 9909);

  // Same kinds and types as the hand-written config/examples/taxi.yaml.
  const JobConfig inferred = LoadJobConfigFromString("job: t\nsource: {files: [x]}\n" + r.out);
  const JobConfig example = LoadJobConfig(std::string(RINGFEED_SOURCE_DIR) + "/config/examples/taxi.yaml");
  REQUIRE(inferred.features.size() == example.features.size());
  for (const FeatureSpec& want : example.features) {
    auto it = std::find_if(inferred.features.begin(), inferred.features.end(), [&](const FeatureSpec& f) { return f.name == want.name; });
    REQUIRE(it != inferred.features.end());
    CHECK(it->type == want.type);
    CHECK(it->dtype == want.dtype);
    CHECK(it->shape == want.shape);
  }

  const std::string penguin = tfx + "/penguin/data/Split-train/data_tfrecord-00000-of-00001.gz";
  CtlResult p = Ctl({"inspect", "--schema", penguin});
  REQUIRE(p.status == 0);
  CHECK(ParseAllWithSchema(p.out, {penguin}) == 234);
}

// ---------------------------------------------------------------------------------------------
// Command line

TEST_CASE("ringfeedctl usage errors exit 2; --help exits 0") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, "A subcommand is required"},
      {{"frobnicate", "x"}, "ringfeedctl: unknown command 'frobnicate' (commands: inspect, check, list, status, dump)"},
      {{"inspect"}, "ringfeedctl inspect: FILE is required\nRun 'ringfeedctl inspect --help' for more information."},
      {{"status"}, "ringfeedctl status: JOB is required"},
      {{"inspect", "--bogus", "x"}, "--bogus"},
      {{"inspect", "--count", "--verify", "x"}, "--count excludes --verify"},
      // Modes that print no values take no --bytes (it would be ignored without a word).
      {{"inspect", "--count", "--bytes", "text", "x"}, "--count excludes --bytes"},
      {{"inspect", "--schema", "--bytes", "base64", "x"}, "--schema excludes --bytes"},
      {{"inspect", "--json", "x"}, "--json needs --count, --verify or --schema"},
      {{"inspect", "--compression", "bzip2", "x"}, "bzip2"},
      {{"inspect", "--max-record-bytes", "1.5GiB", "x"},
       "'1.5GiB' is not a size; sizes are whole numbers of their unit: 1.5GiB is 1536MiB; write a byte count"},
      // The config's hints (config.md, sizes).
      {{"inspect", "--max-record-bytes", "64M", "x"}, "'64M' is not a size; did you mean 64MiB (2^20 bytes) or 64MB"},
      {{"inspect", "--max-record-bytes", "20000000TB", "x"}, "'20000000TB' is not a size; that is 2^64 bytes or more"},
      {{"inspect", "--limit", "0", "x"}, "'0' is not a positive integer"},
      {{"inspect", "--limit", "99999999999999999999", "x"},
       "'99999999999999999999' is out of range; at most 18446744073709551615"},
  };
  for (const Case& c : cases) {
    CtlResult r = Ctl(c.args);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.err.find("--help") != std::string::npos);
  }

  CtlResult top = Ctl({"--help"});
  CHECK(top.status == 0);
  CHECK(top.out.find("inspect") != std::string::npos);
  CHECK(top.out.find("ringfeedctl inspect --schema") != std::string::npos);

  CtlResult help = Ctl({"inspect", "--help"});
  CHECK(help.status == 0);
  for (const char* text : {"--count", "--verify", "--schema", "--json", "--compression", "--max-record-bytes", "--limit",
                           "Examples:", "ringfeedctl inspect --schema"}) {
    CHECK(help.out.find(text) != std::string::npos);
  }
}

TEST_CASE("file names that are not valid UTF-8 are written as \\xNN in every JSON mode") {
  TempDir dir;
  const std::string path = dir.file("x\xff\xfey.tfrecord");
  WriteRecords(path, {Example({Int64Entry("a", {1})})});
  {
    std::ofstream(path, std::ios::app) << "junk";  // a truncated second record: --verify lists it
  }
  for (const std::vector<std::string>& mode : {std::vector<std::string>{"--limit", "1"},
                                               std::vector<std::string>{"--count", "--json"},
                                               std::vector<std::string>{"--verify", "--json"}}) {
    std::vector<std::string> args = {"inspect"};
    args.insert(args.end(), mode.begin(), mode.end());
    args.push_back(path);
    const CtlResult r = Ctl(args);
    INFO(mode[0] << ": " << r.out << r.err);
    CHECK_THAT(r.out, Catch::Contains(R"(x\\xFF\\xFEy.tfrecord")"));
    CHECK_THAT(r.out, !Catch::Contains("\xef\xbf\xbd"));  // U+FFFD, what replacing gave
  }
}

TEST_CASE("keys that are not plain text stay distinct in JSON and cannot break the schema's YAML") {
  TempDir dir;
  const std::string path = dir.file("keys.tfrecord");
  const std::string newline_key = "line\nevil: 1\n#";
  // "a\\xFF" is the four characters a, \, x, F, F: valid UTF-8 that reads like the byte's text.
  WriteRecords(path, {Example({Int64Entry("a\xff", {1}), Int64Entry("a\xfe", {2}), Int64Entry(newline_key, {3}),
                               Int64Entry("a\\xFF", {4}), Int64Entry("b\\y", {5})})});

  CtlResult r = Ctl({"inspect", path});
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains(R"("a\\xFE":{"kind":"int64","values":[2]})") &&
                        Catch::Contains(R"("a\\xFF":{"kind":"int64","values":[1]})") &&
                        Catch::Contains(R"("a\\x5CxFF":{"kind":"int64","values":[4]})") &&
                        Catch::Contains(R"("b\\y":{"kind":"int64","values":[5]})") &&
                        Catch::Contains(R"("line\nevil: 1\n#":{"kind":"int64","values":[3]})"));

  r = Ctl({"inspect", "--schema", path});
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("# \"a\\\\xFF\"") && Catch::Contains("not valid UTF-8"));
  // The block is valid YAML, keeps the newline key and the valid one spelled like an escape,
  // and parses the record.
  const JobConfig config = LoadJobConfigFromString("job: t\nsource: {files: [x]}\n" + r.out);
  REQUIRE(config.features.size() == 3);
  std::set<std::string> names;
  for (const FeatureSpec& f : config.features) names.insert(f.name);
  CHECK(names == std::set<std::string>{newline_key, "a\\xFF", "b\\y"});
  ExampleParser parser(config.features);
  ExampleBatch batch(parser.specs(), 1);
  ParseError error;
  const std::string record = Example({Int64Entry(newline_key, {3}), Int64Entry("a\\xFF", {4}), Int64Entry("b\\y", {5})});
  CHECK(parser.Parse({reinterpret_cast<const uint8_t*>(record.data()), record.size()}, batch, &error));
  for (size_t i = 0; i < config.features.size(); ++i) {
    const std::string& name = config.features[i].name;
    CHECK(batch.column(i).as<int64_t>()[0] == (name == newline_key ? 3 : name == "b\\y" ? 5 : 4));
  }
}

}  // namespace
}  // namespace ringfeed
