// Tuner: the autotuner's decisions (contract and numbers in daemon/tuner.h).
//
// Each Observe does, in order:
//  1. Budgets and limits: knobs over max_*, over the read-ahead budget or over the CPU budget
//     (measured CPU use above it) are lowered, and stream_buffer_bytes is re-derived from
//     readers. Any such change ends the round (a trial in progress is dropped, not judged).
//  2. No consumers (or an empty interval): hold. Nothing changes.
//  3. The trial of the previous round is judged (a change of readers one round later: the round
//     right after it is their ramp, see kReaderSettleIntervals): a raise is kept if throughput gained >= 5%
//     (a positive gain under that on its interval: judged again on that interval and the next
//     together), a
//     step down if consumers still do not wait (or, for a CPU trade made while they waited, if
//     throughput did not fall by 5%). Otherwise the knobs go back and the knob is held off
//     (a raise: 5 s the first time, then 120 s, doubling; a step down: 120 s, doubling). A
//     kept raise leaves a floor: steps down never go back to that level, and ends the other
//     knobs' raise hold-offs. A single raise of readers or workers taken back while the other
//     stage saturated in its place leaves a pair hint for kPairHintSeconds: they go up
//     together next (TryPair). A pair taken back holds further hints off (5 s, then 120 s,
//     doubling).
//  4. A shift (throughput +-20%, consumer wait +-20 points, consumer count) against the level
//     after the last change: intervals short again, hold-offs and floors cleared, a raise in
//     trial without a gain taken back.
//  5. Once the current knobs have been measured for >= kTrialIntervalSeconds since they last
//     changed (their "stretch", the trial's before-throughput; before the first change, in the
//     first kStartupRampSeconds with consumers, an interval > kRaiseGain over it restarts it:
//     the start-up ramp; at start with reads blocked beyond doubt, 0.25 s, and that raise must
//     gain 50%: StartBlockedOnReads),
//     at most one change (one trial), so that its effect can be judged alone:
//     consumers wait -> readers and workers together after a pair hint (TryPair), else raise
//     the stage that limits (see TryRaise), or trade CPU from the stage
//     with slack to it; when no stage limits, or the reads limit but readers are held off, or
//     the ring runs dry in bursts with prefetch at its maximum: one more worker (the stages take
//     turns); when nothing can be raised, step down idle workers as below (must not lose
//     throughput);
//     consumers do not wait -> step down the first of workers, readers, prefetch that would
//     stay <= 85% busy (or, for prefetch, kept >= 2 batches ready for 3 intervals).
//     Beside that change, in the same round: while consumers wait and the sequencer waits for
//     records, a file's read-ahead that holds less than the interleave takes from it during
//     one of its reads is deepened (DeepenReadAhead; a measured need, no trial).
// This is tf.data's stage-based hill climbing (raise the slowest stage) with what it lacks: a
// budget check before every step, a trial that must pay off, steps down, and hold-offs.
#include "daemon/tuner.h"

#include "format/read_queue.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <utility>

namespace ringfeed {
namespace {

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  if (n < 0) return {};
  return std::string(buffer, std::min(static_cast<size_t>(n), sizeof buffer - 1));
}

std::string Bytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30)) return Format("%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  if (bytes >= (uint64_t{1} << 20)) return Format("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= (uint64_t{1} << 10)) return Format("%.1f KiB", static_cast<double>(bytes) / (1 << 10));
  return Format("%llu B", static_cast<unsigned long long>(bytes));
}

double Pct(double fraction) { return 100 * fraction; }
long long LL(int64_t v) { return static_cast<long long>(v); }
double Clamp01(double v) { return std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0.0; }

}  // namespace

std::string ToString(const TunerChange& change) {
  return Format("%s %lld -> %lld: ", change.knob.c_str(), LL(change.from), LL(change.to)) + change.reason;
}

// One observation, digested.
struct Tuner::Signals {
  const TunerObservation& o;
  double interval = 0;
  double throughput = 0;  // records/s
  double wait = 0;        // consumer wait fraction
  bool waiting = false;   // wait >= kConsumerWaitThreshold
  double read_busy = 0, parse_busy = 0, read_wait = 0, slot_wait = 0;
  double prefetch_wait = 0;  // the part of slot_wait at the prefetch depth (<= slot_wait)
};

namespace {
// A thread that uses less CPU than this (cores) frees nothing worth a step down for the budget.
constexpr double kMinThreadCores = 0.05;
}  // namespace

Tuner::Tuner(TunerLimits limits, TunerKnobs initial, TunerFixed fixed)
    : limits_(limits), knobs_(initial), fixed_(fixed) {
  const uint64_t high = std::max(limits_.min_stream_buffer_bytes, limits_.max_stream_buffer_bytes);
  read_ahead_level_ = std::clamp(limits_.start_stream_buffer_bytes, limits_.min_stream_buffer_bytes, high);
}

int64_t Tuner::OpenFiles(const TunerLimits& limits, int64_t readers) {
  int64_t open = limits.open_files_base + std::max<int64_t>(0, readers);
  if (limits.max_open_files > 0) open = std::min(open, limits.max_open_files);
  return std::max<int64_t>(1, open);
}

uint64_t Tuner::StreamBufferBytesFor(const TunerLimits& limits, int64_t readers, int64_t reads_per_file) {
  const uint64_t share = limits.read_ahead_budget_bytes / static_cast<uint64_t>(OpenFiles(limits, readers));
  const uint64_t queued =
      reads_per_file > 1 ? ReadQueue::MostBytes(static_cast<uint64_t>(reads_per_file), limits.read_block_bytes) : 0;
  uint64_t bytes = share > queued ? share - queued : 0;
  bytes = std::min(bytes, limits.max_stream_buffer_bytes);
  if (reads_per_file > 1) bytes = std::min(bytes, limits.queued_stream_buffer_bytes);
  if (bytes >= kStreamBufferAlign) bytes -= bytes % kStreamBufferAlign;
  return bytes;
}

uint64_t Tuner::StartStreamBufferBytes(const TunerLimits& limits, int64_t readers, int64_t reads_per_file) {
  const uint64_t start = std::max(limits.start_stream_buffer_bytes, limits.min_stream_buffer_bytes);
  return std::min(StreamBufferBytesFor(limits, readers, reads_per_file), start);
}

int64_t Tuner::KnobOf(const TunerKnobs& knobs, Knob k) {
  switch (k) {
    case kReaders: return knobs.readers;
    case kWorkers: return knobs.workers;
    case kReadsPerFile: return knobs.reads_per_file;
    default: return knobs.prefetch;
  }
}

int64_t& Tuner::Value(Knob k) {
  switch (k) {
    case kReaders: return knobs_.readers;
    case kWorkers: return knobs_.workers;
    case kReadsPerFile: return knobs_.reads_per_file;
    default: return knobs_.prefetch;
  }
}

bool Tuner::Fixed(Knob k) const {
  switch (k) {
    case kReaders: return fixed_.readers;
    case kWorkers: return fixed_.workers;
    case kReadsPerFile: return fixed_.reads_per_file;
    default: return fixed_.prefetch;
  }
}

const char* Tuner::Name(Knob k) {
  switch (k) {
    case kReaders: return "readers";
    case kWorkers: return "workers";
    case kReadsPerFile: return "reads_per_file";
    default: return "prefetch";
  }
}

int64_t Tuner::CpuBoundReaders(int64_t readers) const {
  return std::llround(static_cast<double>(readers) * read_cpu_share_);
}

double Tuner::ProjectedCores(int64_t workers, int64_t readers) const {
  const double cores = cpu_cores_ + static_cast<double>(workers - measured_workers_) * worker_cores_ +
                       static_cast<double>(readers - measured_readers_) * read_cpu_share_;
  return std::max(0.0, cores);
}

bool Tuner::WithinCpuBudget(int64_t workers, int64_t readers) const {
  if (ProjectedCores(workers, readers) <= limits_.cpu_cores) return true;
  // A budget of every core there is cannot be exceeded: the trial's measured gain decides.
  return limits_.machine_cores > 0 && limits_.cpu_cores >= limits_.machine_cores &&
         cpu_cores_ * (1 + kRaiseGain) <= limits_.cpu_cores;
}

std::string Tuner::CpuUse() const {
  return Format("%.2f of %.3g %s used (%.2f per worker, %.2f per reader)", cpu_cores_, limits_.cpu_cores,
                limits_.cpu_cores == 1 ? "core" : "cores",
                worker_cores_, read_cpu_share_);
}

uint64_t Tuner::QueueBytesPerFile(int64_t reads) const {
  return reads > 1 ? ReadQueue::MostBytes(static_cast<uint64_t>(reads), limits_.read_block_bytes) : 0;
}

int64_t Tuner::MaxReadsPerFileForMemory() const {
  const uint64_t stream = fixed_.stream_buffer_bytes ? knobs_.stream_buffer_bytes : limits_.min_stream_buffer_bytes;
  const uint64_t share = limits_.read_ahead_budget_bytes / static_cast<uint64_t>(OpenFiles(limits_, knobs_.readers));
  if (share <= stream || limits_.read_block_bytes == 0) return 1;
  return std::max<int64_t>(1, static_cast<int64_t>(std::min<uint64_t>(
                                  ReadQueue::MostReadsFor(share - stream, limits_.read_block_bytes), uint64_t{1} << 20)));
}

int64_t Tuner::QueuedReadsLikeOne() const {
  return std::max<int64_t>(1, static_cast<int64_t>(limits_.read_bytes / std::max<uint64_t>(1, limits_.read_block_bytes)));
}

int64_t Tuner::ReadsPerFileRaiseTarget() const {
  const int64_t k = knobs_.reads_per_file;
  if (fixed_.reads_per_file || now_seconds_ < hold_[kReadsPerFile].raise_until) return k;
  const int64_t cap = std::min(limits_.max_reads_per_file, MaxReadsPerFileForMemory());
  if (k == 1) {
    // Bytes in flight per file double with each step. One read at a time brings read_bytes
    // (1 MiB) per round trip, as much as read_bytes / read_block_bytes (4) queued blocks, so
    // the first step is to twice that (8): a queue of 2 blocks brought half of what one read
    // did (a 20 ms mount with 16 readers: 361k -> 205k records/s).
    const int64_t like_one = QueuedReadsLikeOne();
    const int64_t to = std::min(2 * like_one, cap);
    return to > like_one ? to : 1;
  }
  return std::max(std::min(2 * k, cap), k);
}

int64_t Tuner::MaxReadersForMemory() const {
  const uint64_t per_file = (fixed_.stream_buffer_bytes ? knobs_.stream_buffer_bytes : limits_.min_stream_buffer_bytes) +
                            QueueBytesPerFile(knobs_.reads_per_file);
  if (per_file == 0) return limits_.max_readers;
  const uint64_t files = limits_.read_ahead_budget_bytes / per_file;
  // Every file there is fits: more readers open no more files.
  if (limits_.max_open_files > 0 && files >= static_cast<uint64_t>(limits_.max_open_files)) return limits_.max_readers;
  const int64_t readers = static_cast<int64_t>(std::min<uint64_t>(files, uint64_t{1} << 40)) - limits_.open_files_base;
  return std::min(readers, limits_.max_readers);
}

int64_t Tuner::InterleavedFiles() const {
  return limits_.max_open_files > 0 ? std::min(limits_.open_files_base, limits_.max_open_files)
                                    : limits_.open_files_base;
}

int64_t Tuner::ReadersRaiseTarget(int64_t workers, bool* cpu_blocked, bool ignore_hold) const {
  *cpu_blocked = false;
  const int64_t r = knobs_.readers;
  if (fixed_.readers || (!ignore_hold && now_seconds_ < hold_[kReaders].raise_until) || r >= limits_.max_readers) {
    return r;
  }
  int64_t to = IoBound() ? 2 * r : r + 1;
  // Queued reads keep the interleave's files read ahead, a reader each; one more reader serves
  // the files opened ahead of their turn, whose first reads (a round trip each, every file
  // change) otherwise hold up an interleaved file's reader (a 20 ms mount, 16 queued reads per
  // file over 4 files of 25 MB: 5 readers gave 16% more than 4, for 0.5 MiB; 6, 8 and 16 no
  // more than 5, session 45).
  if (knobs_.reads_per_file > 1) {
    // An I/O-bound x2 step that would stop one short of the cap goes to it: the reader for the
    // files opened ahead pays as soon as each interleaved file has its own (2 -> 5 instead of
    // 2 -> 4 -> 5 with 4 files: 90% of the steady throughput 1.5 s sooner on a 20 ms mount).
    const int64_t most = QueuedReadsMostReaders();
    if (IoBound() && to == most - 1) to = most;
    to = std::min(to, std::max(r, most));
  }
  to = std::min({to, limits_.max_readers, MaxReadersForMemory()});  // after the step, which may add one
  if (to <= r) return r;
  while (to > r && !WithinCpuBudget(workers, to)) --to;
  *cpu_blocked = to == r;
  return to;
}

bool Tuner::CanRaiseWorkers(int64_t readers, bool* cpu_blocked) const {
  *cpu_blocked = false;
  const int64_t w = knobs_.workers;
  if (fixed_.workers || now_seconds_ < hold_[kWorkers].raise_until || w >= limits_.max_workers) return false;
  if (!WithinCpuBudget(w + 1, readers)) {
    *cpu_blocked = true;
    return false;
  }
  return true;
}

void Tuner::Set(Knob k, int64_t to, const std::string& reason, std::vector<TunerChange>* changes) {
  int64_t& value = Value(k);
  if (value == to) return;
  changes->push_back({Name(k), value, to, reason});
  value = to;
  if (k == kPrefetch) quiet_intervals_ = 0;
  if (k == kReaders || k == kReadsPerFile) UpdateStreamBufferBytes(BudgetShareReason(), changes);
}

std::string Tuner::BudgetShareReason() const {
  std::string text = Format("read-ahead budget %s over %lld open files (readers %lld)",
                            Bytes(limits_.read_ahead_budget_bytes).c_str(), LL(OpenFiles(limits_, knobs_.readers)),
                            LL(knobs_.readers));
  if (knobs_.reads_per_file > 1) {
    text += Format(", less %lld queued reads of %s per file", LL(knobs_.reads_per_file),
                   Bytes(limits_.read_block_bytes).c_str());
  }
  return text;
}

void Tuner::UpdateStreamBufferBytes(const std::string& reason, std::vector<TunerChange>* changes) {
  if (fixed_.stream_buffer_bytes) return;
  const uint64_t bytes =
      std::min(StreamBufferBytesFor(limits_, knobs_.readers, knobs_.reads_per_file), read_ahead_level_);
  if (bytes == knobs_.stream_buffer_bytes) return;
  changes->push_back({"read_ahead_bytes", static_cast<int64_t>(knobs_.stream_buffer_bytes),
                      static_cast<int64_t>(bytes), reason});
  knobs_.stream_buffer_bytes = bytes;
}

void Tuner::Restore(const TunerKnobs& to, const std::string& reason, std::vector<TunerChange>* changes) {
  for (Knob k : {kReaders, kWorkers, kPrefetch, kReadsPerFile}) {
    const int64_t target = KnobOf(to, k);
    if (Value(k) != target) {
      changes->push_back({Name(k), Value(k), target, reason});
      Value(k) = target;
      if (k == kPrefetch) quiet_intervals_ = 0;
    }
  }
  // The read-ahead level is not part of a trial (it may have risen beside it): the read-ahead
  // goes back to what the readers restored and the current level give.
  const uint64_t bytes = fixed_.stream_buffer_bytes
                             ? to.stream_buffer_bytes
                             : std::min(StreamBufferBytesFor(limits_, to.readers, to.reads_per_file), read_ahead_level_);
  if (knobs_.stream_buffer_bytes != bytes) {
    changes->push_back({"read_ahead_bytes", static_cast<int64_t>(knobs_.stream_buffer_bytes),
                        static_cast<int64_t>(bytes), Format("back with readers %lld", LL(to.readers))});
    knobs_.stream_buffer_bytes = bytes;
  }
}

void Tuner::EnforceBudgets(const Signals& s, std::vector<TunerChange>* changes) {
  // Counts within their limits (a knob fixed by the config is left as the config says).
  auto within = [&](Knob k, int64_t high, const char* limit) {
    if (Fixed(k)) return;
    if (Value(k) > high) Set(k, std::max<int64_t>(1, high), Format("above %s %lld", limit, LL(high)), changes);
    if (Value(k) < 1) Set(k, 1, "at least 1", changes);
  };
  within(kReaders, limits_.max_readers, "max_readers");
  within(kWorkers, limits_.max_workers, "max_workers");
  within(kPrefetch, limits_.max_prefetch, "max_prefetch");
  within(kReadsPerFile, limits_.max_reads_per_file, "max_reads_per_file");
  // Memory: queued reads first (the cheaper knob to give back), then readers.
  if (!fixed_.reads_per_file && knobs_.reads_per_file > 1 && knobs_.reads_per_file > MaxReadsPerFileForMemory()) {
    const int64_t cap = MaxReadsPerFileForMemory();
    Set(kReadsPerFile, cap,
        Format("read-ahead budget %s holds %lld reads of %s per file over %lld open files",
               Bytes(limits_.read_ahead_budget_bytes).c_str(), LL(cap), Bytes(limits_.read_block_bytes).c_str(),
               LL(OpenFiles(limits_, knobs_.readers))),
        changes);
  }

  // Memory: open files x stream_buffer_bytes within the read-ahead budget.
  if (!fixed_.readers) {
    const int64_t cap = std::max<int64_t>(1, MaxReadersForMemory());
    if (knobs_.readers > cap) {
      const uint64_t per_file =
          (fixed_.stream_buffer_bytes ? knobs_.stream_buffer_bytes : limits_.min_stream_buffer_bytes) +
          QueueBytesPerFile(knobs_.reads_per_file);
      Set(kReaders, cap,
          Format("read-ahead budget %s holds %lld open files of %s (%lld readers)",
                 Bytes(limits_.read_ahead_budget_bytes).c_str(), LL(OpenFiles(limits_, cap)),
                 Bytes(per_file).c_str(), LL(cap)),
          changes);
    }
  }

  // CPU: the measured use over the budget (beyond the tolerance) lowers workers or CPU-bound
  // readers until the projection fits, from the less busy stage first (on a tie, workers:
  // readers are the cheaper threads to keep). Raises of what was lowered are held off.
  if (cpu_cores_ > limits_.cpu_cores * (1 + kCpuTolerance)) {
    int64_t w = knobs_.workers, r = knobs_.readers;
    while (ProjectedCores(w, r) > limits_.cpu_cores) {
      const bool can_w = !fixed_.workers && w > 1 && worker_cores_ >= kMinThreadCores;
      const bool can_r = !fixed_.readers && r > 1 && read_cpu_share_ >= kMinThreadCores;
      if (!can_w && !can_r) break;
      if (can_w && (!can_r || s.parse_busy <= s.read_busy)) {
        --w;
      } else {
        --r;
      }
    }
    if (w != knobs_.workers || r != knobs_.readers) {
      const std::string reason =
          Format("over the CPU budget: %.2f cores used in %.2f s, %.3g allowed; %.2f per worker, %.2f per reader",
                 cpu_cores_, s.interval, limits_.cpu_cores, worker_cores_, read_cpu_share_);
      for (Knob k : {kWorkers, kReaders}) {
        if ((k == kWorkers ? w : r) == Value(k)) continue;
        // Measured, not a trial's noise: at least kHoldOffSeconds even the first time.
        Hold& h = hold_[k];
        const double seconds = std::max(h.raise_seconds, kHoldOffSeconds);
        h.raise_until = now_seconds_ + seconds;
        h.raise_seconds = NextHoldOff(seconds);
      }
      Set(kWorkers, w, reason, changes);
      Set(kReaders, r, reason, changes);
    }
  }

  // stream_buffer_bytes follows readers (an initial value, or one set before readers were).
  UpdateStreamBufferBytes(BudgetShareReason(), changes);
}

void Tuner::SetReference(double throughput, double wait, int64_t consumers) {
  has_reference_ = true;
  reference_seen_ = true;
  reference_throughput_ = throughput;
  reference_wait_ = wait;
  reference_consumers_ = consumers;
}

bool Tuner::Shifted(const Signals& s) const {
  if (s.o.consumers != reference_consumers_) return true;
  if (std::fabs(s.wait - reference_wait_) > kShiftFraction) return true;
  if (reference_throughput_ <= 0) return s.throughput > 0;
  return std::fabs(s.throughput - reference_throughput_) > kShiftFraction * reference_throughput_;
}

void Tuner::ClearHolds() {
  for (Hold& h : hold_) h = Hold{};
  pair_hint_.reset();
  pair_raise_until_ = 0;
  pair_raise_seconds_ = kFirstHoldOffSeconds;
}

bool Tuner::ReadsLimit(const Signals& s) {
  return s.read_busy >= kSaturatedBusy || (s.read_wait >= kReadStarved && s.read_busy >= kReadStarvedBusy);
}

bool Tuner::StartBlockedOnReads(const Signals& s) const {
  return !changed_once_ && s.throughput > 0 && s.wait >= kStartBlockedFraction &&
         s.read_wait >= kStartBlockedFraction && s.read_busy >= kStartBlockedFraction && IoBound() &&
         ReadsPerFileRaiseTarget() > knobs_.reads_per_file;
}

void Tuner::StartTrial(bool raise, const Signals& s, const TunerKnobs& before, std::vector<Knob> knobs) {
  // Readers and queued reads act after a storage round trip (new files' first reads, queues
  // refilled from each file's next turn).
  const bool readers = std::find(knobs.begin(), knobs.end(), kReaders) != knobs.end() ||
                       std::find(knobs.begin(), knobs.end(), kReadsPerFile) != knobs.end();
  const double throughput = stretch_seconds_ > 0 ? stretch_records_ / stretch_seconds_ : s.throughput;
  trial_ = Trial{raise, s.waiting, before, std::move(knobs), throughput, s.wait, s.o.consumers,
                 readers ? kReaderSettleIntervals : 0};
}

void Tuner::ResetStretch(double records, double seconds) {
  stretch_.clear();
  stretch_records_ = 0;
  stretch_seconds_ = 0;
  if (seconds > 0) AddToStretch(records, seconds);
}

void Tuner::AddToStretch(double records, double seconds) {
  stretch_.emplace_back(records, seconds);
  stretch_records_ += records;
  stretch_seconds_ += seconds;
  // The last kStretchWindowSeconds (whole intervals): a slow drift must not leave a trial
  // judged against stale figures.
  while (stretch_.size() > 1 && stretch_seconds_ - stretch_.front().second >= kStretchWindowSeconds) {
    stretch_records_ -= stretch_.front().first;
    stretch_seconds_ -= stretch_.front().second;
    stretch_.pop_front();
  }
}

// A raise's first failure holds it off briefly (kFirstHoldOffSeconds: one interval of a shared
// machine moves by 5-10%, so a raise worth 10-15% can measure a loss once, and 120 s at the
// poorer setting is a long price for one noisy interval); the next one 120 s, then twice as
// long each time. Step downs and budget cuts start at kHoldOffSeconds and only double.
double Tuner::NextHoldOff(double seconds) {
  return seconds < kHoldOffSeconds ? kHoldOffSeconds : std::min(2 * seconds, kMaxHoldOffSeconds);
}

std::string Tuner::Describe(const TunerKnobs& k, const std::vector<Knob>& which) {
  std::string out;
  for (Knob knob : {kReaders, kWorkers, kPrefetch, kReadsPerFile}) {
    if (std::find(which.begin(), which.end(), knob) == which.end()) continue;
    const int64_t v = KnobOf(k, knob);
    out += Format("%s%s %lld", out.empty() ? "" : ", ", Name(knob), LL(v));
  }
  return out;
}

bool Tuner::EvaluateTrial(const Signals& s, std::vector<TunerChange>* changes) {
  const Trial t = *trial_;
  trial_.reset();
  if (s.o.consumers != t.consumers) {
    // Not comparable: keep the change; the new consumer count counts as a shift (step 4).
    SetReference(t.throughput, t.consumer_wait, t.consumers);
    return false;
  }
  bool keep;
  // A raise is judged on its first interval, or, when that showed a gain too small to keep,
  // on its first two together (the stretch since it settled).
  const double after = t.extended && stretch_seconds_ > 0 ? stretch_records_ / stretch_seconds_ : s.throughput;
  if (t.raise) {
    keep = after > 0 && after >= t.throughput * (1 + t.gain);  // 0 -> 0 is no gain
    if (!keep && !t.extended && after > t.throughput) {
      // A positive gain under the trial's bar (kRaiseGain, or kEarlyRaiseGain) on one interval:
      // one more. One interval on a shared machine moves by +-5-10%; a worker that the grid shows
      // gaining 10-15% measured +3.8% once and was taken back (2 ms mount, docs/benchmarks.md,
      // session 12). The two intervals together face the same bar with half the variance of one; a raise that
      // measured no gain at all goes back at once.
      trial_ = t;
      trial_->extended = true;
      note_ = Format("%s gave %.0f records/s, %+.1f%% over %.0f records/s with %s: judged once more, on two intervals",
                     Describe(knobs_, t.knobs).c_str(), after, Pct(after / t.throughput - 1), t.throughput,
                     Describe(t.before, t.knobs).c_str());
      return true;  // no change: the interval stays a trial's
    }
  } else if (!t.consumers_waited) {
    keep = !s.waiting;
  } else {
    keep = s.throughput >= t.throughput * (1 - kRaiseGain);
  }
  if (keep) {
    // Said in the debug log (TunerDecision::note): without it a kept raise showed only as the
    // absence of a take-back.
    if (t.raise) {
      note_ = Format("kept: %s gave %.0f records/s, %+.1f%% over %.0f records/s with %s",
                     Describe(knobs_, t.knobs).c_str(), after, Pct(after / t.throughput - 1), t.throughput,
                     Describe(t.before, t.knobs).c_str());
    } else {
      note_ = Format("kept: %s (from %s), consumers waited %.0f%%", Describe(knobs_, t.knobs).c_str(),
                     Describe(t.before, t.knobs).c_str(), Pct(s.wait));
    }
    for (Knob k : t.knobs) {
      Hold& h = hold_[k];
      if (t.raise) {
        h.floor = KnobOf(t.before, k);
        h.raise_seconds = kFirstHoldOffSeconds;
      } else {
        h.lower_seconds = kHoldOffSeconds;
      }
    }
    if (t.raise) {
      // The other knobs' raises were held off after trials judged with this one lower: one
      // that did not pay because this stage was limiting too (readers on a 2 ms mount while
      // one worker parsed) may pay now. Their hold-offs end; their length stays (the next
      // failure holds 120 s, or twice the last).
      for (int k = 0; k < kKnobCount; ++k) {
        if (std::find(t.knobs.begin(), t.knobs.end(), static_cast<Knob>(k)) == t.knobs.end()) hold_[k].raise_until = 0;
      }
      pair_hint_.reset();
      if (t.pair) pair_raise_seconds_ = kFirstHoldOffSeconds;
    }
    SetReference(s.throughput, s.wait, s.o.consumers);
    return false;
  }

  const std::string now_desc = Describe(knobs_, t.knobs);
  const std::string before_desc = Describe(t.before, t.knobs);
  double hold_seconds = 0;
  for (Knob k : t.knobs) {
    Hold& h = hold_[k];
    double& seconds = t.raise ? h.raise_seconds : h.lower_seconds;
    (t.raise ? h.raise_until : h.lower_until) = now_seconds_ + seconds;
    hold_seconds = std::max(hold_seconds, seconds);
    seconds = NextHoldOff(seconds);
  }
  // Readers alone (workers alone) that left the other stage saturated in their place moved
  // the bottleneck rather than removed it: the two together are tried next (TryPair; item 6 of
  // "What looks wrong in the tuner" in docs/benchmarks.md, built in session 28). A pair that
  // did not pay holds further pairs off as a single raise is held off: 5 s the first time (one
  // noisy interval measured a pair worth +18% at -19% and left the tuner at 1 reader and 1
  // worker for 120 s), then 120 s, doubling.
  if (t.pair) {
    pair_raise_until_ = now_seconds_ + pair_raise_seconds_;
    pair_raise_seconds_ = NextHoldOff(pair_raise_seconds_);
  } else if (t.raise && t.knobs.size() == 1 && (t.knobs[0] == kReaders || t.knobs[0] == kWorkers) &&
             now_seconds_ >= pair_raise_until_) {
    const bool readers = t.knobs[0] == kReaders;
    if (readers ? s.parse_busy >= kSaturatedBusy : ReadsLimit(s)) {
      pair_hint_ = PairHint{t.knobs[0], KnobOf(knobs_, t.knobs[0]), s.read_busy, s.parse_busy, s.read_wait,
                            now_seconds_ + kPairHintSeconds};
    }
  }
  std::string reason;
  if (t.raise) {
    reason = Format("taken back: %s gave %.0f records/s, less than %.0f%% over %.0f records/s with %s; not raised "
                    "again for %.0f s",
                    now_desc.c_str(), after, Pct(t.gain), t.throughput, before_desc.c_str(), hold_seconds);
  } else if (!t.consumers_waited) {
    reason = Format("taken back: with %s consumers waited %.0f%% of %.2f s (%.0f%% with %s); not lowered again for "
                    "%.0f s",
                    now_desc.c_str(), Pct(s.wait), s.interval, Pct(t.consumer_wait), before_desc.c_str(), hold_seconds);
  } else {
    reason = Format("taken back: with %s throughput fell to %.0f records/s, more than %.0f%% below %.0f records/s with "
                    "%s; not lowered again for %.0f s",
                    now_desc.c_str(), s.throughput, Pct(kRaiseGain), t.throughput, before_desc.c_str(), hold_seconds);
  }
  Restore(t.before, reason, changes);
  SetReference(t.throughput, t.consumer_wait, t.consumers);
  return true;
}

bool Tuner::TryTrade(Knob give, Knob take, const Signals& s, std::vector<TunerChange>* changes) {
  if (Fixed(give) || now_seconds_ < hold_[give].lower_until) return false;
  const int64_t from = Value(give);
  const int64_t to = from - 1;
  if (to < 1 || to <= hold_[give].floor) return false;
  const double busy = give == kWorkers ? s.parse_busy : s.read_busy;
  const double predicted = busy * static_cast<double>(from) / static_cast<double>(to);
  if (predicted > kLowerTargetBusy) return false;
  // Only a step that lets `take` go up afterwards is worth a trial.
  bool cpu_blocked = false;
  if (give == kWorkers) {
    if (ReadersRaiseTarget(to, &cpu_blocked) <= knobs_.readers) return false;
  } else {
    if (read_cpu_share_ < kMinThreadCores || s.read_wait >= kReadStarved) return false;
    if (!CanRaiseWorkers(to, &cpu_blocked)) return false;
  }
  const double take_busy = take == kWorkers ? s.parse_busy : s.read_busy;
  const std::string reason = Format(
      "frees CPU for %s, which limit throughput (%.0f%% busy; consumers waited %.0f%% of %.2f s) at the CPU budget "
      "(%s); %s %.0f%% busy, with %lld they would be %.0f%%",
      Name(take), Pct(take_busy), Pct(s.wait), s.interval, CpuUse().c_str(), Name(give), Pct(busy), LL(to),
      Pct(predicted));
  const TunerKnobs before = knobs_;
  Set(give, to, reason, changes);
  StartTrial(false, s, before, {give});
  return true;
}

bool Tuner::TryPair(const Signals& s, std::vector<TunerChange>* changes) {
  if (!pair_hint_) return false;
  const PairHint hint = *pair_hint_;
  // A hint is the last trial's evidence: it is used in the next rounds (the knobs are measured
  // for 1 s first) or not at all.
  if (now_seconds_ >= hint.until) {
    pair_hint_.reset();
    return false;
  }
  // Both stages must still be busy (one mostly idle has nothing to hand over), and the readers
  // CPU-bound: I/O-blocked ones get more reads in flight first, and the pairs measured were of
  // CPU-bound readers.
  if (fixed_.readers || fixed_.workers || IoBound() || s.read_busy < kPairBusy || s.parse_busy < kPairBusy) {
    return false;
  }
  const int64_t r = knobs_.readers, w = knobs_.workers;
  if (w >= limits_.max_workers) return false;
  // Past both knobs' hold-offs (the pair is a step of its own), within the maxima and both
  // budgets, as any raise.
  bool cpu_blocked = false;
  const int64_t readers_to = ReadersRaiseTarget(w + 1, &cpu_blocked, /*ignore_hold=*/true);
  if (readers_to <= r) return false;
  pair_hint_.reset();
  const std::string moved =
      hint.failed == kReaders
          ? Format("the workers were %.0f%% busy in their place", Pct(hint.parse_busy))
          : Format("the reads limited in their place (readers %.0f%% busy, the sequencer waited for records %.0f%%)",
                   Pct(hint.read_busy), Pct(hint.read_wait));
  const std::string reason =
      Format("consumers waited %.0f%% of %.2f s, readers %.0f%% and workers %.0f%% busy: %s %lld alone gained under "
             "%.0f%% while %s, the bottleneck moved; both go up together, %s",
             Pct(s.wait), s.interval, Pct(s.read_busy), Pct(s.parse_busy), Name(hint.failed), LL(hint.tried),
             Pct(kRaiseGain), moved.c_str(), CpuUse().c_str());
  const TunerKnobs before = knobs_;
  Set(kReaders, readers_to, reason, changes);
  Set(kWorkers, w + 1, reason, changes);
  StartTrial(true, s, before, {kReaders, kWorkers});
  trial_->pair = true;
  return true;
}

bool Tuner::TryRaise(const Signals& s, std::vector<TunerChange>* changes) {
  if (TryPair(s, changes)) return true;
  // The sequencer starved of records counts only while the readers are mostly busy: idle
  // readers the sequencer still waits for are short of CPU (a loaded machine), not of
  // parallelism, and more of them would not help.
  const bool read_saturated = ReadsLimit(s);
  const bool parse_saturated = s.parse_busy >= kSaturatedBusy;
  const std::string waited = Format("consumers waited %.0f%% of %.2f s", Pct(s.wait), s.interval);
  const std::string cpu = CpuUse();
  const std::string read_kind =
      Format("%.0f%% CPU: %s", Pct(read_cpu_fraction_), IoBound() ? "I/O-blocked, x2 step" : "CPU-bound, +1 step");
  const TunerKnobs before = knobs_;
  const int64_t r = knobs_.readers, w = knobs_.workers;
  bool cpu_blocked = false;

  if (read_saturated && parse_saturated && s.read_wait < kReadStarved &&
      std::fabs(s.read_busy - s.parse_busy) < kBusyTie) {
    // Both stages limit: raising one alone gains nothing, so raise both as one trial.
    if (!CanRaiseWorkers(r, &cpu_blocked)) return false;
    const int64_t readers_to = ReadersRaiseTarget(w + 1, &cpu_blocked);
    if (readers_to <= r) return false;
    const std::string reason = Format("%s, readers %.0f%% and workers %.0f%% busy (both limit, raised together; "
                                      "readers %s), %s",
                                      waited.c_str(), Pct(s.read_busy), Pct(s.parse_busy), read_kind.c_str(), cpu.c_str());
    Set(kReaders, readers_to, reason, changes);
    Set(kWorkers, w + 1, reason, changes);
    StartTrial(true, s, before, {kReaders, kWorkers});
    return true;
  }
  // Reads limit (readers saturated, or the sequencer starved of records however busy the
  // readers are: more readers than files being read dilute their busy share, on a 20 ms mount
  // 8 readers were 50% busy) while the readers wait for their reads: more reads in flight per
  // file first (a queue: no thread, no more open files, no CPU).
  if ((read_saturated || s.read_wait >= kReadStarved) && s.read_busy > 0 && IoBound()) {
    const int64_t k = knobs_.reads_per_file, k_to = ReadsPerFileRaiseTarget();
    if (k_to > k) {
      Set(kReadsPerFile, k_to,
          Format("%s, the sequencer waited for records %.0f%%, readers %.0f%% busy (%.0f%% CPU: waiting for "
                 "reads), %lld %s of %s in flight per file",
                 waited.c_str(), Pct(s.read_wait), Pct(s.read_busy), Pct(read_cpu_fraction_), LL(k),
                 k == 1 ? "read" : "reads", Bytes(k > 1 ? limits_.read_block_bytes : limits_.read_bytes).c_str()),
          changes);
      StartTrial(true, s, before, {kReadsPerFile});
      return true;
    }
  }
  // Queued reads that go no higher (at their most, fixed or held off), the sequencer still
  // starved of records though neither stage is saturated: readers short of turns, not of time.
  // Each interleaved file wants a reader, and the files opened ahead of their turn wait a round
  // trip for their first read, every file change: a reader waiting on one is not there for an
  // interleaved file that runs dry. So readers go up to one per interleaved file and one more
  // (ReadersRaiseTarget; a 20 ms mount, 16 reads per file over 4 files: 4 readers 46% busy, the
  // sequencer waiting 57% for records, 5 readers 16% more; 2 readers 56% busy, waiting 77%,
  // went to a worker trial first, session 45). A trial.
  if (!read_saturated && !parse_saturated && knobs_.reads_per_file > 1 && s.read_wait >= kReadStarved &&
      s.read_busy > 0 && IoBound() && ReadsPerFileRaiseTarget() <= knobs_.reads_per_file) {
    const int64_t to = ReadersRaiseTarget(w, &cpu_blocked);
    if (to > r) {
      Set(kReaders, to,
          Format("%s, the sequencer waited for records %.0f%% with readers %.0f%% busy (%s) and %lld reads in "
                 "flight per file: readers short of turns (one per interleaved file and one for the files opened "
                 "ahead of their turn, whose first reads hold a reader up for a round trip), %s",
                 waited.c_str(), Pct(s.read_wait), Pct(s.read_busy), read_kind.c_str(), LL(knobs_.reads_per_file),
                 cpu.c_str()),
          changes);
      StartTrial(true, s, before, {kReaders});
      return true;
    }
  }
  // Whether the reads limit but readers are held off (after a trial that did not pay, or after
  // the CPU budget lowered them): then the rules below get their turn, parse workers if they
  // are saturated, else one more worker (readers at their maximum or at the memory budget's
  // limit, not held off, raise nothing, as before).
  bool readers_stuck = false;
  if (read_saturated && (s.read_wait >= kReadStarved || !parse_saturated || s.read_busy > s.parse_busy)) {
    const int64_t to = ReadersRaiseTarget(w, &cpu_blocked);
    if (to > r) {
      Set(kReaders, to,
          Format("%s, the sequencer waited for records %.0f%%, readers %.0f%% busy (%s), %s", waited.c_str(),
                 Pct(s.read_wait), Pct(s.read_busy), read_kind.c_str(), cpu.c_str()),
          changes);
      StartTrial(true, s, before, {kReaders});
      return true;
    }
    if (cpu_blocked) return TryTrade(kWorkers, kReaders, s, changes);
    if (fixed_.readers || now_seconds_ >= hold_[kReaders].raise_until) return false;
    readers_stuck = true;
  }
  if (parse_saturated) {
    if (CanRaiseWorkers(r, &cpu_blocked)) {
      Set(kWorkers, w + 1, Format("%s, workers %.0f%% busy, %s", waited.c_str(), Pct(s.parse_busy), cpu.c_str()),
          changes);
      StartTrial(true, s, before, {kWorkers});
      return true;
    }
    return cpu_blocked && TryTrade(kReaders, kWorkers, s, changes);
  }
  const int64_t p = knobs_.prefetch;
  const bool prefetch_raisable =
      !fixed_.prefetch && now_seconds_ >= hold_[kPrefetch].raise_until && p < limits_.max_prefetch;
  const bool bursty = s.o.ready_slots_min == 0 && s.o.ready_slots_mean >= kBurstyReadyMean;
  if (!readers_stuck && bursty && prefetch_raisable) {
    // Neither stage is saturated, yet the ring runs dry between full spells: output comes in
    // bursts (tf.data #39992). A ring that is empty nearly all the time (mean ~0) is a loader
    // that is simply slower than its consumers, e.g. starved of CPU: prefetch cannot help.
    Set(kPrefetch, std::min(2 * p, limits_.max_prefetch),
        Format("%s and the ring ran dry (0 ready at the least, %.1f on average) while readers were %.0f%% and workers "
               "%.0f%% busy: bursty output",
               waited.c_str(), s.o.ready_slots_mean, Pct(s.read_busy), Pct(s.parse_busy)),
        changes);
    StartTrial(true, s, before, {kPrefetch});
    return true;
  }
  if ((readers_stuck || (bursty && !prefetch_raisable) || s.o.ready_slots_mean < kBurstyReadyMean) &&
      !fixed_.workers &&
      now_seconds_ >= hold_[kWorkers].raise_until && w < limits_.max_workers &&
      cpu_cores_ * (1 + kRaiseGain) <= limits_.cpu_cores && s.parse_busy >= kShedWhileWaitingBusy) {
    // Only while the workers are busier than the mark idle ones are shed at (TryLower): below
    // it one of them is idle much of the time already, so another cannot overlap anything, and
    // the step down would take it back (a 5-minute soak on a loaded machine cycled 2 -> 4 ->
    // 2 workers at 16-48% busy, each cycle leaving RSS a little higher).
    // Neither stage is saturated and the ring is empty nearly all the time: the stages take
    // turns, each waiting for the other (on a few cores shared with the consumers, a loader
    // short of CPU time rather than of one stage's parallelism). One more worker parses while
    // the others wait; the trial keeps it only if throughput gains. Not a reader: more files
    // open costs read-ahead memory, and readers that are not saturated have time to spare
    // (on local files, 1 reader + 2 workers beat 2 readers + 1 worker in every benchmark run).
    // Its CPU is not one more thread's worth (the work is the same, spread wider): the
    // projection is the measured use plus the gain the trial asks for.
    // The same where the reads limit but readers are held off, or the ring runs dry in bursts
    // but prefetch cannot go up: on local files on 2 cores a second reader with one worker
    // gained nothing (taken back, held off) and the tuner stayed at 1 reader and 1 worker,
    // 10-15% below 1-2 readers with 2 workers, which it reaches when a kept worker ends the
    // readers' hold-off (docs/benchmarks.md, session 13).
    std::string situation;
    if (readers_stuck) {
      situation = Format("while the sequencer waited for records %.0f%% and readers were %.0f%% busy, but readers "
                         "are held off",
                         Pct(s.read_wait), Pct(s.read_busy));
    } else if (bursty) {
      situation = Format("while the ring ran dry (0 ready at the least, %.1f on average) with prefetch %s",
                         s.o.ready_slots_mean,
                         p >= limits_.max_prefetch ? "at its maximum" : "held off or fixed");
    } else {
      situation = Format("with %.1f batches ready on average, but neither stage is saturated (readers %.0f%%, workers "
                         "%.0f%% busy): the stages take turns",
                         s.o.ready_slots_mean, Pct(s.read_busy), Pct(s.parse_busy));
    }
    Set(kWorkers, w + 1,
        Format("%s %s; one more worker overlaps them, %s", waited.c_str(), situation.c_str(), cpu.c_str()), changes);
    StartTrial(true, s, before, {kWorkers});
    return true;
  }
  return false;
}

std::string Tuner::WhyNoRaise(const Signals& s) const {
  const std::string waited = Format("consumers waited %.0f%%", Pct(s.wait));
  const bool cpu_full = cpu_cores_ * (1 + kRaiseGain) > limits_.cpu_cores;
  // A knob that cannot go up: why.
  const auto stuck = [&](Knob k, int64_t value, int64_t max) -> std::string {
    if (Fixed(k)) return Format("fixed by the config at %lld", LL(value));
    if (value >= max) {
      const std::string& why = k == kReaders ? limits_.max_readers_why : std::string();
      return Format("at their most (%lld%s)", LL(max), why.empty() ? "" : (": " + why).c_str());
    }
    if (now_seconds_ < hold_[k].raise_until) {
      return Format("held off for %.0f s more (the last raise did not pay)", hold_[k].raise_until - now_seconds_);
    }
    return "";
  };
  if (s.slot_wait >= 0.5) {
    const int64_t loader_slots = knobs_.workers + knobs_.prefetch;
    if (s.prefetch_wait >= 0.5 * s.slot_wait && s.o.ready_slots_mean < 0.5 * static_cast<double>(loader_slots)) {
      // The loader's own batches filled the prefetch depth, most of them not ready: they were
      // with the parse workers (queued, or parsed and waiting for their turn). Session 28: this
      // was reported as a ring full of batches no trainer takes, with `ring: 10 free, 0 ready,
      // 0 held` beside it.
      std::string why;
      if (const std::string knob = stuck(kWorkers, knobs_.workers, limits_.max_workers); !knob.empty()) {
        why = "the workers are " + knob;
      } else if (cpu_full) {
        why = "the CPU budget leaves no room for another (" + CpuUse() + ")";
      } else if (s.o.parse_cpu_fraction < 0.8) {
        why = Format("the workers got a core for only %.0f%% of their busy time (%s): the cores are full, and more "
                     "threads would not get more of them",
                     Pct(s.o.parse_cpu_fraction), CpuUse().c_str());
      } else {
        why = Format("they are under the %.0f%% busy at which they are raised", Pct(kSaturatedBusy));
      }
      return Format("%s, production waited for room %.0f%% of the time with %.1f of its %lld batches ready on "
                    "average: the others were with the parse workers (%.0f%% busy), but %s",
                    waited.c_str(), Pct(s.slot_wait), s.o.ready_slots_mean, LL(loader_slots), Pct(s.parse_busy),
                    why.c_str());
    }
    // The ring is full although the consumers wait: its batches are ready for consumers that do
    // not take them (ranks mode: another rank's) or held by consumers that do not release them.
    return Format("%s, but production waited for a free ring slot %.0f%% of the time: the ring holds batches that "
                  "trainers have not taken or not released yet (in ranks mode those of a rank slower than the "
                  "others, or stopped; see the consumers lines), so more threads would not help",
                  waited.c_str(), Pct(s.slot_wait));
  }
  if (cpu_full) {
    return Format("%s, but the CPU budget leaves no room for another thread (%s)", waited.c_str(), CpuUse().c_str());
  }
  const bool read_saturated = ReadsLimit(s);
  if (read_saturated) {
    std::string why = stuck(kReaders, knobs_.readers, std::min(limits_.max_readers, MaxReadersForMemory()));
    if (why.empty() && knobs_.reads_per_file > 1 && knobs_.readers >= QueuedReadsMostReaders()) {
      // ReadersRaiseTarget: no more readers than that beside queued reads.
      const std::string queued = stuck(kReadsPerFile, knobs_.reads_per_file,
                                       std::min(limits_.max_reads_per_file, MaxReadsPerFileForMemory()));
      if (!queued.empty()) {
        why = Format("one per interleaved file and one for the files opened ahead of their turn (%lld: more would "
                     "only read files ahead of their turn) and the reads in flight per file are %s",
                     LL(QueuedReadsMostReaders()), queued.c_str());
      }
    }
    if (!why.empty()) {
      return Format("%s, the reads limit (readers %.0f%% busy, the sequencer waited for records %.0f%%), but the "
                    "readers are %s",
                    waited.c_str(), Pct(s.read_busy), Pct(s.read_wait), why.c_str());
    }
  }
  if (s.parse_busy >= kSaturatedBusy) {
    const std::string why = stuck(kWorkers, knobs_.workers, limits_.max_workers);
    if (!why.empty()) {
      return Format("%s, parsing limits (workers %.0f%% busy), but the workers are %s", waited.c_str(),
                    Pct(s.parse_busy), why.c_str());
    }
  }
  if (read_saturated || s.parse_busy >= kSaturatedBusy) {
    return Format("%s, %s limit%s (readers %.0f%%, workers %.0f%% busy), but no raise fits the budgets (%s, "
                  "read-ahead memory)",
                  waited.c_str(), read_saturated ? "the reads" : "parsing", read_saturated ? "" : "s", Pct(s.read_busy),
                  Pct(s.parse_busy), CpuUse().c_str());
  }
  // No stage saturated: what holds the loader back is not a stage's parallelism. Threads that
  // got a core for only part of their busy time say the cores are shared (with the trainers).
  std::string text = Format("%s, but no stage is saturated (readers %.0f%%, workers %.0f%% busy; a stage limits "
                            "from %.0f%%)",
                            waited.c_str(), Pct(s.read_busy), Pct(s.parse_busy), Pct(kSaturatedBusy));
  if (s.o.parse_cpu_fraction < 0.8 && s.parse_busy > 0) {
    text += Format(": the workers got a core for only %.0f%% of their busy time, so the cores are busy with other "
                   "processes (the trainers?) and more threads would not get more of them",
                   Pct(s.o.parse_cpu_fraction));
  } else if (s.parse_busy >= kShedWhileWaitingBusy) {
    const std::string why = stuck(kWorkers, knobs_.workers, limits_.max_workers);
    if (!why.empty()) text += "; one more worker to overlap the stages cannot be tried: the workers are " + why;
  } else if (cpu_cores_ >= 0.5 * limits_.cpu_cores) {
    text += Format("; the workers are under the %.0f%% busy at which another one could overlap the stages: the "
                   "loader is short of CPU time (cores shared with the trainers?) rather than of threads",
                   Pct(kShedWhileWaitingBusy));
  } else {
    text += "; the stages are mostly idle (" + CpuUse() + "), so more threads would not help";
  }
  return text;
}

bool Tuner::TryLower(const Signals& s, std::vector<TunerChange>* changes) {
  const TunerKnobs before = knobs_;
  const std::string waited = Format("consumers waited %.0f%% of %.2f s", Pct(s.wait), s.interval);
  auto lowerable = [&](Knob k) { return !Fixed(k) && Value(k) > 1 && now_seconds_ >= hold_[k].lower_until; };

  if (lowerable(kWorkers)) {
    const int64_t w = knobs_.workers, to = w - 1;
    const double predicted = s.parse_busy * static_cast<double>(w) / static_cast<double>(to);
    // While consumers wait and the reads do not limit either, only workers well below
    // saturation go: a step to near 85% busy leaves "neither stage saturated", where the
    // stages-take-turns rule raises the worker again (in a 5-minute soak on 2 noisy cores the
    // workers cycled 1 -> 2 -> 1 every 20-30 s, each cycle leaving RSS a little higher).
    const double target = s.waiting && !ReadsLimit(s) ? kShedWhileWaitingBusy : kLowerTargetBusy;
    if (to > hold_[kWorkers].floor && predicted <= target) {
      Set(kWorkers, to,
          Format("%s, workers %.0f%% busy, with %lld they would be %.0f%%", waited.c_str(), Pct(s.parse_busy), LL(to),
                 Pct(predicted)),
          changes);
      StartTrial(false, s, before, {kWorkers});
      return true;
    }
  }
  // While consumers wait, only idle workers are taken back: readers that are not saturated
  // still hide storage latency for each other (on a 2 ms mount, 4 readers 63% busy -> 3 lost
  // 24% of throughput), and their CPU is small.
  if (!s.waiting && lowerable(kReaders) && s.read_wait < kReadStarved) {
    const int64_t r = knobs_.readers;
    // I/O-blocked readers come down the x2 ladder they went up, CPU-bound ones one at a time.
    for (int64_t to : {IoBound() ? r / 2 : r - 1, r - 1}) {
      const double predicted = s.read_busy * static_cast<double>(r) / static_cast<double>(std::max<int64_t>(1, to));
      if (to < 1 || to <= hold_[kReaders].floor || predicted > kLowerTargetBusy) continue;
      Set(kReaders, to,
          Format("%s, readers %.0f%% busy, with %lld they would be %.0f%%", waited.c_str(), Pct(s.read_busy), LL(to),
                 Pct(predicted)),
          changes);
      StartTrial(false, s, before, {kReaders});
      return true;
    }
  }
  // Queued reads come down the x2 ladder they went up, by the same rule as readers.
  if (!s.waiting && lowerable(kReadsPerFile) && s.read_wait < kReadStarved) {
    // Halving, and straight to 1 below what one read at a time brings anyway.
    const int64_t k = knobs_.reads_per_file, to = k / 2 > QueuedReadsLikeOne() ? k / 2 : 1;
    const double predicted = s.read_busy * static_cast<double>(k) / static_cast<double>(std::max<int64_t>(1, to));
    if (to >= 1 && to > hold_[kReadsPerFile].floor && predicted <= kLowerTargetBusy) {
      Set(kReadsPerFile, to,
          Format("%s, readers %.0f%% busy with %lld reads per file, with %lld they would be %.0f%%", waited.c_str(),
                 Pct(s.read_busy), LL(k), LL(to), Pct(predicted)),
          changes);
      StartTrial(false, s, before, {kReadsPerFile});
      return true;
    }
  }
  if (lowerable(kPrefetch) && quiet_intervals_ >= kPrefetchQuietIntervals) {
    // Half of the batches that never left the ring, keeping one ready.
    const int64_t p = knobs_.prefetch;
    const int64_t to = std::max({int64_t{1}, p - std::max<int64_t>(1, (quiet_min_ready_ - 1) / 2),
                                 hold_[kPrefetch].floor + 1});
    if (to < p) {
      Set(kPrefetch, to,
          Format("consumers did not wait in the last %lld intervals and at least %lld batches stayed ready in the ring",
                 LL(quiet_intervals_), LL(quiet_min_ready_)),
          changes);
      StartTrial(false, s, before, {kPrefetch});
      return true;
    }
  }
  return false;
}

bool Tuner::DeepenReadAhead(const Signals& s, std::vector<TunerChange>* changes) {
  if (fixed_.stream_buffer_bytes || s.read_wait < kReadStarved || s.read_busy <= 0) return false;
  // Queued reads cover a file's reads (they run ahead of the records taken), and the first
  // answer to slow reads is to queue them.
  if (knobs_.reads_per_file > 1 || (IoBound() && ReadsPerFileRaiseTarget() > knobs_.reads_per_file)) return false;
  // A file has one read in flight at a time, and its reader starts the next read only when
  // the window is used up, with about the read-ahead's worth of records left for the
  // interleave to take meanwhile. How long does a read take? Readers blocked in read(), on
  // average: b = readers x busy x (1 - CPU share of busy). At R bytes/s read, that is
  // R / read_bytes reads per second, each taking T = read_bytes x b / R. The interleave takes
  // R / cycle_length per second from each file, so a file needs T x R / cycle_length =
  // read_bytes x b / cycle_length of read-ahead per read. That is the need at the rate
  // measured, which a read-ahead too shallow holds down: kReadAheadReads leaves room for the
  // rate to grow (without it, 2 readers on a 2 ms mount measured a need just under the
  // level's 10% slack, stayed at 256 KiB and were never saturated enough to be raised).
  const double blocked = static_cast<double>(knobs_.readers) * s.read_busy * (1 - read_cpu_fraction_);
  const int64_t interleaved = InterleavedFiles();
  const double files = static_cast<double>(std::max<int64_t>(1, interleaved));
  const double needed = kReadAheadReads * static_cast<double>(limits_.read_bytes) * blocked / files;
  // 10% over the level at least: the estimate moves with each interval's load, and the level
  // only ever goes up.
  if (needed <= kReadAheadSlack * static_cast<double>(read_ahead_level_)) return false;
  const uint64_t step = kReadAheadStepBytes;
  const uint64_t rounded = (static_cast<uint64_t>(std::min(needed, 0x1p62)) + step - 1) / step * step;
  const uint64_t to = std::min(rounded, std::max(limits_.max_stream_buffer_bytes, read_ahead_level_));
  if (std::min(StreamBufferBytesFor(limits_, knobs_.readers, knobs_.reads_per_file), to) <= knobs_.stream_buffer_bytes) {
    return false;
  }
  read_ahead_level_ = to;
  UpdateStreamBufferBytes(
      Format("consumers waited %.0f%% of %.2f s, the sequencer waited for records %.0f%%, %.1f readers blocked in "
             "reads (%lld, %.0f%% busy, %.0f%% CPU): each of the %lld interleaved files needs %s of read-ahead to "
             "cover its next read of %s; %s with room for throughput to grow by %.0f%%",
             Pct(s.wait), s.interval, Pct(s.read_wait), blocked, LL(knobs_.readers), Pct(s.read_busy),
             Pct(read_cpu_fraction_), LL(std::max<int64_t>(1, interleaved)),
             Bytes(static_cast<uint64_t>(needed / kReadAheadReads)).c_str(), Bytes(limits_.read_bytes).c_str(),
             Bytes(static_cast<uint64_t>(needed)).c_str(), Pct(kReadAheadReads - 1)),
      changes);
  return true;
}

TunerDecision Tuner::Finish(std::vector<TunerChange> changes, bool changed) {
  if (!changes.empty()) {
    ResetStretch();  // new knobs: their measurement starts now
    changed_once_ = true;
  }
  interval_seconds_ =
      changed ? kShortIntervalSeconds : std::min(interval_seconds_ * kIntervalGrowth, kMaxIntervalSeconds);
  // A trial is judged on one interval: a longer one, so that a burst of load on a shared
  // machine (+-10-20% over 0.5 s) neither keeps a useless raise nor takes back a useful one.
  // The interval a change of readers settles in (not judged) is shorter.
  double next = interval_seconds_;
  if (trial_) next = std::max(next, trial_->settle_intervals > 0 ? kSettleIntervalSeconds : kTrialIntervalSeconds);
  TunerDecision d;
  d.knobs = knobs_;
  d.changes = std::move(changes);
  d.note = std::exchange(note_, {});
  d.holding = std::exchange(holding_, {});
  d.next_interval_seconds = next;
  d.cpu_cores = cpu_cores_;
  d.runnable_threads = std::llround(d.cpu_cores);
  d.blocked_io_threads = knobs_.readers - std::min(knobs_.readers, CpuBoundReaders(knobs_.readers));
  return d;
}

TunerDecision Tuner::Observe(const TunerObservation& o) {
  const double interval = std::isfinite(o.interval_seconds) && o.interval_seconds > 0 ? o.interval_seconds : 0;
  now_seconds_ += interval;
  if (o.read_busy_fraction > 0.01) {
    read_cpu_fraction_ = Clamp01(o.read_cpu_fraction);
    read_cpu_share_ = Clamp01(o.read_busy_fraction) * read_cpu_fraction_;
  }
  // The CPU the knobs of the interval just measured used (the pipeline applies a decision at
  // once, so these are the knobs of the last decision).
  cpu_cores_ = std::isfinite(o.cpu_cores) ? std::max(0.0, o.cpu_cores) : 0;
  worker_cores_ = Clamp01(o.parse_busy_fraction) * Clamp01(o.parse_cpu_fraction);
  measured_workers_ = knobs_.workers;
  measured_readers_ = knobs_.readers;

  Signals s{o};
  s.interval = interval;
  s.throughput = interval > 0 ? static_cast<double>(o.records) / interval : 0;
  s.wait = Clamp01(o.consumer_wait_fraction);
  s.waiting = s.wait >= kConsumerWaitThreshold;
  s.read_busy = Clamp01(o.read_busy_fraction);
  s.parse_busy = Clamp01(o.parse_busy_fraction);
  s.read_wait = Clamp01(o.sequencer_read_wait_fraction);
  s.slot_wait = Clamp01(o.sequencer_slot_wait_fraction);
  s.prefetch_wait = std::min(Clamp01(o.sequencer_prefetch_wait_fraction), s.slot_wait);

  // Still ramping up at start: the stretch so far is no baseline for the first trial (a
  // raise judged against it showed gains it did not have: +14% kept, +3.5% in the next run).
  const bool ramping = !changed_once_ && o.consumers > 0 && ramp_seconds_ < kStartupRampSeconds &&
                       stretch_seconds_ > 0 && s.throughput > stretch_records_ / stretch_seconds_ * (1 + kRaiseGain);
  if (!changed_once_ && o.consumers > 0) ramp_seconds_ += interval;
  if (ramping) {
    ResetStretch(static_cast<double>(o.records), interval);
  } else {
    AddToStretch(static_cast<double>(o.records), interval);
  }

  if (o.consumers > 0 && !s.waiting && o.ready_slots_min >= 2) {
    quiet_min_ready_ = quiet_intervals_ == 0 ? o.ready_slots_min : std::min(quiet_min_ready_, o.ready_slots_min);
    ++quiet_intervals_;
  } else {
    quiet_intervals_ = 0;
  }

  // 1. Budgets first, whatever else happens.
  std::vector<TunerChange> changes;
  EnforceBudgets(s, &changes);
  if (!changes.empty()) {
    trial_.reset();
    pair_hint_.reset();
    has_reference_ = false;
    return Finish(std::move(changes), true);
  }

  // 2. Nothing to tune for: hold. A trial in progress cannot be judged; its step stays (unused
  // capacity is taken back once consumers are there to show it is unused).
  if (o.consumers <= 0 || interval <= 0) {
    trial_.reset();
    ResetStretch();
    SetReference(s.throughput, s.wait, o.consumers);  // consumers arriving will be a shift
    return Finish({}, false);
  }

  // 3. Regime shift? Checked before judging a trial: a shift makes that comparison meaningless.
  // Judged against the last reference even when a change has just reset it
  // (reference_* keep their values): a change must not hide a shift that started before it.
  // One interval off the reference is noise on a busy machine (0.25 s of a shared core), so a
  // shift must last two intervals, unless consumers came or went.
  bool shifted = false;
  const bool off = reference_seen_ && Shifted(s);
  if (off && (++shift_streak_ >= 2 || o.consumers != reference_consumers_)) {
    shifted = true;
    shift_streak_ = 0;
    pair_hint_.reset();  // the evidence was the old regime's
    // Hold-offs and floors were learnt in the old regime. They go when the regime really
    // changed: consumers came or went, the loader stopped or started being the bottleneck, or
    // throughput moved by more than half. A smaller swing while consumers keep waiting is
    // usually the machine's load (a shared core), and forgetting there makes a knob flap.
    const bool waiting_flipped = s.waiting != (reference_wait_ >= kConsumerWaitThreshold);
    if (o.consumers != reference_consumers_ || waiting_flipped ||
        std::fabs(s.throughput - reference_throughput_) > kForgetFraction * reference_throughput_) {
      ClearHolds();
    }
    // A trial cannot be judged across a shift. A raise in trial that throughput did not
    // follow up goes back: only raises that showed a gain stay (kept, unproven raises that a
    // load spike interrupted made the workers creep up, 1 -> 4, in a 5-minute soak on 2
    // cores). If the new regime needs it, the raise comes again (the shift cleared its
    // hold-off or it had none). A raise that throughput followed up (the shift may be its own
    // effect, e.g. readers on slow storage) and a step down stay: consumers that wait because
    // of a step down make the tuner raise again.
    const std::optional<Trial> dropped = trial_;
    trial_.reset();
    SetReference(s.throughput, s.wait, o.consumers);
    ResetStretch(static_cast<double>(o.records), interval);  // the new regime's first interval
    if (dropped && dropped->raise && o.consumers == dropped->consumers &&
        s.throughput < dropped->throughput * (1 + dropped->gain)) {
      Restore(dropped->before,
              Format("not judged: throughput moved from %.0f to %.0f records/s during the trial (a shift); back to "
                     "%s",
                     dropped->throughput, s.throughput, Describe(dropped->before, dropped->knobs).c_str()),
              &changes);
      has_reference_ = false;
      return Finish(std::move(changes), true);
    }
  } else {
    if (!off) shift_streak_ = 0;
    if (!has_reference_) SetReference(s.throughput, s.wait, o.consumers);
  }

  // 4. Judge the last change — or, while it settles, wait for it without another change (a
  // second change would mix two effects in the judgement).
  if (trial_ && trial_->settle_intervals > 0) {
    --trial_->settle_intervals;
    ResetStretch();           // the ramp is not part of the new knobs' measurement
    return Finish({}, true);  // the interval stays short: the trial is still open
  }
  if (trial_ && EvaluateTrial(s, &changes)) return Finish(std::move(changes), true);

  // Not before the current knobs have been measured long enough to compare a trial with;
  // at start with reads blocked beyond doubt, after 0.25 s: the start-up ramp and the noise of
  // a few reads per interval (+-10% at 1 MiB per 20 ms round trip) kept a 20 ms mount at one
  // read in flight for its first 3 s, a third of the time to 90% of its throughput, for a
  // raise that then gained 6x (docs/benchmarks.md, session 46). That raise must gain
  // kEarlyRaiseGain (50%) to stay, which no ramp or interval noise fakes.
  const bool early = StartBlockedOnReads(s) && stretch_seconds_ < kTrialIntervalSeconds - 1e-9;
  if (stretch_seconds_ < (early ? kShortIntervalSeconds : kTrialIntervalSeconds) - 1e-9) return Finish({}, shifted);

  // 5. One change (a trial), and beside it the read-ahead a measured need asks for: not a
  // trial, and in a round of its own it held every raise of readers on slow storage back by
  // a round (a 20 ms mount took 8-10 s instead of 4-5 to reach 90%).
  // While consumers wait and nothing can be raised, idle workers are still taken back (a step
  // that loses throughput is undone: see EvaluateTrial).
  const bool deepened = s.waiting && DeepenReadAhead(s, &changes);
  const bool changed = (s.waiting && TryRaise(s, &changes)) || TryLower(s, &changes) || deepened;
  if (changed) has_reference_ = false;
  if (early && changed && trial_) {
    // (Only the reads_per_file raise gets here: StartBlockedOnReads.) Judged with the higher
    // bar, and not against a shift the start-up ramp began: that ramp is what the short
    // measurement chose to pass over (a shift found in the settle interval would drop the
    // trial, and the settle interval alone would decide it).
    trial_->gain = kEarlyRaiseGain;
    shift_streak_ = 0;
  }
  if (s.waiting && !changed) holding_ = WhyNoRaise(s);
  return Finish(std::move(changes), changed || shifted);
}

}  // namespace ringfeed
