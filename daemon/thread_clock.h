// Clocks for the pipeline's busy-time and CPU-time counters (daemon/pipeline.cc,
// daemon/read_ahead.cc), read by the autotuner (daemon/autotune.cc).
//
// MonotonicNs: CLOCK_MONOTONIC through std::chrono::steady_clock (vDSO, ~20 ns).
// ThreadCpuNs: CPU time of the calling thread, CLOCK_THREAD_CPUTIME_ID (a system call, ~0.3 us:
// call it per batch or per read-ahead turn, not per record).
// Both in nanoseconds; thread-safe.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace ringfeed {

inline int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int64_t ThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace ringfeed
