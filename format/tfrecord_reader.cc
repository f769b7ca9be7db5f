#include "format/tfrecord_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "format/crc32c.h"
#include "format/inflate_stream.h"
#include "format/read_queue.h"

namespace ringfeed {
namespace {

constexpr size_t kMinBufferBytes = 64;

uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // TFRecord is little-endian; so is every platform we build for
}
uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static_assert(std::endian::native == std::endian::little, "TFRecord framing is read as little-endian");

// "cannot open: Too many open files (...)": which limit ran out and how to raise it.
std::string OutOfFileDescriptors(int err) {
  std::string text = std::string("cannot open: ") + std::strerror(err);
  rlimit limit{};
  if (err == EMFILE && ::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    text += " (this process may have " + std::to_string(limit.rlim_cur) +
            " files open, RLIMIT_NOFILE: raise it with `ulimit -n` or LimitNOFILE= under systemd)";
  } else if (err == ENFILE) {
    text += " (the whole system's limit, sysctl fs.file-max, is reached)";
  }
  return text;
}

}  // namespace

std::string_view ReadErrorKindName(ReadErrorKind kind) {
  switch (kind) {
    case ReadErrorKind::kTruncatedRecord: return "truncated record";
    case ReadErrorKind::kCorruptedLength: return "corrupted record length";
    case ReadErrorKind::kCorruptedData: return "corrupted record data";
    case ReadErrorKind::kRecordTooLarge: return "record too large";
    case ReadErrorKind::kDecompression: return "decompression error";
    case ReadErrorKind::kIo: return "I/O error";
    case ReadErrorKind::kOutOfFileDescriptors: return "out of file descriptors";
    case ReadErrorKind::kOutOfMemory: return "out of memory";
    case ReadErrorKind::kInvalidExample: return "invalid Example";
    case ReadErrorKind::kFileChanged: return "file changed while read";
  }
  return "?";
}

TFRecordReader::TFRecordReader(std::string path, ReaderOptions options)
    : path_(std::move(path)), options_(options) {
  options_.buffer_bytes = std::max(options_.buffer_bytes, kMinBufferBytes);
  options_.direct_read_min_bytes = std::max<size_t>(options_.direct_read_min_bytes, 1);
}

TFRecordReader::~TFRecordReader() {
  inflate_.reset();
  queue_.reset();  // waits for its reads before the fd closes
  retired_queue_.reset();
  if (fd_ >= 0) ::close(fd_);
}

ReadQueue* TFRecordReader::ActiveQueue() const { return queue_ ? queue_.get() : inflate_ ? inflate_->queue() : nullptr; }

size_t TFRecordReader::reads_in_flight() const {
  const ReadQueue* q = ActiveQueue();
  return q ? q->depth() - 1 : 1;
}

void TFRecordReader::SetReadsInFlight(size_t reads) {
  reads = std::max<size_t>(reads, 1);
  const size_t current = reads_in_flight();
  options_.reads_in_flight = reads;
  if (!opened_ || done_ || fd_ < 0 || stream_end_ || reads == current) return;
  // Deeper or shallower in place: the blocks read ahead and the reads in flight stay.
  if (ReadQueue* q = ActiveQueue(); q != nullptr && reads > 1 && q->SetDepth(reads + 1)) return;
  if (inflate_) {
    // The inflater copied what it read into its input buffer: the new queue (or read()) goes on
    // from where the reads got to, nothing of the old one is still shown.
    queued_reads_unavailable_.clear();
    std::unique_ptr<ReadQueue> queue;
    if (reads > 1 && file_size_ > inflate_->input_offset()) {
      queue = ReadQueue::Create(fd_, inflate_->input_offset(), file_size_, options_.read_block_bytes, reads + 1,
                                &queued_reads_unavailable_, queue_allowance_, options_.hedged_reads);
    }
    inflate_->SetQueue(std::move(queue));
    return;
  }
  if (plain_file_size_ == 0) return;
  // The queue's position is plain_file_offset_: every byte before it went into the window or a
  // caller's buffer. A new queue (or read()) goes on from there.
  if (viewed_ > 0) {
    // The unconsumed bytes of the shown block move into buf_; the block itself (where the last
    // record Next() returned may lie) stays with the old queue until the next call.
    CopyViewToBuffer();
    retired_queue_ = std::move(queue_);
  }
  queue_.reset();
  queued_reads_unavailable_.clear();
  if (reads > 1) {
    queue_ = ReadQueue::Create(fd_, plain_file_offset_, plain_file_size_, options_.read_block_bytes, reads + 1,
                               &queued_reads_unavailable_, queue_allowance_, options_.hedged_reads);
  }
  if (!queue_) ::lseek(fd_, static_cast<off_t>(plain_file_offset_), SEEK_SET);
  // The window is sized for how the file is read now: read() fills all of it, while with a
  // queue it only puts together records that run on into the next block. The old window may
  // hold the record Next() returned last: it goes at the next call (the first one replaced
  // since that call; later ones hold copies only).
  const size_t window = std::max(end_ - begin_, WindowBytes());
  if (capacity_ != window && (queue_ || capacity_ < window)) {
    std::unique_ptr<uint8_t[]> old = Reallocate(window);
    if (!retired_buf_) retired_buf_ = std::move(old);
  }
}

void TFRecordReader::SetQueueAllowance(size_t blocks) {
  queue_allowance_ = blocks;
  if (ReadQueue* q = ActiveQueue()) q->SetAllowance(blocks);
}

size_t TFRecordReader::queue_blocks() const {
  const ReadQueue* q = ActiveQueue();
  return q ? q->blocks() : 0;
}

bool TFRecordReader::queue_all_requested() const {
  const ReadQueue* q = ActiveQueue();
  return q && q->all_requested();
}

size_t TFRecordReader::WindowBytes() const {
  return queue_ ? std::min({options_.buffer_bytes, options_.read_block_bytes, kQueuedWindowBytes}) : options_.buffer_bytes;
}

uint64_t TFRecordReader::file_offset() const {
  return inflate_ ? inflate_->compressed_offset() : plain_file_offset_;
}

void TFRecordReader::EndFile() {
  done_ = true;
  viewed_ = 0;  // the window is not read again
  begin_ = end_ = 0;
  queue_.reset();  // the file is over: no more reads ahead
  if (inflate_) inflate_->SetQueue(nullptr);
}

std::string RecordPlace(const std::string& path, uint64_t record_index, uint64_t offset, Compression compression) {
  const bool compressed = compression == Compression::kGzip || compression == Compression::kZlib;
  return path + ": record " + std::to_string(record_index) + " at byte " + std::to_string(offset) +
         (compressed ? " of the uncompressed stream (" + std::string(CompressionName(compression)) + ")" : "");
}

TFRecordReader::Status TFRecordReader::MakeError(ReadErrorKind kind, std::string detail, ReadError* error) {
  const bool recoverable = kind == ReadErrorKind::kCorruptedData || kind == ReadErrorKind::kRecordTooLarge;
  // A compressed file that ended early because it shrank (before EndFile lets go of the inflater).
  if (kind == ReadErrorKind::kDecompression && inflate_) detail += ShrankNote(0);
  // Bad bytes from a file written over while it was read, where no shrinking said so.
  const bool bad_bytes = kind == ReadErrorKind::kTruncatedRecord || kind == ReadErrorKind::kCorruptedLength ||
                         kind == ReadErrorKind::kCorruptedData || kind == ReadErrorKind::kDecompression;
  if (bad_bytes && detail.find("rewritten in place?") == std::string::npos) {
    detail += ChangedNote();
  }
  const bool zeros_inside = kind == ReadErrorKind::kDecompression && inflate_ && inflate_->zeros_inside();
  if (!recoverable) EndFile();
  error->kind = kind;
  error->file = path_;
  error->record_index = index_;
  error->offset = offset_;
  error->recoverable = recoverable;
  if (kind == ReadErrorKind::kDecompression && stream_bytes_ == 0) {
    // Nothing could be decompressed at all: say what the file looks like instead.
    const std::string_view looks = LooksLike(head_, head_size_);
    if (!looks.empty() && looks != CompressionName(compression_)) {
      const std::string_view fix = looks == "plain TFRecord" ? "none" : looks;
      detail += "; the file looks like " + std::string(looks) + ": set compression: " + std::string(fix) + " (or auto)";
    }
  }
  if (buf_ == nullptr) {  // the file could not even be opened: no record position to name
    error->message = path_ + ": " + std::string(ReadErrorKindName(kind)) + ": " + detail;
    return Status::kError;
  }
  // A file that ends here after some good records: say what is lost (on_error: skip goes on with
  // the next file, and one error counted must not hide the rest of a file).
  if (!recoverable && index_ > 0 && kind != ReadErrorKind::kTruncatedRecord && kind != ReadErrorKind::kFileChanged) {
    detail += "; the rest of the file is not read";
    if (kind == ReadErrorKind::kCorruptedLength && plain_file_size_ > offset_) {
      detail += " (its last " + std::to_string(plain_file_size_ - offset_) +
                " bytes, from this record on: no record boundary can be found past a bad length)";
    } else if (kind == ReadErrorKind::kCorruptedLength) {
      detail += " (no record boundary can be found past a bad length)";
    } else if (kind == ReadErrorKind::kDecompression) {
      detail += !zeros_inside                         ? " (nothing past this point can be decompressed)"
                : compression_ == Compression::kGzip ? " (the members after the zeros are not read either)"
                                                      : " (nothing after the zeros is read)";
    }
  }
  error->message = RecordPlace(path_, index_, offset_, compression_) + ": " + std::string(ReadErrorKindName(kind)) +
                   ": " + detail;
  return Status::kError;
}

bool TFRecordReader::DiscardTooLarge() {
  while (discard_ > 0) {
    if (begin_ == end_) {
      begin_ = end_ = 0;
      if (!Ensure(1) || begin_ == end_) return false;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(discard_, end_ - begin_));
    begin_ += n;
    discard_ -= n;
    if (discard_ == 0) {
      offset_ = SaturatingAdd(offset_, discard_total_);
      ++index_;
    }
  }
  return true;
}

std::string TFRecordReader::ShrankNote(uint64_t end) const {
  if (inflate_) {
    if (!inflate_->input_ended() || inflate_->input_offset() >= file_size_) return "";
    return "; the file had " + std::to_string(file_size_) + " bytes when it was opened, and its reads ended at "
           "compressed byte " + std::to_string(inflate_->input_offset()) +
           ": it shrank while it was read (rewritten in place?)";
  }
  if (plain_file_size_ == 0 || end >= plain_file_size_) return "";
  return "; the file had " + std::to_string(plain_file_size_) + " bytes when it was opened, and its reads ended at "
         "byte " + std::to_string(end) + ": it shrank while it was read (rewritten in place?)";
}

std::string TFRecordReader::ChangeSinceOpen() const {
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return "";
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  if (size == file_size_ && mtime_ns == opened_mtime_ns_) return "";
  return (size == file_size_ ? std::to_string(size) + " bytes then and now"
                             : std::to_string(file_size_) + " bytes when it was opened, " + std::to_string(size) +
                                   " now") +
         ", modified since it was opened";
}

std::string TFRecordReader::ChangedNote() const {
  const std::string change = ChangeSinceOpen();
  if (change.empty()) return "";
  return "; the file changed while it was read (" + change +
         "): rewritten in place? Replace a data file by renaming a new one over it";
}

bool TFRecordReader::DecompressionErrorAhead(std::string* why) {
  // ISA-L decoded ~21 KB past a damaged header in the worst case seen (helper-116); a MiB
  // costs ~1 ms to inflate, once per such error.
  constexpr size_t kLookAheadBytes = size_t{1} << 20, kScratchBytes = size_t{64} << 10;
  if (!inflate_->data_error()) {
    std::unique_ptr<uint8_t[]> scratch(new uint8_t[kScratchBytes]);
    for (size_t seen = 0, produced = 0; seen < kLookAheadBytes; seen += produced) {
      if (inflate_->Read(scratch.get(), kScratchBytes, &produced) != InflateStream::Status::kOk) break;
    }
  }
  if (!inflate_->data_error()) return false;
  *why = inflate_->error();
  return true;
}

namespace {
// "not a regular file (a FIFO (named pipe)): ...", for a file type the reader refuses.
std::string NotRegularFile(mode_t mode) {
  const char* what = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                                      : "of an unknown type";
  return std::string("not a regular file (") + what + "): TFRecord files are read as regular files";
}
}  // namespace

bool TFRecordReader::Open(ReadError* error) {
  opened_ = true;
  // Only regular files are read: opening a FIFO without a writer would block for good (and
  // opening one with a writer, or a device, has effects of its own), so the type is checked by
  // path first, and again on the descriptor, opened O_NONBLOCK in case the path changed in
  // between (the flag is cleared below: io_uring would answer EAGAIN instead of waiting for the
  // storage).
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    MakeError(ReadErrorKind::kIo, NotRegularFile(st.st_mode), error);
    return false;
  }
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0 && (errno == EMFILE || errno == ENFILE)) {
    MakeError(ReadErrorKind::kOutOfFileDescriptors, OutOfFileDescriptors(errno), error);
    return false;
  }
  if (fd_ < 0) {
    const bool missing = errno == ENOENT;
    MakeError(ReadErrorKind::kIo,
              std::string("cannot open: ") + std::strerror(errno) + (missing ? options_.missing_file_note : ""), error);
    return false;
  }
  if (::fstat(fd_, &st) != 0) {
    MakeError(ReadErrorKind::kIo, std::string("cannot stat: ") + std::strerror(errno), error);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    MakeError(ReadErrorKind::kIo, NotRegularFile(st.st_mode), error);
    return false;
  }
  if (::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK) != 0) {
    MakeError(ReadErrorKind::kIo, std::string("cannot clear O_NONBLOCK: ") + std::strerror(errno), error);
    return false;
  }
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  const uint64_t regular_size = static_cast<uint64_t>(st.st_size);
  const bool queued = options_.reads_in_flight > 1 && regular_size > 0;
  compression_ = options_.compression;
  // The first bytes tell `auto` the compression and a decompression error what the file looks
  // like. On storage with a round trip per read, reading them first is one more wait per file
  // before its first records: a file configured as plain goes without them, and with queued
  // reads `auto` takes them from the first block, which a plain file (the usual case) reads
  // first anyway.
  bool have_head = false;
  file_size_ = regular_size;
  opened_mtime_ns_ = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  if (queued) {
    // Without io_uring (nullptr) the file is read with read() as usual; the caller is told why.
    queue_ = ReadQueue::Create(fd_, 0, regular_size, options_.read_block_bytes, options_.reads_in_flight + 1,
                               &queued_reads_unavailable_, queue_allowance_, options_.hedged_reads);
  }
  if (compression_ != Compression::kNone && queue_) {
    const uint8_t* data = nullptr;
    const ssize_t got = queue_->Peek(&data);  // nothing is taken: the first Next() shows it again
    if (got < 0) {
      MakeError(ReadErrorKind::kIo, std::string("cannot read: ") + std::strerror(errno), error);
      return false;
    }
    // A block shorter than the head (tiny blocks in tests) leaves it to pread below.
    if (static_cast<size_t>(got) >= sizeof head_ || static_cast<uint64_t>(got) == regular_size) {
      head_size_ = std::min(sizeof head_, static_cast<size_t>(got));
      std::memcpy(head_, data, head_size_);
      have_head = true;
      if (compression_ == Compression::kAuto) compression_ = DetectCompression(head_, head_size_);
    }
  }
  if (compression_ != Compression::kNone && !have_head) {
    const ssize_t got = ::pread(fd_, head_, sizeof head_, 0);
    if (got < 0) {
      MakeError(ReadErrorKind::kIo, std::string("cannot read: ") + std::strerror(errno), error);
      return false;
    }
    head_size_ = static_cast<size_t>(got);
    if (compression_ == Compression::kAuto) compression_ = DetectCompression(head_, head_size_);
  }
  if (compression_ != Compression::kNone) {
    // The inflater reads the file from the start, through the queue where there is one (the
    // head was only looked at: nothing of it is taken).
    inflate_ = std::make_unique<InflateStream>(fd_, compression_, options_.inflate, options_.buffer_bytes);
    if (queue_) inflate_->SetQueue(std::move(queue_));
  } else {
    plain_file_size_ = regular_size;
  }
  capacity_ = WindowBytes();
  buf_.reset(new uint8_t[capacity_]);
  return true;
}

size_t TFRecordReader::Fill(uint8_t* dst, size_t capacity) {
  if (stream_end_) return 0;
  if (inflate_) {
    size_t produced = 0;
    switch (inflate_->Read(dst, capacity, &produced)) {
      case InflateStream::Status::kOk:
        stream_bytes_ += produced;
        return produced;
      case InflateStream::Status::kEnd: break;
      case InflateStream::Status::kIoError:
        stream_error_kind_ = ReadErrorKind::kIo;
        stream_error_ = inflate_->error();
        break;
      case InflateStream::Status::kDataError:
        stream_error_kind_ = ReadErrorKind::kDecompression;
        stream_error_ = inflate_->error();
        break;
    }
    stream_end_ = true;
    inflate_->SetQueue(nullptr);  // nothing more to read: its blocks go now, not with the reader
    return 0;
  }
  while (true) {
    ssize_t n = queue_ ? queue_->Read(dst, capacity) : ::read(fd_, dst, capacity);
    if (n > 0) {
      plain_file_offset_ += static_cast<uint64_t>(n);
      stream_bytes_ += static_cast<uint64_t>(n);
      return static_cast<size_t>(n);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      stream_error_kind_ = ReadErrorKind::kIo;
      stream_error_ = std::string("read failed: ") + std::strerror(errno);
    }
    stream_end_ = true;
    queue_.reset();  // nothing more to read: its blocks go now, not with the reader
    return 0;
  }
}

bool TFRecordReader::Ensure(size_t n) {
  if (end_ - begin_ >= n) return true;
  if (queue_ != nullptr && begin_ == end_) {
    // Everything shown is consumed: show the next block in place rather than copy it.
    DropView();
    begin_ = end_ = 0;
    const uint8_t* data = nullptr;
    const ssize_t got = queue_->Peek(&data);
    if (got > 0) {  // else the end, an error or past the blocks: Fill below tells which
      view_ = data;
      viewed_ = static_cast<size_t>(got);
      end_ = viewed_;
      plain_file_offset_ += viewed_;
      stream_bytes_ += viewed_;
      if (end_ >= n) return true;
    }
  }
  Unview();  // a record runs on past the block shown: it is put together in buf_
  // A window grown for one huge record is given back once records are small again.
  if (capacity_ > 4 * std::max(n, WindowBytes())) Reallocate(std::max(n, WindowBytes()));
  while (end_ - begin_ < n) {
    if (end_ == capacity_) {
      if (begin_ > 0) {
        // Move the partial record to the front.
        std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
      } else {
        // Grow by doubling as data actually arrives, never straight to the length a header
        // claims: a corrupt (or hostile) length with a valid CRC then ends as a truncated record
        // instead of a huge allocation.
        Reallocate(std::min(n, std::max(2 * capacity_, WindowBytes())));
      }
    }
    // From a queue's block only what the record lacks: the rest of it is shown in place next.
    // (Past the blocks, in a file that grew, the queue reads on with pread: whole windows.)
    const size_t want =
        queue_ && queue_->in_blocks() ? std::min(capacity_ - end_, n - (end_ - begin_)) : capacity_ - end_;
    const size_t got = Fill(buf_.get() + end_, want);
    if (got == 0) return stream_error_.empty();
    end_ += got;
  }
  return true;
}

void TFRecordReader::Unview() {
  if (viewed_ == 0) return;
  const size_t shown = viewed_;
  CopyViewToBuffer();
  queue_->Consume(shown);
}

void TFRecordReader::DropView() {
  if (viewed_ > 0) queue_->Consume(viewed_);
  viewed_ = 0;
}

void TFRecordReader::CopyViewToBuffer() {
  const size_t rest = end_ - begin_;
  if (capacity_ < rest) {
    capacity_ = std::max(rest, WindowBytes());
    buf_.reset(new uint8_t[capacity_]);
  }
  std::memcpy(buf_.get(), view_ + begin_, rest);
  viewed_ = 0;
  begin_ = 0;
  end_ = rest;
}

std::unique_ptr<uint8_t[]> TFRecordReader::Reallocate(size_t capacity) {
  std::unique_ptr<uint8_t[]> fresh(new uint8_t[capacity]);
  std::memcpy(fresh.get(), buf_.get() + begin_, end_ - begin_);
  std::swap(buf_, fresh);
  capacity_ = capacity;
  end_ -= begin_;
  begin_ = 0;
  return fresh;
}

size_t TFRecordReader::FillDirect(uint8_t* dst, size_t n, size_t min_tail, size_t max_tail) {
  DropView();  // the caller copied what it needed of the block
  begin_ = end_ = 0;
  size_t got = 0;
  if (inflate_ || queue_) {
    while (got < n) {
      const size_t m = Fill(dst + got, n - got);
      if (m == 0) return got;
      got += m;
    }
    while (end_ < min_tail) {
      const size_t m = Fill(buf_.get() + end_, max_tail - end_);
      if (m == 0) break;
      end_ += m;
    }
    return got;
  }
  // Plain: payload and tail in one readv; the page cache fills both in one call.
  while ((got < n || end_ < min_tail) && !stream_end_) {
    iovec iov[2];
    int count = 0;
    if (got < n) iov[count++] = {dst + got, n - got};
    iov[count++] = {buf_.get() + end_, max_tail - end_};
    const ssize_t r = ::readv(fd_, iov, count);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r < 0) {
        stream_error_kind_ = ReadErrorKind::kIo;
        stream_error_ = std::string("read failed: ") + std::strerror(errno);
      }
      stream_end_ = true;
      break;
    }
    plain_file_offset_ += static_cast<uint64_t>(r);
    stream_bytes_ += static_cast<uint64_t>(r);
    const size_t to_dst = std::min(static_cast<size_t>(r), n - got);
    got += to_dst;
    end_ += static_cast<size_t>(r) - to_dst;
  }
  return got;
}

TFRecordReader::Status TFRecordReader::ReadDirect(RecordAllocator& allocator, uint64_t length, Record* record,
                                                  ReadError* error) {
  const size_t total = kRecordHeaderBytes + static_cast<size_t>(length) + kRecordFooterBytes;
  uint8_t* dst = allocator.Allocate(length);  // first: if it throws, nothing has changed
  const size_t have = end_ - begin_ - kRecordHeaderBytes;  // payload bytes in the window, < length
  if (have > 0) std::memcpy(dst, window() + begin_ + kRecordHeaderBytes, have);
  const size_t missing = static_cast<size_t>(length) - have;
  // The tail: the data CRC, and the next record's header so that the next call need not read
  // (nor read ahead into the window a payload it would then copy).
  const size_t got = FillDirect(dst + have, missing, kRecordFooterBytes, kRecordFooterBytes + kRecordHeaderBytes);
  if (!stream_error_.empty()) return MakeError(stream_error_kind_, stream_error_, error);
  if (got < missing || end_ - begin_ < kRecordFooterBytes) {
    const size_t present = kRecordHeaderBytes + have + got + (end_ - begin_);
    return MakeError(ReadErrorKind::kTruncatedRecord,
                     "file ends inside the record: expected " + std::to_string(total) + " bytes (" +
                         std::to_string(length) + " data + 16 framing), " + std::to_string(present) + " present" +
                         ShrankNote(offset_ + present),
                     error);
  }
  const uint8_t* footer = window() + begin_;
  if (options_.verify_crc && MaskedCrc32c(dst, length) != LoadU32(footer)) {
    Status s = MakeError(ReadErrorKind::kCorruptedData, "data CRC mismatch over " + std::to_string(length) + " bytes",
                         error);
    begin_ += kRecordFooterBytes;
    offset_ += total;
    ++index_;
    return s;
  }
  record->data = std::span<const uint8_t>(dst, static_cast<size_t>(length));
  record->index = index_;
  record->offset = offset_;
  begin_ += kRecordFooterBytes;
  offset_ += total;
  ++index_;
  ++records_read_;
  return Status::kRecord;
}

TFRecordReader::Status TFRecordReader::Next(Record* record, ReadError* error) { return Read(nullptr, record, error); }

TFRecordReader::Status TFRecordReader::NextInto(RecordAllocator& allocator, Record* record, ReadError* error) {
  return Read(&allocator, record, error);
}

TFRecordReader::Status TFRecordReader::Read(RecordAllocator* allocator, Record* record, ReadError* error) {
  retired_queue_.reset();  // the last record is no longer needed (waits for that queue's reads)
  retired_buf_.reset();
  if (done_) return Status::kEnd;
  if (!opened_ && !Open(error)) return Status::kError;

  // The rest of a too-large record the last call reported (a plain file's: a compressed file's
  // is skipped by that call already).
  if (discard_ > 0 && !DiscardTooLarge()) {
    if (!stream_error_.empty()) return MakeError(stream_error_kind_, stream_error_, error);
    // Not the bytes missing: a corrupt length near 2^64 made that a 20-digit number.
    return MakeError(ReadErrorKind::kTruncatedRecord,
                     "the file ends " + std::to_string(discard_total_ - discard_) +
                         " bytes into the skipped too-large record (header included): its length field is "
                         "corrupt, or the file was cut short" +
                         ShrankNote(offset_ + (discard_total_ - discard_)),
                     error);
  }

  if (!Ensure(kRecordHeaderBytes)) return MakeError(stream_error_kind_, stream_error_, error);
  const size_t have = end_ - begin_;
  if (have == 0) {
    // A plain file that ends before the size it had when opened shrank while it was read
    // (rewritten in place: `cp new old`, O_TRUNC): the records past its new end are gone. Said,
    // not a silent end at a record boundary (a cut inside a record is a truncated record).
    if (plain_file_size_ > 0 && compression_ == Compression::kNone && offset_ < plain_file_size_) {
      return MakeError(ReadErrorKind::kTruncatedRecord,
                       "the file ends here, at byte " + std::to_string(offset_) + ", but had " +
                           std::to_string(plain_file_size_) +
                           " bytes when it was opened: it shrank while it was read (rewritten in place?), and the "
                           "records that were past this point are not read",
                       error);
    }
    // The same for a compressed file cut at the end of a gzip member (a cut inside one is the
    // inflater's "unexpected end" error): its stream ends cleanly there.
    if (inflate_ && inflate_->input_ended() && inflate_->input_offset() < file_size_) {
      return MakeError(ReadErrorKind::kTruncatedRecord,
                       "the compressed file ends here, at compressed byte " +
                           std::to_string(inflate_->input_offset()) +
                           (compression_ == Compression::kGzip ? " (where a gzip member ends)" : "") + ", but had " +
                           std::to_string(file_size_) +
                           " bytes when it was opened: it shrank while it was read (rewritten in place?), and the "
                           "records that were past this point are not read",
                       error);
    }
    // A file written over in place with records where the old ones were passes every CRC, its
    // records a mix of both versions (helper-156): said at its end, one fstat per file.
    if (const std::string change = ChangeSinceOpen(); !change.empty()) {
      return MakeError(ReadErrorKind::kFileChanged,
                       change + "; the " + std::to_string(index_) +
                           " records read from it may mix its old and new contents (rewritten in place, or "
                           "appended to?); replace a data file by renaming a new one over it",
                       error);
    }
    // The end: the queue's blocks and the window go now, not when the reader is destroyed (a
    // read-ahead stream lives on until its last records are taken, while the next file's
    // blocks are already being read).
    done_ = true;
    viewed_ = 0;
    queue_.reset();
    buf_.reset();
    capacity_ = begin_ = end_ = 0;
    return Status::kEnd;
  }
  if (have < kRecordHeaderBytes) {
    return MakeError(ReadErrorKind::kTruncatedRecord,
                     "file ends inside the record header: expected " + std::to_string(kRecordHeaderBytes) +
                         " header bytes, " + std::to_string(have) + " present" + ShrankNote(offset_ + have),
                     error);
  }
  const uint8_t* header = window() + begin_;
  const uint64_t length = LoadU64(header);
  if (options_.verify_crc && MaskedCrc32c(header, 8) != LoadU32(header + 8)) {
    // In a GZIP/ZLIB stream such a length is most often bytes decoded past damage to the
    // deflate stream (ISA-L accepts some damaged block headers and decodes with them for a
    // while before it fails): the stream's own error, where it fails soon after, is the cause,
    // and is what the zlib backend reports at this record.
    std::string why;
    if (inflate_ && DecompressionErrorAhead(&why)) return MakeError(ReadErrorKind::kDecompression, why, error);
    std::string detail = "length CRC mismatch (length field reads " + std::to_string(length) + ")";
    if (index_ == 0 && compression_ == Compression::kNone) {
      std::string_view looks = LooksLike(header, kRecordHeaderBytes);
      if (!looks.empty()) {
        detail += "; the file looks like " + std::string(looks) + ": set compression: " + std::string(looks) +
                  " (or auto)";
      } else {
        detail += "; this does not look like a TFRecord file";
      }
    }
    return MakeError(ReadErrorKind::kCorruptedLength, detail, error);
  }
  if (length > options_.max_record_bytes) {
    // A plain file's size tells a length that cannot be genuine, which no max_record_bytes fixes.
    const uint64_t after_header = offset_ + kRecordHeaderBytes;
    const uint64_t left = plain_file_size_ > after_header ? plain_file_size_ - after_header : 0;
    const bool beyond_file = plain_file_size_ > 0 && SaturatingAdd(length, kRecordFooterBytes) > left;
    const std::string limit = options_.max_record_bytes_why.empty()
                                  ? "max_record_bytes " + std::to_string(options_.max_record_bytes)
                                  : options_.max_record_bytes_why;
    const std::string hint =
        beyond_file ? " (the file has only " + std::to_string(left) +
                          " bytes after this header: the length is corrupt, or the file was cut short)"
                    : options_.max_record_bytes_why.empty() ? " (raise max_record_bytes if the record is genuine)"
                                                             : "";
    Status s = MakeError(ReadErrorKind::kRecordTooLarge,
                         "length " + std::to_string(length) + " bytes exceeds " + limit + hint, error);
    if (beyond_file) {
      // Nothing can follow it: skipping would only run into the end of the file and report the
      // same bad length a second time (as a truncated record). The file ends here.
      EndFile();
      error->recoverable = false;
      return s;
    }
    // Saturating: a length near 2^64 (with a valid length CRC) must not wrap; the skip then
    // runs into the end of the file (a truncated record).
    discard_total_ = SaturatingAdd(kRecordHeaderBytes + kRecordFooterBytes, length);
    discard_ = discard_total_;
    if (inflate_ && !DiscardTooLarge()) {
      // A compressed file has no size to judge the length by: it is skipped now, so that one
      // that runs past the end of the stream is one error (it counted as two), at this record.
      if (!stream_error_.empty()) return MakeError(stream_error_kind_, stream_error_, error);
      s = MakeError(ReadErrorKind::kRecordTooLarge,
                    "length " + std::to_string(length) + " bytes exceeds " + limit + ", and the file ends " +
                        std::to_string(discard_total_ - discard_) +
                        " bytes into this record (header included): the length is corrupt, or the file was cut short" +
                        ShrankNote(offset_ + (discard_total_ - discard_)),
                    error);
      EndFile();
      error->recoverable = false;
    }
    return s;
  }
  if (allocator != nullptr) {
    const size_t have = end_ - begin_ - kRecordHeaderBytes;
    if (have < length && length - have >= options_.direct_read_min_bytes) {
      // Allocate what the header claims only when it is backed (see the header comment).
      const uint64_t unread_file = plain_file_size_ > plain_file_offset_ ? plain_file_size_ - plain_file_offset_ : 0;
      const bool backed = length <= options_.buffer_bytes ||
                          (inflate_ == nullptr && length - have + kRecordFooterBytes <= unread_file);
      if (backed) return ReadDirect(*allocator, length, record, error);
    }
  }
  const size_t total = kRecordHeaderBytes + static_cast<size_t>(length) + kRecordFooterBytes;
  if (!Ensure(total)) return MakeError(stream_error_kind_, stream_error_, error);
  if (end_ - begin_ < total) {
    return MakeError(ReadErrorKind::kTruncatedRecord,
                     "file ends inside the record: expected " + std::to_string(total) + " bytes (" +
                         std::to_string(length) + " data + 16 framing), " + std::to_string(end_ - begin_) +
                         " present" + ShrankNote(offset_ + (end_ - begin_)),
                     error);
  }
  const uint8_t* data = window() + begin_ + kRecordHeaderBytes;
  if (options_.verify_crc && MaskedCrc32c(data, length) != LoadU32(data + length)) {
    Status s = MakeError(ReadErrorKind::kCorruptedData,
                         "data CRC mismatch over " + std::to_string(length) + " bytes", error);
    begin_ += total;
    offset_ += total;
    ++index_;
    return s;
  }
  if (allocator != nullptr) {
    uint8_t* dst = allocator->Allocate(length);
    if (length > 0) std::memcpy(dst, data, static_cast<size_t>(length));
    data = dst;
  }
  record->data = std::span<const uint8_t>(data, static_cast<size_t>(length));
  record->index = index_;
  record->offset = offset_;
  begin_ += total;
  offset_ += total;
  ++index_;
  ++records_read_;
  return Status::kRecord;
}

}  // namespace ringfeed
