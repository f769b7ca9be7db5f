// InflateStream: the uncompressed bytes of a GZIP or ZLIB file, produced on demand from a file
// descriptor through a bounded input buffer (never the whole file in memory).
//
// GZIP (RFC 1952): any number of concatenated members, any optional header fields (FEXTRA,
// FNAME, FCOMMENT, FHCRC), any deflate block types; trailing zero bytes after the last member
// are ignored, as `gzip -d` does. Other trailing bytes are a decompression error, and so are
// zero bytes with more data after them (a member overwritten with zeros: not padding).
// ZLIB (RFC 1950): one stream; data after its end is a decompression error.
// Backends: ISA-L igzip (isal_inflate, about 2x zlib) or zlib, chosen per stream.
//
// Input: read() calls of up to the input buffer's size, or a ReadQueue (SetQueue: several reads
// in flight, for storage with a round trip per read), whose blocks are copied into the buffer.
//
// Thread-safety: one thread at a time per stream. The fd is borrowed, not closed; a queue given
// to SetQueue is owned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "format/compression.h"
#include "format/read_queue.h"

namespace ringfeed {

class InflateStream {
 public:
  enum class Status { kOk, kEnd, kIoError, kDataError };

  // `compression` must be kGzip or kZlib. `input_bytes` is the size of the compressed-input
  // buffer (bytes read from `fd` per read() call, or the queue's block size), plus 8 bytes kept
  // from before (a decoder may hand back what it read ahead).
  InflateStream(int fd, Compression compression, InflateBackend backend, size_t input_bytes);
  ~InflateStream();
  InflateStream(const InflateStream&) = delete;
  InflateStream& operator=(const InflateStream&) = delete;

  // Writes between 1 and `capacity` uncompressed bytes to `dst` and sets *produced (kOk), or
  // reports the end of the stream (kEnd, *produced = 0), or an error (kIoError / kDataError)
  // described by error(). After an error or kEnd every further call returns the same status.
  // Every byte inflated before a data error is returned first (kOk, in one call or more, however
  // `capacity` cuts them up); the error comes after them.
  Status Read(uint8_t* dst, size_t capacity, size_t* produced);

  // Human-readable reason of the last error, e.g. "isa-l: invalid deflate block, found at compressed
  // byte 1234".
  const std::string& error() const { return error_; }
  // The stream failed with kDataError (its bytes before the error may still be to come).
  bool data_error() const { return final_ == Status::kDataError; }
  // Bytes of the compressed file consumed by the decoder so far.
  uint64_t compressed_offset() const { return file_offset_ - (in_end_ - in_pos_); }
  // Bytes of the file read so far: where the next read starts.
  uint64_t input_offset() const { return file_offset_; }
  // A read found the end of the file (0 bytes).
  bool input_ended() const { return eof_; }
  // The data error is zero bytes between two members (StartNextMember): the members after
  // them may be intact, but are not read.
  bool zeros_inside() const { return zeros_inside_; }
  // Reads the compressed bytes through `queue` from now on, instead of read(): it must read
  // the same fd from input_offset() on. nullptr: read() again, from input_offset() (the fd is
  // moved there). The previous queue is destroyed (its reads in flight are its own business,
  // ~ReadQueue).
  void SetQueue(std::unique_ptr<ReadQueue> queue);
  ReadQueue* queue() const { return queue_.get(); }
  InflateBackend backend() const { return backend_; }

  class Decoder;  // one backend (ISA-L or zlib); defined in inflate_stream.cc

 private:
  static constexpr size_t kHistoryBytes = 8;  // consumed bytes kept for Decoder hand-backs
  bool FillInput();  // reads more compressed bytes; false on EOF or error
  void Grow();       // doubles the input buffer (when it is full and more is needed)
  Status Fail(Status status, std::string message);
  bool StartNextMember();
  bool ConsumeGzipHeader();  // ISA-L path: parses (and checks) a gzip member header itself  // at a member boundary: true when another gzip member follows

  int fd_;
  bool zeros_inside_ = false;  // zeros_inside()
  Compression compression_;
  InflateBackend backend_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<uint8_t[]> in_buf_;
  size_t in_capacity_;
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
  uint64_t file_offset_ = 0;  // bytes read from fd so far
  std::unique_ptr<ReadQueue> queue_;  // reads the input when set (SetQueue)
  bool eof_ = false;
  bool member_done_ = false;
  bool parse_gzip_header_;  // ISA-L + GZIP: headers are parsed here, not by the decoder
                            // (a header over 1 MiB switches the stream to zlib instead)
  bool header_pending_;
  bool decoder_failed_ = false;  // the decoder found a data error (and may hold bytes before it)
  Status final_ = Status::kOk;  // sticky terminal status
  std::string error_;
};

}  // namespace ringfeed
