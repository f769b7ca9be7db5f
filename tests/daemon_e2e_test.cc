// ringfeedd end to end, with real processes, shared memory and sockets (tests/daemon_harness.h):
//   * golden: every value of every taxi record, read through the daemon and the client, equals
//     TensorFlow's parse (tests/golden/taxi.jsonl.gz), and every record comes exactly once;
//   * determinism: the batch sequence does not depend on readers/workers; deterministic: false
//     still delivers every record once per epoch;
//   * consumers.mode ranks: batch k at rank k % count only, equal batch counts, the incomplete
//     last round dropped, a rank attached twice or out of range refused;
//   * consumers.mode shared: four consumer processes share the batches without overlap;
//   * ringfeedctl list / status / dump against a running daemon.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "format/example_builder.h"
#include "format/tfrecord_writer.h"
#include "shm/ring_layout.h"
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

// All ids of the batches of one epoch, sorted.
std::vector<int64_t> EpochIds(const std::vector<BatchInfo>& batches, uint64_t epoch) {
  std::vector<int64_t> ids;
  for (const BatchInfo& b : batches) {
    if (b.epoch == epoch) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<int64_t> Iota(int64_t first, int64_t count) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::string Describe(const std::vector<BatchInfo>& batches) {
  std::ostringstream s;
  for (const BatchInfo& b : batches) s << b.ToLine() << "\n";
  return s.str();
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
            if (FloatBits(got) != GoldenFloatBits(expected[k])) mismatch(where + " " + spec.name + ": " + std::to_string(got));
          } else {
            const std::string got(t.string(begin + k));
            if (got != Base64Decode(expected[k].get<std::string>())) mismatch(where + " " + spec.name + ": '" + got + "'");
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

TEST_CASE("determinism: the batch sequence is the same whatever readers and workers") {
  TempDir dir;
  const int64_t sizes[] = {53, 17, 80, 1, 44, 29, 61};
  int64_t total = 0;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    WriteIdFile(dir.file("part-" + std::to_string(i) + ".tfrecord"), total, sizes[i],
                i % 2 == 0 ? Compression::kGzip : Compression::kNone);
    total += sizes[i];
  }
  REQUIRE(total == 285);
  auto config = [&](const std::string& job, int workers, int readers, bool deterministic) {
    return "job: " + job + "\n"
           "source: {files: [\"" + dir.file("part-*.tfrecord") + "\"]}\n"
           "features:\n" + IdFeaturesYaml() +
           "batch: {size: 10}\n"
           "shuffle: {files: true, buffer: 64, seed: 1234}\n"
           "epochs: 2\n"
           "pipeline: {cycle_length: 3, workers: " + std::to_string(workers) + ", readers: " +
           std::to_string(readers) + "}\n"
           "deterministic: " + (deterministic ? "true" : "false") + "\n";
  };
  auto run = [&](const std::string& job, int workers, int readers, bool deterministic) {
    DaemonProcess daemon(dir.path(), job, config(job, workers, readers, deterministic));
    RINGFEED_REQUIRE_STARTED(daemon, WithArgs({"--exit-when-done"}));
    ConsumerSpec spec;
    spec.client = daemon.client_options();
    ConsumerReport report = ConsumeInProcess(spec);
    INFO("ringfeedd stderr:\n" << daemon.Stderr());
    REQUIRE(report.end == "end");
    const auto status = daemon.Wait();
    REQUIRE(status);
    CHECK(status->ToString() == "exit 0");
    return report.batches;
  };

  const std::vector<BatchInfo> one = run("det-w1-r1", 1, 1, true);
  const std::vector<BatchInfo> four = run("det-w4-r4", 4, 4, true);
  const std::vector<BatchInfo> again = run("det-w4-r4-again", 4, 4, true);
  REQUIRE(one.size() == 2 * 29);  // 285 records: 28 batches of 10 and one of 5 per epoch
  CHECK(Describe(four) == Describe(one));
  CHECK(four == one);
  CHECK(again == one);
  for (uint64_t e = 0; e < 2; ++e) CHECK(EpochIds(one, e) == Iota(0, total));
  // Shuffled, and differently in each epoch.
  std::vector<int64_t> order[2];
  for (const BatchInfo& b : one) order[b.epoch].insert(order[b.epoch].end(), b.ids.begin(), b.ids.end());
  const std::vector<int64_t>& epoch0 = order[0];
  const std::vector<int64_t>& epoch1 = order[1];
  CHECK(epoch0 != Iota(0, total));
  CHECK(epoch0 != epoch1);
  for (size_t i = 0; i < one.size(); ++i) {
    CHECK(one[i].index == i % 29);
    CHECK(one[i].rows == (i % 29 == 28 ? 5u : 10u));
    CHECK(one[i].flags == (i == 28 ? shm::kBatchEndOfEpoch : i == 57 ? (shm::kBatchEndOfEpoch | shm::kBatchEndOfData) : 0u));
  }

  SECTION("deterministic: false still delivers every record once per epoch") {
    const std::vector<BatchInfo> loose = run("det-loose", 4, 4, false);
    std::set<std::pair<uint64_t, uint64_t>> indices;
    for (const BatchInfo& b : loose) indices.insert({b.epoch, b.index});
    CHECK(indices.size() == loose.size());
    CHECK(loose.size() == 2 * 29);
    for (uint64_t e = 0; e < 2; ++e) CHECK(EpochIds(loose, e) == Iota(0, total));
  }
}

TEST_CASE("consumers.mode ranks: batch k only at rank k % 2, same counts, the incomplete last round dropped") {
  TempDir dir;
  // 99 records in file order (cycle_length 1, no shuffle): batch k of an epoch holds ids
  // 4k..4k+3; 24 full batches and one of 3 = 12 rounds of 2 and one incomplete round.
  const int64_t sizes[] = {20, 20, 20, 20, 19};
  int64_t total = 0;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    WriteIdFile(dir.file("r-" + std::to_string(i) + ".tfrecord"), total, sizes[i]);
    total += sizes[i];
  }
  const std::string config = "job: ranks-job\n"
                             "source: {files: [\"" + dir.file("r-*.tfrecord") + "\"]}\n"
                             "features:\n" + IdFeaturesYaml() +
                             "batch: {size: 4}\n"
                             "epochs: 2\n"
                             "pipeline: {cycle_length: 1}\n"
                             "consumers: {mode: ranks, count: 2}\n";
  DaemonProcess daemon(dir.path(), "ranks-job", config);
  RINGFEED_REQUIRE_STARTED(daemon);

  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ConsumerSpec spec;
    spec.client = daemon.client_options(rank);
    spec.wait_for_go = true;
    ranks.push_back(std::make_unique<ChildProcess>([spec](ChildIo& io) { return RunConsumer(spec, io); }));
    REQUIRE(ranks.back()->WaitForLine("attached"));
  }

  // While both are attached: rank 1 again, and a rank out of range.
  try {
    Client::Attach(daemon.client_options(1));
    FAIL("a second consumer for rank 1 was accepted");
  } catch (const ClientError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 1 is already attached by pid " + std::to_string(ranks[1]->pid())));
  }
  try {
    Client::Attach(daemon.client_options(5));
    FAIL("rank 5 was accepted with consumers.count 2");
  } catch (const ClientError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 5 is out of range"));
    CHECK_THAT(e.what(), Catch::Contains("consumers.count is 2"));
  }

  for (auto& child : ranks) child->Send("go");
  std::vector<ConsumerReport> reports;
  for (auto& child : ranks) reports.push_back(CollectConsumer(*child));
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  for (int rank = 0; rank < 2; ++rank) {
    const ConsumerReport& report = reports[static_cast<size_t>(rank)];
    INFO("rank " << rank << " error: " << report.error << "\n" << Describe(report.batches));
    REQUIRE(report.end == "end");
    REQUIRE(report.batches.size() == 24);  // 12 per epoch
    for (size_t i = 0; i < report.batches.size(); ++i) {
      const BatchInfo& b = report.batches[i];
      const uint64_t epoch = i / 12, j = i % 12, k = 2 * j + static_cast<uint64_t>(rank);
      CHECK(b.epoch == epoch);
      CHECK(b.index == k);
      CHECK(b.rows == 4);
      CHECK(b.ids == Iota(static_cast<int64_t>(4 * k), 4));
      const uint32_t flags = j == 11 ? (shm::kBatchEndOfEpoch | (epoch == 1 ? shm::kBatchEndOfData : 0)) : 0;
      CHECK(b.flags == flags);
    }
  }
  for (uint64_t e = 0; e < 2; ++e) {
    std::vector<BatchInfo> both = reports[0].batches;
    both.insert(both.end(), reports[1].batches.begin(), reports[1].batches.end());
    CHECK(EpochIds(both, e) == Iota(0, 96));  // ids 96..98, the incomplete round, dropped
  }
  const json status = daemon.Status();
  CHECK(status["errors"]["batches_dropped"] == 2);
  CHECK(status["state"] == "end_of_data");
  CHECK(status["batches"] == 48);
  CHECK(status["records"] == 192);
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("consumers.mode shared: four consumer processes, disjoint batches, every record once per epoch") {
  TempDir dir;
  WriteIdFile(dir.file("s-a.tfrecord"), 0, 7);
  WriteIdFile(dir.file("s-b.tfrecord"), 7, 5, Compression::kGzip);
  WriteIdFile(dir.file("s-c.tfrecord"), 12, 0);
  auto config = [&](const std::string& job) {
    return "job: " + job + "\n"
           "source: {files: [\"" + dir.file("s-*.tfrecord") + "\"]}\n"
           "features:\n" + IdFeaturesYaml() +
           "batch: {size: 2}\n"
           "epochs: 2\n";
  };
  auto consume = [&](DaemonProcess& daemon, size_t count) {
    std::vector<std::unique_ptr<ChildProcess>> children;
    for (size_t i = 0; i < count; ++i) {
      ConsumerSpec spec;
      spec.client = daemon.client_options();
      spec.wait_for_go = true;
      children.push_back(std::make_unique<ChildProcess>([spec](ChildIo& io) { return RunConsumer(spec, io); }));
      REQUIRE(children.back()->WaitForLine("attached"));
    }
    for (auto& child : children) child->Send("go");
    std::vector<ConsumerReport> reports;
    for (auto& child : children) reports.push_back(CollectConsumer(*child));
    return reports;
  };
  auto check = [&](const std::vector<ConsumerReport>& reports) {
    std::vector<BatchInfo> all;
    for (const ConsumerReport& r : reports) {
      INFO("consumer error: " << r.error);
      CHECK(r.end == "end");  // kEndOfData for every consumer, also one that got nothing
      CHECK(r.status.ToString() == "exit 0");
      all.insert(all.end(), r.batches.begin(), r.batches.end());
    }
    INFO(Describe(all));
    CHECK(all.size() == 12);
    std::set<std::pair<uint64_t, uint64_t>> indices;
    for (const BatchInfo& b : all) {
      indices.insert({b.epoch, b.index});
      CHECK(b.rows == 2);
    }
    CHECK(indices.size() == all.size());
    for (uint64_t e = 0; e < 2; ++e) CHECK(EpochIds(all, e) == Iota(0, 12));
  };

  SECTION("the daemon keeps serving after the end of the data") {
    DaemonProcess daemon(dir.path(), "shared-job", config("shared-job"));
    RINGFEED_REQUIRE_STARTED(daemon);
    const auto reports = consume(daemon, 4);
    INFO("ringfeedd stderr:\n" << daemon.Stderr());
    check(reports);
    CHECK(daemon.running());
    const json status = daemon.Status();
    CHECK(status["state"] == "end_of_data");
    CHECK(status["batches"] == 12);
    CHECK(status["records"] == 24);
    CHECK(status["consumers"].empty());
    CHECK(daemon.Stderr().find("all epochs produced") != std::string::npos);
    // A consumer attaching now learns that the data has ended.
    ConsumerSpec late;
    late.client = daemon.client_options();
    CHECK(ConsumeInProcess(late).end == "end");
    CHECK(daemon.Stop().ToString() == "exit 0");
  }
  SECTION("--exit-when-done ends the daemon once every batch is released") {
    DaemonProcess daemon(dir.path(), "shared-done", config("shared-done"));
    RINGFEED_REQUIRE_STARTED(daemon, WithArgs({"--exit-when-done"}));
    const auto reports = consume(daemon, 4);
    INFO("ringfeedd stderr:\n" << daemon.Stderr());
    check(reports);
    const auto status = daemon.Wait();
    REQUIRE(status);
    CHECK(status->ToString() == "exit 0");
  }
}

TEST_CASE("ringfeedctl list, status and dump against a running daemon") {
  TempDir dir;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  {
    TFRecordWriter writer(dir.file("special.tfrecord"));
    ExampleBuilder b;
    writer.Write(b.AddFloat("x", {1.5f, nan}).AddFloat("v", {inf}).AddBytes("b", {"hello"}).AddInt64("i", {7}).Serialize());
    b.Clear();
    writer.Write(b.AddFloat("x", {-inf, 0.25f}).AddFloat("v", std::span<const float>()).AddBytes("b", {"", "ab"}).AddInt64("i", {-3}).Serialize());
    b.Clear();
    writer.Write(b.AddFloat("x", {2, 3}).AddFloat("v", {1, -2, 0.5f}).AddBytes("b", {std::string_view("\xff\x00z", 3)}).AddInt64("i", {1}).Serialize());
    b.Clear();
    writer.Write(b.AddFloat("x", {4, 5}).AddFloat("v", {6}).AddBytes("b", std::span<const std::string_view>()).AddInt64("i", {int64_t{1} << 60}).Serialize());
    writer.Close();
  }
  const std::string job = "ctl-job";
  const std::string config = "job: " + job + "\n"
                             "source: {files: [\"" + dir.file("special.tfrecord") + "\"]}\n"
                             "features:\n"
                             "  x: {type: fixed, dtype: float32, shape: [2]}\n"
                             "  v: {type: varlen, dtype: float32}\n"
                             "  b: {type: varlen, dtype: bytes}\n"
                             "  i: {type: fixed, dtype: int64}\n"
                             "batch: {size: 2}\n"
                             "epochs: 0\n";
  DaemonProcess daemon(dir.path(), job, config);
  RINGFEED_REQUIRE_STARTED(daemon);
  const std::string pid = std::to_string(daemon.pid());
  const std::string me = std::to_string(::getpid());

  // A consumer (this process) that takes nothing, so dump sees batches 0 and 1 below.
  auto client = Client::Attach(daemon.client_options());

  const CommandResult list = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
  INFO("list:\n" << list.out << list.err);
  CHECK(list.status.ToString() == "exit 0");
  CHECK_THAT(list.out, Catch::Contains("JOB") && Catch::Contains("STATE") && Catch::Contains("PID"));
  CHECK_THAT(list.out, Catch::Contains(job) && Catch::Contains("running") && Catch::Contains(pid));

  const CommandResult table = RunCommand({CtlBinary(), "status", job, "--runtime-dir", daemon.runtime_dir()});
  INFO("status:\n" << table.out << table.err);
  CHECK(table.status.ToString() == "exit 0");
  CHECK_THAT(table.out, Catch::Contains("job        " + job + "   (pid " + pid + ", config " + daemon.config_path()));
  CHECK_THAT(table.out, Catch::Contains("state      running"));
  CHECK_THAT(table.out, Catch::Contains("consumers  1 attached"));
  CHECK_THAT(table.out, Catch::Contains("id " + std::to_string(client->consumer_id()) + " pid " + me + ":"));

  const json status = daemon.Status();
  CHECK(status["type"] == "status");
  CHECK(status["job"] == job);
  CHECK(status["state"] == "running");
  CHECK(status["pid"] == daemon.pid());
  CHECK(status["config"] == daemon.config_path());
  CHECK(status["epochs"] == 0);
  REQUIRE(status["consumers"].size() == 1);
  CHECK(status["consumers"][0]["pid"] == ::getpid());
  CHECK(status["consumers"][0]["id"] == client->consumer_id());
  CHECK(status["consumers"][0]["rank"].is_null());
  CHECK(status["batches_reclaimed"] == 0);

  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  const CommandResult dump = RunCommand({CtlBinary(), "dump", job, "--batches", "2", "--runtime-dir", daemon.runtime_dir()});
  INFO("dump:\n" << dump.out << dump.err);
  CHECK(dump.status.ToString() == "exit 0");
  std::vector<json> lines;
  std::istringstream in(dump.out);
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  REQUIRE(lines.size() == 2);
  const json want0 = json::parse(R"({"epoch":0,"batch":0,"size":2,"features":{
      "x":{"dtype":"float32","shape":[2,2],"values":[1.5,"nan","-inf",0.25]},
      "v":{"dtype":"float32","shape":[1],"values":["inf"],"row_splits":[0,1,1]},
      "b":{"dtype":"bytes","shape":[3],"values":["aGVsbG8=","","YWI="],"row_splits":[0,1,3]},
      "i":{"dtype":"int64","shape":[2],"values":[7,-3]}},
      "sources":[[0,0],[0,1]]})");
  const json want1 = json::parse(R"({"epoch":0,"batch":1,"size":2,"features":{
      "x":{"dtype":"float32","shape":[2,2],"values":[2.0,3.0,4.0,5.0]},
      "v":{"dtype":"float32","shape":[4],"values":[1.0,-2.0,0.5,6.0],"row_splits":[0,3,4]},
      "b":{"dtype":"bytes","shape":[1],"values":["/wB6"],"row_splits":[0,1,1]},
      "i":{"dtype":"int64","shape":[2],"values":[1,1152921504606846976]}},
      "sources":[[0,2],[0,3]]})");
  CHECK(lines[0] == want0);
  CHECK(lines[1] == want1);
  // The features in config order.
  std::vector<std::string> order;
  const auto first = nlohmann::ordered_json::parse(dump.out.substr(0, dump.out.find('\n')));
  for (const auto& [name, value] : first["features"].items()) order.push_back(name);
  CHECK(order == std::vector<std::string>{"x", "v", "b", "i"});

  client.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
  // A clean stop removes the socket, the lock and the segment.
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.segment_path()));
  const CommandResult after = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(after.out, Catch::Contains("no ringfeed jobs"));
}
