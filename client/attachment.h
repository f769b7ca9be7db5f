// Attachment (internal): everything one attached consumer shares between its Client and the
// Batches it handed out — the control connection, the mapping, the checked geometry and the
// schema copy. Held by shared_ptr, so a Batch that outlives its Client keeps the mapping and
// the connection (and with it the daemon's promise not to reclaim the slot) alive.
//
// Thread-safety: immutable after Attach except the liveness record (under liveness_mutex) and
// the connection's DaemonClosed (thread-safe).
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "client/client.h"  // ForkGeneration
#include "client/control_connection.h"
#include "client/schema.h"
#include "shm/ring.h"
#include "shm/segment.h"

namespace ringfeed::detail {

struct Attachment {
  std::string job;
  std::string socket_path;
  int daemon_pid = 0;
  uint64_t instance_id = 0;
  uint32_t consumer_id = 0;  // 1..kMaxConsumers
  int rank = -1;
  uint32_t queue = 0;
  std::chrono::milliseconds liveness_timeout{10000};
  std::function<bool()> interrupted;  // ClientOptions::interrupted (files() waits with it too)

  ControlConnection connection;
  shm::Segment segment;
  shm::Ring ring;                          // geometry copied after CheckSuperblock
  std::vector<shm::FeatureDesc> features;  // schema copy the batches are checked against
  uint32_t batch_size = 0;
  uint64_t heartbeat_period_ns = 0;  // the daemon's, clamped
  Schema schema;

  // The job's file list (Client::files), fetched on first use.
  std::mutex files_mutex;
  std::vector<std::string> files;
  bool have_files = false;

  // Liveness: the last heartbeat value seen and when (this process's CLOCK_MONOTONIC) it
  // was first seen. Measured locally, so clocks need not agree.
  std::mutex liveness_mutex;
  uint64_t last_heartbeat = 0;
  uint64_t last_heartbeat_change_ns = 0;

  // fork(): the generation (ringfeed::ForkGeneration(), client.h) this process was in when it attached. A forked
  // child shares the mapping but not the parent's consumer: it must neither claim batches as
  // it nor hand back the parent's slots.
  uint64_t fork_generation = 0;
  bool Forked() const;

  shm::ConsumerEntry& consumer_entry() const { return ring.sb->consumers[consumer_id - 1]; }
  std::string DaemonName() const {
    return "ringfeedd (pid " + std::to_string(daemon_pid) + ") for job " + job;
  }
  // The start of the ClientError for a batch that failed its check (shm/batch_check.h).
  std::string InvalidBatch(uint32_t slot, uint64_t seq, const std::string& error) const {
    return DaemonName() + " wrote an invalid batch into slot " + std::to_string(slot) + " (queue " +
           std::to_string(queue) + ", sequence number " + std::to_string(seq) + "): " + error;
  }
};

inline bool Attachment::Forked() const { return fork_generation != ringfeed::ForkGeneration(); }

}  // namespace ringfeed::detail
