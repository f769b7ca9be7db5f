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
// For the autotuner's benchmark (bench/autotune/), which runs jobs with `epochs: 0`:
//   --seconds N      stop N seconds after the first batch (the JSON then has "stopped_by_time":
//                    true; the daemon keeps running, the caller stops it)
//   --rate N         take at most N examples per second (sleeps after each batch until its rows
//                    are due): a trainer slower than the loader, whose loader should then use
//                    the least CPU and memory that keeps it fed
//   --timeline FILE  write a JSON document: examples taken per 100 ms from the first batch
//                    ("bin_seconds", "examples_per_bin"), and every --status-every seconds a
//                    sample of the daemon: "t" (seconds from the first batch), "rss_anon_bytes",
//                    "tasks" (threads, /proc/<pid>/task), "pipeline" and "autotune" (without
//                    "changes") from its status; at the end "final_status", the whole status
//                    object (the autotuner's last changes with their reasons included).
//
// Exit status: 0 ok, 1 error (attach failed, daemon failed, example count differs).
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/e2e/attach_with_retry.h"
#include "bench/e2e/e2e_common.h"
#include "client/client.h"
#include "daemon/ctl_client.h"
#include "shm/names.h"

namespace {

using Clock = std::chrono::steady_clock;

// Threads of process `pid` now (entries of /proc/<pid>/task); 0 when it is gone.
uint64_t TaskCount(int pid) {
  std::error_code ec;
  uint64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  return n;
}

// The part of a status object sampled over time: the knobs and thread counts, not the
// autotuner's change history (that comes once, in "final_status").
nlohmann::json StatusSample(const nlohmann::json& status) {
  nlohmann::json autotune = status.value("autotune", nlohmann::json(nullptr));
  if (autotune.is_object()) autotune.erase("changes");
  return {{"pipeline", status.value("pipeline", nlohmann::json(nullptr))},
          {"autotune", autotune},
          {"memory", status.value("memory", nlohmann::json(nullptr))}};
}

}  // namespace

int main(int argc, char** argv) {
  ringfeed::ClientOptions options;
  uint64_t expect_examples = 0;
  double attach_timeout = 60;
  double stop_seconds = 0;
  std::string timeline_path;
  double status_every = 0.5;
  double rate = 0;
  CLI::App app("consume_bench: take every batch of a running ringfeedd job, read every byte, print JSON");
  app.add_option("--job", options.job, "Job name (the config's job:)")->required();
  app.add_option("--runtime-dir", options.runtime_dir, "ringfeedd's --runtime-dir");
  app.add_option("--rank", options.rank, "consumers.mode ranks: this rank");
  app.add_option("--expect-examples", expect_examples, "Fail unless exactly this many examples arrive");
  app.add_option("--attach-timeout", attach_timeout, "Seconds to wait for the daemon's socket");
  app.add_option("--seconds", stop_seconds, "Stop this many seconds after the first batch (0: at the end of data)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeline", timeline_path, "Write examples per 100 ms and status samples to this JSON file");
  app.add_option("--status-every", status_every, "With --timeline: seconds between status samples")
      ->check(CLI::PositiveNumber);
  app.add_option("--rate", rate,
                 "Take at most this many examples per second (a trainer with a step time; 0: as fast as "
                 "batches come)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (stop_seconds > 0 && expect_examples != 0) {
    std::cerr << "consume_bench: --seconds and --expect-examples exclude each other (a run stopped by time "
                 "takes an arbitrary number of examples)\n";
    return 2;
  }

  try {
    auto client = ringfeed::bench::AttachWithRetry(
        options, std::chrono::milliseconds(static_cast<int64_t>(attach_timeout * 1000)));
    const auto attached = Clock::now();
    const int daemon_pid = client->daemon_pid();
    const std::string runtime_dir = options.runtime_dir.empty() ? ringfeed::shm::RuntimeDir() : options.runtime_dir;
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

    // Timeline: examples per 100 ms bin (written by this thread only) and status samples (by
    // the status thread; it starts sampling once the first batch set the clock).
    constexpr double kBinSeconds = 0.1;
    std::vector<uint64_t> bins;
    std::atomic<int64_t> first_ns{0};  // the first batch, steady_clock ns; 0 = not yet
    std::mutex samples_mutex;
    nlohmann::json samples = nlohmann::json::array();
    std::thread status_sampler;
    if (!timeline_path.empty()) {
      status_sampler = std::thread([&] {
        const auto period = std::chrono::duration<double>(status_every);
        auto next = Clock::now();
        while (sampling.load()) {
          std::this_thread::sleep_until(next);
          next += std::chrono::duration_cast<Clock::duration>(period);
          const int64_t f = first_ns.load();
          if (f == 0 || !sampling.load()) continue;
          nlohmann::json sample;
          try {
            sample = StatusSample(ringfeed::QueryDaemon(runtime_dir, options.job, {{"type", "status"}}));
          } catch (const std::exception& e) {
            sample = {{"status_error", e.what()}};
          }
          const double t = static_cast<double>(Clock::now().time_since_epoch().count() - f) / 1e9;
          sample["t"] = t;
          sample["rss_anon_bytes"] = ringfeed::bench::ProcStatusBytes(daemon_pid, "RssAnon");
          sample["tasks"] = TaskCount(daemon_pid);
          std::lock_guard lock(samples_mutex);
          samples.push_back(std::move(sample));
        }
      });
    }
    auto stop_sampling = [&] {
      sampling = false;
      if (sampler.joinable()) sampler.join();
      if (status_sampler.joinable()) status_sampler.join();
    };
    // An error below (the daemon stopped: Next throws) leaves through here too: a thread still
    // joinable at its destruction would end the process (std::terminate) before the message.
    struct StopOnExit {
      decltype(stop_sampling)& stop;
      ~StopOnExit() { stop(); }
    } stop_on_exit{stop_sampling};

    ringfeed::Batch batch;
    uint64_t examples = 0, batches = 0, bytes = 0, checksum = 0;
    Clock::time_point first{}, end{};
    double daemon_cpu = 0;
    uint64_t daemon_hwm = 0;
    bool stopped_by_time = false;
    while (true) {
      // With --seconds, wait in short slices so that the stop is on time even if the daemon
      // stalls; without it, 60 s without a batch means the daemon is stuck.
      const auto st = client->Next(stop_seconds > 0 && batches > 0 ? std::chrono::milliseconds(100)
                                                                   : std::chrono::milliseconds(60000),
                                   &batch);
      if (stop_seconds > 0 && batches > 0 && Clock::now() - first >= std::chrono::duration<double>(stop_seconds)) {
        end = first + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(stop_seconds));
        stopped_by_time = true;
        if (st == ringfeed::Client::Status::kBatch) batch.Release();  // taken after the end: not counted
        daemon_cpu = ringfeed::bench::ProcCpuSeconds(daemon_pid);
        daemon_hwm = ringfeed::bench::ProcStatusBytes(daemon_pid, "VmHWM");
        break;
      }
      if (st == ringfeed::Client::Status::kTimeout && stop_seconds > 0 && batches > 0) continue;
      if (st == ringfeed::Client::Status::kTimeout) {
        std::cerr << "consume_bench: no batch from job " << options.job << " (pid " << daemon_pid
                  << ") for 60 s after " << batches << " batches; is the daemon stuck? (ringfeedctl status "
                  << options.job << ")\n";
        stop_sampling();
        return 1;
      }
      if (st == ringfeed::Client::Status::kEndOfData) {
        end = Clock::now();
        break;
      }
      if (batches == 0) {
        first = Clock::now();
        first_ns = first.time_since_epoch().count();
      }
      for (size_t i = 0; i < batch.feature_count(); ++i) {
        const ringfeed::TensorView t = batch.feature(i);
        checksum += ringfeed::bench::Touch(t.data(), t.bytes());
        bytes += t.bytes();
        const auto offsets = t.value_offsets();
        const auto splits = t.row_splits();
        checksum += ringfeed::bench::Touch(offsets.data(), offsets.size_bytes());
        checksum += ringfeed::bench::Touch(splits.data(), splits.size_bytes());
        bytes += offsets.size_bytes() + splits.size_bytes();
      }
      examples += batch.rows();
      ++batches;
      if (!timeline_path.empty()) {
        const auto bin = static_cast<size_t>(std::chrono::duration<double>(Clock::now() - first).count() / kBinSeconds);
        if (bins.size() <= bin) bins.resize(bin + 1, 0);
        bins[bin] += batch.rows();
      }
      if (batch.end_of_data()) {
        // The daemon exits (--exit-when-done) once this batch is released: read it first.
        daemon_cpu = ringfeed::bench::ProcCpuSeconds(daemon_pid);
        daemon_hwm = ringfeed::bench::ProcStatusBytes(daemon_pid, "VmHWM");
      }
      if (rate > 0) {  // release the batch, wait until its rows are due: examples / rate after the first
        batch.Release();
        std::this_thread::sleep_until(first + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(static_cast<double>(examples) / rate)));
      }
    }
    stop_sampling();
    if (daemon_cpu == 0) daemon_cpu = ringfeed::bench::ProcCpuSeconds(daemon_pid);
    if (!timeline_path.empty()) {
      nlohmann::json final_status;
      if (stopped_by_time) {  // after the end of data the daemon may be gone
        try {
          final_status = ringfeed::QueryDaemon(runtime_dir, options.job, {{"type", "status"}});
        } catch (const std::exception& e) {
          final_status = {{"status_error", e.what()}};
        }
      }
      const nlohmann::json timeline = {{"bin_seconds", kBinSeconds},
                                       {"examples_per_bin", bins},
                                       {"samples", samples},
                                       {"final_status", final_status}};
      std::ofstream out(timeline_path);
      out << timeline.dump() << "\n";
      if (!out) {
        std::cerr << "consume_bench: cannot write the timeline to " << timeline_path << "\n";
        return 1;
      }
    }

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
        {"stopped_by_time", stopped_by_time},
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
