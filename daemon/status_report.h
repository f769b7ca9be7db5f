// What ringfeedd answers on its control socket besides attaches (daemon/control_server.h): the
// `status` reply that `ringfeedctl status` shows (its fields: docs/operations.md, "Status and
// troubleshooting"), the job's file list page by page (`files`), and the 10-second throughput window
// that status and systemd's STATUS= line (SystemdStatusLine) share. RunDaemon (daemon/ringfeedd.cc) gathers the
// inputs (a pipeline snapshot, the consumer registry, callbacks for the ring's holders and the
// tuner); nothing here reads the pipeline or the socket itself.
//
// Thread-safety: RateWindow is thread-safe; StatusJson runs where its inputs may be read (the
// daemon's event loop); the rest are functions of their arguments.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/budget.h"
#include "daemon/consumer_registry.h"
#include "daemon/pipeline.h"
#include "daemon/shard.h"

namespace ringfeed {

// Throughput over the last 10 s: one sample of the counters per second (the first at the
// daemon's start, counters 0), the rate from the oldest sample at most 10.5 s old (after a
// pause of the sampler, the first one after it) to the counters now. Thread-safe.
class RateWindow {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateWindow(Clock::time_point start) { Add(start, 0, 0); }
  void Add(Clock::time_point t, uint64_t records, uint64_t bytes);
  // records/s, bytes/s from the oldest sample to (`now`, `records`, `bytes`); 0 at the start.
  std::pair<double, double> Rates(Clock::time_point now, uint64_t records, uint64_t bytes) const;

 private:
  struct Sample {
    Clock::time_point t;
    uint64_t records, bytes;
  };
  mutable std::mutex mutex_;
  std::deque<Sample> samples_;
};

// A pipeline end as status's `state`: "running", "end_of_data", "failed" or "stopped".
std::string_view EndName(PipelineEnd end);

// What status reports that is fixed when the daemon starts.
struct JobStatusFacts {
  std::string job;
  std::string config_path;  // absolute
  std::string socket_path;  // its control socket (in its runtime directory)
  uint64_t instance_id = 0;
  std::chrono::steady_clock::time_point started;
  bool deterministic = true;
  int64_t epochs = 0;        // 0: endless
  uint64_t start_epoch = 0;  // --start-epoch
  uint64_t start_batch = 0;  // --start-batch
  size_t files_total = 0;
  size_t files_in_shard = 0;
  Shard shard;
  bool ranks = false;  // consumers.mode: ranks
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;
  uint64_t segment_bytes = 0;
  int64_t cycle_length = 1;
  bool hedging = false;  // hedged reads possible in this run (else status says "off")
  uint64_t memory_budget_bytes = 0;
  std::string memory_budget_source;
  MemoryPlan memory;
  int64_t shuffle_buffer = 0;  // shuffle.buffer (records)
  // The config values that shape the batches, as loaded at start (an edited config file takes
  // effect only at a restart): status's `settings`, keyed by their config names.
  int64_t batch_size = 0;
  bool drop_remainder = false;
  bool shuffle_files = false;
  uint64_t shuffle_seed = 0;
  std::string on_error;     // "fail", "skip"
  std::string compression;  // "auto", "none", "gzip", "zlib"
};

// What status reports as it is now.
struct JobStatusNow {
  const PipelineStats& stats;
  std::chrono::steady_clock::time_point at;
  std::chrono::steady_clock::time_point ended_at;  // Pipeline::ended_at(): used once stats.end is not kRunning
  const RateWindow& window;
  const ConsumerRegistry& consumers;
  // Who holds the ring's slots and what to do (shm::AllHeldAdvice): called only when every slot
  // is held while production runs.
  const std::function<std::string()>& all_held_advice;
  // Autotune::StatusJson(), or null when nothing is tuned: called last (it may wait for the
  // tuner's thread).
  const std::function<nlohmann::json()>& autotune;
  const std::vector<std::string>& problems;  // RuntimeNames::Problems()
  uint64_t private_rss_bytes = 0;
  // The read-ahead's file system calls under way for a second or more (Pipeline::IoWaiting).
  std::vector<std::string> io_waiting;
};

// The `status` reply: {"type": "status", "job": ..., "state": ..., ...}, its fields documented in
// docs/operations.md ("Status and troubleshooting").
nlohmann::json StatusJson(const JobStatusFacts& f, const JobStatusNow& now);

// The daemon's memory over its budget now (OverBudgetWarning with the job's plan and the
// pipeline's shuffle buffer; "" within it): the heartbeat's warning and status's `over_budget`.
// "" once the job failed: its failure (the shuffle buffer over the budget, say) said it with
// the advice for the records to come, and the buffer is gone by then.
std::string OverBudgetNow(const JobStatusFacts& f, const PipelineStats& s, uint64_t private_rss);

// The job's progress for the log (ringfeedd's lines at the end of the data, at a stop, at each
// epoch begun), as the status table words it, e.g.
//   "epoch 3 of 10 (0-based 2), 57 of its batches formed; 123456 records in 964 batches in all;
//    64 read and 5 parse errors skipped (1 of them ended a file early)"
// The skip counts count every time a record was skipped (a bad record again in every epoch);
// they are left out when 0.
std::string ProgressLogText(const JobStatusFacts& f, const PipelineStats& s);

// systemd's STATUS= line (`systemctl status`): "failed: <the error>" once the job failed, else
// "<state>: epoch E of N (0-based E-1), B batches, R records/s, M MB/s" — the epoch counted from
// 1 as `ringfeedctl status`'s table counts it, the rates those of the last 10 s (`rates_10s`:
// records/s, bytes/s) while production runs and the whole run's once it ended (" over the run").
std::string SystemdStatusLine(const JobStatusFacts& f, const PipelineStats& s,
                              std::chrono::steady_clock::time_point ended_at, std::pair<double, double> rates_10s);

// {"type":"files","first":F} (F default 0): the job's sorted file list from index F, as many
// paths as fit in one reply under shm::kMaxMessageBytes (at least one: a path is < 4 KiB, at most
// 24 KiB as JSON), and the total: {"type":"files","total":N,"first":F,"files":[...]}; an
// {"type":"error","message":...} reply for a bad F. The client pages through it. Paths go as
// text, bytes that are not UTF-8 as \xNN (shm/protocol.h): the JSON's UTF-8 cannot hold them,
// and replaced by U+FFFD a name could not be told from another.
nlohmann::json FilesPage(const std::vector<std::string>& files, const nlohmann::json& request);

}  // namespace ringfeed
