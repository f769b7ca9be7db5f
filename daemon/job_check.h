// `ringfeedctl check CONFIG`: runs one epoch of a job the way the daemon reads it — every
// file of its shard through TFRecordReader and every record through ExampleParser into batches of
// batch.size — applying source.on_error, and reports what a trainer would get. No shuffling,
// no shared memory: it answers "does my config fit my data, and how fast can one core parse it".
// It also makes ringfeedd's start-up plan (daemon/tuning_plan.h: the same record sample, ring
// slot size and memory plan) and sizes every batch of the epoch as a ring slot, so a config
// that ringfeedd would refuse at start (budget) or stop at (a batch larger than a slot) fails
// here first. Its batches follow file order, where ringfeedd interleaves pipeline.cycle_length
// files: with records of very uneven size the daemon's largest batch can differ.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "config/job_config.h"

namespace ringfeed {

struct JobCheckResult {
  uint64_t files = 0;            // files matched by source.files
  uint64_t files_in_shard = 0;   // of them, those of shard.index (all when shard.count is 1)
  uint64_t files_read = 0;       // files read (fewer when on_error: fail stopped the epoch)
  uint64_t records = 0;          // records parsed into batches
  uint64_t batches = 0;          // full batches, plus the last one unless drop_remainder
  uint64_t last_batch_rows = 0;  // rows of that last, partial batch (0: none, or dropped)
  uint64_t dropped_records = 0;  // records of a final partial batch dropped by drop_remainder
  // on_error: fail stopped at a record that does not parse: the good records before it in its
  // batch, which ringfeedd does not deliver (it drops that batch whole; a read error instead
  // ends the epoch with a short batch of the records before it). Not in `batches`.
  uint64_t undelivered_records = 0;
  // Under on_error: fail, records that do not parse in batches ringfeedd drops unparsed (a short
  // last batch under drop_remainder, an incomplete last round in ranks mode): they stop nothing
  // there, so they are not parse_errors; counted (in the batches) and the first one named.
  uint64_t unparsed_in_dropped_batches = 0;
  std::string unparsed_in_dropped_batch;
  uint64_t read_errors = 0;
  uint64_t parse_errors = 0;
  uint64_t bytes = 0;            // serialized record bytes
  double seconds = 0;
  bool failed = false;           // on_error: fail and an error occurred (the check stopped there)
  // Why the epoch was not read, or "": the batch the records are parsed into (min(batch.size,
  // 1024) rows of the features' fixed shapes) is more than the memory budget, or could not be
  // allocated. plan_error says why the daemon would refuse the job.
  std::string epoch_not_read;
  std::string first_error;
  // What ringfeedd warns of at start from its sample (RecordSample::warnings): spec features that
  // no sampled record contains, each with a hint ("did you mean 'tips'?"), SequenceExample records.
  std::vector<std::string> sample_warnings;
  // Features no record of the start-up sample has but a later record does: name -> "FILE:
  // record R at byte B", the first record that has it (their sample warnings are dropped: the
  // job reads them; ringfeedd, which sees the sample only, still warns at start).
  std::map<std::string, std::string> found_after_sample;

  // ringfeedd's start-up plan for this config, from its own sample of the first records.
  std::string plan_error;        // non-empty: ringfeedd would refuse to start (the arithmetic)
  std::string memory_plan;       // the whole memory plan (MemoryPlan::Describe; ringfeedd logs it at debug level)
  std::string knob_caps;         // TuningPlan::knob_caps: auto readers/workers the budget caps; empty: none
  std::string shuffle_buffer_note;  // TuningPlan::shuffle_buffer_note: shuffle.buffer above the epoch; empty: not
  std::string batch_size_note;   // TuningPlan::batch_size_note: batch.size above the epoch; empty: not
  std::string batch_size_warning;  // TuningPlan::batch_size_warning: ... and so no batch at all
  std::string memory_budget_warning;  // TuningPlan::memory_budget_warning: a budget above the memory limit
  std::string cpu_budget_warning;  // TuningPlan::cpu_budget_warning: fixed workers above the CPU budget
  std::string ring_slots_warning;  // TuningPlan::ring_slots_warning: ring.slots not above consumers.count
  // The segment is larger than /dev/shm has free now (larger than all of it: plan_error).
  std::string shm_warning;
  uint64_t slot_bytes = 0;       // its ring slot size (ring.slot_bytes, or auto from the sample)
  uint64_t sample_records = 0;   // records in that sample
  std::optional<uint64_t> shard_records;  // the shard's records, where the sample counted them
  double cpu_budget_cores = 0;   // its cpu_budget, and where that comes from
  std::string cpu_budget_source; //   ("pipeline.cpu_budget", or this process's affinity / cgroup)
  // The batch of this epoch (file order) needing the largest slot: its bytes and index, and the
  // largest record read ("FILE record N at byte B, S bytes").
  uint64_t largest_batch_bytes = 0;
  uint64_t largest_batch_index = 0;
  std::string largest_record;
  uint64_t mean_record_bytes = 0;  // of the records that go into batches
  // ringfeedd's plan: its memory budget, the shuffle buffer's share of it, and the buffer's
  // records (TuningPlan::shuffle_buffer: shuffle.buffer, or fewer when the shard has fewer).
  uint64_t memory_budget_bytes = 0;
  uint64_t shuffle_share_bytes = 0;
  int64_t shuffle_buffer = 0;
  // Non-empty when shuffle.buffer consecutive records (in this check's file order) take more
  // than the buffer's share: ringfeedd stops at the budget when such records fill its buffer
  // (the records sampled at start being smaller); what to raise or lower.
  std::string shuffle_budget_warning;
  // The slot the largest batch in any order of this epoch's records needs (WorstBatch: the
  // batch.size largest together, per column), and whether ringfeedd's order differs from this
  // check's file order (shuffle, an interleave of several files, deterministic: false).
  uint64_t any_order_batch_bytes = 0;
  bool reordered = false;
  // TuningPlan::slot_bytes_note: auto slots sized from the mean record, as the budget could not
  // hold slots for the largest ones; empty otherwise.
  std::string slot_bytes_note;
  // Its plan's largest record (TuningPlan::record_limit_bytes, _why): the largest record read is
  // above it when record_over_limit is set ("ringfeedd would refuse it as too large: ...").
  uint64_t record_limit_bytes = 0;
  std::string record_limit_why;
  std::string record_over_limit;
  bool SlotTooSmall() const { return plan_error.empty() && largest_batch_bytes > slot_bytes; }
  // ringfeedd may cut a batch that does not fit in a slot (and stop the job there): in its order,
  // several large records can come together.
  bool SlotMayBeTooSmall() const { return plan_error.empty() && reordered && any_order_batch_bytes > slot_bytes; }
};

// The first kMaxProblemsShown problems are printed; the rest are only counted.
constexpr uint64_t kMaxProblemsShown = 20;

// What ringfeedd's private RSS at start (the plan's "daemon before the pipeline") was above
// ringfeedctl check's own, measured with the same configs: 180-280 KiB (its logger, control
// socket and threads). `ringfeedctl check` adds this to its own, so that a budget it passes
// is not refused by the daemon by a few hundred KiB.
inline constexpr uint64_t kDaemonBaselineExtraBytes = 512u << 10;

// Prints one line per file to `report` and the problems (error:/skipped: lines) to `problems`.
// Throws std::runtime_error for what stops a job before reading (a pattern matching nothing).
// `baseline_private_rss`: the RssAnon ringfeedd's memory plan starts from (the caller's own at
// its start is close: ringfeedd reports about 0.6 MiB).
JobCheckResult RunJobCheck(const JobConfig& config, std::ostream& report, std::ostream& problems,
                           uint64_t baseline_private_rss = 0);

}  // namespace ringfeed
