// Tuner: ringfeedd's autotuner. A pure decision function, fed one Observation per tuning
// interval by the daemon (daemon/ringfeedd.cc) or by a simulated pipeline in the tests
// (tests/tuner_test.cc); it never touches threads, clocks or the ring itself.
//
// What it tunes (Knobs): I/O parallelism (`readers`: files read in parallel, one I/O thread
// each; `reads_per_file`: reads in flight at once on each file of the interleave, through
// io_uring), read-ahead depth (`stream_buffer_bytes` per open file), parse `workers`, and `prefetch`
// (batches the loader may keep ready in the ring). None of them changes the order of batches:
// `cycle_length` is not a knob (see docs/architecture.md, "Determinism").
//
// How it decides (docs/architecture.md, "Autotuning"; compare tf.data's stage-based optimiser in
// ../shared/reference/prior-art.md):
//   - Consumers waiting for batches (Observation::consumer_wait_fraction) is the signal that the
//     loader is the bottleneck. Then the stage that limits throughput is the one to raise: reads
//     when the sequencer waits for records (read-bound), parse workers when they are all busy
//     (parse-bound), prefetch when neither is saturated but the ring still runs dry (bursts).
//   - A raise is kept only if throughput rises by a clear margin in the next interval (the one
//     after it for readers, which need a storage round trip to start delivering);
//     otherwise it is taken back and that knob is not raised again for a hold-off period
//     (hysteresis, no oscillation).
//   - When consumers never wait, capacity that is not used (idle workers, idle I/O threads, a
//     ring that never drains below several ready batches) is taken back one step at a time,
//     and a step that makes consumers wait is undone. While they wait and nothing can be
//     raised, idle workers are taken back too, and a step that loses throughput is undone.
//   - Intervals start short (fast settling) and lengthen while nothing changes.
//
// The numbers (public constants below; the algorithm step by step in tuner.cc's top comment):
// consumers "wait" at >= 5% of the interval; a stage is saturated at >= 85% busy, or the read
// stage when the sequencer waits >= 25% for records while readers are >= 60% busy (with
// queued reads that go no higher, a sequencer that waits so long while neither stage is
// saturated raises the readers too, up to one per interleaved file and one for the files opened
// ahead of their turn: TryRaise, ReadersRaiseTarget); when
// consumers wait and neither stage is saturated nor the output bursty (the stages take turns,
// each waiting for the other: a loader short of CPU time rather than of one stage's
// parallelism), one more worker is tried while the workers are >= 60% busy, so that parsing
// goes on while the others wait (the same where the reads limit but readers are held off, after
// a trial or the CPU budget, or the output is bursty but prefetch cannot go up: a kept worker then ends
// the readers' hold-off, and readers and workers together may gain where either alone did not);
// when nothing can be raised, idle workers are stepped down (must not lose throughput; unless
// the reads limit, only while the rest stay <= 60% busy, or that rule raises them again); a
// change is made only once the current knobs have been measured for >= 1 s since they last
// changed (a 0.25 s interval on a shared machine moves by 10-20%; in the first 2 s with
// consumers and before any change, an interval > 5% over that measurement starts it again: the
// start-up ramp is no baseline; at start, with reads blocked beyond doubt and queued reads that
// can go up, after 0.25 s, and that raise must gain 50%: StartBlockedOnReads), and a raise is kept when
// throughput gains >= 5% over that measurement (a positive gain under 5% on its interval:
// judged again on that interval and the next together), else it is taken back
// and the knob is not raised again for 5 s the first time (one noisy interval), 120 s the second
// (doubling on each further failure, up to 960 s; a step down that failed: 120 s, doubling;
// "first" counts from the start, from a kept raise of that knob, or from hold-offs cleared),
// or until a raise of another knob is kept (that stage may have been limiting too);
// both stages saturated within 5 points of each other are raised together (one trial); and a
// raise of readers alone (workers alone) taken back while the workers were saturated in its
// place (the reads limited) moved the bottleneck instead of removing it: within 5 s, while
// the readers are CPU-bound and both stages stay >= 60% busy, readers and workers are raised
// together, as one trial, past both knobs' hold-offs; a pair taken back is held off as a
// single raise is (5 s, then 120 s, doubling) (on a 2 ms mount on 2 cores the grid gave r1 w1 1.80M, r2 w1 1.85M (+3%),
// r1 w2 1.95M (+8%), r2 w2 2.14M (+19%) records/s, and single trials measured -7% to +5%);
// a step down is taken only if the stage would stay <= 85% busy with one step less, and never
// back to a level a kept raise left; a shift of throughput by > 20% or of consumer wait by > 20
// points, lasting two intervals (one is noise on a shared machine), or of the consumer count,
// shortens the interval and drops a trial in progress (a raise without a 5% gain goes back,
// other steps stay); it clears hold-offs and those floors only when consumers came or went,
// started or stopped waiting, or throughput moved by more than 50%. Prefetch is raised only
// when the ring runs dry yet holds >= 0.75 batches on average (bursts); a ring empty all the time is a loader that is
// slower than its consumers, where prefetch cannot help (there one more worker is tried, if
// the measured CPU leaves 5% headroom). Intervals: 0.25 s, x1.5 per quiet
// interval, up to 2 s; the interval that judges a trial is at least 1 s (a readers change
// settles for 0.5 s before it).
// Read-ahead per file (stream_buffer_bytes, unless fixed): the smaller of the budget's share
// and a level that starts at Limits::start_stream_buffer_bytes and rises, while consumers wait
// and the sequencer waits for records, to what the interleave takes from a file during one of
// its reads, x 1.25 (read_bytes x readers blocked in reads / open_files_base x kReadAheadReads;
// see DeepenReadAhead), when that exceeds the level by 10%: rounded up to 64 KiB, at most
// max_stream_buffer_bytes. Not a trial, and never lowered (freed read-ahead stays with the
// allocator: no RSS to win back).
// When reads limit (readers saturated, or the sequencer waiting >= 25% for records) and the
// readers are I/O-blocked, reads_per_file goes up (a trial, up to max_reads_per_file and what
// the read-ahead budget holds) before readers do: from 1 to twice the blocks one read brings
// (read_bytes / read_block_bytes: 1 -> 8 with 1 MiB reads and 256 KiB blocks), then x2; it
// comes down /2, and to 1 from the step above that.
// I/O-blocked readers (read_cpu_fraction < 0.5) go up x2 (with queued reads, a step that would
// stop one short of their cap, cycle_length + 1, goes to it) and down /2, CPU-bound ones +-1;
// workers +-1; prefetch up x2 (as tf.data's PrefetchAutotuner doubles its buffer limit: one
// more batch gains a few percent at most, which a trial cannot tell from noise) and down by
// half the batches that never left the ring.
//
// Budgets (Limits), checked before every change, never exceeded:
//   - CPU: the process's CPU use, in cores (CPU-seconds per second of all its threads, measured
//     each interval: Observation::cpu_cores), must stay within Limits::cpu_cores. That is the
//     time-averaged number of its threads on a CPU: a worker parsing all the time counts as
//     one, a sequencer or a reader that is on the CPU 30% of the time as 0.3, a reader blocked
//     in I/O as nothing (Decision reports how many readers mostly wait: blocked_io_threads). The
//     cgroup CPU quota counts the same way. A raise is allowed when the projected use stays
//     within the budget: the measured use plus, per added thread, what each thread of that stage
//     used in the last interval (workers: parse_busy_fraction x parse_cpu_fraction; readers:
//     read_busy_fraction x read_cpu_fraction). Where the budget is all the CPU the process can
//     get (>= Limits::machine_cores: the affinity mask and cgroup quota, the default budget),
//     its use cannot go over it, and a raise is allowed as long as the measured use leaves room
//     for the kRaiseGain a trial must show: that projection assumes the added thread does a
//     thread's worth of new work, where one more reader or worker of a saturated stage shares
//     the same work per record (1 CPU-bound reader of 100 KB records at 93% busy and 1.3 cores
//     used projected 2.2 of 2 cores; with 2 the daemon used 1.6 cores for 31% more examples/s).
//     A measured use over the budget by more than
//     kCpuTolerance lowers the less busy stage (in the next decision, before anything else) and
//     holds that knob's raises off for 120 s at least (doubling), not the 5 s of a trial's
//     first failure: a measured use is not one noisy interval.
//   - memory: the read-ahead (open files x (stream_buffer_bytes + queued reads: ReadQueue::
//     MostBytes, (reads_per_file + 3) x read_block_bytes, when reads_per_file > 1)) must stay within
//     Limits::read_ahead_budget_bytes, the part of pipeline.memory_budget left to it (see
//     daemon/budget.h). Open files = open_files_base + readers (at most the files there are:
//     max_open_files). Unless fixed,
//     stream_buffer_bytes = min(StreamBufferBytesFor(limits, readers) (budget / open files,
//     clamped to the max, 4 KiB multiple), the read-ahead level) after every change of readers
//     or of the level; readers are raised only while the share stays >= min_stream_buffer_bytes.
//   Knobs over a budget (an initial setting, or stages that turned CPU-hungrier) are lowered in
//   the next decision, before anything else. The floor (1 reader, 1 worker, prefetch 1) always
//   runs, even if it alone is over cpu_cores.
// Fixed knobs (a number in the config) are never changed, not even to meet a budget.
//
// Determinism: no clocks, no randomness; the same observations give the same decisions. Time
// (hold-offs) is the sum of the observed interval_seconds.
//
// Thread-safety: none; one thread owns a Tuner.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ringfeed {

struct TunerKnobs {
  int64_t readers = 1;                  // I/O threads = files read in parallel
  uint64_t stream_buffer_bytes = 4u << 20;  // read-ahead per open file (bytes)
  int64_t workers = 1;                  // parse workers
  int64_t prefetch = 2;                 // ready batches the loader may keep in the ring
  // Reads in flight at once per file being read (ReaderOptions::reads_in_flight, a ReadQueue
  // of that depth; 1 = one read() at a time into the reader's window or inflater).
  int64_t reads_per_file = 1;

  bool operator==(const TunerKnobs&) const = default;
};

// Which knobs the config fixes (a number instead of `auto`); those are never changed.
struct TunerFixed {
  bool readers = false;
  bool stream_buffer_bytes = false;
  bool workers = false;
  bool prefetch = false;
  bool reads_per_file = false;
};

struct TunerLimits {
  double cpu_cores = 1;                 // CPU budget: cores the process may use (pipeline.cpu_budget)
  double machine_cores = 0;             // cores it can get at all (affinity, cgroup quota); 0: unknown
  uint64_t read_ahead_budget_bytes = 64u << 20;  // for all open files' read-ahead together
  int64_t open_files_base = 4;          // files open for the interleave besides the readers' (cycle_length)
  int64_t max_open_files = 0;           // files there are to open (the shard's); 0: no cap. Open files =
                                        // min(open_files_base + readers, max_open_files), as in the memory plan
  int64_t max_readers = 16;
  // Why max_readers is what it is, for status ("readers at their most (1: the shard has 1
  // file)"); empty: no reason given.
  std::string max_readers_why;
  int64_t max_workers = 16;
  int64_t max_prefetch = 16;            // ring slots available for prefetch (fixed at start)
  uint64_t min_stream_buffer_bytes = 256u << 10;
  uint64_t max_stream_buffer_bytes = 16u << 20;
  // Read-ahead per open file that the tuner starts from (an auto stream_buffer_bytes), clamped
  // to [min, max]_stream_buffer_bytes; it rises towards the max while a file's read-ahead is
  // too shallow to cover its next read (see Tuner). The default starts at the max:
  // stream_buffer_bytes is then the budget's share.
  uint64_t start_stream_buffer_bytes = 16u << 20;
  uint64_t read_bytes = 1u << 20;       // size of a reader's read() calls (ReaderOptions::buffer_bytes)
  int64_t max_reads_per_file = 16;
  uint64_t read_block_bytes = 256u << 10;  // one queued read (ReaderOptions::read_block_bytes)
  // Read-ahead per open file while reads are queued (reads_per_file > 1), at most: the queue's
  // blocks already hold what is read ahead of the records taken, so the stream buffer only
  // hands records over to the interleave (a 20 ms mount, 4 readers, 16 queued reads per file:
  // the same throughput at 128 KiB as at 256 KiB, 2.3 MiB less private RSS; docs/benchmarks.md,
  // session 30). The memory limits on readers and queued reads still count
  // min_stream_buffer_bytes per file.
  uint64_t queued_stream_buffer_bytes = 128u << 10;
};

// What the pipeline did during one interval. Fractions are in [0, 1] of the interval's wall time.
struct TunerObservation {
  double interval_seconds = 0;
  uint64_t records = 0;                 // records published in the interval
  int64_t consumers = 0;                // attached consumers (0: nothing to tune for; hold)
  double consumer_wait_fraction = 0;    // mean over consumers of the time spent waiting in next()
  double cpu_cores = 0;                 // CPU-seconds per second used by the whole process (all threads)
  // Read stage (I/O threads).
  double read_busy_fraction = 0;        // mean over I/O threads of the time spent reading
  double read_cpu_fraction = 0;         // CPU time of I/O threads / their busy time (1: CPU-bound)
  double read_cpu_cores = 0;            // CPU time of all I/O threads / wall time (status; the tuner uses the above)
  double sequencer_read_wait_fraction = 0;  // sequencer waiting for a record from a stream
  double sequencer_cpu_fraction = 0;    // the sequencer thread's CPU time / wall time (interleave,
                                        // shuffle, batch assembly; 1: it takes a core of its own)
  // Parse stage.
  double parse_busy_fraction = 0;       // mean over workers of the time not waiting for work (parsing,
                                        // publishing, waking consumers)
  double parse_cpu_fraction = 1;        // CPU time of workers / their busy time (< 1: waiting for a core)
  // Hand-off.
  double sequencer_slot_wait_fraction = 0;  // sequencer waiting for a free slot (ring full)
  // ... the part of it with the loader's own batches (queued for the workers, or ready in the
  // ring) at workers + prefetch; the rest had no free slot at all (the trainers hold them).
  double sequencer_prefetch_wait_fraction = 0;
  double ready_slots_mean = 0;          // batches ready in the ring, time-averaged
  int64_t ready_slots_min = 0;          // fewest ready batches seen in the interval
  uint64_t read_ahead_bytes = 0;        // bytes buffered by the read-ahead (end of interval)
};

struct TunerChange {
  // The status's knob names: "readers", "read_ahead_bytes" (stream_buffer_bytes),
  // "reads_per_file", "workers", "prefetch".
  std::string knob;
  int64_t from = 0;
  int64_t to = 0;
  std::string reason;                   // one line for logs and `ringfeedctl status`, with the
                                        // numbers; without the "knob from -> to: " prefix
};

struct TunerDecision {
  TunerKnobs knobs;                     // to apply now
  std::vector<TunerChange> changes;     // empty when nothing changed
  std::string note;                     // a line for the debug log beside the changes: a trial
                                        // judged once more, or kept ("kept: readers 2 gave ..."),
                                        // else empty
  std::string holding;                  // consumers waited and the tuner could try nothing:
                                        // why ("no stage is saturated ..."), for status and
                                        // the debug log; empty otherwise
  double next_interval_seconds = 0.25;  // when to observe next
  double cpu_cores = 0;                 // CPU use in cores, measured in the interval just observed
  int64_t runnable_threads = 0;         // cpu_cores rounded: threads' worth of CPU in use
  int64_t blocked_io_threads = 0;       // readers that mostly wait for storage (not CPU)
};

// "workers 2 -> 3: <reason>", the form for logs.
std::string ToString(const TunerChange& change);

class Tuner {
 public:
  // The policy's numbers (see the top of this file).
  static constexpr double kConsumerWaitThreshold = 0.05;  // consumers "wait" from this fraction
  static constexpr double kSaturatedBusy = 0.85;          // a stage this busy limits throughput
  static constexpr double kReadStarved = 0.25;            // sequencer waiting this long for records
  static constexpr double kReadStarvedBusy = 0.6;         // ... counts while readers are this busy
  static constexpr double kBusyTie = 0.05;                // both stages saturated within this: raise both
  static constexpr double kRaiseGain = 0.05;              // a raise must gain this much throughput
  static constexpr double kLowerTargetBusy = 0.85;        // a step down must leave the stage at most this busy
  static constexpr double kShedWhileWaitingBusy = 0.6;    // ... workers shed while consumers wait and reads do not limit
  static constexpr double kPairBusy = 0.6;                // readers and workers raised together: both at least this busy
  static constexpr double kPairHintSeconds = 5;           // ... within this long of the single raise taken back
  static constexpr double kIoBoundCpuFraction = 0.5;      // readers below it are I/O-blocked (x2 steps)
  static constexpr double kCpuTolerance = 0.05;           // measured CPU this far over the budget lowers knobs
  static constexpr int64_t kPrefetchQuietIntervals = 3;   // intervals with >= 2 ready batches before lowering
  static constexpr double kForgetFraction = 0.5;          // a shift this large (or a flip of who waits) clears hold-offs
  static constexpr double kShiftFraction = 0.2;           // a regime shift (two intervals running): interval short, hold-offs cleared
  static constexpr double kBurstyReadyMean = 0.75;        // ring dry at times, yet this many ready on average: bursts
  static constexpr double kFirstHoldOffSeconds = 5;       // after a knob's first failed raise (one noisy interval)
  static constexpr double kHoldOffSeconds = 120;          // after a further one; doubles per failure
  static constexpr double kMaxHoldOffSeconds = 960;
  static constexpr double kShortIntervalSeconds = 0.25;
  static constexpr double kTrialIntervalSeconds = 1.0;    // the interval a trial is judged on
  static constexpr double kSettleIntervalSeconds = 0.5;   // ... and the one new readers ramp in
  static constexpr double kStretchWindowSeconds = 4.0;    // a trial's before-throughput: the last 4 s at most
  static constexpr double kStartupRampSeconds = 2.0;      // consumer time in which a rising interval restarts it
  static constexpr double kStartBlockedFraction = 0.75;   // at start, reads blocked beyond doubt (StartBlockedOnReads)
  static constexpr double kEarlyRaiseGain = 0.5;          // ... that raise, on a short measurement, must gain this much
  static constexpr double kMaxIntervalSeconds = 2.0;
  static constexpr double kIntervalGrowth = 1.5;
  static constexpr uint64_t kStreamBufferAlign = 4096;
  static constexpr double kReadAheadReads = 1.25;         // a file's read-ahead covers this many of its reads (room to grow)
  static constexpr double kReadAheadSlack = 1.1;          // ... raised when the need exceeds it by this factor
  static constexpr uint64_t kReadAheadStepBytes = 64u << 10;  // ... to the need, rounded up to this
  // A change of readers is judged on the second interval after it, not the first: new readers
  // open their files and wait for their first reads (a storage round trip or several), and
  // readers taken away leave full buffers behind that hide the loss for a while. On a 20 ms
  // mount the first 0.25 s after 4 -> 8 readers measured 10% less than 4 readers gave, steady
  // state 15-20% more (docs/benchmarks.md, "Autotuning"). Workers and prefetch act at once.
  static constexpr int kReaderSettleIntervals = 1;

  // Does not change `initial`, even where it is over a budget: the first Observe does (with
  // reasons), so that the daemon, which starts its pipeline with `initial`, applies it.
  Tuner(TunerLimits limits, TunerKnobs initial, TunerFixed fixed);
  // Feeds one interval's observation, returns the knobs to use next.
  TunerDecision Observe(const TunerObservation& observation);
  const TunerKnobs& knobs() const { return knobs_; }
  const TunerLimits& limits() const { return limits_; }

  // The read-ahead per open file for `readers` readers: read_ahead_budget_bytes /
  // OpenFiles(limits, readers), at most max_stream_buffer_bytes, rounded down to 4 KiB (not
  // clamped up to the minimum: a budget below it is the start-up check's error): the budget's
  // share.
  // With reads_per_file > 1, each file's queued reads (ReadQueue::MostBytes) come
  // out of its share first, and the rest is at most queued_stream_buffer_bytes.
  static uint64_t StreamBufferBytesFor(const TunerLimits& limits, int64_t readers, int64_t reads_per_file = 1);
  // Files open at once with `readers` readers: open_files_base + readers, at most
  // max_open_files (when set), at least 1.
  static int64_t OpenFiles(const TunerLimits& limits, int64_t readers);
  // What an auto stream_buffer_bytes starts at: the budget's share, at most
  // start_stream_buffer_bytes. Use it for TunerKnobs::stream_buffer_bytes at start so that the
  // first decision need not change it.
  static uint64_t StartStreamBufferBytes(const TunerLimits& limits, int64_t readers, int64_t reads_per_file = 1);

 private:
  enum Knob { kReaders = 0, kWorkers = 1, kPrefetch = 2, kReadsPerFile = 3, kKnobCount = 4 };
  // A change on probation: kept if the next interval confirms it, else taken back.
  struct Trial {
    bool raise = true;               // a raise (must gain `gain`) or a step down
    bool consumers_waited = false;   // a step down while consumers waited (a CPU trade): must not lose
    TunerKnobs before;               // what to go back to
    std::vector<Knob> knobs;         // the knobs changed
    double throughput = 0;           // records/s with the knobs before the change (their stretch, >= 1 s,
                                     // or >= 0.25 s for the early raise: StartBlockedOnReads)
    double consumer_wait = 0;
    int64_t consumers = 0;
    int settle_intervals = 0;        // intervals still to let pass before judging (see kReaderSettleIntervals)
    bool extended = false;           // judged once more: a gain under `gain` (see EvaluateTrial)
    bool pair = false;               // readers and workers raised together after a pair hint (TryPair)
    double gain = kRaiseGain;        // a raise stays when it gains this much (kEarlyRaiseGain: the early raise)
  };
  struct Hold {
    double raise_until = 0;          // tuner time (s) before which the knob is not raised
    double lower_until = 0;          // ... not lowered
    double raise_seconds = kFirstHoldOffSeconds;  // the next raise hold-off (5 s, then 120 s doubling)
    double lower_seconds = kHoldOffSeconds;
    int64_t floor = 0;               // never lowered to this or below (a kept raise started here)
  };
  // A single raise of readers or workers that was taken back while the other stage saturated
  // in its place (the bottleneck moved rather than went): the two are tried together next.
  struct PairHint {
    Knob failed = kReaders;          // the knob raised alone
    int64_t tried = 0;               // ... to this value
    double read_busy = 0, parse_busy = 0, read_wait = 0;  // in that trial's last interval
    double until = 0;                // tuner time the hint expires (kPairHintSeconds after it)
  };
  struct Signals;                    // one observation, digested (tuner.cc)

  int64_t& Value(Knob k);
  static int64_t KnobOf(const TunerKnobs& knobs, Knob k);  // that knob's value in `knobs`
  bool Fixed(Knob k) const;
  static const char* Name(Knob k);
  // "workers 3" or "readers 4, workers 2": the knobs `which` (in that order) at `k`.
  static std::string Describe(const TunerKnobs& k, const std::vector<Knob>& which);
  // The hold-off after one of `seconds` failed too: kHoldOffSeconds after the short first one,
  // else twice `seconds`, at most kMaxHoldOffSeconds.
  static double NextHoldOff(double seconds);
  int64_t CpuBoundReaders(int64_t readers) const;
  // The process's CPU use (cores) with these knobs: the last measured use plus or minus, per
  // thread added or removed, what each thread of that stage used in the last interval.
  double ProjectedCores(int64_t workers, int64_t readers) const;
  bool WithinCpuBudget(int64_t workers, int64_t readers) const;
  int64_t MaxReadersForMemory() const;
  // Queued reads' memory per open file at `reads` reads per file (ReadQueue::MostBytes; 0 at 1:
  // read() into the window).
  uint64_t QueueBytesPerFile(int64_t reads) const;
  // The most reads per file the read-ahead budget holds with the current readers.
  int64_t MaxReadsPerFileForMemory() const;
  // The queued reads that bring as many bytes per round trip as one read at a time
  // (read_bytes / read_block_bytes, at least 1).
  int64_t QueuedReadsLikeOne() const;
  // Reads per file a raise would go to (== reads_per_file: none).
  int64_t ReadsPerFileRaiseTarget() const;
  // The files the interleave reads from at once: cycle_length (open_files_base), at most the
  // files there are.
  int64_t InterleavedFiles() const;
  // The most readers beside queued reads (reads_per_file > 1): one per interleaved file and one
  // for the files opened ahead of their turn (ReadersRaiseTarget).
  int64_t QueuedReadsMostReaders() const { return InterleavedFiles() + 1; }
  // Readers a raise would go to with `workers` workers (== readers: none; *cpu_blocked when
  // only the CPU budget stops it). With queued reads (reads_per_file > 1), at most
  // QueuedReadsMostReaders().
  int64_t ReadersRaiseTarget(int64_t workers, bool* cpu_blocked, bool ignore_hold = false) const;
  bool CanRaiseWorkers(int64_t readers, bool* cpu_blocked) const;
  std::string CpuUse() const;        // "1.45 of 2 cores (...)" for reasons
  // Why consumers wait and no raise was possible (TunerDecision::holding).
  std::string WhyNoRaise(const Signals& s) const;
  bool Shifted(const Signals& s) const;
  void SetReference(double throughput, double wait, int64_t consumers);
  void Restore(const TunerKnobs& to, const std::string& reason, std::vector<TunerChange>* changes);
  // stream_buffer_bytes after a change of readers or read_ahead_level_: the budget's share, at
  // most the level (unless fixed); a change is recorded with `reason`.
  void UpdateStreamBufferBytes(const std::string& reason, std::vector<TunerChange>* changes);
  std::string BudgetShareReason() const;  // "read-ahead budget 64.0 MiB over 4 + 2 open files (readers 2)"
  bool IoBound() const { return read_cpu_fraction_ < kIoBoundCpuFraction; }
  void Set(Knob k, int64_t to, const std::string& reason, std::vector<TunerChange>* changes);
  void EnforceBudgets(const Signals& s, std::vector<TunerChange>* changes);
  bool EvaluateTrial(const Signals& s, std::vector<TunerChange>* changes);
  bool TryRaise(const Signals& s, std::vector<TunerChange>* changes);
  bool TryLower(const Signals& s, std::vector<TunerChange>* changes);
  // Raises read_ahead_level_ when a file's read-ahead covers less than kReadAheadReads of its
  // reads (see the top of this file). No trial: a measured need.
  bool DeepenReadAhead(const Signals& s, std::vector<TunerChange>* changes);
  bool TryTrade(Knob give, Knob take, const Signals& s, std::vector<TunerChange>* changes);
  // Readers and workers raised as one trial after pair_hint_ (see the top of this file).
  bool TryPair(const Signals& s, std::vector<TunerChange>* changes);
  // Whether the reads limit: readers saturated, or the sequencer starved of records while the
  // readers are mostly busy.
  static bool ReadsLimit(const Signals& s);
  // Before the first change: consumers, the sequencer and the readers all >= kStartBlockedFraction
  // (75%) waiting or busy, the readers blocked in I/O (IoBound), records flowing, and queued reads
  // that can go up: storage with a round trip per read and one read at a time. The first raise
  // of reads_per_file then comes once kShortIntervalSeconds are measured (maybe the very first
  // interval) instead of 1 s of a settled level, and must gain kEarlyRaiseGain (50%) to stay:
  // more than a start-up ramp or one short interval's noise can show (it gained 2.4-3.4x on a
  // 2 ms mount, 6x on a 20 ms one).
  bool StartBlockedOnReads(const Signals& s) const;
  void StartTrial(bool raise, const Signals& s, const TunerKnobs& before, std::vector<Knob> knobs);
  // The stretch starts again with `records` in `seconds` (0, 0: empty).
  void ResetStretch(double records = 0, double seconds = 0);
  void AddToStretch(double records, double seconds);
  void ClearHolds();
  TunerDecision Finish(std::vector<TunerChange> changes, bool changed);

  TunerLimits limits_;
  TunerKnobs knobs_;
  TunerFixed fixed_;
  uint64_t read_ahead_level_ = 0;     // stream_buffer_bytes unless the budget's share is less
  double now_seconds_ = 0;            // sum of observed intervals: the tuner's only clock
  double interval_seconds_ = kShortIntervalSeconds;
  double read_cpu_fraction_ = 0;      // of the last interval in which readers were busy
  int shift_streak_ = 0;              // consecutive intervals off the reference
  bool reference_seen_ = false;       // reference_* hold a level (has_reference_ may be reset)
  double read_cpu_share_ = 0;         // read_busy_fraction x read_cpu_fraction, same interval:
                                      // cores per reader
  double worker_cores_ = 0;           // parse_busy_fraction x parse_cpu_fraction: cores per worker
  double cpu_cores_ = 0;              // measured in the last interval, whole process
  int64_t measured_readers_ = 1;      // the knobs cpu_cores_ was measured with
  int64_t measured_workers_ = 1;
  std::optional<Trial> trial_;
  std::string note_;                  // TunerDecision::note of the decision being made
  std::string holding_;               // TunerDecision::holding of the decision being made
  Hold hold_[kKnobCount];
  std::optional<PairHint> pair_hint_;  // until used or expired; cleared by a kept raise, a
                                       // shift, a budget cut
  double pair_raise_until_ = 0;        // no pair hint before this (a pair taken back)
  double pair_raise_seconds_ = kFirstHoldOffSeconds;  // the next such hold-off (5 s, then 120 s, doubling)
  // The level a regime shift is measured against (set after every change, once confirmed).
  bool has_reference_ = false;
  double reference_throughput_ = 0;
  double reference_wait_ = 0;
  int64_t reference_consumers_ = 0;
  // The current knobs' measurement: records and seconds since they last changed (or since a
  // change of readers settled, or the regime shifted), the last kStretchWindowSeconds of it. A
  // trial's "before" throughput is this stretch's, and a change waits until it covers
  // kTrialIntervalSeconds, as the trial does (the early raise: kShortIntervalSeconds,
  // StartBlockedOnReads).
  std::deque<std::pair<double, double>> stretch_;  // (records, seconds) per interval, oldest first
  double stretch_records_ = 0;                     // their sums
  double stretch_seconds_ = 0;
  // The start-up ramp (files opening, the ring filling for the first time) is not part of the
  // first knobs' measurement: until the first change and for kStartupRampSeconds of time with
  // consumers, an interval more than kRaiseGain over the stretch so far starts it again.
  bool changed_once_ = false;
  double ramp_seconds_ = 0;
  // Prefetch: consecutive intervals in which consumers did not wait and >= 2 batches stayed ready.
  int64_t quiet_intervals_ = 0;
  int64_t quiet_min_ready_ = 0;
};

}  // namespace ringfeed
