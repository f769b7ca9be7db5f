// TFRecordReader: streams the records of one TFRecord file (plain, GZIP or ZLIB), checking the
// masked CRC-32C of every length and payload.
//
// Format (tensorflow/core/lib/io/record_writer.cc, see ../shared/reference/tfrecord-and-example.md):
//   uint64 length (LE) | uint32 masked_crc32c(length bytes) | byte data[length] | uint32 masked_crc32c(data)
//
// Memory: one window buffer of `buffer_bytes` (default 1 MiB) that grows, by doubling as data
// arrives, only as far as the largest record read (never beyond max_record_bytes + 16, never
// just because a header claims a large length), plus, for compressed files, an input
// buffer of `buffer_bytes` and the decoder state; with queued reads (reads_in_flight > 1), the
// queue's blocks ((reads_in_flight + 1) x read_block_bytes, and the spares of hedged reads), and
// for plain files a window of at most 16 KiB (kQueuedWindowBytes) that grows only for a larger
// record straddling two blocks (records of direct_read_min_bytes and more go straight into
// their own memory instead).
// Blocks and window are freed when the file ends. A file is never loaded whole. A record
// that lies inside the window, or inside one queued block, is returned in place: the only
// user-space copy of its payload is the caller's (e.g. the parser writing into a batch column).
// NextInto puts the payload into memory the caller provides instead (a record that must outlive
// the window, e.g. in a read-ahead queue): small records are copied there from the window; of a
// large one (at least `direct_read_min_bytes` not yet read), only the part already in the window
// is copied, the rest is read (plain) or inflated (GZIP/ZLIB) straight into the caller's memory,
// and only the 16 bytes after it (the data CRC and the next header) go into the window, so that
// a file of large records moves each payload once in user space instead of twice. The length a
// header claims is only allocated when it is backed: by the file's size (plain), or when it is
// at most `buffer_bytes` (what the window may hold anyway); otherwise the record goes through the
// window, which grows only as data arrives.
//
// Errors are values (ReadError), never exceptions. Policy (fail or skip) belongs to the caller:
//   kCorruptedData, kRecordTooLarge  - recoverable: the next Next() continues with the following
//                                      record (a too-large payload is skipped without storing it),
//                                      except a too-large length that a plain file is too short to
//                                      hold: that ends the file (one error, not recoverable);
//   every other kind                 - ends the file: the next Next() returns kEnd. A corrupted
//                                      length can't be trusted to find the next record, so there
//                                      is no resynchronisation (as in TensorFlow).
// A clean end of file at a record boundary is the end, not an error; an empty file (whatever its
// declared compression) has zero records.
//
// Thread-safety: one thread at a time per reader; distinct readers are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "format/compression.h"

namespace ringfeed {

constexpr size_t kRecordHeaderBytes = 12;  // uint64 length + uint32 masked CRC of it
constexpr size_t kRecordFooterBytes = 4;   // uint32 masked CRC of the data
constexpr uint64_t kDefaultMaxRecordBytes = uint64_t{256} << 20;

struct ReaderOptions {
  Compression compression = Compression::kAuto;
  // Records whose length field exceeds this are rejected before any allocation.
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;
  // Where max_record_bytes comes from when it is not the config's key of that name (ringfeedd
  // lowers it to what its memory budget holds): the too-large error then reads "length L bytes
  // exceeds <this>" instead of "exceeds max_record_bytes N (raise max_record_bytes if the record
  // is genuine)".
  std::string max_record_bytes_why{};
  // Appended to the error of a file that does not exist (ENOENT) when it is opened: where the
  // caller listed the file earlier (ringfeedd: at start), what that means.
  std::string missing_file_note{};
  bool verify_crc = true;
  // Granularity of read() calls and of the window buffer, in bytes (min 64). Records larger
  // than this still work; tests set it tiny to split records across reads.
  size_t buffer_bytes = size_t{1} << 20;
  InflateBackend inflate = InflateBackend::kDefault;
  // NextInto reads a payload straight into the caller's memory (one read() or inflate call per
  // record, bypassing the window) when at least this many of its bytes are not yet in the
  // window; below it, a read per record would cost more than the copy it saves (min 1; tests
  // set 1 to take the direct path with tiny records).
  size_t direct_read_min_bytes = size_t{64} << 10;
  // Regular files: reads kept in flight at once, each of read_block_bytes (a ReadQueue,
  // format/read_queue.h: io_uring), instead of one read() at a time. For storage with a round
  // trip per read (network file systems, FUSE mounts), where one read at a time gets one block
  // per round trip from a file. Plain files: records are read from the blocks in place; one
  // that runs on into the next block is put together in the window. GZIP/ZLIB files: the
  // blocks are copied into the inflater's input buffer (buffer_bytes). 1 (the default) = off;
  // where io_uring is not available the reader falls back to read().
  size_t reads_in_flight = 1;
  size_t read_block_bytes = size_t{256} << 10;
  // With queued reads: a read late by 2x the mean round trip while the reader waits for it is
  // sent again and the first answer taken (hedged reads, format/read_queue.h), within this
  // process's HedgeBudget (format/hedge_budget.h). false: never.
  bool hedged_reads = true;
};

enum class ReadErrorKind {
  kTruncatedRecord,  // file ends inside a record
  kCorruptedLength,  // length CRC mismatch
  kCorruptedData,    // payload CRC mismatch (recoverable)
  kRecordTooLarge,   // length > max_record_bytes (recoverable)
  kDecompression,    // the gzip/zlib stream is invalid or truncated
  kIo,               // open/read failed
  // The file could not be opened because the process (EMFILE, RLIMIT_NOFILE) or the system
  // (ENFILE) has no file descriptor left: a limit of the machine, not a fault of the file, so
  // a caller that skips bad files (on_error: skip) must not skip it.
  kOutOfFileDescriptors,
  // Memory ran out while the file was read ahead (std::bad_alloc: ulimit -v, an overcommit or
  // cgroup limit). Never raised by TFRecordReader: ReadAhead (daemon/read_ahead.h) makes it.
  kOutOfMemory,
  // The record is intact but its Example does not match the job's spec (recoverable). Never
  // raised by TFRecordReader: ReadAhead's record check (daemon/read_ahead.h) makes it.
  kInvalidExample,
  // The file was modified (its size or mtime) between its open and its end, with every record
  // intact: written over in place with records where the old ones were, the records read from it
  // may mix both versions, which no CRC catches (or it was appended to: the reader cannot tell).
  // Raised at the file's end (not recoverable: nothing follows), after its records; the ones
  // handed out cannot be taken back.
  kFileChanged,
};
std::string_view ReadErrorKindName(ReadErrorKind kind);  // "truncated record", ...
// "PATH: record N at byte B", and for a GZIP/ZLIB file " of the uncompressed stream (gzip)"
// after it: the prefix of every message about one record (ReadError::message, parse errors).
// `compression` is the file's as read (TFRecordReader::compression(); kAuto: not known yet,
// named like kNone).
std::string RecordPlace(const std::string& path, uint64_t record_index, uint64_t offset, Compression compression);
// Whether `kind` is a limit of the machine rather than a fault of the file (out of file
// descriptors, out of memory): a caller that skips bad files (on_error: skip) must stop instead,
// or the records it could not read would be lost without a word.
inline bool IsMachineLimit(ReadErrorKind kind) {
  return kind == ReadErrorKind::kOutOfFileDescriptors || kind == ReadErrorKind::kOutOfMemory;
}

struct ReadError {
  ReadErrorKind kind;
  std::string file;
  uint64_t record_index = 0;  // index of the record the error is about (0-based)
  uint64_t offset = 0;        // byte offset of that record's header in the uncompressed stream
  bool recoverable = false;   // true: Next() may be called to go on with the next record
  // Full message naming the file, record index and offset, e.g.
  // "data.tfrecord: record 4 at byte 5120: corrupted record: data CRC mismatch ...".
  std::string message;
};

// One record. `data` stays valid until the next call to Next() or the reader's destruction.
struct Record {
  std::span<const uint8_t> data;
  uint64_t index = 0;   // 0-based record index within the file
  uint64_t offset = 0;  // byte offset of its header in the uncompressed stream
};

// Where TFRecordReader::NextInto puts a record's payload. Not owned by the reader.
class RecordAllocator {
 public:
  // Memory for one payload of `length` bytes, writable by the reader until NextInto returns
  // (the caller keeps it as long as it likes after that). Called at most once per NextInto,
  // after the header and its CRC are checked; the bytes hold a record only when NextInto returns
  // kRecord (on an error the caller may reuse or free them). May throw (std::bad_alloc): the
  // record is then not consumed, and the next call reads it again.
  virtual uint8_t* Allocate(uint64_t length) = 0;

 protected:
  ~RecordAllocator() = default;
};

class TFRecordReader {
 public:
  enum class Status { kRecord, kEnd, kError };

  // Does no I/O; the file is opened by the first Next() (an open failure is a kIo error).
  TFRecordReader(std::string path, ReaderOptions options = {});
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // kRecord: *record is set. kEnd: no more records. kError: *error is set (see above).
  Status Next(Record* record, ReadError* error);
  // As Next, but the payload is in memory from `allocator` (record->data points there, valid
  // as long as the caller keeps that memory) instead of the reader's window. Same records,
  // errors, messages and recovery as Next; the two may be mixed on one reader.
  Status NextInto(RecordAllocator& allocator, Record* record, ReadError* error);

  const std::string& path() const { return path_; }
  // The compression in use: the configured one, or what auto detection found (after the first
  // Next(); kAuto before).
  Compression compression() const { return compression_; }
  // Records returned so far (good records, not counting errors).
  uint64_t records_read() const { return records_read_; }
  // Bytes of the uncompressed stream consumed so far (= offset of the next record).
  uint64_t offset() const { return offset_; }
  // Bytes of the file itself consumed so far (equals offset() for plain files).
  uint64_t file_offset() const;
  // Reads in flight at once on this file (after the first Next()): reads_in_flight when a
  // ReadQueue reads it, else 1.
  size_t reads_in_flight() const;
  // The window's size with queued reads (where no record needs more): it only puts together a
  // record that straddles two blocks.
  // (16 KiB: 64 KiB before session 37, 48 KiB more per open file on a slow mount for records
  // that rarely straddle at all; one from 16 to 64 KiB grows it, a larger one is read directly.)
  static constexpr size_t kQueuedWindowBytes = size_t{16} << 10;
  // Changes ReaderOptions::reads_in_flight from the next read on (before the first Next() it
  // only sets the option). Between two numbers above 1 the queue is deepened or made shallower
  // in place (ReadQueue::SetDepth): what it read ahead and its reads in flight stay. To or
  // from 1 (or past ReadQueue::kRingEntries - 1) a queue is made or dropped: the blocks it read
  // ahead are dropped and read again by the new one or by read() (a compressed file's inflater
  // goes on from the bytes it has read). Records and offsets are the same whatever the setting,
  // and the record the last Next() returned stays valid until the next call, as always.
  void SetReadsInFlight(size_t reads);
  // With queued reads: the most blocks of the queue held at once (ReadQueue::SetAllowance: 1 =
  // one read at a time; the default, SIZE_MAX, is all reads_in_flight + 1). Kept across
  // SetReadsInFlight. A file opened ahead of its turn starts low and is raised as the files
  // before it near their ends (ReadAhead), so that the memory of the queues stays the same.
  void SetQueueAllowance(size_t blocks);
  // Blocks of the queue held now (0 without a queue) and whether the queue has asked for every
  // block of the file (false without one): from then on it only shrinks as blocks are taken.
  size_t queue_blocks() const;
  bool queue_all_requested() const;
  // Why this file is read with read(), one read at a time, although reads_in_flight > 1:
  // the ReadQueue for it could not be set up ("io_uring_queue_init: Too many open files", or
  // "... Cannot allocate memory": io_uring works in this process, but not for one more queue
  // now). "" when it is read as asked. Set by the
  // first Next() and by SetReadsInFlight; the reader has no logger, its caller says it.
  const std::string& queued_reads_unavailable() const { return queued_reads_unavailable_; }

 private:
  Status Read(RecordAllocator* allocator, Record* record, ReadError* error);
  // NextInto's path for a large record: its header is at begin_, fewer than `length` payload
  // bytes follow it in the window.
  Status ReadDirect(RecordAllocator& allocator, uint64_t length, Record* record, ReadError* error);
  // Reads `n` bytes into `dst`, then into the (empty) window until it holds at least `min_tail`
  // bytes, taking up to `max_tail` (plain files: in the same readv). Returns the bytes put into
  // `dst`: fewer than `n` (or a window short of `min_tail`) at the end of the stream or on an
  // error (stream_error_ set).
  size_t FillDirect(uint8_t* dst, size_t n, size_t min_tail, size_t max_tail);
  bool Open(ReadError* error);
  // Makes at least `n` unconsumed bytes available in the window unless the stream ends first.
  // Returns false on a stream error (error_ set).
  bool Ensure(size_t n);
  size_t Fill(uint8_t* dst, size_t capacity);  // 0 = end of stream or error
  // Moves the unconsumed bytes to a new window of `capacity`; returns the old one.
  std::unique_ptr<uint8_t[]> Reallocate(size_t capacity);
  // The window's size when no record needs more: buffer_bytes, or with a queue at most
  // kQueuedWindowBytes (it only puts together a record that straddles two blocks, and grows to
  // one that is larger).
  size_t WindowBytes() const;
  // With a queue, the window shows a block of it in place while records lie inside that block
  // (no copy into buf_); a record that runs on into the next block is put together in buf_.
  // Unview moves the unconsumed bytes of a shown block into buf_ and hands the block back.
  const uint8_t* window() const { return viewed_ > 0 ? view_ : buf_.get(); }
  void Unview();
  void CopyViewToBuffer();  // Unview without handing the block back
  void DropView();          // hands the shown block back; its bytes are all consumed or copied
  Status MakeError(ReadErrorKind kind, std::string detail, ReadError* error);
  // GZIP/ZLIB: whether the inflater fails with a data error within the next MiB of its output
  // (taken and dropped: for a record length that does not check, which ends the file anyway);
  // sets *why to its message.
  bool DecompressionErrorAhead(std::string* why);
  // For a truncated record's message: "; the file had S bytes when it was opened, and its reads
  // ended at byte END: it shrank while it was read ..." where the reads ended before the size
  // the file had at open (`end`: the offset where a plain file's bytes ended; for a compressed
  // file, where its input reads ended, at its end), else "".
  std::string ShrankNote(uint64_t end) const;
  // "; the file changed while it was read (...): rewritten in place?" when the open file's size
  // or modification time now differ from those at open (a bad record read from a file written
  // over while it was read: `cp new old`), else "".
  std::string ChangedNote() const;
  // "S bytes then and now, modified since it was opened" (or "S bytes when it was opened, T now,
  // ..."): how the open file differs from its open, or "" when its size and mtime are the same.
  std::string ChangeSinceOpen() const;
  // Skips the rest of a too-large record (discard_ bytes: header, payload and footer) without
  // storing it; index_ and offset_ still name it until it is gone, so an end inside it is
  // reported at it. False when the stream ends (or fails: stream_error_) first.
  bool DiscardTooLarge();
  void EndFile();  // the next Next() returns kEnd; the window and the queue's reads go now
  // The queue reading this file: queue_ (plain), the inflater's (GZIP/ZLIB), or nullptr.
  class ReadQueue* ActiveQueue() const;

  std::string path_;
  ReaderOptions options_;
  Compression compression_ = Compression::kAuto;
  int fd_ = -1;
  bool opened_ = false;
  bool done_ = false;
  std::unique_ptr<class InflateStream> inflate_;
  // Plain files with reads_in_flight > 1: that many reads in flight plus the block the window
  // shows (depth reads_in_flight + 1). A GZIP/ZLIB file's queue is the inflater's
  // (InflateStream::SetQueue): its bytes are copied into the inflater's input, never shown.
  std::unique_ptr<class ReadQueue> queue_;
  size_t queue_allowance_ = SIZE_MAX;  // SetQueueAllowance
  // A queue SetReadsInFlight replaced while the window showed one of its blocks: the record
  // Next() returned last may lie in that block, so it goes at the next call, not before.
  std::unique_ptr<class ReadQueue> retired_queue_;
  std::string queued_reads_unavailable_;  // see queued_reads_unavailable()
  // The same for a window SetReadsInFlight resized.
  std::unique_ptr<uint8_t[]> retired_buf_;
  // Window: bytes [begin_, end_) of window() are read but unconsumed. window() is buf_, or a
  // block of the queue (view_, viewed_ bytes of it, all counted as read from the file).
  std::unique_ptr<uint8_t[]> buf_;
  size_t capacity_ = 0;
  const uint8_t* view_ = nullptr;
  size_t viewed_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
  bool stream_end_ = false;
  std::string stream_error_;       // set when Fill failed
  ReadErrorKind stream_error_kind_ = ReadErrorKind::kIo;
  uint64_t offset_ = 0;             // uncompressed offset of window()[begin_]
  uint64_t index_ = 0;              // index of the next record
  uint64_t records_read_ = 0;
  uint64_t plain_file_offset_ = 0;  // bytes read from the file (plain)
  uint64_t plain_file_size_ = 0;    // st_size at open (plain regular files; 0 = unknown)
  uint64_t file_size_ = 0;          // st_size at open, whatever the compression
  int64_t opened_mtime_ns_ = 0;     // st_mtim at open, in ns
  uint64_t stream_bytes_ = 0;       // uncompressed bytes produced by the stream so far
  uint8_t head_[16] = {};           // the file's first bytes (for hints in error messages)
  size_t head_size_ = 0;
  uint64_t discard_ = 0;            // bytes of a too-large record still to skip
  uint64_t discard_total_ = 0;      // its whole size (header + payload + footer, saturated)
};

}  // namespace ringfeed
