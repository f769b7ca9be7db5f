// CRC-32C (Castagnoli) and TFRecord's masked form of it.
//
// Source: TFRecord framing (tensorflow/core/lib/io/record_writer.cc, tsl/lib/hash/crc32c.h):
// masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8, all uint32 arithmetic.
// Implementation: ISA-L crc32_iscsi (interleaved SSE4.2/PCLMUL, ~30 GB/s) when built with
// ISA-L, otherwise the SSE4.2 crc32 instruction 8 bytes at a time.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringfeed {

// Standard CRC-32C of `size` bytes (init ~0, final xor ~0): Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(const void* data, size_t size);
// Continues a CRC: Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;

constexpr uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }
constexpr uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rot = masked - kCrcMaskDelta;
  return (rot >> 17) | (rot << 15);
}

inline uint32_t MaskedCrc32c(const void* data, size_t size) { return MaskCrc(Crc32c(data, size)); }

}  // namespace ringfeed
