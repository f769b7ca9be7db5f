// ReadAhead: reads TFRecord files ahead of the sequencer on a pool of I/O threads, so that
// reading and inflating (GZIP/ZLIB) overlap with everything else and several files are read
// in parallel (tf.data's interleave with parallel reads). It never changes the order: each
// FileStream hands out its file's records in file order, and the sequencer alone decides which
// stream it takes the next record from.
//
// Memory: each open stream buffers at most `stream_buffer_bytes` of record payload (plus one
// record, however large, so a record bigger than the buffer still moves), and the pool never
// has more open streams than the sequencer asked for.
// Threads: `threads` I/O threads, changeable at run time with SetThreads (the autotuner's knob,
// as is the per-stream buffer, SetStreamBufferBytes);
// a thread picks the earliest-opened stream that is below its buffer limit and not being read
// by another thread, reads up to a chunk of records, and moves on.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "format/tfrecord_reader.h"

namespace ringfeed {

// One record read from a file, in its own allocation (it may sit in the shuffle buffer long
// after its neighbours are gone).
struct OwnedRecord {
  std::unique_ptr<uint8_t[]> data;
  uint64_t size = 0;
  uint32_t file_index = 0;    // index in the job's file list
  uint64_t record_index = 0;  // 0-based index within the file
  uint64_t offset = 0;        // byte offset in the (uncompressed) file stream
  std::span<const uint8_t> bytes() const { return {data.get(), static_cast<size_t>(size)}; }
};

// What a stream hands out next: a record, a read error (in file order, where it occurred), or
// the end of the file.
struct StreamItem {
  enum class Kind { kRecord, kError, kEnd } kind = Kind::kEnd;
  OwnedRecord record;
  ReadError error;
};

class ReadAhead;

class FileStream {
 public:
  // Blocks until the next item is read. After kEnd, returns kEnd again.
  // A kError with error.recoverable == false is followed by kEnd.
  StreamItem Next();
  uint32_t file_index() const { return file_index_; }
  const std::string& path() const { return path_; }

 private:
  friend class ReadAhead;
  FileStream(ReadAhead* owner, uint32_t file_index, std::string path, const ReaderOptions& options)
      : owner_(owner), file_index_(file_index), path_(std::move(path)), reader_(path_, options) {}

  ReadAhead* owner_;
  uint32_t file_index_;
  std::string path_;
  TFRecordReader reader_;  // used by one I/O thread at a time (`busy_`)
  // The consumer's side: items taken from items_ in one go (one lock per turn, not per
  // record). Used by the consumer thread only.
  std::deque<StreamItem> local_;
  // Guarded by owner_->mutex_.
  std::deque<StreamItem> items_;
  uint64_t buffered_bytes_ = 0;
  bool busy_ = false;      // an I/O thread is reading it
  bool finished_ = false;  // the reader returned kEnd (kEnd is queued)
  bool closed_ = false;    // the consumer dropped it
  std::condition_variable ready_;
};

class ReadAhead {
 public:
  ReadAhead(ReaderOptions options, size_t threads, uint64_t stream_buffer_bytes);
  ~ReadAhead();  // stops and joins the threads
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Starts reading `path` in the background. Streams opened earlier are read first.
  std::shared_ptr<FileStream> Open(uint32_t file_index, const std::string& path);
  // Stops reading a stream early (the consumer no longer needs it). Dropping the last
  // shared_ptr without Close is fine too; Close only frees its buffer sooner.
  void Close(const std::shared_ptr<FileStream>& stream);

  void SetThreads(size_t threads);  // >= 1
  size_t threads() const;
  // Read-ahead per open stream (bytes, >= 1): a thread stops reading a stream at this much.
  void SetStreamBufferBytes(uint64_t bytes);
  uint64_t stream_buffer_bytes() const;
  // Bytes of record payload currently buffered across all streams.
  uint64_t buffered_bytes() const;
  // Records and payload bytes read so far (for throughput figures).
  uint64_t records_read() const;
  uint64_t bytes_read() const;
  // Streams currently open (being read or buffered).
  size_t open_streams() const;

  // Time counters for the autotuner (nanoseconds, cumulative since construction):
  // busy = wall time I/O threads spent reading (blocked in read() included), cpu = their
  // thread CPU time while doing so, consumer_wait = time FileStream::Next waited for an
  // empty stream (the sequencer starved of records: the read stage is the bottleneck).
  uint64_t busy_ns() const { return busy_ns_.load(std::memory_order_relaxed); }
  uint64_t cpu_ns() const { return cpu_ns_.load(std::memory_order_relaxed); }
  uint64_t consumer_wait_ns() const { return consumer_wait_ns_.load(std::memory_order_relaxed); }

 private:
  friend class FileStream;
  void Run(size_t id);
  // Picks a stream to read, or nullptr. Caller holds mutex_.
  std::shared_ptr<FileStream> PickLocked();

  const ReaderOptions options_;
  uint64_t stream_buffer_bytes_;  // guarded by mutex_
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::vector<std::shared_ptr<FileStream>> streams_;  // in Open order
  std::vector<std::thread> threads_;
  size_t wanted_threads_ = 0;
  bool stopping_ = false;
  uint64_t buffered_bytes_ = 0;
  uint64_t records_read_ = 0;
  uint64_t bytes_read_ = 0;
  std::atomic<uint64_t> busy_ns_{0}, cpu_ns_{0}, consumer_wait_ns_{0};
};

}  // namespace ringfeed
