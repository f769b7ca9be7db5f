#include "daemon/job_check.h"

#include <grp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <string_view>

#include "daemon/budget.h"
#include "daemon/file_list.h"
#include "daemon/shard.h"
#include "daemon/tuning_plan.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/example_wire.h"
#include "format/read_queue.h"
#include "format/tfrecord_reader.h"
#include "shm/segment.h"

namespace ringfeed {
namespace {

// ringfeedd's start-up plan: the same sample, slot size and memory plan (PlanTuning).
// *absent: the features no sampled record has (RecordSample::absent_features), whose warnings
// open result->sample_warnings.
void PlanLikeDaemon(const JobConfig& config, const ExampleParser& parser, const std::vector<std::string>& files,
                    uint64_t baseline_private_rss, JobCheckResult* result, std::vector<std::string>* absent) {
  std::string unparsable;  // ringfeedd's first start-up refusal, before its plan's
  try {
    const std::vector<uint32_t> shard_files = ShardFiles(config, files.size());
    const bool ranks = config.consumers.mode == DeliveryMode::kRanks;
    const uint32_t queues = ranks ? static_cast<uint32_t>(config.consumers.count) : 1;
    const RecordSample sample = SampleRecords(config, parser, files, shard_files);
    result->sample_warnings = sample.warnings;  // what ringfeedd logs at start
    absent->assign(sample.absent_features.begin(), sample.absent_features.end());
    bool fatal = false;
    if (std::string problem = SampleParseProblem(config, sample, &fatal); fatal) unparsable = std::move(problem);
    std::string ignored;
    const TuningPlan plan = PlanTuning(config, sample, static_cast<int64_t>(shard_files.size()), queues,
                                       baseline_private_rss, ReadQueue::Available(&ignored));
    result->slot_bytes = plan.slot_bytes;
    result->sample_records = sample.records;
    result->shard_records = sample.shard_records;
    result->cpu_budget_cores = plan.autotune.cpu_budget_cores;
    result->cpu_budget_source = plan.autotune.cpu_budget_source;
    result->memory_plan = plan.memory.Describe();
    result->memory_budget_bytes = plan.memory.budget_bytes;
    result->shuffle_share_bytes = plan.memory.shuffle_bytes;
    result->shuffle_buffer = plan.shuffle_buffer;
    result->knob_caps = plan.knob_caps;
    result->shuffle_buffer_note = plan.shuffle_buffer_note;
    result->batch_size_note = plan.batch_size_note;
    result->batch_size_warning = plan.batch_size_warning;
    result->memory_budget_warning = plan.memory_budget_warning;
    result->cpu_budget_warning = plan.cpu_budget_warning;
    result->ring_slots_warning = plan.ring_slots_warning;
    result->slot_bytes_note = plan.slot_bytes_note;
    result->record_limit_bytes = plan.record_limit_bytes;
    result->record_limit_why = plan.record_limit_why;
    // The open-file limit as ringfeedd started from here would have it: raised to the hard one.
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_max != RLIM_INFINITY) {
      result->plan_error = OpenFileLimitProblem(plan.file_descriptors, limit.rlim_max, limit.rlim_max);
    }
    // The segment in this machine's /dev/shm, as ringfeedd creates it: refused (exit 2) when
    // larger than all of it; when larger than what is free now, a start would fail (exit 1,
    // retried by the unit) until other segments go.
    const uint64_t segment = plan.geometry.segment_bytes;
    const std::string ring = "the ring (" + std::to_string(plan.slot_count) + " slots x " +
                             FormatBytes(plan.geometry.slot_stride) + " + superblock = " + FormatBytes(segment) + ")";
    const std::string fix = "lower ring.slots or ring.slot_bytes, or enlarge /dev/shm (docker run --shm-size=...)";
    if (const uint64_t total = shm::ShmTotalBytes(); result->plan_error.empty() && segment > total) {
      result->plan_error = ring + " is more than all of /dev/shm (" + FormatBytes(total) + "): " + fix;
    } else if (const uint64_t free = shm::ShmFreeBytes(); segment > free) {
      result->shm_warning = ring + " is more than /dev/shm has free now (" + std::to_string(free) + " of its " +
                            std::to_string(total) + " bytes, against the ring's " + std::to_string(segment) +
                            "): ringfeedd started now would fail until other segments are removed; " + fix;
    }
  } catch (const BudgetError& e) {
    result->plan_error = e.what();
  }
  if (!unparsable.empty()) result->plan_error = unparsable;
  // Resolved at start, as ringfeedd does (whether its user is a member, check cannot know).
  if (result->plan_error.empty() && !config.permissions.group.empty() &&
      ::getgrnam(config.permissions.group.c_str()) == nullptr) {
    result->plan_error = MissingGroupMessage(config.permissions);
  }
}

// The shard's records in file order up to the first read error (where ringfeedd's epoch ends
// under on_error: fail), as RunJobCheck's loop reads them: a record shard's own only.
uint64_t CountEpochRecords(const std::vector<std::string>& files, const std::vector<uint32_t>& shard_files,
                           const Shard& shard, const ReaderOptions& options) {
  uint64_t records = 0;
  try {
    for (const uint32_t file_index : shard_files) {
      TFRecordReader reader(files[file_index], options);
      Record record;
      ReadError error;
      for (;;) {
        const auto status = reader.Next(&record, &error);
        if (status == TFRecordReader::Status::kEnd) break;
        if (status == TFRecordReader::Status::kError) {
          if (error.recoverable && !shard.OwnsRecord(error.record_index)) continue;
          return records;
        }
        records += shard.OwnsRecord(record.index);
      }
    }
  } catch (const std::exception&) {  // a file that cannot be opened: a read error too
  }
  return records;
}

}  // namespace

JobCheckResult RunJobCheck(const JobConfig& config, std::ostream& report, std::ostream& problems,
                           uint64_t baseline_private_rss) {
  JobCheckResult result;
  const std::vector<std::string> files =
      ExpandFiles(config.source.files, config.source.file_origins, config.source.files_as_written);
  result.files = files.size();
  const bool skip = config.source.on_error == OnError::kSkip;
  ExampleParser parser(config.features);
  // Records are parsed into a batch of at most kParseRows rows, emptied when full; batches of
  // batch.size are counted apart (batch_rows), so that a batch.size far above the data (up to
  // 16 M) allocates nothing for rows that never come.
  constexpr int64_t kParseRows = 1024;
  // The start-up plan first, as ringfeedd makes it: a feature that no sampled record has (a
  // misspelt key) is said before the problems it causes, which may be every record's; and a
  // batch too large for memory is refused there with the arithmetic, as the daemon refuses it.
  std::vector<std::string> absent;
  PlanLikeDaemon(config, parser, files, baseline_private_rss, &result, &absent);
  // A VarLen feature or one with a default that the sample lacks may come later in the files
  // (rows before it get empty lists or defaults, correctly): its warning waits for the whole
  // read, and goes if a record has it. The others' come first: a FixedLen feature without a
  // default that records lack explains every parse error below (a misspelt key).
  const auto fails_without = [&](const std::string& name) {
    for (const FeatureSpec& spec : config.features) {
      if (spec.name == name) return spec.RequiredInRecords();
    }
    return false;
  };
  std::vector<std::string> said;                           // warnings printed before the read
  std::vector<std::pair<std::string, std::string>> deferred;  // (feature, its warning) for after it
  for (size_t i = 0; i < result.sample_warnings.size(); ++i) {
    if (i < absent.size() && !fails_without(absent[i])) {
      deferred.emplace_back(absent[i], result.sample_warnings[i]);
      continue;
    }
    problems << "warning: " << result.sample_warnings[i] << "\n";
    said.push_back(result.sample_warnings[i]);
  }
  // Once the records are read (or not, at an early return): the warnings of the absent features
  // no record read has; the others are dropped (found_after_sample).
  const auto settle_absent = [&] {
    for (const auto& [name, warning] : deferred) {
      if (result.found_after_sample.count(name)) continue;
      problems << "warning: " << warning << "\n";
      said.push_back(warning);
    }
    result.sample_warnings = said;
    deferred.clear();
  };
  // The batch the records are parsed into: not made when its fixed columns alone are more than
  // the memory budget (the plan above has refused the job then), or when it cannot be had.
  // At most the shard's records where the sample counted them: a batch.size far above the data
  // allocates nothing for rows that never come.
  int64_t rows = std::min<int64_t>(config.batch.size, kParseRows);
  if (result.shard_records) rows = std::clamp<int64_t>(static_cast<int64_t>(*result.shard_records), 1, rows);
  const size_t parse_rows = static_cast<size_t>(rows);
  const uint64_t parse_bytes = SlotBytesNeeded(parser.specs(), parse_rows, ColumnSizes{});
  const std::string parse_batch = "a batch of " + std::to_string(parse_rows) + " rows to parse the records into (" +
                                  FormatBytes(parse_bytes) + " for the features' fixed shapes)";
  const uint64_t budget = config.pipeline.memory_budget.value_or(DefaultMemoryBudget().bytes);
  if (parse_bytes > budget) {
    // What a ring slot needs for a batch of these fixed shapes alone, as the daemon's error at
    // such a batch asks this command for. Which side is wrong, the budget (1 byte) or the
    // shapes (2^31 values a row), the user knows: both fixes are named.
    const uint64_t slot = SlotBytesNeeded(parser.specs(), static_cast<size_t>(config.batch.size), ColumnSizes{});
    result.epoch_not_read =
        parse_batch + " is more than " +
        (config.pipeline.memory_budget ? "pipeline.memory_budget (" + FormatBytes(budget) + ")"
                                       : "the memory budget (" + FormatBytes(budget) +
                                             ", the default; pipeline.memory_budget sets it)") +
        ": raise pipeline.memory_budget (the daemon's refusal below says to what), or lower batch.size or the "
        "feature shapes (a ring slot for a batch of " + std::to_string(config.batch.size) + " rows of them needs " +
        FormatBytes(slot) + ": ring.slot_bytes " + std::to_string((slot + 1023) / 1024) + "KiB)";
    settle_absent();
    return result;
  }
  std::optional<ExampleBatch> batch_storage;
  try {
    batch_storage.emplace(parser.specs(), parse_rows);
  } catch (const std::bad_alloc&) {
    result.epoch_not_read = "out of memory making " + parse_batch + "; lower batch.size or the feature shapes";
    settle_absent();
    return result;
  }
  ExampleBatch& batch = *batch_storage;
  int64_t batch_rows = 0;  // of the batch of batch.size being counted
  ReaderOptions options;
  options.compression = config.source.compression;
  options.max_record_bytes = config.source.max_record_bytes;
  uint64_t largest_record_bytes = 0;
  // The ring slot each batch needs, sized as ringfeedd's BatchWriter sizes it: ExampleParser::
  // Measure (an upper bound) summed over the batch's records: under on_error: skip the good ones
  // (ringfeedd's readers take the others out before batches are cut, Pipeline), under fail all
  // read (the first that fails to parse stops the job).
  ColumnSizes slot_sizes;
  WorstBatch worst(static_cast<size_t>(config.batch.size));  // the largest batch in any order
  size_t slot_rows = 0;
  uint64_t slot_batches = 0;
  auto slot_batch_done = [&] {
    const uint64_t bytes = SlotBytesNeeded(parser.specs(), slot_rows, slot_sizes);
    if (bytes > result.largest_batch_bytes) {
      result.largest_batch_bytes = bytes;
      result.largest_batch_index = slot_batches;
    }
    ++slot_batches;
    slot_sizes = ColumnSizes{};
    slot_rows = 0;
  };

  auto problem = [&](const std::string& message) {
    if (result.first_error.empty()) result.first_error = message;
    if (result.read_errors + result.parse_errors <= kMaxProblemsShown) {
      problems << (skip ? "skipped: " : "error: ") << message << "\n";
    }
    if (!skip) result.failed = true;
  };

  const auto start = std::chrono::steady_clock::now();
  // The files and records of this shard only, as ringfeedd's Sequencer reads them.
  const Shard shard = Shard::For(files.size(), config.shard.count, config.shard.index);
  const std::vector<uint32_t> shard_files = shard.Files(files.size());
  result.files_in_shard = shard_files.size();
  // Under on_error: fail, whether the row at `position` (0-based, in file order) falls in a
  // batch that ringfeedd drops unparsed: a short last batch under drop_remainder, or one of an
  // incomplete last round in ranks mode. Its records are never parsed there, so one that does
  // not parse stops nothing. Needs the epoch's records: counted (a second read) the first time.
  const uint64_t round = config.consumers.mode == DeliveryMode::kRanks
                             ? static_cast<uint64_t>(config.consumers.count) : 1;
  std::optional<uint64_t> delivered_batches;
  const auto dropped_unparsed = [&](uint64_t position) {
    if (!config.batch.drop_remainder && round == 1) return false;
    const uint64_t size = static_cast<uint64_t>(config.batch.size);
    if (!delivered_batches) {
      const uint64_t records = CountEpochRecords(files, shard_files, shard, options);
      const uint64_t batches = records / size + (records % size != 0 && !config.batch.drop_remainder ? 1 : 0);
      delivered_batches = batches / round * round;
    }
    return position / size >= *delivered_batches;
  };
  // The shuffle buffer's memory where its records come in file order: the largest total of
  // shuffle.buffer consecutive records that go into it (ShuffleBudgetWarning). In ringfeedd's
  // interleave the buffer mixes cycle_length files; consecutive records of one file are the
  // estimate that catches large records late in the files without adding up rare ones.
  struct WindowRecord {
    uint64_t bytes;
    uint32_t file_index;
    uint64_t record_index, offset;
    Compression compression;
  };
  std::deque<WindowRecord> window;
  uint64_t window_bytes = 0, window_most_bytes = 0, window_most_records = 0;
  std::optional<WindowRecord> window_most_first;
  const uint64_t window_records = result.shuffle_buffer > 1 ? static_cast<uint64_t>(result.shuffle_buffer) : 0;
  uint64_t record_bytes_total = 0, records_counted = 0;  // for the mean: records that go into batches
  for (const uint32_t file_index : shard_files) {
    const std::string& file = files[file_index];
    ++result.files_read;
    TFRecordReader reader(file, options);
    Record record;
    ReadError read_error;
    uint64_t file_records = 0;
    const uint64_t errors_before = result.read_errors + result.parse_errors;
    while (!result.failed) {
      const auto status = reader.Next(&record, &read_error);
      if (status == TFRecordReader::Status::kEnd) break;
      if (status == TFRecordReader::Status::kError) {
        // As the Sequencer: a bad record of another record shard is that shard's.
        if (read_error.recoverable && !shard.OwnsRecord(read_error.record_index)) continue;
        ++result.read_errors;
        problem(read_error.message);
        continue;  // a non-recoverable error makes the next Next() return kEnd
      }
      if (!shard.OwnsRecord(record.index)) continue;
      if (result.found_after_sample.size() < deferred.size()) {
        std::string ignored;
        wire::ForEachFeature(
            record.data,
            [&](const uint8_t* key, size_t size, const wire::FeatureRef&) {
              const std::string_view name(reinterpret_cast<const char*>(key), size);
              const bool wanted = std::any_of(deferred.begin(), deferred.end(),
                                              [&](const auto& d) { return d.first == name; });
              if (wanted && !result.found_after_sample.count(std::string(name))) {
                result.found_after_sample[std::string(name)] =
                    RecordPlace(file, record.index, record.offset, reader.compression());
              }
            },
            &ignored);
      }
      ParseError parse_error;
      const bool parsed = parser.Parse(record.data, batch, &parse_error);
      if (parsed || !skip) {
        ColumnSizes one;
        parser.Measure(record.data, &one);
        worst.Add(one);
        slot_sizes.Add(one);
        if (++slot_rows == static_cast<size_t>(config.batch.size)) slot_batch_done();
        record_bytes_total += record.data.size();
        ++records_counted;
        if (window_records > 0) {
          window.push_back({record.data.size(), file_index, record.index, record.offset, reader.compression()});
          window_bytes += record.data.size();
          if (window.size() > window_records) {
            window_bytes -= window.front().bytes;
            window.pop_front();
          }
          if (window_bytes > window_most_bytes) {
            window_most_bytes = window_bytes;
            window_most_records = window.size();
            window_most_first = window.front();
          }
        }
      }
      result.bytes += record.data.size();
      if (record.data.size() > largest_record_bytes) {
        largest_record_bytes = record.data.size();
        result.largest_record = RecordPlace(file, record.index, record.offset, reader.compression()) + ", " +
                                std::to_string(record.data.size()) + " bytes";
      }
      if (!parsed && !skip &&
          dropped_unparsed(result.batches * static_cast<uint64_t>(config.batch.size) + static_cast<uint64_t>(batch_rows))) {
        // A row of a batch ringfeedd drops: never parsed there, so on_error: fail stops nothing.
        if (result.unparsed_in_dropped_batch.empty()) {
          result.unparsed_in_dropped_batch =
              RecordPlace(file, record.index, record.offset, reader.compression()) + ": " + parse_error.message;
        }
        ++result.unparsed_in_dropped_batches;
        if (++batch_rows == config.batch.size) {
          ++result.batches;
          batch_rows = 0;
        }
        continue;
      }
      if (!parsed) {
        ++result.parse_errors;
        problem(RecordPlace(file, record.index, record.offset, reader.compression()) + ": " + parse_error.message);
        if (!skip) {  // ringfeedd delivers the batches before this one, not the rows of this one
          result.undelivered_records = static_cast<uint64_t>(batch_rows);
          batch_rows = 0;
        }
        continue;
      }
      ++file_records;
      ++result.records;
      if (batch.rows() == batch.capacity()) batch.Clear();
      if (++batch_rows == config.batch.size) {
        ++result.batches;
        batch_rows = 0;
      }
    }
    const uint64_t file_errors = result.read_errors + result.parse_errors - errors_before;
    report << file << ": " << file_records << " records";
    if (result.failed) {
      report << " before the bad record (on_error: fail stopped here)";
    } else if (file_errors > 0) {
      report << ", " << file_errors << " bad skipped";
    }
    // "(none)" after a count read as "no problems": say what it means.
    const Compression compression = reader.compression();
    report << " (" << (compression == Compression::kNone ? "not compressed" : CompressionName(compression)) << ")\n";
    if (result.failed) break;
  }
  settle_absent();
  if (batch_rows > 0) {
    if (config.batch.drop_remainder) {
      result.dropped_records = static_cast<uint64_t>(batch_rows);
    } else {
      ++result.batches;
      result.last_batch_rows = static_cast<uint64_t>(batch_rows);
    }
  }
  if (slot_rows > 0 && !config.batch.drop_remainder) slot_batch_done();
  if (const ColumnSizes sizes = worst.Sizes(); sizes.records > 0) {
    result.any_order_batch_bytes = SlotBytesNeeded(parser.specs(), static_cast<size_t>(sizes.records), sizes);
  }
  // ringfeedd's batches are cut in another order than this check's where it shuffles, or
  // interleaves files, or readers may hand records over out of order.
  result.reordered = config.shuffle.buffer > 1 || config.shuffle.files || !config.deterministic ||
                     (config.pipeline.cycle_length > 1 && shard_files.size() > 1);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (records_counted > 0) result.mean_record_bytes = record_bytes_total / records_counted;
  // The buffer's share of the plan, as ringfeedd's sequencer checks it (Sequencer: over_budget).
  const uint64_t window_held = ShuffleHeldBytes(window_most_records, window_most_bytes);
  if (result.plan_error.empty() && window_most_first && result.shuffle_share_bytes > 0 &&
      window_held > result.shuffle_share_bytes) {
    const WindowRecord& first = *window_most_first;
    const uint64_t mean = window_most_bytes / window_most_records + kRecordOverheadBytes;
    const uint64_t fit = result.shuffle_share_bytes / mean;
    // shuffle.buffer records like these in the buffer's share, the rest of the plan as it is.
    const uint64_t enough =
        BudgetHoldingMore(result.memory_budget_bytes, window_held - result.shuffle_share_bytes);
    result.shuffle_budget_warning =
        "the shuffle buffer may outgrow its share of the memory budget: the " + std::to_string(window_most_records) +
        " consecutive records from " +
        RecordPlace(files[first.file_index], first.record_index, first.offset, first.compression) +
        " on take " + FormatBytes(window_held) + " (payload + " + std::to_string(kRecordOverheadBytes) +
        " B of bookkeeping each), where ringfeedd's plan gives the buffer " + FormatBytes(result.shuffle_share_bytes) +
        " for shuffle.buffer " + std::to_string(result.shuffle_buffer) + " from the first " +
        std::to_string(result.sample_records) + " records it samples at start; ringfeedd stops at the budget once " +
        "records like these fill its buffer: raise pipeline.memory_budget to at least " + ConfigMiB(enough) +
        (fit >= 2 ? ", or lower shuffle.buffer to " + std::to_string(fit) : std::string(", or lower shuffle.buffer"));
  }
  // Below source.max_record_bytes (which this check's reader applied), the limit is the budget's.
  if (!result.record_limit_why.empty() && largest_record_bytes > result.record_limit_bytes) {
    result.record_over_limit = result.largest_record +
                               ": ringfeedd would refuse it as too large (on_error applies): it exceeds " +
                               result.record_limit_why;
  }
  const uint64_t problem_count = result.read_errors + result.parse_errors;
  if (problem_count > kMaxProblemsShown) {
    problems << "... and " << problem_count - kMaxProblemsShown << " more problems (not shown)\n";
  }
  return result;
}

}  // namespace ringfeed
