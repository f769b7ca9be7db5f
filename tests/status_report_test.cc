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
  // 270 more records to 20.9 s, then the daemon stopped (SIGSTOP) until 35 s: no samples, and
  // nothing produced. Before a sample after the pause: from the newest (20 s), not from the
  // oldest kept (10 s), whose rate would count the records of 10-20 s too.
  CHECK(window.Rates(t0 + seconds(35), 5470, 4000).first == Approx(270.0 / 15));
  // Sampled after the pause: from those samples only. Before, from the newest sample at least
  // 10 s old, the 270 records made before the pause still counted 4 s after it.
  for (int s = 35; s <= 38; ++s) window.Add(t0 + seconds(s), 5470, 4000);
  CHECK(window.Rates(t0 + seconds(39), 5470, 4000).first == 0);
  // And on from there as before.
  for (int s = 39; s <= 50; ++s) window.Add(t0 + seconds(s), 5470u + 200u * (s - 38), 4000);
  CHECK(window.Rates(t0 + seconds(50), 5470 + 200 * 12, 4000).first == Approx(200.0));
}
