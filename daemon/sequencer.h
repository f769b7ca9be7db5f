// Sequencer: the one place that decides the order of records and batches. It runs on a single
// thread and turns the job's file list into a sequence of BatchJobs:
//
//   for epoch e = first_epoch (0 unless resuming), first_epoch + 1, ... (epochs, 0 = forever;
//   of first_epoch only the batches from first_batch on are delivered, step 5):
//     1. files: the shard's files (shard below), in sorted order, or Fisher-Yates shuffled with
//        the RNG for (shuffle.seed, kFileOrder, e) when shuffle.files (daemon/shuffle.h).
//     2. interleave (tf.data's interleave, block length 1, deterministic): cycle positions
//        0..cycle_length-1 start with the first cycle_length files. Visit the positions
//        round-robin, taking one record from each. A visit that finds its file ended takes no
//        record: the next unopened file takes the position and is first read at its next
//        visit; when no file is left, the position stays empty. The epoch's input ends when
//        every position is empty. (tf.data's InterleaveDataset opens the next file when it
//        visits the empty position again, which gives the same order; tests/golden/
//        interleave_order.json holds orders TensorFlow made.) Records skipped under
//        on_error: skip (read errors, and Examples that do not match the spec: Pipeline's
//        record check) take no turn.
//        With deterministic: false a visit whose file has no record read yet goes to the next
//        position whose file has one (waiting only when none has), so a slow file holds up
//        only itself (tf.data's interleave with deterministic=False takes whichever input
//        is ready too). Each file's records still come in file order, every record of the
//        epoch once; which file's record comes next depends on timing.
//     3. shard by record (only when there are fewer files than shard.count): keep record r of a
//        file when r % shard.count == shard.index. A bad record (an error that names a record
//        and does not end its file) belongs to its record's shard the same way.
//     4. shuffle buffer of shuffle.buffer records (RNG (seed, kRecordShuffle, e); ShuffleBuffer).
//     5. batches of batch.size records; the last, smaller one is kept unless drop_remainder.
//        Batch k of the epoch goes to delivery queue k % queues (queues = 1 in shared mode,
//        consumers.count in ranks mode). In ranks mode, only complete rounds of `queues`
//        batches are delivered: the last batches of an epoch that do not fill a round are
//        dropped (and counted), so every rank gets the same number of batches per epoch.
//   shard by file (when there are at least shard.count files): file i of the sorted list
//   belongs to shard i % shard.count.
// With deterministic: true (the default) none of this depends on thread timing, read-ahead or
// worker counts: ReadAhead only fills each file's stream in file order, and the sequencer alone
// picks which stream to take from.
//
// Thread-safety: Run() on one thread; Stop() and the counters from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/read_ahead.h"
#include "daemon/shard.h"

namespace ringfeed {


struct SequencerOptions {
  std::vector<std::string> files;  // the job's sorted file list (before sharding)
  int64_t cycle_length = 4;
  // false: the interleave takes from whichever position's file has a record read (step 2).
  bool deterministic = true;
  int64_t batch_size = 32;
  bool drop_remainder = false;
  bool shuffle_files = false;
  int64_t shuffle_buffer = 0;
  uint64_t seed = 0;
  int64_t epochs = 1;  // 0 = forever
  // The epoch Run starts at (ringfeedd --start-epoch), < epochs unless epochs is 0. Every epoch
  // takes its orders from its own RNG streams (seed, use, e) and starts with an empty shuffle
  // buffer, so epoch e's batches are the same whether or not the epochs before it ran.
  uint64_t first_epoch = 0;
  // The first batch of first_epoch that Run delivers (ringfeedd --start-batch): batches 0 to
  // first_batch - 1 of that epoch are formed (their records read, in the same order) and dropped,
  // so the ones after keep their index, content and queue. Past the epoch's last deliverable
  // batch, Run fails (kFailed) at that epoch's end.
  uint64_t first_batch = 0;
  // Under on_error: fail, each record of a batch dropped before first_batch is checked with this
  // (a non-empty answer is the error): the run fails there as an uninterrupted one would have
  // when parsing that batch. Unset: not checked (under on_error: skip the readers check every
  // record already).
  std::function<std::string(const OwnedRecord&)> check_dropped;
  uint32_t queues = 1;
  int64_t shard_index = 0;
  int64_t shard_count = 1;
  bool skip_errors = false;  // on_error: skip (never a machine's limit, IsMachineLimit: that fails)
  // The memory budget's hard cap on the shuffle buffer. `shuffle_share_bytes`: what the memory
  // plan gave the buffer (payload + kRecordOverheadBytes per record, daemon/budget.h). Once the
  // buffer holds more (its records larger than those sampled at start), `over_budget` is called
  // with the buffer's records and payload bytes and the largest record it took this epoch (bytes),
  // again after each further kOverBudgetCheckBytes; a non-empty answer (ringfeedd: private RSS +
  // segment over pipeline.memory_budget, and why) stops the run as a failure once the records
  // read so far are delivered. Unset: no check.
  uint64_t shuffle_share_bytes = 0;
  std::function<std::string(uint64_t records, uint64_t bytes, uint64_t largest)> over_budget;
  // Files opened ahead of their turn in the interleave, so the read-ahead can start on them
  // (0: cycle_length). Once an epoch's files are all open, the next epoch's first ones are
  // opened ahead (unless the epoch is the last), never more streams than the shard has files.
  // Never changes the order; changeable with SetLookahead.
  int64_t lookahead_files = 0;
};

// One batch, before parsing: its serialized records and where it goes.
struct BatchJob {
  uint64_t seq = 0;    // 0-based position in the run's batch sequence
  uint64_t epoch = 0;
  uint64_t index = 0;  // 0-based index within the epoch
  uint32_t queue = 0;
  uint32_t flags = 0;  // shm::kBatchEndOfEpoch | shm::kBatchEndOfData
  std::vector<OwnedRecord> records;
};

class Sequencer {
 public:
  // How far the shuffle buffer grows past its share between two calls of over_budget.
  static constexpr uint64_t kOverBudgetCheckBytes = 1u << 20;

  // `on_skipped` is called (on the sequencer thread) for every error item skipped under
  // on_error: skip (read errors, and records that failed ReadAhead's record check: kind
  // kInvalidExample) of this shard.
  // `on_file_shrank` (may be empty), on the sequencer thread too: a file of this shard ended
  // with fewer records than when an earlier epoch read it to its end (rewritten or cut between
  // epochs: the reader finds a cut while it reads, not one before it opens the file), with the
  // message to log: "PATH: N records in epoch E (0-based), fewer than the M it had when epoch
  // E' read it: ...". At most kShrankWarningsPerEpoch a epoch, the last of them saying so.
  Sequencer(SequencerOptions options, ReadAhead* read_ahead, std::function<void(const ReadError&)> on_skipped,
            std::function<void(const std::string&)> on_file_shrank = {});
  static constexpr int kShrankWarningsPerEpoch = 3;

  enum class Outcome {
    kEndOfData,  // every epoch ran (never with epochs: 0 unless the data yields no batches)
    kFailed,     // a read error under on_error: fail, or a machine's limit; failure() says which
    kStopped,    // Stop() was called or `emit` returned false
  };
  // Calls `emit` for each batch in order; `emit` may block (back-pressure) and returns false
  // to stop.
  Outcome Run(const std::function<bool(BatchJob&&)>& emit);
  void Stop() { stop_.store(true); }
  // Files opened ahead of their turn (>= 1); takes effect at the next file opened.
  void SetLookahead(size_t files) { lookahead_.store(files < 1 ? 1 : files, std::memory_order_relaxed); }

  const std::string& failure() const { return failure_; }
  // After kFailed: whether a read error under on_error: fail ended the run (not the memory
  // budget, nor a machine's limit under skip).
  bool failed_on_read_error() const { return failed_on_read_error_; }
  // After Run returned kEndOfData: why an epoch delivered no batch, which ended the data there
  // ("epoch N delivered no batch: <the cause, from what the epoch read>; ..."; the last epoch's
  // too); empty when every epoch delivered batches. Read after Run.
  const std::string& empty_epoch() const { return empty_epoch_; }
  // The files this shard reads (indices into options.files).
  const std::vector<uint32_t>& shard_files() const { return shard_files_; }
  // Which files and records this shard reads: a copy, usable after the Sequencer is gone
  // (ReadAhead's record check runs on reader threads that may outlive it).
  Shard shard() const { return shard_; }

  // Progress, readable from any thread.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  uint64_t files_done_in_epoch() const { return files_done_.load(std::memory_order_relaxed); }
  // Batches of epoch() handed on so far (or dropped before --start-batch): the index the next
  // one handed on gets. Runs ahead of the batches trainers took by those in the ring and the
  // workers; more are formed and held back (up to two rounds of the ranks), to flag the
  // epoch's last.
  uint64_t batches_in_epoch() const { return batches_in_epoch_.load(std::memory_order_relaxed); }
  uint64_t records_skipped() const { return records_skipped_.load(std::memory_order_relaxed); }
  uint64_t batches_dropped() const { return batches_dropped_.load(std::memory_order_relaxed); }
  // The records in the shuffle buffer now and their payload bytes (the memory plan counts them
  // at 1.5 x the mean sampled at start; records later in the files may be larger).
  uint64_t shuffle_records() const { return shuffle_records_.load(std::memory_order_relaxed); }
  uint64_t shuffle_bytes() const { return shuffle_bytes_.load(std::memory_order_relaxed); }

 private:
  // What an epoch read, for the message of one that delivered no batch (EmptyEpochCause).
  struct EpochCounts {
    uint64_t delivered = 0;  // batches emitted
    uint64_t before_start = 0;  // batches formed and dropped before SequencerOptions::first_batch
    uint64_t records = 0;    // records of this shard put into batches (or the shuffle buffer)
    uint64_t skipped = 0;    // error items skipped under on_error: skip
    uint64_t batches = 0;    // batches formed, the short last one counted unless drop_remainder dropped it
    bool short_dropped = false;     // drop_remainder dropped a short last batch
    uint64_t other_shards = 0;      // records read that belong to other shards (sharding by record)
    std::string first_skipped;      // the first skipped error's message
    bool first_skipped_parse = false;  // ... a record that failed the features block (kInvalidExample)
  };
  // Runs epoch e; false when it stopped early (failure or stop).
  bool RunEpoch(uint64_t e, const std::function<bool(BatchJob&&)>& emit, EpochCounts* counts);
  // Epoch e's files in the order the interleave takes them (step 1 above).
  std::vector<uint32_t> EpochOrder(uint64_t e) const;
  // Opens files ahead of their turn until lookahead_ are open beyond the cycle: the rest of
  // epoch e's, then (unless e is the last epoch) epoch e + 1's first ones. `live`: the cycle
  // positions holding a file.
  void OpenAhead(uint64_t e, bool last_epoch, size_t live);
  // Why an epoch with these counts delivered no batch, e.g. "its 2 files held no record".
  std::string EmptyEpochCause(const EpochCounts& counts) const;

  SequencerOptions options_;
  ReadAhead* read_ahead_;
  // Files opened ahead of their turn, in the order their epochs take them (OpenAhead).
  struct Upcoming {
    uint64_t epoch;
    std::shared_ptr<FileStream> stream;
  };
  std::deque<Upcoming> upcoming_;
  // The epoch whose files OpenAhead opens, their order and the next one to open.
  struct Opening {
    uint64_t epoch = UINT64_MAX;
    std::vector<uint32_t> order;
    size_t next = 0;
  };
  Opening opening_;
  std::function<void(const ReadError&)> on_skipped_;
  std::function<void(const std::string&)> on_file_shrank_;
  // Per file of the job: the records it had when an epoch last read it to its end without a
  // read error that ended it (UINT64_MAX: not yet), and that epoch; for on_file_shrank_.
  std::vector<uint64_t> file_records_, file_records_epoch_;
  // The files of epoch e that ended with fewer records than before: `records` counted over the
  // file (every record index seen, other shards' and skipped ones included); `cut`: a read error
  // ended it early (reported already).
  void NoteFileEnd(uint64_t e, uint32_t file_index, uint64_t records, bool cut, int* warned);
  std::vector<uint32_t> shard_files_;
  Shard shard_;
  uint64_t next_seq_ = 0;
  std::string failure_;
  bool failed_on_read_error_ = false;
  std::string empty_epoch_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> lookahead_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> files_done_{0};
  std::atomic<uint64_t> batches_in_epoch_{0};
  std::atomic<uint64_t> records_skipped_{0};
  std::atomic<uint64_t> batches_dropped_{0};
  std::atomic<uint64_t> shuffle_records_{0}, shuffle_bytes_{0};
};

}  // namespace ringfeed
