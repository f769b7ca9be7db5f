// TunerSim: a simulated ringfeedd pipeline for the autotuner's tests (tests/tuner_test.cc). It
// turns knobs into the TunerObservation the daemon (daemon/autotune.cc) would measure, from a
// model simple enough that the best knobs can be worked out by hand.
//
// The model (all rates in records/s, times in seconds):
//   storage    a read of R bytes takes L; a record is b file bytes, so I/O per record is
//              t_io = L x b / R. Reading also costs c_r CPU per record (0 for plain files, the
//              inflate cost for GZIP). A reader's CPU share of its busy time: f = c_r / (t_io + c_r).
//   CPU        each record costs c_r + c_p + c_s CPU (c_s: the sequencer's). demand = the cores
//              the setting would use without contention = T0 x (c_r + c_p + c_s), T0 the
//              throughput below with no slowdown. Over `cores` (the machine's, not the budget),
//              all CPU work slows by demand / cores (threads share the cores evenly).
//   capacity   read  = readers / (t_io + c_r x slowdown)
//              parse = workers / (c_p x slowdown)
//   bursts     batches reach the ring in bursts of B; with prefetch p < B + 1 the consumers
//              wait for every burst and get only p / (B + 1) of what they would take
//              (tf.data #39992's bursty in-order output). B = 1: no bursts, p >= 2 suffices.
//   throughput = min(read, parse, C) x burst factor, C = the consumers' rate.
// What it reports, as the daemon measures it:
//   records               throughput x interval
//   consumer_wait         1 - throughput / C
//   read_busy / parse_busy  throughput / capacity of the stage
//   read_cpu_fraction     f (with the slowdown)
//   cpu_cores             throughput x (c_r + c_p + c_s): the CPU the process used
//   parse_cpu_fraction    1 / slowdown (a worker's busy time stretched by waiting for a core)
//   sequencer_read_wait   1 - read / min(parse, C) when reads are the slowest stage, else 0
//   sequencer_slot_wait   1 - throughput / min(read, parse) (the ring is full when consumers limit)
//   ready_slots_min       p - B when consumers limit (p >= B + 1), else 0 (the ring runs dry)
//   ready_slots_mean      p - B / 2 when consumers limit, p / 2 with bursts, 0 when the loader limits
//   read_ahead_bytes      (open_files_base + readers) x stream_buffer_bytes (buffers full)
// Reader ramp (optional, reader_ramp_s = T): readers added by a raise deliver nothing for their
// first T seconds (opening files, first reads), so the interval right after a raise sees only
// part of its gain. Readers taken away stop at once.
// Reads of R bytes are assumed to fit every allowed stream buffer, so stream_buffer_bytes
// costs memory only and never throughput; the sequencer itself is never the bottleneck.
// Noise (optional): each measurement is multiplied by 1 + noise x u (fractions of wait: + noise
// x u), u uniform in [-1, 1) from a seeded splitmix64, clamped to [0, 1]; records get the same
// noisy throughput that consumer_wait is computed from.
//
// Thread-safety: none. Deterministic for a given seed.
#pragma once

#include <cstdint>

#include "daemon/tuner.h"

namespace ringfeed::testing {

struct SimParams {
  double storage_latency_s = 0;     // L: per read of read_bytes
  double read_bytes = 256 << 10;    // R: one read at a time (reads_per_file 1)
  double read_block_bytes = 256 << 10;  // one queued read (reads_per_file > 1: that many in flight)
  double record_bytes = 4096;       // b: file bytes per record
  double read_cpu_s = 0;            // c_r: reader CPU per record (inflate)
  double parse_cpu_s = 50e-6;       // c_p: parse CPU per record, one worker
  double sequencer_cpu_s = 0;       // c_s: the sequencer's CPU per record
  double consumer_rate = 10000;     // C: records/s all consumers together take
  int64_t consumers = 1;
  int64_t burst = 1;                // B: batches per burst
  double cores = 8;
  int64_t open_files_base = 4;      // as TunerLimits::open_files_base
  double reader_ramp_s = 0;         // T: added readers deliver nothing for this long
  double noise = 0;                 // relative, uniform in [-noise, +noise]
  uint64_t seed = 1;
};

// The model's exact values for one setting (no noise).
struct SimPoint {
  double read_capacity = 0, parse_capacity = 0;  // records/s
  double throughput = 0;                         // records/s
  double consumer_wait = 0;
  double read_cpu_fraction = 0;
  double cpu_cores = 0;                          // CPU the setting uses (cores)
  double slowdown = 1;                           // >= 1: CPU work stretched by contention
};

class TunerSim {
 public:
  explicit TunerSim(SimParams params) : params_(params), state_(params.seed) {}
  // Change between steps for a change of regime (slower storage, slower consumers).
  SimParams& params() { return params_; }
  SimPoint Evaluate(const TunerKnobs& knobs) const { return Evaluate(knobs, static_cast<double>(knobs.readers)); }
  // With `delivering` of knobs.readers delivering records (the others ramping up).
  SimPoint Evaluate(const TunerKnobs& knobs, double delivering) const;
  // One interval with these knobs.
  TunerObservation Step(const TunerKnobs& knobs, double interval_seconds);

 private:
  double Uniform();  // [-1, 1)
  SimParams params_;
  uint64_t state_;
  // The ramp: readers delivering fully, the raise in progress and how long it still ramps.
  int64_t settled_readers_ = -1;  // -1: no step yet (the initial readers deliver at once)
  int64_t ramp_target_ = 0;
  double ramp_left_s_ = 0;
};

}  // namespace ringfeed::testing
