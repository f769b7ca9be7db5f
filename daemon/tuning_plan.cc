#include "daemon/tuning_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/shard.h"
#include "format/compression.h"
#include "format/example_wire.h"
#include "format/tfrecord_reader.h"
#include "format/utf8.h"
#include "shm/ring.h"

namespace ringfeed {
namespace {
constexpr int64_t kMaxAutoReaders = 16;        // tf.data's num_parallel_reads ceiling in practice
constexpr int64_t kMaxAutoWorkers = 16;
// Reads in flight per file: 16 x 256 KiB blocks = 4 MiB per file in flight, enough for ~200 MB/s
// per file at 20 ms a read (a 20 ms mount: 8 per file gave 1 reader 455k examples/s, 16 readers
// with one read each 380-400k).
constexpr int64_t kMaxAutoReadsPerFile = 16;
constexpr int64_t kMaxAutoPrefetch = 8;        // batches ready beyond the workers'
constexpr int64_t kMinAutoPrefetch = 2;
// read_ahead: auto stops at 1 MiB per open file. The reader's own window already issues ~1 MiB
// read() calls (format/tfrecord_reader.h), and a FUSE request, an NFS rsize and Linux's
// readahead are at most 1 MiB by default, so records buffered beyond that buy no throughput:
// on a 20 ms-per-read mount the readers' count is what scales (docs/benchmarks.md,
// "Autotuning"). They cost memory: 4 MiB per open file made the daemon's private RSS 36 MiB
// against 13 MiB at 1 MiB (1 reader, cycle_length 4, local files). Set read_ahead to go higher.
constexpr uint64_t kMaxStreamBufferBytes = 1u << 20;
// read_ahead: auto starts at the minimum (256 KiB) or at this many records of the sampled mean
// size, whichever is more (64 KiB steps, at most the max above). A reader hands a file's
// records to the interleave a read-ahead at a time and then waits for room, so 256 KiB of
// 100 KB records was a hand-off (and a wake-up on each side) every 2.5 records: 1 reader and
// 1 worker on 100 KB records made 44-45k examples/s at 256 KiB, 50-51k at 768 KiB and 51-53k at
// 1 MiB (bytes100k_plain, docs/benchmarks.md, "End to end", session 11).
constexpr uint64_t kStartRecordsAhead = 10;
constexpr uint64_t kQueuedStreamBufferBytes = TunerLimits{}.queued_stream_buffer_bytes;
constexpr uint64_t kReadAheadStepBytes = 64u << 10;
}  // namespace

std::vector<uint32_t> ShardFiles(const JobConfig& config, size_t file_count) {
  return Shard::For(file_count, config.shard.count, config.shard.index).Files(file_count);
}

int64_t ShuffleBufferRecords(const JobConfig& config, const RecordSample& sample) {
  const int64_t buffer = config.shuffle.buffer;
  if (buffer <= 1 || !sample.shard_records || *sample.shard_records >= static_cast<uint64_t>(buffer)) return buffer;
  return std::max<int64_t>(2, static_cast<int64_t>(*sample.shard_records));
}

int64_t BatchRows(const JobConfig& config, const RecordSample& sample) {
  const int64_t size = config.batch.size;
  // None counted: an empty epoch, said at run time (Sequencer::empty_epoch); planned as configured.
  if (!sample.shard_records || *sample.shard_records == 0 || *sample.shard_records >= static_cast<uint64_t>(size)) {
    return size;
  }
  return static_cast<int64_t>(*sample.shard_records);
}

uint64_t SlotBytesNeeded(const FeatureSpecs& specs, size_t rows, const ColumnSizes& sizes) {
  const std::vector<ColumnCapacity> caps = ColumnCapacities(specs, rows, sizes);
  return shm::SlotHeaderBytes(specs.size(), rows) + ColumnRegionsBytes(caps, shm::kColumnAlign);
}

namespace {
constexpr size_t kAbsentKeysShown = 12;
}  // namespace

std::vector<std::string> AbsentFeatures(const FeatureSpecs& specs, const std::set<std::string>& keys,
                                        uint64_t sampled) {
  // The names the config does not use: a misspelt name's right one is among those (one it
  // uses would make a duplicate key, and the empty name is no config key).
  std::vector<std::string> unused;
  for (const std::string& key : keys) {
    if (!key.empty() &&
        std::none_of(specs.begin(), specs.end(), [&](const FeatureSpec& s) { return s.name == key; })) {
      unused.push_back(key);
    }
  }
  std::vector<std::string> absent;
  for (const FeatureSpec& spec : specs) {
    if (keys.count(spec.name)) continue;
    const bool fails = spec.RequiredInRecords();
    std::string line = "feature " + QuotedName(spec.name) + " is in none of the " + std::to_string(sampled) +
                       (sampled == 1 ? " record sampled at start" : " records sampled at start") +
                       (fails ? " (a FixedLen feature without a default: every record without it is a parse error)"
                        : spec.type != FeatureType::kFixedLen ? " (rows without it get an empty list)"
                                                              : " (rows without it get its default)");
    // The nearest name the config does not use, within a third of the name's length, rounded
    // up, at least 1 edit ("tip" for "tips", "trip_secs" for "trip_seconds"; not "id" for "ab").
    std::string best;
    size_t best_distance = std::max<size_t>(1, (spec.name.size() + 1) / 3) + 1;
    for (const std::string& key : unused) {
      if (const size_t d = EditDistance(spec.name, key); d < best_distance) best_distance = d, best = key;
    }
    if (!best.empty()) {
      line += "; did you mean " + QuotedName(best) + "?";
    } else if (!keys.empty()) {
      // No near name: what the records have that the config does not name (all their names
      // when the config names every one), so that a name far off is seen.
      const bool all = unused.empty();
      line += all ? "; the records sampled have " : "; the records sampled have features the config does not name: ";
      size_t shown = 0;
      for (const std::string& key : all ? std::vector<std::string>(keys.begin(), keys.end()) : unused) {
        if (shown == kAbsentKeysShown) break;
        line += (shown++ == 0 ? "'" : ", '") + key + "'";
      }
      const size_t listed = all ? keys.size() : unused.size();
      if (listed > shown) line += ", ... (" + std::to_string(listed) + (all ? " features)" : " such features)");
    }
    absent.push_back(line);
  }
  return absent;
}

namespace {
// The sizes of files[i] for i in `indices` (stat()), together and the largest; nullopt when one
// cannot be stat()ed. Stops early, once the total is over kCountFileBytes (the records are
// not counted then) and a file of the readers' largest buffer was seen (ReaderBufferBytes
// then is that): on a mount with a round trip per stat, a large dataset costs no full pass.
struct FileBytes {
  uint64_t total = 0;
  uint64_t largest = 0;
};
std::optional<FileBytes> StatFiles(const std::vector<std::string>& files, const std::vector<uint32_t>& indices) {
  FileBytes bytes;
  const uint64_t buffer = ReaderOptions{}.buffer_bytes;
  for (uint32_t i : indices) {
    std::error_code error;
    const uintmax_t size = std::filesystem::file_size(files[i], error);
    if (error) return std::nullopt;
    bytes.total += static_cast<uint64_t>(size);
    bytes.largest = std::max<uint64_t>(bytes.largest, static_cast<uint64_t>(size));
    if (bytes.total > kCountFileBytes && bytes.largest >= buffer) break;
  }
  return bytes;
}
}  // namespace

uint64_t ReaderBufferBytes(const RecordSample& sample) {
  const uint64_t most = ReaderOptions{}.buffer_bytes;
  if (!sample.largest_file_bytes) return most;
  const uint64_t page = 4096;
  const uint64_t rounded = (std::min(*sample.largest_file_bytes, most) + page - 1) / page * page;
  return std::clamp(rounded, kMinReaderBufferBytes, most);
}

uint64_t ReadBlockBytes(const RecordSample& sample) {
  return std::min<uint64_t>(ReaderOptions{}.read_block_bytes, ReaderBufferBytes(sample));
}

std::string SampleParseProblem(const JobConfig& config, const RecordSample& sample, bool* fatal) {
  const bool none = sample.parse_checked > 0 && sample.parse_failures == sample.parse_checked;
  const bool skip = config.source.on_error == OnError::kSkip;
  // Under skip, records past the sample may parse (the files' first ones bad, or another
  // file's): a warning. Under fail the job would stop at the first sampled record it reaches.
  *fatal = none && !skip;
  if (sample.parse_failures == 0) return "";
  const std::string fix = "; ringfeedctl check " + config.path +
                          " checks every record, and ringfeedctl inspect --schema FILE prints a file's features as a "
                          "config";
  if (!none) {
    return std::to_string(sample.parse_failures) + " of the " + std::to_string(sample.parse_checked) +
           " records sampled at start do not parse with this config's features (the first: " +
           sample.first_parse_failure + "): " +
           (skip ? "on_error: skip skips them" : "on_error: fail stops the job at the first of them") + fix;
  }
  std::string where = config.path;
  const auto line = config.feature_lines.find(sample.first_parse_failure_key);
  if (line != config.feature_lines.end() && line->second > 0) {
    where += ":" + std::to_string(line->second) + ": features." + EscapeForMessage(sample.first_parse_failure_key);
  }
  return where + ": none of the " + std::to_string(sample.parse_checked) +
         (sample.parse_checked == 1 ? " record sampled at start parses" : " records sampled at start parses") +
         " with this config's features" +
         (skip ? " (on_error: skip skips every record that does not parse: if the features are wrong, the job "
                 "delivers nothing)"
               : ", so the job would deliver none of them") +
         "; the first: " + sample.first_parse_failure + fix;
}

RecordSample SampleRecords(const JobConfig& config, const ExampleParser& parser, const std::vector<std::string>& files,
                           const std::vector<uint32_t>& shard_files) {
  RecordSample sample;
  const FeatureSpecs& specs = parser.specs();
  ColumnSizes total;
  std::vector<ColumnSize> largest(specs.size());
  WorstBatch worst(static_cast<size_t>(config.batch.size));
  uint64_t records = 0, bytes = 0;
  std::set<std::string> keys;  // of every sampled record, for AbsentFeatures
  uint64_t with_feature_lists = 0;  // SequenceExample records sampled (wire::HasFeatureLists)
  std::string first_with_feature_lists;  // "FILE record N"
  ReaderOptions options;
  options.compression = config.source.compression;
  options.max_record_bytes = config.source.max_record_bytes;
  // Counting the shard's records bounds a shuffle buffer or a batch larger than the dataset:
  // only where it can matter and the files are small enough to read whole at start.
  const Shard shard = Shard::For(files.size(), config.shard.count, config.shard.index);
  const uint64_t buffer = config.shuffle.buffer > 1 ? static_cast<uint64_t>(config.shuffle.buffer) : 0;
  const uint64_t count_to = std::max(buffer, static_cast<uint64_t>(std::max<int64_t>(config.batch.size, 0)));
  const std::optional<FileBytes> file_bytes = StatFiles(files, shard_files);
  if (file_bytes) sample.largest_file_bytes = file_bytes->largest;
  // Not when a file cannot be stat()ed: its size is not known.
  bool counting = count_to > 1 && file_bytes && file_bytes->total <= kCountFileBytes;
  uint64_t kept = 0;  // records of the shard counted so far
  const auto sampling = [&] { return records < kSampleRecords && bytes < kSampleBytes; };
  size_t plain_files = 0, compressed_files = 0;  // opened and found plain or GZIP/ZLIB
  for (uint32_t f : shard_files) {
    if (!sampling() && !counting) break;
    TFRecordReader reader(files[f], options);
    Record record;
    ReadError error;
    while (sampling() || counting) {
      const auto status = reader.Next(&record, &error);
      if (status == TFRecordReader::Status::kEnd) break;
      if (status == TFRecordReader::Status::kError) {
        if (error.recoverable) continue;
        counting = false;  // the rest of this file is unread: its records are not known
        break;
      }
      // At that many records the buffer fills and batches are full as configured: nothing to bound.
      if (counting && shard.OwnsRecord(record.index) && ++kept >= count_to) counting = false;
      if (!sampling()) continue;
      std::string ignored;
      wire::ForEachFeature(
          record.data,
          [&](const uint8_t* key, size_t size, const wire::FeatureRef&) {
            keys.emplace(reinterpret_cast<const char*>(key), size);
          },
          &ignored);
      if (wire::HasFeatureLists(record.data) && with_feature_lists++ == 0) {
        first_with_feature_lists = files[f] + " record " + std::to_string(record.index);
      }
      ColumnSizes one;
      parser.Measure(record.data, &one);  // one.records = 1
      const uint64_t row_bytes = ColumnRegionsBytes(ColumnCapacities(specs, 1, one), 8);
      // This shard's records only: another shard's bad record is not this job's to report. A
      // check parses the record into a row (ExampleParser::Check): not one whose row is larger
      // than kSampleCheckRowBytes (a FixedLen shape of 2^31 values with a default: 8 GiB), which
      // the memory plan refuses first or counts.
      if (shard.OwnsRecord(record.index) && row_bytes <= kSampleCheckRowBytes) {
        ++sample.parse_checked;
        if (ParseError parse_error; !parser.Check(record.data, &parse_error) && sample.parse_failures++ == 0) {
          sample.first_parse_failure =
              RecordPlace(files[f], record.index, record.offset, reader.compression()) + ": " + parse_error.message;
          sample.first_parse_failure_key = parse_error.key;
        }
      }
      total.Add(one);
      worst.Add(one);
      for (size_t i = 0; i < one.features.size(); ++i) {
        largest[i].value_bytes = std::max(largest[i].value_bytes, one.features[i].value_bytes);
        largest[i].strings = std::max(largest[i].strings, one.features[i].strings);
      }
      sample.largest_row_bytes = std::max(sample.largest_row_bytes, row_bytes);
      ++records;
      bytes += record.data.size();
      sample.largest_bytes = std::max<uint64_t>(sample.largest_bytes, record.data.size());
    }
    // Detected at the first Next(), which the loop above always makes.
    if (reader.compression() == Compression::kNone) ++plain_files;
    if (reader.compression() == Compression::kGzip || reader.compression() == Compression::kZlib) ++compressed_files;
  }
  if (counting) sample.shard_records = kept;
  sample.every_file_plain = config.source.compression == Compression::kAuto && !shard_files.empty() &&
                            plain_files == shard_files.size();
  sample.any_file_compressed = compressed_files > 0;
  // Slots for batches of `rows` rows: from the mean record (x 1.5, plus the largest), and for
  // the largest `rows` sampled records together, at least the former.
  const auto pages = [](uint64_t bytes) { return (bytes + shm::kPageBytes - 1) / shm::kPageBytes * shm::kPageBytes; };
  const auto slots_for = [&](uint64_t rows, uint64_t* mean_slot, uint64_t* slot) {
    ColumnSizes estimate;
    estimate.features.resize(specs.size());
    for (size_t i = 0; i < specs.size() && records > 0 && i < total.features.size(); ++i) {
      const double mean_bytes = static_cast<double>(total.features[i].value_bytes) / static_cast<double>(records);
      const double mean_strings = static_cast<double>(total.features[i].strings) / static_cast<double>(records);
      estimate.features[i].value_bytes =
          static_cast<uint64_t>(std::ceil(mean_bytes * 1.5 * static_cast<double>(rows))) + largest[i].value_bytes;
      estimate.features[i].strings =
          static_cast<uint64_t>(std::ceil(mean_strings * 1.5 * static_cast<double>(rows))) + largest[i].strings;
    }
    *mean_slot = pages(SlotBytesNeeded(specs, static_cast<size_t>(rows), estimate));
    *slot = std::max(*mean_slot, pages(SlotBytesNeeded(specs, static_cast<size_t>(rows), worst.Sizes())));
  };
  slots_for(static_cast<uint64_t>(config.batch.size), &sample.mean_slot_bytes, &sample.slot_bytes);
  if (const int64_t rows = BatchRows(config, sample); rows < config.batch.size) {
    slots_for(static_cast<uint64_t>(rows), &sample.epoch_mean_slot_bytes, &sample.epoch_slot_bytes);
  }
  sample.records = records;
  sample.bytes = bytes;
  if (records > 0) {
    sample.warnings = AbsentFeatures(specs, keys, records);
    for (const FeatureSpec& spec : specs) {
      if (!keys.count(spec.name)) sample.absent_features.push_back(spec.name);
    }
  }
  if (with_feature_lists > 0) {
    sample.warnings.push_back(
        (with_feature_lists == records ? "all " + std::to_string(records)
                                       : std::to_string(with_feature_lists) + " of the " + std::to_string(records)) +
        " records sampled at start hold feature lists (tf.train.SequenceExample records, first: " +
        first_with_feature_lists + "): ringfeed reads tf.train.Example, so only their context features are read "
        "and the feature lists are dropped; convert them to Examples (one per step, or flattened) to train on them");
  }
  return sample;
}

std::string RingSlotsWarning(const JobConfig& config) {
  if (config.consumers.mode != DeliveryMode::kRanks || !config.ring.slots ||
      *config.ring.slots > config.consumers.count) {
    return {};
  }
  const auto slots = static_cast<uint32_t>(*config.ring.slots);
  const auto count = static_cast<uint32_t>(config.consumers.count);
  // Batch k goes to rank k mod count: the first `slots` batches fill the ring, and the ranks
  // after them have none to take.
  const std::string starved = count - slots == 0   ? std::string()
                              : count - slots == 1 ? "rank " + std::to_string(slots) + " gets none at all; "
                              : count - slots == 2 ? "ranks " + std::to_string(slots) + " and " +
                                                         std::to_string(slots + 1) + " get none at all; "
                                                   : "ranks " + std::to_string(slots) + " to " +
                                                         std::to_string(count - 1) + " get none at all; ";
  return "ring.slots: " + std::to_string(slots) + " is not more than consumers.count: " + std::to_string(count) +
         ": ranks that keep their previous batch while they wait for the next (a Python `for batch in client:` "
         "loop does) hold every slot in the first round, and then no batch comes (" + starved +
         "a Next with a timeout times out, one without waits); give ring.slots at least 2 x count (" +
         std::to_string(shm::RingSlotsForConsumers(count, slots)) + ") or auto";
}

TuningPlan PlanTuning(const JobConfig& config, const RecordSample& sample, int64_t shard_files, uint32_t queues,
                      uint64_t baseline_private_rss, bool queued_reads) {
  const PipelineConfig& pc = config.pipeline;
  TuningPlan plan;
  AutotuneOptions& at = plan.autotune;
  plan.ring_slots_warning = RingSlotsWarning(config);
  plan.reader_buffer_bytes = ReaderBufferBytes(sample);
  plan.read_block_bytes = ReadBlockBytes(sample);

  // Budgets.
  const CpuBudget machine = DetectCpuBudget();
  if (pc.cpu_budget) {
    at.cpu_budget_cores = *pc.cpu_budget;
    at.cpu_budget_source = "pipeline.cpu_budget";
  } else {
    at.cpu_budget_cores = machine.cores;
    at.cpu_budget_source = machine.source;
  }
  if (pc.workers && static_cast<double>(*pc.workers) > at.cpu_budget_cores) {
    char cores[32];
    std::snprintf(cores, sizeof cores, "%.3g", at.cpu_budget_cores);
    plan.cpu_budget_warning = "pipeline.workers " + std::to_string(*pc.workers) + " is more than the cpu_budget of " +
                              cores + " cores (" + at.cpu_budget_source +
                              "): a fixed count is kept as set, so while parsing is the bottleneck the workers alone "
                              "can keep " + std::to_string(*pc.workers) +
                              " cores busy; pipeline.workers: auto stays within the budget";
  }
  if (pc.cpu_budget && machine.cores > 0 && *pc.cpu_budget > machine.cores) {
    // Allowed (the budget is a cap), but it caps nothing: the tuner may add threads the
    // process gets no core for, as the memory budget above the memory limit protects nothing.
    char cores[64];
    std::snprintf(cores, sizeof cores, "%g cores is more than the %g", *pc.cpu_budget, machine.cores);
    const std::string over = std::string("pipeline.cpu_budget ") + cores + " this process may use (" +
                             machine.source + "): it does not keep the tuner within what the process gets";
    plan.cpu_budget_warning = plan.cpu_budget_warning.empty() ? over : plan.cpu_budget_warning + "; " + over;
  }
  const MemoryBudgetDefault mem = DefaultMemoryBudget();
  if (pc.memory_budget) {
    at.memory_budget_bytes = *pc.memory_budget;
    at.memory_budget_source = "pipeline.memory_budget";
    if (mem.limit_bytes > 0 && *pc.memory_budget > mem.limit_bytes) {
      // Allowed (a budget is a cap, not a reservation), but it protects nothing: the kernel's
      // OOM killer or the cgroup limit acts before the budget is reached.
      plan.memory_budget_warning = "pipeline.memory_budget " + FormatBytes(*pc.memory_budget) +
                                   " is more than the memory this job may use (" + mem.limit_source +
                                   "): the budget will not keep it within that; the default is " +
                                   FormatBytes(mem.bytes) + " (" + mem.source + ")";
    }
  } else {
    at.memory_budget_bytes = mem.bytes;
    at.memory_budget_source = "default: " + mem.source;
  }

  // Knobs: fixed ones exactly; auto ones between 1 and what the budgets allow.
  TunerLimits& limits = at.limits;
  limits.cpu_cores = at.cpu_budget_cores;
  limits.machine_cores = machine.cores;
  limits.open_files_base = pc.cycle_length;
  limits.max_open_files = std::max<int64_t>(1, shard_files);  // as the memory plan counts them
  // Files all smaller than the least read-ahead per open file (many small shards): a file holds
  // no more read-ahead than its records' bytes, so the least is that (in 4 KiB pages: a chunk's
  // pages are resident as they are written), not 256 KiB. 2,000 plain files of 192 B needed a
  // 40 MiB budget, 22 MiB of it read-ahead, for a measured 4.8 MiB (helper-159). A compressed
  // file (or one that may be: compression auto, not every file sampled) inflates to at most
  // 1032 times its size, deflate's largest ratio (zlib's "Technical Details"). A file grown
  // since is read with less read-ahead, within the budget.
  if (sample.largest_file_bytes) {
    const bool plain = config.source.compression == Compression::kNone || sample.every_file_plain;
    // Taken at most at the least already (no overflow), then scaled.
    const uint64_t largest = std::min(*sample.largest_file_bytes, limits.min_stream_buffer_bytes);
    const uint64_t most = largest * (plain ? 1 : kMaxDeflateRatio);
    const uint64_t pages = (most + 4095) / 4096 * 4096;
    limits.min_stream_buffer_bytes = std::clamp<uint64_t>(pages, 4096, limits.min_stream_buffer_bytes);
  }
  at.fixed.readers = pc.readers.has_value();
  at.fixed.workers = pc.workers.has_value();
  at.fixed.prefetch = pc.prefetch.has_value();
  at.fixed.stream_buffer_bytes = pc.read_ahead.has_value();
  at.fixed.reads_per_file = pc.reads_per_file.has_value();
  // A fixed reads_per_file needs io_uring; without it files are read one read at a time, and
  // the knobs (and the status) say so.
  // 0: auto. (A plain number rather than std::optional: GCC 12 warns -Wmaybe-uninitialized on
  // its value_or here.)
  const int64_t fixed_reads_per_file = pc.reads_per_file ? (queued_reads ? *pc.reads_per_file : 1) : 0;
  // A file is read by one reader at a time and open files are at most the shard's files, so
  // auto readers stop there: more would idle, and the memory plan counts each (a thread; under
  // on_error: skip its record check).
  limits.max_readers = pc.readers.value_or(std::min<int64_t>(kMaxAutoReaders, std::max<int64_t>(1, shard_files)));
  // Workers count against the CPU budget by the CPU they use (daemon/tuner.h), so on a few
  // cores shared with the sequencer, the readers and the consumers, more workers than cores
  // can pay (each parses while the others wait). Twice the cores, at least 2 and at most 16,
  // bounds the ring slots they hold.
  const double cores = std::clamp(at.cpu_budget_cores, 1.0, static_cast<double>(kMaxAutoWorkers));
  limits.max_workers =
      pc.workers.value_or(std::min<int64_t>(kMaxAutoWorkers, static_cast<int64_t>(std::floor(2 * cores))));  // >= 2
  const int64_t auto_max_readers = limits.max_readers, auto_max_workers = limits.max_workers;

  // Ring: room for the most workers, the most prefetch and one batch held per queue. With
  // auto prefetch, prefetch is capped so that the ring takes at most half of the budget, and
  // when the plan then leaves too little for the rest, prefetch slots go first (down to
  // kMinAutoPrefetch) before the job is refused: so a larger budget never fails where a
  // smaller one fits (the ring's half grows in whole slots), and the error's advice, made
  // with the fewest slots, is a budget that fits.
  plan.slot_bytes = config.ring.slot_bytes.value_or(sample.slot_bytes);
  plan.shuffle_buffer = ShuffleBufferRecords(config, sample);
  if (plan.shuffle_buffer < config.shuffle.buffer) {
    plan.shuffle_buffer_note = "shuffle.buffer " + std::to_string(config.shuffle.buffer) + " is more than the " +
                               std::to_string(*sample.shard_records) +
                               " records this shard reads per epoch (counted at start): the buffer holds the whole "
                               "epoch, and the memory plan counts " +
                               std::to_string(plan.shuffle_buffer) + " records";
  }
  // batch.size above the records of the shard's epoch: a note, or a warning where that means
  // no batch at all.
  const int64_t epoch_rows = BatchRows(config, sample);
  const std::string more = "batch.size " + std::to_string(config.batch.size) + " is more than the " +
                           std::to_string(epoch_rows) + " records this shard reads per epoch (counted at start): ";
  if (epoch_rows < config.batch.size) {
    const int64_t ranks = config.consumers.mode == DeliveryMode::kRanks ? config.consumers.count : 1;
    if (config.batch.drop_remainder) {
      plan.batch_size_warning = more + "with drop_remainder: true no batch is made";
    } else if (ranks > 1) {
      plan.batch_size_warning =
          more + "each epoch is one batch, and with consumers.count " + std::to_string(ranks) +
          " (ranks) batches go out in whole rounds of " + std::to_string(ranks) +
          ", so none is delivered; batch.size " + std::to_string(std::max<int64_t>(1, epoch_rows / ranks)) +
          " or less gives every rank a batch";
    } else {
      plan.batch_size_note = more + "each epoch is one batch of those records";
    }
  }
  const int64_t held = static_cast<int64_t>(queues);
  const bool auto_ring = !pc.prefetch && !config.ring.slots;
  int64_t max_prefetch = pc.prefetch.value_or(kMaxAutoPrefetch);
  const auto cap_prefetch = [&] {
    if (!auto_ring) return;
    const uint64_t stride = shm::ComputeGeometry(1, plan.slot_bytes).slot_stride;
    const int64_t affordable = static_cast<int64_t>(at.memory_budget_bytes / 2 / std::max<uint64_t>(1, stride)) -
                               limits.max_workers - held;
    max_prefetch = std::clamp<int64_t>(affordable, kMinAutoPrefetch, kMaxAutoPrefetch);
  };
  cap_prefetch();
  // Slots (auto) and the plan's batches for the epoch's records instead of batch.size rows,
  // when a plan for the latter does not fit: tried before any auto knob gives way, as it costs
  // nothing while the files hold what they held at start.
  int64_t batch_rows = config.batch.size;
  uint64_t full_slot = sample.slot_bytes, mean_slot = sample.mean_slot_bytes;
  const auto epoch_batches = [&](const std::string& where) {
    if (batch_rows <= epoch_rows) return false;
    batch_rows = epoch_rows;
    full_slot = sample.epoch_slot_bytes;
    mean_slot = sample.epoch_mean_slot_bytes;
    if (!config.ring.slot_bytes) plan.slot_bytes = full_slot;
    max_prefetch = pc.prefetch.value_or(kMaxAutoPrefetch);  // the ring's half holds more of them
    cap_prefetch();
    const std::string sized = "the ring's slots and the memory plan are sized for " + std::to_string(epoch_rows) +
                              " rows (a plan for " + std::to_string(config.batch.size) + " does not fit in " +
                              where + ")";
    plan.batch_size_note = plan.batch_size_note.empty() ? more + sized : plan.batch_size_note + ", and " + sized;
    return true;
  };
  const int64_t first_max_readers = limits.max_readers, first_max_workers = limits.max_workers;
  // Auto slots sized for a batch of the sample's largest records that `where` cannot hold:
  // the mean-based size instead (a batch of several of the largest can then stop the job;
  // warned), and the auto knobs may reach as far as before again.
  const auto slots_from_mean = [&](const std::string& where) {
    plan.slot_bytes_note = "ring.slot_bytes: auto is " + FormatBytes(mean_slot) +
                           " from the mean sampled record: a ring of slots for a batch of the largest sampled "
                           "records (" + FormatBytes(full_slot) + " each) does not fit in " + where +
                           "; a shuffled batch of several large records can then stop the job (raise it, or set "
                           "ring.slot_bytes)";
    plan.slot_bytes = mean_slot;
    limits.max_readers = first_max_readers;
    limits.max_workers = first_max_workers;
    max_prefetch = pc.prefetch.value_or(kMaxAutoPrefetch);
    cap_prefetch();
  };
  MemoryInputs mi;
  for (;;) {
    const int64_t wanted_slots = config.ring.slots.value_or(limits.max_workers + max_prefetch + held);
    plan.slot_count = static_cast<uint32_t>(std::clamp<int64_t>(wanted_slots, 2, shm::kMaxSlots));
    plan.geometry = shm::ComputeGeometry(plan.slot_count, plan.slot_bytes);
    // Prefetch can use what the workers and the consumers' held batches leave.
    limits.max_prefetch = std::max<int64_t>(1, std::min<int64_t>(max_prefetch, static_cast<int64_t>(plan.slot_count) -
                                                                                   limits.max_workers - held + 1));
    if (pc.prefetch) limits.max_prefetch = *pc.prefetch;

    // Memory plan: what is left after the fixed parts is the read-ahead.
    mi = MemoryInputs{};
    mi.budget_bytes = at.memory_budget_bytes;
    mi.budget_source = pc.memory_budget ? "pipeline.memory_budget" : "the auto pipeline.memory_budget";
    mi.ring_segment_bytes = plan.geometry.segment_bytes;
    mi.ring_slots = plan.slot_count;
    mi.ring_slot_bytes = plan.geometry.slot_stride;
    mi.ring_slot_bytes_fixed = config.ring.slot_bytes.has_value();
    mi.baseline_private_rss_bytes = baseline_private_rss;
    mi.cycle_length = pc.cycle_length;
    mi.files = shard_files;
    mi.compressed = config.source.compression != Compression::kNone && !sample.every_file_plain;
    if (mi.compressed && config.source.compression == Compression::kAuto && !sample.any_file_compressed) {
      mi.compressed_why = "compression: auto, and the start-up sample did not reach every file";
    }
    mi.min_stream_buffer_bytes = limits.min_stream_buffer_bytes;
    mi.reader_buffer_bytes = plan.reader_buffer_bytes;
    if (plan.reader_buffer_bytes < ReaderOptions{}.buffer_bytes && sample.largest_file_bytes) {
      mi.reader_buffer_why = "reads of " + FormatBytes(plan.reader_buffer_bytes) + ": the largest file is " +
                             FormatBytes(*sample.largest_file_bytes);
    }
    mi.reads_per_file = fixed_reads_per_file > 0 ? fixed_reads_per_file : 1;
    mi.read_block_bytes = plan.read_block_bytes;
    mi.mean_record_bytes = sample.records > 0 ? sample.bytes / sample.records : 0;
    mi.largest_record_bytes = sample.largest_bytes;
    mi.shuffle_buffer = plan.shuffle_buffer;
    if (plan.shuffle_buffer < config.shuffle.buffer) mi.shuffle_buffer_configured = config.shuffle.buffer;
    mi.batch_size = batch_rows;
    if (batch_rows < config.batch.size) mi.batch_size_configured = config.batch.size;
    mi.queues = queues;
    mi.max_readers = limits.max_readers;
    mi.max_workers = limits.max_workers;
    mi.readers_fixed = pc.readers.has_value();
    mi.workers_fixed = pc.workers.has_value();
    // ExampleParser::Check's scratch: one row, its columns grown by doubling (up to 2x); a
    // row is < 2^44 bytes (8x a record, which is < 2^40).
    if (config.source.on_error == OnError::kSkip) mi.reader_check_bytes = 2 * sample.largest_row_bytes;
    try {
      plan.memory = PlanMemory(mi);  // throws BudgetError with the arithmetic
      plan.inflate_planned = mi.compressed;
      // /dev/shm (a container's is 64 MiB by default) that cannot hold the ring: fewer auto
      // prefetch slots, then auto slots of the mean's size. Beyond that, creating the segment
      // names what is short.
      if (const uint64_t free = shm::ShmFreeBytes(); plan.geometry.segment_bytes > free) {
        if (epoch_batches("/dev/shm (" + FormatBytes(free) + " free)")) continue;
        if (auto_ring && max_prefetch > kMinAutoPrefetch) {
          --max_prefetch;
          continue;
        }
        if (!config.ring.slot_bytes && plan.slot_bytes > mean_slot) {
          slots_from_mean("/dev/shm (" + FormatBytes(free) + " free)");
          continue;
        }
      }
      break;
    } catch (const BudgetError& e) {
      // What an auto knob may reach gives way before the job is refused: prefetch slots, then
      // the most readers the tuner may start (each an open file's buffers and a thread), then
      // the most workers. A budget that holds 1 reader and 1 worker starts, with the tuner
      // capped there (session 28: `memory_budget: 24MiB` was refused for the plan of 16 auto
      // readers, although the job used 21 MiB with the 2-3 the tuner chose). The error, when
      // it comes, is the arithmetic of the smallest plan, so its advice is a budget that fits.
      // Auto slots sized for the sample's largest records go back to the mean-based size last.
      if (epoch_batches(mi.budget_source + " " + FormatBytes(mi.budget_bytes))) {
        // again with slots for the epoch's records
      } else if (auto_ring && max_prefetch > kMinAutoPrefetch) {
        --max_prefetch;
      } else if (!pc.readers && limits.max_readers > 1) {
        --limits.max_readers;
      } else if (!pc.workers && limits.max_workers > 1) {
        --limits.max_workers;
      } else if (!config.ring.slot_bytes && plan.slot_bytes > mean_slot) {
        // Even the smallest plan cannot hold slots for the sample's largest records all in one batch.
        slots_from_mean(mi.budget_source + " " + FormatBytes(mi.budget_bytes));
      } else {
        // A batch.size beyond what the sample read, on files too large to count: planned in
        // full, which may be what does not fit; say so.
        const std::string uncounted =
            !sample.shard_records && static_cast<uint64_t>(config.batch.size) > sample.records
                ? "; batches are planned at batch.size " + std::to_string(config.batch.size) +
                      " rows: the shard's records were not counted at start (only where its files hold at most " +
                      FormatBytes(kCountFileBytes) + " together), so an epoch with fewer is not known"
                : "";
        if (const uint64_t shm_total = shm::ShmTotalBytes(); plan.geometry.segment_bytes > shm_total) {
          // A larger budget would not do: the segment could not be created anyway.
          throw BudgetError(std::string(e.what()) + "; but first lower ring.slots or ring.slot_bytes: the ring alone (" +
                            FormatBytes(plan.geometry.segment_bytes) + ") is more than all of /dev/shm (" +
                            FormatBytes(shm_total) + ")" + uncounted);
        }
        if (!uncounted.empty()) throw BudgetError(std::string(e.what()) + uncounted);
        throw;
      }
    }
  }
  {
    // The budget needed by the plan with `trial`'s knobs (0: it fits the budget).
    const auto needed_with = [](const MemoryInputs& trial) -> uint64_t {
      try {
        PlanMemory(trial);
        return 0;
      } catch (const BudgetError& e) {
        return std::max<uint64_t>(e.needed_bytes(), trial.budget_bytes + 1);
      }
    };
    // Readers gave way all the way down before workers did: readers that fit again beside the
    // workers left are given back (they change neither the ring nor /dev/shm's share).
    while (!pc.readers && limits.max_readers < auto_max_readers && limits.max_workers < auto_max_workers) {
      MemoryInputs trial = mi;
      trial.max_readers = limits.max_readers + 1;
      if (needed_with(trial) != 0) break;
      mi = trial;
      limits.max_readers = trial.max_readers;
      plan.memory = PlanMemory(mi);
    }
    // What one more of a capped knob needs. The plan keeps workers before readers (readers give
    // way first), so one more worker comes with 1 reader (then readers again as the rest holds),
    // and a budget for one more reader beside these workers is said only where it is below
    // the one for one more worker: at or above that, the workers grow and the readers start over.
    uint64_t worker_needs = 0, reader_needs = 0;
    const bool readers_capped = !pc.readers && limits.max_readers < auto_max_readers;
    const bool workers_capped = !pc.workers && limits.max_workers < auto_max_workers;
    if (workers_capped) {
      MemoryInputs trial = mi;  // one more worker also takes one more auto ring slot
      trial.max_workers = limits.max_workers + 1;
      if (!pc.readers) trial.max_readers = 1;
      if (!config.ring.slots && plan.slot_count < shm::kMaxSlots) {
        trial.ring_slots = plan.slot_count + 1;
        trial.ring_segment_bytes = shm::ComputeGeometry(plan.slot_count + 1, plan.slot_bytes).segment_bytes;
      }
      worker_needs = needed_with(trial);
    }
    if (readers_capped) {
      MemoryInputs trial = mi;
      trial.max_readers = limits.max_readers + 1;
      reader_needs = needed_with(trial);
      if (workers_capped && reader_needs >= worker_needs) reader_needs = 0;
    }
    // "at most 1 reader (of 12; one more needs 21MiB)": a budget to write in the config, rounded
    // up to whole MiB (0.1 MiB rounded to nearest could be the budget set already).
    std::vector<std::string> caps;
    auto cap = [](int64_t most, int64_t of, const char* one, const char* many, uint64_t next_needs) {
      std::string text = "at most " + std::to_string(most) + " " + (most == 1 ? one : many) + " (of " +
                         std::to_string(of);
      constexpr uint64_t kMiB = uint64_t{1} << 20;
      if (next_needs > 0) {
        text += "; one more needs " + std::to_string(next_needs / kMiB + (next_needs % kMiB != 0 ? 1 : 0)) + "MiB";
      }
      return text + ")";
    };
    if (readers_capped) caps.push_back(cap(limits.max_readers, auto_max_readers, "reader", "readers", reader_needs));
    if (workers_capped) caps.push_back(cap(limits.max_workers, auto_max_workers, "worker", "workers", worker_needs));
    if (!caps.empty()) {
      plan.knob_caps = mi.budget_source + " " + FormatBytes(at.memory_budget_bytes) + " holds " + caps[0] +
                       (caps.size() > 1 ? " and " + caps[1] : "") +
                       ": the autotuner stays within that";
    }
  }
  if (!pc.readers) {
    limits.max_readers_why =
        limits.max_readers < auto_max_readers ? "what " + mi.budget_source + " holds"
        : auto_max_readers >= kMaxAutoReaders ? "the most auto readers"
        : auto_max_readers == 1               ? "the shard has 1 file"
                                              : "one per file of the shard";
  }
  limits.read_ahead_budget_bytes = plan.memory.read_ahead_bytes;
  // Read-ahead per open file: 1 MiB, the size of a reader's own reads, is as deep as it goes
  // (on a 20 ms mount it gave all the throughput 16 readers could). It starts at the minimum,
  // 256 KiB: that kept the throughput of local files and of a 2 ms mount at about half the
  // memory; records of more than ~25 KiB start deeper (kStartRecordsAhead). The tuner deepens
  // it where reads are slow (daemon/tuner.h). (Sessions 7-8 kept it at 1 MiB while RssAnon
  // grew 140-510 KiB/min in soaks at 256 KiB: heap fragmentation by read-ahead chunks sized to
  // each turn, gone with chunks of one size, ReadAhead::kChunkBytes; docs/benchmarks.md,
  // "Autotuning", session 9.)
  limits.max_stream_buffer_bytes = std::max(limits.min_stream_buffer_bytes,
                                            std::min(kMaxStreamBufferBytes, plan.memory.max_stream_buffer_bytes()));
  const uint64_t records_ahead =
      (kStartRecordsAhead * mi.mean_record_bytes + kReadAheadStepBytes - 1) / kReadAheadStepBytes * kReadAheadStepBytes;
  limits.start_stream_buffer_bytes =
      std::clamp(records_ahead, limits.min_stream_buffer_bytes, limits.max_stream_buffer_bytes);
  // With queued reads, their blocks are the read-ahead: the stream buffer holds a hand-over's
  // worth (TunerLimits::queued_stream_buffer_bytes), still kStartRecordsAhead large records.
  limits.queued_stream_buffer_bytes = std::clamp(records_ahead, kQueuedStreamBufferBytes,
                                                 std::max(kQueuedStreamBufferBytes, limits.max_stream_buffer_bytes));
  limits.read_bytes = plan.reader_buffer_bytes;  // the daemon's readers' ReaderOptions::buffer_bytes
  limits.read_block_bytes = plan.read_block_bytes;  // the daemon's readers' ReaderOptions::read_block_bytes
  // Queued reads serve plain and compressed files alike (a GZIP/ZLIB file's inflater reads its
  // compressed bytes through the queue; docs/benchmarks.md, session 44: on GZIP files behind
  // 20 ms the tuner with them got the throughput of 4-8 readers reading one at a time, median
  // of 7 rounds, in 16-22 instead of 26-48 MiB). Without io_uring auto stays at 1 instead of
  // trying what cannot gain.
  limits.max_reads_per_file = fixed_reads_per_file > 0 ? fixed_reads_per_file : (queued_reads ? kMaxAutoReadsPerFile : 1);

  // Starting knobs.
  TunerKnobs& k = at.initial;
  k.readers = pc.readers.value_or(1);
  k.workers = pc.workers.value_or(1);
  // Prefetch starts at its most: its slots are in the segment (counted whole against the
  // budget) whether they are filled or not, and ready batches cost no CPU and no private memory
  // (batches queued for busy workers hold their records, which the memory plan counts per
  // slot); depth absorbs the stages taking turns on a few cores (taxi, 1 worker, 1 reader:
  // 1.5 -> 2.1 M examples/s with 8 instead of 2), which the "bursty output" trials otherwise
  // had to find, a round each. The take-back rule lowers it where batches stay ready.
  k.prefetch = pc.prefetch.value_or(limits.max_prefetch);
  // One read at a time into the window (no queue, no io_uring round trips) until reads are
  // seen to block: on local files the page cache answers at once.
  k.reads_per_file = fixed_reads_per_file > 0 ? fixed_reads_per_file : 1;
  k.stream_buffer_bytes =
      pc.read_ahead.value_or(Tuner::StartStreamBufferBytes(limits, k.readers, k.reads_per_file));
  plan.tune = !(at.fixed.readers && at.fixed.workers && at.fixed.prefetch && at.fixed.stream_buffer_bytes &&
                at.fixed.reads_per_file);
  const bool queued_fds = limits.max_reads_per_file > 1;
  plan.file_descriptors = PlanFileDescriptors(plan.memory.open_files, queued_fds, kMaxControlConnections);
  {
    // What lowers the data files' part: fewer files opened ahead (one per reader), fewer in
    // the interleave, no io_uring queue per file. Each only where it opens fewer than now.
    std::vector<std::string> lower;
    const int64_t open = plan.memory.open_files;
    const auto files_text = [](int64_t n) { return std::to_string(n) + (n == 1 ? " data file" : " data files"); };
    const int64_t one_reader = OpenFiles(pc.cycle_length, 1, shard_files);
    const int64_t interleave_one = OpenFiles(1, limits.max_readers, shard_files);
    const bool readers_lower = limits.max_readers > 1 && one_reader < open;
    const bool cycle_lower = pc.cycle_length > 1 && interleave_one < open;
    if (readers_lower) {
      lower.push_back("set pipeline.readers to 1 (" + files_text(one_reader) + " open" +
                      (pc.readers ? std::string() : "; auto readers open one file ahead each") + ")");
    }
    if (queued_fds) {
      lower.push_back("set pipeline.reads_per_file to 1 (1 descriptor per data file, not 2: no io_uring queue)");
    }
    if (cycle_lower) {
      lower.push_back("lower pipeline.cycle_length (with 1: " + files_text(interleave_one) +
                      " open; it changes the batch order)");
    }
    for (size_t i = 0; i < lower.size(); ++i) {
      plan.file_descriptors.lower += (i == 0 ? "" : i + 1 == lower.size() ? " or " : ", ") + lower[i];
    }
    // The fewest this job can hold: 1 reader, cycle_length 1, no queues.
    const uint64_t fixed_fds = kMaxControlConnections + kOtherFileDescriptors;
    plan.file_descriptors.least = static_cast<uint64_t>(OpenFiles(1, 1, shard_files)) + fixed_fds;
    if (lower.size() > 1) {  // what the changes named need together
      const int64_t together = OpenFiles(cycle_lower ? 1 : pc.cycle_length, readers_lower ? 1 : limits.max_readers,
                                         shard_files);
      plan.file_descriptors.lower +=
          " (all of them: " + std::to_string(static_cast<uint64_t>(together) + fixed_fds) + ")";
    }
  }

  // The largest record the budget holds (TuningPlan::record_limit_bytes).
  const uint64_t copies = mi.compressed ? 2 : 1;
  const uint64_t record_limit = sample.largest_bytes + plan.memory.margin_bytes / 2 / copies;
  plan.record_limit_bytes = std::min(config.source.max_record_bytes, record_limit);
  if (record_limit < config.source.max_record_bytes) {
    plan.record_limit_why =
        "the " + std::to_string(record_limit) + " bytes (" + FormatBytes(record_limit) + ") that " + mi.budget_source +
        " " + FormatBytes(mi.budget_bytes) + " holds for one record: " +
        (sample.records == 0 ? std::string()
                             : "the largest of the " + std::to_string(sample.records) + " records sampled at start (" +
                                   std::to_string(sample.largest_bytes) + " bytes) plus ") +
        (copies == 2 ? "a quarter" : "half") + " of its " + FormatBytes(plan.memory.margin_bytes) + " safety margin " +
        (sample.records == 0 ? "(no record could be read at start)"
                             : "(raise the budget if records this large are genuine)");
  }
  return plan;
}


}  // namespace ringfeed
