// Pipeline: ringfeedd's data path, from files to published batches in the shared-memory ring.
//
//   ReadAhead (I/O threads)  ->  Sequencer (1 thread)  ->  parse workers  ->  publish
//   files read ahead in         interleave, shuffle,      parse a batch's      in sequence order
//   parallel, in file order     batch; takes a free        records straight    (deterministic) or
//                               slot for each batch        into its slot       as ready (not)
//
// Slots are assigned to batches in sequence order, so the batches in flight always hold a
// contiguous range of sequence numbers and batch k never waits for a slot held by batch k+1
// (no deadlock with in-order publishing). A slot comes back when its word reads kFree again
// (released by a consumer, or reclaimed from a dead one); the sequencer waits for that on the
// superblock's free_futex, with a timeout, so it never spins.
//
// Worker and reader counts, prefetch depth and read-ahead bytes can change while running
// (SetWorkers, SetReaders, SetPrefetch, SetStreamBufferBytes): the autotuner's knobs. None
// changes the order of batches. Workers taken away park (their threads stay, blocked) and are
// the first to come back. Prefetch: the sequencer takes a slot for the next batch only
// while the batches being parsed plus those ready in the ring are fewer than workers + prefetch.
//
// on_error: skip: a batch holds batch.size good records (short only at the end of an epoch),
// so the readers check each record against the spec (ExampleParser::Check, a second parse) and
// the records that fail are skipped before batches are cut, like read errors.
//
// Thread-safety: Start/RequestStop/Join from the owner thread; Snapshot and the setters from
// any thread.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/batch_writer.h"
#include "daemon/read_ahead.h"
#include "daemon/sequencer.h"
#include "format/example_parser.h"
#include "shm/ring.h"

namespace ringfeed {

struct PipelineOptions {
  SequencerOptions sequencer;
  ReaderOptions reader;
  size_t readers = 1;                       // I/O threads
  size_t workers = 1;                       // parse workers
  size_t prefetch = 4;                      // batches kept ready in the ring beyond the workers'
  uint64_t stream_buffer_bytes = 4u << 20;  // read-ahead per open file
  bool deterministic = true;
  // The memory plan counted no decompression buffers (TuningPlan::inflate_planned): a file
  // found GZIP or ZLIB while reading is logged as a warning (ReadAhead::WarnOnCompressed).
  bool inflate_unplanned = false;
};

enum class PipelineEnd { kRunning, kEndOfData, kFailed, kStopped };

struct PipelineStats {
  uint64_t epoch = 0;
  uint64_t files_done_in_epoch = 0;
  uint64_t batches_in_epoch = 0;  // Sequencer::batches_in_epoch
  uint64_t records = 0;         // records published in batches
  uint64_t batches = 0;         // batches published
  uint64_t record_bytes = 0;    // serialized record bytes published
  uint64_t read_errors_skipped = 0;
  uint64_t parse_errors_skipped = 0;
  // Read errors skipped after which the reader gave up on the rest of their file (a bad length,
  // the compressed stream broken, a read error, a file that could not be opened): each such file
  // lost its later records, not only the one counted in read_errors_skipped.
  uint64_t files_ended_early = 0;
  uint64_t batches_dropped = 0; // ranks mode: incomplete final rounds
  uint64_t shuffle_records = 0, shuffle_bytes = 0;  // in the shuffle buffer now (payload bytes)
  uint64_t read_ahead_bytes = 0;
  size_t readers = 0;
  size_t workers = 0;
  size_t prefetch = 0;
  uint64_t stream_buffer_bytes = 0;
  size_t reads_per_file = 1;
  size_t open_files = 0;
  // Files read one read at a time though reads_per_file asked for more: their io_uring queue
  // could not be set up (ReadAhead::unqueued_files).
  uint64_t files_without_queued_reads = 0;
  // Queued reads sent again once late, and those answered first (ReadQueue: hedged reads); the
  // mean round trip they go by (ns, 0 before the first queued read).
  uint64_t hedged_reads = 0, hedged_reads_won = 0;
  bool hedged_reads_paused = false;  // their tokens spent: the last ones did not answer first
  int64_t read_round_trip_ns = 0;
  // Time counters for the autotuner (nanoseconds, cumulative; see ReadAhead for the read ones).
  uint64_t read_busy_ns = 0, read_cpu_ns = 0, read_wait_ns = 0;
  uint64_t parse_busy_ns = 0;  // summed over workers: wall time not waiting for work (parsing
                               // batches, publishing them, waking their consumers)
  uint64_t parse_cpu_ns = 0;   // ... and the CPU time of it (less than busy when waiting for a core)
  uint64_t slot_wait_ns = 0;   // the sequencer waiting for a slot (ring full or prefetch reached)
  uint64_t sequencer_cpu_ns = 0;  // the sequencer thread's CPU time, up to now
  uint64_t prefetch_wait_ns = 0;  // ... the part with prefetch reached: the loader's own batches
                                  // (queued for the workers, or ready) at workers + prefetch
  uint64_t ring_repairs = 0;   // words of the ring put back by RepairRing
  uint32_t slots_free = 0, slots_filling = 0, slots_ready = 0, slots_held = 0;
  // Ready slots by delivery queue (the rank in ranks mode; one entry in shared mode), from the
  // daemon's own record of which queue it published each slot to.
  std::vector<uint32_t> ready_per_queue;
  std::string last_error;
  PipelineEnd end = PipelineEnd::kRunning;
  std::string end_message;  // why it ended (a failure, an epoch that delivered no batch); may be empty
};

class Pipeline {
 public:
  // `files` is the job's sorted file list; `ring` is the daemon's own view (DaemonRing) of a
  // segment whose superblock is ready. The segment and the parser outlive the pipeline. `on_end` is called once, from a pipeline thread, when production ends
  // (end of data, failure — with the message naming file, record and offset — or stop).
  Pipeline(PipelineOptions options, const ExampleParser& parser, const shm::Ring& ring,
           std::function<void(PipelineEnd, const std::string&)> on_end);
  ~Pipeline();  // RequestStop + Join

  void Start();
  // Ends production as failed with "<who>: out of memory (...)", for a thread of the daemon that
  // ran out of memory outside the handling of its own work (the sequencer, the tuner, the
  // heartbeat): the reserve is released first (budget.h); when even that report runs out of
  // memory, the process ends with DieOutOfMemory. Any thread.
  void FailOutOfMemory(const char* who, const std::bad_alloc& e) noexcept;
  // Stops production; `reason` becomes the consumers' error text ("ringfeedd stopped by SIGTERM").
  void RequestStop(const std::string& reason = "");
  // After RequestStop: waits up to `timeout` until no thread of the pipeline is in a file
  // system call or will make one again (the sequencer has returned, the I/O threads are out
  // of their reads), so that Join and the destructor return at once. False on timeout, with
  // the calls still under way in `*in_progress` (ReadAhead::IoInProgress: storage that does not
  // answer, a hung network mount): the caller may give up on them (Abandon).
  bool WaitForIo(std::chrono::milliseconds timeout, std::vector<std::string>* in_progress);
  // Ends production now without joining threads (when WaitForIo timed out and the process is
  // about to exit): consumers see the stopped state with `reason`.
  void Abandon(const std::string& reason);
  void Join();

  void SetWorkers(size_t n);
  // I/O threads; also the files opened ahead of their turn in the interleave (the readers
  // need that many files to read in parallel).
  void SetReaders(size_t n);
  void SetPrefetch(size_t n);  // >= 1
  void SetStreamBufferBytes(uint64_t bytes);
  void SetReadsPerFile(size_t n);  // reads in flight per file (ReadAhead::SetReadsPerFile), >= 1
  PipelineStats Snapshot() const;
  // The file system calls of the read-ahead under way for at least `at_least` now, oldest first
  // ("a read of PATH (for 8.0 s)", ReadAhead::IoInProgress): storage that does not answer,
  // which the stages' busy figures do not show until the call returns. Any thread.
  std::vector<std::string> IoWaiting(std::chrono::milliseconds at_least) const {
    return read_ahead_->IoInProgress(std::chrono::duration_cast<std::chrono::nanoseconds>(at_least).count());
  }
  // Production has ended (Snapshot().end is no longer kRunning): one atomic load, for pollers.
  bool ended() const { return ended_.load(std::memory_order_acquire); }
  // When it ended (steady_clock); meaningful once ended() is true.
  std::chrono::steady_clock::time_point ended_at() const {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ended_at_.load()));
  }

  // Puts back what a process that maps the segment (a buggy or hostile consumer) overwrote
  // in the ring, from the daemon's own records, so that it cannot stop delivery for good:
  // the superblock's geometry (what attaching clients read); each queue's `published` (the daemon's count) and `slot_of` entries of batches waiting; a
  // `taken` past the oldest batch waiting (or past `published`), rewound to it; slots the
  // daemon published whose word says kFilling or no known state, kHeld by a consumer id
  // that `rank_of` says is not attached (nullopt), or in ranks mode kHeld by a consumer of
  // another rank than the batch's queue (a rank forging holds on another rank's batches stalled
  // that rank for good), freed. Each repair is logged as an error and
  // counted (PipelineStats::ring_repairs); returns how many. A consumer that forges
  // another's words while it reads them is beyond repair: it can spoil that batch (the
  // zero-copy mapping). Call periodically, not concurrently with an attach (ringfeedd: on
  // the control socket's thread).
  // rank_of(id): nullopt when consumer `id` is not attached, else its rank (-1: shared mode).
  size_t RepairRing(const std::function<std::optional<int>(uint32_t consumer_id)>& rank_of);
  // The superblock as the daemon wrote it (WriteSuperblock into private memory with the same
  // inputs): RepairRing puts back its identity, geometry and schema, and while production runs
  // its state and error text. Without one, only the geometry the Ring holds is checked.
  void SetSuperblockImage(std::shared_ptr<const shm::Superblock> image);

 private:
  struct Work {
    BatchJob job;
    uint32_t slot;
  };
  enum class SlotUse : uint8_t { kFree, kInPipeline, kPublished };
  // A parsed batch: its slot, its queue, and what it holds (counted when it is published).
  struct Done {
    uint32_t slot = 0;
    uint32_t queue = 0;
    uint64_t rows = 0;
    uint64_t record_bytes = 0;
  };
  // Publishes `done.slot` to `done.queue` as its next batch (the daemon's count) and counts
  // it in records_, record_bytes_ and batches_. Under mutex_; the caller wakes the queue's
  // consumers after letting go of it (shm::WakePublishWaiters).
  void PublishLocked(const Done& done);
  // A slot whose batch will never be published (production failed or stopped): free again, so
  // that status does not count it as filling. Under mutex_.
  void AbandonSlotLocked(uint32_t slot);

  void RunSequencer();
  void RunWorker(size_t id);
  // Blocks until a slot is free (or stopping: false).
  bool AcquireSlot(uint32_t* slot);
  void Complete(uint64_t seq, const Done& done);
  void Fail(const std::string& message);
  // Counts and logs (rate-limited) a record skipped under on_error: skip; keeps it as the last
  // error. `ends_file`: the reader gave up on the rest of the file (ReadError::recoverable false).
  void NoteSkipped(const std::string& message, bool parse_error, bool ends_file = false);
  void Finish(PipelineEnd end, const std::string& message);

  PipelineOptions options_;
  const ExampleParser& parser_;
  shm::Ring ring_;
  std::function<void(PipelineEnd, const std::string&)> on_end_;
  std::unique_ptr<ReadAhead> read_ahead_;
  std::unique_ptr<Sequencer> sequencer_;
  std::thread sequencer_thread_;
  std::atomic<bool> sequencer_returned_{false};  // RunSequencer has returned (WaitForIo)

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable work_ready_;
  std::condition_variable workers_parked_;  // workers above wanted_workers_ wait here
  std::condition_variable work_done_;
  std::deque<Work> work_;
  std::vector<std::thread> workers_;  // ids >= wanted_workers_ are parked (SetWorkers)
  size_t wanted_workers_ = 0;
  bool workers_exit_ = false;  // Join: parked workers end too
  std::vector<SlotUse> slot_use_;
  size_t prefetch_ = 1;
  uint64_t next_publish_ = 0;                 // deterministic: next sequence number to publish
  std::vector<uint64_t> published_;           // per queue: batches published there (the daemon's count)
  struct Published {
    uint32_t queue = 0;
    uint64_t seq = 0;
  };
  std::vector<Published> slot_published_;     // per slot: what it was last published as
  uint64_t ring_repairs_ = 0;
  std::shared_ptr<const shm::Superblock> superblock_image_;
  std::map<uint64_t, Done> completed_;        // deterministic: seq -> parsed batch, not yet published
  uint64_t in_flight_ = 0;                    // batches handed to workers, not yet completed
  // deterministic: the earliest batch a worker failed on (UINT64_MAX: none) and why. The job
  // fails when that batch's turn to be published comes: every batch before it is delivered
  // first, whichever worker finishes first.
  uint64_t failed_seq_ = UINT64_MAX;
  std::string failed_error_;
  bool stopping_ = false;
  bool finished_ = false;
  PipelineEnd end_ = PipelineEnd::kRunning;
  std::atomic<std::chrono::steady_clock::rep> ended_at_{0};  // stored before ended_
  std::atomic<bool> ended_{false};  // end_ != kRunning, readable without the mutex
  std::string end_message_;
  std::string last_error_;
  std::string stop_reason_ = "ringfeedd stopped";

  std::atomic<uint64_t> records_{0}, batches_{0}, record_bytes_{0}, parse_errors_skipped_{0};
  std::atomic<uint64_t> read_errors_skipped_{0}, files_ended_early_{0};
  std::atomic<uint64_t> parse_busy_ns_{0}, parse_cpu_ns_{0}, slot_wait_ns_{0}, prefetch_wait_ns_{0};
  std::atomic<uint64_t> sequencer_cpu_ns_{0};      // its CPU time when it returned
  std::atomic<clockid_t> sequencer_clock_{0};       // its thread's CPU clock (pthread_getcpuclockid)
  std::atomic<bool> sequencer_clock_live_{false};   // ... while RunSequencer runs
  std::atomic<int64_t> slot_wait_since_{0};  // MonotonicNs when a wait for a slot began; 0: none
  // Rate limit for skip logs: the first kLogBurst, then one per second with a count.
  std::atomic<uint64_t> skip_logged_{0};
  std::atomic<uint64_t> skip_not_logged_{0};  // skips since the last logged line that were not logged
  std::atomic<int64_t> skip_log_next_ns_{0};
};

}  // namespace ringfeed
