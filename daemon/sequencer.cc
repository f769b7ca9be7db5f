#include "daemon/sequencer.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>

#include "daemon/budget.h"
#include "daemon/shuffle.h"
#include "shm/ring_layout.h"

namespace ringfeed {

Sequencer::Sequencer(SequencerOptions options, ReadAhead* read_ahead,
                     std::function<void(const ReadError&)> on_skipped,
                     std::function<void(const std::string&)> on_file_shrank)
    : options_(std::move(options)), read_ahead_(read_ahead), on_skipped_(std::move(on_skipped)),
      on_file_shrank_(std::move(on_file_shrank)),
      lookahead_(static_cast<size_t>(options_.lookahead_files > 0 ? options_.lookahead_files
                                                                  : std::max<int64_t>(1, options_.cycle_length))) {
  if (options_.cycle_length < 1) options_.cycle_length = 1;
  if (options_.batch_size < 1) options_.batch_size = 1;
  if (options_.queues < 1) options_.queues = 1;
  shard_ = Shard::For(options_.files.size(), options_.shard_count, options_.shard_index);
  shard_files_ = shard_.Files(options_.files.size());
  epoch_.store(options_.first_epoch, std::memory_order_relaxed);
  file_records_.assign(options_.files.size(), UINT64_MAX);
  file_records_epoch_.assign(options_.files.size(), 0);
}

void Sequencer::NoteFileEnd(uint64_t e, uint32_t file_index, uint64_t records, bool cut, int* warned) {
  if (file_index >= file_records_.size() || cut) return;
  const uint64_t before = std::exchange(file_records_[file_index], records);
  const uint64_t before_epoch = std::exchange(file_records_epoch_[file_index], e);
  if (before == UINT64_MAX || records >= before || !on_file_shrank_ || *warned >= kShrankWarningsPerEpoch) return;
  ++*warned;
  on_file_shrank_(options_.files[file_index] + ": " + std::to_string(records) + " record" +
                  (records == 1 ? "" : "s") + " in epoch " + std::to_string(e) + " (0-based), fewer than the " +
                  std::to_string(before) + " it had when epoch " + std::to_string(before_epoch) +
                  " read it: it was cut or rewritten between epochs (in place?), and this epoch has only what it "
                  "holds now" +
                  (*warned == kShrankWarningsPerEpoch
                       ? "; further files with fewer records in this epoch are not logged"
                       : ""));
}

Sequencer::Outcome Sequencer::Run(const std::function<bool(BatchJob&&)>& emit) {
  // However the run ends, the files opened ahead for an epoch that did not run are closed.
  struct Closer {
    Sequencer* s;
    ~Closer() {
      for (auto& u : s->upcoming_) s->read_ahead_->Close(u.stream);
      s->upcoming_.clear();
      s->opening_ = {};
    }
  } closer{this};
  for (uint64_t e = options_.first_epoch; options_.epochs == 0 || e < static_cast<uint64_t>(options_.epochs); ++e) {
    // The epoch's counts start at 0 before status shows it (not the last epoch's with it).
    files_done_.store(0, std::memory_order_relaxed);
    batches_in_epoch_.store(0, std::memory_order_relaxed);
    epoch_.store(e, std::memory_order_release);
    EpochCounts counts;
    if (!RunEpoch(e, emit, &counts) || stop_.load()) {
      return failure_.empty() ? Outcome::kStopped : Outcome::kFailed;
    }
    // A resume point past the epoch's end is a mistake in the checkpoint's arithmetic: said,
    // rather than going on with another epoch than the one asked for.
    if (counts.delivered == 0 && counts.before_start > 0) {
      const bool last = options_.epochs != 0 && e + 1 == static_cast<uint64_t>(options_.epochs);
      failure_ = "--start-batch " + std::to_string(options_.first_batch) + " is past the end of epoch " +
                 std::to_string(e) + ", which has " + std::to_string(counts.before_start) + " batch" +
                 (counts.before_start == 1 ? "" : "es") + " (0 to " + std::to_string(counts.before_start - 1) +
                 "): a checkpoint taken at the end of epoch " + std::to_string(e) +
                 (last ? ", the job's last (epochs: " + std::to_string(options_.epochs) + "), has nothing left to resume"
                       : " resumes with --start-epoch " + std::to_string(e + 1) + " and no --start-batch");
      return Outcome::kFailed;
    }
    // An epoch that delivers nothing would loop forever with epochs: 0; the last one's trainers
    // get nothing either. Both say why.
    if (counts.delivered == 0) {
      const bool more = options_.epochs == 0 || e + 1 < static_cast<uint64_t>(options_.epochs);
      empty_epoch_ = "epoch " + std::to_string(e) + " delivered no batch: " + EmptyEpochCause(counts) +
                     (e == options_.first_epoch && options_.first_batch > 0
                          ? " (and --start-batch " + std::to_string(options_.first_batch) + " asked for a batch of it)"
                          : "") +
                     (options_.epochs == 0 ? "; ended there (epochs: 0 would repeat it without end, every epoch "
                                             "delivering none); restart the job once the cause is fixed"
                      : more ? "; ended there, before the last epoch, since the epochs after it would deliver none "
                               "either; restart the job once the cause is fixed"
                             : "; the last epoch; restart the job once the cause is fixed");
      return Outcome::kEndOfData;
    }
  }
  return Outcome::kEndOfData;
}

std::string Sequencer::EmptyEpochCause(const EpochCounts& counts) const {
  const std::string shard = options_.shard_count > 1 ? " of this shard" : "";
  const auto plural = [](uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  const auto are = [](uint64_t n) { return n == 1 ? " is" : " are"; };
  if (counts.records == 0 && counts.skipped == 0) {
    if (counts.other_shards > 0) {  // sharding by record: every record read was another shard's
      return "its " + plural(shard_files_.size(), "file", "files") + (shard_files_.size() == 1 ? " holds " : " hold ") +
             plural(counts.other_shards, "record", "records") + ", none of them this shard's (" +
             shard_.Describe(options_.files.size()) + ")";
    }
    return "its " + plural(shard_files_.size(), "file", "files") + shard + " held no record";
  }
  if (counts.records == 0) {
    return "all it read" + shard + " was skipped under on_error: skip (" + plural(counts.skipped, "error", "errors") +
           (counts.first_skipped_parse ? "; a features block that no record matches skips every record" : "") +
           "); the first: " + counts.first_skipped;
  }
  std::string skipped;
  if (counts.skipped != 0) skipped = " (and " + plural(counts.skipped, "error", "errors") + " skipped: on_error)";
  const std::string ranks = std::to_string(options_.queues);
  if (counts.batches == 0 && options_.queues > 1) {
    return "its " + plural(counts.records, "record", "records") + shard + skipped + are(counts.records) +
           " fewer than batch.size x the ranks of consumers.count (" + std::to_string(options_.batch_size) + " x " +
           ranks + "), the least that gives every rank a batch: ranks mode delivers whole rounds only (and "
           "drop_remainder drops a short batch)";
  }
  if (counts.batches == 0) {
    return "its " + plural(counts.records, "record", "records") + shard + skipped + are(counts.records) +
           " fewer than batch.size " + std::to_string(options_.batch_size) + ", and drop_remainder drops a short batch";
  }
  return "its " + plural(counts.batches, "batch", "batches") + skipped + are(counts.batches) + " fewer than the " +
         ranks + " ranks of consumers.count: ranks mode delivers whole rounds only" +
         (counts.short_dropped ? " (and drop_remainder dropped a short batch that would have been one more)" : "");
}

std::vector<uint32_t> Sequencer::EpochOrder(uint64_t e) const {
  std::vector<uint32_t> order = shard_files_;
  if (options_.shuffle_files) {
    Xoshiro256StarStar rng(options_.seed, RngStream::kFileOrder, e);
    FisherYatesShuffle(order, rng);
  }
  return order;
}

void Sequencer::OpenAhead(uint64_t e, bool last_epoch, size_t live) {
  while (upcoming_.size() < lookahead_.load(std::memory_order_relaxed)) {
    if (opening_.next >= opening_.order.size()) {
      // Epoch e's files are all open: the next epoch's first ones are opened ahead as well, so
      // the read-ahead starts on them while e's last files finish instead of a round trip to
      // the storage after e's end. Never beyond the next epoch.
      if (opening_.epoch != e || last_epoch) return;
      opening_ = {e + 1, EpochOrder(e + 1), 0};
      continue;
    }
    // A file may be open for this epoch and the next at once; never more streams than the
    // shard has files, the memory plan's open files (OpenFiles) when they are fewer than
    // cycle_length + lookahead.
    if (opening_.epoch != e && live + upcoming_.size() >= shard_files_.size()) return;
    const uint32_t f = opening_.order[opening_.next++];
    std::shared_ptr<FileStream> stream = read_ahead_->Open(f, options_.files[f]);
    try {
      upcoming_.push_back({opening_.epoch, stream});
    } catch (...) {
      read_ahead_->Close(stream);
      throw;
    }
  }
}

bool Sequencer::RunEpoch(uint64_t e, const std::function<bool(BatchJob&&)>& emit, EpochCounts* counts) {
  const bool last_epoch = options_.epochs != 0 && e + 1 == static_cast<uint64_t>(options_.epochs);
  const uint64_t round = options_.queues;
  const uint64_t first_batch = e == options_.first_epoch ? options_.first_batch : 0;

  // Batches are held back until the next round is complete, so the last delivered round can
  // be flagged end-of-epoch (and an incomplete final round dropped in ranks mode).
  std::deque<BatchJob> complete;
  BatchJob current;
  uint64_t next_index = 0;
  auto release = [&](size_t n, uint32_t flags) {
    for (size_t i = 0; i < n; ++i) {
      BatchJob job = std::move(complete.front());
      complete.pop_front();
      batches_in_epoch_.store(job.index + 1, std::memory_order_relaxed);
      if (job.index < first_batch) {  // resuming mid-epoch: delivered before the restart
        ++counts->before_start;
        for (const OwnedRecord& record : job.records) {
          if (!options_.check_dropped) break;
          if (std::string error = options_.check_dropped(record); !error.empty()) {
            failure_ = std::move(error);
            return false;
          }
        }
        continue;
      }
      job.seq = next_seq_++;
      job.flags = flags;
      ++counts->delivered;
      if (stop_.load() || !emit(std::move(job))) return false;
    }
    return true;
  };
  auto add = [&](OwnedRecord&& record) {
    if (current.records.empty()) {
      current.epoch = e;
      current.index = next_index++;
      current.queue = static_cast<uint32_t>(current.index % round);
      // Reserved up to a bound: a batch.size far above the epoch's records (full-batch training
      // on a small dataset) reserves no room for records that never come.
      constexpr int64_t kMostReserved = 1 << 16;
      current.records.reserve(static_cast<size_t>(std::min<int64_t>(options_.batch_size, kMostReserved)));
    }
    current.records.push_back(std::move(record));
    if (current.records.size() == static_cast<size_t>(options_.batch_size)) {
      ++counts->batches;
      complete.push_back(std::move(current));
      current = BatchJob{};
      if (complete.size() >= 2 * round) return release(round, 0);
    }
    return true;
  };

  ShuffleBuffer<OwnedRecord> shuffle(static_cast<size_t>(std::max<int64_t>(options_.shuffle_buffer, 1)),
                                     Xoshiro256StarStar(options_.seed, RngStream::kRecordShuffle, e));
  // A buffer of 0 or 1 records passes records through in order (ShuffleBuffer's rule), so they
  // go straight to the batch. Records that stay in a real buffer get their own allocation:
  // one would otherwise keep its whole read-ahead chunk alive for as long as it waits.
  const bool shuffling = options_.shuffle_buffer > 1;
  uint64_t shuffle_bytes = 0;  // what shuffle_bytes_ shows
  auto shown = [&] {
    shuffle_records_.store(shuffle.size(), std::memory_order_relaxed);
    shuffle_bytes_.store(shuffle_bytes, std::memory_order_relaxed);
  };
  // However the epoch ends (a stop, a failure), the buffer is gone with it: so are its figures.
  struct ShownEmpty {
    Sequencer* s;
    ~ShownEmpty() {
      s->shuffle_records_.store(0, std::memory_order_relaxed);
      s->shuffle_bytes_.store(0, std::memory_order_relaxed);
    }
  } shown_empty{this};
  // The buffer's size at which over_budget is asked next (SequencerOptions::shuffle_share_bytes).
  uint64_t next_budget_check = options_.shuffle_share_bytes;
  std::string over_budget;  // set by push: the run stops as a failure, once what was read is delivered
  uint64_t largest_pushed = 0;  // the largest record the buffer took this epoch (for over_budget's advice)
  auto push = [&](OwnedRecord&& record) {
    if (!shuffling) return add(std::move(record));
    shuffle_bytes += record.size;
    largest_pushed = std::max<uint64_t>(largest_pushed, record.size);
    const uint32_t file = record.file_index;
    const uint64_t index = record.record_index;
    if (!shuffle.full()) {
      shuffle.Add(std::move(record).Unshared());
      shown();
    } else {
      OwnedRecord out = shuffle.Exchange(std::move(record).Unshared());
      shuffle_bytes -= out.size;
      shown();
      if (!add(std::move(out))) return false;
    }
    if (!options_.over_budget) return true;
    const uint64_t held = ShuffleHeldBytes(shuffle.size(), shuffle_bytes);
    if (held <= next_budget_check) return true;
    next_budget_check = held + kOverBudgetCheckBytes;
    std::string why = options_.over_budget(shuffle.size(), shuffle_bytes, largest_pushed);
    if (why.empty()) return true;
    over_budget = "stopped at record " + std::to_string(index) + " of " + options_.files[file] + ": " + why;
    return false;
  };

  // The end of the epoch's input (or a read error under on_error: fail): everything read so
  // far is delivered — the shuffle buffer drained, the last batch kept unless drop_remainder,
  // whole rounds in ranks mode — the last round carrying `end_flags`.
  auto finish = [&](uint32_t end_flags) {
    while (!shuffle.empty()) {
      OwnedRecord out = shuffle.Drain();
      shuffle_bytes -= out.size;
      shown();
      if (!add(std::move(out))) return false;
    }
    if (!current.records.empty()) {
      if (options_.drop_remainder) {
        counts->short_dropped = true;
        current = BatchJob{};
      } else {
        ++counts->batches;
        complete.push_back(std::move(current));
      }
    }
    // What is left: one or two rounds, the second maybe incomplete.
    const size_t whole = complete.size() / round * round;
    const size_t dropped = complete.size() - whole;
    batches_dropped_.fetch_add(dropped, std::memory_order_relaxed);
    complete.resize(whole);
    if (whole > round && !release(whole - round, 0)) return false;
    if (whole > 0 && !release(round, end_flags)) return false;
    return true;
  };

  // Interleave.
  const size_t cycle = static_cast<size_t>(options_.cycle_length);
  std::vector<std::shared_ptr<FileStream>> positions(cycle);
  struct Closer {
    ReadAhead* ra;
    std::vector<std::shared_ptr<FileStream>>* positions;
    ~Closer() {
      for (auto& s : *positions) if (s) ra->Close(s);
    }
  } closer{read_ahead_, &positions};
  // The epoch's files were maybe opened ahead by the epoch before (OpenAhead); else they start here.
  if (upcoming_.empty() && opening_.epoch != e) opening_ = {e, EpochOrder(e), 0};
  // The next file of this epoch for a cycle position, or nullptr when they are all taken.
  auto take_next = [&]() -> std::shared_ptr<FileStream> {
    size_t live = 0;
    for (auto& s : positions) live += s != nullptr;
    OpenAhead(e, last_epoch, live);
    if (upcoming_.empty() || upcoming_.front().epoch != e) return nullptr;
    auto s = std::move(upcoming_.front().stream);
    upcoming_.pop_front();
    return s;
  };
  for (size_t p = 0; p < cycle; ++p) positions[p] = take_next();
  // Per position: the records its file has shown so far (the highest record index + 1) and
  // whether a read error ended it; for NoteFileEnd.
  std::vector<uint64_t> file_records(cycle, 0);
  std::vector<char> file_cut(cycle, 0);
  int shrank_warned = 0;

  // deterministic: false: position p's file if it has a record read, else the next position
  // whose file has one; when none has, waits for the first that gets one (a stop ends the wait).
  auto ready_position = [&](size_t p) {
    for (;;) {
      for (size_t i = 0; i < cycle; ++i) {
        const size_t q = (p + i) % cycle;
        if (positions[q] && positions[q]->Ready()) return q;
      }
      read_ahead_->WaitAny(positions);
    }
  };

  size_t live = 0;
  for (auto& s : positions) live += s != nullptr;
  for (size_t p = 0; live > 0; p = (p + 1) % cycle) {
    while (positions[p]) {
      if (stop_.load()) return false;
      if (!options_.deterministic) p = ready_position(p);
      StreamItem item = positions[p]->Next();
      // A stop ends a wait in Next with kEnd: not the end of that file.
      if (stop_.load()) return false;
      if (item.kind == StreamItem::Kind::kEnd) {
        NoteFileEnd(e, positions[p]->file_index(), file_records[p], file_cut[p] != 0, &shrank_warned);
        file_records[p] = 0;
        file_cut[p] = 0;
        read_ahead_->Close(positions[p]);
        positions[p] = nullptr;
        files_done_.fetch_add(1, std::memory_order_relaxed);
        positions[p] = take_next();
        if (!positions[p]) --live;
        break;  // as tf.data's interleave: the visit that finds the end moves on, the next file waits a turn
      }
      if (item.kind == StreamItem::Kind::kError) {
        if (!item.error->recoverable) file_cut[p] = 1;
        file_records[p] = std::max(file_records[p], item.error->record_index + 1);
        // A bad record of another record shard is that shard's (it counts and reports it); an
        // error that ends the file concerns every shard reading it.
        if (item.error->recoverable && !shard_.OwnsRecord(item.error->record_index)) continue;
        // Out of file descriptors or memory is the machine's limit, not a bad file: never skipped.
        if (!options_.skip_errors || IsMachineLimit(item.error->kind)) {
          // Every good record read before the error is still delivered (bad input #1 of
          // ../shared/reference/bad-inputs.md), the last batch short if it must be.
          finish(0);
          failure_ = item.error->message;
          failed_on_read_error_ = !options_.skip_errors;
          if (options_.skip_errors) failure_ += " (not skipped: a limit of the machine, not a bad file)";
          return false;
        }
        records_skipped_.fetch_add(1, std::memory_order_relaxed);
        if (counts->skipped++ == 0) {
          counts->first_skipped = item.error->message;
          counts->first_skipped_parse = item.error->kind == ReadErrorKind::kInvalidExample;
        }
        if (on_skipped_) on_skipped_(*item.error);
        continue;
      }
      file_records[p] = std::max(file_records[p], item.record.record_index + 1);
      if (!shard_.OwnsRecord(item.record.record_index)) {
        ++counts->other_shards;
        continue;
      }
      ++counts->records;
      if (!push(std::move(item.record))) {
        if (over_budget.empty()) return false;
        // As after a read error: every record read so far is delivered, then the run fails.
        finish(0);
        failure_ = std::move(over_budget);
        return false;
      }
      break;  // one record per visit
    }
  }

  if (stop_.load()) return false;
  return finish(shm::kBatchEndOfEpoch | (last_epoch ? shm::kBatchEndOfData : 0));
}

}  // namespace ringfeed
