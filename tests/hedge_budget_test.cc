// HedgeBudget (format/hedge_budget.h): the tokens hedged reads are paid with, driven with given
// times (nanoseconds), so every step's expected count is worked out by hand below.
#include "format/hedge_budget.h"

#include <catch2/catch.hpp>

using ringfeed::HedgeBudget;

namespace {
constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kStart = 100 * kSecond;  // an arbitrary CLOCK_MONOTONIC reading
}  // namespace

TEST_CASE("HedgeBudget: hedges that never win stop after kTokens, then one per refill period") {
  static_assert(HedgeBudget::kTokens == 4 && HedgeBudget::kRefillNs == 10 * kSecond, "the counts below assume them");
  HedgeBudget budget(kStart);
  CHECK(budget.Tokens(kStart) == 4);
  for (int i = 0; i < 4; ++i) CHECK(budget.TryTake(kStart + i));
  CHECK_FALSE(budget.TryTake(kStart + 5));
  CHECK(budget.Tokens(kStart + 5) == 0);
  // The period towards the next token began with the first hedge: one token 10 s after it.
  CHECK_FALSE(budget.TryTake(kStart + 10 * kSecond - 1));
  CHECK(budget.TryTake(kStart + 10 * kSecond));
  CHECK_FALSE(budget.TryTake(kStart + 10 * kSecond + 1));
  // A minute of saturated storage: 6 tokens earned, spent one at a time.
  int sent = 0;
  for (int64_t t = kStart + 10 * kSecond; t <= kStart + 70 * kSecond; t += kSecond / 10) sent += budget.TryTake(t);
  CHECK(sent == 6);
  CHECK(budget.Rationed());
  // An hour without a late read: still one hedge, not kTokens, until one wins.
  const int64_t later = kStart + 3670 * kSecond;
  CHECK(budget.Tokens(later) == 1);
  CHECK(budget.TryTake(later));
  CHECK_FALSE(budget.TryTake(later + 1));
  budget.Won();  // the probe answered first: the storage is no longer saturated
  CHECK_FALSE(budget.Rationed());
  CHECK(budget.Tokens(later + 2) == 2);
  CHECK(budget.Tokens(later + 20 * kSecond + 2) == 4);  // refilled to kTokens again
}

TEST_CASE("HedgeBudget: hedges that win at least every other time keep sending") {
  HedgeBudget budget(kStart);
  // Win, lose, win, lose, ... 1,000 hedges within one second: no refill helps.
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(budget.TryTake(kStart + i));
    if (i % 2 == 0) budget.Won();
  }
  CHECK(budget.Tokens(kStart + 1000) >= 3);
  CHECK_FALSE(budget.Rationed());
  // One win in three is not enough: 4 tokens, each three hedges cost one more than they earn.
  HedgeBudget loser(kStart);
  int sent = 0;
  for (int i = 0; i < 1000; ++i) {
    if (!loser.TryTake(kStart + i)) break;
    ++sent;
    if (i % 3 == 0) loser.Won();
  }
  // Tokens after each hedge: 4 (3 + 2 for the win, at most 4), 3, 2; 3 (won), 2, 1; 2 (won),
  // 1, 0: nine hedges.
  CHECK(sent == 9);
  CHECK(loser.Rationed());
}

TEST_CASE("HedgeBudget: wins give back at most kTokens, and time spent full earns nothing") {
  HedgeBudget budget(kStart);
  budget.Won();
  budget.Won();
  CHECK(budget.Tokens(kStart) == 4);
  // An hour full, then four losing hedges: the fifth waits its 10 s like any other.
  const int64_t later = kStart + 3600 * kSecond;
  for (int i = 0; i < 4; ++i) CHECK(budget.TryTake(later + i));
  CHECK_FALSE(budget.TryTake(later + 5 * kSecond));
  CHECK(budget.TryTake(later + 10 * kSecond));
  budget.Reset(later + 11 * kSecond);
  CHECK(budget.Tokens(later + 11 * kSecond) == 4);
  CHECK_FALSE(budget.Rationed());
}
