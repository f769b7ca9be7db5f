#include "daemon/autotune.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <system_error>

#include "daemon/budget.h"
#include "daemon/sched_clock.h"
#include "daemon/thread_name.h"
#include "shm/ring.h"

namespace ringfeed {
namespace {
constexpr auto kSamplePeriod = std::chrono::milliseconds(10);  // ready-batch sampling
// After an interval that produced no record (no consumer takes batches, or storage stalls):
// 100 wake-ups a second would be most of an idle daemon's CPU.
constexpr auto kIdleSamplePeriod = std::chrono::milliseconds(100);
constexpr size_t kKeptChanges = 20;                          // in StatusJson
// The first interval, and the one after consumers attached or left: status shows what they
// changed soon (an interval had grown to 2 s while no trainer was attached, and said "none
// attached" for that long after one came; new-user helper-103, session 40).
constexpr double kFirstIntervalSeconds = 0.25;
// Consumers attaching or leaving end an interval no sooner than this (too short to judge).
constexpr double kShortestIntervalSeconds = 0.1;

int64_t CountReady(const shm::Ring& ring, uint32_t slots) {
  int64_t ready = 0;
  for (uint32_t i = 0; i < slots; ++i) {
    ready += shm::SlotWord::Unpack(ring.header(i)->word.load(std::memory_order_relaxed)).state == shm::SlotState::kReady;
  }
  return ready;
}

double Fraction(uint64_t part_ns, double whole_seconds) {
  if (whole_seconds <= 0) return 0;
  return std::clamp(static_cast<double>(part_ns) / 1e9 / whole_seconds, 0.0, 1.0);
}
}  // namespace

Autotune::Autotune(AutotuneOptions options, Pipeline& pipeline, const shm::Ring& ring, ConsumerRegistry& consumers)
    : options_(std::move(options)),
      pipeline_(pipeline),
      ring_(ring),
      consumers_(consumers),
      tuner_(options_.limits, options_.initial, options_.fixed) {
  last_.knobs = options_.initial;
  // Until the first interval is measured: no CPU used yet, readers counted as waiting.
  last_.blocked_io_threads = options_.initial.readers;
}

Autotune::~Autotune() { Stop(); }

void Autotune::Start() {
  thread_ = std::thread([this] {
    try {
      Run();
    } catch (const std::bad_alloc& e) {  // its maps and strings, the schedstat file's buffer
      pipeline_.FailOutOfMemory("the tuner", e);
    } catch (const std::exception& e) {  // nothing it calls throws another: an internal error
      spdlog::error("autotune: {}; the knobs stay as they are", e.what());
    }
  });
}

void Autotune::Stop() {
  {
    std::lock_guard lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Autotune::Apply(const TunerKnobs& before, const TunerKnobs& k) {
  // Memory first: shrink the per-file read-ahead before adding readers (more open files).
  if (k.stream_buffer_bytes != before.stream_buffer_bytes) pipeline_.SetStreamBufferBytes(k.stream_buffer_bytes);
  // A thread that cannot start (ulimit -v, ulimit -u) leaves that stage as it was: the raise then
  // gains nothing and the tuner takes it back.
  try {
    if (k.readers != before.readers) pipeline_.SetReaders(static_cast<size_t>(k.readers));
  } catch (const std::system_error& e) {
    spdlog::error("autotune: readers {} -> {}: {}; the readers running go on", before.readers, k.readers,
                  ThreadStartFailure(e));
  }
  if (k.reads_per_file != before.reads_per_file) pipeline_.SetReadsPerFile(static_cast<size_t>(k.reads_per_file));
  try {
    if (k.workers != before.workers) pipeline_.SetWorkers(static_cast<size_t>(k.workers));
  } catch (const std::system_error& e) {
    spdlog::error("autotune: workers {} -> {}: {}; the workers running go on", before.workers, k.workers,
                  ThreadStartFailure(e));
  }
  if (k.prefetch != before.prefetch) pipeline_.SetPrefetch(static_cast<size_t>(k.prefetch));
}

void Autotune::Run() {
  NameThread("rf-tuner");
  struct Returned {  // on every way out: StatusJson waits for the last measurements
    Autotune& self;
    ~Returned() {
      {
        std::lock_guard lock(self.mutex_);
        self.run_returned_ = true;
      }
      self.run_returned_cv_.notify_all();
    }
  } returned{*this};
  const shm::Ring& ring = ring_;
  const uint32_t slots = ring_.slot_count;
  using Clock = std::chrono::steady_clock;

  PipelineStats prev = pipeline_.Snapshot();
  SchedClock sched_clock;
  std::map<uint32_t, uint64_t> prev_wait;  // consumer id -> wait_ns at the interval's start
  for (const auto& c : consumers_.List()) prev_wait[c.id] = c.wait_ns;
  uint64_t membership = consumers_.membership_changes();  // at the interval's start
  Clock::time_point interval_start = Clock::now();
  double interval = kFirstIntervalSeconds;  // until the tuner says
  double ready_sum = 0;
  int64_t ready_samples = 0, ready_min = INT64_MAX;

  auto sample_period = kSamplePeriod;
  std::unique_lock lock(stop_mutex_);
  for (;;) {
    if (stop_cv_.wait_for(lock, sample_period, [&] { return stop_; })) return;
    const int64_t ready = CountReady(ring, slots);
    ready_sum += static_cast<double>(ready);
    ++ready_samples;
    ready_min = std::min(ready_min, ready);
    const Clock::time_point now = Clock::now();
    double elapsed = std::chrono::duration<double>(now - interval_start).count();
    // Production's end closes the interval early: its measurements are production's last ones.
    // So do consumers attaching or leaving: the next interval measures the new set.
    // (Not before kShortestIntervalSeconds: consumers that come and go every few milliseconds
    // must not keep the tuner from ever observing an interval.)
    const bool ended = pipeline_.ended();
    const uint64_t membership_now = consumers_.membership_changes();
    const bool members_changed = membership_now != membership;
    if (elapsed < interval && !ended && !(members_changed && elapsed >= kShortestIntervalSeconds)) continue;
    // Production's last stretch ends where production did, not at this sample (up to 100 ms on).
    // An interval that began after the end measures its whole length. CPU time is measured up
    // to this sample, so CPU per second is over the whole interval (over a stretch of 1 us it
    // read as 637 cores: helper-162).
    const double wall = elapsed;
    if (ended) {
      const double producing = std::chrono::duration<double>(pipeline_.ended_at() - interval_start).count();
      if (producing > 0) elapsed = std::min(producing, elapsed);
    }

    const PipelineStats s = pipeline_.Snapshot();
    TunerObservation o;
    o.interval_seconds = elapsed;
    o.records = s.records - prev.records;
    uint64_t wait_ns = 0;
    std::map<uint32_t, uint64_t> wait_now;
    for (const auto& c : consumers_.List()) {
      wait_now[c.id] = c.wait_ns;
      const auto it = prev_wait.find(c.id);
      // A consumer that attached during the interval counts from zero.
      const uint64_t before = it == prev_wait.end() ? 0 : it->second;
      wait_ns += c.wait_ns >= before ? c.wait_ns - before : 0;
    }
    o.consumers = static_cast<int64_t>(wait_now.size());
    o.consumer_wait_fraction = o.consumers > 0 ? Fraction(wait_ns / static_cast<uint64_t>(o.consumers), elapsed) : 0;
    const double readers = static_cast<double>(std::max<size_t>(1, s.readers));
    const double workers = static_cast<double>(std::max<size_t>(1, s.workers));
    const uint64_t read_busy = s.read_busy_ns - prev.read_busy_ns;
    o.read_busy_fraction = Fraction(read_busy, elapsed * readers);
    // A reader's busy time is CPU + waiting for storage + waiting for a core. On a loaded
    // machine the last one makes page-cache reads look I/O-blocked, so it is taken out,
    // estimated from the whole process's run-queue wait per CPU-second (schedstat).
    const SchedClock::Delta sched = sched_clock.Read();
    const double cpu_delta = static_cast<double>(sched.cpu_ns);
    const double delay_delta = static_cast<double>(sched.run_delay_ns);
    const double run_delay_per_cpu = cpu_delta > 0 ? delay_delta / cpu_delta : 0;
    const double read_cpu = static_cast<double>(s.read_cpu_ns - prev.read_cpu_ns);
    const double read_not_queued = static_cast<double>(read_busy) - read_cpu * run_delay_per_cpu;
    o.read_cpu_fraction = read_busy == 0 ? 0 : read_not_queued <= read_cpu ? 1.0 : std::clamp(read_cpu / read_not_queued, 0.0, 1.0);
    o.read_cpu_cores = wall > 0 ? read_cpu / 1e9 / wall : 0;
    o.sequencer_read_wait_fraction = Fraction(s.read_wait_ns - prev.read_wait_ns, elapsed);
    o.sequencer_cpu_fraction = Fraction(s.sequencer_cpu_ns - prev.sequencer_cpu_ns, elapsed);
    o.parse_busy_fraction = Fraction(s.parse_busy_ns - prev.parse_busy_ns, elapsed * workers);
    const uint64_t parse_busy = s.parse_busy_ns - prev.parse_busy_ns;
    o.parse_cpu_fraction = parse_busy == 0 ? 1.0
                                           : std::clamp(static_cast<double>(s.parse_cpu_ns - prev.parse_cpu_ns) /
                                                            static_cast<double>(parse_busy), 0.0, 1.0);
    o.cpu_cores = wall > 0 ? cpu_delta / 1e9 / wall : 0;
    o.sequencer_slot_wait_fraction = Fraction(s.slot_wait_ns - prev.slot_wait_ns, elapsed);
    o.sequencer_prefetch_wait_fraction = Fraction(s.prefetch_wait_ns - prev.prefetch_wait_ns, elapsed);
    o.ready_slots_mean = ready_samples > 0 ? ready_sum / static_cast<double>(ready_samples) : 0;
    o.ready_slots_min = ready_samples > 0 ? ready_min : 0;
    o.read_ahead_bytes = s.read_ahead_bytes;
    if (s.end != PipelineEnd::kRunning) {
      // Nothing left to tune. What status shows from now on is the last stretch of production:
      // this partial interval, unless production ended before it made a record (then the one
      // before it was that stretch).
      if (o.records > 0) {
        std::lock_guard status_lock(mutex_);
        last_observation_ = o;
        last_.cpu_cores = o.cpu_cores;  // the CPU line of status: the same stretch
        last_.runnable_threads = std::llround(o.cpu_cores);
      }
      return;
    }

    const TunerKnobs before = tuner_.knobs();
    const TunerDecision decision = tuner_.Observe(o);
    // The knobs measured in this interval (the decision's follow on their own lines).
    // "busy 40% (cpu 75%)": the share of the busy time on the CPU; nothing where it shows as 0%.
    const auto busy = [](double busy_fraction, double cpu_fraction) {
      return busy_fraction >= 0.005 ? fmt::format("{:.0f}% (cpu {:.0f}%)", 100 * busy_fraction, 100 * cpu_fraction)
                               : std::string("0%");
    };
    spdlog::debug(
        "autotune: {:.2f} s, {} records ({:.0f}/s), {} consumers waited {:.0f}%, read busy {}, sequencer cpu {:.0f}%, "
        "waited for reads {:.0f}% / slots {:.0f}% (at the prefetch depth {:.0f}%), parse busy {}, ready {:.1f} (min {}), "
        "{:.2f} cores; measured with readers {} read_ahead {} reads_per_file {} workers {} prefetch {}, {} blocked-I/O "
        "readers",
        elapsed, o.records, static_cast<double>(o.records) / elapsed, o.consumers, 100 * o.consumer_wait_fraction,
        busy(o.read_busy_fraction, o.read_cpu_fraction), 100 * o.sequencer_cpu_fraction,
        100 * o.sequencer_read_wait_fraction, 100 * o.sequencer_slot_wait_fraction,
        100 * o.sequencer_prefetch_wait_fraction, busy(o.parse_busy_fraction, o.parse_cpu_fraction),
        o.ready_slots_mean, o.ready_slots_min, o.cpu_cores, before.readers, shm::HumanBytes(before.stream_buffer_bytes),
        before.reads_per_file, before.workers, before.prefetch, decision.blocked_io_threads);
    for (const TunerChange& c : decision.changes) {
      spdlog::debug("autotune: {} {} -> {}: {}", c.knob, c.from, c.to, c.reason);
    }
    if (!decision.note.empty()) spdlog::debug("autotune: {}", decision.note);
    if (!decision.holding.empty()) spdlog::debug("autotune: no raise: {}", decision.holding);
    Apply(before, decision.knobs);
    {
      std::lock_guard status_lock(mutex_);
      last_ = decision;
      last_observation_ = o;
      const double at = std::chrono::duration<double>(now - started_).count();
      for (const TunerChange& c : decision.changes) {
        changes_.emplace_back(at, c);
        if (changes_.size() > kKeptChanges) changes_.pop_front();
      }
    }

    prev = s;
    prev_wait = std::move(wait_now);
    membership = membership_now;
    interval_start = now;
    interval = std::clamp(decision.next_interval_seconds, 0.05, 10.0);
    if (members_changed) interval = std::min(interval, kFirstIntervalSeconds);
    sample_period = o.records == 0 ? kIdleSamplePeriod : kSamplePeriod;
    ready_sum = 0;
    ready_samples = 0;
    ready_min = INT64_MAX;
  }
}

nlohmann::json Autotune::StatusJson() const {
  std::unique_lock lock(mutex_);
  if (pipeline_.ended()) run_returned_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return run_returned_; });
  const TunerLimits& l = options_.limits;
  const TunerObservation& m = last_observation_;
  const TunerFixed& f = options_.fixed;
  nlohmann::json fixed = nlohmann::json::array();
  if (f.readers) fixed.push_back("readers");
  if (f.stream_buffer_bytes) fixed.push_back("read_ahead");
  if (f.workers) fixed.push_back("workers");
  if (f.prefetch) fixed.push_back("prefetch");
  if (f.reads_per_file) fixed.push_back("reads_per_file");
  nlohmann::json changes = nlohmann::json::array();
  for (const auto& [at, c] : changes_) {
    changes.push_back({{"at_seconds", at}, {"knob", c.knob}, {"from", c.from}, {"to", c.to}, {"reason", c.reason}});
  }
  return {{"knobs",
           {{"readers", last_.knobs.readers},
            {"read_ahead_bytes", last_.knobs.stream_buffer_bytes},
            {"workers", last_.knobs.workers},
            {"prefetch", last_.knobs.prefetch},
            {"reads_per_file", last_.knobs.reads_per_file}}},
          {"fixed", fixed},
          {"limits",
           {{"cpu_budget_cores", options_.cpu_budget_cores},
            {"cpu_budget_source", options_.cpu_budget_source},
            {"machine_cores", l.machine_cores},
            {"memory_budget_bytes", options_.memory_budget_bytes},
            {"memory_budget_source", options_.memory_budget_source},
            {"read_ahead_budget_bytes", l.read_ahead_budget_bytes},
            {"max_readers", l.max_readers},
            {"max_workers", l.max_workers},
            {"max_prefetch", l.max_prefetch},
            {"max_reads_per_file", l.max_reads_per_file},
            {"read_block_bytes", l.read_block_bytes}}},
          {"cpu_cores", last_.cpu_cores},
          {"runnable_threads", last_.runnable_threads},
          {"blocked_io_threads", last_.blocked_io_threads},
          {"interval_seconds", last_.next_interval_seconds},
          {"measured",
           {{"interval_seconds", m.interval_seconds},
            {"records_per_second", m.interval_seconds > 0 ? static_cast<double>(m.records) / m.interval_seconds : 0.0},
            {"consumers", m.consumers},
            {"consumer_wait_fraction", m.consumer_wait_fraction},
            {"cpu_cores", m.cpu_cores},
            {"read_busy_fraction", m.read_busy_fraction},
            {"read_cpu_fraction", m.read_cpu_fraction},
            {"read_cpu_cores", m.read_cpu_cores},
            {"sequencer_read_wait_fraction", m.sequencer_read_wait_fraction},
            {"sequencer_cpu_fraction", m.sequencer_cpu_fraction},
            {"parse_busy_fraction", m.parse_busy_fraction},
            {"parse_cpu_fraction", m.parse_cpu_fraction},
            {"sequencer_slot_wait_fraction", m.sequencer_slot_wait_fraction},
            {"sequencer_prefetch_wait_fraction", m.sequencer_prefetch_wait_fraction},
            {"ready_batches_mean", m.ready_slots_mean},
            {"ready_batches_min", m.ready_slots_min},
            {"read_ahead_bytes", m.read_ahead_bytes}}},
          {"holding", last_.holding.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_.holding)},
          {"changes", changes}};
}

}  // namespace ringfeed
