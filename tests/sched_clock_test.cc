// SchedClock (daemon/sched_clock.h): the process's CPU time and run-queue wait between two
// reads, with real threads on real cores.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "daemon/sched_clock.h"
#include "daemon/thread_clock.h"

using namespace ringfeed;

namespace {

void BurnCpu(int64_t ns) {
  const int64_t start = ThreadCpuNs();
  volatile uint64_t x = 0;
  while (ThreadCpuNs() - start < ns) {
    for (int i = 0; i < 10000; ++i) x = x + static_cast<uint64_t>(i);
  }
}

}  // namespace

TEST_CASE("SchedClock keeps the CPU time of a thread that exited before the read") {
  SchedClock clock;
  std::thread worker([] { BurnCpu(100'000'000); });  // 100 ms of CPU, then gone
  worker.join();
  const SchedClock::Delta d = clock.Read();
  // A sum over the threads still there (the main thread, mostly waiting) would miss it.
  CHECK(d.cpu_ns >= 100'000'000u);
  CHECK(d.cpu_ns < 2'000'000'000u);
  // The next read starts from here.
  const SchedClock::Delta again = clock.Read();
  CHECK(again.cpu_ns < 50'000'000u);
}

TEST_CASE("SchedClock counts the run-queue wait of threads sharing one core") {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(::sched_getaffinity(0, sizeof mask, &mask) == 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mask)) ++cpu;
  SchedClock clock;
  // Two threads on one core, 100 ms of CPU each: each waits while the other runs. They stay
  // until the read (the wait of a thread that exited goes with it).
  std::atomic<int> burnt{0};
  std::atomic<bool> read{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);
      BurnCpu(100'000'000);
      burnt.fetch_add(1);
      while (!read.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  while (burnt.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const SchedClock::Delta d = clock.Read();
  read.store(true);
  for (auto& t : threads) t.join();
  CHECK(d.cpu_ns >= 200'000'000u);
  CHECK(d.run_delay_ns >= 50'000'000u);  // about 100 ms: the other's run time
}
