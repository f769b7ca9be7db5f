#include "daemon/read_ahead.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/budget.h"
#include "daemon/thread_clock.h"
#include "daemon/thread_name.h"

namespace ringfeed {
namespace {
// Records read per turn before a thread lets go of a stream (so one thread serves several
// streams fairly), unless the stream's buffer fills first.
constexpr size_t kRecordsPerTurn = 256;

// Where a read-ahead turn has the reader put each payload (TFRecordReader::NextInto): records up
// to kOwnAllocationBytes at the end of the stream's chunk, larger ones (or all, without chunks)
// in their own allocation, which the reader fills straight from the file. Take() hands the
// memory of a record that was read to its OwnedRecord; memory of a record that failed (data
// CRC) is dropped or overwritten by the next.
class TurnAllocator final : public RecordAllocator {
 public:
  TurnAllocator(ChunkCursor* chunk, bool chunks) : chunk_(chunk), chunks_(chunks) {}

  // Call before each NextInto.
  void NextRecord() { own_.Reset(); }

  uint8_t* Allocate(uint64_t length) override {
    if (length > ReadAhead::kOwnAllocationBytes || !chunks_) {
      own_ = RecordStorage::Allocate(length);
      return own_.bytes();
    }
    return chunk_->Room(length);
  }

  // The storage of the record NextInto just returned (`size` bytes).
  void Take(uint64_t size, OwnedRecord* record) {
    if (own_) {
      record->storage = std::move(own_);
      record->at = 0;
    } else {
      record->storage = chunk_->Claim(size, &record->at);
    }
  }

 private:
  ChunkCursor* const chunk_;
  const bool chunks_;
  RecordStorage::Ref own_;  // the current record's own allocation, if it has one
};

// The item a record that failed ReadAhead's record check becomes (its bytes are dropped). It
// still counts against the stream's buffer, as record.size (the record's size, at least
// kInvalidRecordChargeBytes for the error and its message): a file of nothing but bad records
// must not be read ahead without limit.
constexpr uint64_t kInvalidRecordChargeBytes = 512;

// What an item counts against its stream's buffer: a record's payload, but at least the item
// itself, so that empty records (an Example with no features serializes to 0 bytes) are not
// read ahead without limit (4 million of them once took 80 MiB past a 40 MiB budget); a failed
// record's charge (above); 0 for read errors and kEnd.
constexpr uint64_t kRecordChargeMinBytes = sizeof(StreamItem);
uint64_t Charge(const StreamItem& item) {
  return item.kind == StreamItem::Kind::kRecord ? std::max(item.record.size, kRecordChargeMinBytes) : item.record.size;
}
StreamItem InvalidRecord(const std::string& path, Compression compression, const OwnedRecord& record,
                         const std::string& why) {
  StreamItem item;
  item.kind = StreamItem::Kind::kError;
  item.record.size = std::max(record.size, kInvalidRecordChargeBytes);
  item.error = std::make_unique<ReadError>();
  ReadError& error = *item.error;
  error.kind = ReadErrorKind::kInvalidExample;
  error.file = path;
  error.record_index = record.record_index;
  error.offset = record.offset;
  error.recoverable = true;
  error.message = RecordPlace(path, record.record_index, record.offset, compression) + ": " + why;
  return item;
}
}  // namespace

uint8_t* ChunkCursor::Room(uint64_t length) {
  if (!chunk_ || chunk_.capacity() - used_ < length || unclaimed_ == 0) {
    Retire();
    chunk_ = RecordStorage::AllocateReserved(ReadAhead::kChunkBytes, kReservedRefs);
    unclaimed_ = kReservedRefs;
  }
  return chunk_.bytes() + used_;
}

RecordStorage::Ref ChunkCursor::Claim(uint64_t size, uint32_t* at) {
  *at = static_cast<uint32_t>(used_);
  used_ += size;
  --unclaimed_;
  return chunk_.ClaimReserved();
}

void ChunkCursor::Retire() {
  if (chunk_) chunk_.Unreserve(unclaimed_);
  chunk_.Reset();
  used_ = 0;
  unclaimed_ = 0;
}

OwnedRecord OwnedRecord::Copy(std::span<const uint8_t> bytes, uint32_t file_index, uint64_t record_index,
                              uint64_t offset) {
  OwnedRecord r;
  r.storage = RecordStorage::Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(r.storage.bytes(), bytes.data(), bytes.size());
  r.size = bytes.size();
  r.file_index = file_index;
  r.record_index = record_index;
  r.offset = offset;
  return r;
}

OwnedRecord OwnedRecord::Unshared() && {
  if (!storage || storage.capacity() == size) return std::move(*this);
  return Copy(bytes(), file_index, record_index, offset);
}

StreamItem FileStream::Next() {
  if (local_next_ == local_.size()) {
    if (ended_) return {};  // kEnd again
    local_.clear();
    local_next_ = 0;
    std::unique_lock lock(owner_->mutex_);
    if (!ReadyLocked()) {
      const int64_t start = MonotonicNs();
      ready_.wait(lock, [&] { return ReadyLocked(); });
      owner_->consumer_wait_ns_.fetch_add(static_cast<uint64_t>(MonotonicNs() - start), std::memory_order_relaxed);
    }
    if (items_.empty() && out_of_memory_ && !owner_->stopping_) {
      // The reader's error, made here, now that its turn's memory is back (a bad_alloc here
      // is the consumer's: the sequencer's handler says it). Once made, local_ hands out the
      // error, then kEnd, and ended_ keeps it from being made again.
      lock.unlock();
      ReadAhead::AppendOutOfMemory(*this, std::bad_alloc(), &local_);
      return std::move(local_[local_next_++]);
    }
    if (items_.empty()) return {};  // stopping: kEnd
    local_.swap(items_);
    uint64_t bytes = 0;
    for (const StreamItem& item : local_) bytes += Charge(item);
    buffered_bytes_ -= bytes;
    owner_->buffered_bytes_ -= bytes;
    const bool read_on = !finished_ && !busy_;  // room again
    lock.unlock();
    // After the unlock: a reader woken while the lock is held would only wait for it again
    // (a second wake-up, which costs ~25 us of CPU on some virtual machines).
    if (read_on) owner_->work_.notify_one();
  }
  StreamItem item = std::move(local_[local_next_++]);
  if (item.kind == StreamItem::Kind::kEnd) ended_ = true;
  return item;
}

bool FileStream::ReadyLocked() const { return !items_.empty() || owner_->stopping_ || out_of_memory_; }

bool FileStream::Ready() {
  if (local_next_ < local_.size() || ended_) return true;
  std::lock_guard lock(owner_->mutex_);
  return ReadyLocked();
}

void ReadAhead::WaitAny(const std::vector<std::shared_ptr<FileStream>>& streams) {
  const auto ready = [&] {
    if (stopping_) return true;
    for (const auto& s : streams) {
      if (s && (s->local_next_ < s->local_.size() || s->ended_ || s->ReadyLocked())) return true;
    }
    return false;
  };
  std::unique_lock lock(mutex_);
  if (ready()) return;
  const int64_t start = MonotonicNs();
  ++any_waiters_;
  any_ready_.wait(lock, ready);
  --any_waiters_;
  consumer_wait_ns_.fetch_add(static_cast<uint64_t>(MonotonicNs() - start), std::memory_order_relaxed);
}

ReadAhead::ReadAhead(ReaderOptions options, size_t threads, uint64_t stream_buffer_bytes, bool chunks)
    : options_(options),
      chunks_(chunks),
      reads_per_file_(std::max<size_t>(options.reads_in_flight, 1)),
      stream_buffer_bytes_(stream_buffer_bytes) {
  try {
    SetThreads(threads);
  } catch (...) {
    // A thread that could not start (ulimit -u, a container's pids limit): the ones that did
    // are stopped and joined before the error leaves (a joinable std::thread destroyed in the
    // unwinding would end the process in std::terminate, with nothing said and nothing cleaned up).
    Stop();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

ReadAhead::~ReadAhead() {
  Stop();
  for (std::thread& t : threads_) t.join();
  streams_.clear();  // their destructors (FileStream: EndIo) need every member still alive
}

void ReadAhead::Stop() {
  stop_requested_ = true;  // a turn under way ends after its current record
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& s : streams_) s->ready_.notify_all();
  }
  work_.notify_all();
  any_ready_.notify_all();
}

std::shared_ptr<FileStream> ReadAhead::Open(uint32_t file_index, const std::string& path) {
  ReaderOptions options = options_;
  {
    std::lock_guard lock(mutex_);
    options.reads_in_flight = reads_per_file_;
  }
  if (options.reads_in_flight > 1) options.buffer_bytes = std::min(options.buffer_bytes, options.read_block_bytes);
  std::shared_ptr<FileStream> stream;
  const uint64_t io = BeginIo(path, "opening");
  try {
    stream.reset(new FileStream(this, file_index, path, options));  // opens the file
  } catch (...) {
    EndIo(io);
    throw;
  }
  EndIo(io);
  std::lock_guard lock(mutex_);
  streams_.push_back(stream);
  work_.notify_one();
  return stream;
}

void ReadAhead::Close(const std::shared_ptr<FileStream>& stream) {
  std::lock_guard lock(mutex_);
  stream->closed_ = true;
  for (const StreamItem& item : stream->items_) buffered_bytes_ -= Charge(item);
  stream->items_.clear();
  stream->buffered_bytes_ = 0;
  std::erase(streams_, stream);
}

void ReadAhead::SetThreads(size_t threads) {
  if (threads < 1) threads = 1;
  std::vector<std::thread> retired;
  {
    std::lock_guard lock(mutex_);
    wanted_threads_ = threads;
    while (threads_.size() < threads) {
      const size_t id = threads_.size();
      try {
        threads_.emplace_back([this, id] { Run(id); });
      } catch (...) {
        wanted_threads_ = threads_.size();  // the threads that run; the caller is told why no more
        throw;
      }
    }
    while (threads_.size() > threads) {
      retired.push_back(std::move(threads_.back()));
      threads_.pop_back();
    }
  }
  work_.notify_all();
  for (std::thread& t : retired) t.join();  // each finishes its current turn first
}

void ReadAhead::SetReadsPerFile(size_t reads) {
  std::lock_guard lock(mutex_);
  reads_per_file_ = std::max<size_t>(reads, 1);
}

void ReadAhead::SetQueuedStreams(size_t streams) {
  std::lock_guard lock(mutex_);
  queued_streams_ = streams;
}

size_t ReadAhead::reads_per_file() const {
  std::lock_guard lock(mutex_);
  return reads_per_file_;
}

size_t ReadAhead::threads() const {
  std::lock_guard lock(mutex_);
  return wanted_threads_;
}

void ReadAhead::SetStreamBufferBytes(uint64_t bytes) {
  {
    std::lock_guard lock(mutex_);
    stream_buffer_bytes_ = std::max<uint64_t>(1, bytes);
  }
  work_.notify_all();  // more room: streams below the new limit can be read on
}

uint64_t ReadAhead::stream_buffer_bytes() const {
  std::lock_guard lock(mutex_);
  return stream_buffer_bytes_;
}

uint64_t ReadAhead::buffered_bytes() const {
  std::lock_guard lock(mutex_);
  return buffered_bytes_;
}

uint64_t ReadAhead::records_read() const {
  std::lock_guard lock(mutex_);
  return records_read_;
}

uint64_t ReadAhead::bytes_read() const {
  std::lock_guard lock(mutex_);
  return bytes_read_;
}

size_t ReadAhead::open_streams() const {
  std::lock_guard lock(mutex_);
  return streams_.size();
}

void ReadAhead::WarnOnCompressed() {
  std::lock_guard lock(mutex_);
  warn_on_compressed_ = true;
}

Compression ReadAhead::CompressionOf(uint32_t file_index) const {
  std::lock_guard lock(mutex_);
  const auto it = compressed_files_.find(file_index);
  return it == compressed_files_.end() ? Compression::kNone : it->second;
}

std::vector<std::string> ReadAhead::IoInProgress(int64_t at_least_ns) const {
  const int64_t now = MonotonicNs();
  std::vector<std::string> calls;
  std::lock_guard lock(io_mutex_);
  for (const IoCall& c : io_calls_) {
    if (now - c.since_ns < at_least_ns) continue;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", static_cast<double>(now - c.since_ns) / 1e9);
    calls.push_back(std::string(c.what) + " " + c.path + " (for " + seconds + " s)");
  }
  return calls;
}

uint64_t ReadAhead::BeginIo(const std::string& path, const char* what) {
  IoCall call{0, path, MonotonicNs(), what};  // the copy outside the lock
  std::lock_guard lock(io_mutex_);
  call.id = next_io_id_++;
  io_calls_.push_back(std::move(call));
  return io_calls_.back().id;
}

void ReadAhead::EndIo(uint64_t id) {
  std::lock_guard lock(io_mutex_);
  std::erase_if(io_calls_, [&](const IoCall& c) { return c.id == id; });
}

FileStream::~FileStream() {
  close_call_.owner = owner_;
  close_call_.id = owner_->BeginIo(path_, "closing");
}

FileStream::CloseCall::~CloseCall() {
  if (owner != nullptr) owner->EndIo(id);
}

void ReadAhead::NoteUnqueued(const std::string& path, const std::string& why, size_t reads) {
  const uint64_t files = unqueued_files_.fetch_add(1, std::memory_order_relaxed) + 1;
  // Once per minute, as Pipeline::NoteSkipped limits its lines: io_uring that fails for one file
  // (out of descriptors or locked memory) tends to fail for the next ones too.
  const int64_t now = MonotonicNs();
  int64_t next = unqueued_warning_next_ns_.load(std::memory_order_relaxed);
  if (now < next || !unqueued_warning_next_ns_.compare_exchange_strong(next, now + kUnqueuedWarningEveryNs)) return;
  // What to look at depends on why: descriptors, locked memory, or io_uring not permitted.
  const auto has = [&](int err) { return why.find(std::strerror(err)) != std::string::npos; };
  const std::string hint =
      has(EMFILE) || has(ENFILE) ? "the open-file limit is used up (LimitNOFILE; docs/operations.md, Open-file limit)"
      : has(ENOMEM)              ? "locked memory (LimitMEMLOCK, before Linux 5.12) or memory is used up"
      : has(EPERM) || has(EACCES)
          ? "io_uring is not permitted for this process now (sysctl kernel.io_uring_disabled, a seccomp profile or "
            "a container policy)"
          : "see the reason";
  spdlog::warn("{}: its io_uring queue could not be set up ({}), so it is read one read at a time instead of {} in "
               "flight (slow on storage with a round trip per read): {} [{} file(s) so far, status "
               "pipeline.files_without_queued_reads; at most one such line a minute]",
               path, why, reads, hint, files);
}

void ReadAhead::AllowancesLocked() {
  const size_t interleaved = std::min(queued_streams_, streams_.size());
  spares_.clear();
  for (size_t i = 0; i < interleaved; ++i) {
    streams_[i]->queue_allowance_wanted_ = SIZE_MAX;
    if (streams_[i]->queue_spare_ > 0) spares_.push_back(streams_[i]->queue_spare_);
  }
  // The file nearest its end (the most spare blocks) is the first to give its place to the
  // first file opened ahead: they pair in that order (with files of one size all end together,
  // and each file opened ahead then takes up one ending file's blocks, not the first all of them).
  std::sort(spares_.begin(), spares_.end(), std::greater<>());
  const size_t depth = reads_per_file_ + 1;  // a queue's blocks: the reads in flight and the one taken
  size_t j = 0;
  for (size_t i = interleaved; i < streams_.size(); ++i) {
    FileStream& s = *streams_[i];
    // A file that cannot take more (no queue, or its queue has asked for its whole file) is
    // passed over: the blocks go to the next one opened ahead.
    s.queue_allowance_wanted_ = 1;
    if (s.queue_can_grow_ && j < spares_.size()) s.queue_allowance_wanted_ += std::min(spares_[j++], depth - 1);
  }
}

std::shared_ptr<FileStream> ReadAhead::PickLocked(size_t* index) {
  const bool queued = reads_per_file_ > 1;
  if (queued) AllowancesLocked();
  for (size_t i = 0; i < streams_.size(); ++i) {
    const auto& s = streams_[i];
    if (s->busy_ || s->finished_ || s->closed_) continue;
    if (s->buffered_bytes_ < stream_buffer_bytes_ || (queued && s->queue_allowance_wanted_ > s->queue_allowance_)) {
      *index = i;
      return s;
    }
  }
  return nullptr;
}

// The items that end `stream` on running out of memory: the error (naming the file and the
// record reached) and the end. Allocates (throws std::bad_alloc): callers free what they can
// (ReleaseOomReserve) first.
void ReadAhead::AppendOutOfMemory(const FileStream& stream, const std::bad_alloc& e, std::vector<StreamItem>* items) {
  StreamItem failed;
  failed.kind = StreamItem::Kind::kError;
  failed.error = std::make_unique<ReadError>();
  ReadError& oom = *failed.error;
  oom.kind = ReadErrorKind::kOutOfMemory;
  oom.file = stream.path_;
  oom.record_index = stream.reader_.records_read();
  oom.offset = stream.reader_.offset();
  oom.message = RecordPlace(stream.path_, oom.record_index, oom.offset, stream.reader_.compression()) +
                ": reading it ahead: " + OutOfMemory(e);
  items->push_back(std::move(failed));
  StreamItem end;
  end.kind = StreamItem::Kind::kEnd;
  items->push_back(std::move(end));
}

void ReadAhead::Run(size_t id) {
  NameThread("rf-read", id);
  std::unique_lock lock(mutex_);
  for (;;) {
    std::shared_ptr<FileStream> stream;
    size_t index = 0;
    work_.wait(lock, [&] { return stopping_ || id >= wanted_threads_ || (stream = PickLocked(&index)) != nullptr; });
    if (stopping_ || id >= wanted_threads_) return;
    stream->busy_ = true;
    threads_in_turn_.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t io = BeginIo(stream->path_, "a read of");
    const uint64_t room = stream_buffer_bytes_ - std::min(stream_buffer_bytes_, stream->buffered_bytes_);
    // Streams opened ahead of their turn hold one block of their queue at a time, and more as
    // the interleave's streams need fewer (AllowancesLocked): a full queue there would only
    // fill up and wait. The interleave's streams are about the first open ones (the sequencer
    // takes them in Open order; a stream read to its end leaves streams_ while its last records
    // still wait, so the first file opened ahead may get its whole queue a little early).
    const size_t reads_per_file = reads_per_file_;
    const size_t allowance = stream->queue_allowance_wanted_;
    lock.unlock();
    const int64_t wall_start = MonotonicNs();
    const int64_t cpu_start = ThreadCpuNs();

    // Read a turn's worth outside the lock, then hand the items over in one go. Records up to
    // kOwnAllocationBytes go into the stream's chunk, larger ones into their own allocation.
    std::vector<StreamItem> items = std::move(stream->spare_);
    items.clear();
    uint64_t bytes = 0;         // charged against the buffers (payload; a dropped record's charge)
    uint64_t records = 0, payload = 0;  // read from the file, checked or not
    bool finished = false;
    bool oom_unqueued = false;  // out of memory, and its error could not be queued either
    TurnAllocator allocator(&stream->chunk_, chunks_);
    ReadError error;
    std::string why;  // a failed record check's reason
    // Items are built here and then moved into `items` whole: its memory was last written by
    // the consumer's core, and a store-only move does not wait for each line to come back
    // (assigning field by field read the old values first: the reader's top cost).
    try {
      // The knobs first (their blocks are allocations too: running out of memory there ends the
      // stream with the error, below). A queue deepened in place keeps what it read; a new one
      // (reads per file from or to 1) starts at the old allowance and is raised after.
      if (stream->reads_per_file_ != reads_per_file) {
        stream->reader_.SetReadsInFlight(reads_per_file);
        stream->reads_per_file_ = reads_per_file;
      }
      if (reads_per_file > 1 && stream->queue_allowance_ != allowance) {
        const size_t before = stream->reader_.queue_blocks();
        stream->reader_.SetQueueAllowance(allowance);
        stream->queue_allowance_ = allowance;
        const size_t after = stream->reader_.queue_blocks();
        // A file opened ahead taking up blocks (those a joining file tops up are its own).
        if (allowance != SIZE_MAX && after > before) {
          queue_blocks_handed_on_.fetch_add(after - before, std::memory_order_relaxed);
        }
      }
      // A stream with a full buffer was picked only to raise its queue's allowance (above).
      while (room > 0 && items.size() < kRecordsPerTurn && (items.empty() || bytes < room) &&
             !stop_requested_.load(std::memory_order_relaxed)) {
        Record record;
        StreamItem item;
        allocator.NextRecord();
        const auto status = stream->reader_.NextInto(allocator, &record, &error);
        if (status == TFRecordReader::Status::kEnd) {
          item.kind = StreamItem::Kind::kEnd;
          items.push_back(std::move(item));
          finished = true;
          break;
        }
        if (status == TFRecordReader::Status::kError) {
          item.kind = StreamItem::Kind::kError;
          item.error = std::make_unique<ReadError>(std::move(error));
          items.push_back(std::move(item));
          continue;  // a non-recoverable error: the next Next() is kEnd
        }
        const uint64_t size = record.data.size();
        item.kind = StreamItem::Kind::kRecord;
        allocator.Take(size, &item.record);
        item.record.size = size;
        item.record.file_index = stream->file_index_;
        item.record.record_index = record.index;
        item.record.offset = record.offset;
        ++records;
        payload += size;
        if (check_ && !check_(item.record, &why)) {
          StreamItem invalid = InvalidRecord(stream->path_, stream->reader_.compression(), item.record, why);
          bytes += invalid.record.size;
          items.push_back(std::move(invalid));
          continue;
        }
        bytes += Charge(item);
        items.push_back(std::move(item));
      }
    } catch (const std::bad_alloc& e) {
      // A chunk, a large record's own allocation, the turn's items: the machine's limit, not
      // the file's, so the stream ends with an error that on_error: skip does not pass over.
      ReleaseOomReserve();  // the error item below needs memory too (budget.h)
      const size_t read = items.size();
      try {
        AppendOutOfMemory(*stream, e, &items);
      } catch (const std::bad_alloc&) {
        // Not even that (another reader took the reserve first): the items read go on, and the
        // stream's consumer makes the error after them (FileStream::Next).
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(read), items.end());
        oom_unqueued = true;
      }
      finished = true;
    }

    // The reader sets its queue up in its first read and in SetReadsInFlight (above).
    if (stream->reader_.queued_reads_unavailable().empty()) {
      stream->unqueued_noted_ = false;
    } else if (!stream->unqueued_noted_) {
      stream->unqueued_noted_ = true;
      NoteUnqueued(stream->path_, stream->reader_.queued_reads_unavailable(), reads_per_file);
    }
    if (finished) stream->chunk_.Retire();  // no more records: only they keep it alive now
    cpu_ns_.fetch_add(static_cast<uint64_t>(ThreadCpuNs() - cpu_start), std::memory_order_relaxed);
    busy_ns_.fetch_add(static_cast<uint64_t>(MonotonicNs() - wall_start), std::memory_order_relaxed);
    const Compression compression = stream->reader_.compression();
    const bool all_requested = stream->reader_.queue_all_requested();
    const size_t queue_blocks = stream->reader_.queue_blocks();
    // (A queue made shallower holds more than its depth until they are taken: no spare then.)
    const size_t depth = stream->reader_.reads_in_flight() + 1;
    const size_t queue_spare = all_requested && queue_blocks < depth ? depth - queue_blocks : 0;
    lock.lock();
    stream->busy_ = false;
    stream->queue_spare_ = queue_spare;
    stream->queue_can_grow_ = queue_blocks > 0 && !all_requested;
    const bool delivered = !stream->closed_;
    // What may allocate under the lock goes first, so that running out of memory here too
    // ends the stream with the error (a bad_alloc leaving the thread ends the process).
    try {
      if (!stream->compression_noted_ && (compression == Compression::kGzip || compression == Compression::kZlib)) {
        compressed_files_[stream->file_index_] = compression;
        stream->compression_noted_ = true;
        if (warn_on_compressed_) {
          warn_on_compressed_ = false;
          spdlog::warn("{} is compressed ({}) though every file was plain when the job started (source.compression: "
                       "auto): the memory plan counted no decompression buffers, so each compressed file open takes "
                       "{} of input buffer and {} of inflate state from the safety margin (a restart plans for "
                       "them where its start-up sample reaches a compressed file)",
                       stream->path_, CompressionName(compression), FormatBytes(options_.buffer_bytes),
                       FormatBytes(kInflateStateBytes));
        }
      }
      // Grown geometrically: a reserve to the exact size every turn moved the whole vector each
      // time while the consumer did not take it.
      const size_t needed = stream->items_.size() + items.size();
      if (delivered && !stream->items_.empty() && stream->items_.capacity() < needed) {
        stream->items_.reserve(std::max(needed, 2 * stream->items_.capacity()));
      }
    } catch (const std::bad_alloc& e) {
      // This turn's records are dropped for the error: the job fails on it (on_error: skip
      // does not pass over the machine's limit), so nothing after it is delivered anyway.
      ReleaseOomReserve();
      items.clear();  // their chunks' memory back first
      bytes = records = payload = 0;
      try {
        AppendOutOfMemory(*stream, e, &items);
        if (delivered) stream->items_.reserve(stream->items_.size() + items.size());
      } catch (const std::bad_alloc&) {
        // Not even that (another reader took the reserve first): the stream ends marked, and
        // its consumer makes the error when it gets there. Dying here left the segment, socket
        // and lock behind (1 of 4 runs of the 52 MiB test, session 40).
        items.clear();
        oom_unqueued = true;
      }
      finished = true;
    }
    EndIo(io);
    stream->finished_ = finished;
    if (oom_unqueued) stream->out_of_memory_ = true;
    if (delivered) {
      if (stream->items_.empty()) {
        stream->items_.swap(items);  // the common case: the consumer took everything before
      } else {
        for (StreamItem& item : items) stream->items_.push_back(std::move(item));  // reserved above
      }
      items.clear();
      stream->spare_ = std::move(items);  // an empty vector with capacity, for the next turn
      stream->buffered_bytes_ += bytes;
      buffered_bytes_ += bytes;
      records_read_ += records;
      bytes_read_ += payload;
    }
    if (finished || stream->closed_) std::erase(streams_, stream);
    const bool wake_any = delivered && any_waiters_ > 0;
    lock.unlock();
    // The sequencer is woken after the unlock (as in FileStream::Next); `stream` keeps ready_ alive.
    if (delivered) stream->ready_.notify_all();
    if (wake_any) any_ready_.notify_all();
    // This may be the last reference (the consumer closed the stream): closing the file can
    // wait (its queued reads, close() on a network mount), so not under the lock.
    stream.reset();
    threads_in_turn_.fetch_sub(1, std::memory_order_acq_rel);
    lock.lock();
  }
}

}  // namespace ringfeed
