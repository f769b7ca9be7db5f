#include "daemon/pipeline.h"

#include <pthread.h>
#include <time.h>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>
#include <type_traits>

#include "daemon/budget.h"
#include "daemon/thread_clock.h"
#include "daemon/thread_name.h"
#include "format/read_queue.h"
#include "shm/futex.h"
#include "shm/ring.h"

namespace ringfeed {
namespace {
constexpr auto kSlotWait = std::chrono::milliseconds(100);
constexpr auto kPrefetchPoll = std::chrono::milliseconds(2);
// The prefetch poll once no consumer has claimed a batch for kIdleAfterNs (none attached, or a
// trainer paused for evaluation or a checkpoint): 2 ms polls cost ~1% of a core for nothing.
// The first claim after it is seen within kIdlePoll, while the prefetched batches serve it.
constexpr auto kIdlePoll = std::chrono::milliseconds(50);
constexpr int64_t kIdleAfterNs = 1'000'000'000;
constexpr uint64_t kLogBurst = 20;  // skipped records logged one by one before rate limiting

}  // namespace

Pipeline::Pipeline(PipelineOptions options, const ExampleParser& parser, const shm::Ring& ring,
                   std::function<void(PipelineEnd, const std::string&)> on_end)
    : options_(std::move(options)), parser_(parser), ring_(ring), on_end_(std::move(on_end)) {
  slot_use_.assign(ring_.slot_count, SlotUse::kFree);
  slot_published_.assign(ring_.slot_count, Published{});
  published_.assign(ring_.queue_count, 0);
  prefetch_ = std::max<size_t>(1, options_.prefetch);
  options_.sequencer.deterministic = options_.deterministic;
  if (options_.sequencer.lookahead_files == 0) {
    options_.sequencer.lookahead_files = static_cast<int64_t>(std::max<size_t>(1, options_.readers));
  }
  read_ahead_ = std::make_unique<ReadAhead>(options_.reader, options_.readers, options_.stream_buffer_bytes,
                                            ReadAhead::UsesChunks(options_.sequencer.shuffle_buffer));
  read_ahead_->SetQueuedStreams(static_cast<size_t>(std::max<int64_t>(1, options_.sequencer.cycle_length)));
  if (options_.inflate_unplanned) read_ahead_->WarnOnCompressed();
  if (!options_.sequencer.skip_errors && options_.sequencer.first_batch > 0) {
    options_.sequencer.check_dropped = [this](const OwnedRecord& record) {
      ParseError error;
      if (parser_.Check(record.bytes(), &error)) return std::string();
      const JobFiles files(options_.sequencer.files,
                           [this](uint32_t file_index) { return read_ahead_->CompressionOf(file_index); });
      return files.Place(record) + ": " + error.message + " (on_error: fail)";
    };
  }
  sequencer_ = std::make_unique<Sequencer>(
      options_.sequencer, read_ahead_.get(),
      [this](const ReadError& error) {
        // A file changed while it was read is said at its end: nothing of it was left unread.
        NoteSkipped(error.message, error.kind == ReadErrorKind::kInvalidExample,
                    !error.recoverable && error.kind != ReadErrorKind::kFileChanged);
      },
      [](const std::string& message) { spdlog::warn("{}", message); });
  if (options_.sequencer.skip_errors) {
    // A batch holds batch.size good records (short only at the end of an epoch), so a record
    // that would fail to parse must go before the sequencer cuts batches: the readers parse each
    // record once more to check it, and the sequencer skips the failures like read errors.
    // Records of other record shards are left to the sequencer, which drops them unchecked.
    // A record whose row (measured, an upper bound) would not fit in a ring slot is not parsed
    // here (its scratch would be as large; a check holds at most 2x a slot): it goes on
    // unchecked. A good one can never be batched: the worker's capacity error, which names
    // ring.slot_bytes, stops the job in both on_error modes; a bad one the worker's parse
    // rejects is skipped there, leaving its batch a row short.
    read_ahead_->SetRecordCheck([parser = &parser_, shard = sequencer_->shard(),
                                 slot_bytes = ring_.slot_bytes](const OwnedRecord& record, std::string* why) {
      if (!shard.OwnsRecord(record.record_index)) return true;
      // Values take at most 8x a record's bytes (one-byte varints): a small record's row fits.
      if (record.size > slot_bytes / 16 && parser->RowBytes(record.bytes()) > slot_bytes) return true;
      ParseError error;
      try {
        if (parser->Check(record.bytes(), &error)) return true;
      } catch (const std::bad_alloc&) {
        return true;  // unchecked: a worker that fails to parse it skips it (a row short)
      }
      *why = std::move(error.message);
      return false;
    });
  }
}

void Pipeline::NoteSkipped(const std::string& message, bool parse_error, bool ends_file) {
  (parse_error ? parse_errors_skipped_ : read_errors_skipped_).fetch_add(1, std::memory_order_relaxed);
  if (ends_file) files_ended_early_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t n = skip_logged_.fetch_add(1, std::memory_order_relaxed);
  const int64_t now = MonotonicNs();
  if (n < kLogBurst || now >= skip_log_next_ns_.load(std::memory_order_relaxed)) {
    skip_log_next_ns_.store(now + 1'000'000'000, std::memory_order_relaxed);
    const uint64_t not_logged = skip_not_logged_.exchange(0, std::memory_order_relaxed);
    spdlog::warn("skipped (on_error: skip): {} [{} skipped so far{}]", message,
                 read_errors_skipped_.load() + parse_errors_skipped_.load(),
                 not_logged == 0 ? std::string()
                                 : fmt::format("; {} more since the last such line, not logged: one line a second "
                                               "after the first {}",
                                               not_logged, kLogBurst));
  } else {
    skip_not_logged_.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard lock(mutex_);
  last_error_ = message;
}

Pipeline::~Pipeline() {
  RequestStop();
  Join();
}

void Pipeline::Start() {
  SetWorkers(options_.workers);
  sequencer_thread_ = std::thread([this] {
    try {
      RunSequencer();
    } catch (const std::bad_alloc& e) {  // the batches it forms, the shuffle buffer
      FailOutOfMemory("the sequencer", e);
    } catch (const std::exception& e) {
      Fail(std::string("the sequencer: ") + e.what());
    }
    sequencer_returned_ = true;
  });
}

void Pipeline::FailOutOfMemory(const char* who, const std::bad_alloc& e) noexcept {
  ReleaseOomReserve();  // the message and the stop need memory too (budget.h)
  try {
    Fail(std::string(who) + ": " + OutOfMemory(e));
  } catch (...) {
    char where[128];  // no allocation here
    std::snprintf(where, sizeof where, "%s, reporting it", who);
    DieOutOfMemory(where);
  }
}

void Pipeline::RequestStop(const std::string& reason) {
  sequencer_->Stop();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (!reason.empty()) stop_reason_ = reason;
    // Parsed batches waiting for an earlier one are never published now.
    for (const auto& [seq, done] : completed_) AbandonSlotLocked(done.slot);
    completed_.clear();
  }
  read_ahead_->Stop();  // a sequencer waiting for records that do not come wakes
  work_ready_.notify_all();
  workers_parked_.notify_all();
  work_done_.notify_all();
  shm::FutexWakeAll(&ring_.sb->free_futex);
}

bool Pipeline::WaitForIo(std::chrono::milliseconds timeout, std::vector<std::string>* in_progress) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<std::string> calls = read_ahead_->IoInProgress();
    const bool sequencer_done = !sequencer_thread_.joinable() || sequencer_returned_.load();
    if (calls.empty() && sequencer_done && read_ahead_->threads_in_turn() == 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (calls.empty()) calls.push_back(sequencer_done ? "an I/O thread" : "the sequencer thread, which has not returned");
      *in_progress = std::move(calls);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Pipeline::Abandon(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  Finish(PipelineEnd::kStopped, reason);
}

void Pipeline::Join() {
  if (sequencer_thread_.joinable()) sequencer_thread_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mutex_);
    wanted_workers_ = 0;
    workers_exit_ = true;
    workers.swap(workers_);
  }
  work_ready_.notify_all();
  workers_parked_.notify_all();
  for (std::thread& t : workers) t.join();
  std::string reason;
  {
    std::lock_guard lock(mutex_);
    reason = stop_reason_;
  }
  Finish(PipelineEnd::kStopped, reason);
}

void Pipeline::SetWorkers(size_t n) {
  if (n < 1) n = 1;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    wanted_workers_ = n;
    // Workers above `n` park (each after the batch it is parsing) and come back when the
    // count rises again: a new thread each time would bring a new stack, parse scratch and
    // malloc arena, and the autotuner's trials of one worker more or less made the daemon's
    // RSS step up with every cycle (a 5-minute soak: +0.55 MiB per cycle).
    while (workers_.size() < n) {
      const size_t id = workers_.size();
      workers_.emplace_back([this, id] { RunWorker(id); });
    }
  }
  work_ready_.notify_all();
  workers_parked_.notify_all();
}

void Pipeline::SetReaders(size_t n) {
  read_ahead_->SetThreads(n);
  sequencer_->SetLookahead(n);
}

void Pipeline::SetPrefetch(size_t n) {
  {
    std::lock_guard lock(mutex_);
    prefetch_ = std::max<size_t>(1, n);
  }
  shm::FutexWakeAll(&ring_.sb->free_futex);  // a waiting sequencer re-checks
}

void Pipeline::SetStreamBufferBytes(uint64_t bytes) { read_ahead_->SetStreamBufferBytes(bytes); }

void Pipeline::SetReadsPerFile(size_t n) { read_ahead_->SetReadsPerFile(n); }

bool Pipeline::AcquireSlot(uint32_t* slot) {
  shm::Superblock* sb = ring_.sb;
  const uint32_t count = ring_.slot_count;
  int64_t wait_start = 0;
  auto count_wait = [&] {
    if (wait_start == 0) return;
    slot_wait_ns_.fetch_add(static_cast<uint64_t>(MonotonicNs() - wait_start), std::memory_order_relaxed);
    slot_wait_since_.store(0, std::memory_order_relaxed);
  };
  for (;;) {
    const uint32_t seen = sb->free_futex.load(std::memory_order_acquire);
    bool prefetch_reached = false;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        count_wait();
        return false;
      }
      // Prefetch: batches in the pipeline plus batches ready in the ring stay below
      // workers + prefetch. A consumer taking a batch does not wake us, releasing it does.
      size_t loader_owned = 0;
      for (uint32_t s = 0; s < count; ++s) {
        if (slot_use_[s] == SlotUse::kPublished && shm::IsFree(ring_, s)) slot_use_[s] = SlotUse::kFree;
        if (slot_use_[s] == SlotUse::kInPipeline) ++loader_owned;
        if (slot_use_[s] == SlotUse::kPublished &&
            shm::SlotWord::Unpack(ring_.header(s)->word.load(std::memory_order_acquire)).state == shm::SlotState::kReady) {
          ++loader_owned;
        }
      }
      prefetch_reached = loader_owned >= wanted_workers_ + prefetch_;
      if (!prefetch_reached) {
        // The lowest free slot: the slots in use stay as few as the prefetch depth and the
        // consumers' holds need, and a slot just released (still in the CPU caches of the
        // worker that fills it and the consumer that reads it) is the one refilled. Going
        // round the whole ring instead walked every slot, so that on 100 KB records the
        // worker's copy and the consumer's reads went to memory (a 48 MiB ring beyond L3).
        for (uint32_t s = 0; s < count; ++s) {
          if (slot_use_[s] == SlotUse::kFree) {
            slot_use_[s] = SlotUse::kInPipeline;
            *slot = s;
            count_wait();
            return true;
          }
        }
      }
    }
    if (wait_start == 0) {
      wait_start = MonotonicNs();
      slot_wait_since_.store(wait_start, std::memory_order_relaxed);
    }
    // Counted in free_waiters, so releases wake us. A consumer claiming a ready batch (which
    // lowers loader_owned) does not, hence the short poll when only prefetch holds us back.
    const int64_t poll_start = MonotonicNs();
    // A claim ends this wait (the count falls below the prefetch depth): waiting since
    // wait_start means no consumer has claimed since.
    const auto poll = poll_start - wait_start < kIdleAfterNs ? kPrefetchPoll : kIdlePoll;
    shm::WaitForFree(ring_, seen, prefetch_reached ? poll : kSlotWait);
    if (prefetch_reached) {
      prefetch_wait_ns_.fetch_add(static_cast<uint64_t>(MonotonicNs() - poll_start), std::memory_order_relaxed);
    }
  }
}

void Pipeline::RunSequencer() {
  NameThread("rf-sequencer");
  // Its CPU time is read by Snapshot from this thread's clock while it runs (counted at each
  // batch it would lag by a batch: a batch of 400,000 records takes longer than the tuner's
  // interval), and kept here when it returns, on every way out.
  clockid_t clock{};
  if (pthread_getcpuclockid(pthread_self(), &clock) == 0) {
    sequencer_clock_.store(clock, std::memory_order_relaxed);
    sequencer_clock_live_.store(true, std::memory_order_release);
  }
  struct KeepCpu {
    Pipeline& p;
    ~KeepCpu() {
      p.sequencer_cpu_ns_.store(static_cast<uint64_t>(ThreadCpuNs()), std::memory_order_relaxed);
      p.sequencer_clock_live_.store(false, std::memory_order_release);
    }
  } keep_cpu{*this};
  const Sequencer::Outcome outcome = sequencer_->Run([this](BatchJob&& job) {
    uint32_t slot;
    if (!AcquireSlot(&slot)) return false;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        slot_use_[slot] = SlotUse::kFree;
        return false;
      }
      ++in_flight_;
      work_.push_back(Work{std::move(job), slot});
    }
    work_ready_.notify_one();
    return true;
  });
  if (outcome == Sequencer::Outcome::kStopped) return;
  // End of data, or a read error under on_error: fail: first every batch handed out is
  // published (consumers get the batches before the error, then the error).
  std::unique_lock lock(mutex_);
  // A worker's pending failure (failed_seq_) ends the run instead, once its turn comes.
  work_done_.wait(lock, [&] {
    return stopping_ || (in_flight_ == 0 && completed_.empty() && failed_seq_ == UINT64_MAX);
  });
  if (stopping_) return;
  lock.unlock();
  if (outcome == Sequencer::Outcome::kFailed) {
    Fail(sequencer_->failure() + (sequencer_->failed_on_read_error() ? " (on_error: fail)" : ""));
  } else {
    Finish(PipelineEnd::kEndOfData, sequencer_->empty_epoch());
  }
}

void Pipeline::RunWorker(size_t id) {
  NameThread("rf-parse", id);
  BatchWriter writer(parser_, ring_);
  const JobFiles files(options_.sequencer.files,
                       [this](uint32_t file_index) { return read_ahead_->CompressionOf(file_index); });
  for (;;) {
    Work work;
    {
      std::unique_lock lock(mutex_);
      for (;;) {
        if (stopping_ || workers_exit_) return;
        if (id >= wanted_workers_) {
          workers_parked_.wait(lock);  // a separate condition: work_ready_.notify_one must reach a working one
        } else if (work_.empty()) {
          work_ready_.wait(lock);
        } else {
          break;
        }
      }
      work = std::move(work_.front());
      work_.pop_front();
    }
    // Busy: all of a worker's time but waiting for work — parsing into the slot, publishing it
    // and waking its consumers (Complete), failures. Write alone left out a fifth of the
    // worker's CPU on 2 cores (47% busy against 63-74% CPU in `top`, session 28), and a
    // worker that never waited for work looked unsaturated.
    const int64_t parse_start = MonotonicNs();
    const int64_t parse_cpu_start = ThreadCpuNs();
    auto count_busy = [&] {
      parse_cpu_ns_.fetch_add(static_cast<uint64_t>(ThreadCpuNs() - parse_cpu_start), std::memory_order_relaxed);
      parse_busy_ns_.fetch_add(static_cast<uint64_t>(MonotonicNs() - parse_start), std::memory_order_relaxed);
    };
    BatchWriter::Result result;
    try {
      result = writer.Write(work.job, work.slot, options_.sequencer.skip_errors, files);
    } catch (const std::bad_alloc& e) {  // its parse scratch
      ReleaseOomReserve();  // the message and the stop need memory too (budget.h)
      try {
        result.error = "parse worker " + std::to_string(id) + ": " + OutOfMemory(e);
      } catch (const std::bad_alloc&) {
        DieOutOfMemory("a parse worker, reporting it");
      }
    } catch (const std::exception& e) {
      result.error = "parse worker " + std::to_string(id) + ": " + e.what();
    }
    for (const std::string& skipped : result.skipped) NoteSkipped(skipped, /*parse_error=*/true);
    if (!result.error.empty()) {
      bool fail_now = true;
      std::string error = result.error;
      {
        std::lock_guard lock(mutex_);
        --in_flight_;
        AbandonSlotLocked(work.slot);
        if (options_.deterministic) {
          if (work.job.seq < failed_seq_) {
            failed_seq_ = work.job.seq;
            failed_error_ = result.error;
          }
          fail_now = next_publish_ == failed_seq_;  // else when the batches before it are published
          // The earliest batch's failure, not this one's: a later batch failing after it (its
          // turn already come) reported its own record, and the first Fail won (session 28,
          // TSan: `record 11` where the batch before it held the bad `record 4`).
          error = failed_error_;
        }
      }
      if (fail_now) Fail(error);
      work_done_.notify_all();
      count_busy();
      continue;  // more work until the failure stops the pipeline (batches before it may need a worker)
    }
    Complete(work.job.seq, Done{work.slot, work.job.queue, result.rows, result.record_bytes});
    count_busy();
  }
}

void Pipeline::Complete(uint64_t seq, const Done& done) {
  std::string failure;  // a worker's failure whose turn came with this batch
  // Queues published to (bit q: queue q): their consumers are woken once mutex_ is let go,
  // so that the sequencer is not kept waiting for mutex_ while a wake's system call runs.
  uint64_t published_to = 0;
  static_assert(shm::kMaxQueues <= 64);
  {
    std::lock_guard lock(mutex_);
    --in_flight_;
    if (stopping_) {
      AbandonSlotLocked(done.slot);
      return;
    }
    if (!options_.deterministic) {
      PublishLocked(done);
      published_to |= uint64_t{1} << done.queue;
    } else {
      completed_.emplace(seq, done);
      // Publish every batch whose predecessors are all published.
      for (auto it = completed_.begin(); it != completed_.end() && it->first == next_publish_;
           it = completed_.erase(it)) {
        PublishLocked(it->second);
        published_to |= uint64_t{1} << it->second.queue;
        ++next_publish_;
      }
      if (next_publish_ == failed_seq_) failure = failed_error_;
    }
  }
  for (uint32_t q = 0; published_to != 0; ++q, published_to >>= 1) {
    if (published_to & 1) shm::WakePublishWaiters(ring_, q);
  }
  if (!failure.empty()) Fail(failure);
  work_done_.notify_all();
}

void Pipeline::SetSuperblockImage(std::shared_ptr<const shm::Superblock> image) {
  std::lock_guard lock(mutex_);
  superblock_image_ = std::move(image);
}

void Pipeline::AbandonSlotLocked(uint32_t slot) {
  ring_.header(slot)->word.store(shm::SlotWord{}.Pack(), std::memory_order_release);
  slot_use_[slot] = SlotUse::kFree;
}

void Pipeline::PublishLocked(const Done& done) {
  const uint64_t seq = published_[done.queue]++;
  shm::PublishWithoutWake(ring_, done.slot, done.queue, seq);
  slot_use_[done.slot] = SlotUse::kPublished;
  slot_published_[done.slot] = {done.queue, seq};
  // Counted when published: a batch parsed but never published (the job failed or stopped
  // first) is not in status's records.
  records_.fetch_add(done.rows, std::memory_order_relaxed);
  record_bytes_.fetch_add(done.record_bytes, std::memory_order_relaxed);
  batches_.fetch_add(1, std::memory_order_relaxed);
}

size_t Pipeline::RepairRing(const std::function<std::optional<int>(uint32_t consumer_id)>& rank_of) {
  std::lock_guard lock(mutex_);
  size_t repairs = 0;
  // Logged: the first kLogBurst repairs, then one line per scan, so a process that writes in a
  // loop does not flood the log (each is counted in ring_repairs).
  std::string first_unlogged;
  size_t unlogged = 0;
  auto repaired = [&](const std::string& what) {
    ++repairs;
    if (ring_repairs_ + repairs <= kLogBurst) {
      spdlog::error("ring repaired: {} (a process that maps the shared-memory segment wrote there: a buggy or hostile "
                    "consumer; ringfeedd put it back)", what);
    } else if (unlogged++ == 0) {
      first_unlogged = what;
    }
  };
  // What a client reads when it attaches (the daemon itself never reads it back): identity,
  // geometry and schema, as written at start; while production runs, the state (kRunning)
  // and no error text (Finish marks finished_ under mutex_ before it writes the end state).
  shm::Superblock* sb = ring_.sb;
  auto restore = [&](auto& field, auto value, const char* name) {
    std::atomic_ref<std::remove_reference_t<decltype(field)>> ref(field);
    const auto was = ref.load(std::memory_order_relaxed);
    if (was == value) return;
    ref.store(value, std::memory_order_relaxed);
    repaired(std::string("the superblock's ") + name + " was " + std::to_string(was) + ", not " +
             std::to_string(value));
  };
  restore(sb->slot_count, ring_.slot_count, "slot_count");
  restore(sb->queue_count, ring_.queue_count, "queue_count");
  restore(sb->slots_offset, ring_.slots_offset, "slots_offset");
  restore(sb->slot_stride, ring_.slot_stride, "slot_stride");
  restore(sb->slot_bytes, ring_.slot_bytes, "slot_bytes");
  if (superblock_image_) {
    const auto* image = reinterpret_cast<const uint8_t*>(superblock_image_.get());
    auto* live = reinterpret_cast<uint8_t*>(sb);
    auto restore_bytes = [&](size_t begin, size_t end, const char* name) {
      if (std::memcmp(live + begin, image + begin, end - begin) == 0) return;
      std::memcpy(live + begin, image + begin, end - begin);
      repaired(std::string("the superblock's ") + name + " was overwritten");
    };
    restore_bytes(0, offsetof(shm::Superblock, state), "identity (magic, version, instance, pid, ready, job)");
    restore_bytes(offsetof(shm::Superblock, heartbeat_period_ns), offsetof(shm::Superblock, error),
                  "heartbeat period");
    restore_bytes(offsetof(shm::Superblock, segment_bytes), offsetof(shm::Superblock, queues),
                  "geometry or schema (batch size, mode, features)");
    if (!finished_) {
      const uint32_t running = static_cast<uint32_t>(shm::DaemonState::kRunning);
      if (const uint32_t state = sb->state.load(std::memory_order_acquire); state != running) {
        sb->state.store(running, std::memory_order_release);
        repaired("the superblock's state was " + std::to_string(state) + " while production runs");
      }
      restore_bytes(offsetof(shm::Superblock, error), offsetof(shm::Superblock, segment_bytes), "error text");
    }
  }
  // Slots the daemon published: their words may be kReady (waiting), kHeld (taken), kFree
  // (released); anything else is a scribble.
  for (uint32_t s = 0; s < ring_.slot_count; ++s) {
    if (slot_use_[s] != SlotUse::kPublished) continue;
    std::atomic<uint64_t>& word = ring_.header(s)->word;
    uint64_t w = word.load(std::memory_order_acquire);
    const shm::SlotWord sw = shm::SlotWord::Unpack(w);
    // A sound ring has only the words publish and claim make: kReady(queue, seq) as published,
    // kHeld with that queue and seq by an attached consumer, or kFree once released.
    const Published& p = slot_published_[s];
    const bool as_published = sw.queue == p.queue && sw.seq == (p.seq & shm::SlotWord::kSeqMask);
    std::string why;
    const std::optional<int> holder_rank =
        sw.state == shm::SlotState::kHeld ? rank_of(sw.owner) : std::optional<int>();
    if (sw.state == shm::SlotState::kHeld && !holder_rank) {
      why = "held by consumer " + std::to_string(sw.owner) + ", which is not attached";
    } else if (sw.state == shm::SlotState::kHeld && *holder_rank >= 0 && as_published &&
               static_cast<uint32_t>(*holder_rank) != sw.queue) {
      why = "held by consumer " + std::to_string(sw.owner) + " (rank " + std::to_string(*holder_rank) +
            "), but its batch is rank " + std::to_string(sw.queue) + "'s";
    } else if ((sw.state == shm::SlotState::kHeld || sw.state == shm::SlotState::kReady) && !as_published) {
      why = "marked as batch " + std::to_string(sw.seq) + " of queue " + std::to_string(sw.queue) +
            ", published as batch " + std::to_string(p.seq) + " of queue " + std::to_string(p.queue);
    } else if (sw.state != shm::SlotState::kHeld && sw.state != shm::SlotState::kReady &&
               sw.state != shm::SlotState::kFree) {
      why = "in state " + std::to_string(static_cast<unsigned>(sw.state)) + " after it was published";
    }
    // The consumer's own CAS wins a race: only the word seen is replaced.
    if (!why.empty() && word.compare_exchange_strong(w, shm::SlotWord{}.Pack(), std::memory_order_acq_rel)) {
      repaired("slot " + std::to_string(s) + " was " + why +
               "; freed (its batch, unless a consumer had taken it, is not delivered)");
      shm::FutexWakeAll(&ring_.sb->free_futex);
    }
  }
  for (uint32_t q = 0; q < ring_.queue_count; ++q) {
    shm::QueueHeader& h = ring_.queue(q);
    bool wake = false;
    // The oldest batch waiting in this queue: its slot still holds the word it was published with.
    uint64_t oldest = published_[q];
    uint32_t oldest_slot = ring_.slot_count;  // none
    for (uint32_t s = 0; s < ring_.slot_count; ++s) {
      const Published& p = slot_published_[s];
      if (slot_use_[s] != SlotUse::kPublished || p.queue != q) continue;
      const uint64_t ready = shm::SlotWord{shm::SlotState::kReady, q, 0, p.seq}.Pack();
      if (ring_.header(s)->word.load(std::memory_order_acquire) != ready) continue;
      if (p.seq < oldest) oldest = p.seq, oldest_slot = s;
      uint32_t& slot_of = h.slot_of[p.seq % shm::kMaxSlots];
      if (std::atomic_ref<uint32_t>(slot_of).load(std::memory_order_relaxed) != s) {
        std::atomic_ref<uint32_t>(slot_of).store(s, std::memory_order_release);
        repaired("queue " + std::to_string(q) + ": the slot of batch " + std::to_string(p.seq) + " was overwritten");
        wake = true;
      }
    }
    const uint64_t published = h.published.load(std::memory_order_acquire);
    if (published != published_[q]) {
      h.published.store(published_[q], std::memory_order_release);
      repaired("queue " + std::to_string(q) + ": published was " + std::to_string(published) + ", not " +
               std::to_string(published_[q]));
      wake = true;
    }
    // Consumers move `taken` forward past batches they claimed; one past a batch still waiting
    // would leave it undelivered for good. A lower `taken` costs a few skipped steps only.
    // A consumer claims a batch (its word leaves kReady) before it moves `taken` past it: the
    // oldest batch must still be waiting after `taken` was read, or it was just claimed.
    const uint64_t taken = h.taken.load(std::memory_order_acquire);
    const bool still_waiting =
        oldest_slot == ring_.slot_count ||
        ring_.header(oldest_slot)->word.load(std::memory_order_acquire) ==
            shm::SlotWord{shm::SlotState::kReady, q, 0, oldest}.Pack();
    if (taken > oldest && still_waiting) {
      h.taken.store(oldest, std::memory_order_release);
      repaired("queue " + std::to_string(q) + ": taken was " + std::to_string(taken) + ", past batch " +
               std::to_string(oldest) + (oldest < published_[q] ? " (waiting)" : " (the next to publish)"));
      wake = true;
    }
    // Far behind: on a sound queue `taken` lags `published` by at most the slots plus one claim
    // not yet counted; consumers refuse to walk a larger gap (shm::TryClaim). Every batch below
    // the oldest waiting one was claimed, so `taken` may jump there (a claimant's own CAS on
    // the old value then just fails).
    uint64_t behind = taken;
    if (taken < oldest && published_[q] - taken > uint64_t{ring_.slot_count} + shm::kMaxConsumers &&
        h.taken.compare_exchange_strong(behind, oldest, std::memory_order_acq_rel)) {
      repaired("queue " + std::to_string(q) + ": taken was " + std::to_string(taken) + ", " +
               std::to_string(published_[q] - taken) + " batches behind what was published");
      wake = true;
    }
    if (wake) {
      h.publish_futex.fetch_add(1, std::memory_order_seq_cst);
      shm::FutexWakeAll(&h.publish_futex);
    }
  }
  if (unlogged > 0) {
    spdlog::error("ring repaired: {} and {} more this second ({} in all; a process that maps the shared-memory "
                  "segment keeps writing there: find it among the consumers of ringfeedctl status)",
                  first_unlogged, unlogged - 1, ring_repairs_ + repairs);
  }
  ring_repairs_ += repairs;
  return repairs;
}

void Pipeline::Fail(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    last_error_ = message;
  }
  Finish(PipelineEnd::kFailed, message);
  RequestStop();
}

void Pipeline::Finish(PipelineEnd end, const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    end_ = end;
    end_message_ = message;
    ended_at_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    ended_.store(true, std::memory_order_release);
  }
  // SetState writes the message, then the state, then closes every queue.
  const shm::DaemonState state = end == PipelineEnd::kEndOfData ? shm::DaemonState::kEndOfData
                                 : end == PipelineEnd::kFailed  ? shm::DaemonState::kFailed
                                                                : shm::DaemonState::kStopped;
  shm::SetState(ring_, state, message);
  if (on_end_) on_end_(end, message);
}

PipelineStats Pipeline::Snapshot() const {
  PipelineStats s;
  s.epoch = sequencer_->epoch();
  s.files_done_in_epoch = sequencer_->files_done_in_epoch();
  s.batches_in_epoch = sequencer_->batches_in_epoch();
  s.records = records_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  s.record_bytes = record_bytes_.load(std::memory_order_relaxed);
  s.read_errors_skipped = read_errors_skipped_.load(std::memory_order_relaxed);
  s.parse_errors_skipped = parse_errors_skipped_.load(std::memory_order_relaxed);
  s.files_ended_early = files_ended_early_.load(std::memory_order_relaxed);
  s.batches_dropped = sequencer_->batches_dropped();
  s.shuffle_records = sequencer_->shuffle_records();
  s.shuffle_bytes = sequencer_->shuffle_bytes();
  s.read_ahead_bytes = read_ahead_->buffered_bytes();
  s.readers = read_ahead_->threads();
  s.stream_buffer_bytes = read_ahead_->stream_buffer_bytes();
  s.reads_per_file = read_ahead_->reads_per_file();
  s.open_files = read_ahead_->open_streams();
  s.files_without_queued_reads = read_ahead_->unqueued_files();
  s.hedged_reads = ReadQueue::TotalHedgesSent();
  s.hedged_reads_won = ReadQueue::TotalHedgesWon();
  s.hedged_reads_paused = ReadQueue::HedgesPaused();
  s.read_round_trip_ns = ReadQueue::MeanRoundTripNs();
  s.read_busy_ns = read_ahead_->busy_ns();
  s.read_cpu_ns = read_ahead_->cpu_ns();
  s.read_wait_ns = read_ahead_->consumer_wait_ns();
  s.parse_busy_ns = parse_busy_ns_.load(std::memory_order_relaxed);
  s.parse_cpu_ns = parse_cpu_ns_.load(std::memory_order_relaxed);
  s.prefetch_wait_ns = prefetch_wait_ns_.load(std::memory_order_relaxed);
  s.sequencer_cpu_ns = sequencer_cpu_ns_.load(std::memory_order_relaxed);
  if (sequencer_clock_live_.load(std::memory_order_acquire)) {
    timespec ts{};
    // Fails (EINVAL) once the thread has ended: then the value it kept, read again.
    if (::clock_gettime(sequencer_clock_.load(std::memory_order_relaxed), &ts) == 0) {
      s.sequencer_cpu_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
    } else {
      s.sequencer_cpu_ns = sequencer_cpu_ns_.load(std::memory_order_relaxed);
    }
  }
  // A wait in progress counts up to now: one that spans the tuner's interval (a ring full of
  // batches nobody takes) would otherwise count as no wait at all until it ends.
  const int64_t waiting_since = slot_wait_since_.load(std::memory_order_relaxed);
  s.slot_wait_ns = slot_wait_ns_.load(std::memory_order_relaxed) +
                   (waiting_since != 0 ? static_cast<uint64_t>(std::max<int64_t>(0, MonotonicNs() - waiting_since)) : 0);
  std::lock_guard lock(mutex_);
  s.ready_per_queue.assign(ring_.queue_count, 0);
  for (uint32_t i = 0; i < ring_.slot_count; ++i) {
    switch (shm::SlotWord::Unpack(ring_.header(i)->word.load(std::memory_order_relaxed)).state) {
      case shm::SlotState::kFree: ++s.slots_free; break;
      case shm::SlotState::kFilling: ++s.slots_filling; break;
      case shm::SlotState::kReady:
        ++s.slots_ready;
        if (slot_published_[i].queue < s.ready_per_queue.size()) ++s.ready_per_queue[slot_published_[i].queue];
        break;
      case shm::SlotState::kHeld: ++s.slots_held; break;
    }
  }
  s.ring_repairs = ring_repairs_;
  s.workers = wanted_workers_;
  s.prefetch = prefetch_;
  s.last_error = last_error_;
  s.end = end_;
  s.end_message = end_message_;
  return s;
}

}  // namespace ringfeed
