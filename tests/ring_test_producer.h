// RingTestProducer: plays ringfeedd's part for the shm/ and client/ tests — creates a job's
// segment through the shm API, writes a small fixed schema, fills and publishes batches with
// known contents, keeps the heartbeat, and serves the control socket's hello with a minimal
// poll-based blocking server (no Asio, nothing from daemon/).
//
// Test schema (TestSchema) and contents of batch number n of a queue, rows r < rows,
// g = n * batch_size + r:
//   "label"   fixed int64 scalar        g
//   "weights" varlen float32            g % 4 values: g + 0.5 * k, k = 0..
//   "key"     fixed bytes, shape [2]    "k<g>a", "k<g>bb"
//   "pixels"  fixed uint8, shape [2, 3] (g + j) & 0xff, j = 0..5
//   RowSource {file_index = queue, record_index = g}
// SlotHeader: epoch and batch_index as given; rows = batch_size unless given.
//
// Helpers also fork child processes that run a producer (ForkProducer) or any function
// (ForkChild), with RAII guards that kill and reap them.
//
// Thread-safety: one thread per producer. Not for production use.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shm/ring.h"
#include "shm/segment.h"

namespace ringfeed::testing {

struct ProducerOptions {
  std::string runtime_dir;  // where the socket goes (must exist)
  std::string job = "test";
  uint32_t slot_count = 8;
  uint64_t slot_bytes = 64 * 1024;
  uint32_t batch_size = 4;
  shm::DeliveryMode mode = shm::DeliveryMode::kShared;
  uint32_t queue_count = 1;
  uint64_t heartbeat_period_ns = 50'000'000;
  std::string reject_with;  // non-empty: answer every hello with this error message
};

std::vector<shm::FeatureDesc> TestSchema();

class RingTestProducer {
 public:
  explicit RingTestProducer(const ProducerOptions& options);
  ~RingTestProducer();
  RingTestProducer(const RingTestProducer&) = delete;
  RingTestProducer& operator=(const RingTestProducer&) = delete;

  const shm::Ring& ring() const { return ring_; }
  const shm::Segment& segment() const { return segment_; }
  const std::string& segment_name() const { return segment_.name(); }
  uint64_t instance_id() const { return ring_.sb->instance_id; }

  // Serves the control socket (and the heartbeat) for `duration`; once with 0.
  void Serve(std::chrono::milliseconds duration);
  // Claims a free slot (serving while none is free, up to `timeout`), lets `fill` write the
  // batch (slot start, usable bytes) and publishes it to `queue`. Returns the slot, or -1 on
  // timeout.
  int PublishWith(uint32_t queue, const std::function<void(uint8_t*, uint64_t)>& fill,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Publishes the test batch number n (contents above).
  int PublishBatch(uint32_t queue, uint64_t n, uint64_t epoch = 0, uint32_t flags = 0, int rows = -1,
                   std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Writes the test batch number n into `slot` (used by PublishBatch and corrupt-slot tests).
  void WriteBatch(uint8_t* slot, uint32_t queue, uint64_t n, uint64_t epoch, uint32_t flags, uint32_t rows) const;
  void SetState(shm::DaemonState state, const std::string& message = "");

  uint32_t consumers_attached() const;
  uint32_t slots_reclaimed() const { return reclaimed_; }

 private:
  struct Connection {
    int fd = -1;
    uint32_t consumer_id = 0;  // 0 until welcomed
    int rank = -1;
    std::string buffer;
  };
  void ServeOnce(int timeout_ms);
  void HandleLine(Connection& c, const std::string& line);
  void Drop(Connection& c);

  ProducerOptions options_;
  shm::Segment segment_;
  shm::Ring ring_;
  std::vector<uint64_t> published_;  // per queue: batches published (the producer's own count)
  std::string socket_path_;
  int listen_fd_ = -1;
  std::vector<Connection> connections_;
  uint64_t last_heartbeat_ns_ = 0;
  uint32_t reclaimed_ = 0;
};

// A forked child process, killed (SIGKILL) and reaped on destruction unless waited for; then
// its producer's segment, if any, is removed.
class ChildProcess {
 public:
  ChildProcess() = default;
  explicit ChildProcess(pid_t pid, std::string segment = "") : pid_(pid), segment_(std::move(segment)) {}
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  pid_t pid() const { return pid_; }
  void Kill(int signal);
  // Waits up to `timeout` for the exit; returns the wait status, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(15));

  // Gives up ownership (the caller reaps it).
  pid_t release() { pid_t p = pid_; pid_ = -1; return p; }

 private:
  pid_t pid_ = -1;
  std::string segment_;  // removed after the child is gone (a SIGKILLed producer can't)
};

// Runs `body` in a forked child, which _exits 0 after it (1 on an exception, printed).
ChildProcess ForkChild(const std::function<void()>& body);

// Forks a child that creates a RingTestProducer, runs `scenario` on it, then serves until
// killed. Returns once the segment and socket are ready; *segment_name gets the name.
ChildProcess ForkProducer(const ProducerOptions& options,
                          const std::function<void(RingTestProducer&)>& scenario,
                          std::string* segment_name = nullptr);

}  // namespace ringfeed::testing
