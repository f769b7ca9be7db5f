#include "format/tfrecord_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "format/crc32c.h"
#include "format/inflate_stream.h"

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

}  // namespace

std::string_view ReadErrorKindName(ReadErrorKind kind) {
  switch (kind) {
    case ReadErrorKind::kTruncatedRecord: return "truncated record";
    case ReadErrorKind::kCorruptedLength: return "corrupted record length";
    case ReadErrorKind::kCorruptedData: return "corrupted record data";
    case ReadErrorKind::kRecordTooLarge: return "record too large";
    case ReadErrorKind::kDecompression: return "decompression error";
    case ReadErrorKind::kIo: return "I/O error";
  }
  return "?";
}

TFRecordReader::TFRecordReader(std::string path, ReaderOptions options)
    : path_(std::move(path)), options_(options) {
  options_.buffer_bytes = std::max(options_.buffer_bytes, kMinBufferBytes);
}

TFRecordReader::~TFRecordReader() {
  inflate_.reset();
  if (fd_ >= 0) ::close(fd_);
}

uint64_t TFRecordReader::file_offset() const {
  return inflate_ ? inflate_->compressed_offset() : plain_file_offset_;
}

TFRecordReader::Status TFRecordReader::MakeError(ReadErrorKind kind, std::string detail, ReadError* error) {
  const bool recoverable = kind == ReadErrorKind::kCorruptedData || kind == ReadErrorKind::kRecordTooLarge;
  if (!recoverable) done_ = true;
  error->kind = kind;
  error->file = path_;
  error->record_index = index_;
  error->offset = offset_;
  error->recoverable = recoverable;
  if (buf_ == nullptr) {  // the file could not even be opened: no record position to name
    error->message = path_ + ": " + std::string(ReadErrorKindName(kind)) + ": " + detail;
    return Status::kError;
  }
  const bool compressed = compression_ == Compression::kGzip || compression_ == Compression::kZlib;
  error->message = path_ + ": record " + std::to_string(index_) + " at byte " + std::to_string(offset_) +
                   (compressed ? " of the uncompressed stream (" + std::string(CompressionName(compression_)) + ")" : "") +
                   ": " + std::string(ReadErrorKindName(kind)) + ": " + detail;
  return Status::kError;
}

bool TFRecordReader::Open(ReadError* error) {
  opened_ = true;
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    MakeError(ReadErrorKind::kIo, std::string("cannot open: ") + std::strerror(errno), error);
    return false;
  }
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint8_t head[16];
  ssize_t got = ::pread(fd_, head, sizeof head, 0);
  if (got < 0) {
    MakeError(ReadErrorKind::kIo, std::string("cannot read: ") + std::strerror(errno), error);
    return false;
  }
  compression_ = options_.compression;
  if (compression_ == Compression::kAuto) compression_ = DetectCompression(head, static_cast<size_t>(got));
  if (compression_ != Compression::kNone) {
    inflate_ = std::make_unique<InflateStream>(fd_, compression_, options_.inflate, options_.buffer_bytes);
  }
  capacity_ = options_.buffer_bytes;
  buf_.reset(new uint8_t[capacity_]);
  return true;
}

size_t TFRecordReader::Fill(uint8_t* dst, size_t capacity) {
  if (stream_end_) return 0;
  if (inflate_) {
    size_t produced = 0;
    switch (inflate_->Read(dst, capacity, &produced)) {
      case InflateStream::Status::kOk: return produced;
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
    return 0;
  }
  while (true) {
    ssize_t n = ::read(fd_, dst, capacity);
    if (n > 0) {
      plain_file_offset_ += static_cast<uint64_t>(n);
      return static_cast<size_t>(n);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      stream_error_kind_ = ReadErrorKind::kIo;
      stream_error_ = std::string("read failed: ") + std::strerror(errno);
    }
    stream_end_ = true;
    return 0;
  }
}

bool TFRecordReader::Ensure(size_t n) {
  if (end_ - begin_ >= n) return true;
  if (capacity_ - begin_ < n) {
    // Not enough room after begin_: move the partial record to the front, growing the window
    // when the record is larger than it. A window grown for one huge record is given back once
    // records are small again.
    size_t want = std::max(n, options_.buffer_bytes);
    if (want > capacity_ || capacity_ > 4 * want) {
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[want]);
      std::memcpy(bigger.get(), buf_.get() + begin_, end_ - begin_);
      buf_ = std::move(bigger);
      capacity_ = want;
    } else {
      std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
    }
    end_ -= begin_;
    begin_ = 0;
  }
  while (end_ - begin_ < n) {
    size_t got = Fill(buf_.get() + end_, capacity_ - end_);
    if (got == 0) return stream_error_.empty();
    end_ += got;
  }
  return true;
}

TFRecordReader::Status TFRecordReader::Next(Record* record, ReadError* error) {
  if (done_) return Status::kEnd;
  if (!opened_ && !Open(error)) return Status::kError;

  // Skip the rest of a too-large record (its payload and footer) without storing it.
  while (discard_ > 0) {
    if (begin_ == end_) {
      begin_ = end_ = 0;
      if (!Ensure(1) || begin_ == end_) {
        if (!stream_error_.empty()) return MakeError(stream_error_kind_, stream_error_, error);
        return MakeError(ReadErrorKind::kTruncatedRecord,
                         "file ends inside the skipped too-large record (" + std::to_string(discard_) +
                             " bytes missing)",
                         error);
      }
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(discard_, end_ - begin_));
    begin_ += n;
    discard_ -= n;
  }

  if (!Ensure(kRecordHeaderBytes)) return MakeError(stream_error_kind_, stream_error_, error);
  const size_t have = end_ - begin_;
  if (have == 0) {
    done_ = true;
    return Status::kEnd;
  }
  if (have < kRecordHeaderBytes) {
    return MakeError(ReadErrorKind::kTruncatedRecord,
                     "file ends inside the record header: expected " + std::to_string(kRecordHeaderBytes) +
                         " header bytes, " + std::to_string(have) + " present",
                     error);
  }
  const uint8_t* header = buf_.get() + begin_;
  const uint64_t length = LoadU64(header);
  if (options_.verify_crc && MaskedCrc32c(header, 8) != LoadU32(header + 8)) {
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
    Status s = MakeError(ReadErrorKind::kRecordTooLarge,
                         "length " + std::to_string(length) + " bytes exceeds max_record_bytes " +
                             std::to_string(options_.max_record_bytes) + " (raise max_record_bytes if the record is genuine)",
                         error);
    // Saturating: a length near 2^64 (with a valid length CRC) must not wrap the offset or the
    // bytes left to skip; the skip then runs into the end of the file (a truncated record).
    const uint64_t skip = SaturatingAdd(length, kRecordFooterBytes);
    begin_ += kRecordHeaderBytes;
    offset_ = SaturatingAdd(offset_, SaturatingAdd(kRecordHeaderBytes, skip));
    discard_ = skip;
    ++index_;
    return s;
  }
  const size_t total = kRecordHeaderBytes + static_cast<size_t>(length) + kRecordFooterBytes;
  if (!Ensure(total)) return MakeError(stream_error_kind_, stream_error_, error);
  if (end_ - begin_ < total) {
    return MakeError(ReadErrorKind::kTruncatedRecord,
                     "file ends inside the record: expected " + std::to_string(total) + " bytes (" +
                         std::to_string(length) + " data + 16 framing), " + std::to_string(end_ - begin_) +
                         " present",
                     error);
  }
  const uint8_t* data = buf_.get() + begin_ + kRecordHeaderBytes;
  if (options_.verify_crc && MaskedCrc32c(data, length) != LoadU32(data + length)) {
    Status s = MakeError(ReadErrorKind::kCorruptedData,
                         "data CRC mismatch over " + std::to_string(length) + " bytes", error);
    begin_ += total;
    offset_ += total;
    ++index_;
    return s;
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
