// ReadAhead: reads TFRecord files ahead of the sequencer on a pool of I/O threads, so that
// reading and inflating (GZIP/ZLIB) overlap with everything else and several files are read
// in parallel (tf.data's interleave with parallel reads). It never changes the order: each
// FileStream hands out its file's records in file order, and the sequencer alone decides which
// stream it takes the next record from.
//
// Memory: each open stream buffers at most `stream_buffer_bytes` of record payload (a record
// counted as at least its item's own size, so empty records are bounded too; plus one record,
// however large, so a record bigger than the buffer still moves), and the pool never
// has more open streams than the sequencer asked for. Records of up to kOwnAllocationBytes
// are copied out of the reader's window into chunks of kChunkBytes (one allocation per chunk,
// not per record: the per-record malloc and cross-thread free was the largest per-record cost
// of the daemon). A stream fills its chunk across read-ahead turns until a record does not
// fit, so every chunk has the same size (chunks sized to each turn fragmented the heap:
// private RSS crept up 150-500 KiB/min at 256 KiB of read-ahead per file). A chunk lives
// until its last record is gone, so beyond the records it holds a stream keeps at most
// kChunkOverheadBytes (2 x kChunkBytes) more: the unused tail of the chunk being filled and
// the records already consumed from its oldest one.
// Larger records get their own allocation, which the reader fills straight from the file
// (TFRecordReader::NextInto: no copy out of its window for them).
// A file of the interleave read with queued reads (SetReadsPerFile > 1) also holds its
// ReadQueue's blocks, at most ReadQueue::MostBytes (reads_per_file + 1 and the spare blocks of
// hedged reads, of ReaderOptions::read_block_bytes each), which the tuner counts
// in the read-ahead budget; files opened while queues are on get a window of at most 16 KiB
// (TFRecordReader::kQueuedWindowBytes) instead of ReaderOptions::buffer_bytes.
// With queued reads, a file opened ahead of its turn holds one block of its queue at a time, and
// more as the interleave's files near their ends: a file whose queue has asked for its last
// block frees a block each time one is taken, and the first files opened ahead take them up
// (the most blocks a stream holds, ReadQueue::SetAllowance), so that a file's first records are
// there when its turn comes instead of a round trip later, with no more blocks held in all.
// Threads: `threads` I/O threads, changeable at run time with SetThreads (the autotuner's knob,
// as are the per-stream buffer, SetStreamBufferBytes, and the reads per file, SetReadsPerFile);
// a thread picks the earliest-opened stream that is below its buffer limit and not being read
// by another thread, reads up to a turn's worth of records, and moves on.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "format/tfrecord_reader.h"

namespace ringfeed {

// A block of record payload with a reference count in front of it (16 bytes): a read-ahead
// chunk shared by consecutive records of one file (ChunkCursor), or one record's own
// allocation. Not a shared_ptr: a chunk's references are counted in advance when it is
// allocated (AllocateReserved) and handed out without a locked instruction per record. Thread-safety: one Ref is used by one thread at a
// time; Refs to the same block may be released on different threads. Allocate throws
// std::bad_alloc like new.
class RecordStorage {
 public:
  // One reference (move-only); the last one frees the block.
  class Ref {
   public:
    Ref() = default;
    Ref(Ref&& other) noexcept : block_(std::exchange(other.block_, nullptr)) {}
    Ref& operator=(Ref&& other) noexcept {
      if (this != &other) {
        Reset();
        block_ = std::exchange(other.block_, nullptr);
      }
      return *this;
    }
    ~Ref() { Reset(); }
    explicit operator bool() const { return block_ != nullptr; }
    uint8_t* bytes() const { return reinterpret_cast<uint8_t*>(block_) + sizeof(RecordStorage); }
    uint64_t capacity() const { return block_->capacity_; }
    // One of the references reserved by AllocateReserved, as a Ref of its own: no atomic
    // read-modify-write (the count already holds it). The caller tracks how many are left.
    Ref ClaimReserved() const { return Ref(block_); }
    // Gives back `n` reserved references never claimed. Never frees: this Ref still counts.
    void Unreserve(uint32_t n) {
      if (n != 0) block_->refs_.fetch_sub(n, std::memory_order_acq_rel);
    }
    void Reset() {
      if (block_ != nullptr && block_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        ::operator delete(block_);
      }
      block_ = nullptr;
    }

   private:
    friend class RecordStorage;
    explicit Ref(RecordStorage* block) : block_(block) {}
    RecordStorage* block_ = nullptr;
  };
  // A block of `capacity` bytes (contents uninitialized), one reference.
  static Ref Allocate(uint64_t capacity) { return AllocateReserved(capacity, 0); }
  // The same with `reserved` more references counted in advance, for ClaimReserved: a chunk
  // hands out one per record without a locked instruction each.
  static Ref AllocateReserved(uint64_t capacity, uint32_t reserved) {
    void* memory = ::operator new(sizeof(RecordStorage) + (capacity ? capacity : 1));
    return Ref(new (memory) RecordStorage(capacity, 1 + reserved));
  }

 private:
  RecordStorage(uint64_t capacity, uint32_t refs) : refs_(refs), capacity_(capacity) {}
  std::atomic<uint32_t> refs_;
  uint64_t capacity_;
};
static_assert(sizeof(RecordStorage) == 16);

// One record read from a file: `size` bytes at `at` in `storage` (a chunk shared with the
// records read before and after it from the same file, or the record's own allocation: Copy, and
// records larger than ReadAhead::kOwnAllocationBytes). A record that waits long (the shuffle
// buffer) is moved into its own allocation first (Unshared), so it does not keep a whole
// chunk alive. Move-only.
struct OwnedRecord {
  RecordStorage::Ref storage;
  uint64_t size = 0;
  uint32_t file_index = 0;    // index in the job's file list
  uint32_t at = 0;            // offset of the bytes in storage (a chunk is < 4 GiB)
  uint64_t record_index = 0;  // 0-based index within the file
  uint64_t offset = 0;        // byte offset in the (uncompressed) file stream
  std::span<const uint8_t> bytes() const {
    return {storage ? storage.bytes() + at : nullptr, static_cast<size_t>(size)};
  }
  // A record holding a copy of `bytes` in its own allocation.
  static OwnedRecord Copy(std::span<const uint8_t> bytes, uint32_t file_index, uint64_t record_index, uint64_t offset);
  // This record in its own allocation: itself when its storage holds just its bytes, else a copy.
  OwnedRecord Unshared() &&;
};

// The read-ahead chunk a stream copies its small records into (ReadAhead::kChunkBytes),
// kept from turn to turn until a record does not fit. Its references are reserved when it is
// allocated and handed out one per record with no atomic instruction (the reader's per-record
// cost); the ones left over are given back when the chunk is replaced or retired.
// Thread-safety: used by one thread at a time (the stream's reader); the Refs it hands out
// may be released on any thread, before or after the cursor lets go of the chunk.
class ChunkCursor {
 public:
  ChunkCursor() = default;
  ChunkCursor(const ChunkCursor&) = delete;
  ChunkCursor& operator=(const ChunkCursor&) = delete;
  ~ChunkCursor() { Retire(); }
  // Where `length` (<= ReadAhead::kChunkBytes) bytes go: after the bytes claimed so far, or
  // at the start of a new chunk when they do not fit. Writing there claims nothing yet.
  uint8_t* Room(uint64_t length);
  // The `size` bytes just written at Room(>= size) belong to a record: its reference and
  // their offset in the chunk.
  RecordStorage::Ref Claim(uint64_t size, uint32_t* at);
  // Lets go of the chunk (its records keep it alive).
  void Retire();

 private:
  static constexpr uint32_t kReservedRefs = 1u << 20;  // more than a chunk's records (bar empty ones)
  RecordStorage::Ref chunk_;
  uint64_t used_ = 0;
  uint32_t unclaimed_ = 0;  // references reserved in chunk_'s count, not handed out yet
};

// What a stream hands out next: a record, a read error (in file order, where it occurred), or
// the end of the file. The error is allocated only when there is one (records are the common
// case and move through several queues).
struct StreamItem {
  enum class Kind { kRecord, kError, kEnd } kind = Kind::kEnd;
  // kRecord: the record. kError of kind kInvalidExample: no bytes, but record.size is what the
  // item counts against the stream's buffer (read errors and kEnd count 0).
  OwnedRecord record;
  std::unique_ptr<ReadError> error;  // kError only
};

class ReadAhead;

class FileStream {
 public:
  // Blocks until the next item is read. After kEnd, returns kEnd again.
  // A kError with error.recoverable == false is followed by kEnd.
  StreamItem Next();
  // Whether Next would return at once: an item is read (a record, an error, the end) or the
  // read-ahead is stopping. Never blocks; takes the lock only once the items taken last are
  // used up. Consumer thread only (as Next).
  bool Ready();
  uint32_t file_index() const { return file_index_; }
  const std::string& path() const { return path_; }

  ~FileStream();  // closes the file: recorded as "closing PATH" (ReadAhead::IoInProgress)

 private:
  friend class ReadAhead;
  FileStream(ReadAhead* owner, uint32_t file_index, std::string path, const ReaderOptions& options)
      : owner_(owner),
        file_index_(file_index),
        path_(std::move(path)),
        reader_(path_, options),
        reads_per_file_(options.reads_in_flight) {}

  // Ends the "closing" call ~FileStream begins, once the members below (reader_: the file and
  // its queued reads) are gone: declared before them, destroyed after them.
  struct CloseCall {
    ReadAhead* owner = nullptr;
    uint64_t id = 0;
    ~CloseCall();
  };
  // Items are queued, or Next would not wait for any (stopping, out of memory). Caller holds
  // owner_->mutex_.
  bool ReadyLocked() const;

  CloseCall close_call_;
  ReadAhead* owner_;
  uint32_t file_index_;
  std::string path_;
  TFRecordReader reader_;  // used by one I/O thread at a time (`busy_`)
  size_t reads_per_file_;  // what reader_ was last set to; as reader_
  size_t queue_allowance_ = SIZE_MAX;  // what reader_'s queue allowance was last set to; as reader_
  // reader_.queued_reads_unavailable() was counted (and maybe logged) since it was last empty;
  // as reader_.
  bool unqueued_noted_ = false;
  bool compression_noted_ = false;  // a compressed file's compression is in compressed_files_; as reader_
  ChunkCursor chunk_;      // as reader_
  std::vector<StreamItem> spare_;  // the next turn's item vector (capacity kept); as reader_
  // The consumer's side: items taken from items_ in one go (one lock per turn, not per
  // record), handed out from local_next_ on. Used by the consumer thread only. The two
  // vectors swap, so their capacity is reused instead of allocating per record or turn.
  std::vector<StreamItem> local_;
  size_t local_next_ = 0;
  bool ended_ = false;  // kEnd was handed out
  // Guarded by owner_->mutex_.
  std::vector<StreamItem> items_;
  uint64_t buffered_bytes_ = 0;
  bool busy_ = false;      // an I/O thread is reading it
  // After its last turn: the blocks of its queue it no longer needs, once the queue has asked
  // for the whole file (its depth less the blocks it holds; 0 before): the interleave's files
  // near their ends hand them on to the files opened ahead (ReadAhead::AllowancesLocked).
  size_t queue_spare_ = 0;
  // ... and whether its queue could hold more blocks (it has one, not yet at the file's end).
  // True until its first turn says (it may get one).
  bool queue_can_grow_ = true;
  size_t queue_allowance_wanted_ = SIZE_MAX;  // AllowancesLocked's last figure for it
  bool finished_ = false;  // the reader returned kEnd (kEnd is queued)
  bool closed_ = false;    // the consumer dropped it
  // A reader ran out of memory and could not even queue the error (another thread had taken
  // the reserve): the stream ends there, and Next makes the error item once it gets there.
  bool out_of_memory_ = false;
  std::condition_variable ready_;
};

class ReadAhead {
 public:
  // Records up to this size are copied into shared chunks; larger ones get their own
  // allocation (a chunk would hold few of them, and a tail left by one that does not fit
  // would waste more: at most a quarter of a chunk).
  static constexpr uint64_t kOwnAllocationBytes = 16u << 10;
  // Every chunk's size (bytes of record payload).
  static constexpr uint64_t kChunkBytes = 64u << 10;
  // Memory a stream may hold beyond its buffered records: the consumed part of its oldest
  // chunk and the unused tail of the one being filled (the memory plan counts it per open file).
  static constexpr uint64_t kChunkOverheadBytes = 2 * kChunkBytes;

  // Whether a job's records travel in chunks: not with a shuffle buffer (shuffle.buffer > 1),
  // where every record ends up in its own allocation anyway (Sequencer), so it is read straight
  // into one. Pipeline, the memory plan and the daemon's malloc settings all follow this.
  static constexpr bool UsesChunks(int64_t shuffle_buffer) { return shuffle_buffer <= 1; }

  // `chunks`: false gives every record its own allocation (what a shuffle buffer keeps
  // anyway, see OwnedRecord), saving the copy out of a chunk.
  // Throws std::system_error when its threads cannot start (none is left running then).
  ReadAhead(ReaderOptions options, size_t threads, uint64_t stream_buffer_bytes, bool chunks = true);
  ~ReadAhead();  // stops and joins the threads
  // Stops reading: every FileStream::Next waiting for records returns (kEnd) now and later
  // ones at once, so that a sequencer waiting for a file that delivers nothing ends on a stop
  // request (the caller tells that kEnd from a file's end by its own stop flag). A reader
  // blocked in a read still finishes that read before the destructor joins it
  // (IoInProgress names it). Any thread; idempotent.
  void Stop();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Logs a warning at the first GZIP or ZLIB file read from now on: the memory plan counted
  // no decompression buffers (compression: auto with every file plain at start), so each
  // open compressed file takes its input buffer and inflate state from the safety margin.
  // Any thread.
  void WarnOnCompressed();

  // Starts reading `path` in the background. Streams opened earlier are read first.
  std::shared_ptr<FileStream> Open(uint32_t file_index, const std::string& path);
  // Blocks until one of `streams` (null entries are passed over) is Ready, or Stop() was
  // called: the sequencer's wait when it may take from whichever interleaved file has records
  // (deterministic: false). The wait counts in consumer_wait_ns, as Next's. Consumer thread.
  void WaitAny(const std::vector<std::shared_ptr<FileStream>>& streams);
  // Stops reading a stream early (the consumer no longer needs it). Dropping the last
  // shared_ptr without Close is fine too; Close only frees its buffer sooner.
  void Close(const std::shared_ptr<FileStream>& stream);

  // A check each record must pass to be handed out (for example ExampleParser::Check); one
  // that fails becomes a recoverable kError item of kind kInvalidExample where the record was,
  // "PATH: record N at byte X: <why>", and its bytes are dropped. Runs on the I/O threads,
  // concurrently: must be thread-safe. Set it before the first Open; none by default.
  using RecordCheck = std::function<bool(const OwnedRecord& record, std::string* why)>;
  void SetRecordCheck(RecordCheck check) { check_ = std::move(check); }

  // >= 1. Throws std::system_error when a thread cannot start (ulimit -u, a pids limit): the
  // threads started before it keep running (threads() says how many).
  void SetThreads(size_t threads);
  size_t threads() const;
  // Reads in flight per file (ReaderOptions::reads_in_flight, format/read_queue.h), >= 1: for
  // files opened from now on and, from their next turn, for the open ones. Plain files opened
  // with more than 1 use a window of at most 16 KiB (the queue's blocks hold what is read
  // ahead; the window only puts together records straddling two blocks) instead of
  // buffer_bytes; compressed ones a window and an inflater input of at most read_block_bytes.
  void SetReadsPerFile(size_t reads);
  size_t reads_per_file() const;
  // Only the first `streams` open streams (the interleave's, cycle_length: the sequencer takes
  // streams in Open order) hold reads_per_file reads; the ones opened ahead of their turn hold
  // one, and more as the interleave's streams near their ends (see the class comment), until
  // they move up (default: all streams).
  void SetQueuedStreams(size_t streams);
  // Read-ahead per open stream (bytes, >= 1): a thread stops reading a stream at this much.
  void SetStreamBufferBytes(uint64_t bytes);
  uint64_t stream_buffer_bytes() const;
  // Bytes buffered across all streams: record payload, and the charges of records that failed
  // the record check (SetRecordCheck; dropped, but counted until taken).
  uint64_t buffered_bytes() const;
  // Records and payload bytes read so far (for throughput figures), including records that
  // failed the record check.
  uint64_t records_read() const;
  uint64_t bytes_read() const;
  // Streams currently open (being read or buffered).
  size_t open_streams() const;
  // The compression file `file_index` was read with (TFRecordReader::compression(): the
  // config's, or what `auto` detected): kGzip or kZlib once a turn of that file has run, else
  // kNone. For messages about its records (JobFiles); it takes the lock.
  Compression CompressionOf(uint32_t file_index) const;
  // The file system calls under way now, oldest first, as "a read of PATH (for 1.2 s)",
  // "opening PATH (...)" or "closing PATH (...)": an I/O thread's read-ahead turn, Open()
  // opening a file, a stream's last reference closing it (waiting for its queued reads).
  // After Stop(), empty once no thread will touch a file again; what stays in it is storage
  // that does not answer (ringfeedd names it when a stop cannot finish). Never waits for a
  // thread that is in such a call.
  std::vector<std::string> IoInProgress() const { return IoInProgress(0); }
  // The same, only the calls under way for at least `at_least_ns` (status's io_waiting).
  std::vector<std::string> IoInProgress(int64_t at_least_ns) const;
  // I/O threads in a turn now (reading a stream, or closing it after): after Stop() and 0,
  // none will touch a file again.
  int threads_in_turn() const { return threads_in_turn_.load(std::memory_order_acquire); }

  // Time counters for the autotuner (nanoseconds, cumulative since construction):
  // busy = wall time I/O threads spent reading (blocked in read() included), cpu = their
  // thread CPU time while doing so, consumer_wait = time FileStream::Next waited for an
  // empty stream (the sequencer starved of records: the read stage is the bottleneck).
  uint64_t busy_ns() const { return busy_ns_.load(std::memory_order_relaxed); }
  uint64_t cpu_ns() const { return cpu_ns_.load(std::memory_order_relaxed); }
  uint64_t consumer_wait_ns() const { return consumer_wait_ns_.load(std::memory_order_relaxed); }
  // Files that were to be read with several reads in flight but went one read at a time, their
  // io_uring queue not set up (TFRecordReader::queued_reads_unavailable): counted once per
  // file, each logged as a warning unless another was within kUnqueuedWarningEveryNs.
  uint64_t unqueued_files() const { return unqueued_files_.load(std::memory_order_relaxed); }
  static constexpr int64_t kUnqueuedWarningEveryNs = 60'000'000'000;
  // Queue blocks handed on so far to files opened ahead of their turn, beyond the one each holds
  // (raises of their allowance: see the class comment). 0 without queued reads.
  uint64_t queue_blocks_handed_on() const { return queue_blocks_handed_on_.load(std::memory_order_relaxed); }

 private:
  friend class FileStream;
  void Run(size_t id);
  // Picks a stream to read, or nullptr: one below its buffer limit, or one opened ahead whose
  // queue may hold more blocks now (a turn that only raises its allowance). Caller holds mutex_.
  std::shared_ptr<FileStream> PickLocked(size_t* index);  // *index: its place in streams_
  // Sets every stream's queue_allowance_wanted_: all reads_per_file + 1 blocks for the
  // interleave's streams (the first queued_streams_), and for the ones opened ahead one block
  // each plus the blocks an interleaved stream near its end no longer needs (queue_spare_),
  // paired in order: the first opened ahead with the one nearest its end. Caller holds mutex_.
  void AllowancesLocked();
  std::vector<size_t> spares_;  // AllowancesLocked's scratch; guarded by mutex_
  // The items that end `stream` on running out of memory (read_ahead.cc). Throws std::bad_alloc.
  static void AppendOutOfMemory(const FileStream& stream, const std::bad_alloc& e, std::vector<StreamItem>* items);

  // IoInProgress's list, under a mutex of its own: a call that blocks (a read, an open, the
  // close of a file with reads in flight) never holds it, nor mutex_ while in the call.
  uint64_t BeginIo(const std::string& path, const char* what);  // returns the call's id
  void EndIo(uint64_t id);
  struct IoCall {
    uint64_t id;
    std::string path;
    int64_t since_ns;
    const char* what;  // "a read of", "opening", "closing"
  };
  mutable std::mutex io_mutex_;
  std::vector<IoCall> io_calls_;  // guarded by io_mutex_
  uint64_t next_io_id_ = 1;       // guarded by io_mutex_
  std::atomic<bool> stop_requested_{false};  // Stop(): a turn ends after its current record
  std::atomic<int> threads_in_turn_{0};      // from taking a stream to letting go of it (closed)

  const ReaderOptions options_;
  const bool chunks_;
  RecordCheck check_;  // set before the first Open, read-only after
  size_t reads_per_file_;  // guarded by mutex_
  size_t queued_streams_ = SIZE_MAX;  // guarded by mutex_
  uint64_t stream_buffer_bytes_;  // guarded by mutex_
  mutable std::mutex mutex_;
  std::condition_variable work_;
  // WaitAny's: a reader that delivers items wakes it while any_waiters_ > 0 (guarded by mutex_).
  std::condition_variable any_ready_;
  size_t any_waiters_ = 0;
  std::vector<std::shared_ptr<FileStream>> streams_;  // in Open order
  std::unordered_map<uint32_t, Compression> compressed_files_;  // file_index -> kGzip/kZlib; guarded by mutex_
  bool warn_on_compressed_ = false;                             // WarnOnCompressed, until it warned; mutex_
  std::vector<std::thread> threads_;
  size_t wanted_threads_ = 0;
  bool stopping_ = false;
  uint64_t buffered_bytes_ = 0;
  uint64_t records_read_ = 0;
  uint64_t bytes_read_ = 0;
  std::atomic<uint64_t> busy_ns_{0}, cpu_ns_{0}, consumer_wait_ns_{0};
  // A file its queue failed for: counts it, and warns at most once per kUnqueuedWarningEveryNs.
  void NoteUnqueued(const std::string& path, const std::string& why, size_t reads);
  std::atomic<uint64_t> unqueued_files_{0};
  std::atomic<uint64_t> queue_blocks_handed_on_{0};
  std::atomic<int64_t> unqueued_warning_next_ns_{0};
};

}  // namespace ringfeed
