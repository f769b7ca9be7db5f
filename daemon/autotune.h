// Autotune: runs the autotuner (daemon/tuner.h) against the live pipeline. Its thread wakes
// every 10 ms to sample the ring's ready batches, and at each tuning interval (the tuner says
// how long, 0.1-2 s) turns the pipeline's cumulative counters and the consumers' wait times
// (ConsumerEntry::wait_ns, written by the client library) into one TunerObservation, feeds it
// to the Tuner and applies the knobs it returns (Pipeline::SetReaders / SetStreamBufferBytes /
// SetWorkers / SetPrefetch). Every decision is logged at debug level; the current knobs,
// limits and the last changes with their reasons are in StatusJson (`ringfeedctl status`).
//
// Thread-safety: Start/Stop from the owner thread; StatusJson from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/consumer_registry.h"
#include "daemon/pipeline.h"
#include "daemon/tuner.h"
#include "daemon/tuning_plan.h"
#include "shm/ring.h"

namespace ringfeed {

class Autotune {
 public:
  Autotune(AutotuneOptions options, Pipeline& pipeline, const shm::Ring& ring, ConsumerRegistry& consumers);
  ~Autotune();  // Stop()
  Autotune(const Autotune&) = delete;
  Autotune& operator=(const Autotune&) = delete;

  void Start();
  void Stop();
  // {"knobs": {...}, "fixed": [...], "limits": {...}, "cpu_cores", "runnable_threads", "blocked_io_threads",
  //  "interval_seconds", "measured": {the last interval's TunerObservation, fractions in [0, 1]},
  //  "changes": [{"at_seconds", "knob", "from", "to", "reason"}, ...]}
  // Once production has ended, "measured" is its last stretch (the tuner's thread records it
  // within one sample period, at most 0.1 s; this waits for that, at most 0.2 s).
  nlohmann::json StatusJson() const;

 private:
  void Run();
  void Apply(const TunerKnobs& before, const TunerKnobs& after);

  AutotuneOptions options_;
  Pipeline& pipeline_;
  const shm::Ring ring_;
  ConsumerRegistry& consumers_;
  Tuner tuner_;
  std::thread thread_;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  mutable std::mutex mutex_;  // guards the status below
  mutable std::condition_variable run_returned_cv_;
  bool run_returned_ = false;  // Run has returned: "measured" is final
  TunerDecision last_;
  TunerObservation last_observation_;
  std::deque<std::pair<double, TunerChange>> changes_;  // newest last, at most kKeptChanges
};

}  // namespace ringfeed
