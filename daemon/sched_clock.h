// SchedClock: the CPU time and run-queue wait of this whole process, as growth since the last
// Read(), for the autotuner's per-interval measurements (daemon/autotune.cc).
//
//   cpu_ns        CPU time of all the process's threads, those that have exited included
//                 (CLOCK_PROCESS_CPUTIME_ID). A sum over /proc/self/task fell when a thread
//                 exited (a reader or worker the tuner took away) and read as 0 cores for
//                 that interval.
//   run_delay_ns  time its threads were runnable but waiting for a core, from
//                 /proc/self/task/*/schedstat ("<cpu ns> <run delay ns> <timeslices>", Linux
//                 schedstats): each thread's growth since the last Read (a new thread's from
//                 zero; a thread that exited loses only its last slice).
//
// Errors: none thrown; what cannot be read counts as 0. Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <map>

namespace ringfeed {

class SchedClock {
 public:
  struct Delta {
    uint64_t cpu_ns = 0;
    uint64_t run_delay_ns = 0;
  };
  SchedClock();  // the first Read() counts from here
  Delta Read();

 private:
  uint64_t cpu_ns_ = 0;
  std::map<uint64_t, uint64_t> delays_;  // thread id -> its run delay at the last Read
};

}  // namespace ringfeed
