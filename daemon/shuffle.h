// The order-defining algorithms of ringfeed: a named PRNG, how it is seeded, Fisher-Yates file
// shuffling and the record shuffle buffer. Together with the sorted file list, interleave
// (daemon/sequencer.h) and batching they define the determinism contract: batch k of epoch e
// is a function of the file list, the config and shuffle.seed only. Everything here is exact
// integer arithmetic, specified below so that another implementation can reproduce the order
// (docs/architecture.md "Determinism"); std::shuffle and the std::*_distribution classes are
// not used because their output differs between standard libraries.
//
// PRNG: xoshiro256** 1.0 (Blackman & Vigna, https://prng.di.unimi.it/xoshiro256starstar.c).
// Seeding: the four state words are the first four outputs of SplitMix64
// (https://prng.di.unimi.it/splitmix64.c) started at
//     seed ^ SplitMix64Mix(stream << 56 | epoch)
// where SplitMix64Mix is SplitMix64's output function applied to one value, `stream` names
// the use (RngStream) and `epoch` is the 0-based epoch. Every epoch and use thus gets its own
// independent sequence, and epoch e's order does not depend on how many epochs ran before.
// Bounded integers: UniformBelow(n) is Lemire's multiply-and-reject method ("Fast Random
// Integer Generation in an Interval", 2019): m = x * n (128-bit), l = low 64 bits of m; if
// l < n, t = (2^64 - n) mod n and while l < t draw again; result = high 64 bits of m.
//
// Thread-safety: plain values; one thread per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ringfeed {

enum class RngStream : uint64_t {
  kFileOrder = 1,      // shuffle.files: the file order of an epoch
  kRecordShuffle = 2,  // shuffle.buffer: which buffered record comes out next
};

// SplitMix64's output function (the mix applied to state += 0x9e3779b97f4a7c15).
constexpr uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t state) : state_(state) {}
  constexpr uint64_t Next() { return SplitMix64Mix(state_ += 0x9e3779b97f4a7c15ull); }

 private:
  uint64_t state_;
};

class Xoshiro256StarStar {
 public:
  // Seeded as described at the top of this file.
  Xoshiro256StarStar(uint64_t seed, RngStream stream, uint64_t epoch);
  // The raw state (for tests against the reference implementation).
  explicit Xoshiro256StarStar(const uint64_t state[4]);

  uint64_t Next();
  // Uniform in [0, n), n >= 1 (Lemire's method, above).
  uint64_t UniformBelow(uint64_t n);

 private:
  uint64_t s_[4];
};

// Fisher-Yates (Durstenfeld): for i = n-1 down to 1: j = UniformBelow(i + 1); swap(v[i], v[j]).
template <typename T>
void FisherYatesShuffle(std::vector<T>& v, Xoshiro256StarStar& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.UniformBelow(i));
    if (j != i - 1) std::swap(v[i - 1], v[j]);
  }
}

// The record shuffle buffer (like tf.data's Dataset.shuffle, with this exact rule):
//   while the buffer holds fewer than `capacity` records and input remains: append the next
//   input record; then, to emit: j = UniformBelow(size); emit buffer[j]; if input remains,
//   buffer[j] = the next input record, else buffer[j] = the last record and the last slot
//   is removed. The buffer is drained at the end of every epoch (batches never mix epochs).
// A capacity of 0 or 1 passes records through in input order without drawing numbers.
// Memory: holds up to `capacity` records.
template <typename T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(size_t capacity, Xoshiro256StarStar rng) : capacity_(capacity < 1 ? 1 : capacity), rng_(rng) {}

  bool full() const { return buffer_.size() >= capacity_; }
  bool empty() const { return buffer_.empty(); }
  size_t size() const { return buffer_.size(); }
  // Only while !full().
  void Add(T record) { buffer_.push_back(std::move(record)); }
  // Emits one record and puts `next` (the next input record) in its place. Only when full().
  T Exchange(T next) {
    if (capacity_ == 1) return std::exchange(buffer_[0], std::move(next));
    const size_t j = static_cast<size_t>(rng_.UniformBelow(buffer_.size()));
    return std::exchange(buffer_[j], std::move(next));
  }
  // Emits one record once the input is exhausted. Only when !empty().
  T Drain() {
    const size_t j = capacity_ == 1 ? 0 : static_cast<size_t>(rng_.UniformBelow(buffer_.size()));
    T out = std::move(buffer_[j]);
    if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
    buffer_.pop_back();
    return out;
  }

 private:
  size_t capacity_;
  Xoshiro256StarStar rng_;
  std::vector<T> buffer_;
};

}  // namespace ringfeed
