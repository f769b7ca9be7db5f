// ringfeedd's autotuner and budgets end to end, with real processes (tests/daemon_harness.h)
// and, for slow storage, a real FUSE mount (bench/slowfs, tests/slowfs_mount.h):
//   * memory: the daemon's private RSS plus its segment stay under pipeline.memory_budget for
//     a 30 s run over many epochs (sampled every 100 ms); a job that cannot fit refuses to start
//     with the arithmetic;
//   * on local files the tuner does not raise parallel reads (<= 2 files at once);
//   * on a slow mount (20 ms per read) it raises them and gains measured throughput over the
//     same job with readers: 1;
//   * fixed knobs are used exactly; ringfeedctl status shows the tuner's knobs, limits and
//     changes;
//   * on storage that stops answering (slowfs frozen with SIGSTOP) a SIGTERM still ends the
//     job within its 5 s grace, naming the blocked read.
// Under AddressSanitizer and ThreadSanitizer the memory assertions are skipped (their shadow
// memory is RSS that ringfeedd does not control) and the run is shorter; everything else is
// checked.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "format/example_builder.h"
#include "format/read_queue.h"
#include "format/tfrecord_writer.h"
#include "tests/daemon_harness.h"
#include "tests/slowfs_mount.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t StatusKiB(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string k;
  while (in >> k) {
    if (k == key + ":") {
      uint64_t v = 0;
      in >> v;
      return v;
    }
    std::getline(in, k);
  }
  return 0;
}

uint64_t FileBytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Whether /proc/PID/task/TID is one of io_uring's kernel workers: PF_IO_WORKER (0x10) in the
// flags, field 9 of proc(5)'s stat (the 7th after the ")" that ends the name).
bool IsIoWorker(const std::filesystem::path& task) {
  std::ifstream in(task / "stat");
  std::string stat;
  std::getline(in, stat);
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return false;
  std::istringstream fields(stat.substr(name_end + 1));
  std::string field;
  for (int i = 0; i < 7; ++i) fields >> field;
  constexpr unsigned long kPfIoWorker = 0x10;
  return !field.empty() && (std::stoul(field) & kPfIoWorker) != 0;
}

// A consumer child that takes and releases batches as fast as it can, reading every byte,
// until killed; it writes "attached" once and nothing else (no pipe to drain).
std::unique_ptr<ChildProcess> StartBusyConsumer(const DaemonProcess& daemon) {
  const ClientOptions options = daemon.client_options();
  return std::make_unique<ChildProcess>([options](ChildIo& io) {
    auto client = Client::Attach(options);
    io.WriteLine("attached");
    Batch batch;
    uint64_t sum = 0;
    for (;;) {
      const Client::Status s = client->Next(std::chrono::seconds(30), &batch);
      if (s != Client::Status::kBatch) break;
      for (size_t f = 0; f < batch.feature_count(); ++f) {
        const TensorView t = batch.feature(f);
        const auto* bytes = static_cast<const uint8_t*>(t.data());
        for (uint64_t i = 0; i < t.bytes(); i += 64) sum += bytes[i];
      }
    }
    return static_cast<int>(sum & 1);
  });
}

// Records of `payload` bytes (an int64 "id" and a bytes "blob").
void WriteBlobFile(const std::string& path, int64_t first_id, int64_t count, size_t payload) {
  TFRecordWriter writer(path);
  std::string blob(payload, '\0');
  for (int64_t i = 0; i < count; ++i) {
    for (size_t k = 0; k < payload; k += 97) blob[k] = static_cast<char>((first_id + i + static_cast<int64_t>(k)) & 0xff);
    ExampleBuilder b;
    b.AddInt64("id", {first_id + i});
    const std::string_view view(blob);
    b.AddBytes("blob", {&view, 1});
    writer.Write(b.Serialize());
  }
  writer.Close();
}

std::string BlobFeaturesYaml() {
  return "  id: {type: fixed, dtype: int64}\n"
         "  blob: {type: fixed, dtype: bytes}\n";
}

// A job over the files `pattern` names, of WriteBlobFile's features in batches of 16, then
// `extra` (whole YAML lines).
std::string BlobJobConfig(const std::string& job, const std::string& pattern, const std::string& compression,
                          const std::string& extra) {
  return "job: " + job + "\nsource: {files: [\"" + pattern + "\"], compression: " + compression +
         "}\nfeatures:\n" + BlobFeaturesYaml() + "batch: {size: 16}\n" + extra;
}

// Every batch of a job that ends (taken in this process, to its end): its rows' ids, sorted.
std::vector<int64_t> AllIdsSorted(const DaemonProcess& daemon) {
  ConsumerSpec spec;
  spec.client = daemon.client_options();
  const ConsumerReport report = ConsumeInProcess(spec);
  REQUIRE(report.end == "end");
  std::vector<int64_t> ids;
  for (const BatchInfo& b : report.batches) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Whether `mount` is up and io_uring can read files here; if not, says why the case skips.
bool QueuedReadsOn(const SlowMount& mount) {
  if (!mount.mounted()) {
    mount.PrintSkip();
    return false;
  }
  std::string why;
  if (!ReadQueue::Available(&why)) {
    Skip("io_uring cannot read files here: " + why);
    return false;
  }
  return true;
}

// Records per second published by the daemon between two status queries `seconds` apart.
double MeasureRate(const DaemonProcess& daemon, double seconds) {
  const json a = daemon.Status();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const json b = daemon.Status();
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(b["records"].get<uint64_t>() - a["records"].get<uint64_t>()) / dt;
}

}  // namespace

TEST_CASE("memory: private RSS + segment stay under pipeline.memory_budget for 30 s over many epochs") {
  TempDir dir;
  for (int f = 0; f < 8; ++f) WriteIdFile(dir.file("part-" + std::to_string(f) + ".tfrecord"), f * 5000, 5000);
  // Sanitizers' shadow memory makes the daemon's baseline RSS alone ~30 MiB: a bigger budget
  // there (the memory assertions are skipped under them anyway).
  const uint64_t budget = (kSanitized ? 512ull : 64ull) << 20;
  DaemonProcess daemon(dir.path(), "membudget",
                       "job: membudget\n"
                       "source: {files: [\"" + dir.file("part-*.tfrecord") + "\"]}\n"
                       "features:\n" + IdFeaturesYaml() +
                       "batch: {size: 64}\n"
                       "shuffle: {files: true, buffer: 20000, seed: 7}\n"
                       "epochs: 0\n"
                       "pipeline: {cycle_length: 4, memory_budget: " + std::to_string(budget >> 20) + "MiB}\n");
  RINGFEED_REQUIRE_STARTED(daemon);
  INFO(daemon.Stderr());
  auto consumer = StartBusyConsumer(daemon);
  REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));

  const double run_seconds = kSanitized ? 6 : 30;
  const auto start = Clock::now();
  uint64_t peak = 0;
  while (std::chrono::duration<double>(Clock::now() - start).count() < run_seconds) {
    const uint64_t anon = StatusKiB(daemon.pid(), "RssAnon") * 1024;
    const uint64_t segment = FileBytes(daemon.segment_path());
    peak = std::max(peak, anon + segment);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const json status = daemon.Status();
  INFO(status.dump(2));
  CHECK(status["epoch"].get<uint64_t>() >= (kSanitized ? 1u : 3u));  // many epochs went by
  CHECK(status["memory"]["budget_bytes"].get<uint64_t>() == budget);
  const json& autotune = status["autotune"];
  REQUIRE(autotune.is_object());
  CHECK(autotune["limits"]["memory_budget_bytes"].get<uint64_t>() == budget);
  CHECK(autotune["limits"]["read_ahead_budget_bytes"].get<uint64_t>() > 0);
  CHECK(autotune["knobs"]["readers"].get<int64_t>() >= 1);
  if (!kSanitized) {
    INFO("peak private RSS + segment " << peak << " bytes, budget " << budget);
    CHECK(peak <= budget);
    // RSS grows while the tuner adds readers and read-ahead (within the budget); a flat slope
    // over minutes is bench/autotune/soak.sh's to show.
  }
  daemon.Stop();
}

TEST_CASE("memory: the TFX taxi files (34 KB each) run within a 20 MiB budget, every record delivered") {
  // A 20 MiB budget was refused (29 MiB needed): the plan charged 1 MiB of window and 1 MiB of
  // compressed input per open file; the readers now size both to the largest file.
  const std::string tfx = TfxDirOrSkip();
  if (tfx.empty()) return;
  // The sanitizers' shadow memory alone is more than the budget (the plan counts the baseline).
  if (kSanitized) return;
  TempDir dir;
  std::string config = ReadFile(std::string(RINGFEED_SOURCE_DIR) + "/config/examples/taxi.yaml");
  const std::string files = "${TFX_DATA:-../shared/data/tfx}";
  REQUIRE(config.find(files) != std::string::npos);
  config.replace(config.find(files), files.size(), tfx);
  config.replace(config.find("job: taxi-train"), 15, "job: taxi-20mib");
  const std::string budget = "memory_budget: 512MiB";
  REQUIRE(config.find(budget) != std::string::npos);
  config.replace(config.find(budget), budget.size(), "memory_budget: 20MiB");
  DaemonProcess daemon(dir.path(), "taxi-20mib", config);
  RINGFEED_REQUIRE_STARTED(daemon);
  INFO(daemon.Stderr());
  auto consumer = StartBusyConsumer(daemon);
  REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
  const uint64_t limit = 20u << 20;
  uint64_t peak = 0;
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < 5) {
    peak = std::max(peak, StatusKiB(daemon.pid(), "RssAnon") * 1024 + FileBytes(daemon.segment_path()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const json status = daemon.Status();
  INFO(status.dump(2) << "\npeak private RSS + segment " << peak << " bytes");
  CHECK(status["epoch"].get<uint64_t>() >= 2);  // whole epochs of 9,909 records went by
  CHECK(status["records"].get<uint64_t>() >= 2 * 9909);
  CHECK(status["errors"]["last_error"].get<std::string>().empty());
  CHECK(peak <= limit);
  daemon.Stop();
}

TEST_CASE("memory: a job that cannot fit its budget refuses to start and shows the arithmetic") {
  TempDir dir;
  WriteIdFile(dir.file("part-0.tfrecord"), 0, 2000);
  DaemonProcess daemon(dir.path(), "toosmall",
                       "job: toosmall\n"
                       "source: {files: [\"" + dir.file("part-*.tfrecord") + "\"]}\n"
                       "features:\n" + IdFeaturesYaml() +
                       "batch: {size: 64}\n"
                       "shuffle: {buffer: 200000}\n"
                       "pipeline: {memory_budget: 12MiB}\n");
  REQUIRE_FALSE(daemon.Start());
  REQUIRE(daemon.exit_status());
  CHECK(daemon.exit_status()->exited);
  CHECK(daemon.exit_status()->code == 2);
  const std::string err = daemon.Stderr();
  INFO(err);
  CHECK(err.find("pipeline.memory_budget 12.0 MiB") != std::string::npos);
  CHECK(err.find("ring:") != std::string::npos);
  // A buffer above the 2000 records of the epoch is planned at those (TuningPlan::shuffle_buffer).
  CHECK(err.find("shuffle buffer: 2000 records (every record of this shard's epoch, counted at start: fewer than "
                 "shuffle.buffer 200000)") != std::string::npos);
  CHECK(err.find("needed at least") != std::string::npos);
  // `ringfeedctl check` makes the same plan and refuses the same way (exit 2), before any daemon.
  const CommandResult check = RunCommand({CtlBinary(), "check", daemon.config_path()});
  INFO(check.out << check.err);
  CHECK(check.status.ToString() == "exit 2");
  CHECK(check.out.find("job toosmall: 2000 records") != std::string::npos);
  CHECK(check.err.find("error: ringfeedd would refuse to start this job: ") != std::string::npos);
  CHECK(check.err.find("pipeline.memory_budget 12.0 MiB") != std::string::npos);
  CHECK(check.err.find("shuffle buffer: 2000 records (every record") != std::string::npos);
}

TEST_CASE("memory: the budget the error advises is enough, though ring.slots: auto grows with it") {
  TempDir dir;
  for (int i = 0; i < 40; ++i) WriteIdFile(dir.file("part-" + std::to_string(i) + ".tfrecord"), 50 * i, 50);
  auto config = [&](const std::string& budget) {
    return "job: advice\n"
           "source: {files: [\"" + dir.file("part-*.tfrecord") + "\"]}\n"
           "features:\n" + IdFeaturesYaml() +
           "ring: {slot_bytes: 8MiB}\n"
           // Memory beside the ring, so that the ring's half grows: 32 open files' windows.
           "pipeline: {cycle_length: 16, readers: 16, memory_budget: " + budget + "}\n";
  };
  DaemonProcess refused(dir.path(), "advice", config("1MiB"));
  REQUIRE_FALSE(refused.Start());
  REQUIRE(refused.exit_status());
  CHECK(refused.exit_status()->code == 2);
  const std::string err = refused.Stderr();
  INFO(err);
  const std::string key = "raise pipeline.memory_budget to at least ";
  const size_t at = err.find(key);
  REQUIRE(at != std::string::npos);
  const std::string advice = err.substr(at + key.size(), err.find_first_of(" ,", at + key.size()) - at - key.size());
  REQUIRE(advice.ends_with("MiB"));
  // One step: the advised budget starts, and so does every larger one (the plan gives up
  // prefetch slots before it refuses a job, so more budget never fails where less fits), as
  // `ringfeedctl check` plans it.
  DaemonProcess started(dir.path(), "advice", config(advice), "advised.yaml");
  RINGFEED_REQUIRE_STARTED(started);
  started.Stop();
  // ringfeedctl plans from its own start-up RSS; under a sanitizer that is ~0.5 MiB above the
  // daemon's (its runtime), enough to miss at the exact advice: the check starts above it there.
  const int64_t mib = std::stoll(advice);
  for (int64_t more = kSanitized ? 2 : 0; more <= 24; ++more) {
    const std::string path = dir.file("check-" + std::to_string(more) + ".yaml");
    WriteFile(path, config(std::to_string(mib + more) + "MiB"));
    const CommandResult check = RunCommand({CtlBinary(), "check", path});
    INFO(mib + more << " MiB:\n" << check.err);
    CHECK(check.status.ToString() == "exit 0");
  }
}

TEST_CASE("the most parse workers: 2 x cpu_budget rounded down, at least 2, at most 16 (the plan ringfeedctl check prints)") {
  TempDir dir;
  WriteIdFile(dir.file("part-0.tfrecord"), 0, 100);
  for (const auto& [cores, workers] : std::vector<std::pair<std::string, int>>{
           {"0.5", 2}, {"1", 2}, {"1.2", 2}, {"1.5", 3}, {"2.5", 5}, {"7.9", 15}, {"8", 16}, {"64", 16}}) {
    const std::string path = dir.file("cores-" + cores + ".yaml");
    WriteFile(path, "job: cores\nsource: {files: [\"" + dir.file("part-0.tfrecord") + "\"]}\nfeatures:\n" +
                        IdFeaturesYaml() + "batch: {size: 8}\npipeline: {cpu_budget: " + cores +
                        ", memory_budget: 1GiB}\n");
    const CommandResult check = RunCommand({CtlBinary(), "check", path});
    INFO("cpu_budget " << cores << ":\n" << check.out << check.err);
    CHECK(check.status.ToString() == "exit 0");
    CHECK_THAT(check.out, Catch::Contains("parse workers: up to " + std::to_string(workers) + " workers x "));
  }
}

TEST_CASE("without io_uring (a seccomp filter, as in Docker): reads_per_file stays at 1 and every record arrives") {
  TempDir dir;
  for (int f = 0; f < 3; ++f) WriteIdFile(dir.file("part-" + std::to_string(f) + ".tfrecord"), f * 3000, 3000);
  // auto (the tuner may not try queued reads) and fixed at 4 (read one read at a time, with a
  // warning saying why).
  for (const std::string reads : {"auto", "4"}) {
    const std::string job = "nouring" + reads;
    DaemonProcess daemon(dir.path(), job,
                         "job: " + job + "\n"
                         "source: {files: [\"" + dir.file("part-*.tfrecord") + "\"]}\n"
                         "features:\n" + IdFeaturesYaml() +
                         "batch: {size: 100}\n"
                         "epochs: 2\n"
                         "pipeline: {reads_per_file: " + reads + "}\n");
    DaemonStart start;
    start.wrapper = {RINGFEED_NO_IO_URING_BIN};
    RINGFEED_REQUIRE_STARTED(daemon, start);
    const std::string err = daemon.Stderr();
    INFO("reads_per_file " << reads << ", stderr:\n" << err);
    CHECK(err.find("io_uring is not available here (io_uring_queue_init: Operation not permitted)") !=
          std::string::npos);
    if (reads == "4") CHECK(err.find("[warning] pipeline.reads_per_file 4: io_uring is not available") != std::string::npos);
    const json s = daemon.Status();
    INFO(s.dump(2));
    CHECK(s["pipeline"]["reads_per_file"] == 1);
    if (reads == "auto") CHECK(s["autotune"]["limits"]["max_reads_per_file"] == 1);

    const std::vector<int64_t> ids = AllIdsSorted(daemon);
    REQUIRE(ids.size() == 2 * 9000u);  // 2 epochs of ids 0..8999, each once per epoch
    for (size_t i = 0; i < ids.size(); ++i) CHECK(ids[i] == static_cast<int64_t>(i / 2));
    daemon.Stop();
  }
}

TEST_CASE("read-ahead: auto starts at 256 KiB per file, or at 10 records of the sampled mean size, up to 1 MiB") {
  // Payloads of 10 KB (10 records: ~100 KB, below the minimum), 50 KB (~500 KB: rounded up to
  // 64 KiB steps, 512 KiB) and 200 KB (~2 MB: the 1 MiB ceiling). No consumer attaches, so the
  // tuner has nothing to deepen: the status shows where it started.
  const std::vector<std::pair<size_t, uint64_t>> cases = {{10'000, 256 << 10}, {50'000, 512 << 10},
                                                          {200'000, 1 << 20}};
  for (const auto& [payload, expected] : cases) {
    TempDir dir;
    for (int f = 0; f < 2; ++f) WriteBlobFile(dir.file("part-" + std::to_string(f) + ".tfrecord"), f * 40, 40, payload);
    const std::string job = "readahead" + std::to_string(payload);
    DaemonProcess daemon(dir.path(), job,
                         "job: " + job + "\n"
                         "source: {files: [\"" + dir.file("part-*.tfrecord") + "\"]}\n"
                         "features:\n" + BlobFeaturesYaml() +
                         "batch: {size: 8}\n"
                         // Room for 1 MiB per open file beside the ring (and, under the
                         // sanitizers, their shadow memory in the daemon's baseline RSS).
                         "pipeline: {memory_budget: " + std::string(kSanitized ? "1GiB" : "128MiB") + "}\n");
    RINGFEED_REQUIRE_STARTED(daemon);
    const json s = daemon.Status();
    INFO("payload " << payload << ": " << s.dump(2));
    CHECK(s["pipeline"]["read_ahead_per_file_bytes"].get<uint64_t>() == expected);
    daemon.Stop();
  }
}

TEST_CASE("a job that ends before the tuner's first interval: status measures the CPU over real time") {
  // Its last interval measured production's last stretch, 1 us or a few hundred, and the CPU of
  // the whole interval over it: status said 637 cores (helper-162).
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 50);
  DaemonProcess daemon(dir.path(), "ended-early", IdJobConfig("ended-early", dir.file("data.tfrecord"), "epochs: 1\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  json s;
  const bool measured = WaitUntil(
      [&] {
        s = daemon.Status();
        return s["autotune"]["measured"]["interval_seconds"].get<double>() > 0;
      },
      std::chrono::seconds(3));
  INFO(s["autotune"].dump(2));
  if (!measured) {
    // Production ended before the tuner's thread took its first snapshot (a loaded machine):
    // it measured nothing, and status shows no interval.
    WARN("no interval measured: the job ended before the tuner started");
    CHECK(s["autotune"]["measured"]["cpu_cores"].get<double>() == 0);
    return;
  }
  const double budget = s["autotune"]["limits"]["cpu_budget_cores"].get<double>();
  CHECK(s["autotune"]["measured"]["cpu_cores"].get<double>() <= budget * 1.05);
  daemon.Stop();
}

TEST_CASE("local files: the tuner reads at most 2 files in parallel; fixed knobs are used exactly") {
  TempDir dir;
  for (int f = 0; f < 8; ++f) WriteIdFile(dir.file("part-" + std::to_string(f) + ".tfrecord"), f * 20000, 20000);
  const std::string common = "source: {files: [\"" + dir.file("part-*.tfrecord") + "\"]}\n"
                             "features:\n" + IdFeaturesYaml() +
                             "batch: {size: 128}\n"
                             "epochs: 0\n";
  {
    DaemonProcess daemon(dir.path(), "localauto", "job: localauto\n" + common + "pipeline: {cycle_length: 4}\n");
    RINGFEED_REQUIRE_STARTED(daemon);
    auto consumer = StartBusyConsumer(daemon);
    REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
    int64_t most_readers = 0;
    const auto start = Clock::now();
    while (Clock::now() - start < std::chrono::seconds(kSanitized ? 4 : 8)) {
      const json s = daemon.Status();
      most_readers = std::max(most_readers, s["autotune"]["knobs"]["readers"].get<int64_t>());
      CHECK(s["pipeline"]["readers"].get<int64_t>() <= 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const json s = daemon.Status();
    INFO(s["autotune"].dump(2));
    CHECK(most_readers <= 2);
    // The CPU budget in cores: what the process used in the last interval, within it (this job
    // runs 1 reader and 1-2 workers on a machine of at least 2 cores).
    const double budget = s["autotune"]["limits"]["cpu_budget_cores"].get<double>();
    CHECK(budget >= 1);
    CHECK(s["autotune"]["measured"]["cpu_cores"].get<double>() > 0);
    CHECK(s["autotune"]["measured"]["cpu_cores"].get<double>() <= budget * 1.05);
    // The sequencer's own thread (interleave, batch assembly): some of it, within the whole.
    const double sequencer_cpu = s["autotune"]["measured"]["sequencer_cpu_fraction"].get<double>();
    CHECK(sequencer_cpu > 0.005);
    CHECK(sequencer_cpu <= s["autotune"]["measured"]["cpu_cores"].get<double>());
    CHECK(s["autotune"]["runnable_threads"].get<int64_t>() == std::llround(s["autotune"]["cpu_cores"].get<double>()));
    CHECK(s["records"].get<uint64_t>() > 0);
    daemon.Stop();
  }
  {
    DaemonProcess daemon(dir.path(), "localfixed",
                         "job: localfixed\n" + common +
                             "pipeline: {cycle_length: 4, readers: 3, workers: 2, prefetch: 5, read_ahead: 1MiB, "
                             "reads_per_file: 2}\n");
    RINGFEED_REQUIRE_STARTED(daemon);
    auto consumer = StartBusyConsumer(daemon);
    REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const json s = daemon.Status();
    INFO(s.dump(2));
    CHECK(s["pipeline"]["readers"] == 3);
    CHECK(s["pipeline"]["workers"] == 2);
    CHECK(s["pipeline"]["prefetch"] == 5);
    CHECK(s["pipeline"]["read_ahead_per_file_bytes"] == 1 << 20);
    CHECK(s["pipeline"]["reads_per_file"] == 2);
    CHECK(s["autotune"].is_null());  // nothing left to tune
    // Each thread is named after its role (top -H, perf): one per reader and worker. io_uring's
    // kernel workers (iou-wrk-N, PF_IO_WORKER) are left out: one just created carries the name of
    // the reader that submitted the read until it renames itself (seen under TSan in CI).
    std::multiset<std::string> names;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(daemon.pid()) + "/task")) {
      if (IsIoWorker(task.path())) continue;
      std::ifstream comm(task.path() / "comm");
      std::string name;
      std::getline(comm, name);
      names.insert(name);
    }
    std::string listed;
    for (const std::string& name : names) listed += name + " ";
    INFO("threads: " << listed);
    CHECK(names.count("rf-read-0") == 1);
    CHECK(names.count("rf-read-1") == 1);
    CHECK(names.count("rf-read-2") == 1);
    CHECK(names.count("rf-read-3") == 0);
    CHECK(names.count("rf-parse-0") == 1);
    CHECK(names.count("rf-parse-1") == 1);
    CHECK(names.count("rf-sequencer") == 1);
    CHECK(names.count("rf-heartbeat") == 1);
    CHECK(names.count("ringfeedd") >= 1);  // the main thread (the control socket); TSan adds one of its own
    daemon.Stop();
  }
}

TEST_CASE("status measures a trainer soon after it attaches, also after a long spell without one") {
  TempDir dir;
  WriteIdFile(dir.file("part-0.tfrecord"), 0, 20000);
  DaemonProcess daemon(dir.path(), "attachsoon",
                       IdJobConfig("attachsoon", dir.file("part-*.tfrecord"), "batch: {size: 128}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // No trainer: the ring fills, production waits, and the tuner's interval grows (up to 2 s).
  REQUIRE(WaitUntil([&] { return daemon.Status()["autotune"]["interval_seconds"].get<double>() >= 1.0; },
                    std::chrono::seconds(20)));
  auto consumer = StartBusyConsumer(daemon);
  REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
  const auto attached = Clock::now();
  // The attach ends the tuner's interval and a short one follows: status counts the trainer
  // and its records within a moment, not when the long interval would have ended (it said
  // "0 records/s, no trainer attached during that interval" for up to 2 s).
  json s;
  const bool seen = WaitUntil(
      [&] {
        s = daemon.Status();
        const json& m = s["autotune"]["measured"];
        return m["consumers"].get<int64_t>() >= 1 && m["records_per_second"].get<double>() > 0;
      },
      kEventually);
  const double after = std::chrono::duration<double>(Clock::now() - attached).count();
  INFO(s["autotune"].dump(2) << "\nseen " << after << " s after the attach");
  REQUIRE(seen);
  // Under a sanitizer `after` is mostly the idle sample, the interval and the ringfeedctl
  // execs, slowed 5-15x on saturated cores: no bound there says anything about the tuner.
  if (!kSanitized) CHECK(after < 0.8);
  daemon.Stop();
}

TEST_CASE("consumers that come and go every few milliseconds do not keep the tuner from observing") {
  TempDir dir;
  WriteIdFile(dir.file("part-0.tfrecord"), 0, 20000);
  DaemonProcess daemon(dir.path(), "flapping",
                       IdJobConfig("flapping", dir.file("part-*.tfrecord"),
                                   "batch: {size: 128}\nepochs: 0\nlog_level: debug\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  auto consumer = StartBusyConsumer(daemon);
  REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
  // Each interval the tuner observes logs one line ("autotune: 0.25 s, N records (...").
  const auto observed = [&] {
    const std::string err = daemon.Stderr();
    size_t n = 0;
    for (size_t at = err.find("autotune: "); at != std::string::npos; at = err.find("autotune: ", at + 1)) {
      n += err.compare(at + 10, 1, "0") == 0 || err.compare(at + 10, 1, "1") == 0;  // "autotune: 0.25 s, ..."
    }
    return n;
  };
  const size_t before = observed();
  // A second consumer attaches and leaves every ~20 ms (each attach ends an interval), for 2 s
  // and at least 20 times (round trips are slow under a sanitizer on saturated cores).
  const auto start = Clock::now();
  int flaps = 0;
  while ((flaps < 20 || Clock::now() - start < std::chrono::seconds(2)) && Clock::now() - start < kEventually) {
    Client::Attach(daemon.client_options()).reset();
    ++flaps;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const size_t during = observed() - before;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  INFO(flaps << " attaches in " << elapsed << " s; " << during << " intervals observed meanwhile");
  CHECK(flaps >= 20);
  // Intervals of 0.1 to 0.25 s while consumers come and go (4 to 10 a second): at least 2 a
  // second (4 in 2 s). An attach that discarded the interval would leave none.
  CHECK(during >= static_cast<size_t>(2 * elapsed));
  daemon.Stop();
}

TEST_CASE("slow mount (20 ms per read): the tuner raises parallel reads and gains throughput", "[slowfs]") {
  TempDir source;
  // 16 files x 48 records of 64 KiB: one 1 MiB read (one 20 ms request) holds 16 records, so
  // one reader delivers at most ~800 records/s and reads are the bottleneck by far.
  for (int f = 0; f < 16; ++f) WriteBlobFile(source.file("part-" + std::to_string(f) + ".tfrecord"), f * 48, 48, 64 << 10);
  SlowMount mount(source.path().string(), {"--latency-ms=20"});
  if (!mount.mounted()) {
    mount.PrintSkip();
    return;
  }
  TempDir dir;
  auto config = [&](const std::string& job, const std::string& pipeline) {
    return "job: " + job + "\n"
           "source: {files: [\"" + mount.path("part-*.tfrecord").string() + "\"]}\n"
           "features:\n" + BlobFeaturesYaml() +
           "batch: {size: 16}\n"
           "epochs: 0\n"
           "pipeline: {cycle_length: 2, " + pipeline + "}\n";
  };
  double fixed_rate = 0;
  {
    // One file read at a time, one read at a time.
    DaemonProcess daemon(dir.path(), "slowfixed", config("slowfixed", "readers: 1, reads_per_file: 1"));
    RINGFEED_REQUIRE_STARTED(daemon);
    auto consumer = StartBusyConsumer(daemon);
    REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
    std::this_thread::sleep_for(std::chrono::seconds(1));
    fixed_rate = MeasureRate(daemon, 3);
    // No read queued in this run, so none can be hedged: status says so.
    CHECK(daemon.Status()["pipeline"]["hedged_reads_state"] == "off");
    daemon.Stop();
  }
  DaemonProcess daemon(dir.path(), "slowauto", config("slowauto", "readers: auto"));
  RINGFEED_REQUIRE_STARTED(daemon);
  auto consumer = StartBusyConsumer(daemon);
  REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
  // Reads in parallel: files read at once x reads in flight per file (queued reads come first).
  REQUIRE(WaitUntil(
      [&] {
        const json k = daemon.Status()["autotune"]["knobs"];
        return k["readers"].get<int64_t>() * k["reads_per_file"].get<int64_t>() >= 4;
      },
      std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double auto_rate = MeasureRate(daemon, 3);
  const json s = daemon.Status();
  INFO(s["autotune"].dump(2) << "\nreaders: 1 -> " << fixed_rate << " records/s; auto -> " << auto_rate);
  // 2.2x in Release builds here, 2.0x under ASan. (Until session 11 the bar was 2x; since then
  // the fixed job also starts with a read-ahead of 10 of its 64 KiB records, 704 KiB instead
  // of 256 KiB, and is faster by itself.)
  CHECK(auto_rate >= 1.5 * fixed_rate);
  bool raised = false;
  for (const json& c : s["autotune"]["changes"]) {
    raised |= (c["knob"] == "readers" || c["knob"] == "reads_per_file") && c["to"] > c["from"];
  }
  CHECK(raised);
  CHECK(s["autotune"]["blocked_io_threads"].get<int64_t>() >= 1);
  daemon.Stop();
}

TEST_CASE("slow mount: a GZIP job's reads are queued by the tuner too, and every record arrives", "[slowfs]") {
  // 6 GZIP files of 24 incompressible records of 64 KiB (1.5 MiB each): two 1 MiB reads a file
  // one at a time, six 256 KiB blocks queued. The tuner raises reads_per_file for them as for
  // plain files (until session 44 `auto` kept compressed files at one read at a time).
  TempDir source;
  uint64_t state = 0x2545F4914F6CDD1Dull;
  for (int f = 0; f < 6; ++f) {
    WriterOptions gzip;
    gzip.compression = Compression::kGzip;
    TFRecordWriter writer(source.file("part-" + std::to_string(f) + ".tfrecord.gz"), gzip);
    std::string blob(64 << 10, '\0');
    for (int64_t i = 0; i < 24; ++i) {
      for (char& c : blob) {  // xorshift64: incompressible
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        c = static_cast<char>(state);
      }
      ExampleBuilder b;
      b.AddInt64("id", {f * 24 + i});
      const std::string_view view(blob);
      b.AddBytes("blob", {&view, 1});
      writer.Write(b.Serialize());
    }
    writer.Close();
  }
  SlowMount mount(source.path().string(), {"--latency-ms=20"});
  if (!QueuedReadsOn(mount)) return;
  TempDir dir;
  DaemonProcess daemon(dir.path(), "slowgzip",
                       BlobJobConfig("slowgzip", mount.path("part-*.tfrecord.gz").string(), "gzip",
                                     "epochs: 40\npipeline: {cycle_length: 2}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  CHECK(daemon.Status()["autotune"]["limits"]["max_reads_per_file"] == 16);
  const std::vector<int64_t> ids = AllIdsSorted(daemon);
  // 40 epochs (360 MiB: long enough for the tuner's first rounds) of ids 0..143, each once per epoch.
  REQUIRE(ids.size() == 40 * 144u);
  size_t misplaced = 0;
  for (size_t i = 0; i < ids.size(); ++i) misplaced += ids[i] != static_cast<int64_t>(i / 40);
  CHECK(misplaced == 0);
  const json s = daemon.Status();
  INFO(s["autotune"].dump(2));
  bool queued = false;
  for (const json& c : s["autotune"]["changes"]) queued |= c["knob"] == "reads_per_file" && c["to"] > 1;
  CHECK(queued);
  daemon.Stop();
}

TEST_CASE("stragglers on slow storage: late queued reads are sent again, and status counts them", "[slowfs]") {
  TempDir source;
  for (int f = 0; f < 4; ++f) WriteBlobFile(source.file("part-" + std::to_string(f) + ".tfrecord"), f * 400, 400, 16 << 10);
  // 5 ms a read, one in 20 takes 200 ms more: each would stop its file's records for 200 ms.
  SlowMount mount(source.path().string(), {"--latency-ms=5", "--tail-latency-ms=200", "--tail-fraction=0.05"});
  if (!QueuedReadsOn(mount)) return;
  TempDir dir;
  DaemonProcess daemon(dir.path(), "stragglers",
                       BlobJobConfig("stragglers", mount.path("part-*.tfrecord").string(), "none",
                                     "epochs: 0\npipeline: {readers: 2, reads_per_file: 8, cycle_length: 2}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  auto consumer = StartBusyConsumer(daemon);
  REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));
  json pipeline;
  const bool won = WaitUntil(
      [&] {
        pipeline = daemon.Status()["pipeline"];
        return pipeline["hedged_reads_won"].get<uint64_t>() >= 2;
      },
      std::chrono::seconds(30));
  INFO(pipeline.dump());
  CHECK(won);
  CHECK(pipeline["hedged_reads"].get<uint64_t>() >= pipeline["hedged_reads_won"].get<uint64_t>());
  // The mean round trip the hedges go by: about the 5 ms latency, not the stragglers' 205 ms.
  CHECK(pipeline["queued_read_round_trip_seconds"].get<double>() > 0.004);
  CHECK(pipeline["queued_read_round_trip_seconds"].get<double>() < 0.1);
  CHECK(pipeline["hedged_reads_state"] == "on");  // hedges winning keep their tokens
  const std::string table = RunCommand({CtlBinary(), "status", "stragglers", "--runtime-dir", daemon.runtime_dir()}).out;
  INFO(table);
  CHECK_THAT(table, Catch::Contains("late reads sent again (mean round trip "));
  const uint64_t records_with_hedges = daemon.Status()["records"].get<uint64_t>();
  consumer.reset();
  daemon.Stop();

  // The same job with `pipeline.hedged_reads: false`: as many records read, none sent again.
  DaemonProcess off(dir.path(), "stragglers-off",
                    "job: stragglers-off\nsource: {files: [\"" + mount.path("part-*.tfrecord").string() +
                        "\"], compression: none}\nfeatures:\n" + BlobFeaturesYaml() +
                        "batch: {size: 16}\nepochs: 0\npipeline: {readers: 2, reads_per_file: 8, cycle_length: 2, "
                        "hedged_reads: false}\n");
  RINGFEED_REQUIRE_STARTED(off);
  auto off_consumer = StartBusyConsumer(off);
  REQUIRE(off_consumer->ReadLine() == std::optional<std::string>("attached"));
  json off_status;
  CHECK(WaitUntil(
      [&] {
        off_status = off.Status();
        return off_status["records"].get<uint64_t>() >= records_with_hedges;
      },
      std::chrono::seconds(60)));
  INFO(off_status["pipeline"].dump());
  CHECK(off_status["pipeline"]["hedged_reads"] == 0);
  CHECK(off_status["pipeline"]["hedged_reads_state"] == "off");
  off_consumer.reset();
  off.Stop();
}

TEST_CASE("a stop while start-up lists and samples files on slow storage: exit 0 at once, the lock file removed",
          "[slowfs]") {
  TempDir source;
  for (int f = 0; f < 4; ++f) WriteBlobFile(source.file("part-" + std::to_string(f) + ".tfrecord"), f * 200, 200, 16 << 10);
  // 3 s a FUSE request: a read() blocked in one runs the stop's handler only when it returns,
  // after every request the kernel split it into (helper-146: 58 s for one 1 MiB read at 30 s a
  // request). The sampling now runs on a thread of its own: the stop is handled at once, and the
  // process ends once the request in flight is answered (FUSE waits for that even for a kill).
  SlowMount mount(source.path().string(), {"--latency-ms=3000"});
  if (!mount.mounted()) {
    mount.PrintSkip();
    return;
  }
  TempDir dir;
  DaemonProcess daemon(dir.path(), "early-stop",
                       "job: early-stop\nsource: {files: [\"" + mount.path("part-*.tfrecord").string() +
                           "\"]}\nfeatures:\n" + BlobFeaturesYaml() + "batch: {size: 16}\n");
  DaemonStart brief;
  brief.timeout = std::chrono::milliseconds(300);
  REQUIRE_FALSE(daemon.Start(brief));  // still sampling: 3 s a read
  REQUIRE(daemon.running());
  REQUIRE(WaitUntil([&] { return ReadFile(daemon.lock_path()) == std::to_string(daemon.pid()) + "\n"; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE_FALSE(std::filesystem::exists(daemon.socket_path()));  // the ring and socket are not made yet
  const auto stop = Clock::now();
  daemon.Kill(SIGTERM);
  CHECK(daemon.WaitForStderr("ringfeedd: stopped by SIGTERM during start-up", std::chrono::seconds(8)));
  CHECK(Clock::now() - stop < std::chrono::milliseconds(1500));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));  // removed by the handler, at once
  const auto status = daemon.Wait();
  REQUIRE(status);
  INFO(daemon.Stderr());
  CHECK(status->ToString() == "exit 0");
  CHECK(Clock::now() - stop < std::chrono::seconds(5));
  CHECK_THAT(daemon.Stderr(), Catch::Contains("[info] ringfeedd: stopped by SIGTERM during start-up (before the ring "
                                              "was made: nothing else to clean up)"));
  // Written by the signal handler, timed as the logger's lines are (under systemd: info's priority).
  const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  CHECK_THAT(daemon.Stderr(), Catch::Matches(std::string(R"(([\s\S]*\n)?)") +
                                             (journal ? "<6>" : R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} )") +
                                             R"(\[info\] ringfeedd: stopped by SIGTERM during start-up [\s\S]*)"));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
}

TEST_CASE("the lock file removed while start-up samples slow storage: made again, or the start gives way to the "
          "daemon that took the job meanwhile",
          "[slowfs]") {
  TempDir source;
  for (int f = 0; f < 4; ++f) WriteBlobFile(source.file("part-" + std::to_string(f) + ".tfrecord"), f * 200, 200, 16 << 10);
  SlowMount mount(source.path().string(), {"--latency-ms=400"});
  if (!mount.mounted()) {
    mount.PrintSkip();
    return;
  }
  const std::string config = "job: relock\nsource: {files: [\"" + mount.path("part-*.tfrecord").string() +
                             "\"]}\nfeatures:\n" + BlobFeaturesYaml() + "batch: {size: 16}\nepochs: 0\n";
  const bool second_daemon = GENERATE(false, true);
  INFO((second_daemon ? "a second daemon starts meanwhile" : "no other daemon"));
  TempDir dir;
  DaemonProcess first(dir.path(), "relock", config);
  DaemonStart brief;
  brief.timeout = std::chrono::milliseconds(300);
  REQUIRE_FALSE(first.Start(brief));  // still sampling: 400 ms a read
  REQUIRE(WaitUntil([&] { return ReadFile(first.lock_path()) == std::to_string(first.pid()) + "\n"; }));
  REQUIRE(std::filesystem::remove(first.lock_path()));
  if (!second_daemon) {
    INFO(first.Stderr());
    REQUIRE(first.WaitForStderr("] ready: socket "));
    CHECK_THAT(first.Stderr(), Catch::Contains("the lock file " + first.lock_path() +
                                               " was removed while ringfeedd started (by hand, or by a cleaner of old "
                                               "files): made it again"));
    CHECK(ReadFile(first.lock_path()) == std::to_string(first.pid()) + "\n");
    CHECK(first.Stop().ToString() == "exit 0");
    CHECK_FALSE(std::filesystem::exists(first.lock_path()));
    return;
  }
  // The second takes the job's lock while the first still samples; the first, done sampling,
  // gives way (before, it took the second's segment and socket names: two daemons, one job).
  DaemonProcess second(dir.path(), "relock", config, "second.yaml");
  REQUIRE_FALSE(second.Start(brief));  // sampling too
  REQUIRE(WaitUntil([&] { return ReadFile(second.lock_path()) == std::to_string(second.pid()) + "\n"; }));
  const auto status = first.Wait();
  REQUIRE(status);
  INFO("first stderr:\n" << first.Stderr());
  CHECK(status->ToString() == "exit 1");
  CHECK_THAT(first.Stderr(), Catch::Contains("the lock file " + first.lock_path() +
                                             " was removed while ringfeedd started (by hand, or by a cleaner of old "
                                             "files), and another process took the job's lock meanwhile"));
  INFO("second stderr:\n" << second.Stderr());
  REQUIRE(second.WaitForStderr("] ready: socket "));
  CHECK(second.Status()["pid"] == second.pid());
  CHECK(second.Stop().ToString() == "exit 0");
  CHECK_THAT(second.Stderr(), !Catch::Contains("was replaced"));
}

TEST_CASE("storage that stops answering: a stop names the blocked call and removes the segment within 5 s",
          "[slowfs]") {
  TempDir source;
  for (int f = 0; f < 4; ++f) WriteBlobFile(source.file("part-" + std::to_string(f) + ".tfrecord"), f * 200, 200, 16 << 10);
  SlowMount mount(source.path().string(), {"--latency-ms=1"});
  if (!mount.mounted()) {
    mount.PrintSkip();
    return;
  }
  TempDir dir;
  DaemonProcess daemon(dir.path(), "hung",
                       "job: hung\n"
                       "source: {files: [\"" + mount.path("part-*.tfrecord").string() + "\"]}\n"
                       "features:\n" + BlobFeaturesYaml() +
                       "batch: {size: 16}\n"
                       "epochs: 0\n"
                       "pipeline: {readers: 1, reads_per_file: 1, workers: 1, read_ahead: 64KiB}\n");
  RINGFEED_REQUIRE_STARTED(daemon);
  auto consumer = StartBusyConsumer(daemon);
  REQUIRE(consumer->ReadLine() == std::optional<std::string>("attached"));

  // The storage stops answering: slowfs frozen, so the reader's next read (or the next file's
  // open) waits in the kernel. The consumer drains the ring, so the reader reads on.
  REQUIRE(::kill(mount.pid(), SIGSTOP) == 0);
  struct Thaw {
    pid_t pid;
    ~Thaw() { ::kill(pid, SIGCONT); }  // before the mount's destructor unmounts
  } thaw{mount.pid()};
  std::this_thread::sleep_for(std::chrono::seconds(1));

  const auto stop = Clock::now();
  daemon.Kill(SIGTERM);
  // The job started again meanwhile (over local files): the new daemon waits for the old one
  // to go, instead of refusing it as "already running"; it goes at the grace's end.
  REQUIRE(WaitUntil([&] { return ReadFile(daemon.lock_path()) == std::to_string(daemon.pid()) + " stopping\n"; }));
  TempDir local;
  WriteBlobFile(local.file("part-0.tfrecord"), 0, 20, 1 << 10);
  DaemonProcess again(dir.path(), "hung",
                      "job: hung\nsource: {files: [\"" + local.file("part-0.tfrecord") + "\"]}\nfeatures:\n" +
                          BlobFeaturesYaml() + "batch: {size: 4}\nepochs: 0\n",
                      "hung-again.yaml");
  DaemonStart patient;
  patient.timeout = std::chrono::seconds(20);
  RINGFEED_REQUIRE_STARTED(again, patient);
  CHECK_THAT(again.Stderr(), Catch::Contains("the job's previous ringfeedd (pid " + std::to_string(daemon.pid()) +
                                             ") is stopping: waiting for it to exit (at most 300 s)") &&
                                 Catch::Contains("the previous ringfeedd let go of the job's lock"));
  REQUIRE(daemon.WaitForStderr("the storage does not answer", std::chrono::seconds(15)));
  const double took = std::chrono::duration<double>(Clock::now() - stop).count();
  const std::string err = daemon.Stderr();
  INFO(err);
  CHECK(took >= 4.5);
  CHECK(took < 10);
  CHECK_THAT(err, Catch::Contains("stopping: still blocked 5 s after the stop in "));
  CHECK_THAT(err, Catch::Contains(mount.path("part-").string()));
  // Its segment, socket and lock were removed before the message was written: the new
  // daemon, which started once the lock was gone, serves at the same names.
  CHECK(ReadFile(daemon.lock_path()) == std::to_string(again.pid()) + "\n");
  CHECK(again.Status()["pid"] == again.pid());
  CHECK(std::filesystem::exists(again.segment_path()));
  // The process ends as soon as the kernel lets its blocked thread go (a FUSE request that
  // slowfs had already taken waits for its answer).
  ::kill(mount.pid(), SIGCONT);
  const auto status = daemon.Wait();
  REQUIRE(status);
  CHECK(status->exited);
  CHECK(status->code == 1);
}

TEST_CASE("status names a read that storage has not answered for a second or more", "[slowfs]") {
  // The stages' busy figures count a read once it returns: a read blocked for long showed as
  // "readers 0% busy" with nothing naming the file (helper-146).
  TempDir source;
  for (int f = 0; f < 2; ++f) WriteBlobFile(source.file("part-" + std::to_string(f) + ".tfrecord"), f * 48, 48, 16 << 10);
  SlowMount mount(source.path().string(), {"--latency-ms=1500"});
  if (!mount.mounted()) {
    mount.PrintSkip();
    return;
  }
  TempDir dir;
  DaemonProcess daemon(dir.path(), "stalled",
                       BlobJobConfig("stalled", mount.path("part-*.tfrecord").string(), "none",
                                     "epochs: 0\npipeline: {readers: 1, reads_per_file: 1, cycle_length: 2}\n"));
  DaemonStart start;
  start.timeout = std::chrono::seconds(30);  // sampling reads at 1.5 s each
  RINGFEED_REQUIRE_STARTED(daemon, start);
  // A trainer keeps the readers reading.
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    auto client = Client::Attach(daemon.client_options());
    Batch batch;
    while (!done.load() && client->Next(std::chrono::milliseconds(200), &batch) != Client::Status::kEndOfData) {
    }
  });
  json waiting;
  const bool seen = WaitUntil(
      [&] {
        waiting = daemon.Status()["pipeline"]["io_waiting"];
        return !waiting.empty();
      },
      std::chrono::seconds(20));
  INFO(waiting.dump());
  CHECK(seen);
  if (seen) {
    CHECK_THAT(waiting[0].get<std::string>(),
               Catch::Matches("a read of " + mount.path("part-").string() + R"(\d\.tfrecord \(for \d+\.\d s\))"));
  }
  // ringfeedctl status's table says it too, on a line of its own.
  std::string table;
  CHECK(WaitUntil(
      [&] {
        table = RunCommand({CtlBinary(), "status", "stalled", "--runtime-dir", daemon.runtime_dir()}).out;
        return table.find("\nstorage    waiting for a read of " + mount.path("part-").string()) != std::string::npos;
      },
      std::chrono::seconds(20)));
  INFO(table);
  done = true;
  daemon.Stop();
  trainer.join();
}
