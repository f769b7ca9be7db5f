// ringfeedd's consumers when things go wrong, with real processes (tests/daemon_harness.h):
//   * a consumer killed, or ended, while holding batches: the daemon reclaims its slots and
//     counts them, another consumer gets the rest; ranks mode frees a dead trainer's rank;
//   * the daemon killed (SIGKILL), frozen (SIGSTOP) or stopped (SIGTERM) while a consumer
//     waits in Next: Next throws quickly, never hangs;
//   * a process that writes the ring's words, and more consumers than ring slots.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "shm/names.h"
#include "shm/protocol.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "tests/daemon_harness.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// A job in ranks mode whose rank 0 never consumes: once rank 0's batches fill the ring
// (4 slots), rank 1 waits in Next for good (epochs: 0, so the data never ends).
std::string StalledRanksConfig(const std::string& job, const std::string& files) {
  return IdJobConfig(job, files,
                     "batch: {size: 2}\n"
                     "epochs: 0\n"
                     "ring: {slots: 4}\n"
                     "consumers: {mode: ranks, count: 2}\n");
}

// Child: attaches as rank 1, takes batches until none comes for 300 ms, says "waiting", then
// waits in Next (30 s at a time) and reports "threw <message>" when it throws.
int WaitingRank1(const ClientOptions& options, ChildIo& io) {
  auto client = Client::Attach(options);
  Batch batch;
  while (client->Next(std::chrono::milliseconds(300), &batch) == Client::Status::kBatch) {
  }
  io.WriteLine("waiting");
  try {
    for (;;) {
      const Client::Status status = client->Next(std::chrono::seconds(30), &batch);
      if (status != Client::Status::kBatch) io.WriteLine(status == Client::Status::kTimeout ? "timeout" : "end");
    }
  } catch (const ClientError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    io.WriteLine("threw " + what);
  }
  return 0;
}

}  // namespace

TEST_CASE("a consumer killed while holding 2 batches: reclaimed, counted, the rest goes to another") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  const std::string config = IdJobConfig("reclaim-job", dir.file("data.tfrecord"), "batch: {size: 4}\n");
  DaemonProcess daemon(dir.path(), "reclaim-job", config);
  RINGFEED_REQUIRE_STARTED(daemon);

  const ClientOptions options = daemon.client_options();
  ChildProcess holder([options](ChildIo& io) {
    auto client = Client::Attach(options);
    Batch first, second;  // Next releases what its Batch held: two Batches hold two slots
    if (client->Next(kEventually, &first) != Client::Status::kBatch) return 1;
    if (client->Next(kEventually, &second) != Client::Status::kBatch) return 1;
    io.WriteLine(BatchInfo::Of(first).ToLine());
    io.WriteLine(BatchInfo::Of(second).ToLine());
    io.WriteLine("holding");
    ::pause();
    return 0;
  });
  REQUIRE(holder.WaitForLine("holding"));
  REQUIRE(holder.skipped().size() == 2);
  std::vector<BatchInfo> held;
  for (const std::string& line : holder.skipped()) held.push_back(BatchInfo::FromLine(line));
  CHECK(daemon.Status()["ring"]["held"] == 2);

  holder.Kill(SIGKILL);
  CHECK(holder.Wait().signal == SIGKILL);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("(pid " + std::to_string(holder.pid()) + ") went away holding 2 batch(es)"));
  const json status = daemon.Status();
  CHECK(status["batches_reclaimed"] == 2);
  CHECK(status["consumers"].empty());
  CHECK(status["ring"]["held"] == 0);

  ConsumerSpec spec;
  spec.client = daemon.client_options();
  const ConsumerReport rest = ConsumeInProcess(spec);
  INFO("consumer error: " << rest.error);
  CHECK(rest.end == "end");
  CHECK(rest.batches.size() == 8);
  std::vector<int64_t> all = SortedIds(rest.batches);
  const std::vector<int64_t> lost = SortedIds(held);
  CHECK(lost.size() == 8);
  all.insert(all.end(), lost.begin(), lost.end());
  std::sort(all.begin(), all.end());
  CHECK(all == Iota(0, 40));  // disjoint, and together everything
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("a consumer that ends holding its last batch after the end of the data: reclaimed, not counted as dead") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 12);
  DaemonProcess daemon(dir.path(), "after-end", IdJobConfig("after-end", dir.file("data.tfrecord"), "batch: {size: 4}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const ClientOptions options = daemon.client_options();
  // Takes every batch, keeps the last one (a torch tensor of it alive at exit), sees the end.
  ChildProcess holder([options](ChildIo& io) {
    auto client = Client::Attach(options);
    Batch batch, last;
    while (client->Next(kEventually, &batch) == Client::Status::kBatch) last = std::move(batch);
    io.WriteLine("holding");
    ::pause();
    return 0;
  });
  REQUIRE(holder.WaitForLine("holding"));
  CHECK(daemon.Status()["ring"]["held"] == 1);
  holder.Kill(SIGKILL);
  CHECK(holder.Wait().signal == SIGKILL);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("(pid " + std::to_string(holder.pid()) +
                             ") detached after the end of the data, with its last 1 batch(es) not released "
                             "(still in use when its process ended, as when a trainer exits after its last batch)"));
  const json status = daemon.Status();
  CHECK(status["batches_reclaimed"] == 0);
  CHECK(status["ring"]["held"] == 0);
  CHECK_THAT(daemon.Stderr(), !Catch::Contains("went away holding"));
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("ranks mode: a trainer that died while a child it forked holds its connection frees its rank at once") {
  // Reaped, or a zombie: a launcher that does not wait for its children keeps the dead trainer's
  // pid (before, its rank stayed taken, and its slots held, until the launcher reaped it).
  const bool zombie = GENERATE(false, true);
  INFO((zombie ? "the dead trainer is a zombie" : "the dead trainer is reaped"));
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "orphan-rank",
                       IdJobConfig("orphan-rank", dir.file("data.tfrecord"),
                                   "consumers: {mode: ranks, count: 2}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const ClientOptions rank0 = daemon.client_options(0);
  ChildProcess trainer([rank0](ChildIo& io) {
    auto client = Client::Attach(rank0);
    const pid_t child = ::fork();  // inherits the control connection, and outlives the trainer
    if (child == 0) {
      ::sleep(60);
      ::_exit(0);
    }
    io.WriteLine("forked " + std::to_string(child));
    ::pause();
    return 0;
  });
  const std::optional<std::string> forked = trainer.WaitForLine("forked ");
  REQUIRE(forked);
  const pid_t child = static_cast<pid_t>(std::stol(forked->substr(7)));
  trainer.Kill(SIGKILL);
  if (zombie) {
    // Exited as the daemon tells it (shm::ProcessExited): the main thread shows Z before the
    // process's other threads are gone (under ThreadSanitizer its own thread, which a TSan run
    // caught still there: the daemon then rightly took the trainer for alive).
    REQUIRE(WaitUntil([&] { return shm::ProcessState(trainer.pid()) == 'Z' && shm::ProcessExited(trainer.pid()); }));
  } else {
    trainer.Wait();  // reaped: its pid no longer exists
  }
  // At once, not after the daemon's once-a-second check (it was refused until then: "rank 0 is
  // already attached by pid P", P gone).
  std::unique_ptr<Client> again;
  try {
    again = Client::Attach(rank0);
  } catch (const ClientError& e) {
    FAIL_CHECK("re-attach as rank 0 refused: " << e.what());
  }
  ::kill(child, SIGKILL);
  CHECK(again != nullptr);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("has exited but its control connection is still open (a child it forked holds it?); "
                             "detaching it for the new consumer of its rank"));
}

#if !defined(__SANITIZE_THREAD__)  // its shadow memory of the trainer's 1 GiB took the child past 10 s
TEST_CASE("ranks mode: a trainer killed a moment ago whose memory is still being freed: its rank is refused for now "
          "and attach_timeout waits for it") {
  // The kernel frees a killed process's memory before its sockets close (1 GiB: ~170 ms): a
  // trainer restarted at once by a supervisor was refused for good, naming the killed pid
  // (helper-164).
  const std::string how = GENERATE("no attach_timeout", "attach_timeout 10 s", "ringfeedctl dump");
  INFO(how);
  const bool wait = how == "attach_timeout 10 s";
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "dying-rank",
                       IdJobConfig("dying-rank", dir.file("data.tfrecord"),
                                   "consumers: {mode: ranks, count: 2}\nepochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  ClientOptions rank0 = daemon.client_options(0);
  ChildProcess trainer([rank0](ChildIo& io) {
    auto client = Client::Attach(rank0);
    std::vector<char> memory(size_t{1} << 30, 1);  // touched: its pages take a while to free
    io.WriteLine("holding " + std::to_string(memory[memory.size() / 2]));
    ::pause();
    return 0;
  });
  REQUIRE(trainer.WaitForLine("holding 1"));
  CHECK_FALSE(shm::ProcessExiting(trainer.pid()));
  CHECK_FALSE(shm::ProcessExiting(::getpid()));
  trainer.Kill(SIGKILL);
  if (how == "ringfeedctl dump") {
    const CommandResult dump = RunCommand(
        {CtlBinary(), "dump", "dying-rank", "--rank", "0", "--batches", "1", "--runtime-dir", daemon.runtime_dir()});
    INFO(dump.err);
    if (dump.status.ToString() != "exit 0") {  // else its memory was freed already
      CHECK_THAT(dump.err, Catch::Contains(", which is exiting (killed: its rank is free once its memory is freed "
                                           "and its connection closes, in a moment); run ringfeedctl dump again "
                                           "in a moment") &&
                               !Catch::Contains("attach_timeout"));
    }
    return;
  }
  if (wait) rank0.attach_timeout = std::chrono::seconds(10);
  std::unique_ptr<Client> again;
  try {
    again = Client::Attach(rank0);
  } catch (const ClientError& e) {
    // Only for now, and said so: the rank frees in a moment.
    CHECK_FALSE(wait);
    CHECK_THAT(e.what(), Catch::Contains("rank 0 is already attached by pid " + std::to_string(trainer.pid()) +
                                         ", which is exiting (killed: its rank is free once its memory is freed "
                                         "and its connection closes, in a moment). To try again for a while, set "
                                         "attach_timeout"));
  }
  if (wait) CHECK(again != nullptr);
  REQUIRE(WaitUntil([&] { return shm::ProcessExited(trainer.pid()); }));
  CHECK_FALSE(shm::ProcessExiting(trainer.pid()));  // exited, no longer exiting
}
#endif

TEST_CASE("a trainer whose main thread ended (pthread_exit) while another thread holds its client stays attached") {
  // Its /proc/PID/stat says Z, as a zombie's does: a check on that letter alone detached a
  // live trainer and freed the slots it was reading (helper-127).
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "leaderless", IdJobConfig("leaderless", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const ClientOptions options = daemon.client_options();
  ChildProcess trainer([options](ChildIo& io) {
    std::shared_ptr<Client> client = Client::Attach(options);
    auto batch = std::make_shared<Batch>();
    if (client->Next(kEventually, batch.get()) != Client::Status::kBatch) return 3;
    std::thread([client, batch] { ::sleep(60); }).detach();  // holds the client and its batch
    io.WriteLine("holding");
    // This thread alone ends, as pthread_exit's would, without unwinding the test's frames.
    ::syscall(SYS_exit, 0);
    return 4;
  });
  REQUIRE(trainer.WaitForLine("holding"));
  REQUIRE(WaitUntil([&] { return shm::ProcessState(trainer.pid()) == 'Z'; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two of the daemon's checks
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK_FALSE(shm::ProcessExited(trainer.pid()));
  const json status = daemon.Status();
  REQUIRE(status["consumers"].size() == 1);
  CHECK(status["consumers"][0]["pid"] == trainer.pid());
  CHECK(status["consumers"][0]["slots_held"] == 1);
  CHECK_THAT(daemon.Stderr(), !Catch::Contains("has exited but its control connection is still open") &&
                                  !Catch::Contains("ring repaired"));
}

TEST_CASE("ranks mode: a daemon in its own pid namespace sees trainers as pid 0: a taken rank is neither freed nor "
          "blamed on the asker") {
  if (::geteuid() != 0) {
    SkipOrFail("needs root, to start ringfeedd in a pid namespace of its own (unshare -p)");
    return;
  }
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  const std::string config = dir.file("pidns-rank.yaml"), runtime = dir.file("run");
  {
    std::ofstream out(config);
    out << IdJobConfig("pidns-rank", dir.file("data.tfrecord"), "consumers: {mode: ranks, count: 2}\nepochs: 0\n");
  }
  REQUIRE(::mkdir(runtime.c_str(), 0755) == 0);
  // Not DaemonProcess: it knows a started daemon by its own pid in the lock file, and in the new
  // namespace ringfeedd is pid 1. unshare -f ignores SIGTERM while it waits: ringfeedd, its
  // child, is stopped directly (--kill-child: should the test die first, so does ringfeedd).
  const std::string binary = DaemonBinary();
  const pid_t unshare = ::fork();
  REQUIRE(unshare >= 0);
  if (unshare == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDERR_FILENO);
    ::execlp("unshare", "unshare", "-p", "-f", "--kill-child", "--mount-proc", binary.c_str(), "--config",
             config.c_str(), "--runtime-dir", runtime.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto stop = [&] {
    std::ifstream children("/proc/" + std::to_string(unshare) + "/task/" + std::to_string(unshare) + "/children");
    pid_t daemon = 0;
    if (children >> daemon && daemon > 0) ::kill(daemon, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100 && ::waitpid(unshare, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (::waitpid(unshare, &status, WNOHANG) == 0) {  // not stopped in 10 s: kill both (--kill-child)
      ::kill(unshare, SIGKILL);
      ::waitpid(unshare, &status, 0);
    }
  };
  ClientOptions options;
  options.job = "pidns-rank";
  options.runtime_dir = runtime;
  options.rank = 0;
  options.attach_timeout = std::chrono::seconds(20);
  std::unique_ptr<Client> first;
  try {
    first = Client::Attach(options);  // this process: pid 0 to the daemon
  } catch (const ClientError& e) {
    stop();
    FAIL("attach as rank 0: " << e.what());
  }
  options.attach_timeout = std::chrono::milliseconds(0);
  ChildProcess other([options](ChildIo& io) {
    try {
      Client::Attach(options);
      io.WriteLine("attached");
    } catch (const ClientError& e) {
      io.WriteLine(std::string("refused: ") + e.what());
    }
    return 0;
  });
  const std::optional<std::string> said = other.ReadLine();
  first.reset();
  stop();
  REQUIRE(said);
  CHECK_THAT(*said, Catch::StartsWith("refused: ") &&
                        Catch::Contains("rank 0 is already attached by a process outside ringfeedd's pid namespace "
                                        "(its pid reads as 0 there)") &&
                        !Catch::Contains("this process"));
  // ringfeedd stopped cleanly on the SIGTERM: its socket is gone.
  CHECK(WaitUntil([&] { return ::access((runtime + "/pidns-rank.sock").c_str(), F_OK) != 0; }));
}

TEST_CASE("ranks mode: a rank whose consumer left is named in the log and in status until one attaches again") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 20);
  DaemonProcess daemon(dir.path(), "rank-gone", StalledRanksConfig("rank-gone", dir.file("data.tfrecord")));
  RINGFEED_REQUIRE_STARTED(daemon);
  const ClientOptions rank1 = daemon.client_options(1);
  auto zero = Client::Attach(daemon.client_options(0));
  CHECK(daemon.Status()["ranks_without_consumer"] == json::array({1}));
  {
    auto one = Client::Attach(rank1);
    CHECK(daemon.Status()["ranks_without_consumer"] == json::array());
  }  // rank 1 detaches
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("rank 1 has no consumer now: its batches wait in the ring for one to attach as rank 1"));
  CHECK(daemon.Status()["ranks_without_consumer"] == json::array({1}));
  const CommandResult status = RunCommand({CtlBinary(), "status", "rank-gone", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(status.out, Catch::Contains("no consumer for rank 1: its batches wait in the ring"));
  // dump without --rank on a ranks job: refused, and told which option attaches as a rank.
  const CommandResult dump = RunCommand({CtlBinary(), "dump", "rank-gone", "--runtime-dir", daemon.runtime_dir()});
  CHECK(dump.status.ToString() == "exit 1");
  CHECK_THAT(dump.err, Catch::Contains("attach with a rank in 0..1") &&
                           Catch::Contains("(ringfeedctl dump --rank R)"));
  zero.reset();  // both ranks without a consumer: the status line speaks of them together
  CHECK(daemon.WaitForStderr("rank 0 has no consumer now"));
  CHECK_THAT(RunCommand({CtlBinary(), "status", "rank-gone", "--runtime-dir", daemon.runtime_dir()}).out,
             Catch::Contains("no consumer for ranks 0, 1: their batches wait in the ring"));
  auto again = Client::Attach(rank1);
  CHECK(daemon.Status()["ranks_without_consumer"] == json::array({0}));
  // A trainer that attaches and leaves over and over: the warning once a minute per rank, each
  // detach still logged (info).
  again.reset();
  for (int i = 0; i < 5; ++i) Client::Attach(rank1).reset();
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  REQUIRE(WaitUntil([&] { return count(daemon.Stderr(), ") detached") >= 8; }));
  CHECK(count(daemon.Stderr(), "rank 1 has no consumer now") == 1);
  CHECK(count(daemon.Stderr(), "rank 0 has no consumer now") == 1);
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("Next from 4 threads of one client on a healthy, idle daemon: never a liveness error") {
  // Every Next checks the heartbeat's age; threads racing on it once saw a wrapped age
  // ("has not written its heartbeat for 18446744073.7 s").
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "idle-threads", StalledRanksConfig("idle-threads", dir.file("data.tfrecord")));
  RINGFEED_REQUIRE_STARTED(daemon);
  auto client = Client::Attach(daemon.client_options(1));
  {
    Batch batch;  // rank 1's batches, until rank 0's fill the ring
    while (client->Next(std::chrono::milliseconds(300), &batch) == Client::Status::kBatch) {
    }
  }
  std::atomic<int> errors{0};
  std::string first_error;
  std::mutex error_mutex;
  const auto until = Clock::now() + std::chrono::seconds(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Batch batch;
      while (Clock::now() < until) {
        try {
          client->Next(std::chrono::milliseconds(0), &batch);
        } catch (const ClientError& e) {
          if (errors++ == 0) {
            std::lock_guard lock(error_mutex);
            first_error = e.what();
          }
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  INFO(first_error);
  CHECK(errors == 0);
  client.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("the daemon dies while a consumer waits in Next: Next throws within 2 s") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 20);
  DaemonProcess daemon(dir.path(), "killed-job", StalledRanksConfig("killed-job", dir.file("data.tfrecord")));
  RINGFEED_REQUIRE_STARTED(daemon);
  const ClientOptions options = daemon.client_options(1);
  ChildProcess consumer([options](ChildIo& io) { return WaitingRank1(options, io); });
  REQUIRE(consumer.WaitForLine("waiting"));
  // Give the child time to enter Next; the result does not depend on it.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  const auto killed = Clock::now();
  daemon.Kill(SIGKILL);
  const auto line = consumer.WaitForLine("threw", kEventually);
  const double seconds = SecondsSince(killed);
  REQUIRE(line);
  INFO(*line);
  CHECK(seconds < 2.0);
  CHECK_THAT(*line, Catch::Contains("ringfeedd (pid " + std::to_string(daemon.pid()) + ")"));
  CHECK_THAT(*line, Catch::Contains("exited"));
  const auto status = daemon.Wait();
  REQUIRE(status);
  CHECK(status->signal == SIGKILL);

  SECTION("a restart over the stale segment and socket serves again") {
    CHECK(std::filesystem::exists(daemon.segment_path()));  // left behind by SIGKILL
    CHECK(std::filesystem::exists(daemon.socket_path()));
    // Same job, same runtime directory, a config with an end so the consumer can finish.
    WriteIdFile(dir.file("more.tfrecord"), 20, 6);
    const std::string config = IdJobConfig("killed-job", dir.file("*.tfrecord"), "batch: {size: 4}\n");
    DaemonProcess again(dir.path(), "killed-job", config);
    RINGFEED_REQUIRE_STARTED(again);
    ConsumerSpec spec;
    spec.client = again.client_options();
    const ConsumerReport report = ConsumeInProcess(spec);
    INFO("consumer error: " << report.error << "\nringfeedd stderr:\n" << again.Stderr());
    CHECK(report.end == "end");
    CHECK(SortedIds(report.batches) == Iota(0, 26));
    // Both replacements are logged: a leftover segment says what it was.
    CHECK_THAT(again.Stderr(), Catch::Contains("[warning] replaced what was at " + again.segment_path() +
                                               ": a file of ") &&
                                   Catch::Contains(" bytes, uid " + std::to_string(::geteuid()) + ", modified ") &&
                                   Catch::Contains(", the ring of ringfeedd pid " + std::to_string(daemon.pid()) +
                                                   ", which has exited (left by a daemon of this job that did not "
                                                   "stop cleanly") &&
                                   Catch::Contains("replaced the socket left at " + again.socket_path()));
    CHECK(again.Stop().ToString() == "exit 0");
    CHECK_FALSE(std::filesystem::exists(again.segment_path()));
    CHECK_FALSE(std::filesystem::exists(again.socket_path()));
  }
}

TEST_CASE("the daemon frozen (SIGSTOP): Next throws naming the heartbeat after about liveness_timeout") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 20);
  DaemonProcess daemon(dir.path(), "frozen-job", StalledRanksConfig("frozen-job", dir.file("data.tfrecord")));
  RINGFEED_REQUIRE_STARTED(daemon);
  ClientOptions options = daemon.client_options(1);
  options.liveness_timeout = std::chrono::milliseconds(1000);
  ChildProcess consumer([options](ChildIo& io) { return WaitingRank1(options, io); });
  REQUIRE(consumer.WaitForLine("waiting"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // into Next; not needed for the result

  const auto stopped = Clock::now();
  daemon.Kill(SIGSTOP);
  const auto line = consumer.WaitForLine("threw", kEventually);
  const double seconds = SecondsSince(stopped);
  daemon.Kill(SIGCONT);
  REQUIRE(line);
  INFO(*line);
  CHECK(seconds > 0.5);  // the heartbeat was fresh when the daemon stopped
  CHECK(seconds < 3.0);
  CHECK_THAT(*line, Catch::Contains("heartbeat"));
  CHECK(consumer.Wait().ToString() == "exit 0");

  // `ringfeedctl dump --timeout 2` on the frozen daemon gives up after about 2 s, at the hello.
  daemon.Kill(SIGSTOP);
  const auto dump_start = Clock::now();
  const CommandResult dump = RunCommand({CtlBinary(), "dump", "frozen-job", "--rank", "0", "--timeout", "2",
                                         "--runtime-dir", daemon.runtime_dir()});
  const double dump_seconds = SecondsSince(dump_start);
  daemon.Kill(SIGCONT);
  INFO(dump.out << dump.err);
  CHECK(dump.status.ToString() == "exit 1");
  CHECK_THAT(dump.err, Catch::Contains("did not answer the hello on " + daemon.socket_path() + " within 2000 ms: ringfeedd "
                                       "(pid " + std::to_string(daemon.pid()) + ") for job frozen-job is stopped (state "
                                       "T: SIGSTOP, Ctrl-Z or a debugger); it answers once continued (kill -CONT " +
                                       std::to_string(daemon.pid()) + ")"));
  CHECK(dump_seconds > 1.5);
  CHECK(dump_seconds < 5.0);

  // ClientOptions::interrupted ends the hello's wait (liveness_timeout 30 s here) as soon as it
  // says so: ClientInterrupted, not the timeout's error.
  daemon.Kill(SIGSTOP);
  ClientOptions interruptible = daemon.client_options(0);
  interruptible.liveness_timeout = std::chrono::seconds(30);
  const auto attach_start = Clock::now();
  int asked = 0;
  interruptible.interrupted = [&] { return ++asked, SecondsSince(attach_start) > 0.3; };
  CHECK_THROWS_AS(Client::Attach(interruptible), ClientInterrupted);
  const double attach_seconds = SecondsSince(attach_start);
  daemon.Kill(SIGCONT);
  CHECK(attach_seconds < 1.0);
  CHECK(asked >= 3);  // about every 100 ms
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("the daemon stopped (SIGTERM) while a consumer waits: Next throws with the reason") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 20);
  DaemonProcess daemon(dir.path(), "stopped-job", StalledRanksConfig("stopped-job", dir.file("data.tfrecord")));
  RINGFEED_REQUIRE_STARTED(daemon);
  const ClientOptions options = daemon.client_options(1);
  ChildProcess consumer([options](ChildIo& io) { return WaitingRank1(options, io); });
  REQUIRE(consumer.WaitForLine("waiting"));
  CHECK(daemon.Stop().ToString() == "exit 0");
  const auto line = consumer.WaitForLine("threw", kEventually);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  REQUIRE(line);
  CHECK_THAT(*line, Catch::Contains("stopped: ringfeedd stopped by SIGTERM; restart it and attach again (ringfeedd "
                                    "--start-epoch E --start-batch K starts at batch K of epoch E, 0-based: the one "
                                    "after the last this trainer took;"));
  // The log's line says where it stopped, without the advice meant for trainers.
  CHECK_THAT(LineWith(daemon.Stderr(), "ringfeedd stopped by SIGTERM"),
             Catch::Contains("ringfeedd stopped by SIGTERM: stopping at epoch 1 of "));
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.segment_path()));
}

TEST_CASE("a process that writes the ring's words: the daemon keeps its own geometry and counts, puts them back, "
          "delivery goes on") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 40);
  DaemonProcess daemon(dir.path(), "scribbled",
                       IdJobConfig("scribbled", dir.file("data.tfrecord"),
                                   "batch: {size: 4}\nepochs: 0\nring: {slots: 4}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  daemon.ExpectRingRepairs();
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  auto consumer = Client::Attach(daemon.client_options());
  // Each batch holds the 4 records its index says (no shuffle; 10 batches an epoch).
  auto take = [&](int n) {
    for (int i = 0; i < n; ++i) {
      Batch batch;
      REQUIRE(consumer->Next(std::chrono::seconds(5), &batch) == Client::Status::kBatch);
      const BatchInfo b = BatchInfo::Of(batch);
      const int64_t first = static_cast<int64_t>(b.index % 10) * 4;
      CHECK(b.ids == std::vector<int64_t>{first, first + 1, first + 2, first + 3});
    }
  };
  take(3);
  // What any process that may attach can do: map the segment read-write.
  const std::string name = "/" + std::filesystem::path(daemon.segment_path()).filename().string();
  shm::Segment segment = shm::Segment::Open(name);
  const shm::Ring ring = shm::Ring::Of(segment.data());  // before the scribbles
  shm::Superblock* sb = ring.sb;
  uint64_t repairs = 0;
  auto repaired = [&](const char* what) {
    INFO(what);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (daemon.Status().value("ring_repairs", uint64_t{0}) == repairs && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const uint64_t now = daemon.Status().value("ring_repairs", uint64_t{0});
    CHECK(now > repairs);
    repairs = now;
  };
  auto every_ready_word = [&](const std::function<uint64_t(const shm::SlotWord&)>& forge) {
    // The ring refilled (a batch is ready once more).
    CHECK(WaitUntil([&] {
      for (uint32_t s = 0; s < ring.slot_count; ++s) {
        if (shm::SlotWord::Unpack(ring.header(s)->word.load()).state == shm::SlotState::kReady) return true;
      }
      return false;
    }));
    int forged = 0;
    for (uint32_t s = 0; s < ring.slot_count; ++s) {
      const shm::SlotWord w = shm::SlotWord::Unpack(ring.header(s)->word.load());
      if (w.state == shm::SlotState::kReady) ring.header(s)->word.store(forge(w)), ++forged;
    }
    CHECK(forged > 0);
  };

  // The geometry: were the daemon to read it back, it would write past its slots (or crash).
  sb->slot_count = 9;
  sb->slot_bytes = uint64_t{1} << 40;
  sb->slots_offset = uint64_t{1} << 44;
  repaired("geometry");
  take(3);
  CHECK(Client::Attach(daemon.client_options()) != nullptr);  // what a new client reads is right again
  // The state (consumers would end as if the data had ended) and the schema a new client reads.
  sb->state.store(static_cast<uint32_t>(shm::DaemonState::kEndOfData));
  std::swap(sb->features[0].dtype, sb->features[1].dtype);
  sb->batch_size = 1;
  repaired("state and schema");
  CHECK(sb->state.load() == static_cast<uint32_t>(shm::DaemonState::kRunning));
  take(3);
  {
    auto fresh = Client::Attach(daemon.client_options());
    CHECK(fresh->schema().batch_size == 4);
  }
  // Queue cursors: `published` far ahead (consumers would walk it for hours), `taken` ahead of
  // every batch waiting (they would wait for good), `taken` far behind (they refuse to walk it).
  auto ring_full = [&] {  // nothing more to publish until a consumer takes a batch
    uint64_t batches = daemon.Status()["batches"].get<uint64_t>();
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const uint64_t now = daemon.Status()["batches"].get<uint64_t>();
      if (now == batches) return;
      batches = now;
    }
  };
  ring_full();
  ring.queue(0).published.store(100'000'000'000);
  repaired("published");
  take(3);
  ring.queue(0).taken.store(1'000'000);
  repaired("taken ahead");
  take(3);
  take(400);  // more published than a gap consumers walk
  ring_full();
  ring.queue(0).taken.store(0);
  repaired("taken behind");
  take(3);
  // Slot words: held by a consumer id that is not attached; a state that does not exist.
  every_ready_word([](const shm::SlotWord& w) { return shm::SlotWord{shm::SlotState::kHeld, w.queue, 60, w.seq}.Pack(); });
  repaired("held by consumer 60");
  take(3);
  every_ready_word([](const shm::SlotWord& w) { return (w.Pack() & ~uint64_t{0xf}) | 7; });
  repaired("state 7");
  take(3);
  CHECK(daemon.running());
  CHECK_THAT(daemon.Stderr(), Catch::Contains("ring repaired: the superblock's slot_bytes was 1099511627776, not ") &&
                                  Catch::Contains("ring repaired: queue 0: published was 100000000000, not ") &&
                                  Catch::Contains("ring repaired: the superblock's state was 2 while production runs") &&
                                  Catch::Contains("ring repaired: the superblock's geometry or schema") &&
                                  Catch::Contains("ring repaired: queue 0: taken was 1000000, past batch ") &&
                                  Catch::Contains("ring repaired: queue 0: taken was 0, ") &&
                                  Catch::Contains("which is not attached; freed") &&
                                  Catch::Contains("in state 7 after it was published; freed (its batch, unless a "
                                                  "consumer had taken it, is not delivered)"));
  consumer.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("ranks mode: a rank that marks another rank's ready batches as held by itself has them freed, and the "
          "other rank goes on") {
  // Before, the slots stayed held by the forger (an attached consumer, so not repaired): rank 0
  // waited for good and the ring filled (helper-147).
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 80);
  DaemonProcess daemon(dir.path(), "forged-rank",
                       IdJobConfig("forged-rank", dir.file("data.tfrecord"),
                                   "batch: {size: 4}\nepochs: 0\nring: {slots: 6}\n"
                                   "consumers: {mode: ranks, count: 2}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  daemon.ExpectRingRepairs();
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  auto rank0 = Client::Attach(daemon.client_options(0));
  auto rank1 = Client::Attach(daemon.client_options(1));
  const std::string name = "/" + std::filesystem::path(daemon.segment_path()).filename().string();
  shm::Segment segment = shm::Segment::Open(name);
  const shm::Ring ring = shm::Ring::Of(segment.data());
  // Rank 1's process forges holds on every ready batch of rank 0 (queue 0), as claims would
  // write them, with its own consumer id.
  int forged = 0;
  REQUIRE(WaitUntil([&] {
    for (uint32_t s = 0; s < ring.slot_count; ++s) {
      uint64_t word = ring.header(s)->word.load();
      const shm::SlotWord w = shm::SlotWord::Unpack(word);
      if (w.state != shm::SlotState::kReady || w.queue != 0) continue;
      const uint64_t held = shm::SlotWord{shm::SlotState::kHeld, 0, rank1->consumer_id(), w.seq}.Pack();
      if (ring.header(s)->word.compare_exchange_strong(word, held)) ++forged;
    }
    return forged > 0;
  }));
  CHECK(daemon.WaitForStderr("), but its batch is rank 0's; freed (its batch, unless a consumer had taken it, is "
                             "not delivered)"));
  CHECK_THAT(daemon.Stderr(), Catch::Contains("was held by consumer " + std::to_string(rank1->consumer_id()) +
                                              " (rank 1), but its batch is rank 0's"));
  // Rank 0 goes on (its batches after the freed ones), and so does rank 1.
  for (int i = 0; i < 20; ++i) {
    Batch b0, b1;
    REQUIRE(rank0->Next(std::chrono::seconds(10), &b0) == Client::Status::kBatch);
    REQUIRE(rank1->Next(std::chrono::seconds(10), &b1) == Client::Status::kBatch);
    CHECK(b0.index() % 2 == 0);
    CHECK(b1.index() % 2 == 1);
  }
  rank0.reset();
  rank1.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("a 65th consumer is refused, naming the pids that hold the 64") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 20);
  DaemonProcess daemon(dir.path(), "crowd", IdJobConfig("crowd", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t i = 0; i < shm::kMaxConsumers; ++i) clients.push_back(Client::Attach(daemon.client_options()));
  try {
    Client::Attach(daemon.client_options());
    FAIL("a 65th consumer attached");
  } catch (const ClientError& e) {
    // It said only "too many consumers: 64 are attached already" (helper-147).
    CHECK_THAT(e.what(), Catch::Contains("too many consumers: 64 are attached already (pid " +
                                         std::to_string(::getpid()) + " (64); ringfeedctl status lists them)"));
  }
  clients.clear();
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("more consumers than ring slots, each holding a batch: warned at attach, shown in status, logged") {
  TempDir dir;
  WriteIdFile(dir.file("part-0.tfrecord"), 0, 1000);
  DaemonProcess daemon(dir.path(), "allheld",
                       IdJobConfig("allheld", dir.file("part-*.tfrecord"), "batch: {size: 4}\nepochs: 0\nring: {slots: 2}\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // Three consumers on two slots: two hold a batch each (as a consumer holds its previous batch
  // while it waits for the next), the third can only time out.
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(Client::Attach(daemon.client_options()));
  // Warned when the count reaches the slots, then at each doubling, not on every attach.
  CHECK(daemon.WaitForStderr("2 consumers attached to a ring of 2 slots"));
  Batch a, b, c;
  REQUIRE(clients[0]->Next(std::chrono::seconds(10), &a) == Client::Status::kBatch);
  REQUIRE(clients[1]->Next(std::chrono::seconds(10), &b) == Client::Status::kBatch);
  CHECK(clients[2]->Next(std::chrono::milliseconds(500), &c) == Client::Status::kTimeout);
  CHECK(clients[2]->slots_held_by_all() == 2);
  CHECK(clients[2]->slots_held() == 0);
  // Who holds the slots, and what to do: each of three consumers needs one and one to fill.
  const auto name = [&](int i) {
    return "consumer " + std::to_string(clients[i]->consumer_id()) + " (pid " + std::to_string(getpid()) + ")";
  };
  const std::string advice = name(0) + " holds 1, " + name(1) + " 1: each consumer that keeps its previous batch "
                             "while it waits for the next (a Python `for batch in client:` loop) needs a slot of its "
                             "own and one to fill: give the job ring.slots: 6 or more";
  CHECK(clients[2]->timeout_reason() == "all 2 slots of the ring are held by its consumers, so the daemon has "
                                        "nowhere to put the next batch: " + advice + " (ringfeedctl status allheld)");
  const CommandResult status = RunCommand({CtlBinary(), "status", "allheld", "--runtime-dir", daemon.runtime_dir()});
  INFO(status.out << status.err);
  CHECK_THAT(status.out, Catch::Contains("every slot is held by a consumer: no batch can be made until one is "
                                         "released; " + advice + "\n"));
  CHECK_THAT(status.out, Catch::Contains(": 1 batch taken, holds 1 slot, waited ") &&
                             Catch::Contains(": 0 batches taken, holds 0 slots, waited "));
  CHECK(daemon.Status()["consumers"][0]["slots_held"] == 1);
  CHECK(daemon.WaitForStderr("all 2 ring slots have been held by consumers for 10 s: no batch can be made until one "
                             "is released; " + advice, std::chrono::seconds(20)));
  // One released: the third gets a batch.
  a.Release();
  CHECK(clients[2]->Next(std::chrono::seconds(10), &c) == Client::Status::kBatch);
  clients.push_back(Client::Attach(daemon.client_options()));
  CHECK(daemon.WaitForStderr("4 consumers attached to a ring of 2 slots"));
  CHECK_THAT(daemon.Stderr(), !Catch::Contains("3 consumers attached to a ring"));
  // One consumer keeping both slots: it is named as the one to release them (more slots would
  // not help a trainer that keeps every batch).
  b.Release();
  c.Release();
  Batch d;
  REQUIRE(clients[3]->Next(std::chrono::seconds(10), &c) == Client::Status::kBatch);
  REQUIRE(clients[3]->Next(std::chrono::seconds(10), &d) == Client::Status::kBatch);
  CHECK(clients[0]->Next(std::chrono::milliseconds(200), &a) == Client::Status::kTimeout);
  CHECK(clients[0]->timeout_reason() ==
        "all 2 slots of the ring are held by its consumers, so the daemon has nowhere to put the next batch: " +
            name(3) + " holds 2: " + name(3) + " keeps 2 batches it has not released (batches a trainer stores, or "
            "arrays or tensors of them kept alive): release those no longer needed; trainers that need them all at "
            "once need more ring.slots (6 for these consumers) (ringfeedctl status allheld)");
  CHECK_THAT(clients[3]->timeout_reason(), Catch::StartsWith("this client holds all 2 slots of the ring"));
}
