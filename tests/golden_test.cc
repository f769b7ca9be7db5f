// The real TensorFlow-written files in ../shared/data/tfx/ against TensorFlow's own reading of them
// (tests/golden, produced with TensorFlow 2.21 by tests/golden/make_golden.py):
//   * the record count of every file (tests/golden/counts.json), with both inflate backends;
//   * every feature of every taxi and penguin record, parsed by ExampleParser with a VarLen spec for
//     every feature named in the golden header, equal to tf.io.parse_example's values (floats bit
//     for bit, via the exact double in the JSON), with both inflate backends.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/compression.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/feature_spec.h"
#include "format/tfrecord_reader.h"
#include "tests/test_support.h"

using namespace ringfeed;
using nlohmann::json;
using ringfeed::testing::Base64Decode;

namespace {

#ifdef RINGFEED_SOURCE_DIR
const std::string kGoldenDir = std::string(RINGFEED_SOURCE_DIR) + "/tests/golden";
#else
const std::string kGoldenDir = "tests/golden";
#endif

const InflateBackend kBackends[] = {InflateBackend::kIsal, InflateBackend::kZlib};

// JSON Lines from a .gz file, read with zlib's gzgets.
class GzLines {
 public:
  explicit GzLines(const std::string& path) : file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) throw std::runtime_error("cannot open " + path);
  }
  ~GzLines() { gzclose(file_); }
  GzLines(const GzLines&) = delete;
  GzLines& operator=(const GzLines&) = delete;

  // False at the end of the file.
  bool Next(std::string* line) {
    line->clear();
    char buf[1 << 16];
    while (gzgets(file_, buf, sizeof buf) != nullptr) {
      *line += buf;
      if (!line->empty() && line->back() == '\n') break;
    }
    if (!line->empty() && line->back() == '\n') line->pop_back();
    return !line->empty();
  }

 private:
  gzFile file_;
};

struct ReadResult {
  std::vector<std::string> records;
  std::vector<ReadError> errors;
};

ReadResult ReadAll(const std::string& path, InflateBackend backend, Compression compression = Compression::kAuto) {
  ReaderOptions options;
  options.compression = compression;
  options.inflate = backend;
  TFRecordReader reader(path, options);
  ReadResult out;
  Record record;
  ReadError error;
  while (true) {
    const auto status = reader.Next(&record, &error);
    if (status == TFRecordReader::Status::kEnd) break;
    if (status == TFRecordReader::Status::kError) {
      out.errors.push_back(error);
      if (!error.recoverable) break;
      continue;
    }
    CHECK(record.index == out.records.size());
    out.records.emplace_back(reinterpret_cast<const char*>(record.data.data()), record.data.size());
  }
  return out;
}

// The float32 the golden JSON denotes: a double that is the float widened exactly, or a string.
uint32_t GoldenFloatBits(const json& v) {
  float f;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    f = s == "nan" ? std::numeric_limits<float>::quiet_NaN() : s == "inf" ? INFINITY : -INFINITY;
  } else {
    const double d = v.get<double>();
    f = static_cast<float>(d);
    CHECK(static_cast<double>(f) == d);  // the JSON holds exactly a float32 value
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

struct GoldenSummary {
  size_t records = 0;
  size_t values = 0;
  std::map<std::string, size_t> empty_rows;  // feature -> records where it has no values
};

// Reads every file named in the golden header with `backend`, parses every record with a VarLen
// spec of every header feature, and compares each feature of each record with the golden line.
GoldenSummary CheckGolden(const std::string& tfx_dir, const std::string& golden, InflateBackend backend) {
  GzLines lines(kGoldenDir + "/" + golden);
  std::string line;
  REQUIRE(lines.Next(&line));
  const json header = json::parse(line);
  FeatureSpecs specs;
  for (const auto& [name, kind] : header.at("features").items()) {
    FeatureSpec s;
    s.name = name;
    s.type = FeatureType::kVarLen;
    s.dtype = kind == "int64" ? DType::kInt64 : kind == "float" ? DType::kFloat32 : DType::kBytes;
    REQUIRE((kind == "int64" || kind == "float" || kind == "bytes"));
    specs.push_back(s);
  }
  const std::vector<std::string> files = header.at("files").get<std::vector<std::string>>();
  ExampleParser parser(specs);
  ExampleBatch batch(parser.specs(), 100);
  std::vector<json> pending;  // golden lines of the rows in `batch`

  GoldenSummary summary;
  auto compare_batch = [&] {
    REQUIRE(batch.rows() == pending.size());
    for (size_t r = 0; r < pending.size(); ++r) {
      const json& want = pending[r].at("features");
      INFO("file " << files.at(pending[r].at("file").get<size_t>()) << " record " << pending[r].at("index"));
      REQUIRE(want.size() == specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        const FeatureSpec& s = specs[i];
        const Column& c = batch.column(i);
        INFO("feature " << s.name);
        const json& values = want.at(s.name);
        const size_t begin = static_cast<size_t>(c.row_splits.at(r));
        const size_t end = static_cast<size_t>(c.row_splits.at(r + 1));
        REQUIRE(end - begin == values.size());
        if (values.empty()) ++summary.empty_rows[s.name];
        summary.values += values.size();
        for (size_t k = 0; k < values.size(); ++k) {
          switch (s.dtype) {
            case DType::kInt64:
              CHECK(c.as<int64_t>()[begin + k] == values[k].get<int64_t>());
              break;
            case DType::kFloat32: {
              uint32_t got;
              std::memcpy(&got, &c.as<float>()[begin + k], 4);
              CHECK(got == GoldenFloatBits(values[k]));
              break;
            }
            default: {
              const size_t a = static_cast<size_t>(c.value_offsets.at(begin + k));
              const size_t b = static_cast<size_t>(c.value_offsets.at(begin + k + 1));
              CHECK(std::string(reinterpret_cast<const char*>(c.values.data()) + a, b - a) ==
                    Base64Decode(values[k].get<std::string>()));
            }
          }
        }
      }
    }
    summary.records += pending.size();
    pending.clear();
    batch.Clear();
  };

  for (size_t f = 0; f < files.size(); ++f) {
    const std::string path = tfx_dir + "/" + files[f];
    INFO("file " << path << " backend " << InflateBackendName(backend));
    ReadResult read = ReadAll(path, backend, Compression::kGzip);
    REQUIRE(read.errors.empty());
    for (size_t index = 0; index < read.records.size(); ++index) {
      REQUIRE(lines.Next(&line));
      json rec = json::parse(line);
      REQUIRE(rec.at("file").get<size_t>() == f);
      REQUIRE(rec.at("index").get<size_t>() == index);
      ParseError error;
      const std::string& bytes = read.records[index];
      const bool ok = parser.Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, batch, &error);
      INFO("record " << index << ": " << error.message);
      REQUIRE(ok);
      pending.push_back(std::move(rec));
      if (batch.rows() == batch.capacity()) compare_batch();
    }
  }
  compare_batch();
  CHECK_FALSE(lines.Next(&line));  // no golden lines left over
  return summary;
}

}  // namespace

TEST_CASE("real files: the record count of every file, with both inflate backends") {
  const std::string dir = ringfeed::testing::TfxDirOrSkip();
  if (dir.empty()) return;
  std::ifstream in(kGoldenDir + "/counts.json");
  REQUIRE(in);
  const json counts = json::parse(in);
  for (InflateBackend backend : kBackends) {
    std::map<std::string, uint64_t> totals;
    size_t files = 0;
    for (const auto& [rel, count] : counts.items()) {
      if (rel == "total") continue;
      INFO(rel << " with " << InflateBackendName(backend));
      const ReadResult read = ReadAll(dir + "/" + rel, backend);
      CHECK(read.errors.empty());
      CHECK(read.records.size() == count.get<uint64_t>());
      totals[rel.substr(0, rel.find('/'))] += read.records.size();
      ++files;
    }
    CHECK(files == 15);
    CHECK(totals ==
          std::map<std::string, uint64_t>{{"csv_example_gen", 9909}, {"penguin", 334}, {"tfrecord_sequence", 10500}});
    for (const auto& [folder, total] : counts.at("total").items()) CHECK(totals[folder] == total.get<uint64_t>());
  }
}

TEST_CASE("real files: every taxi and penguin feature equals TensorFlow's, with both inflate backends") {
  const std::string dir = ringfeed::testing::TfxDirOrSkip();
  if (dir.empty()) return;
  for (InflateBackend backend : kBackends) {
    INFO("backend " << InflateBackendName(backend));
    const GoldenSummary taxi = CheckGolden(dir, "taxi.jsonl.gz", backend);
    CHECK(taxi.records == 9909);
    // Records where TF returned no values (tests/golden/README.md): present-but-empty features.
    const std::map<std::string, size_t> taxi_empty = {{"pickup_census_tract", 9908},
                                                      {"company", 3361},
                                                      {"dropoff_census_tract", 2766},
                                                      {"dropoff_community_area", 319},
                                                      {"dropoff_latitude", 305},
                                                      {"dropoff_longitude", 305},
                                                      {"trip_seconds", 3}};
    CHECK(taxi.empty_rows == taxi_empty);
    CHECK(taxi.values == 9909 * 18 - (9908 + 3361 + 2766 + 319 + 305 + 305 + 3));

    const GoldenSummary penguin = CheckGolden(dir, "penguin.jsonl.gz", backend);
    CHECK(penguin.records == 334);
    CHECK(penguin.empty_rows.empty());
    CHECK(penguin.values == 334 * 5);
  }
}
