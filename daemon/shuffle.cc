#include "daemon/shuffle.h"

namespace ringfeed {
namespace {
constexpr uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Xoshiro256StarStar::Xoshiro256StarStar(uint64_t seed, RngStream stream, uint64_t epoch) {
  SplitMix64 sm(seed ^ SplitMix64Mix(static_cast<uint64_t>(stream) << 56 | epoch));
  for (uint64_t& s : s_) s = sm.Next();
}

Xoshiro256StarStar::Xoshiro256StarStar(const uint64_t state[4]) {
  for (int i = 0; i < 4; ++i) s_[i] = state[i];
}

uint64_t Xoshiro256StarStar::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

// Lemire's multiply-shift needs the 128-bit product (a GCC/Clang extension: __extension__
// keeps -Wpedantic quiet).
namespace {
__extension__ using Uint128 = unsigned __int128;
}  // namespace

uint64_t Xoshiro256StarStar::UniformBelow(uint64_t n) {
  Uint128 m = static_cast<Uint128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<Uint128>(Next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace ringfeed
