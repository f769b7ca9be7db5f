// wake_cost_bench: what waking a sleeping thread costs on this machine, the price of a hand-off
// in ringfeedd's data path that finds the other side asleep (a consumer waiting for a batch, the
// sequencer waiting for a slot or for records, a worker waiting for work, a thread blocked on a
// contended mutex). The end-to-end benchmark prints it beside the ring's cost, since machines
// differ here: on session 26's virtual machine a wake across cores cost 8x a wake on one core.
//
// One thread sleeps in FUTEX_WAIT on a shared word (shm::FutexWait, as the ring's waits do);
// the other works for --gap-us microseconds (a spin on the clock: a batch being parsed), bumps
// the word and wakes it (shm::FutexWakeAll, as a publish does), --wakes times. Measured: the
// wake call's wall time on the waker, and the sleeper's CPU time per wake (its return from the
// wait and going back to sleep). Run with both threads on different cores (--cores 0,1): the
// worst case, the sleeper's core idle (on a virtual machine a halted vCPU, woken by an
// inter-processor interrupt); and on one core (--cores 0,0), a reference with no such
// interrupt, where the woken thread may also preempt the waker inside the timed call. The word
// is a shared futex (as the ring's) in this process's memory, not in a shared mapping.
//
// Prints one JSON line: {"cores", "gap_us", "wakes", "waker_call_us" (median of the wake
// calls), "waker_call_mean_us", "sleeper_cpu_per_wake_us", "sleeper_returns" (its returns from
// the wait: about wakes + 1 when it was asleep for every wake)}.
//
//   wake_cost_bench --cores 0,1 [--gap-us 100] [--wakes 5000]
//
// Exit status: 0 ok, 2 a core this process may not use; bad arguments: CLI11's codes (105-109).
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/thread_clock.h"
#include "shm/futex.h"

namespace {

bool Pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> cores{0, 1};
  int gap_us = 100;
  int wakes = 5000;
  CLI::App app{"Measures the cost of waking a thread that sleeps on a futex (ringfeed's hand-offs)"};
  app.add_option("--cores", cores, "Cores of the waker and the sleeper, e.g. 0,1 (across) or 0,0 (same core)")
      ->delimiter(',')
      ->expected(2);
  app.add_option("--gap-us", gap_us, "Work between two wakes, microseconds")->check(CLI::Range(1, 100000));
  app.add_option("--wakes", wakes, "Wakes to time")->check(CLI::Range(100, 10000000));
  CLI11_PARSE(app, argc, argv);

  alignas(64) static std::atomic<uint32_t> word{0};
  std::atomic<bool> done{false};
  std::atomic<bool> pinned{true};
  std::atomic<uint64_t> sleeps{0};
  double sleeper_cpu = 0;
  std::thread sleeper([&] {
    if (!Pin(cores[1])) pinned = false;
    const int64_t start = ringfeed::ThreadCpuNs();
    uint32_t seen = word.load();
    while (!done.load()) {
      ringfeed::shm::FutexWait(&word, seen, std::chrono::seconds(1));
      seen = word.load();
      sleeps.fetch_add(1, std::memory_order_relaxed);
    }
    sleeper_cpu = static_cast<double>(ringfeed::ThreadCpuNs() - start) * 1e-9;
  });
  if (!Pin(cores[0])) pinned = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the sleeper is asleep
  std::vector<double> calls;
  calls.reserve(static_cast<size_t>(wakes));
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < wakes && pinned.load(); ++i) {
    const auto work_end = Clock::now() + std::chrono::microseconds(gap_us);
    while (Clock::now() < work_end) {
    }
    word.fetch_add(1, std::memory_order_seq_cst);
    const auto before = Clock::now();
    ringfeed::shm::FutexWakeAll(&word);
    calls.push_back(std::chrono::duration<double, std::micro>(Clock::now() - before).count());
  }
  done = true;
  word.fetch_add(1);
  ringfeed::shm::FutexWakeAll(&word);
  sleeper.join();
  if (!pinned.load()) {
    std::cerr << "wake_cost_bench: cannot run on cores " << cores[0] << "," << cores[1]
              << " (see taskset -p $$ and nproc)\n";
    return 2;
  }
  double total = 0;
  for (double c : calls) total += c;
  std::vector<double> sorted = calls;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  const uint64_t woken = sleeps.load();
  nlohmann::json out = {
      {"cores", std::to_string(cores[0]) + "," + std::to_string(cores[1])},
      {"gap_us", gap_us},
      {"wakes", wakes},
      {"waker_call_us", sorted[sorted.size() / 2]},
      {"waker_call_mean_us", total / static_cast<double>(calls.size())},
      {"sleeper_cpu_per_wake_us", sleeper_cpu * 1e6 / static_cast<double>(std::max<uint64_t>(woken, 1))},
      {"sleeper_returns", woken},
  };
  std::cout << out.dump() << "\n";
  return 0;
}
