// consume_bench: a C++ trainer stand-in for the end-to-end benchmark. Attaches to a running
// ringfeedd (client/client.h), takes every batch until the end of data, reads every byte of
// every column (values, value_offsets, row_splits) into a checksum, releases the batch, and
// prints one JSON line:
//
//   {"examples", "batches", "bytes" (column bytes read), "seconds" (first batch taken to end of
//    data), "examples_per_s" (examples / seconds), "seconds_from_attach", "cpu_seconds" (this
//    process), "daemon_cpu_seconds" (ringfeedd, its whole life up to the last batch),
//    "daemon_rss_anon_peak_bytes" (RssAnon of ringfeedd sampled every 20 ms: its private
//    memory, not the shared segment), "daemon_vm_hwm_bytes", "segment_bytes", "slot_bytes",
//    "slots", "budget_bytes" (pipeline.memory_budget or null), "checksum"}
//
// The clock starts at the first batch, so the daemon's start-up (file expansion, slot-size
// sampling, segment creation) is not counted; the few batches already in the ring at that
// moment are (at most ring.slots batches; the driver uses enough data that they are < 1%).
//
//   consume_bench --job e2e-taxi --runtime-dir /tmp/x [--expect-examples 386451]
//
// Exit status: 0 ok, 1 error (attach failed, daemon failed, example count differs).
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/e2e/attach_with_retry.h"
#include "bench/e2e/e2e_common.h"
#include "client/client.h"
#include "daemon/ctl_client.h"

namespace {

using Clock = std::chrono::steady_clock;

// Reads n bytes as 64-bit words (plus the tail) and folds them into a sum the compiler cannot
// drop: this is the "trainer touches every byte" part of the benchmark.
uint64_t Touch(const void* data, uint64_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t a = 0, b = 0, c = 0, d = 0;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof w);
    a += w[0];
    b ^= w[1];
    c += w[2];
    d ^= w[3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

}  // namespace

int main(int argc, char** argv) {
  ringfeed::ClientOptions options;
  uint64_t expect_examples = 0;
  double attach_timeout = 60;
  CLI::App app("consume_bench: take every batch of a running ringfeedd job, read every byte, print JSON");
  app.add_option("--job", options.job, "Job name (the config's job:)")->required();
  app.add_option("--runtime-dir", options.runtime_dir, "ringfeedd's --runtime-dir");
  app.add_option("--rank", options.rank, "consumers.mode ranks: this rank");
  app.add_option("--expect-examples", expect_examples, "Fail unless exactly this many examples arrive");
  app.add_option("--attach-timeout", attach_timeout, "Seconds to wait for the daemon's socket");
  CLI11_PARSE(app, argc, argv);

  try {
    auto client = ringfeed::bench::AttachWithRetry(
        options, std::chrono::milliseconds(static_cast<int64_t>(attach_timeout * 1000)));
    const auto attached = Clock::now();
    const int daemon_pid = client->daemon_pid();
    const std::string runtime_dir = options.runtime_dir.empty() ? std::string() : options.runtime_dir;
    nlohmann::json status = ringfeed::QueryDaemon(runtime_dir, options.job, {{"type", "status"}});

    std::atomic<bool> sampling{true};
    std::atomic<uint64_t> rss_anon_peak{0};
    std::thread sampler([&] {
      while (sampling.load()) {
        const uint64_t v = ringfeed::bench::ProcStatusBytes(daemon_pid, "RssAnon");
        if (v > rss_anon_peak.load()) rss_anon_peak = v;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });

    ringfeed::Batch batch;
    uint64_t examples = 0, batches = 0, bytes = 0, checksum = 0;
    Clock::time_point first{}, end{};
    double daemon_cpu = 0;
    uint64_t daemon_hwm = 0;
    while (true) {
      const auto st = client->Next(std::chrono::seconds(60), &batch);
      if (st == ringfeed::Client::Status::kTimeout) {
        std::cerr << "consume_bench: no batch from job " << options.job << " (pid " << daemon_pid
                  << ") for 60 s after " << batches << " batches; is the daemon stuck? (ringfeedctl status "
                  << options.job << ")\n";
        sampling = false;
        sampler.join();
        return 1;
      }
      if (st == ringfeed::Client::Status::kEndOfData) {
        end = Clock::now();
        break;
      }
      if (batches == 0) first = Clock::now();
      for (size_t i = 0; i < batch.feature_count(); ++i) {
        const ringfeed::TensorView t = batch.feature(i);
        checksum += Touch(t.data(), t.bytes());
        bytes += t.bytes();
        const auto offsets = t.value_offsets();
        const auto splits = t.row_splits();
        checksum += Touch(offsets.data(), offsets.size_bytes());
        checksum += Touch(splits.data(), splits.size_bytes());
        bytes += offsets.size_bytes() + splits.size_bytes();
      }
      examples += batch.rows();
      ++batches;
      if (batch.end_of_data()) {
        // The daemon exits (--exit-when-done) once this batch is released: read it first.
        daemon_cpu = ringfeed::bench::ProcCpuSeconds(daemon_pid);
        daemon_hwm = ringfeed::bench::ProcStatusBytes(daemon_pid, "VmHWM");
      }
    }
    sampling = false;
    sampler.join();
    if (daemon_cpu == 0) daemon_cpu = ringfeed::bench::ProcCpuSeconds(daemon_pid);

    const double seconds = std::chrono::duration<double>(end - first).count();
    const nlohmann::json& memory = status["memory"];
    const nlohmann::json& ring = status["ring"];
    nlohmann::ordered_json out = {
        {"examples", examples},
        {"batches", batches},
        {"bytes", bytes},
        {"seconds", seconds},
        {"examples_per_s", seconds > 0 ? static_cast<double>(examples) / seconds : 0.0},
        {"seconds_from_attach", std::chrono::duration<double>(end - attached).count()},
        {"cpu_seconds", ringfeed::bench::SelfCpuSeconds()},
        {"daemon_cpu_seconds", daemon_cpu},
        {"daemon_rss_anon_peak_bytes", rss_anon_peak.load()},
        {"daemon_vm_hwm_bytes", daemon_hwm},
        {"segment_bytes", memory.value("segment_bytes", uint64_t{0})},
        {"slot_bytes", ring.value("slot_bytes", uint64_t{0})},
        {"slots", ring.value("slots", uint64_t{0})},
        {"budget_bytes", memory.contains("budget_bytes") ? memory["budget_bytes"] : nlohmann::json(nullptr)},
        {"checksum", checksum},
    };
    std::cout << out.dump() << std::endl;
    if (expect_examples != 0 && examples != expect_examples) {
      std::cerr << "consume_bench: job " << options.job << " delivered " << examples << " examples, expected "
                << expect_examples << "\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "consume_bench: " << e.what() << "\n";
    return 1;
  }
}
