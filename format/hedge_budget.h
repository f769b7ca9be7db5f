// HedgeBudget: whether a hedged read (format/read_queue.h) may be sent now, from how the last
// ones went.
//
// A hedge pays where a read is late for a reason of its own (a slow server, a lost packet: a
// straggler): the second read is answered in about one round trip and wins. Where reads are
// late because the storage is saturated (a bandwidth cap, a busy disk, a full link), the second
// read queues behind the same limit, seldom answers first, and takes bandwidth from the reads
// that would. So hedges are paid for with tokens, the way gRPC throttles its retries (gRFC A6,
// "gRPC Retry Design": failed attempts drain a token bucket, successful ones refill it):
//   - sending a hedge takes a token; with none left, no hedge is sent (the read is waited for);
//   - a hedge that answered first gives back two (its own and one more);
//   - one token comes back every kRefillNs of time; there are at most kTokens (and as many at
//     the start), but only one while the budget is rationed: from when its tokens ran out
//     until a hedge wins again.
// Hedges that win at least every other time keep sending; hedges that lose stop after kTokens
// of them and are then tried once every kRefillNs (a saturated link costs one extra block per
// 10 s instead of one per late read), however long the link stays quiet in between.
//
// Times are CLOCK_MONOTONIC nanoseconds given by the caller (tests pass their own).
// Thread-safety: any thread (a mutex; taken only for late reads and hedges that won).
#pragma once

#include <cstdint>
#include <mutex>

namespace ringfeed {

class HedgeBudget {
 public:
  static constexpr int kTokens = 4;
  static constexpr int64_t kRefillNs = 10'000'000'000;  // 10 s

  explicit HedgeBudget(int64_t now_ns) : refilled_ns_(now_ns) {}

  // A token for a hedge about to be sent: true (one taken), or false (none left: send none).
  bool TryTake(int64_t now_ns);
  // A hedge answered before the read it doubled: its token back and one more (at most kTokens).
  void Won();
  // Tokens left now (0: no hedge until the next refill).
  int Tokens(int64_t now_ns);
  // Whether the tokens ran out and no hedge has won since: hedges are paused, one tried every
  // kRefillNs.
  bool Rationed();
  // As new: kTokens, the refill period starting at `now_ns`.
  void Reset(int64_t now_ns);

 private:
  void Refill(int64_t now_ns);  // mu_ held

  std::mutex mu_;
  int tokens_ = kTokens;
  int64_t refilled_ns_;    // the refills are counted up to here
  bool rationed_ = false;  // Rationed()
};

}  // namespace ringfeed
