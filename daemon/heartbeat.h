// HeartbeatThread: ringfeedd's thread of its own ("rf-heartbeat") that says the daemon is alive.
// Every kPeriod it writes the ring's heartbeat (shm::Heartbeat: a trainer tells a frozen daemon
// from slow data by it, docs/client.md, liveness_timeout) and pings systemd's watchdog when the unit
// has one. Once a second it samples the pipeline: the 10-second throughput window (RateWindow),
// systemd's STATUS= line (SystemdStatusLine), and two warnings, each logged once per episode:
// every ring slot held by consumers for kAllHeldWarnAfter (nowhere to put a batch; who holds them,
// from `all_held_advice`), and the daemon's memory over its budget (OverBudgetWarning; the
// episode ends when it is back under 90% of the budget). The heartbeat itself allocates
// nothing; out of memory in the once-a-second sample fails the job (Pipeline::FailOutOfMemory,
// once) and the heartbeat goes on, so trainers get that reason, not "frozen".
//
// Thread-safety: constructed (the thread starts) and stopped on RunDaemon's thread; everything it
// is given must outlive it (Stop or the destructor joins the thread).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "daemon/pipeline.h"
#include "daemon/status_report.h"
#include "daemon/systemd_notify.h"
#include "shm/ring.h"

namespace ringfeed {

class HeartbeatThread {
 public:
  // How often the ring's heartbeat is written (the superblock's heartbeat_period_ns).
  static constexpr auto kPeriod = std::chrono::milliseconds(100);
  // How long every ring slot may stay held by consumers before the log says why no batch comes.
  static constexpr auto kAllHeldWarnAfter = std::chrono::seconds(10);

  HeartbeatThread(const shm::Ring& ring, Pipeline& pipeline, SystemdNotifier& notifier, RateWindow& window,
                  const JobStatusFacts& facts, std::function<std::string()> all_held_advice);
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;
  ~HeartbeatThread() { Stop(); }

  // Ends the thread and joins it (within one kPeriod, or a once-a-second sample under way).
  // Idempotent.
  void Stop();

 private:
  void Run();
  // The once-a-second part of Run, at `now`. May throw std::bad_alloc.
  void Sample(std::chrono::steady_clock::time_point now);

  const shm::Ring& ring_;
  Pipeline& pipeline_;
  SystemdNotifier& notifier_;
  RateWindow& window_;
  const JobStatusFacts& facts_;
  const std::function<std::string()> all_held_advice_;
  // Run's thread only:
  std::chrono::steady_clock::time_point all_held_since_{};  // every slot held since ({}: not now)
  bool all_held_warned_ = false;
  bool over_budget_warned_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: started once the members above are set
};

}  // namespace ringfeed
