// The tests' main: Catch2's, plus the skip tally (tests/test_support.h, Skip). A program all of
// whose test cases that ran were skipped, with no failure, exits 77, which CTest reports as
// "Skipped" (SKIP_RETURN_CODE); one that also ran other test cases passes or fails on those,
// saying how many were skipped. (A marker in the output, CTest's SKIP_REGULAR_EXPRESSION,
// reported a program that printed it as skipped even when it failed.)
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <iostream>

#include "tests/test_support.h"

namespace {

struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo&) override { ringfeed::testing::StartTestCase(); }
  void testCaseEnded(const Catch::TestCaseStats&) override {
    ringfeed::testing::SkipTally& tally = ringfeed::testing::Skips();
    ++tally.cases_run;
    if (ringfeed::testing::SkippedInThisCase()) ++tally.cases_skipped;
  }
};
CATCH_REGISTER_LISTENER(SkipListener)

}  // namespace

int main(int argc, char* argv[]) {
  const int result = Catch::Session().run(argc, argv);
  const ringfeed::testing::SkipTally& tally = ringfeed::testing::Skips();
  if (tally.cases_skipped > 0) {
    std::cout << "ringfeed tests: " << tally.cases_skipped << " of " << tally.cases_run
              << " test case(s) skipped here (the RINGFEED_SKIP lines above say why)" << std::endl;
  }
  constexpr int kSkipped = 77;  // tests/CMakeLists.txt: SKIP_RETURN_CODE
  if (result == 0 && tally.cases_run > 0 && tally.cases_skipped == tally.cases_run) return kSkipped;
  return result;
}
