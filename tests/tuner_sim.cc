#include "tests/tuner_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ringfeed::testing {
namespace {
constexpr double kUnlimited = 1e12;  // records/s of a stage that costs nothing

double Clamp01(double v) { return std::clamp(v, 0.0, 1.0); }
}  // namespace

double TunerSim::Uniform() {
  // splitmix64 (Steele, Lea, Flood 2014): the same sequence on every standard library.
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 * 2 - 1;
}

SimPoint TunerSim::Evaluate(const TunerKnobs& knobs, double delivering) const {
  const SimParams& p = params_;
  SimPoint s;
  // One read of read_bytes per round trip, or reads_per_file queued reads of read_block_bytes.
  const double per_trip = knobs.reads_per_file > 1
                              ? p.read_block_bytes * static_cast<double>(knobs.reads_per_file)
                              : p.read_bytes;
  const double t_io = p.storage_latency_s * p.record_bytes / per_trip;
  const double needed = static_cast<double>(p.burst + 1);
  const double burst_factor = static_cast<double>(knobs.prefetch) >= needed ? 1 : static_cast<double>(knobs.prefetch) / needed;
  const double cpu_per_record = p.read_cpu_s + p.parse_cpu_s + p.sequencer_cpu_s;
  // Throughput without contention, then the slowdown its CPU demand brings.
  const double read0 = t_io + p.read_cpu_s > 0 ? delivering / (t_io + p.read_cpu_s) : kUnlimited;
  const double parse0 = p.parse_cpu_s > 0 ? static_cast<double>(knobs.workers) / p.parse_cpu_s : kUnlimited;
  const double demand = std::min({read0, parse0, p.consumer_rate}) * burst_factor * cpu_per_record;
  const double slowdown = std::max(1.0, demand / p.cores);
  s.slowdown = slowdown;
  const double per_record = t_io + p.read_cpu_s * slowdown;
  s.read_capacity = per_record > 0 ? delivering / per_record : kUnlimited;
  s.parse_capacity = p.parse_cpu_s > 0 ? static_cast<double>(knobs.workers) / (p.parse_cpu_s * slowdown) : kUnlimited;
  s.read_cpu_fraction = per_record > 0 ? p.read_cpu_s * slowdown / per_record : 0;
  s.throughput = std::min({s.read_capacity, s.parse_capacity, p.consumer_rate}) * burst_factor;
  s.cpu_cores = s.throughput * cpu_per_record;
  s.consumer_wait = p.consumer_rate > 0 ? 1 - s.throughput / p.consumer_rate : 0;
  return s;
}

TunerObservation TunerSim::Step(const TunerKnobs& knobs, double interval_seconds) {
  const SimParams& p = params_;
  // Readers added by a raise deliver only after the ramp: the share of this interval after it
  // counts. Readers taken away stop at once.
  const auto readers = static_cast<double>(knobs.readers);
  if (settled_readers_ < 0 || knobs.readers <= settled_readers_) {
    settled_readers_ = knobs.readers;
    ramp_target_ = 0;
    ramp_left_s_ = 0;
  } else if (knobs.readers != ramp_target_) {  // a new raise (a raise during a ramp restarts it)
    ramp_target_ = knobs.readers;
    ramp_left_s_ = p.reader_ramp_s;
  }
  double delivering = readers;
  if (knobs.readers > settled_readers_ && interval_seconds > 0) {
    const double share = std::clamp((interval_seconds - ramp_left_s_) / interval_seconds, 0.0, 1.0);
    const auto settled = static_cast<double>(settled_readers_);
    delivering = settled + share * (readers - settled);
    ramp_left_s_ -= interval_seconds;
    if (ramp_left_s_ <= 0) {
      settled_readers_ = knobs.readers;
      ramp_target_ = 0;
    }
  }
  const SimPoint s = Evaluate(knobs, delivering);
  auto noisy = [&](double v) { return v * (1 + p.noise * Uniform()); };
  const double throughput = noisy(s.throughput);
  const double loader = std::min(s.read_capacity, s.parse_capacity);
  const bool bursty = knobs.prefetch < p.burst + 1;
  const bool consumer_bound = loader >= p.consumer_rate && !bursty;

  TunerObservation o;
  o.interval_seconds = interval_seconds;
  o.records = static_cast<uint64_t>(std::llround(std::max(0.0, throughput) * interval_seconds));
  o.consumers = p.consumers;
  o.consumer_wait_fraction = p.consumer_rate > 0 ? Clamp01(1 - throughput / p.consumer_rate) : 0;
  o.read_busy_fraction = Clamp01(noisy(s.throughput / s.read_capacity));
  o.read_cpu_fraction = Clamp01(noisy(s.read_cpu_fraction));
  const double downstream = std::min(s.parse_capacity, p.consumer_rate);
  o.sequencer_read_wait_fraction =
      Clamp01(std::max(0.0, 1 - s.read_capacity / downstream) + (s.read_capacity < downstream ? p.noise * Uniform() : 0));
  o.parse_busy_fraction = Clamp01(noisy(s.throughput / s.parse_capacity));
  o.parse_cpu_fraction = 1 / s.slowdown;
  o.cpu_cores = std::max(0.0, noisy(s.cpu_cores));
  o.sequencer_slot_wait_fraction = Clamp01(1 - s.throughput / loader);
  o.ready_slots_min = consumer_bound ? knobs.prefetch - p.burst : 0;
  o.ready_slots_mean = consumer_bound ? static_cast<double>(knobs.prefetch) - 0.5 * static_cast<double>(p.burst)
                                      : bursty ? 0.5 * static_cast<double>(knobs.prefetch) : 0;
  o.read_ahead_bytes = static_cast<uint64_t>(p.open_files_base + knobs.readers) * knobs.stream_buffer_bytes;
  return o;
}

}  // namespace ringfeed::testing
