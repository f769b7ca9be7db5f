#include "format/hedge_budget.h"

#include <algorithm>

namespace ringfeed {

void HedgeBudget::Refill(int64_t now_ns) {
  if (now_ns <= refilled_ns_) return;
  const int most = rationed_ ? 1 : kTokens;
  if (tokens_ >= most) {  // full: time spent full earns nothing
    refilled_ns_ = now_ns;
    return;
  }
  const int64_t earned = (now_ns - refilled_ns_) / kRefillNs;
  if (earned >= most - tokens_) {
    tokens_ = most;
    refilled_ns_ = now_ns;
  } else {
    tokens_ += static_cast<int>(earned);
    refilled_ns_ += earned * kRefillNs;  // the part of a period not yet earned carries on
  }
}

bool HedgeBudget::TryTake(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  Refill(now_ns);
  if (tokens_ == 0) return false;
  --tokens_;  // from full, the period towards the next token starts now (Refill)
  if (tokens_ == 0) rationed_ = true;
  return true;
}

void HedgeBudget::Won() {
  std::lock_guard<std::mutex> lock(mu_);
  rationed_ = false;
  tokens_ = std::min(kTokens, tokens_ + 2);
}

bool HedgeBudget::Rationed() {
  std::lock_guard<std::mutex> lock(mu_);
  return rationed_;
}

int HedgeBudget::Tokens(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  Refill(now_ns);
  return tokens_;
}

void HedgeBudget::Reset(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = kTokens;
  refilled_ns_ = now_ns;
  rationed_ = false;
}

}  // namespace ringfeed
