// ringfeedd end to end on the real TFX taxi files (../shared/data/tfx; skipped, with
// "RINGFEED_SKIP:", where they are absent): every value of every record, read through the
// daemon (all 18 features VarLen, shuffled files and records, batches of 100) and taken by a
// consumer with the client library, equals TensorFlow's parse of that record
// (tests/golden/taxi.jsonl.gz, found by Batch::source), floats bit for bit; every record
// comes exactly once; and without shuffling, the batches' rows come in the order TensorFlow's
// interleave gives (tests/golden/interleave_order.json). Its own program, so that a skip hides
// no other test.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/daemon_harness.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;
using nlohmann::json;

namespace {

#ifdef RINGFEED_SOURCE_DIR
const std::string kGoldenDir = std::string(RINGFEED_SOURCE_DIR) + "/tests/golden";
#else
const std::string kGoldenDir = "tests/golden";
#endif

// JSON Lines from a .gz file.
std::vector<json> ReadGzJsonLines(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<json> out;
  std::string line;
  char buf[1 << 16];
  while (gzgets(file, buf, sizeof buf) != nullptr) {
    line += buf;
    if (line.back() != '\n') continue;
    out.push_back(json::parse(line));
    line.clear();
  }
  gzclose(file);
  if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The float32 a golden JSON value denotes (the double is the float widened exactly).
uint32_t GoldenFloatBits(const json& v) {
  float f;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    f = s == "nan" ? std::numeric_limits<float>::quiet_NaN() : s == "inf" ? INFINITY : -INFINITY;
  } else {
    f = static_cast<float>(v.get<double>());
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

}  // namespace

TEST_CASE("golden: every taxi value through ringfeedd and the client equals TensorFlow's parse") {
  const std::string tfx = TfxDirOrSkip();
  if (tfx.empty()) return;
  const std::vector<json> golden_lines = ReadGzJsonLines(kGoldenDir + "/taxi.jsonl.gz");
  REQUIRE(golden_lines.size() == 9909 + 1);
  const json& header = golden_lines[0];
  const std::vector<std::string> golden_files = header.at("files").get<std::vector<std::string>>();
  // golden[file][index] = the record's features.
  std::vector<std::vector<const json*>> golden(golden_files.size());
  for (size_t i = 1; i < golden_lines.size(); ++i) {
    const size_t f = golden_lines[i].at("file").get<size_t>();
    const size_t index = golden_lines[i].at("index").get<size_t>();
    REQUIRE(index == golden[f].size());
    golden[f].push_back(&golden_lines[i].at("features"));
  }

  struct Spec {
    std::string name, kind;
  };
  std::vector<Spec> specs;
  std::string features_yaml;
  for (const auto& [name, kind] : header.at("features").items()) {
    specs.push_back({name, kind.get<std::string>()});
    const std::string dtype = kind == "int64" ? "int64" : kind == "float" ? "float32" : "bytes";
    features_yaml += "  " + name + ": {type: varlen, dtype: " + dtype + "}\n";
  }
  REQUIRE(specs.size() == 18);

  TempDir dir;
  const std::string config = "job: golden-taxi\n"
                             "source:\n"
                             "  files: [\"" + tfx + "/csv_example_gen/Split-train/*.gz\"]\n"
                             "features:\n" + features_yaml +
                             "batch: {size: 100}\n"
                             "shuffle: {files: true, buffer: 1000, seed: 20240611}\n"
                             "epochs: 1\n";
  DaemonProcess daemon(dir.path(), "golden-taxi", config);
  RINGFEED_REQUIRE_STARTED(daemon, WithArgs({"--exit-when-done"}));

  auto client = Client::Attach(daemon.client_options());
  REQUIRE(client->schema().features.size() == specs.size());
  std::vector<std::vector<int>> seen(golden.size());
  for (size_t f = 0; f < golden.size(); ++f) seen[f].assign(golden[f].size(), 0);
  size_t rows = 0, values = 0, mismatches = 0, batches = 0, out_of_range = 0;
  std::vector<std::string> first_mismatches;
  std::vector<uint64_t> first_batch_records;
  auto mismatch = [&](const std::string& what) {
    if (++mismatches <= 10) first_mismatches.push_back(what);
  };
  Batch batch;
  for (;;) {
    const Client::Status status = client->Next(kEventually, &batch);
    if (status == Client::Status::kEndOfData) break;
    REQUIRE(status == Client::Status::kBatch);
    REQUIRE(batch.epoch() == 0);
    CHECK(batch.index() == batches);
    CHECK(batch.rows() <= 100);
    ++batches;
    for (size_t r = 0; r < batch.rows(); ++r) {
      const shm::RowSource src = batch.source(r);
      if (batches == 1) first_batch_records.push_back(src.file_index * 100000 + src.record_index);
      if (src.file_index >= golden.size() || src.record_index >= golden[src.file_index].size()) {
        ++out_of_range;
        continue;
      }
      ++seen[src.file_index][src.record_index];
      ++rows;
      const json& want = *golden[src.file_index][src.record_index];
      const std::string where = golden_files[src.file_index] + " record " + std::to_string(src.record_index);
      for (const Spec& spec : specs) {
        const TensorView t = batch.feature(spec.name);
        const json& expected = want.at(spec.name);
        const auto splits = t.row_splits();
        const size_t begin = static_cast<size_t>(splits[r]), end = static_cast<size_t>(splits[r + 1]);
        if (end - begin != expected.size()) {
          mismatch(where + " " + spec.name + ": " + std::to_string(end - begin) + " values, golden " +
                   std::to_string(expected.size()));
          continue;
        }
        for (size_t k = 0; k < expected.size(); ++k) {
          ++values;
          if (spec.kind == "int64") {
            const int64_t got = t.values<int64_t>()[begin + k];
            if (got != expected[k].get<int64_t>()) mismatch(where + " " + spec.name + ": " + std::to_string(got));
          } else if (spec.kind == "float") {
            const float got = t.values<float>()[begin + k];
            if (FloatBits(got) != GoldenFloatBits(expected[k])) {
              mismatch(where + " " + spec.name + ": " + std::to_string(got));
            }
          } else {
            const std::string got(t.string(begin + k));
            if (got != Base64Decode(expected[k].get<std::string>())) {
              mismatch(where + " " + spec.name + ": '" + got + "'");
            }
          }
        }
      }
    }
  }
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  std::string mismatch_text;
  for (const std::string& m : first_mismatches) mismatch_text += m + "\n";
  INFO(mismatch_text);
  CHECK(mismatches == 0);
  CHECK(out_of_range == 0);
  CHECK(rows == 9909);
  CHECK(batches == 100);  // 99 of 100 rows and one of 9
  CHECK(values > 150000);
  size_t twice = 0, missing = 0;
  for (const auto& file : seen) {
    for (int n : file) {
      missing += n == 0;
      twice += n > 1;
    }
  }
  CHECK(missing == 0);
  CHECK(twice == 0);
  // Shuffled: the first batch is not file 0's first 100 records.
  std::vector<uint64_t> in_order(100);
  std::iota(in_order.begin(), in_order.end(), 0);
  CHECK(first_batch_records != in_order);

  client.reset();  // release the last batch; --exit-when-done then ends the daemon
  const auto status = daemon.Wait();
  REQUIRE(status);
  CHECK(status->ToString() == "exit 0");
}


TEST_CASE("golden: without shuffling, ringfeedd's batches come in tf.data's interleave order") {
  // tests/golden/interleave_order.json, "taxi": TensorFlow's interleave(cycle_length,
  // block_length=1, deterministic=True) over the 12 taxi files, sorted; their 825-826 records
  // end at different visits, so the order shows how a position passes to the next file.
  const std::string tfx = TfxDirOrSkip();
  if (tfx.empty()) return;
  std::ifstream in(kGoldenDir + "/interleave_order.json");
  REQUIRE(in);
  const json golden = json::parse(in);
  REQUIRE(golden.at("taxi").size() == 2);
  for (const json& c : golden.at("taxi")) {
    const int64_t cycle_length = c.at("cycle_length").get<int64_t>();
    const std::vector<uint32_t> order = c.at("order").get<std::vector<uint32_t>>();
    REQUIRE(order.size() == 9909);
    std::vector<std::pair<uint32_t, uint64_t>> expected;
    std::vector<uint64_t> next(12, 0);
    for (uint32_t f : order) expected.emplace_back(f, next.at(f)++);

    TempDir dir;
    const std::string config = "job: order-taxi\n"
                               "source:\n"
                               "  files: [\"" + tfx + "/" + c.at("files").get<std::string>() + "\"]\n"
                               "features:\n  trip_miles: {type: varlen, dtype: float32}\n"
                               "batch: {size: 128}\n"
                               "epochs: 1\n"
                               "pipeline: {cycle_length: " + std::to_string(cycle_length) + "}\n";
    DaemonProcess daemon(dir.path(), "order-taxi", config);
    RINGFEED_REQUIRE_STARTED(daemon, WithArgs({"--exit-when-done"}));
    auto client = Client::Attach(daemon.client_options());
    std::vector<std::pair<uint32_t, uint64_t>> got;
    Batch batch;
    while (client->Next(kEventually, &batch) == Client::Status::kBatch) {
      for (size_t r = 0; r < batch.rows(); ++r) {
        got.emplace_back(batch.source(r).file_index, batch.source(r).record_index);
      }
    }
    INFO("cycle_length " << cycle_length << "\nringfeedd stderr:\n" << daemon.Stderr());
    REQUIRE(got.size() == expected.size());
    size_t first_difference = got.size();
    for (size_t i = 0; i < got.size() && first_difference == got.size(); ++i) {
      if (got[i] != expected[i]) first_difference = i;
    }
    INFO("first difference at row " << first_difference);
    CHECK(first_difference == got.size());
    client.reset();
    const auto status = daemon.Wait();
    REQUIRE(status);
    CHECK(status->ToString() == "exit 0");
  }
}
