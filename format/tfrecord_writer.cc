#include "format/tfrecord_writer.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "format/crc32c.h"

namespace ringfeed {
namespace {

void AppendHeader(uint8_t* header, uint64_t length) {
  std::memcpy(header, &length, 8);
  uint32_t crc = MaskedCrc32c(header, 8);
  std::memcpy(header + 8, &crc, 4);
}

}  // namespace

std::string FrameRecord(std::string_view data) {
  std::string out(12 + data.size() + 4, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  AppendHeader(p, data.size());
  std::memcpy(p + 12, data.data(), data.size());
  uint32_t crc = MaskedCrc32c(data.data(), data.size());
  std::memcpy(p + 12 + data.size(), &crc, 4);
  return out;
}

TFRecordWriter::TFRecordWriter(const std::string& path, WriterOptions options)
    : path_(path), options_(options) {
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) throw std::runtime_error(path + ": cannot create: " + std::strerror(errno));
  if (options_.compression == Compression::kGzip || options_.compression == Compression::kZlib) {
    int bits = options_.compression == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
    if (deflateInit2(&z_, options_.level, Z_DEFLATED, bits, 8, options_.strategy) != Z_OK) {
      throw std::runtime_error(path + ": deflateInit2 failed");
    }
    deflating_ = true;
    out_.resize(1 << 16);
  }
}

TFRecordWriter::~TFRecordWriter() {
  try {
    Close();
  } catch (...) {
  }
}

// Feeds z_'s pending input through deflate and writes what comes out. Z_NO_FLUSH returns once
// the input is consumed; Z_FINISH once the stream is complete.
void TFRecordWriter::Deflate(int flush) {
  while (true) {
    z_.next_out = out_.data();
    z_.avail_out = static_cast<uInt>(out_.size());
    const int rc = deflate(&z_, flush);
    if (rc == Z_STREAM_ERROR) throw std::runtime_error(path_ + ": deflate failed");
    const size_t n = out_.size() - z_.avail_out;
    if (n > 0 && std::fwrite(out_.data(), 1, n, file_) != n) {
      throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
    }
    if (flush == Z_FINISH ? rc == Z_STREAM_END : z_.avail_out != 0) return;
  }
}

void TFRecordWriter::Emit(const uint8_t* data, size_t size) {
  if (!deflating_) {
    if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
      throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
    }
    return;
  }
  while (size > 0) {
    size_t chunk = std::min<size_t>(size, 1u << 30);
    z_.next_in = const_cast<Bytef*>(data);
    z_.avail_in = static_cast<uInt>(chunk);
    Deflate(Z_NO_FLUSH);
    data += chunk;
    size -= chunk;
  }
}

void TFRecordWriter::Write(std::span<const uint8_t> record) {
  if (file_ == nullptr) throw std::runtime_error(path_ + ": write after close");
  uint8_t header[12];
  AppendHeader(header, record.size());
  uint32_t crc = MaskedCrc32c(record.data(), record.size());
  Emit(header, sizeof header);
  Emit(record.data(), record.size());
  Emit(reinterpret_cast<const uint8_t*>(&crc), 4);
}

void TFRecordWriter::Close() {
  if (file_ == nullptr) return;
  if (deflating_) {
    z_.next_in = nullptr;
    z_.avail_in = 0;
    deflating_ = false;
    try {
      Deflate(Z_FINISH);
    } catch (...) {
      deflateEnd(&z_);
      std::fclose(std::exchange(file_, nullptr));
      throw;
    }
    deflateEnd(&z_);
  }
  if (std::fclose(std::exchange(file_, nullptr)) != 0) {
    throw std::runtime_error(path_ + ": close failed: " + std::strerror(errno));
  }
}

}  // namespace ringfeed
