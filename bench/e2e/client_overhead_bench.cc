// client_overhead_bench: what the client library costs a trainer per batch — Client::Next on a
// batch that is already in the ring, plus Batch::Release — measured against a running ringfeedd
// whose ring is full; and, separately, the first Batch::feature call of every feature.
//
// Method: attach; then for each round, wait (outside the clock) until the daemon's status says
// ring.ready == ring.slots, and take the slots' batches one by one, timing each
//   t0; Next(0 ms, &batch); t1; batch.feature(i) for every feature; t2; batch.Release(); t3
// with steady_clock (vDSO clock_gettime). Next checks the batch's header and every column's
// regions (shm/batch_check.h: ReadBatch) and builds nothing per feature; Release hands the slot
// back (and wakes the daemon's sequencer when it waits for a free slot). The first feature(i)
// of a column checks its row_splits / value_offsets entries (CheckColumnOffsets), so the
// features figure grows with the rows of bytes and VarLen features and holds the fetch of
// those arrays from the cache of the core that wrote them (a trainer that reads them pays that
// fetch anyway; after the check its own read hits the cache). Releases let the daemon refill
// while the round goes on, as with a real trainer, so a few Next calls may meet a slot still
// being published; those wait briefly and are part of the distribution. The driver runs it at
// several batch sizes.
//
// Prints one JSON line: {"samples", "rounds", "slots", "features", "next_release_ns":
// {"median", "p90", "p99", "max"} (t1 - t0 + t3 - t2), "next_ns", "release_ns",
// "features_ns" (t2 - t1), "all_ns" (t3 - t0), "clock_ns" (median cost of one steady_clock::now()
// pair; each timed interval includes one), "timeouts"}.
//
//   client_overhead_bench --job e2e-overhead --runtime-dir /tmp/x --rounds 20
//
// Exit status: 0 ok, 1 error (no daemon, ring never full).
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/e2e/attach_with_retry.h"
#include "bench/e2e/e2e_common.h"
#include "client/client.h"
#include "daemon/ctl_client.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ns(Clock::duration d) { return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()); }

nlohmann::ordered_json Summary(std::vector<double> v) {
  using ringfeed::bench::Quantile;
  return {{"median", Quantile(v, 0.5)}, {"p90", Quantile(v, 0.9)}, {"p99", Quantile(v, 0.99)}, {"max", Quantile(v, 1.0)}};
}

}  // namespace

int main(int argc, char** argv) {
  ringfeed::ClientOptions options;
  int rounds = 20;
  double fill_timeout = 60;
  CLI::App app("client_overhead_bench: time Client::Next + Batch::Release against a full ring");
  app.add_option("--job", options.job, "Job name (the config's job:)")->required();
  app.add_option("--runtime-dir", options.runtime_dir, "ringfeedd's --runtime-dir");
  app.add_option("--rounds", rounds, "Times the full ring is drained (samples = rounds x ring.slots)");
  app.add_option("--fill-timeout", fill_timeout, "Seconds to wait for the ring to fill");
  CLI11_PARSE(app, argc, argv);

  try {
    auto client = ringfeed::bench::AttachWithRetry(options, std::chrono::seconds(60));
    const size_t features = client->schema().features.size();
    std::vector<double> total, next, release, views, all, clock;
    uint64_t slots = 0, timeouts = 0;
    size_t sink = 0;  // keeps the feature() calls
    ringfeed::Batch batch;
    for (int round = 0; round < rounds; ++round) {
      // Wait for a full ring, off the clock.
      const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(fill_timeout * 1000));
      while (true) {
        const nlohmann::json status = ringfeed::QueryDaemon(options.runtime_dir, options.job, {{"type", "status"}});
        slots = status["ring"]["slots"].get<uint64_t>();
        if (status["ring"]["ready"].get<uint64_t>() == slots) break;
        if (status.value("state", "") != "running" || Clock::now() > deadline) {
          std::cerr << "client_overhead_bench: the ring of job " << options.job << " did not fill (" << status["ring"].dump()
                    << ", state " << status.value("state", "?")
                    << "); give the daemon endless data (epochs: 0) and a ring.slots it can fill\n";
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      for (uint64_t i = 0; i < slots; ++i) {
        const auto t0 = Clock::now();
        const auto st = client->Next(std::chrono::milliseconds(0), &batch);
        const auto t1 = Clock::now();
        if (st != ringfeed::Client::Status::kBatch) {
          ++timeouts;
          continue;
        }
        for (size_t f = 0; f < features; ++f) sink += batch.feature(f).size();
        const auto t2 = Clock::now();
        batch.Release();
        const auto t3 = Clock::now();
        next.push_back(Ns(t1 - t0));
        views.push_back(Ns(t2 - t1));
        release.push_back(Ns(t3 - t2));
        total.push_back(Ns(t1 - t0) + Ns(t3 - t2));
        all.push_back(Ns(t3 - t0));
        const auto c0 = Clock::now();
        const auto c1 = Clock::now();
        clock.push_back(Ns(c1 - c0));
      }
    }
    std::vector<double> clock_copy = clock;
    nlohmann::ordered_json out = {
        {"samples", total.size()},
        {"rounds", rounds},
        {"slots", slots},
        {"features", features},
        {"next_release_ns", Summary(total)},
        {"next_ns", Summary(next)},
        {"release_ns", Summary(release)},
        {"features_ns", Summary(views)},
        {"all_ns", Summary(all)},
        {"clock_ns", ringfeed::bench::Quantile(clock_copy, 0.5)},
        {"timeouts", timeouts},
    };
    std::cout << out.dump() << std::endl;
    if (sink == 0 && !total.empty()) std::cerr << "client_overhead_bench: every feature was empty\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "client_overhead_bench: " << e.what() << "\n";
    return 1;
  }
}
