#include "format/inflate_stream.h"

#include <errno.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#ifdef RINGFEED_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

namespace ringfeed {

// One decompressor. Step() consumes from [*in, *in + *in_avail) and writes to
// [*out, *out + *out_avail), advancing both.
class InflateStream::Decoder {
 public:
  // kTrailerError: the data inflated, but the member's trailer (CRC-32/Adler-32 or length)
  // does not match it; found where the step stopped, past the data it checks.
  enum class Result { kProgress, kMemberEnd, kError, kTrailerError };
  virtual ~Decoder() = default;
  virtual void Reset() = 0;  // ready for the next gzip member
  virtual Result Step(const uint8_t** in, size_t* in_avail, uint8_t** out, size_t* out_avail,
                      std::string* error) = 0;
  // After Step returned kError: writes up to `capacity` bytes more that were inflated before the
  // error but not yet written to Step's output, and returns how many (0: none left).
  virtual size_t TakeOutputBeforeError(uint8_t* /*out*/, size_t /*capacity*/) { return 0; }
};

namespace {

// After either library's "needs a dictionary": a zlib stream compressed with a preset
// dictionary (RFC 1950 FDICT), which no TFRecord writer makes and no reader can inflate.
constexpr const char* kPresetDictionaryNote =
    " (a zlib stream made with a preset dictionary, FDICT: TFRecord files never are, and TensorFlow cannot read "
    "it either)";

// Both libraries count in 32 bits.
constexpr size_t kMaxStep = size_t{1} << 30;

class ZlibDecoder final : public InflateStream::Decoder {
 public:
  explicit ZlibDecoder(Compression c) : window_bits_(c == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS) {
    std::memset(&z_, 0, sizeof z_);
    ok_ = inflateInit2(&z_, window_bits_) == Z_OK;
  }
  ~ZlibDecoder() override {
    if (ok_) inflateEnd(&z_);
  }
  void Reset() override { inflateReset(&z_); }
  Result Step(const uint8_t** in, size_t* in_avail, uint8_t** out, size_t* out_avail,
              std::string* error) override {
    if (!ok_) {
      *error = "zlib inflateInit2 failed (out of memory?)";
      return Result::kError;
    }
    z_.next_in = const_cast<Bytef*>(*in);
    z_.avail_in = static_cast<uInt>(std::min(*in_avail, kMaxStep));
    z_.next_out = *out;
    z_.avail_out = static_cast<uInt>(std::min(*out_avail, kMaxStep));
    const uInt in_before = z_.avail_in, out_before = z_.avail_out;
    int rc = inflate(&z_, Z_NO_FLUSH);
    size_t used = in_before - z_.avail_in, made = out_before - z_.avail_out;
    *in += used;
    *in_avail -= used;
    *out += made;
    *out_avail -= made;
    if (rc == Z_STREAM_END) return Result::kMemberEnd;
    if (rc == Z_OK || rc == Z_BUF_ERROR) return Result::kProgress;
    *error = std::string("zlib: ") + (z_.msg ? z_.msg : zError(rc)) + (rc == Z_NEED_DICT ? kPresetDictionaryNote : "");
    // zlib tells a trailer mismatch from other data errors only by its message.
    const bool trailer = rc == Z_DATA_ERROR && z_.msg != nullptr &&
                         (std::strcmp(z_.msg, "incorrect data check") == 0 ||
                          std::strcmp(z_.msg, "incorrect length check") == 0);
    return trailer ? Result::kTrailerError : Result::kError;
  }

 private:
  z_stream z_;
  int window_bits_;
  bool ok_ = false;
};

#ifdef RINGFEED_HAVE_ISAL
const char* IsalError(int rc) {
  switch (rc) {
    case ISAL_INVALID_BLOCK: return "invalid deflate block";
    case ISAL_INVALID_SYMBOL: return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK: return "invalid lookback distance";
    case ISAL_INVALID_WRAPPER: return "invalid gzip/zlib header";
    case ISAL_UNSUPPORTED_METHOD: return "unsupported compression method";
    case ISAL_INCORRECT_CHECKSUM: return "the data does not match the member's trailer (CRC-32/Adler-32 or length)";
    case ISAL_NEED_DICT: return "stream needs a preset dictionary";  // kPresetDictionaryNote follows
    default: return "inflate error";
  }
}

class IsalDecoder final : public InflateStream::Decoder {
 public:
  explicit IsalDecoder(Compression c)
      // For GZIP the member header is parsed by InflateStream (ISA-L 2.30 miscomputes FHCRC when
    // the header spans two input buffers); ISA-L then inflates and verifies CRC-32 and ISIZE.
    : state_(std::make_unique<inflate_state>()),
      flag_(c == Compression::kGzip ? ISAL_GZIP_NO_HDR_VER : ISAL_ZLIB) {
    Reset();
  }
  void Reset() override {
    isal_inflate_init(state_.get());
    state_->crc_flag = flag_;
  }
  Result Step(const uint8_t** in, size_t* in_avail, uint8_t** out, size_t* out_avail,
              std::string* error) override {
    inflate_state& s = *state_;
    s.next_in = const_cast<uint8_t*>(*in);
    s.avail_in = static_cast<uint32_t>(std::min(*in_avail, kMaxStep));
    s.next_out = *out;
    s.avail_out = static_cast<uint32_t>(std::min(*out_avail, kMaxStep));
    const uint32_t in_before = s.avail_in, out_before = s.avail_out;
    int rc = isal_inflate(&s);
    size_t used = in_before - s.avail_in, made = out_before - s.avail_out;
    *in += used;
    *in_avail -= used;
    *out += made;
    *out_avail -= made;
    if (rc < 0 || rc == ISAL_NEED_DICT) {
      *error = std::string("isa-l: ") + IsalError(rc) + (rc == ISAL_NEED_DICT ? kPresetDictionaryNote : "");
      if (rc == ISAL_INCORRECT_CHECKSUM) return Result::kTrailerError;
      HandBackUnread(in, in_avail);  // where it stopped does not depend on how much it was given
      return Result::kError;
    }
    if (s.block_state != ISAL_BLOCK_FINISH) return Result::kProgress;
    // At the end of a stream the whole bytes left in the bit buffer belong to whatever follows
    // (another member, padding, garbage).
    HandBackUnread(in, in_avail);
    return Result::kMemberEnd;
  }
  // isal_inflate first inflates into its own buffer (inflate_state::tmp_out_buffer) and copies
  // what fits into the caller's output; on a data error it returns at once, and what did not fit
  // stays in that buffer, from tmp_out_processed to tmp_out_valid (igzip_inflate.c, ISA-L 2.30).
  // Those are good bytes from before the damage: up to ~32 KiB, dozens of records.
  size_t TakeOutputBeforeError(uint8_t* out, size_t capacity) override {
    inflate_state& s = *state_;
    if (s.tmp_out_processed < 0 || s.tmp_out_processed >= s.tmp_out_valid ||
        static_cast<size_t>(s.tmp_out_valid) > sizeof s.tmp_out_buffer) {
      return 0;
    }
    const size_t n = std::min(capacity, static_cast<size_t>(s.tmp_out_valid - s.tmp_out_processed));
    std::memcpy(out, s.tmp_out_buffer + s.tmp_out_processed, n);
    s.tmp_out_processed += static_cast<int32_t>(n);
    return n;
  }

 private:
  // ISA-L reads ahead up to 8 bytes into its bit buffer: the whole bytes still there go back to
  // the input (InflateStream keeps the last 8 consumed bytes in its buffer for this).
  void HandBackUnread(const uint8_t** in, size_t* in_avail) {
    const size_t unread = static_cast<size_t>(std::max(state_->read_in_length, 0)) / 8;
    *in -= unread;
    *in_avail += unread;
    state_->read_in_length = 0;
  }

  std::unique_ptr<inflate_state> state_;
  uint32_t flag_;
};
#endif

std::unique_ptr<InflateStream::Decoder> MakeDecoder(Compression c, InflateBackend b) {
#ifdef RINGFEED_HAVE_ISAL
  if (b == InflateBackend::kIsal) return std::make_unique<IsalDecoder>(c);
#endif
  (void)b;
  return std::make_unique<ZlibDecoder>(c);
}

// RFC 1952 member header: ID1 ID2 CM FLG MTIME(4) XFL OS [XLEN extra] [name\0] [comment\0] [CRC16].
enum class HeaderParse { kComplete, kIncomplete, kInvalid };

HeaderParse ParseGzipHeader(const uint8_t* p, size_t n, size_t* length, std::string* why) {
  constexpr uint8_t kFtext = 1, kFhcrc = 2, kFextra = 4, kFname = 8, kFcomment = 16;
  // The magic is judged on what has come, however little: a short file that is not gzip says so.
  if ((n >= 1 && p[0] != 0x1f) || (n >= 2 && p[1] != 0x8b)) {
    *why = "not in gzip format (no 1f 8b magic)";
    return HeaderParse::kInvalid;
  }
  if (n < 10) return HeaderParse::kIncomplete;
  if (p[2] != 8) {
    *why = "unsupported gzip compression method " + std::to_string(p[2]);
    return HeaderParse::kInvalid;
  }
  const uint8_t flags = p[3];
  if (flags & 0xe0) {
    *why = "reserved gzip header flags set";
    return HeaderParse::kInvalid;
  }
  (void)kFtext;
  size_t pos = 10;
  if (flags & kFextra) {
    if (n < pos + 2) return HeaderParse::kIncomplete;
    pos += 2 + (p[pos] | (size_t{p[pos + 1]} << 8));
    if (n < pos) return HeaderParse::kIncomplete;
  }
  for (uint8_t flag : {kFname, kFcomment}) {
    if (!(flags & flag)) continue;
    const void* nul = std::memchr(p + pos, 0, n - pos);
    if (nul == nullptr) return HeaderParse::kIncomplete;
    pos = static_cast<size_t>(static_cast<const uint8_t*>(nul) - p) + 1;
  }
  if (flags & kFhcrc) {
    if (n < pos + 2) return HeaderParse::kIncomplete;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, p, static_cast<uInt>(pos))) & 0xffff;
    if (crc != (p[pos] | (uint32_t{p[pos + 1]} << 8))) {
      *why = "gzip header CRC (FHCRC) mismatch";
      return HeaderParse::kInvalid;
    }
    pos += 2;
  }
  *length = pos;
  return HeaderParse::kComplete;
}

}  // namespace

bool InflateStream::ConsumeGzipHeader() {
  constexpr size_t kMaxHeaderBytes = size_t{1} << 20;  // buffered at most; FEXTRA is <= 64 KiB
  while (true) {
    size_t length = 0;
    std::string why;
    switch (ParseGzipHeader(in_buf_.get() + in_pos_, in_end_ - in_pos_, &length, &why)) {
      case HeaderParse::kComplete:
        in_pos_ += length;
        header_pending_ = false;
        return true;
      case HeaderParse::kInvalid:
        Fail(Status::kDataError, why + " at compressed byte " + std::to_string(compressed_offset()));
        return false;
      case HeaderParse::kIncomplete: break;
    }
    if (in_end_ - in_pos_ >= kMaxHeaderBytes) {
      // A header this long (huge FNAME/FCOMMENT/FEXTRA) is legal: let zlib, which parses
      // headers as a stream, decompress the rest of the file instead of buffering it.
      backend_ = InflateBackend::kZlib;
      decoder_ = MakeDecoder(compression_, backend_);
      parse_gzip_header_ = header_pending_ = false;
      return true;
    }
    if (!FillInput()) {
      if (final_ != Status::kOk) return false;
      if (file_offset_ == 0) {
        final_ = Status::kEnd;  // empty file: no member at all
        return false;
      }
      Fail(Status::kDataError, "unexpected end of compressed data inside a gzip header at compressed byte " +
                                   std::to_string(file_offset_));
      return false;
    }
  }
}

InflateStream::InflateStream(int fd, Compression compression, InflateBackend backend, size_t input_bytes)
    : fd_(fd),
      compression_(compression),
      backend_(ResolveInflateBackend(backend)),
      decoder_(MakeDecoder(compression, backend_)),
      // Room for the kept history on top, so that a whole queued block (input_bytes is the
      // block size then) fits after each compaction instead of all but 8 bytes of it.
      in_buf_(new uint8_t[std::max<size_t>(input_bytes, 64) + kHistoryBytes]),
      in_capacity_(std::max<size_t>(input_bytes, 64) + kHistoryBytes),
      parse_gzip_header_(compression == Compression::kGzip && backend_ == InflateBackend::kIsal),
      header_pending_(parse_gzip_header_) {}

InflateStream::~InflateStream() = default;

void InflateStream::SetQueue(std::unique_ptr<ReadQueue> queue) {
  queue_ = std::move(queue);
  if (!queue_ && !eof_) ::lseek(fd_, static_cast<off_t>(file_offset_), SEEK_SET);
}

bool InflateStream::FillInput() {
  if (eof_) return false;
  // Compact, keeping the last kHistoryBytes consumed bytes (a decoder may hand them back).
  if (in_pos_ > kHistoryBytes) {
    const size_t drop = in_pos_ - kHistoryBytes;
    std::memmove(in_buf_.get(), in_buf_.get() + drop, in_end_ - drop);
    in_end_ -= drop;
    in_pos_ -= drop;
  }
  if (in_end_ == in_capacity_) Grow();
  while (true) {
    ssize_t n = queue_ ? queue_->Read(in_buf_.get() + in_end_, in_capacity_ - in_end_)
                       : ::read(fd_, in_buf_.get() + in_end_, in_capacity_ - in_end_);
    if (n > 0) {
      in_end_ += static_cast<size_t>(n);
      file_offset_ += static_cast<uint64_t>(n);
      return true;
    }
    if (n == 0) {
      eof_ = true;
      return false;
    }
    if (errno == EINTR) continue;
    Fail(Status::kIoError, std::string("read failed: ") + std::strerror(errno));
    return false;
  }
}

void InflateStream::Grow() {
  std::unique_ptr<uint8_t[]> bigger(new uint8_t[in_capacity_ * 2]);
  std::memcpy(bigger.get(), in_buf_.get(), in_end_);
  in_buf_ = std::move(bigger);
  in_capacity_ *= 2;
}

InflateStream::Status InflateStream::Fail(Status status, std::string message) {
  final_ = status;
  error_ = std::move(message);
  return status;
}

bool InflateStream::StartNextMember() {
  // Skip trailing zero padding; anything else must be a new gzip member.
  const uint64_t member_end = compressed_offset();
  while (true) {
    while (in_pos_ < in_end_ && in_buf_[in_pos_] == 0) ++in_pos_;
    if (in_pos_ < in_end_ || !FillInput()) break;
  }
  if (final_ != Status::kOk) return false;
  if (in_pos_ == in_end_) return false;  // clean end
  if (const uint64_t zeros = compressed_offset() - member_end; zeros > 0) {
    // Zero bytes with more after them are no padding: a member (or more) overwritten with
    // zeros, as a crash or a bad disk block leaves. Skipping them would lose its records
    // without a word (gzip -d stops there too, "trailing garbage ignored"; TensorFlow fails).
    zeros_inside_ = true;
    Fail(Status::kDataError, std::to_string(zeros) + (zeros == 1 ? " zero byte after the " : " zero bytes after the ") +
                                 (compression_ == Compression::kGzip ? "gzip member" : "zlib stream") +
                                 " that ends at compressed byte " + std::to_string(member_end) +
                                 ", then more data at compressed byte " + std::to_string(compressed_offset()) +
                                 ": not padding (that ends the file), so part of the file was overwritten with "
                                 "zeros, and the records it held are lost");
    return false;
  }
  if (compression_ == Compression::kGzip) {
    if (in_end_ - in_pos_ < 2) FillInput();
    if (in_end_ - in_pos_ >= 2 && in_buf_[in_pos_] == 0x1f && in_buf_[in_pos_ + 1] == 0x8b) {
      decoder_->Reset();
      member_done_ = false;
      header_pending_ = parse_gzip_header_;
      return true;
    }
    Fail(Status::kDataError, "trailing garbage after the last gzip member at compressed byte " +
                                 std::to_string(compressed_offset()));
  } else {
    Fail(Status::kDataError,
         "data after the end of the zlib stream at compressed byte " + std::to_string(compressed_offset()));
  }
  return false;
}

InflateStream::Status InflateStream::Read(uint8_t* dst, size_t capacity, size_t* produced) {
  *produced = 0;
  if (final_ != Status::kOk) {
    // Good bytes the decoder still holds from before a data error come first.
    if (decoder_failed_) *produced = decoder_->TakeOutputBeforeError(dst, capacity);
    return *produced > 0 ? Status::kOk : final_;
  }
  uint8_t* out = dst;
  size_t out_avail = capacity;
  while (out == dst) {
    if (member_done_ && !StartNextMember()) {
      if (final_ != Status::kOk) return final_;
      return final_ = Status::kEnd;
    }
    if (in_pos_ == in_end_ && !eof_ && !FillInput() && final_ != Status::kOk) return final_;
    if (header_pending_ && !ConsumeGzipHeader()) return final_;
    // Even with no input left the decoder may still hold output (ISA-L buffers internally),
    // so it is stepped until it makes no progress at all.
    const uint8_t* in = in_buf_.get() + in_pos_;
    size_t in_avail = in_end_ - in_pos_;
    std::string why;
    auto result = decoder_->Step(&in, &in_avail, &out, &out_avail, &why);
    const bool consumed = in != in_buf_.get() + in_pos_;
    in_pos_ = static_cast<size_t>(in - in_buf_.get());
    if (result == Decoder::Result::kError || result == Decoder::Result::kTrailerError) {
      // A trailer mismatch is found where the step stopped, past the data it checks. Other
      // damage is named where the decoder found it: the byte after the last one it used, not
      // where this step's input happened to end. The damage is there or before it (a changed
      // bit can decode as other valid symbols for a while). zlib finds it at the same byte
      // however the input is cut up. ISA-L's fast path (taken when a step has enough input)
      // names a byte up to 8 later, and ISA-L accepts some damaged block headers (and invalid
      // distance codes) and decodes with them for a while, writing bytes from past the damage
      // before it fails: the records' CRCs reject them, and TFRecordReader reports this error
      // at the first record they spoil (DecompressionErrorAhead).
      const uint64_t at = compressed_offset();
      Fail(Status::kDataError, result == Decoder::Result::kTrailerError
                                   ? why + ", at the trailer near compressed byte " + std::to_string(at)
                                   : why + ", found at compressed byte " + std::to_string(at));
      // What this step inflated before the error is handed out first, then what the decoder
      // still holds (the error comes after both): up to a whole buffer of good records ahead of
      // the damage. The records' own CRCs judge it; an error found only at the member's end (its
      // CRC-32) has all of it.
      decoder_failed_ = result == Decoder::Result::kError;
      *produced = static_cast<size_t>(out - dst);
      if (decoder_failed_ && out_avail > 0) *produced += decoder_->TakeOutputBeforeError(out, out_avail);
      return *produced > 0 ? Status::kOk : final_;
    }
    if (result == Decoder::Result::kMemberEnd) {
      member_done_ = true;
    } else if (out == dst && !consumed) {
      if (!eof_) {
        if (!FillInput() && final_ != Status::kOk) return final_;
        continue;
      }
      // EOF inside a member. An empty file (nothing ever read) has no member at all.
      if (file_offset_ == 0) return final_ = Status::kEnd;
      return Fail(Status::kDataError, "unexpected end of compressed data (file truncated?) at compressed byte " +
                                          std::to_string(file_offset_));
    }
  }
  *produced = static_cast<size_t>(out - dst);
  return Status::kOk;
}

}  // namespace ringfeed
