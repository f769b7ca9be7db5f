// ringfeedd end to end, with real processes, shared memory and sockets (tests/daemon_harness.h;
// the golden comparison on the TFX files is tests/daemon_golden_test.cc):
//   * determinism: the batch sequence does not depend on readers/workers; --start-epoch e gives
//     the full run's batches from epoch e on; deterministic: false still delivers every record
//     once per epoch;
//   * consumers.mode ranks: batch k at rank k % count only, equal batch counts, the incomplete
//     last round dropped, a rank attached twice or out of range refused;
//   * consumers.mode shared: four consumer processes share the batches without overlap;
//   * ringfeedctl list / status / dump against a running daemon.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <catch2/catch.hpp>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/ringfeed.h"
#include "format/example_builder.h"
#include "format/tfrecord_writer.h"
#include "shm/ring_layout.h"
#include "tests/daemon_harness.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;
using nlohmann::json;

namespace {

// All ids of the batches of one epoch, sorted.
std::vector<int64_t> EpochIds(const std::vector<BatchInfo>& batches, uint64_t epoch) {
  std::vector<int64_t> ids;
  for (const BatchInfo& b : batches) {
    if (b.epoch == epoch) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Leaves at `path` what a killed daemon leaves: a socket bound, then closed without unlink
// (connections are refused). False when it cannot be made.
bool BindStaleSocket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return bound;
}

std::string Describe(const std::vector<BatchInfo>& batches) {
  std::ostringstream s;
  for (const BatchInfo& b : batches) s << b.ToLine() << "\n";
  return s.str();
}

}  // namespace

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
  auto run = [&](const std::string& job, int workers, int readers, bool deterministic,
                 std::vector<std::string> args = {}) {
    DaemonProcess daemon(dir.path(), job, config(job, workers, readers, deterministic));
    const int64_t start_epoch = args.size() >= 2 && args[0] == "--start-epoch" ? std::stoll(args[1]) : 0;
    const int64_t start_batch = args.size() == 4 && args[2] == "--start-batch" ? std::stoll(args[3]) : 0;
    args.push_back("--exit-when-done");
    RINGFEED_REQUIRE_STARTED(daemon, WithArgs(args));
    CHECK(daemon.Status()["start_epoch"] == start_epoch);
    CHECK(daemon.Status()["start_batch"] == start_batch);
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
    const uint32_t end = i == 28 ? shm::kBatchEndOfEpoch : i == 57 ? shm::kBatchEndOfEpoch | shm::kBatchEndOfData : 0;
    CHECK(one[i].flags == end);
  }

  SECTION("--start-epoch 1 gives the batches of epoch 1 of the full run") {
    const std::vector<BatchInfo> resumed = run("det-resume", 2, 2, true, {"--start-epoch", "1"});
    const std::vector<BatchInfo> epoch1(one.begin() + 29, one.end());
    CHECK(Describe(resumed) == Describe(epoch1));
    CHECK(resumed == epoch1);

    DaemonProcess past_the_end(dir.path(), "det-past-end", config("det-past-end", 1, 1, true));
    // "010" (a zero-padded checkpoint name) is 10, not octal 8.
    CHECK_FALSE(past_the_end.Start(WithArgs({"--start-epoch", "010"})));
    REQUIRE(past_the_end.exit_status());
    CHECK(past_the_end.exit_status()->ToString() == "exit 2");
    CHECK_THAT(past_the_end.Stderr(), Catch::Contains("--start-epoch 10: ") &&
                                          Catch::Contains("runs epochs: 2 (epochs 0 to 1"));
  }

  SECTION("--start-epoch 0 --start-batch 25 gives the full run from batch 25 of epoch 0 on") {
    const std::vector<BatchInfo> resumed = run("det-mid", 2, 2, true, {"--start-epoch", "0", "--start-batch", "25"});
    const std::vector<BatchInfo> tail(one.begin() + 25, one.end());
    CHECK(Describe(resumed) == Describe(tail));
    CHECK(resumed == tail);
    CHECK(resumed.front().index == 25);
  }

  SECTION("--start-batch past the epoch's last batch: the job fails at the epoch's end, saying so") {
    DaemonProcess daemon(dir.path(), "det-past-batch", config("det-past-batch", 1, 1, true));
    RINGFEED_REQUIRE_STARTED(daemon, WithArgs({"--start-epoch", "1", "--start-batch", "29", "--exit-when-done"}));
    ConsumerSpec spec;
    spec.client = daemon.client_options();
    const ConsumerReport report = ConsumeInProcess(spec);
    INFO("ringfeedd stderr:\n" << daemon.Stderr());
    CHECK(report.batches.empty());
    CHECK_THAT(report.error, Catch::Contains("--start-batch 29 is past the end of epoch 1, which has 29 batches (0 to "
                                             "28): a checkpoint taken at the end of epoch 1, the job's last (epochs: "
                                             "2), has nothing left to resume"));
    const auto status = daemon.Wait();
    REQUIRE(status);
    CHECK(status->ToString() == "exit 1");
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

TEST_CASE("resuming mid-epoch in ranks mode: --start-batch a multiple of the ranks, or exit 2 naming the two nearest") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  const std::string config = IdJobConfig("resume-ranks", dir.file("data.tfrecord"),
                                          "consumers: {mode: ranks, count: 3}\nbatch: {size: 2}\n");
  DaemonProcess odd(dir.path(), "resume-ranks", config);
  CHECK_FALSE(odd.Start(WithArgs({"--start-batch", "4"})));
  REQUIRE(odd.exit_status());
  CHECK(odd.exit_status()->ToString() == "exit 2");
  CHECK_THAT(odd.Stderr(), Catch::Contains("--start-batch 4: ") &&
                               Catch::Contains("every rank takes one batch per step: give the steps taken in the epoch "
                                               "times 3 (3 or 6)"));
  DaemonProcess whole(dir.path(), "resume-ranks", config);
  RINGFEED_REQUIRE_STARTED(whole, WithArgs({"--start-batch", "3"}));
  Batch batch;
  auto rank1 = Client::Attach(whole.client_options(1));
  REQUIRE(rank1->Next(kEventually, &batch) == Client::Status::kBatch);
  CHECK(batch.index() == 4);  // batches 0 to 2 (one round) skipped: rank 1's first is 4
  batch = Batch();
  CHECK(whole.Stop().ToString() == "exit 0");
}

TEST_CASE("resuming mid-epoch under on_error: fail: a bad record in the batches dropped fails the job, as an "
          "uninterrupted run would have") {
  TempDir dir;
  std::vector<std::string> records;
  for (int64_t id = 0; id < 30; ++id) records.push_back(id == 5 ? std::string("\xff\xff not an Example") : IdRecord(id));
  WriteFile(dir.file("data.tfrecord"), FrameRecords(records));
  const std::string config = IdJobConfig("resume-bad", dir.file("data.tfrecord"), "batch: {size: 4}\n");
  DaemonProcess daemon(dir.path(), "resume-bad", config);
  RINGFEED_REQUIRE_STARTED(daemon, WithArgs({"--start-batch", "3", "--exit-when-done"}));  // records 0 to 11 dropped
  ConsumerSpec spec;
  spec.client = daemon.client_options();
  const ConsumerReport report = ConsumeInProcess(spec);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(report.batches.empty());
  CHECK_THAT(report.error, Catch::Contains(dir.file("data.tfrecord") + ": record 5 at byte ") &&
                               Catch::Contains("(on_error: fail)"));
  const auto status = daemon.Wait();
  REQUIRE(status);
  CHECK(status->ToString() == "exit 1");
}

TEST_CASE("Client::ranks_without_consumer names the ranks nobody attached as") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "missing-ranks",
                       IdJobConfig("missing-ranks", dir.file("data.tfrecord"), "consumers: {mode: ranks, count: 3}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  auto rank1 = Client::Attach(daemon.client_options(1));
  CHECK(rank1->ranks_without_consumer() == std::vector<uint32_t>{0, 2});
  CHECK_THAT(rank1->timeout_reason(),
             Catch::StartsWith("ranks 0, 2 of 3 have no consumer attached; ranks mode gives batch k of an epoch to "
                               "rank k mod 3, so the daemon stops producing at its prefetch depth while a rank does "
                               "not take its batches: start every rank (docs/config.md, consumers; ringfeedctl status "
                               "missing-ranks)"));
  {
    auto rank0 = Client::Attach(daemon.client_options(0));
    CHECK(rank1->ranks_without_consumer() == std::vector<uint32_t>{2});
    CHECK(rank0->ranks_without_consumer() == std::vector<uint32_t>{2});
  }
  // A consumer that left: its rank is missing again once the daemon has seen it go.
  CHECK(WaitUntil([&] { return rank1->ranks_without_consumer() == std::vector<uint32_t>{0, 2}; }));
  rank1.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");

  // A rank nobody attaches as, while another rank's trainer waits: the daemon says so once the
  // wait has lasted kRankStallWarning (10 s), naming the rank and what to do.
  DaemonProcess never(dir.path(), "never-attached",
                      IdJobConfig("never-attached", dir.file("data.tfrecord"),
                                  "consumers: {mode: ranks, count: 2}\nepochs: 0\nbatch: {size: 2}\n"));
  RINGFEED_REQUIRE_STARTED(never);
  {
    auto rank0 = Client::Attach(never.client_options(0));
    std::atomic<bool> stop_waiting{false};
    std::thread waiter([&] {
      Batch b;
      while (!stop_waiting.load()) {
        if (rank0->Next(std::chrono::milliseconds(200), &b) == Client::Status::kBatch) b.Release();
      }
    });
    const bool warned = never.WaitForStderr("rank 1 of 2 has no consumer attached and ", std::chrono::seconds(20));
    stop_waiting = true;
    waiter.join();
    const std::string log = never.Stderr();
    INFO(log);
    REQUIRE(warned);
    CHECK_THAT(LineWith(log, "rank 1 of 2 has no consumer attached"),
               Catch::Contains(" ready batches waiting for one (for 1") &&
                   Catch::Contains(" s) while other ranks wait: ranks mode gives batch k of an epoch to rank k mod 2 "
                                   "and stops producing at the prefetch depth, so every rank waits for it; start that "
                                   "rank's trainer (it attaches as rank 1), or set consumers.count to the number of "
                                   "trainers"));
  }
  CHECK(never.Stop().ToString() == "exit 0");

  DaemonProcess shared(dir.path(), "shared-ranks", IdJobConfig("shared-ranks", dir.file("data.tfrecord")));
  RINGFEED_REQUIRE_STARTED(shared);
  CHECK(Client::Attach(shared.client_options())->ranks_without_consumer().empty());
  CHECK(Client::Attach(shared.client_options())->timeout_reason().empty());
  CHECK(shared.Stop().ToString() == "exit 0");
}

TEST_CASE("ranks mode: a rank held by this process's closed client is refused saying so, and free once released") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "held-rank",
                       IdJobConfig("held-rank", dir.file("data.tfrecord"), "consumers: {mode: ranks, count: 2}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  Batch batch;
  {
    auto client = Client::Attach(daemon.client_options(0));
    REQUIRE(client->Next(std::chrono::seconds(10), &batch) == Client::Status::kBatch);
  }  // the batch outlives its client, and keeps the attachment
  CHECK_THROWS_WITH(Client::Attach(daemon.client_options(0)),
                    Catch::Contains("rank 0 is already attached by pid " + std::to_string(::getpid()) +
                                    " (this process: one client per rank; a client of this process attached as rank 0 "
                                    "is still open, or was closed while batches it took are still held, which keeps "
                                    "the rank until they are released:"));
  batch.Release();
  std::string last_error;
  CHECK(WaitUntil([&] {
    try {
      return Client::Attach(daemon.client_options(0)) != nullptr;
    } catch (const ClientError& e) {
      last_error = e.what();
      return false;
    }
  }));
  INFO(last_error);
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("ranks mode: after a cascade of timeouts the rank that holds batches is named, not the ranks that left") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 60);
  DaemonProcess daemon(dir.path(), "cascade",
                       IdJobConfig("cascade", dir.file("data.tfrecord"),
                                   "consumers: {mode: ranks, count: 3}\nepochs: 0\nbatch: {size: 2}\n"
                                   "pipeline: {workers: 1, prefetch: 4}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  auto rank0 = Client::Attach(daemon.client_options(0));
  auto rank2 = Client::Attach(daemon.client_options(2));  // attached, never takes a batch
  const nlohmann::json pipeline = daemon.Status()["pipeline"];
  const uint64_t depth = std::min<uint64_t>(pipeline["workers"].get<uint64_t>() + pipeline["prefetch"].get<uint64_t>(),
                                            rank0->slot_count());
  Batch batch;
  {
    auto rank1 = Client::Attach(daemon.client_options(1));
    // Ranks 0 and 1 take what comes until production stops at rank 2's untaken batches: the
    // whole prefetch depth (workers + prefetch, the ring's slots at most) is rank 2's and ready,
    // so nothing else can be. A Next that times out does not say so: the daemon may just be
    // slow (under TSan).
    std::vector<uint64_t> seen;
    const bool stopped = WaitUntil([&] {
      for (Client* c : {rank0.get(), rank1.get()}) {
        while (c->Next(std::chrono::milliseconds(20), &batch) == Client::Status::kBatch) batch.Release();
      }
      seen = rank0->ready_per_rank();
      return seen.size() == 3 && seen[0] == 0 && seen[1] == 0 && seen[2] >= depth;
    });
    INFO("depth " << depth << ", ready per rank " << Catch::Detail::stringify(seen));
    REQUIRE(stopped);
  }  // rank 1's trainer gives up and leaves, holding nothing
  REQUIRE(WaitUntil([&] { return rank0->ranks_without_consumer() == std::vector<uint32_t>{1}; }));
  const std::vector<uint64_t> ready = rank0->ready_per_rank();
  REQUIRE(ready.size() == 3);
  CHECK(ready[0] == 0);
  CHECK(ready[1] == 0);
  REQUIRE(ready[2] >= 1);
  INFO(rank0->timeout_reason());
  CHECK_THAT(rank0->timeout_reason(),
             Catch::StartsWith("rank 2 has " + std::to_string(ready[2]) + " ready batch") &&
                 Catch::Contains("that its trainer has not taken") && !Catch::Contains("rank 1"));
  rank0.reset();
  rank2.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("ranks mode: a rank that does not take its batches is named by the client and by status") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  // 40 records in batches of 2: 10 per rank per epoch; prefetch 4 fills up with rank 1's.
  DaemonProcess daemon(dir.path(), "stalled-rank",
                       IdJobConfig("stalled-rank", dir.file("data.tfrecord"),
                                   "consumers: {mode: ranks, count: 2}\nepochs: 0\nbatch: {size: 2}\n"
                                   "pipeline: {workers: 1, prefetch: 4}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  auto rank0 = Client::Attach(daemon.client_options(0));
  auto rank1 = Client::Attach(daemon.client_options(1));  // attached, never takes a batch
  const nlohmann::json pipeline = daemon.Status()["pipeline"];
  const uint64_t depth = std::min<uint64_t>(pipeline["workers"].get<uint64_t>() + pipeline["prefetch"].get<uint64_t>(),
                                            rank0->slot_count());
  Batch batch;
  uint64_t taken = 0;
  // Rank 0 takes what comes until production stops: the whole prefetch depth (workers +
  // prefetch, the ring's slots at most) is rank 1's and ready. A Next that times out does not
  // say so: the daemon may just be slow (under TSan).
  std::vector<uint64_t> seen;
  const bool stopped = WaitUntil([&] {
    while (rank0->Next(std::chrono::milliseconds(20), &batch) == Client::Status::kBatch) ++taken;
    seen = rank0->ready_per_rank();
    return seen.size() == 2 && seen[0] == 0 && seen[1] >= depth;
  });
  batch.Release();
  INFO("depth " << depth << ", ready per rank " << Catch::Detail::stringify(seen));
  REQUIRE(stopped);
  CHECK(taken >= 1);
  const std::vector<uint64_t> ready = rank0->ready_per_rank();
  REQUIRE(ready.size() == 2);
  CHECK(ready[0] == 0);
  CHECK(ready[1] >= 2);
  CHECK(rank0->ranks_without_consumer().empty());
  CHECK(rank0->timeout_reason() ==
        "rank 1 has " + std::to_string(ready[1]) + " ready batches that its trainer has not taken; ranks mode gives "
        "batch k of an epoch to rank k mod 2 and stops producing at its prefetch depth, so every rank waits for a "
        "trainer that is stopped, stuck or far slower than its peers (docs/operations.md, Status and "
        "troubleshooting; ringfeedctl status stalled-rank)");
  CHECK(rank1->timeout_reason().empty());  // its own batches are ready: nothing holds it up
  // Rank 0's trainer waits for its next batch (a trainer that is busy with its step instead
  // waits for nobody: the lockstep test below).
  std::atomic<bool> stop_waiting{false};
  std::thread waiter([&] {
    Batch b;
    while (!stop_waiting.load()) {
      if (rank0->Next(std::chrono::milliseconds(200), &b) == Client::Status::kBatch) b.Release();
    }
  });
  // The daemon's status: rank 1 holds ready batches and has not taken one for a while.
  REQUIRE(WaitUntil([&] {
    const nlohmann::json s = daemon.Status();
    return s["ranks"][1]["ready"].get<uint64_t>() >= 2 && s["ranks"][1]["seconds_since_take"].get<double>() >= 2.0;
  }, std::chrono::seconds(10)));
  const nlohmann::json s = daemon.Status();
  CHECK(s["ranks"][0]["ready"] == 0);
  CHECK(s["ranks"][0]["rank"] == 0);
  // The daemon decides who holds the others up: rank 1 (its batches wait, rank 0 has none).
  CHECK(s["ranks"][0]["holds_up"] == false);
  CHECK(s["ranks"][1]["holds_up"] == true);
  // The table names the rank and its trainer once it has held them up for 5 s.
  const std::string pid = std::to_string(::getpid());
  std::string table;
  CHECK(WaitUntil([&] {
    table = RunCommand({CtlBinary(), "status", "stalled-rank", "--runtime-dir", daemon.runtime_dir()}).out;
    return table.find("rank 1 (consumer 2, pid " + pid + ") has not taken any of its ") != std::string::npos;
  }, std::chrono::seconds(10)));
  INFO(table);
  CHECK_THAT(table, Catch::Contains("ready batches for ") && Catch::Contains("is that trainer stopped, stuck"));
  // Rank 1 takes one batch: its clock starts again.
  REQUIRE(rank1->Next(std::chrono::seconds(5), &batch) == Client::Status::kBatch);
  batch.Release();
  CHECK(WaitUntil([&] { return daemon.Status()["ranks"][1]["seconds_since_take"].get<double>() < 1.5; },
                  std::chrono::seconds(5)));
  stop_waiting = true;
  waiter.join();
  rank0.reset();
  rank1.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");

  // Every rank has batches ready and none takes them (all in a long step, or an evaluation):
  // slow together, nobody held up by one of them: no such line.
  DaemonProcess slow(dir.path(), "slow-ranks",
                     IdJobConfig("slow-ranks", dir.file("data.tfrecord"),
                                 "consumers: {mode: ranks, count: 2}\nepochs: 0\nbatch: {size: 2}\n"
                                 "pipeline: {workers: 1, prefetch: 4}\n"));
  RINGFEED_REQUIRE_STARTED(slow);
  {
    auto slow0 = Client::Attach(slow.client_options(0));
    auto slow1 = Client::Attach(slow.client_options(1));
    REQUIRE(WaitUntil([&] {
      const nlohmann::json st = slow.Status();
      return st["ranks"][0]["ready"].get<uint64_t>() >= 1 && st["ranks"][1]["ready"].get<uint64_t>() >= 1 &&
             st["ranks"][0]["seconds_since_take"].get<double>() >= 5.5 &&
             st["ranks"][1]["seconds_since_take"].get<double>() >= 5.5;
    }, std::chrono::seconds(15)));
    const nlohmann::json st = slow.Status();
    CHECK(st["ranks"][0]["holds_up"] == false);
    CHECK(st["ranks"][1]["holds_up"] == false);
    const std::string slow_table =
        RunCommand({CtlBinary(), "status", "slow-ranks", "--runtime-dir", slow.runtime_dir()}).out;
    INFO(slow_table);
    CHECK(slow_table.find("has not taken any of its") == std::string::npos);
  }
  CHECK(slow.Stop().ToString() == "exit 0");

  // Trainers in lockstep with long steps: a rank that took its batch and has none ready is busy
  // with its step, not waiting, so the ranks whose batches wait for their trainers' next step
  // hold nobody up. Prefetch 1 keeps at most 2 batches ready, so one rank always has none.
  DaemonProcess lockstep(dir.path(), "lockstep-ranks",
                         IdJobConfig("lockstep-ranks", dir.file("data.tfrecord"),
                                     "consumers: {mode: ranks, count: 3}\nepochs: 0\nbatch: {size: 2}\n"
                                     "pipeline: {workers: 1, prefetch: 1}\n"));
  RINGFEED_REQUIRE_STARTED(lockstep);
  {
    std::vector<std::unique_ptr<Client>> trainers;
    for (int r = 0; r < 3; ++r) trainers.push_back(Client::Attach(lockstep.client_options(r)));
    std::atomic<bool> done{false};
    std::vector<std::thread> steps;
    for (int r = 0; r < 3; ++r) {
      steps.emplace_back([&, r] {
        Batch b;
        while (!done.load()) {
          if (trainers[r]->Next(std::chrono::seconds(5), &b) == Client::Status::kBatch) b.Release();
          for (int i = 0; i < 30 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      });
    }
    int samples = 0, held_up = 0, some_rank_empty = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
    while (std::chrono::steady_clock::now() < until) {
      const nlohmann::json st = lockstep.Status();
      ++samples;
      bool empty = false;
      for (const auto& r : st["ranks"]) {
        held_up += r["holds_up"].get<bool>() ? 1 : 0;
        empty |= r["ready"].get<uint64_t>() == 0;
      }
      some_rank_empty += empty ? 1 : 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    done = true;
    for (std::thread& t : steps) t.join();
    INFO(samples << " samples, " << some_rank_empty << " with a rank that had nothing ready");
    CHECK(some_rank_empty > samples / 2);  // the situation the old rule called "held up"
    CHECK(held_up == 0);
  }
  CHECK(lockstep.Stop().ToString() == "exit 0");

  // After the end of the data nobody waits for a rank that leaves its last batches untaken:
  // the other rank gets the end of the data, so holds_up is false and the table says nothing.
  TempDir small;
  WriteIdFile(small.file("data.tfrecord"), 0, 8);  // 4 batches of 2: 2 per rank, within the prefetch depth
  DaemonProcess ended(small.path(), "ended-ranks",
                      IdJobConfig("ended-ranks", small.file("data.tfrecord"),
                                  "consumers: {mode: ranks, count: 2}\nepochs: 1\nbatch: {size: 2}\n"
                                  "pipeline: {workers: 1, prefetch: 4}\n"));
  RINGFEED_REQUIRE_STARTED(ended);
  {
    auto ended0 = Client::Attach(ended.client_options(0));
    auto ended1 = Client::Attach(ended.client_options(1));  // attached, never takes a batch
    uint64_t taken0 = 0;
    Client::Status status;
    while ((status = ended0->Next(std::chrono::seconds(5), &batch)) == Client::Status::kBatch) ++taken0;
    batch.Release();
    CHECK(status == Client::Status::kEndOfData);
    CHECK(taken0 == 2);
    REQUIRE(WaitUntil([&] {
      const nlohmann::json st = ended.Status();
      return st["state"] == "end_of_data" && st["ranks"][1]["ready"].get<uint64_t>() == 2 &&
             st["ranks"][1]["seconds_since_take"].get<double>() >= 5.5;
    }, std::chrono::seconds(15)));
    const nlohmann::json st = ended.Status();
    CHECK(st["ranks"][0]["holds_up"] == false);
    CHECK(st["ranks"][1]["holds_up"] == false);
    const std::string ended_table =
        RunCommand({CtlBinary(), "status", "ended-ranks", "--runtime-dir", ended.runtime_dir()}).out;
    INFO(ended_table);
    CHECK(ended_table.find("has not taken any of its") == std::string::npos);
  }
  CHECK(ended.Stop().ToString() == "exit 0");

  DaemonProcess shared(dir.path(), "shared-ready", IdJobConfig("shared-ready", dir.file("data.tfrecord")));
  RINGFEED_REQUIRE_STARTED(shared);
  CHECK(Client::Attach(shared.client_options())->ready_per_rank().empty());
  CHECK(shared.Status()["ranks"].is_null());
  CHECK(shared.Stop().ToString() == "exit 0");
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
    CHECK_THAT(e.what(), !Catch::Contains("this process"));
  }
  // The operator sees the refusal too (only the trainer did: helper-147); at most one a second.
  CHECK(daemon.WaitForStderr("[info] refused a consumer (pid " + std::to_string(::getpid()) +
                             "): rank 1 is already attached by pid " + std::to_string(ranks[1]->pid())));
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
  // `ringfeedctl check` says the same before any daemon runs.
  const CommandResult check = RunCommand({CtlBinary(), "check", daemon.config_path()});
  INFO(check.out << check.err);
  CHECK(check.status.ToString() == "exit 0");
  CHECK_THAT(check.out, Catch::Contains("99 records from 5 of 5 file(s) -> 24 batch(es) of 4 + 1 of 3; ranks: 12 per "
                                        "rank, the last 1 dropped each epoch (they do not fill a round of 2 ranks)\n"));
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
    CHECK(status["batches_reclaimed"] == 0);
    // Once production has ended, the overall rates are the whole run's, stopped at its end, and
    // the tuner's measurements are production's last stretch (which made records).
    const json& tp = status["throughput"];
    REQUIRE(tp["production_seconds"].is_number());
    const double produced_for = tp["production_seconds"].get<double>();
    CHECK(produced_for > 0);
    CHECK(produced_for <= status["uptime_seconds"].get<double>());
    CHECK(tp["records_per_second"]["overall"].get<double>() == Approx(24 / produced_for));
    CHECK(status["autotune"]["measured"]["records_per_second"].get<double>() > 0);
    // ... which ends where production did, not at the tuner's next sample.
    CHECK(status["autotune"]["measured"]["interval_seconds"].get<double>() <= produced_for);
    const CommandResult table =
        RunCommand({CtlBinary(), "status", "shared-job", "--runtime-dir", daemon.runtime_dir()});
    INFO(table.out << table.err);
    CHECK_THAT(table.out, Catch::Contains(" from start to the end of data (") &&
                              Catch::Contains("           the last ") && Catch::Contains(" of production: "));
    // The consumers exited; the daemon sees their connections close.
    CHECK(WaitUntil([&] { return daemon.Status()["consumers"].empty(); }));
    CHECK(daemon.Stderr().find("all epochs produced") != std::string::npos);
    // A consumer attaching now learns that the data has ended.
    ConsumerSpec late;
    late.client = daemon.client_options();
    CHECK(ConsumeInProcess(late).end == "end");
    // ... and the log says why it got nothing (a C++ trainer's loop may not look).
    CHECK(WaitUntil([&] { return daemon.Stderr().find("attached after the end of the data") != std::string::npos; }));
    CHECK_THAT(daemon.Stderr(), Catch::Contains("so it gets no batch; restart ringfeedd for another pass, or give the "
                                                "job epochs: 0"));
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
    const std::span<const float> no_floats;
    const std::span<const std::string_view> no_strings;
    writer.Write(b.AddFloat("x", {1.5f, nan}).AddFloat("v", {inf}).AddBytes("b", {"hello"}).AddInt64("i", {7})
                     .Serialize());
    b.Clear();
    writer.Write(b.AddFloat("x", {-inf, 0.25f}).AddFloat("v", no_floats).AddBytes("b", {"", "ab"}).AddInt64("i", {-3})
                     .Serialize());
    b.Clear();
    writer.Write(b.AddFloat("x", {2, 3}).AddFloat("v", {1, -2, 0.5f}).AddBytes("b", {std::string_view("\xff\x00z", 3)})
                     .AddInt64("i", {1}).Serialize());
    b.Clear();
    writer.Write(b.AddFloat("x", {4, 0.1f}).AddFloat("v", {6}).AddBytes("b", no_strings).AddInt64("i", {int64_t{1} << 60})
                     .Serialize());
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
                             "shuffle: {files: true, seed: 7}\n"
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
  CHECK_THAT(table.out, Catch::Contains("job        " + job + "   (pid " + pid + ", config " + daemon.config_path() +
                                        ")\nsocket     " + daemon.socket_path() + "\nsettings   batch.size 2 "
                                        "(drop_remainder false), shuffle.buffer 0, shuffle.files true (seed 7), "
                                        "cycle_length 4, on_error fail, compression auto (as loaded at start: an "
                                        "edited config takes effect at a restart)\nstate      running"));
  CHECK_THAT(table.out, Catch::Contains("consumers  1 attached"));
  CHECK_THAT(table.out, Catch::Contains("id " + std::to_string(client->consumer_id()) + " pid " + me + ":"));

  const json status = daemon.Status();
  CHECK(status["type"] == "status");
  CHECK(status["job"] == job);
  CHECK(status["state"] == "running");
  CHECK(status["pid"] == daemon.pid());
  CHECK(status["config"] == daemon.config_path());
  CHECK(status["socket"] == daemon.socket_path());
  CHECK(status["epochs"] == 0);
  CHECK(status["settings"] == json{{"batch.size", 2}, {"batch.drop_remainder", false}, {"shuffle.buffer", 0},
                                   {"shuffle.files", true}, {"shuffle.seed", 7}, {"pipeline.cycle_length", 4},
                                   {"source.on_error", "fail"}, {"source.compression", "auto"}});
  REQUIRE(status["consumers"].size() == 1);
  CHECK(status["consumers"][0]["pid"] == ::getpid());
  CHECK(status["consumers"][0]["id"] == client->consumer_id());
  CHECK(status["consumers"][0]["rank"].is_null());
  CHECK(status["consumers"][0]["seconds_since_take"].get<double>() >= 0);
  CHECK(status["consumers"][0]["seconds_since_take"].get<double>() <=
        status["consumers"][0]["attached_seconds"].get<double>());
  CHECK(status["batches_reclaimed"] == 0);

  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  const CommandResult dump =
      RunCommand({CtlBinary(), "dump", job, "--batches", "2", "--runtime-dir", daemon.runtime_dir()});
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
      "x":{"dtype":"float32","shape":[2,2],"values":[2.0,3.0,4.0,0.1]},
      "v":{"dtype":"float32","shape":[4],"values":[1.0,-2.0,0.5,6.0],"row_splits":[0,3,4]},
      "b":{"dtype":"bytes","shape":[1],"values":["/wB6"],"row_splits":[0,1,1]},
      "i":{"dtype":"int64","shape":[2],"values":[1,1152921504606846976]}},
      "sources":[[0,2],[0,3]]})");
  CHECK(lines[0] == want0);
  CHECK(lines[1] == want1);  // 0.1f as 0.1: the shortest decimal that reads back as that float32
  // The features in config order.
  std::vector<std::string> order;
  const auto first = nlohmann::ordered_json::parse(dump.out.substr(0, dump.out.find('\n')));
  for (const auto& [name, value] : first["features"].items()) order.push_back(name);
  CHECK(order == std::vector<std::string>{"x", "v", "b", "i"});

  // --bytes text: bytes values that are valid UTF-8 as text, the others as {"base64": ...}. The
  // next two batches are the next epoch's first two (4 records, not shuffled).
  const CommandResult text = RunCommand(
      {CtlBinary(), "dump", job, "--batches", "2", "--bytes", "text", "--runtime-dir", daemon.runtime_dir()});
  INFO("dump --bytes text:\n" << text.out << text.err);
  CHECK(text.status.ToString() == "exit 0");
  std::vector<json> text_lines;
  std::istringstream text_in(text.out);
  for (std::string line; std::getline(text_in, line);) text_lines.push_back(json::parse(line));
  REQUIRE(text_lines.size() == 2);
  CHECK(text_lines[0]["epoch"] == 1);
  CHECK(text_lines[0]["features"]["b"]["values"] == json::parse(R"(["hello","","ab"])"));
  CHECK(text_lines[1]["features"]["b"]["values"] == json::parse(R"([{"base64":"/wB6"}])"));
  CHECK(text_lines[1]["features"]["x"] == want1["features"]["x"]);  // only bytes change

  // Throughput: records were published, and while the daemon is younger than 10 s its window
  // starts at its start, so "last 10 s" is the overall rate (it read 0 until two 1 s samples).
  const json later = daemon.Status();
  const json& rate = later["throughput"]["records_per_second"];
  CHECK(later["records"].get<uint64_t>() > 0);
  CHECK(rate["last_10s"].get<double>() > 0);
  if (later["uptime_seconds"].get<double>() < 9) {
    CHECK(rate["last_10s"].get<double>() == Approx(rate["overall"].get<double>()).epsilon(1e-9));
  } else {
    WARN("the daemon is " << later["uptime_seconds"] << " s old: last_10s and overall may differ");
  }

  // Looked for from the directory above: systemd's RuntimeDirectory=ringfeed/%i gives each
  // instance its own subdirectory of /run/ringfeed, where `ringfeedctl` looks by default.
  const std::string above = std::filesystem::path(daemon.runtime_dir()).parent_path().string();
  const CommandResult list_above = RunCommand({CtlBinary(), "list", "--runtime-dir", above});
  INFO("list from above:\n" << list_above.out << list_above.err);
  CHECK(list_above.status.ToString() == "exit 0");
  CHECK_THAT(list_above.out, Catch::Contains(job) && Catch::Contains("running") && Catch::Contains(pid) &&
                                 Catch::Contains("(in " + daemon.runtime_dir() + ")"));
  const CommandResult status_above = RunCommand({CtlBinary(), "status", job, "--json", "--runtime-dir", above});
  INFO("status from above:\n" << status_above.out << status_above.err);
  CHECK(status_above.status.ToString() == "exit 0");
  CHECK(json::parse(status_above.out)["pid"] == daemon.pid());
  const CommandResult dump_above = RunCommand({CtlBinary(), "dump", job, "--batches", "1", "--runtime-dir", above});
  INFO("dump from above:\n" << dump_above.out << dump_above.err);
  CHECK(dump_above.status.ToString() == "exit 0");
  CHECK(json::parse(dump_above.out).contains("features"));
  {
    // A socket file left at the top by a killed daemon of the same job does not hide the live
    // one below it (bound, then closed without unlink: connections are refused).
    const std::string stale = above + "/" + job + ".sock";
    REQUIRE(BindStaleSocket(stale));
    const CommandResult past_stale = RunCommand({CtlBinary(), "status", job, "--json", "--runtime-dir", above});
    INFO("status past a stale socket:\n" << past_stale.out << past_stale.err);
    CHECK(past_stale.status.ToString() == "exit 0");
    std::filesystem::remove(stale);
  }
  const CommandResult not_there = RunCommand({CtlBinary(), "status", "no-such-job", "--runtime-dir", above});
  CHECK(not_there.status.ToString() == "exit 1");
  CHECK_THAT(not_there.err, Catch::Contains("job 'no-such-job' is not running in " + above) &&
                                Catch::Contains("jobs there: " + job + " (in " + daemon.runtime_dir() + ")"));
  {
    // Only a socket nobody listens on, what a killed daemon leaves, is called stale.
    const std::string stale = above + "/gone-job.sock";
    REQUIRE(BindStaleSocket(stale));
    const CommandResult gone = RunCommand({CtlBinary(), "status", "gone-job", "--runtime-dir", above});
    CHECK(gone.status.ToString() == "exit 1");
    CHECK_THAT(gone.err, Catch::Contains("cannot connect to ringfeedd for job gone-job at " + stale + ": " +
                                         std::strerror(ECONNREFUSED)) &&
                             Catch::Contains("if ringfeedd was killed, the socket is stale: start the job again"));
    std::filesystem::remove(stale);
  }

  {
    // A trainer does not look below its runtime directory, but its error says where the job is.
    ClientOptions from_above = daemon.client_options();
    from_above.runtime_dir = above;
    CHECK_THROWS_WITH(Client::Attach(from_above),
                      Catch::Contains("; job " + job + " runs one directory down, in " + daemon.runtime_dir() +
                                      ": set RINGFEED_RUNTIME_DIR=" + daemon.runtime_dir()));
  }

  client.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
  // A clean stop removes the socket, the lock and the segment.
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.segment_path()));
  const CommandResult after = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(after.out, Catch::Contains("no ringfeed jobs"));
}

// A C ABI client of `job` on `daemon`, as `rank` (-1: shared mode) (REQUIREs the attach); rf_detach it.
static rf_client* AttachC(const DaemonProcess& daemon, const std::string& job, int32_t rank = -1) {
  rf_attach_options options = {};
  options.struct_size = sizeof options;
  options.job = job.c_str();
  options.rank = rank;
  const std::string runtime_dir = daemon.runtime_dir();
  options.runtime_dir = runtime_dir.c_str();
  rf_client* c = nullptr;
  char err[256] = "";
  const int rc = rf_attach(&options, &c, err, sizeof err);
  INFO("rf_attach: " << err);
  REQUIRE(rc == RF_OK);
  return c;
}

TEST_CASE("the job's file list: Client::files in pages, the C ABI, and row sources name the right file") {
  TempDir dir;
  // 300 files of one record each (file i holds id i) under long names: more paths than one
  // reply holds (about 70 KB of them), so the client pages through them.
  const std::string long_part(200, 'n');
  std::vector<std::string> expected;  // sorted: the names are zero-padded
  for (int i = 0; i < 300; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%03d", i);
    expected.push_back(dir.file(std::string(name) + "-" + long_part + ".tfrecord"));
    WriteIdFile(expected.back(), i, 1);
  }
  DaemonProcess daemon(dir.path(), "file-list",
                       IdJobConfig("file-list", dir.file("*.tfrecord"), "batch: {size: 10}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  auto client = Client::Attach(daemon.client_options());
  CHECK(client->files() == expected);
  Batch batch;
  REQUIRE(client->Next(std::chrono::seconds(10), &batch) == Client::Status::kBatch);
  const BatchInfo info = BatchInfo::Of(batch);
  for (size_t row = 0; row < info.rows; ++row) {
    const auto [file_index, record_index] = info.sources[row];
    CHECK(record_index == 0);
    CHECK(client->files()[file_index] == expected[static_cast<size_t>(info.ids[row])]);
  }
  batch.Release();

  // ringfeedctl status --files: the same list, paged the same way, as lines and as JSON.
  const CommandResult lines = RunCommand({CtlBinary(), "status", "file-list", "--files", "--runtime-dir",
                                          daemon.runtime_dir()});
  REQUIRE(lines.status.ToString() == "exit 0");
  std::string want;
  for (size_t i = 0; i < expected.size(); ++i) want += std::to_string(i) + "\t" + expected[i] + "\n";
  CHECK(lines.out == want);
  const CommandResult as_json = RunCommand({CtlBinary(), "status", "file-list", "--files", "--json", "--runtime-dir",
                                            daemon.runtime_dir()});
  REQUIRE(as_json.status.ToString() == "exit 0");
  CHECK(json::parse(as_json.out) == json{{"total", 300}, {"files", expected}});

  // The C ABI over the same daemon.
  rf_client* c = AttachC(daemon, "file-list");
  CHECK(rf_file_count(c) == 300);
  char path[64];
  CHECK(rf_file_path(c, 7, path, sizeof path) == static_cast<int64_t>(expected[7].size()));  // cut: 63 bytes
  CHECK(std::string(path) == expected[7].substr(0, sizeof path - 1));
  std::vector<char> whole(expected[299].size() + 1);
  CHECK(rf_file_path(c, 299, whole.data(), whole.size()) == static_cast<int64_t>(expected[299].size()));
  CHECK(std::string(whole.data()) == expected[299]);
  CHECK(rf_file_path(c, 300, path, sizeof path) == RF_ERROR);
  CHECK_THAT(rf_last_error(), Catch::Contains("file 300 out of range: the job has 300 files"));
  rf_detach(c);
  CHECK(daemon.Stop().ToString() == "exit 0");
  CHECK(client->files() == expected);  // asked once, then kept: the daemon is gone
}

TEST_CASE("relative source.files: the file list names absolute paths, in the order of the paths as written") {
  // The daemon runs in `dir`, the trainer and ringfeedctl elsewhere: the paths they get must
  // open from there.
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "b");
  WriteIdFile(dir.file("b/0.tfrecord"), 0, 1);
  WriteIdFile(dir.file("a.tfrecord"), 1, 1);
  DaemonProcess daemon(dir.path(), "relative", "job: relative\nsource: {files: [b/*.tfrecord, a.tfrecord]}\nfeatures:\n" + IdFeaturesYaml() + "epochs: 0\n");
  DaemonStart start;
  start.wrapper = {"env", "-C", dir.path().string()};
  RINGFEED_REQUIRE_STARTED(daemon, start);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  auto client = Client::Attach(daemon.client_options());
  // "a.tfrecord" sorts before "b/0.tfrecord" as written, and stays first.
  CHECK(client->files() == std::vector<std::string>{dir.file("a.tfrecord"), dir.file("b/0.tfrecord")});
  const CommandResult lines = RunCommand({CtlBinary(), "status", "relative", "--files", "--runtime-dir",
                                          daemon.runtime_dir()});
  CHECK(lines.out == "0\t" + dir.file("a.tfrecord") + "\n1\t" + dir.file("b/0.tfrecord") + "\n");
}

TEST_CASE("end_reason: empty after an ordinary end, the daemon's reason after an epoch with no batch (C++ and C ABI)") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 3);
  for (const bool none : {false, true}) {
    const std::string job = none ? "no-batch" : "ordinary";
    // 3 records: one batch of 3, or none under drop_remainder with batch.size 4.
    DaemonProcess daemon(dir.path(), job,
                         IdJobConfig(job, dir.file("data.tfrecord"),
                                     none ? "batch: {size: 4, drop_remainder: true}\n" : "batch: {size: 4}\n"));
    RINGFEED_REQUIRE_STARTED(daemon);
    rf_client* c = AttachC(daemon, job);
    const std::string runtime_dir = daemon.runtime_dir();
    const std::unique_ptr<Client> client = Client::Attach(daemon.client_options());
    int batches = 0;
    Batch batch;
    Client::Status status;
    while ((status = client->Next(std::chrono::seconds(10), &batch)) == Client::Status::kBatch) ++batches;
    REQUIRE(status == Client::Status::kEndOfData);
    CHECK(batches == (none ? 0 : 1));
    const std::string reason = client->end_reason();
    INFO("end_reason: " << reason);
    if (!none) {
      CHECK(reason.empty());
      CHECK(rf_end_reason(c, nullptr, 0) == 0);
    } else {
      CHECK(reason == "epoch 0 delivered no batch: its 3 records are fewer than batch.size 4, and drop_remainder "
                      "drops a short batch; the last epoch; restart the job once the cause is fixed");
      char cut[16];
      CHECK(rf_end_reason(c, cut, sizeof cut) == static_cast<int64_t>(reason.size()));
      CHECK(std::string(cut) == reason.substr(0, sizeof cut - 1));
    }
    // examples/example_trainer says the same.
    const CommandResult trainer =
        RunCommand({ExampleTrainerBinary(), "--job", job, "--runtime-dir", runtime_dir, "--timeout", "10"});
    INFO("example_trainer:\n" << trainer.out << trainer.err);
    CHECK(trainer.status.ToString() == "exit 1");  // no data is no run
    CHECK_THAT(trainer.out, Catch::Contains("end of data: 0 examples"));
    CHECK_THAT(trainer.err, Catch::Contains("example_trainer: the data ended before this trainer took any batch: " +
                                            (none ? reason + "\n" : std::string("the daemon (pid ") +
                                                                        std::to_string(daemon.pid()) +
                                                                        ") served all its epochs to earlier consumers")));
    CHECK(rf_end_reason(nullptr, nullptr, 0) == RF_ERROR);
    rf_detach(c);
    CHECK(daemon.Stop().ToString() == "exit 0");
  }
}

TEST_CASE("exit-when-done on data that gives no batch: waits for a trainer to get the reason, then exits 0") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 3);
  DaemonProcess daemon(dir.path(), "late-reason",
                       IdJobConfig("late-reason", dir.file("data.tfrecord"),
                                   "batch: {size: 4, drop_remainder: true}\n"));
  RINGFEED_REQUIRE_STARTED(daemon, WithArgs({"--exit-when-done"}));
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  // Before: it exited ~0.2 s after start, and a trainer starting later got "cannot connect".
  REQUIRE(daemon.WaitForStderr("end of data: epoch 0 delivered no batch"));
  REQUIRE_FALSE(daemon.Wait(std::chrono::milliseconds(1500)));
  const std::unique_ptr<Client> client = Client::Attach(daemon.client_options());
  Batch batch;
  CHECK(client->Next(std::chrono::seconds(10), &batch) == Client::Status::kEndOfData);
  CHECK_THAT(client->end_reason(), Catch::StartsWith("epoch 0 delivered no batch: its 3 records are fewer than "
                                                     "batch.size 4"));
  const auto status = daemon.Wait();
  REQUIRE(status);
  CHECK(status->ToString() == "exit 0");
}

TEST_CASE("rf_timeout_reason (C ABI): after RF_TIMEOUT, what holds this rank up") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(
      dir.path(), "c-ranks",
      IdJobConfig("c-ranks", dir.file("data.tfrecord"), "consumers: {mode: ranks, count: 2}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  rf_client* c = AttachC(daemon, "c-ranks", 0);
  char err[256] = "";
  // Rank 0 takes its batches until rank 1's, which nobody takes, fill the prefetch depth.
  int status = RF_OK;
  for (int i = 0; i < 200 && status == RF_OK; ++i) {
    rf_batch* batch = nullptr;
    status = rf_next(c, 300, &batch, err, sizeof err);
    rf_batch_release(batch);
  }
  REQUIRE(status == RF_TIMEOUT);
  CHECK(std::string(rf_last_error()).empty());  // a timeout is no error
  const int64_t length = rf_timeout_reason(c, nullptr, 0);
  std::string reason(static_cast<size_t>(std::max<int64_t>(length, 0)) + 1, '\0');
  CHECK(rf_timeout_reason(c, reason.data(), reason.size()) == length);
  reason.resize(static_cast<size_t>(std::max<int64_t>(length, 0)));
  CHECK_THAT(reason, Catch::StartsWith("rank 1 of 2 has no consumer attached; ranks mode gives batch k of an epoch "
                                       "to rank k mod 2"));
  CHECK(rf_timeout_reason(nullptr, nullptr, 0) == RF_ERROR);
  rf_detach(c);
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("batch.size far above the data: each epoch is one batch of all its records, in slots sized for them") {
  // Planned at its full size, 16,000,000 rows were refused as needing far more than the budget.
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 50);
  DaemonProcess daemon(dir.path(), "fullbatch",
                       IdJobConfig("fullbatch", dir.file("data.tfrecord"),
                                   "batch: {size: 16000000}\nshuffle: {buffer: 0}\nepochs: 2\n"
                                   "pipeline: {memory_budget: 64MiB}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  INFO(daemon.Stderr());
  CHECK_THAT(daemon.Stderr(), Catch::Contains("batch.size 16000000 is more than the 50 records this shard reads per "
                                              "epoch (counted at start): each epoch is one batch of those records"));
  const std::unique_ptr<Client> client = Client::Attach(daemon.client_options());
  std::vector<BatchInfo> batches;
  Batch batch;
  Client::Status status;
  while ((status = client->Next(std::chrono::seconds(10), &batch)) == Client::Status::kBatch) {
    batches.push_back(BatchInfo::Of(batch));
    batch.Release();
  }
  REQUIRE(status == Client::Status::kEndOfData);
  INFO(Describe(batches));
  REQUIRE(batches.size() == 2);
  for (uint64_t e = 0; e < 2; ++e) {
    CHECK(batches[e].epoch == e);
    CHECK(batches[e].ids == Iota(0, 50));  // no shuffle buffer, one file: file order
  }
  CHECK(daemon.Stop().ToString() == "exit 0");
}

// Voluntary context switches (wake-ups from sleep) of the daemon's threads, by thread name.
static std::map<std::string, uint64_t> WakeUps(pid_t pid) {
  std::map<std::string, uint64_t> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream comm(task.path() / "comm"), status(task.path() / "status");
    std::string name, line;
    std::getline(comm, name);
    while (std::getline(status, line)) {
      if (line.starts_with("voluntary_ctxt_switches:")) out[name] += std::stoull(line.substr(line.find(':') + 1));
    }
  }
  return out;
}

TEST_CASE("an idle daemon (no consumer, the ring at its prefetch depth) sleeps: a few dozen wake-ups a second") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 100);
  DaemonProcess daemon(dir.path(), "idle", IdJobConfig("idle", dir.file("data.tfrecord"),
                                                        "batch: {size: 4}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // The ring fills to its prefetch depth; a second after that the daemon counts as idle.
  uint64_t batches = 0;
  REQUIRE(WaitUntil([&] {
    const uint64_t now = daemon.Status()["batches"].get<uint64_t>();
    const bool still = now > 0 && now == batches;
    batches = now;
    return still;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto before = WakeUps(daemon.pid());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto after = WakeUps(daemon.pid());
  // Was: the sequencer polled for a claim every 2 ms (~1000 in 2 s) and the tuner sampled every
  // 10 ms (~200): ~1% of a core for nothing. Now 50 ms and 100 ms; the heartbeat's 10 a second.
  for (const char* thread : {"rf-sequencer", "rf-tuner"}) {
    INFO(thread);
    REQUIRE(before.count(thread));
    CHECK(after.at(thread) - before.at(thread) < 100);
  }
  // A trainer that attaches now gets its batches at once.
  const std::unique_ptr<Client> client = Client::Attach(daemon.client_options());
  Batch batch;
  for (int i = 0; i < 30; ++i) REQUIRE(client->Next(std::chrono::seconds(10), &batch) == Client::Status::kBatch);
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("example_trainer --epochs N stops an endless job's trainer after N epochs' batches, exit 0") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);  // batches of 4: 4, 4, 2 per epoch
  DaemonProcess daemon(dir.path(), "endless",
                       IdJobConfig("endless", dir.file("data.tfrecord"), "batch: {size: 4}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const CommandResult r = RunCommand({ExampleTrainerBinary(), "--job", "endless", "--runtime-dir", daemon.runtime_dir(),
                                      "--epochs", "2", "--timeout", "10"});
  INFO(r.out << r.err);
  CHECK(r.status.ToString() == "exit 0");
  CHECK_THAT(r.out, Catch::Contains("epoch 0: 10 examples in 3 batches") &&
                        Catch::Contains("epoch 1: 10 examples in 3 batches") &&
                        Catch::Contains("2 epoch(s) taken (--epochs): 20 examples"));
  CHECK_THAT(r.out, !Catch::Contains("epoch 2:"));
  CHECK(WaitUntil([&] { return daemon.Status()["consumers"].empty(); }));  // it detached
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("example_trainer: a value that is not a number, or out of range, is usage and exit 2, not 0 or rank 0") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--timeout", "abc"}, {"--timeout", "-5"}, {"--timeout", "5s"}, {"--rank", "x"}, {"--rank", "1.5"},
           {"--rank", "-1"}, {"--timeout"}, {"--epochs", "0"}, {"--epochs", "2.5"}}) {
    std::vector<std::string> command = {ExampleTrainerBinary(), "--job", "nobody-runs-this"};
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult r = RunCommand(command);
    INFO(args[0] << (args.size() > 1 ? " " + args[1] : "") << ":\n" << r.out << r.err);
    CHECK(r.status.ToString() == "exit 2");
    CHECK_THAT(r.err, Catch::Contains("usage: example_trainer --job JOB"));
    if (args.size() > 1) CHECK_THAT(r.err, Catch::StartsWith("example_trainer: " + args[0] + " '" + args[1] + "': expected "));
  }
}

TEST_CASE("status --files: one INDEX<TAB>PATH line per file, control characters in names as \\xNN") {
  TempDir dir;
  // A newline, a tab, an escape sequence, a C1 CSI (U+009B).
  const std::string odd = dir.file("a\nb\tc\x1b[31m\xC2\x9B.tfrecord");
  WriteIdFile(odd, 0, 1);
  DaemonProcess daemon(dir.path(), "odd-names", IdJobConfig("odd-names", dir.file("*.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const CommandResult lines = RunCommand({CtlBinary(), "status", "odd-names", "--files", "--runtime-dir",
                                          daemon.runtime_dir()});
  REQUIRE(lines.status.ToString() == "exit 0");
  CHECK(lines.out == "0\t" + dir.file("a\\x0Ab\\x09c\\x1B[31m\\xC2\\x9B.tfrecord") + "\n");
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("file names that are not UTF-8: status --files shows their bytes as \\xNN, the client gets them back") {
  TempDir dir;
  // A byte that is never UTF-8, and a name with those four characters in it: two files. Each
  // name beside its text (that byte as \xNN, a backslash before 'x' as \x5C).
  const std::string bad = dir.file("bad\xFF.tfrecord");
  const std::string lookalike = dir.file("bad\\xFF.tfrecord");
  std::vector<std::pair<std::string, std::string>> names = {{bad, dir.file("bad\\xFF.tfrecord")},
                                                            {lookalike, dir.file("bad\\x5CxFF.tfrecord")}};
  // 80 names of 200 such bytes: 4 characters each as text (5 in JSON), so more than one reply's
  // worth: the daemon's paging must count them as it writes them.
  for (int i = 0; i < 80; ++i) {
    char prefix[8];
    std::snprintf(prefix, sizeof prefix, "%03d-", i);
    std::string text = dir.file(prefix);
    for (int k = 0; k < 200; ++k) text += "\\xFE";
    names.emplace_back(dir.file(prefix + std::string(200, '\xFE') + ".tfrecord"), text + ".tfrecord");
  }
  std::sort(names.begin(), names.end());  // the daemon's order: by bytes ('0' < 'b', '\\' < 0xFF)
  std::vector<std::string> expected, expected_text;
  for (const auto& [name, text] : names) {
    WriteIdFile(name, static_cast<int64_t>(expected.size()), 1);
    expected.push_back(name);
    expected_text.push_back(text);
  }
  REQUIRE(expected[80] == lookalike);
  REQUIRE(expected[81] == bad);
  DaemonProcess daemon(dir.path(), "bad-names", IdJobConfig("bad-names", dir.file("*.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  const CommandResult lines = RunCommand({CtlBinary(), "status", "bad-names", "--files", "--runtime-dir",
                                          daemon.runtime_dir()});
  REQUIRE(lines.status.ToString() == "exit 0");
  std::string want;
  for (size_t i = 0; i < expected_text.size(); ++i) want += std::to_string(i) + "\t" + expected_text[i] + "\n";
  CHECK(lines.out == want);  // no U+FFFD: the bytes were replaced by it
  // --json: the same text, as inspect --json writes these names.
  const CommandResult as_json = RunCommand({CtlBinary(), "status", "bad-names", "--files", "--json", "--runtime-dir",
                                            daemon.runtime_dir()});
  REQUIRE(as_json.status.ToString() == "exit 0");
  CHECK(json::parse(as_json.out) == json{{"total", 82}, {"files", expected_text}});
  const CommandResult inspect = RunCommand({CtlBinary(), "inspect", "--count", "--json", bad, lookalike});
  REQUIRE(inspect.status.ToString() == "exit 0");
  const json counted = json::parse(inspect.out);
  CHECK(counted["files"][0]["file"] == expected_text[81]);  // bad
  CHECK(counted["files"][1]["file"] == expected_text[80]);  // lookalike
  // The client library: the paths' bytes, as the daemon opens them.
  auto client = Client::Attach(daemon.client_options());
  CHECK(client->files() == expected);
  CHECK(client->files()[81] == bad);
  client.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("ringfeedctl dump of a job at the end of its data says so on stderr") {
  TempDir dir;
  WriteIdFile(dir.file("part-0.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "dumpend",
                       IdJobConfig("dumpend", dir.file("part-*.tfrecord"), "batch: {size: 4}\nepochs: 1\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const auto dump = [&](const std::vector<std::string>& more) {
    std::vector<std::string> argv = {CtlBinary(), "dump", "dumpend", "--runtime-dir", daemon.runtime_dir()};
    argv.insert(argv.end(), more.begin(), more.end());
    return RunCommand(argv);
  };
  // A reader gone before dump writes (`| head` that has exited) is the documented clean end:
  // exit 0, nothing on stderr (the batch it took reaches no one: dump takes batches from the
  // job). Lines this short stay in stdout's buffer when their write fails, and the flush at
  // exit failed again (exit 1, "writing standard output failed: Broken pipe"; session 40).
  const CommandResult gone = RunCommand(
      {CtlBinary(), "dump", "dumpend", "--batches", "1", "--runtime-dir", daemon.runtime_dir()}, kEventually,
      /*stdout_reader_gone=*/true);
  CHECK(gone.status.ToString() == "exit 0");
  CHECK(gone.err.empty());
  // The rest of the epoch: 4 + 2 rows, then the end of the data, which is where dump stops anyway.
  const CommandResult all = dump({});
  INFO(all.out << all.err);
  CHECK(all.status.ToString() == "exit 0");
  CHECK(std::count(all.out.begin(), all.out.end(), '\n') == 2);
  CHECK(all.err.empty());
  // Nothing left: one line on stderr instead of silence.
  const CommandResult none = dump({"--batches", "2"});
  INFO(none.out << none.err);
  CHECK(none.status.ToString() == "exit 0");
  CHECK(none.out.empty());
  CHECK(none.err == "ringfeedctl dump: job 'dumpend' is at the end of its data (every epoch produced and taken): "
                    "0 batch(es) dumped\n");
  // Data the daemon ended early (an epoch that delivered no batch): dump gives its reason.
  WriteIdFile(dir.file("short-0.tfrecord"), 0, 3);
  DaemonProcess early(dir.path(), "dumpearly",
                      IdJobConfig("dumpearly", dir.file("short-*.tfrecord"),
                                  "batch: {size: 4, drop_remainder: true}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(early);
  const CommandResult reason =
      RunCommand({CtlBinary(), "dump", "dumpearly", "--runtime-dir", early.runtime_dir(), "--timeout", "20"});
  INFO(reason.out << reason.err);
  CHECK(reason.status.ToString() == "exit 0");
  CHECK(reason.out.empty());
  CHECK_THAT(reason.err, Catch::StartsWith("ringfeedctl dump: job 'dumpearly' ended its data early: epoch 0 "
                                           "delivered no batch: its 3 records are fewer than batch.size 4") &&
                             Catch::EndsWith(": 0 batch(es) dumped\n"));
  // A timeout that is no number of seconds is a usage error, not an instant give-up.
  for (const char* bad : {"nan", "1e300", "0", "1e-5"}) {
    const CommandResult r = dump({"--timeout", bad});
    CHECK(r.status.ToString() == "exit 2");
    CHECK_THAT(r.err, Catch::Contains("is not a timeout: give seconds from 0.001 to 604800"));
  }
}

TEST_CASE("a file removed after the start: its open error says it was listed at start (on_error: skip goes on)") {
  TempDir dir;
  WriteIdFile(dir.file("p-a.tfrecord"), 0, 10);
  WriteIdFile(dir.file("p-b.tfrecord"), 10, 10);
  DaemonProcess daemon(dir.path(), "file-gone",
                       "job: file-gone\nsource: {files: [\"" + dir.file("p-*.tfrecord") + "\"], on_error: skip}\n"
                       "features:\n" + IdFeaturesYaml() + "batch: {size: 5}\nepochs: 0\n");
  RINGFEED_REQUIRE_STARTED(daemon);
  REQUIRE(std::filesystem::remove(dir.file("p-b.tfrecord")));
  auto client = Client::Attach(daemon.client_options());
  const std::string said = dir.file("p-b.tfrecord") + ": I/O error: cannot open: No such file or directory (it was "
                           "listed when the job started, and the file list is fixed then: removed or renamed since?)";
  std::set<int64_t> ids;  // of the batches taken after the removal was said
  const auto all_of_a = [&] { return std::count_if(ids.begin(), ids.end(), [](int64_t id) { return id < 10; }) == 10; };
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < kEventually && !all_of_a()) {
    Batch batch;
    REQUIRE(client->Next(kEventually, &batch) == Client::Status::kBatch);
    if (daemon.Stderr().find(said) == std::string::npos) continue;
    for (int64_t id : BatchInfo::Of(batch).ids) ids.insert(id);
  }
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK_THAT(daemon.Stderr(), Catch::Contains(said));
  CHECK(all_of_a());  // the other file's records go on (the removed one's may still come from an open before)
  daemon.Stop();
}

TEST_CASE("compression: auto over files all plain at start: a file rewritten as GZIP later is read, with a warning "
          "that the plan did not count its buffers") {
  TempDir dir;
  WriteIdFile(dir.file("p-a.tfrecord"), 0, 10);
  WriteIdFile(dir.file("p-b.tfrecord"), 10, 10);
  DaemonProcess daemon(dir.path(), "turns-gzip",
                       IdJobConfig("turns-gzip", dir.file("p-*.tfrecord"), "batch: {size: 5}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // The same records, GZIP now; renamed over the old file, so a read in progress keeps the old one.
  WriteIdFile(dir.file("gz.tmp"), 10, 10, Compression::kGzip);
  std::filesystem::rename(dir.file("gz.tmp"), dir.file("p-b.tfrecord"));
  auto client = Client::Attach(daemon.client_options());
  std::multiset<int64_t> ids;  // of batches taken after the warning
  bool warned = false;
  const auto start = std::chrono::steady_clock::now();
  while (ids.size() < 40 && std::chrono::steady_clock::now() - start < kEventually) {
    Batch batch;
    REQUIRE(client->Next(kEventually, &batch) == Client::Status::kBatch);
    if (!warned) {
      warned = daemon.Stderr().find("is compressed (gzip)") != std::string::npos;
      continue;
    }
    for (int64_t id : BatchInfo::Of(batch).ids) ids.insert(id);
  }
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  REQUIRE(warned);
  CHECK_THAT(daemon.Stderr(),
             Catch::Contains(dir.file("p-b.tfrecord") + " is compressed (gzip) though every file was plain when the "
                             "job started (source.compression: auto): the memory plan counted no decompression "
                             "buffers, so each compressed file open takes ") &&
                 Catch::Contains("from the safety margin (a restart plans for them where its start-up sample "
                                 "reaches a compressed file)"));
  // Warned once; the rewritten file's records keep coming, each epoch all 20.
  const std::string err = daemon.Stderr();
  CHECK(err.find("is compressed (gzip)") == err.rfind("is compressed (gzip)"));
  REQUIRE(ids.size() >= 40);
  for (int64_t id = 0; id < 20; ++id) CHECK(ids.count(id) >= 1);
  daemon.Stop();
}
