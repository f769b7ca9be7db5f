#include "daemon/heartbeat.h"

#include <new>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/budget.h"
#include "daemon/thread_name.h"

namespace ringfeed {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

HeartbeatThread::HeartbeatThread(const shm::Ring& ring, Pipeline& pipeline, SystemdNotifier& notifier,
                                 RateWindow& window, const JobStatusFacts& facts,
                                 std::function<std::string()> all_held_advice)
    : ring_(ring),
      pipeline_(pipeline),
      notifier_(notifier),
      window_(window),
      facts_(facts),
      all_held_advice_(std::move(all_held_advice)),
      thread_([this] { Run(); }) {}

void HeartbeatThread::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void HeartbeatThread::Run() {
  NameThread("rf-heartbeat");
  const auto watchdog = SystemdNotifier::WatchdogInterval();
  auto next_watchdog = Clock::now();
  auto next_sample = Clock::now();
  bool sample_out_of_memory = false;
  while (!stop_.load()) {
    const auto now = Clock::now();
    shm::Heartbeat(ring_);
    if (watchdog && now >= next_watchdog) {
      notifier_.Watchdog();
      next_watchdog = now + *watchdog;
    }
    try {
      if (now >= next_sample) {
        Sample(now);
        next_sample = now + std::chrono::seconds(1);
      }
    } catch (const std::bad_alloc& e) {
      next_sample = now + std::chrono::seconds(1);
      if (!sample_out_of_memory) pipeline_.FailOutOfMemory("the heartbeat thread", e);
      sample_out_of_memory = true;
    }
    std::this_thread::sleep_for(kPeriod);
  }
}

void HeartbeatThread::Sample(Clock::time_point now) {
  const PipelineStats s = pipeline_.Snapshot();
  const std::pair<double, double> rates = window_.Rates(now, s.records, s.record_bytes);
  window_.Add(now, s.records, s.record_bytes);
  // Every slot held for long: the daemon has nowhere to put a batch. Trainers that hold batches
  // this long on purpose need no action.
  if (s.slots_held < facts_.slot_count || s.end != PipelineEnd::kRunning) {  // nothing left to make
    all_held_since_ = {};
    all_held_warned_ = false;
  } else if (all_held_since_ == Clock::time_point{}) {
    all_held_since_ = now;
  } else if (now - all_held_since_ >= kAllHeldWarnAfter && !all_held_warned_) {
    all_held_warned_ = true;
    spdlog::warn("all {} ring slots have been held by consumers for {} s: no batch can be made until one is "
                 "released; {}",
                 facts_.slot_count, std::chrono::duration_cast<std::chrono::seconds>(kAllHeldWarnAfter).count(),
                 all_held_advice_());
  }
  // Memory over the budget: the plan was made from the records sampled at start, and records
  // later in the files can be far larger (OverBudgetWarning says which part).
  const uint64_t private_rss = PrivateRssBytes();
  const std::string over = OverBudgetNow(facts_, s, private_rss);
  if (!over.empty() && !over_budget_warned_) {
    over_budget_warned_ = true;
    spdlog::warn("{}", over);
  } else if (over.empty() && (private_rss + facts_.segment_bytes) * 10 < facts_.memory.budget_bytes * 9) {
    over_budget_warned_ = false;
  }
  notifier_.Status(SystemdStatusLine(facts_, s, pipeline_.ended_at(), rates));
}

}  // namespace ringfeed
