// TuningPlan: ringfeedd's start-up arithmetic, from the job config and a sample of the first
// records to everything sized before the pipeline starts:
//   - the budgets: pipeline.cpu_budget (or the affinity mask and cgroup quota) and
//     pipeline.memory_budget (or its documented default), daemon/budget.h;
//   - the ring's geometry: ring.slots (auto = the most workers + the most prefetch + queues,
//     with prefetch capped so the ring takes at most half of the memory budget) and
//     ring.slot_bytes (auto = from the sample, see daemon/ringfeedd.cc);
//   - the memory plan (PlanMemory): the fixed parts reserved, the rest for the read-ahead; a
//     job that cannot fit fails here with the arithmetic;
//   - the autotuner's limits, fixed knobs and starting knobs (daemon/tuner.h). A knob the
//     config fixes is used exactly; an `auto` one starts low (1 reader, 1 worker, 256 KiB of
//     read-ahead per file, or 10 records of the sampled mean size up to 1 MiB, 1 read in flight
//     per file) but prefetch at its most, and the tuner raises what helps and takes back what
//     does not.
//
// Errors: BudgetError (daemon/budget.h) with a message for the user.
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "daemon/budget.h"
#include "daemon/tuner.h"
#include "format/column_sizes.h"
#include "format/example_parser.h"
#include "shm/segment.h"

namespace ringfeed {

// The files of the job's list (indices) this daemon reads: the config's Shard (daemon/shard.h).
std::vector<uint32_t> ShardFiles(const JobConfig& config, size_t file_count);

struct RecordSample {
  uint64_t records = 0;
  uint64_t bytes = 0;          // serialized record bytes
  uint64_t largest_bytes = 0;  // the largest serialized record
  // The largest sampled record as one parsed row (ExampleParser::RowBytes; a VarLen int64 list
  // of one-byte varints takes 8x its serialized bytes): what ExampleParser::Check's scratch holds.
  uint64_t largest_row_bytes = 0;
  // What ring.slot_bytes: auto would be for these records: the slot of the largest batch they
  // can make in any order (WorstBatch), at least mean_slot_bytes. mean_slot_bytes: from the
  // mean record (x 1.5) plus the largest, what auto falls back to where the budget cannot hold
  // a ring of the former.
  uint64_t slot_bytes = 0;
  uint64_t mean_slot_bytes = 0;
  // The same for batches of BatchRows records, when that is less than batch.size (0
  // otherwise): what PlanTuning falls back to when a plan for batch.size rows does not fit.
  uint64_t epoch_slot_bytes = 0;
  uint64_t epoch_mean_slot_bytes = 0;
  // What the sample shows that the config may not mean, one line each: features of the spec that
  // no sampled record has (AbsentFeatures: a misspelt name, most often), and records that are
  // tf.train.SequenceExamples (their feature lists are not read). ringfeedd logs them as
  // warnings; ringfeedctl check prints them (--strict: problems).
  std::vector<std::string> warnings;
  // The features no sampled record has, in spec order: their AbsentFeatures lines open
  // `warnings`, one each. ringfeedctl check, which reads every record, keeps only the lines of
  // those no record has.
  std::vector<std::string> absent_features;
  // The records this shard reads per epoch (after record sharding), counted at start where
  // they are fewer than shuffle.buffer or batch.size (the larger) and the shard's files hold at
  // most kCountFileBytes together (see SampleRecords); nullopt otherwise. Records that fail to read are not counted;
  // records an Example check would reject are (an upper bound).
  std::optional<uint64_t> shard_records;
  // The largest of the shard's files as stored (a compressed file's compressed size), from
  // stat(); nullopt when one cannot be stat()ed. It bounds the readers' buffers
  // (ReaderBufferBytes).
  std::optional<uint64_t> largest_file_bytes;
  // compression: auto only: every file of the shard was opened by the sample and found plain
  // (TFRecordReader::compression() kNone), so the memory plan charges no decompression
  // buffers. False where a file was compressed or not reached (the sample stops at
  // kSampleRecords records, or where it counts the shard's records at the larger of
  // shuffle.buffer and batch.size): a later file may be GZIP.
  bool every_file_plain = false;
  bool any_file_compressed = false;  // a file the sample opened is GZIP or ZLIB
  // Sampled records that ExampleParser::Check rejects (a dtype or shape that does not match the
  // data, a FixedLen feature without a default that they lack, not a tf.train.Example), and
  // the first of them: "FILE: record R at byte B: key 'fare': ..." (RecordPlace) and the
  // feature concerned ("" for a malformed Example). ringfeedd refuses to start when every
  // sampled record fails under on_error: fail, and warns otherwise (SampleParseProblem).
  uint64_t parse_checked = 0;  // the sampled records of this shard (record sharding), all checked
  uint64_t parse_failures = 0;
  std::string first_parse_failure;
  std::string first_parse_failure_key;
};

// What a sample whose records fail to parse means for the job: when every sampled record
// fails, under on_error: fail the start-up error (*fatal; "CONFIG:LINE: features.KEY: none of
// the N records sampled at start parses with this config ..."; the config's line of the feature
// when the failure names one), under skip the same as a warning (later records may parse);
// when some fail, a warning with the count and the first; "" when none does.
std::string SampleParseProblem(const JobConfig& config, const RecordSample& sample, bool* fatal);

// The size of the readers' window and compressed-input buffer (ReaderOptions::buffer_bytes,
// the size of their read() calls): the default (1 MiB), or for files smaller than that the
// largest file's size rounded up to 4 KiB, at least kMinReaderBufferBytes. A read() of a
// 34 KB file needs no 1 MiB buffer, and the memory plan charges the buffers of every open
// file (the TFX taxi data's 12 GZIP files of 34 KB: 10.5 MiB planned for 5 open files, 1.1 MiB
// with this). A file replaced later by a larger one is read in pieces of this size (correct,
// more read() calls); a record larger than the window still grows it (TFRecordReader). For a
// GZIP/ZLIB file the window is where records are inflated to, so its records come in pieces
// of this size too (an inflate call each).
inline constexpr uint64_t kMinReaderBufferBytes = 64u << 10;
// The most a deflate stream (GZIP, ZLIB) inflates to per compressed byte: 1032 (zlib's
// "Technical Details", zlib.net/zlib_tech.html).
inline constexpr uint64_t kMaxDeflateRatio = 1032;
uint64_t ReaderBufferBytes(const RecordSample& sample);
// The size of a queued read's block (ReaderOptions::read_block_bytes, with reads_per_file above
// 1): the default (256 KiB), or ReaderBufferBytes where that is less. A block holds a file's own
// (compressed) bytes, never more than the file, but it is allocated and counted whole: (reads +
// 3) blocks per open file in the memory plan and the tuner (ReadQueue::MostBytes), 4.5 MiB at
// 16 reads for a file of 192 bytes.
uint64_t ReadBlockBytes(const RecordSample& sample);

// One warning per feature of `specs` whose name is not among `keys` (the feature names seen in
// `sampled` records), saying what its rows get then:
// "feature 'tip' is in none of the 1000 records sampled at start (every row gets its default); did you mean
// 'tips'?" (the nearest name the config does not use, within edit distance max(1, a third of
// the name's length, rounded up)), or without a near name the first keys seen that the config
// does not name ("; the records sampled have features the config does not name: 'company',
// 'tips', ... (14 such features)"), or of all keys when it names every one.
std::vector<std::string> AbsentFeatures(const FeatureSpecs& specs, const std::set<std::string>& keys,
                                        uint64_t sampled);

// Reads the first records of the shard's files (up to kSampleRecords records or kSampleBytes
// bytes; records that fail to read are passed over) and sizes ring.slot_bytes: auto from them
// for batches of batch.size (and of BatchRows) records: exact for FixedLen numeric columns; for the others that
// many largest sampled rows together (per column: a shuffled batch may gather the sample's
// largest records), at least the sampled mean per row x 1.5 x the rows plus the largest sampled
// row. It reads on and counts the shard's records (RecordSample::shard_records) when its files
// hold at most kCountFileBytes together, as stored (a compressed file counts its compressed
// size), stopping at the larger of shuffle.buffer (when above 1) and batch.size records: a
// larger dataset is not read twice at start, and its shuffle buffer and batches are planned
// as configured. It stat()s every file of the shard for that and for RecordSample::
// largest_file_bytes. Throws what TFRecordReader's constructor throws for a file that cannot
// be opened.
inline constexpr uint64_t kSampleRecords = 1000;
// The largest parsed row (ExampleParser::RowBytes) of a sampled record that SampleRecords
// checks against the features (RecordSample::parse_checked).
inline constexpr uint64_t kSampleCheckRowBytes = uint64_t{64} << 20;
inline constexpr uint64_t kSampleBytes = 64ull << 20;
inline constexpr uint64_t kCountFileBytes = 64ull << 20;
RecordSample SampleRecords(const JobConfig& config, const ExampleParser& parser, const std::vector<std::string>& files,
                           const std::vector<uint32_t>& shard_files);

// The records the memory plan counts for the shuffle buffer: shuffle.buffer, or where the
// start-up sample counted fewer records in the shard's epoch (RecordSample::shard_records),
// that count (at least 2, so that it still shuffles). A buffer at least as large as an epoch
// holds the whole epoch either way, and ShuffleBuffer's output does not depend on its capacity
// while it is not full (daemon/shuffle.h), so the batches are the same. The sequencer itself
// is given shuffle.buffer: an epoch that reads more records (files replaced by larger ones)
// shuffles as a fresh start would, its memory checked against the budget (Sequencer's
// over_budget).
int64_t ShuffleBufferRecords(const JobConfig& config, const RecordSample& sample);

// The most records a batch holds: batch.size, or where the start-up sample counted fewer
// records in the shard's epoch (RecordSample::shard_records), that count (none counted:
// batch.size): batches never mix epochs. Where a plan for batch.size rows does not fit the
// budget or /dev/shm, PlanTuning sizes ring slots and the memory plan's batches for this many
// instead, so that a batch.size far above the dataset (full-batch training on 234 records with
// batch.size 1000000) is not refused; where it fits, batch.size is kept (files that grow while
// the job runs then still fit a slot).
int64_t BatchRows(const JobConfig& config, const RecordSample& sample);

// Bytes a ring slot needs for a batch of `rows` rows whose record-dependent columns measured
// `sizes` (ExampleParser::Measure sums; empty = the minimum): shm::SlotHeaderBytes plus the
// column regions, as ringfeedd's BatchWriter lays them out.
uint64_t SlotBytesNeeded(const FeatureSpecs& specs, size_t rows, const ColumnSizes& sizes);

// "ring.slots: 4 is not more than consumers.count: 6: ..." for a ranks job whose fixed ring.slots
// is at most its consumers.count: trainers that keep their previous batch while they wait for
// the next hold every slot in the first round, and no batch comes. Empty otherwise (shared mode,
// ring.slots: auto, or more slots than ranks).
std::string RingSlotsWarning(const JobConfig& config);

struct AutotuneOptions {
  TunerLimits limits;
  TunerKnobs initial;
  TunerFixed fixed;
  double cpu_budget_cores = 1;  // for status
  std::string cpu_budget_source;
  uint64_t memory_budget_bytes = 0;
  std::string memory_budget_source;
};

struct TuningPlan {
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;
  int64_t shuffle_buffer = 0;  // ShuffleBufferRecords: what the memory plan counts
  // "shuffle.buffer 1000000 is more than the 9909 records this shard reads per epoch: ..." when
  // shuffle_buffer is less than shuffle.buffer; empty otherwise. ringfeedd logs it at start.
  std::string shuffle_buffer_note;
  // "batch.size 1000000 is more than the 234 records ..." when BatchRows is less than
  // batch.size: a note when each epoch is then one batch (saying when slots are sized for
  // those records), a warning when that means no batch at all (drop_remainder: true; ranks mode
  // with more than one rank: whole rounds only); empty otherwise. ringfeedd logs them at
  // start; `ringfeedctl check` prints them.
  std::string batch_size_note;
  std::string batch_size_warning;
  // "pipeline.memory_budget 1.0 TiB is more than the memory this job may use: ..." when the
  // config's budget is above min(cgroup limit, MemTotal); empty otherwise. ringfeedd warns.
  std::string memory_budget_warning;
  // "pipeline.workers 8 is more than the cpu_budget of 2 cores ...: ..." when the config fixes
  // more parse workers than the CPU budget's cores (the tuner never changes a fixed count, and
  // busy workers each take a core); empty otherwise. ringfeedd warns; `ringfeedctl check` too.
  std::string cpu_budget_warning;
  // "ring.slot_bytes: auto is ... from the mean sampled record: ..." when the budget could not
  // hold slots for RecordSample::slot_bytes; empty otherwise. ringfeedd warns.
  std::string slot_bytes_note;
  // RingSlotsWarning(config). ringfeedd warns; `ringfeedctl check` prints it.
  std::string ring_slots_warning;
  shm::Geometry geometry;
  MemoryPlan memory;
  AutotuneOptions autotune;   // limits, fixed knobs, starting knobs, budgets and their sources
  // Descriptors the job may hold at once (memory.open_files, an io_uring queue each where
  // reads_per_file can go above 1), for the start-up check against RLIMIT_NOFILE.
  FileDescriptorPlan file_descriptors;
  bool tune = false;          // at least one knob is auto
  // The largest record the memory budget holds, for the readers' ReaderOptions::
  // max_record_bytes: the plan counts the largest sampled record, and a record past the sample
  // may be larger by half the safety margin (a compressed file's by a quarter: inflated into
  // the window, then copied out of it); at most source.max_record_bytes. A larger record is a
  // too-large record (on_error applies), so the budget holds. record_limit_why says so in its
  // error (ReaderOptions::max_record_bytes_why); empty when the limit is source.max_record_bytes.
  uint64_t record_limit_bytes = 0;
  std::string record_limit_why;
  // ReaderBufferBytes(sample): the readers' ReaderOptions::buffer_bytes, as the memory plan
  // counts it.
  uint64_t reader_buffer_bytes = 0;
  // ReadBlockBytes(sample): the readers' ReaderOptions::read_block_bytes, as the memory plan and
  // the tuner count it.
  uint64_t read_block_bytes = 0;
  // The memory plan charges decompression buffers (MemoryInputs::compressed): not under
  // compression: auto where every file was found plain at start (RecordSample::
  // every_file_plain). ringfeedd warns when a file turns out compressed then.
  bool inflate_planned = true;
  // Auto readers or workers capped below their usual most because the memory budget holds no
  // more ("pipeline.memory_budget 24.0 MiB holds at most 3 readers (of 16): ..."); empty when
  // none is. ringfeedd logs it at start; `ringfeedctl check` prints it.
  std::string knob_caps;
};

// `shard_files`: files this daemon reads; `queues`: consumers.count in ranks mode, else 1;
// `baseline_private_rss`: RssAnon now, before the pipeline starts; `queued_reads`: whether
// io_uring works here (ReadQueue::Available): without it `reads_per_file: auto` stays at 1.
TuningPlan PlanTuning(const JobConfig& config, const RecordSample& sample, int64_t shard_files, uint32_t queues,
                      uint64_t baseline_private_rss, bool queued_reads);

}  // namespace ringfeed
