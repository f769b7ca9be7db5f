#include "format/compression.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "format/crc32c.h"

namespace ringfeed {

std::optional<Compression> ParseCompression(std::string_view name) {
  if (name == "auto") return Compression::kAuto;
  if (name == "none" || name.empty()) return Compression::kNone;
  if (name == "gzip" || name == "GZIP") return Compression::kGzip;
  if (name == "zlib" || name == "ZLIB") return Compression::kZlib;
  return std::nullopt;
}

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kAuto: return "auto";
    case Compression::kNone: return "none";
    case Compression::kGzip: return "gzip";
    case Compression::kZlib: return "zlib";
  }
  return "?";
}

InflateBackend ResolveInflateBackend(InflateBackend requested) {
  if (requested == InflateBackend::kDefault) {
    const char* env = std::getenv("RINGFEED_INFLATE");
    if (env != nullptr && std::string_view(env) == "zlib") requested = InflateBackend::kZlib;
    else requested = InflateBackend::kIsal;
  }
#ifndef RINGFEED_HAVE_ISAL
  requested = InflateBackend::kZlib;
#endif
  return requested;
}

std::string_view InflateBackendName(InflateBackend b) {
  switch (ResolveInflateBackend(b)) {
    case InflateBackend::kIsal: return "isa-l";
    case InflateBackend::kZlib: return "zlib";
    default: return "?";
  }
}

namespace {

// RFC 1952: ID1 ID2 CM=8 (deflate), reserved FLG bits 5-7 zero.
bool IsGzipHeader(const uint8_t* h, size_t n) {
  return n >= 4 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 8 && (h[3] & 0xe0) == 0;
}

// RFC 1950: CM=8, CINFO<=7, FCHECK makes CMF*256+FLG a multiple of 31. A preset dictionary
// (FDICT) counts: such a file is zlib, and its inflate error says it needs one.
bool IsZlibHeader(const uint8_t* h, size_t n) {
  return n >= 2 && (h[0] & 0x0f) == 8 && (h[0] >> 4) <= 7 && ((h[0] << 8) | h[1]) % 31 == 0;
}

// The first 12 bytes read as a TFRecord header: uint64 length + masked CRC-32C of it.
bool HasValidLengthCrc(const uint8_t* h, size_t n) {
  if (n < 12) return false;
  uint32_t stored;
  std::memcpy(&stored, h + 8, 4);
  return MaskedCrc32c(h, 8) == stored;
}

}  // namespace

Compression DetectCompression(const uint8_t* head, size_t size) {
  if (HasValidLengthCrc(head, size)) return Compression::kNone;
  if (IsGzipHeader(head, size)) return Compression::kGzip;
  if (IsZlibHeader(head, size)) return Compression::kZlib;
  return Compression::kNone;
}

std::string_view LooksLike(const uint8_t* head, size_t size) {
  if (HasValidLengthCrc(head, size)) return "plain TFRecord";
  switch (DetectCompression(head, size)) {
    case Compression::kGzip: return "gzip";
    case Compression::kZlib: return "zlib";
    default: return "";
  }
}

}  // namespace ringfeed
