// The status's throughput over the last 10 s (daemon/status_report.h, RateWindow), sampled once a
// second by the heartbeat thread, with the sample times given here.
#include <catch2/catch.hpp>
#include <chrono>

#include "daemon/status_report.h"

using namespace ringfeed;
using std::chrono::seconds;

TEST_CASE("RateWindow: the last 10 s, from the start while younger, and not across a pause of the sampler") {
  const RateWindow::Clock::time_point t0{};
  RateWindow window(t0);
  CHECK(window.Rates(t0, 0, 0).first == 0);
  // 100 records/s (1000 bytes/s) for 4 s: younger than 10 s, the rate is from the start.
  for (int s = 1; s <= 4; ++s) window.Add(t0 + seconds(s), 100u * s, 1000u * s);
  CHECK(window.Rates(t0 + seconds(4), 400, 4000) == std::pair<double, double>(100.0, 1000.0));
  // Then 300 records/s to 20 s: the last 10 s (from the sample at 10 s) see only those.
  for (int s = 5; s <= 20; ++s) window.Add(t0 + seconds(s), 400u + 300u * (s - 4), 4000u);
  CHECK(window.Rates(t0 + seconds(20), 400 + 300 * 16, 4000).first == Approx(300.0));
  // The sampler paused from 20 s to 35 s (the daemon under SIGSTOP) and nothing was produced:
  // the last 10 s are from the newest sample 10 s back, the one at 20 s (records 5200), not from
  // the oldest kept (10 s), whose rate would count the records of 10-20 s.
  CHECK(window.Rates(t0 + seconds(35), 5200, 4000).first == 0);
  window.Add(t0 + seconds(35), 5200, 4000);
  window.Add(t0 + seconds(36), 5500, 4000);
  CHECK(window.Rates(t0 + seconds(36), 5500, 4000).first == Approx(300.0 / 16));
}
