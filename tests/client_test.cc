// The client library against a test producer in a forked process (real shared memory, real
// control socket): batch contents, end of data, timeouts without CPU burn, the daemon dying
// (SIGKILL), freezing (SIGSTOP), failing, refusing, restarting; invalid batches; threads.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "client/client.h"
#include "shm/names.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "tests/ring_test_producer.h"
#include "tests/test_support.h"

namespace ringfeed {
namespace {

using namespace std::chrono_literals;
using Status = Client::Status;
using testing::ChildProcess;
using testing::ForkProducer;
using testing::ProducerOptions;
using testing::RingTestProducer;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

ProducerOptions Options(const TempDir& dir, const std::string& job = "train") {
  ProducerOptions o;
  o.runtime_dir = dir.path().string();
  o.job = job;
  return o;
}

ClientOptions Attach(const TempDir& dir, const std::string& job = "train", int rank = -1) {
  ClientOptions o;
  o.job = job;
  o.rank = rank;
  o.runtime_dir = dir.path().string();
  return o;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Checks a batch against the producer's formula (tests/ring_test_producer.h).
void CheckTestBatch(const Batch& b, uint32_t batch_size, uint32_t queue) {
  const uint64_t first = b.index() * batch_size;
  const uint32_t rows = b.rows();
  REQUIRE(b.feature_count() == 4);

  const TensorView label = b.feature("label");
  CHECK(label.dtype() == shm::DType::kInt64);
  CHECK(label.type() == shm::FeatureType::kFixedLen);
  REQUIRE(label.shape().size() == 1);
  CHECK(label.shape()[0] == rows);
  const auto labels = label.values<int64_t>();
  REQUIRE(labels.size() == rows);
  for (uint32_t r = 0; r < rows; ++r) CHECK(labels[r] == static_cast<int64_t>(first + r));

  const TensorView weights = b.feature(1);
  CHECK(weights.name() == "weights");
  CHECK(weights.type() == shm::FeatureType::kVarLen);
  const auto splits = weights.row_splits();
  const auto values = weights.values<float>();
  REQUIRE(splits.size() == rows + 1);
  CHECK(weights.shape()[0] == static_cast<int64_t>(values.size()));
  for (uint32_t r = 0; r < rows; ++r) {
    const uint64_t g = first + r;
    REQUIRE(splits[r + 1] - splits[r] == static_cast<int64_t>(g % 4));
    for (int64_t k = 0; k < splits[r + 1] - splits[r]; ++k) {
      CHECK(values[splits[r] + k] == static_cast<float>(g) + 0.5f * static_cast<float>(k));
    }
  }
  CHECK(weights.value_offsets().empty());

  const TensorView key = b.feature("key");
  CHECK(key.dtype() == shm::DType::kBytes);
  CHECK(std::vector<int64_t>(key.shape().begin(), key.shape().end()) == std::vector<int64_t>{rows, 2});
  REQUIRE(key.size() == 2 * rows);
  for (uint32_t r = 0; r < rows; ++r) {
    CHECK(key.string(2 * r) == "k" + std::to_string(first + r) + "a");
    CHECK(key.string(2 * r + 1) == "k" + std::to_string(first + r) + "bb");
  }

  const TensorView pixels = b.feature("pixels");
  CHECK(std::vector<int64_t>(pixels.shape().begin(), pixels.shape().end()) == std::vector<int64_t>{rows, 2, 3});
  const auto px = pixels.values<uint8_t>();
  REQUIRE(px.size() == rows * 6);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t j = 0; j < 6; ++j) CHECK(px[r * 6 + j] == static_cast<uint8_t>(first + r + j));
  }
  for (uint32_t r = 0; r < rows; ++r) {
    CHECK(b.source(r).file_index == queue);
    CHECK(b.source(r).record_index == first + r);
  }
  CHECK(reinterpret_cast<uintptr_t>(label.data()) % 64 == 0);
}

TEST_CASE("client: schema, batch contents, end of epoch and end of data") {
  TempDir dir;
  // 10 batches through 8 slots (the producer waits for releases), the last of 3 rows.
  ChildProcess producer = ForkProducer(Options(dir), [](RingTestProducer& p) {
    for (uint64_t n = 0; n < 10; ++n) {
      const bool last = n == 9;
      p.PublishBatch(0, n, 0, last ? shm::kBatchEndOfEpoch | shm::kBatchEndOfData : 0, last ? 3 : -1);
    }
    p.SetState(shm::DaemonState::kEndOfData);
  });
  auto client = Client::Attach(Attach(dir));
  CHECK(client->job() == "train");
  CHECK(client->daemon_pid() == producer.pid());
  CHECK(client->consumer_id() == 1);
  const Schema& schema = client->schema();
  CHECK(schema.batch_size == 4);
  REQUIRE(schema.features.size() == 4);
  CHECK(schema.features[0].name == "label");
  CHECK(schema.features[2].shape == std::vector<int64_t>{2});
  CHECK(schema.features[3].dtype == shm::DType::kUInt8);
  CHECK(schema.IndexOf("pixels") == 3u);
  CHECK_FALSE(schema.IndexOf("nope"));

  // The slot region: whole pages, and every column of every batch lies inside it.
  const std::span<uint8_t> region = client->slots_region();
  CHECK(reinterpret_cast<uintptr_t>(region.data()) % 4096 == 0);
  CHECK(region.size() % 4096 == 0);
  CHECK(region.size() >= 8 * uint64_t{4096});  // 8 slots of at least a page each
  Batch batch;
  for (uint64_t n = 0; n < 10; ++n) {
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    for (size_t f = 0; f < batch.feature_count(); ++f) {
      const auto* data = static_cast<const uint8_t*>(batch.feature(f).data());
      CHECK(data >= region.data());
      CHECK(data + batch.feature(f).bytes() <= region.data() + region.size());
    }
    CHECK(batch.epoch() == 0);
    CHECK(batch.index() == n);
    CHECK(batch.rows() == (n == 9 ? 3u : 4u));
    CHECK(batch.end_of_epoch() == (n == 9));
    CHECK(batch.end_of_data() == (n == 9));
    CheckTestBatch(batch, 4, 0);
  }
  CHECK_THROWS_WITH(batch.feature("nope"), Catch::Contains("has no feature 'nope'; known features: label, weights, key, pixels"));
  CHECK_THROWS_WITH(batch.feature(4), Catch::Contains("feature index 4 out of range"));
  CHECK_THROWS_WITH(batch.feature("label").values<float>(),
                    Catch::Contains("has dtype int64") && Catch::Contains("use values<int64_t>()"));
  CHECK_THROWS_WITH(batch.source(3), Catch::Contains("row 3 out of range"));
  batch.Release();
  CHECK_FALSE(batch.valid());
  CHECK_THROWS_WITH(batch.rows(), Catch::Contains("holds no slot"));
  CHECK_THROWS_AS(batch.feature(0), ClientError);
  batch.Release();  // idempotent

  CHECK(client->Next(10s, &batch) == Status::kEndOfData);
  CHECK(client->Next(0ms, &batch) == Status::kEndOfData);
  CHECK(client->Next(std::chrono::milliseconds::max(), &batch) == Status::kEndOfData);
  CHECK_FALSE(batch.valid());

  // Statistics in the consumer table.
  shm::Segment segment = shm::Segment::Open(client->segment_name());
  CHECK(segment.superblock()->consumers[0].batches_taken.load() == 10);
  CHECK(segment.superblock()->consumers[0].attached.load() == 1);
}

TEST_CASE("client: an empty ring times out without burning CPU") {
  TempDir dir;
  ChildProcess producer = ForkProducer(Options(dir), [](RingTestProducer&) {});
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  const auto t0 = Clock::now();
  CHECK(client->Next(0ms, &batch) == Status::kTimeout);
  CHECK(Clock::now() - t0 < 1s);

  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto t1 = Clock::now();
  CHECK(client->Next(1000ms, &batch) == Status::kTimeout);
  const auto waited = Clock::now() - t1;
  getrusage(RUSAGE_SELF, &after);
  CHECK(waited >= 990ms);
  CHECK(waited < 5s);
  const double cpu = (after.ru_utime.tv_sec - before.ru_utime.tv_sec) + (after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                     1e-6 * ((after.ru_utime.tv_usec - before.ru_utime.tv_usec) + (after.ru_stime.tv_usec - before.ru_stime.tv_usec));
  INFO("CPU seconds over a 1 s wait: " << cpu);
  CHECK(cpu < 0.1);
  CHECK_FALSE(batch.valid());
}

TEST_CASE("client: a long wait shows in the consumer table while it lasts, not only when Next returns") {
  // ringfeedctl status and the autotuner read wait_ns: a trainer blocked in one Next(30 s) is
  // a trainer waiting for data, and must not read as one that never waits.
  TempDir dir;
  ChildProcess producer = ForkProducer(Options(dir), [](RingTestProducer&) {});
  auto client = Client::Attach(Attach(dir));
  shm::Segment segment = shm::Segment::Open(client->segment_name());
  const std::atomic<uint64_t>& wait_ns = segment.superblock()->consumers[0].wait_ns;
  const uint64_t before = wait_ns.load();
  Status status = Status::kBatch;
  std::atomic<int64_t> calling{0};  // Clock::now() just before Next, in ns since the epoch
  std::thread trainer([&] {
    Batch batch;
    calling = Clock::now().time_since_epoch().count();
    status = client->Next(2000ms, &batch);
  });
  // The trainer thread may wait for a core a while (a loaded ctest -j2): the wait is measured
  // from its call, not from its start.
  for (int i = 0; i < 2000 && calling.load() == 0; ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(calling.load() != 0);
  std::this_thread::sleep_for(1000ms);
  const uint64_t during = wait_ns.load() - before;
  const double elapsed = Seconds(Clock::now() - Clock::time_point(Clock::duration(calling.load())));
  trainer.join();
  const uint64_t after = wait_ns.load() - before;
  CHECK(status == Status::kTimeout);
  INFO("wait_ns " << elapsed << " s into a 2 s Next: " << during << ", after it returned: " << after);
  // At most one 100 ms slice behind, and the call's start and a little scheduling (the Next
  // may have returned by then: 2 s is all it waits).
  CHECK(during >= (std::min(elapsed, 2.0) - 0.25) * 1e9);
  CHECK(during <= elapsed * 1e9);
  CHECK(after >= 1'990'000'000);
  CHECK(after < 5'000'000'000);
}

TEST_CASE("client: ringfeedd SIGKILLed while a trainer waits: ClientError within 2 s") {
  TempDir dir;
  ChildProcess producer = ForkProducer(Options(dir), [](RingTestProducer&) {});
  auto client = Client::Attach(Attach(dir));
  const pid_t pid = producer.pid();
  std::atomic<int64_t> killed_at{0};
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    killed_at = Clock::now().time_since_epoch().count();
    kill(pid, SIGKILL);
  });
  Batch batch;
  std::string error;
  try {
    client->Next(20s, &batch);
  } catch (const ClientError& e) {
    error = e.what();
  }
  const auto noticed = Clock::now();
  killer.join();
  CHECK_THAT(error, Catch::Contains("ringfeedd (pid " + std::to_string(pid) + ") for job train exited"));
  CHECK(Seconds(noticed - Clock::time_point(Clock::duration(killed_at.load()))) < 2.0);
}

TEST_CASE("client: ringfeedd SIGSTOPped: ClientError after the liveness timeout") {
  TempDir dir;
  ChildProcess producer = ForkProducer(Options(dir), [](RingTestProducer&) {});
  ClientOptions options = Attach(dir);
  options.liveness_timeout = 1000ms;
  auto client = Client::Attach(options);
  shm::Segment segment = shm::Segment::Open(client->segment_name());
  Batch batch;
  CHECK(client->Next(1500ms, &batch) == Status::kTimeout);  // heartbeat going: no error
  producer.Kill(SIGSTOP);
  const auto stopped = Clock::now();
  std::string error;
  try {
    client->Next(20s, &batch);
  } catch (const ClientError& e) {
    error = e.what();
  }
  const double after = Seconds(Clock::now() - stopped);
  // Measured against the last heartbeat written (its CLOCK_MONOTONIC time, frozen by the stop),
  // not the SIGSTOP: a producer that waited for a core just before the stop wrote it well
  // before, and the client counts from when it saw it change, which is later still.
  const double heartbeat_age =
      static_cast<double>(shm::MonotonicNs() - segment.superblock()->heartbeat_ns.load()) / 1e9;
  producer.Kill(SIGCONT);
  INFO("error " << after << " s after the SIGSTOP, " << heartbeat_age << " s after the last heartbeat");
  CHECK_THAT(error, Catch::Contains("ringfeedd (pid " + std::to_string(producer.pid()) +
                                    ") for job train has not written its heartbeat for "));
  CHECK_THAT(error, Catch::Contains(" s: it is stopped (state T: SIGSTOP, Ctrl-Z or a debugger); continue it (kill "
                                    "-CONT " + std::to_string(producer.pid()) + "), then attach again"));
  CHECK(heartbeat_age >= 1.0);  // the liveness timeout
  CHECK(after < 6.0);
}

TEST_CASE("client: re-attach after the daemon restarts") {
  TempDir dir;
  auto first = ForkProducer(Options(dir), [](RingTestProducer& p) { p.PublishBatch(0, 0); });
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  CHECK(batch.index() == 0);
  first.Kill(SIGKILL);
  first.Wait();
  CHECK(batch.feature("label").values<int64_t>()[0] == 0);  // the old mapping stays readable
  batch.Release();
  CHECK_THROWS_WITH(client->Next(10s, &batch), Catch::Contains("exited"));

  auto second = ForkProducer(Options(dir), [](RingTestProducer& p) { p.PublishBatch(0, 5); });
  auto again = Client::Attach(Attach(dir));
  CHECK(again->daemon_pid() == second.pid());
  REQUIRE(again->Next(10s, &batch) == Status::kBatch);
  CHECK(batch.index() == 5);
  CheckTestBatch(batch, 4, 0);
}

TEST_CASE("client: the daemon's failure message; batches published before it still arrive") {
  TempDir dir;
  const std::string why = "data/part-3.tfrecord: record 17 at byte offset 4096: corrupted data (CRC mismatch)";
  auto producer = ForkProducer(Options(dir), [&](RingTestProducer& p) {
    p.PublishBatch(0, 0);
    p.Serve(300ms);
    p.SetState(shm::DaemonState::kFailed, why);
  });
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  CHECK_THROWS_WITH(client->Next(10s, &batch),
                    "ringfeedd (pid " + std::to_string(producer.pid()) + ") for job train failed: " + why);
  CHECK_FALSE(batch.valid());
}

TEST_CASE("client: a queue closed before the state changes ends the way the state says") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [&](RingTestProducer& p) {
    p.PublishBatch(0, 0);
    p.Serve(300ms);
    shm::CloseQueue(p.ring(), 0);
    p.Serve(500ms);
    p.SetState(shm::DaemonState::kFailed, "disk gone");
  });
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  CHECK_THROWS_WITH(client->Next(10s, &batch), Catch::EndsWith("for job train failed: disk gone"));
}

TEST_CASE("client: the daemon stopping is an error with its reason") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [&](RingTestProducer& p) {
    p.Serve(300ms);
    p.SetState(shm::DaemonState::kStopped, "SIGTERM");
  });
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  CHECK_THROWS_WITH(client->Next(10s, &batch), Catch::EndsWith("for job train stopped: SIGTERM"));
}

// A daemon that stops just after taking connections, as seen by a trainer attaching then: a
// socket at `path` whose connections are accepted and closed unanswered (a stopping ringfeedd
// resets those still queued as it closes its socket), or answered with `reply` first (a
// refusal), until Remove() takes it away.
class ClosingListener {
 public:
  explicit ClosingListener(std::string path, std::string reply = "") : path_(std::move(path)), reply_(std::move(reply)) {
    fd_ = testing::BindUnixSocket(path_, SOCK_STREAM, 16);
    REQUIRE(fd_ >= 0);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        pollfd pfd{fd_, POLLIN, 0};
        if (::poll(&pfd, 1, 20) <= 0) continue;
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        if (!reply_.empty()) (void)!::write(c, reply_.data(), reply_.size());
        ::close(c);
        closed_.fetch_add(1);
      }
    });
  }
  ~ClosingListener() { Remove(); }
  // Stops taking connections, closes the socket and removes its file.
  void Remove() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  int closed() const { return closed_.load(); }

 private:
  std::string path_;
  std::string reply_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> closed_{0};
  std::thread thread_;
};

TEST_CASE("client: attach_timeout waits for a daemon that starts later, and gives up naming the wait") {
  TempDir dir;
  SECTION("no daemon: DaemonNotRunningError after attach_timeout") {
    ClientOptions o = Attach(dir, "nojob");
    o.attach_timeout = 400ms;
    const auto t0 = Clock::now();
    try {
      Client::Attach(o);
      FAIL("attached without a daemon");
    } catch (const DaemonNotRunningError& e) {
      const double waited = Seconds(Clock::now() - t0);
      CHECK(waited >= 0.39);
      CHECK(waited < 3.0);
      CHECK_THAT(e.what(), Catch::Contains("cannot connect to ringfeedd for job nojob") &&
                               Catch::Contains("(tried for 0.4 s: attach_timeout)"));
      CHECK_THAT(e.reason(), !Catch::Contains("attach_timeout"));
    }
  }
  SECTION("a daemon that starts 0.5 s after the trainer: attached, batches flow") {
    ClientOptions o = Attach(dir);
    o.attach_timeout = 20s;
    const auto t0 = Clock::now();
    std::unique_ptr<Client> client;
    std::string error;
    double waited = 0;
    std::thread trainer([&] {
      try {
        client = Client::Attach(o);
      } catch (const std::exception& e) {
        error = e.what();
      }
      waited = Seconds(Clock::now() - t0);
    });
    std::this_thread::sleep_for(500ms);
    ChildProcess producer = ForkProducer(Options(dir), [](RingTestProducer& p) { p.PublishBatch(0, 0); });
    trainer.join();
    INFO(error);
    REQUIRE(client);
    CHECK(waited >= 0.45);
    CHECK(waited < 10.0);
    Batch batch;
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    CheckTestBatch(batch, 4, 0);
  }
  SECTION("a daemon that takes the connection and stops before answering: waited out, the next one attached") {
    ClosingListener stopping(shm::SocketPath(dir.path().string(), "train"));
    ClientOptions o = Attach(dir);
    o.attach_timeout = 20s;
    std::unique_ptr<Client> client;
    std::string error;
    std::thread trainer([&] {
      try {
        client = Client::Attach(o);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    // Once it has tried twice, the stopping daemon is gone and the next one starts.
    for (int i = 0; i < 500 && stopping.closed() < 2; ++i) std::this_thread::sleep_for(10ms);
    CHECK(stopping.closed() >= 2);
    stopping.Remove();
    ChildProcess producer = ForkProducer(Options(dir), [](RingTestProducer& p) { p.PublishBatch(0, 0); });
    trainer.join();
    INFO(error);
    REQUIRE(client);
    Batch batch;
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    CheckTestBatch(batch, 4, 0);
  }
  SECTION("a daemon that closes every connection unanswered: the reason after attach_timeout; at once without one") {
    ClosingListener stopping(shm::SocketPath(dir.path().string(), "train"));
    ClientOptions o = Attach(dir);
    o.attach_timeout = 1s;
    const auto t0 = Clock::now();
    try {
      Client::Attach(o);
      FAIL("attached to a socket that answers nothing");
    } catch (const DaemonNotRunningError& e) {
      CHECK(Seconds(Clock::now() - t0) >= 0.99);
      // Closed with the hello unread: a reset, or an end of file where the close came first.
      CHECK_THAT(e.what(), Catch::Contains("(is it stopping or restarting? attach again once it runs)") &&
                               Catch::Contains("(tried for 1 s: attach_timeout)"));
    }
    CHECK(stopping.closed() >= 1);
    o.attach_timeout = 0ms;
    try {
      Client::Attach(o);
      FAIL("attached to a socket that answers nothing");
    } catch (const DaemonNotRunningError& e) {
      FAIL("no attach_timeout: the daemon's end as it came, not a wait's");
    } catch (const ClientError& e) {
      // Closed before the hello was sent, or after it with the hello unread, or at once.
      CHECK_THAT(e.what(), (Catch::StartsWith("cannot write to ringfeedd's control socket ") ||
                            Catch::StartsWith("cannot read ringfeedd's control socket ") ||
                            Catch::StartsWith("ringfeedd closed the control connection on ")) &&
                               Catch::EndsWith("(is it stopping or restarting? attach again once it runs)"));
    }
  }
}

TEST_CASE("client: a refusal before the daemon closes the connection is not waited out by attach_timeout") {
  TempDir dir;
  ClosingListener refusing(shm::SocketPath(dir.path().string(), "train"),
                           "{\"type\":\"error\",\"message\":\"too many consumers: 64 are attached already\"}\n");
  ClientOptions o = Attach(dir);
  o.attach_timeout = 20s;
  const auto t0 = Clock::now();
  try {
    Client::Attach(o);
    FAIL("attached to a socket that refuses");
  } catch (const DaemonNotRunningError& e) {
    FAIL(std::string("waited for a daemon that answered: ") + e.what());
  } catch (const ClientError& e) {
    CHECK_THAT(e.what(), Catch::Contains("refused this consumer: too many consumers: 64 are attached already"));
  }
  CHECK(Seconds(Clock::now() - t0) < 5.0);  // once, not until attach_timeout
  CHECK(refusing.closed() <= 1);  // (the count may lag the close the client saw)
}

TEST_CASE("client: refusals carry the daemon's message; no daemon names the fix") {
  TempDir dir;
  {
    ProducerOptions o = Options(dir);
    o.reject_with = "too many consumers (64 attached); detach one or raise consumers.count";
    auto producer = ForkProducer(o, [](RingTestProducer&) {});
    CHECK_THROWS_WITH(Client::Attach(Attach(dir)),
                      "ringfeedd for job train refused this consumer: too many consumers (64 attached); "
                      "detach one or raise consumers.count");
  }
  CHECK_THROWS_WITH(Client::Attach(Attach(dir, "nojob")),
                    Catch::Contains("cannot connect to ringfeedd for job nojob at " + dir.file("nojob.sock")) &&
                        Catch::Contains("is ringfeedd running for job nojob") &&
                        Catch::Contains("To wait for a daemon that is starting, set attach_timeout"));
  CHECK_THROWS_AS(Client::Attach(Attach(dir, "nojob")), DaemonNotRunningError);
  // A job name that is not there: the jobs that are (a typo shows); a file named like a socket
  // is no job.
  {
    { std::ofstream(dir.file("aaa.sock")) << "x"; }
    auto producer = ForkProducer(Options(dir), [](RingTestProducer&) {});
    CHECK_THROWS_WITH(Client::Attach(Attach(dir, "trian")),
                      Catch::Contains("No such file or directory; jobs there: train;"));
  }
  ClientOptions empty;
  CHECK_THROWS_WITH(Client::Attach(empty), Catch::Contains("job is empty"));
  CHECK_THROWS_WITH(Client::Attach(Attach(dir, "../nojob")),
                    Catch::StartsWith("ClientOptions::job '../nojob' is not a job name: 1 to 64 characters"));
  ClientOptions negative = Attach(dir, "nojob", -7);  // refused before any connection is tried
  CHECK_THROWS_WITH(Client::Attach(negative),
                    "ClientOptions::rank -7: a rank is 0 or more (consumers.mode: ranks), or -1 for shared mode");
}

TEST_CASE("client: ranks mode delivers queue r to rank r only") {
  TempDir dir;
  ProducerOptions o = Options(dir);
  o.mode = shm::DeliveryMode::kRanks;
  o.queue_count = 2;
  auto producer = ForkProducer(o, [](RingTestProducer& p) {
    for (uint64_t n = 0; n < 6; ++n) p.PublishBatch(static_cast<uint32_t>(n % 2), n);
    p.SetState(shm::DaemonState::kEndOfData);
  });
  CHECK_THROWS_WITH(Client::Attach(Attach(dir, "train", 5)), Catch::Contains("refused this consumer: rank 5 out of range"));
  auto rank1 = Client::Attach(Attach(dir, "train", 1));
  CHECK_THROWS_WITH(Client::Attach(Attach(dir, "train", 1)), Catch::Contains("rank 1 is taken"));
  CHECK(rank1->schema().mode == shm::DeliveryMode::kRanks);
  CHECK(rank1->schema().queue_count == 2);
  Batch batch;
  std::vector<uint64_t> seen;
  while (rank1->Next(10s, &batch) == Status::kBatch) {
    seen.push_back(batch.index());
    CheckTestBatch(batch, 4, 1);
  }
  CHECK(seen == std::vector<uint64_t>{1, 3, 5});
}

TEST_CASE("client: an invalid batch is a ClientError and its slot is released") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [](RingTestProducer& p) {
    p.PublishWith(0, [&](uint8_t* slot, uint64_t) {
      p.WriteBatch(slot, 0, 0, 0, 0, 4);
      auto* h = reinterpret_cast<shm::SlotHeader*>(slot);
      auto* columns = reinterpret_cast<shm::ColumnDesc*>(slot + h->columns_offset);
      columns[1].row_splits_offset = uint64_t{1} << 40;  // far outside the slot
    });
    p.PublishBatch(0, 1);
  });
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  CHECK_THROWS_WITH(client->Next(10s, &batch),
                    Catch::Contains("wrote an invalid batch into slot") &&
                        Catch::Contains("feature 'weights' (varlen float32): row_splits [1099511627776") &&
                        Catch::Contains("The batch was dropped. A process that maps the job's segment wrote into it "
                                        "(a trainer writing past its batch), or this is a bug in ringfeedd"));
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  CHECK(batch.index() == 1);
  shm::Segment segment = shm::Segment::Open(client->segment_name());
  const shm::Ring ring = shm::Ring::Of(segment.data());
  int held = 0;
  for (uint32_t i = 0; i < ring.slot_count; ++i) {
    held += shm::SlotWord::Unpack(ring.header(i)->word.load()).state == shm::SlotState::kHeld;
  }
  CHECK(held == 1);  // only the good batch we hold
}

// The offset arrays' entries are checked per column by the first feature() call: Next hands
// the batch out, the good columns work, the bad one names its entry, every time it is asked.
// The Batch object used for a good batch first (every column checked) checks afresh.
TEST_CASE("client: a bad row_splits entry fails that feature's first use, naming it") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [](RingTestProducer& p) {
    p.PublishBatch(0, 0);
    p.PublishWith(0, [&](uint8_t* slot, uint64_t) {
      p.WriteBatch(slot, 0, 1, 0, 0, 4);
      auto* h = reinterpret_cast<shm::SlotHeader*>(slot);
      auto* columns = reinterpret_cast<shm::ColumnDesc*>(slot + h->columns_offset);
      reinterpret_cast<int64_t*>(slot + columns[1].row_splits_offset)[2] = -1;
    });
  });
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  CHECK(batch.index() == 0);
  CheckTestBatch(batch, 4, 0);
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  CHECK(batch.index() == 1);
  CHECK(batch.feature("label").values<int64_t>()[0] == 4);
  CHECK(batch.feature("key").size() == 8);
  // Batch 1's weights: g = 4..7 have 0, 1, 2, 3 values: row_splits 0, 0, 1, 3, 6.
  for (int attempt = 0; attempt < 2; ++attempt) {
    CHECK_THROWS_WITH(batch.feature("weights"),
                      Catch::Contains("wrote an invalid batch into slot") &&
                          Catch::Contains("feature 'weights' (varlen float32): row_splits[2] = -1 < row_splits[1] = 0") &&
                          Catch::Contains("Release this batch. A process that maps the job's segment wrote into it"));
  }
  CHECK_THROWS_AS(batch.feature(1), ClientError);
  const Batch moved = std::move(batch);
  CHECK_THROWS_AS(moved.feature(1), ClientError);
  CHECK(moved.feature("label").values<int64_t>()[3] == 7);
}

TEST_CASE("client: an incompatible segment is refused with the layout difference") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [](RingTestProducer& p) { p.ring().sb->layout_version = 2; });
  CHECK_THROWS_WITH(Client::Attach(Attach(dir)),
                    Catch::Contains("layout version 2 in the segment, this client speaks 1: rebuild the trainer"));
}

TEST_CASE("client: a batch outlives its client") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [](RingTestProducer& p) { p.PublishBatch(0, 3); });
  Batch batch;
  {
    auto client = Client::Attach(Attach(dir));
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    CHECK_THROWS_WITH(client->Next(10s, nullptr), Catch::Contains("the batch to fill (out) is null"));
  }
  CheckTestBatch(batch, 4, 0);
  Batch moved = std::move(batch);
  CHECK_FALSE(batch.valid());
  CHECK(moved.index() == 3);
}

TEST_CASE("client: a forked child neither takes batches as its parent nor hands back the parent's slots") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [](RingTestProducer& p) {
    for (uint64_t n = 0; n < 4; ++n) p.PublishBatch(0, n);
  });
  auto client = Client::Attach(Attach(dir));
  Batch batch;
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  shm::Segment segment = shm::Segment::Open(client->segment_name());
  const shm::Ring ring = shm::Ring::Of(segment.data());
  const uint32_t slot = batch.slot();
  auto state = [&] { return shm::SlotWord::Unpack(ring.header(slot)->word.load()).state; };
  REQUIRE(state() == shm::SlotState::kHeld);

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child: Next refuses, and dropping the inherited batch leaves the parent's slot held.
    int code = 0;
    Batch mine;
    try {
      client->Next(0ms, &mine);
      code = 2;
    } catch (const ClientError& e) {
      if (std::strstr(e.what(), "forked process") == nullptr) code = 3;
    }
    batch.Release();
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(state() == shm::SlotState::kHeld);  // still the parent's
  CHECK(batch.valid());
  CheckTestBatch(batch, 4, 0);
  batch.Release();
  CHECK(state() != shm::SlotState::kHeld);
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);  // the parent goes on
  CHECK(batch.index() == 1);
}

TEST_CASE("client: a liveness timeout of years is clamped, not overflowed") {
  TempDir dir;
  auto producer = ForkProducer(Options(dir), [](RingTestProducer& p) { p.PublishBatch(0, 0); });
  ClientOptions options = Attach(dir);
  options.liveness_timeout = std::chrono::hours(24 * 365 * 1000);  // 1000 years
  auto client = Client::Attach(options);
  Batch batch;
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  CHECK(batch.index() == 0);
}

TEST_CASE("client: 4 threads share one client; every batch arrives once") {
  TempDir dir;
  constexpr uint64_t kBatches = 400;
  auto producer = ForkProducer(Options(dir), [](RingTestProducer& p) {
    for (uint64_t n = 0; n < kBatches; ++n) p.PublishBatch(0, n);
    p.SetState(shm::DaemonState::kEndOfData);
  });
  auto client = Client::Attach(Attach(dir));
  std::mutex mutex;
  std::multiset<uint64_t> seen;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      try {
        Batch batch;
        while (client->Next(10s, &batch) == Status::kBatch) {
          const int64_t label = batch.feature("label").values<int64_t>()[0];
          if (label != static_cast<int64_t>(batch.index() * 4)) errors++;
          std::lock_guard lock(mutex);
          seen.insert(batch.index());
        }
      } catch (...) {
        errors++;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors.load() == 0);
  CHECK(seen.size() == kBatches);
  bool once = true;
  for (uint64_t n = 0; n < kBatches; ++n) once &= seen.count(n) == 1;
  CHECK(once);
}

}  // namespace
}  // namespace ringfeed
