#include "format/crc32c.h"

#include <algorithm>
#include <climits>
#include <cstring>

#ifdef RINGFEED_HAVE_ISAL
#include <isa-l/crc.h>
#endif

namespace ringfeed {
namespace {

#ifndef RINGFEED_HAVE_ISAL
// Raw (no pre/post inversion) CRC-32C with the SSE4.2 instruction.
__attribute__((target("sse4.2"))) uint32_t RawCrc(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#ifdef RINGFEED_HAVE_ISAL
  // crc32_iscsi takes an int length: feed it in chunks below INT_MAX.
  constexpr size_t kChunk = size_t{1} << 30;
  while (size > 0) {
    size_t n = std::min(size, kChunk);
    c = crc32_iscsi(const_cast<uint8_t*>(p), static_cast<int>(n), c);
    p += n;
    size -= n;
  }
#else
  c = RawCrc(c, p, size);
#endif
  return ~c;
}

uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }

}  // namespace ringfeed
