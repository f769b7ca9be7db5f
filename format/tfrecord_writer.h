// TFRecordWriter: writes TFRecord files (plain, GZIP or ZLIB) exactly as TensorFlow's
// tf.io.TFRecordWriter frames them. Used for the bundled sample data, benchmarks and tests.
//
// Errors throw std::runtime_error naming the file (writing is not on the data path).
// Thread-safety: one thread at a time per writer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <zlib.h>

#include "format/compression.h"

namespace ringfeed {

struct WriterOptions {
  Compression compression = Compression::kNone;  // kAuto is treated as kNone
  int level = 6;                                 // zlib level 0-9 for GZIP/ZLIB
  int strategy = Z_DEFAULT_STRATEGY;             // zlib strategy (Z_FIXED, Z_HUFFMAN_ONLY, ...)
};

class TFRecordWriter {
 public:
  TFRecordWriter(const std::string& path, WriterOptions options = {});
  ~TFRecordWriter();  // Close()s; errors there are swallowed: call Close() to see them
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  void Write(std::span<const uint8_t> record);
  void Write(std::string_view record) {
    Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(record.data()), record.size()));
  }
  void Close();

 private:
  void Emit(const uint8_t* data, size_t size);
  void Deflate(int flush);

  std::string path_;
  WriterOptions options_;
  std::FILE* file_ = nullptr;
  bool deflating_ = false;
  z_stream z_{};
  std::vector<uint8_t> out_;
};

// Frames one record (header + data + footer) into a byte string: handy for building test files.
std::string FrameRecord(std::string_view data);

}  // namespace ringfeed
