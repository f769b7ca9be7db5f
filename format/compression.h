// Compression of a TFRecord file as a whole (TensorFlow's compression_type) and its detection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ringfeed {

enum class Compression : uint8_t {
  kAuto,  // detect: gzip/zlib header, confirmed by the first record's length CRC
  kNone,  // plain TFRecord
  kGzip,  // RFC 1952, any number of members, any optional header fields
  kZlib,  // RFC 1950
};

// Which inflate implementation decompresses GZIP/ZLIB files.
enum class InflateBackend : uint8_t {
  kDefault,  // ISA-L igzip when built with it, else zlib; env RINGFEED_INFLATE=zlib|isal overrides
  kIsal,     // ISA-L igzip (isal_inflate); falls back to zlib when built without ISA-L
  kZlib,     // zlib inflate
};

// "auto", "none", "gzip", "zlib" (the config and CLI spellings; "" is also accepted as none).
std::optional<Compression> ParseCompression(std::string_view name);
std::string_view CompressionName(Compression c);

// Resolves kDefault (environment, build) to the backend actually used.
InflateBackend ResolveInflateBackend(InflateBackend requested);
std::string_view InflateBackendName(InflateBackend b);

// Detects the compression of a file from its first bytes (`head`, up to 16 bytes; fewer when the
// file is shorter). A gzip magic (1f 8b) or a valid zlib header is only believed when the same
// bytes, read as a plain TFRecord header, do not carry a valid length CRC. Returns kNone for
// anything else, including an empty head.
Compression DetectCompression(const uint8_t* head, size_t size);

// What a file probably is, for hints in error messages: "plain TFRecord" (a valid first length
// CRC), "gzip", "zlib", or "" when none of these.
std::string_view LooksLike(const uint8_t* head, size_t size);

}  // namespace ringfeed
