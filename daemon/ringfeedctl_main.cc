// ringfeedctl: ringfeed's command-line tool.
//
// Each subcommand is one Add<Name>Command() below: it declares the subcommand and its options on
// the CLI11 app and returns the action to run when that subcommand is chosen; the work itself
// lives in a library (inspect: daemon/inspect.h, check: daemon/job_check.h, list/status/dump:
// daemon/ctl_client.h). To add a subcommand, write its Add function
// and append it to the list in main(). Exit statuses (ringfeed::ExitStatus): 0 ok, 1 data
// problems found, 2 usage error (CLI11 prints what was wrong; --help exits 0).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "daemon/budget.h"
#include "daemon/ctl_client.h"
#include "daemon/inspect.h"
#include "daemon/job_check.h"
#include "daemon/shard.h"
#include "daemon/standard_fds.h"
#include "format/compression.h"
#include "format/utf8.h"
#include "shm/names.h"
#include "shm/segment.h"

namespace {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// --max-record-bytes takes the config's size syntax (64MiB, 1500, ...) and range.
const CLI::Validator kSizeValidator(
    [](std::string& text) -> std::string {
      std::optional<uint64_t> size = ringfeed::ParseSize(text);
      if (!size) {
        return "'" + text + "' is not a size" + ringfeed::SizeHint(text) +
               "; write a byte count with an optional unit: 1500, 64KiB, 16MiB, 1GiB";
      }
      if (*size < 16 || *size > (uint64_t{1} << 40)) return "'" + text + "' is out of range; allowed: 16 B to 1 TiB";
      return "";
    },
    "SIZE");

const CLI::Validator kCountValidator(
    [](std::string& text) -> std::string {
      uint64_t n = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec == std::errc::result_out_of_range) {
        return "'" + text + "' is out of range; at most " + std::to_string(std::numeric_limits<uint64_t>::max());
      }
      if (ec != std::errc() || end != text.data() + text.size() || n == 0) return "'" + text + "' is not a positive integer";
      return "";
    },
    "N");

// dump --timeout: seconds, a finite number from 0.001 (a wait is counted in whole milliseconds)
// to a week (so that it fits the clock; NaN and 1e300 used to give up at once).
const CLI::Validator kTimeoutValidator(
    [](std::string& text) -> std::string {
      double seconds = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
      if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(seconds) || seconds < 0.001 ||
          seconds > 7 * 24 * 3600.0) {
        return "'" + text + "' is not a timeout: give seconds from 0.001 to 604800 (a week), e.g. 60 or 0.5";
      }
      return "";
    },
    "SECONDS");

// inspect and dump --bytes: how bytes values are printed (daemon/json_values.h, BytesJson).
CLI::Option* AddBytesOption(CLI::App* cmd, std::string* format) {
  return cmd
      ->add_option("--bytes", *format,
                   "How bytes values are printed: base64 (every value; the default) or text (the value itself "
                   "where it is valid UTF-8, {\"base64\": ...} where not)")
      ->check(CLI::IsMember({"base64", "text"}))
      ->option_text("base64|text (default: base64)");
}

ringfeed::BytesFormat BytesFormatOf(const std::string& format) {
  return format == "text" ? ringfeed::BytesFormat::kText : ringfeed::BytesFormat::kBase64;
}

// A first word that names no subcommand gets a clearer message than CLI11's "A subcommand is
// required". Returns false after printing it.
bool CheckCommandName(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help" || arg == "--version") continue;
    if (!arg.empty() && arg[0] == '-') {
      std::cerr << "ringfeedctl: unknown option '" << arg << "' (options before a command: --help, --version)\n"
                << "Run with --help for more information.\n";
      return false;
    }
    if (arg.empty()) continue;
    try {
      app.get_subcommand(arg);
      return true;
    } catch (const CLI::OptionNotFound&) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
      std::cerr << "ringfeedctl: unknown command '" << arg << "' (commands: " << names << ")\n"
                << "Run with --help for more information.\n";
      return false;
    }
  }
  return true;
}

Command AddInspectCommand(CLI::App& parent) {
  struct Flags {
    ringfeed::InspectOptions options;
    bool count = false, verify = false, schema = false;
    std::string compression = "auto";
    std::string max_record_bytes;
    std::string bytes = "base64";
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = parent.add_subcommand(
      "inspect",
      "Look at TFRecord files of tf.train.Example records: print them, count them, check their CRCs, "
      "or infer the features: block of a job config");
  cmd->footer(
      "Modes (one at a time; default: records):\n"
      "  (none)    one JSON line per record: file, index, byte offset, every feature's kind and values\n"
      "            (bytes base64, or with --bytes text as text where valid UTF-8; NaN and infinities\n"
      "            as the strings \"nan\", \"inf\", \"-inf\")\n"
      "  --count   records per file and the total\n"
      "  --verify  check every CRC; list each corrupt or truncated record and a summary line\n"
      "  --schema  feature kinds, value counts and presence, then a ready-to-paste features: block\n"
      "Compression (plain, GZIP, ZLIB) is detected unless --compression names it.\n"
      "Problems (file, record index, byte offset) go to stderr as they are found, except with\n"
      "--verify, which prints them on stdout as its report (with --json: in its \"problems\" list).\n"
      "Exit status 0: all good, 1: problems found, 2: usage error.\n"
      "\n"
      "Examples:\n"
      "  ringfeedctl inspect --limit 2 data/train-00000.gz\n"
      "  ringfeedctl inspect --limit 2 --bytes text data/train-00000.gz\n"
      "  ringfeedctl inspect --count data/*.tfrecord\n"
      "  ringfeedctl inspect --verify --compression gzip data/*.gz\n"
      "  ringfeedctl inspect --schema data/*.gz > features.yaml");

  ringfeed::InspectOptions& o = flags->options;
  // option_text: the help says "one at a time" under Modes, not "Excludes: ..." beside each.
  CLI::Option* count = cmd->add_flag("--count", flags->count, "Print records per file and the total")->option_text(" ");
  CLI::Option* verify =
      cmd->add_flag("--verify", flags->verify, "Check every CRC and list each corrupt or truncated record")
          ->option_text(" ");
  CLI::Option* schema =
      cmd->add_flag("--schema", flags->schema, "Summarize features and print a features: block for the job config")
          ->option_text(" ");
  count->excludes(verify)->excludes(schema);
  verify->excludes(schema);
  CLI::Option* json = cmd->add_flag("--json", o.json, "With --count, --verify or --schema: one JSON object instead of the report");
  cmd->add_option("--compression", flags->compression, "Compression of every file; auto detects it")
      ->check(CLI::IsMember({"auto", "none", "gzip", "zlib"}))
      ->option_text("auto|none|gzip|zlib (default: auto)");
  cmd->add_option("--max-record-bytes", flags->max_record_bytes,
                  "Records with a larger length field are reported as too large (default 256MiB)")
      ->check(kSizeValidator)
      ->option_text("SIZE");
  CLI::Option* bytes = AddBytesOption(cmd, &flags->bytes);
  cmd->add_option("--limit", o.limit, "Read only the first N records of each file")
      ->check(kCountValidator)
      ->option_text("N");
  cmd->add_option("FILE", o.files, "TFRecord files (named in the output as given here)")
      ->required()
      ->option_text("...");

  // An option the chosen mode does not use is refused, not silently ignored: --count, --verify
  // and --schema print no values (--bytes), and records mode prints JSON lines anyway (--json).
  cmd->callback([count, verify, schema, bytes, json] {
    bool report = false;
    for (const CLI::Option* mode : {count, verify, schema}) {
      report = report || mode->count() > 0;
      if (mode->count() > 0 && bytes->count() > 0) {
        throw CLI::ValidationError(mode->get_name() + " excludes --bytes",
                                   "--bytes sets how record values are printed, and " + mode->get_name() +
                                       " prints none: drop --bytes");
      }
    }
    if (!report && json->count() > 0) {
      throw CLI::ValidationError("--json needs --count, --verify or --schema",
                                 "printing records, inspect writes one JSON line per record already: drop --json");
    }
  });

  auto run = [flags]() {
    ringfeed::InspectOptions options = flags->options;
    options.mode = flags->count    ? ringfeed::InspectMode::kCount
                   : flags->verify ? ringfeed::InspectMode::kVerify
                   : flags->schema ? ringfeed::InspectMode::kSchema
                                   : ringfeed::InspectMode::kRecords;
    options.reader.compression = *ringfeed::ParseCompression(flags->compression);  // checked by CLI11
    if (!flags->max_record_bytes.empty()) options.reader.max_record_bytes = *ringfeed::ParseSize(flags->max_record_bytes);
    options.bytes = BytesFormatOf(flags->bytes);
    return ringfeed::RunInspect(options, std::cout, std::cerr);
  };
  return {cmd, run};
}

Command AddCheckCommand(CLI::App& parent) {
  auto config_path = std::make_shared<std::string>();
  auto strict = std::make_shared<bool>(false);
  CLI::App* cmd = parent.add_subcommand(
      "check", "Run one epoch of a job config over its files: every CRC checked, every record parsed into batches");
  cmd->footer(
      "Loads and validates CONFIG (errors name file, line, column and key), expands source.files,\n"
      "then reads and parses every record exactly as ringfeedd will, applying source.on_error, and\n"
      "prints records per file, batches and single-core throughput. Problems (the first 20) and\n"
      "warnings (spec features that no record has) go to stderr. No shuffling, no daemon.\n"
      "Then it makes ringfeedd's start-up plan from the same sample of the first records (ring slot\n"
      "size, memory budget: printed as ringfeedd logs it) and checks every batch of the epoch\n"
      "against that slot size; batches follow file order (ringfeedd interleaves cycle_length files).\n"
      "Exit status 0: all records good and every batch fits, 1: records skipped, the job failed or\n"
      "a batch would not fit a ring slot, 2: usage or config error, a file list that cannot be\n"
      "expanded (a pattern that matches nothing, a missing {a,b} file), a job ringfeedd would refuse\n"
      "to start (a memory budget, the open-file limit, a permissions.group that does not exist, a ring\n"
      "larger than all of /dev/shm) or a batch too large to build in memory. With --strict every\n"
      "warning exits 1 too: a spec feature that no record has, SequenceExample records whose feature\n"
      "lists are dropped, no batch at all (or none for any rank), a memory or CPU budget above what\n"
      "the process may use (or fixed workers above a set cpu_budget; without one, fixed workers above\n"
      "the machine's cores are a note), ring.slots not more than the ranks' consumers.count, a\n"
      "ring larger than /dev/shm has free now, auto slots sized from the mean record, a batch of the\n"
      "largest records that would not fit a slot in a shuffled or interleaved order, records that do\n"
      "not parse in batches ringfeedd drops unparsed.\n"
      "\n"
      "Examples:\n"
      "  ringfeedctl check config/examples/mnist.yaml   # after scripts/quickstart.sh wrote its data\n"
      "  ringfeedctl check --strict job.yaml            # in CI: a misspelt VarLen feature fails it");
  cmd->add_option("CONFIG", *config_path, "Job config (YAML)")
      ->required()
      ->option_text("REQUIRED")
      ->check(CLI::Validator(
          [](const std::string& path) { return path.empty() ? std::string("the path is empty") : std::string(); },
          ""));
  cmd->add_flag("--strict", *strict,
                "Warnings count as problems (exit 1): every warning of the list below (a misspelt VarLen name "
                "gives empty rows: a spec feature that no record has)");
  auto run = [config_path, strict]() {
    ringfeed::JobConfig config;
    try {
      config = ringfeed::LoadJobConfig(*config_path);
    } catch (const ringfeed::ConfigError& e) {
      std::cerr << "ringfeedctl check: " << e.what() << "\n";
      return ringfeed::kExitUsage;
    }
    ringfeed::JobCheckResult r;
    try {
      uint64_t private_rss = 0;  // where /proc is unreadable, the plan starts from 0
      try {
        private_rss = ringfeed::ReadProcessMemory().private_rss();
      } catch (const std::exception&) {
      }
      r = ringfeed::RunJobCheck(config, std::cout, std::cerr, private_rss + ringfeed::kDaemonBaselineExtraBytes);
    } catch (const std::bad_alloc&) {
      std::cerr << "ringfeedctl check: " << *config_path << ": out of memory building a batch of " << config.batch.size
                << " rows; lower batch.size or the feature shapes\n";
      return ringfeed::kExitUsage;
    } catch (const std::exception& e) {
      std::cerr << "ringfeedctl check: " << e.what() << "\n";
      return ringfeed::kExitUsage;
    }
    if (!r.epoch_not_read.empty()) {
      std::cerr << "ringfeedctl check: " << *config_path << ": the epoch was not read: " << r.epoch_not_read << "\n";
      if (!r.plan_error.empty()) std::cerr << "error: ringfeedd would refuse to start this job: " << r.plan_error << "\n";
      return ringfeed::kExitUsage;
    }
    const double mb = static_cast<double>(r.bytes) / 1e6;
    std::cout << "job " << config.job << ": " << r.records << " records from " << r.files_read << " of "
              << r.files_in_shard << " file(s)";
    if (config.shard.count > 1) {
      std::cout << " of " << ringfeed::Shard::For(r.files, config.shard.count, config.shard.index).Describe(r.files);
    }
    std::cout << " -> ";
    const uint64_t full = r.batches - (r.last_batch_rows > 0 ? 1 : 0);
    std::cout << full << " batch(es) of " << config.batch.size;
    if (r.last_batch_rows > 0) std::cout << " + 1 of " << r.last_batch_rows;
    if (r.dropped_records > 0) std::cout << " (" << r.dropped_records << " records dropped by drop_remainder)";
    if (r.undelivered_records > 0) {
      std::cout << " (and not the " << r.undelivered_records << " good record(s) before the bad one in its batch: "
                << "on_error: fail drops that batch whole)";
    }
    if (config.consumers.mode == ringfeed::DeliveryMode::kRanks && r.batches > 0) {
      // Every rank gets the same number per epoch (docs/config.md, consumers.mode).
      const uint64_t ranks = static_cast<uint64_t>(config.consumers.count);
      std::cout << "; ranks: " << r.batches / ranks << " per rank";
      if (r.batches % ranks != 0) {
        std::cout << ", the last " << r.batches % ranks << " dropped each epoch (they do not fill a round of "
                  << ranks << " ranks)";
      }
    }
    std::cout << "\nerrors: " << r.read_errors << " read, " << r.parse_errors << " parse";
    if (r.failed) {
      std::cout << " (on_error: fail stopped the epoch in file " << r.files_read << " of " << r.files_in_shard << ")";
    }
    std::cout << "\n";
    if (!r.largest_record.empty()) {
      std::cout << "records: " << r.mean_record_bytes << " bytes on average; the largest: " << r.largest_record << "\n";
    }
    for (const auto& [name, first] : r.found_after_sample) {
      std::cout << "note: feature " << ringfeed::QuotedName(name) << " is in none of the " << r.sample_records
                << " records sampled at start, but in later ones (the first: " << first
                << "): ringfeedd warns about it at start, and reads it; rows without it get an empty list or the "
                   "default\n";
    }
    // No batch for the trainers: none at all, or in ranks mode fewer than one round (ringfeedd
    // delivers whole rounds). Said once: the plan's batch_size_warning, when it has one, says
    // the same of batch.size (printed below).
    const uint64_t rank_count =
        config.consumers.mode == ringfeed::DeliveryMode::kRanks ? static_cast<uint64_t>(config.consumers.count) : 1;
    // Not when ringfeedd would refuse the job (below): "no sampled record parses" is the cause.
    const bool no_batch =
        !r.failed && r.batches < rank_count && r.batch_size_warning.empty() && r.plan_error.empty();
    if (no_batch && r.batches > 0) {
      std::cout.flush();
      std::cerr << "warning: no batch for any rank: the " << r.batches << " batch(es) of an epoch do not fill a round of "
                << rank_count << " ranks, and ringfeedd delivers whole rounds (the rest is dropped); a smaller "
                << "batch.size gives every rank a batch (at most " << std::max<uint64_t>(1, r.records / rank_count)
                << " here)\n";
    } else if (no_batch) {
      std::cout.flush();
      const uint64_t skipped = r.read_errors + r.parse_errors;
      std::cerr << "warning: no batch: "
                << (r.records > 0   ? "drop_remainder leaves no full batch of " + std::to_string(config.batch.size) +
                                        " from " + std::to_string(r.records) + " records"
                    : skipped > 0   ? "every record was skipped (" + std::to_string(r.parse_errors) + " parse and " +
                                        std::to_string(r.read_errors) + " read errors, the first ones above" +
                                        (r.parse_errors > 0 ? ": a features block that no record matches skips "
                                                              "them all)"
                                                            : ")")
                    : config.shard.count > 1 ? std::string("this job's shard has no records")
                                             : std::string("this job's files hold no records"))
                << "; ringfeedd would start and end its data at once (trainers get none)\n";
    }
    if (r.seconds > 0 && r.records > 0) {
      std::cout << "throughput (one core): " << static_cast<uint64_t>(static_cast<double>(r.records) / r.seconds)
                << " records/s, " << static_cast<uint64_t>(mb / r.seconds) << " MB/s of serialized records\n";
    }
    if (!r.plan_error.empty()) {
      std::cout.flush();
      std::cerr << "error: ringfeedd would refuse to start this job: " << r.plan_error << "\n";
      return ringfeed::kExitUsage;
    }
    std::cout << "ring: ringfeedd's slots would hold " << r.slot_bytes << " bytes (" << ringfeed::shm::HumanBytes(r.slot_bytes)
              << (config.ring.slot_bytes ? ", ring.slot_bytes" : ", ring.slot_bytes: auto from the first " +
                                                                    std::to_string(r.sample_records) + " records")
              << ")";
    if (r.batches > 0) {
      std::cout << "; the largest batch here needs " << r.largest_batch_bytes << " bytes ("
                << ringfeed::shm::HumanBytes(r.largest_batch_bytes) << ", batch " << r.largest_batch_index
                << " in file order" << (r.reordered ? ", not ringfeedd's batch of that index: its order differs" : "")
                << ")";
    }
    std::cout << "\n";
    std::cout << r.memory_plan;
    if (!r.knob_caps.empty()) std::cout << "autotune: " << r.knob_caps << "\n";
    if (!r.shuffle_buffer_note.empty()) std::cout << "shuffle: " << r.shuffle_buffer_note << "\n";
    if (!r.batch_size_note.empty()) std::cout << "batch: " << r.batch_size_note << "\n";
    if (!r.memory_budget_warning.empty()) std::cerr << "warning: " << r.memory_budget_warning << "\n";
    // Fixed workers above the machine's cores, with no cpu_budget set, depend on the machine
    // check runs on: a note, not a warning that --strict counts.
    if (!r.cpu_budget_warning.empty()) {
      std::cerr << (config.pipeline.cpu_budget ? "warning: " : "note: ") << r.cpu_budget_warning << "\n";
    }
    if (!r.batch_size_warning.empty()) std::cerr << "warning: " << r.batch_size_warning << "\n";
    if (!r.ring_slots_warning.empty()) std::cerr << "warning: " << r.ring_slots_warning << "\n";
    if (!r.shm_warning.empty()) std::cerr << "warning: " << r.shm_warning << "\n";
    if (!r.shuffle_budget_warning.empty()) std::cerr << "warning: " << r.shuffle_budget_warning << "\n";
    if (r.unparsed_in_dropped_batches > 0) {
      std::cerr << "warning: " << r.unparsed_in_dropped_batches
                << " record(s) that do not parse fall in batches ringfeedd drops without parsing them (a short last "
                   "batch under drop_remainder, or an incomplete last round of ranks), so on_error: fail does not "
                   "stop the job there; the first: "
                << r.unparsed_in_dropped_batch << "\n";
    }
    char cores[32];
    std::snprintf(cores, sizeof cores, "%.10g", r.cpu_budget_cores);
    std::cout << "cpu: ringfeedd's cpu_budget would be " << cores << " cores (" << r.cpu_budget_source << ")\n";
    std::cout.flush();  // the notes below go to stderr: after these lines, also where both are one pipe
    if (!config.pipeline.cpu_budget || !config.pipeline.memory_budget) {
      std::cerr << "note: the budgets not set in the config are measured here from this process's CPU affinity, "
                   "cgroup and memory; ringfeedd measures its own at start (under systemd: the unit's CPUQuota=, "
                   "AllowedCPUs=, MemoryMax=), which can differ\n";
    }
    if (!r.knob_caps.empty()) {
      std::cerr << "note: the plan counts this process's private RSS as ringfeedd's at start; the daemon's own "
                   "differs by some hundred KiB, so where the budget is near what one more reader or worker needs, "
                   "its caps can differ by one\n";
    }
    if (!r.slot_bytes_note.empty()) std::cerr << "warning: " << r.slot_bytes_note << "\n";
    if (r.SlotMayBeTooSmall() && !r.SlotTooSmall()) {
      std::cerr << "warning: ringfeedd's batches are not these (it shuffles, interleaves files or reads out of order), "
                   "and a batch of the "
                << config.batch.size << " largest records here together needs " << r.any_order_batch_bytes
                << " bytes (" << ringfeed::shm::HumanBytes(r.any_order_batch_bytes) << "), more than a ring slot ("
                << r.slot_bytes << " bytes): ringfeedd stops producing at a batch that does not fit (how likely "
                   "one comes depends on how rare the large records are); set ring.slot_bytes to "
                << (r.any_order_batch_bytes + 1023) / 1024 << "KiB to be safe in any order\n";
    }
    // With bad records, the last line says how many and the first: the plan above would
    // otherwise scroll the error away.
    const auto bad_records = [&] {
      if (r.read_errors + r.parse_errors > 0) {
        std::cerr << "ringfeedctl check: " << r.read_errors + r.parse_errors << " bad record(s)"
                  << (r.failed ? " (on_error: fail: ringfeedd would stop at the first)" : " (on_error: skip)")
                  << "; the first: " << r.first_error << "\n";
      }
      return ringfeed::kExitDataProblems;
    };
    if (r.SlotTooSmall()) {
      // In another order a larger batch can come: the advice is the bound for any order.
      const uint64_t advice = r.reordered ? std::max(r.any_order_batch_bytes, r.largest_batch_bytes)
                                          : r.largest_batch_bytes;
      std::cerr << "error: batch " << r.largest_batch_index << " (in file order) needs " << r.largest_batch_bytes
                << " bytes but a ring slot would hold " << r.slot_bytes
                << ": ringfeedd would stop producing at such a batch; set ring.slot_bytes to at least "
                << (advice + 1023) / 1024 << "KiB"
                << (r.reordered ? " (a batch of the " + std::to_string(config.batch.size) +
                                      " largest records together: ringfeedd's order is not this file order)"
                                : std::string())
                << " (the largest record: " << r.largest_record << ")\n";
      return bad_records();
    }
    if (!r.record_over_limit.empty()) {
      std::cerr << "error: " << r.record_over_limit << "\n";
      return bad_records();
    }
    if (r.read_errors + r.parse_errors > 0) return bad_records();
    const size_t warnings = r.sample_warnings.size() + (no_batch ? 1 : 0) +
                            (r.memory_budget_warning.empty() ? 0 : 1) +
                            (r.cpu_budget_warning.empty() || !config.pipeline.cpu_budget ? 0 : 1) +
                            (r.batch_size_warning.empty() ? 0 : 1) +
                            (r.ring_slots_warning.empty() ? 0 : 1) + (r.shm_warning.empty() ? 0 : 1) +
                            (r.shuffle_budget_warning.empty() ? 0 : 1) +
                            (r.unparsed_in_dropped_batches > 0 ? 1 : 0) +
                            (r.slot_bytes_note.empty() ? 0 : 1) +
                            (r.SlotMayBeTooSmall() && !r.SlotTooSmall() ? 1 : 0);
    if (*strict && warnings > 0) {
      std::cerr << "ringfeedctl check --strict: " << warnings << (warnings == 1 ? " warning" : " warnings")
                << " above, counted as problems (exit 1)\n";
      return ringfeed::kExitDataProblems;
    }
    return ringfeed::kExitOk;
  };
  return {cmd, run};
}

// A JOB argument that no config could name (a path, "..") is a usage error, not a socket looked for.
CLI::Validator JobNameValidator() {
  return CLI::Validator([](const std::string& job) { return ringfeed::JobNameProblem(job); }, "JOB");
}

// --runtime-dir, shared by the commands that talk to a running daemon.
void AddRuntimeDirOption(CLI::App* cmd, std::string* dir) {
  cmd->add_option("--runtime-dir", *dir,
                  "Where the daemons' sockets are, looked for there and one directory down (systemd's "
                  "/run/ringfeed/<instance>) (default: $RINGFEED_RUNTIME_DIR, else $RUNTIME_DIRECTORY, else "
                  "/run/ringfeed for root, else $XDG_RUNTIME_DIR/ringfeed, else /tmp/ringfeed-<uid>)")
      ->type_name("DIR")
      ->check(CLI::Validator(
          [](const std::string& dir) {
            return dir.empty() ? std::string("an empty directory; leave --runtime-dir out for the default") : "";
          },
          ""));
}

std::string RuntimeDirOr(const std::string& dir) { return dir.empty() ? ringfeed::shm::RuntimeDir() : dir; }

Command AddListCommand(CLI::App& parent) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = parent.add_subcommand(
      "list",
      "List the ringfeed jobs whose sockets are in one runtime directory and its subdirectories (--runtime-dir)");
  cmd->footer(
      "One line per job: JOB, STATE, PID, UPTIME, RECORDS/S (the last 10 s while it produces, the\n"
      "whole run's once production ended), CONSUMERS; a job found in a\n"
      "subdirectory ends with \"(in DIR)\"; a socket left by a daemon that is gone (killed, crashed)\n"
      "shows as gone, with its pid, one whose daemon does not answer as unreachable, one this user may\n"
      "not connect to as denied, one whose daemon answers with what ringfeedctl cannot read as bad\n"
      "reply, each with the reason.\n"
      "Only that directory is looked in: a daemon started with another runtime directory (its\n"
      "RINGFEED_RUNTIME_DIR or --runtime-dir, another user's default) is listed with --runtime-dir DIR.\n"
      "--json: one JSON object, {\"runtime_dir\", \"jobs\": [{\"job\", \"runtime_dir\", \"state\", and \"status\"\n"
      "(what status --json prints) or \"error\"}]}, for monitoring every job at once.\n"
      "Exit status 0: listed (none when the runtime directory does not exist), 1: the runtime directory\n"
      "cannot be read (its permissions; nothing is listed then).");
  AddRuntimeDirOption(cmd, dir.get());
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "One JSON object with every job's status (or why there is none)");
  auto run = [dir, json]() {
    try {
      ringfeed::ListJobs(RuntimeDirOr(*dir), std::cout, *json);
      return ringfeed::kExitOk;
    } catch (const std::exception& e) {
      std::cerr << "ringfeedctl list: " << e.what() << "\n";
      return ringfeed::kExitDataProblems;
    }
  };
  return {cmd, run};
}

Command AddStatusCommand(CLI::App& parent) {
  struct Flags {
    std::string job, dir;
    bool json = false;
    bool files = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = parent.add_subcommand("status", "Show what a running ringfeedd is doing");
  cmd->footer(
      "Shows state, uptime, epoch and file progress, records and batches produced, throughput\n"
      "(last 10 s and overall; the whole run's once production ended), ring occupancy (free / filling / ready / held), consumers (pid, rank,\n"
      "batches taken, time spent waiting), readers and workers, memory (segment, daemon private RSS,\n"
      "budget) and errors with the last one. Fields: docs/operations.md.\n"
      "Exit status 0: shown, 1: the daemon is not running, did not answer, serves another job or sent\n"
      "a reply ringfeedctl cannot read (another ringfeed version?); nothing is shown then.\n"
      "\n"
      "--files prints the job's sorted file list instead, all shards', one 'INDEX<TAB>PATH' line each:\n"
      "INDEX is the file index of a row's source (dump's \"sources\": [[file_index, record_index]]).\n"
      "\n"
      "Examples:\n"
      "  ringfeedctl status taxi-train --json | jq .throughput\n"
      "  ringfeedctl status taxi-train --files | sed -n 3p      # the file of file_index 2");
  cmd->add_option("JOB", flags->job, "Job name (the config's job:)")
      ->required()
      ->check(JobNameValidator())
      ->option_text("REQUIRED");
  cmd->add_flag("--json", flags->json, "Print the status object as JSON");
  cmd->add_flag("--files", flags->files,
                "Print the job's sorted file list (the file_index of a row's source) instead; with --json as "
                "{\"total\": N, \"files\": [...]}");
  AddRuntimeDirOption(cmd, &flags->dir);
  auto run = [flags]() {
    try {
      if (flags->files) {
        ringfeed::PrintFiles(RuntimeDirOr(flags->dir), flags->job, flags->json, std::cout);
        return ringfeed::kExitOk;
      }
      ringfeed::PrintStatus(RuntimeDirOr(flags->dir), flags->job, flags->json, std::cout);
      return ringfeed::kExitOk;
    } catch (const std::exception& e) {
      std::cerr << "ringfeedctl status: " << e.what() << "\n";
      return ringfeed::kExitDataProblems;
    }
  };
  return {cmd, run};
}

Command AddDumpCommand(CLI::App& parent) {
  auto options = std::make_shared<ringfeed::DumpOptions>();
  auto batches = std::make_shared<uint64_t>(0);
  auto bytes = std::make_shared<std::string>("base64");
  CLI::App* cmd = parent.add_subcommand(
      "dump", "Attach to a running job as a consumer and print its batches as JSON lines: what a trainer sees");
  cmd->footer(
      "One line per batch: {\"epoch\": E, \"batch\": K, \"size\": B, \"features\": {NAME: {\"dtype\": ...,\n"
      "\"shape\": [...], \"values\": [...flat, row-major...], \"row_splits\": [...] (varlen only)}},\n"
      "\"sources\": [[file_index, record_index], ...]}. bytes values are base64 (--bytes text: the text\n"
      "where it is valid UTF-8, {\"base64\": ...} where not); NaN and infinities are the strings \"nan\",\n"
      "\"inf\", \"-inf\". The batches printed are taken from the job: in shared mode they do not reach\n"
      "other consumers.\n"
      "Exit status 0: done (batch count reached or end of data), 1: the job is not running, refused\n"
      "this consumer, failed or went away, or sent no batch within --timeout seconds (in ranks mode\n"
      "the message names the ranks without a consumer, which stall every rank); 130 (143, 129):\n"
      "stopped by Ctrl-C (SIGTERM, SIGHUP) after printing the batch it had taken.\n"
      "\n"
      "Example:\n"
      "  ringfeedctl dump taxi-train --batches 1 | jq '.features.fare.values[:4]'");
  cmd->add_option("JOB", options->job, "Job name (the config's job:)")
      ->required()
      ->check(JobNameValidator())
      ->option_text("REQUIRED");
  cmd->add_option("--batches", *batches, "Print this many batches (default: all until the end of the data)")
      ->check(kCountValidator)
      ->option_text("N");
  cmd->add_option("--rank", options->rank, "consumers.mode ranks: attach as this rank (0-63)")
      ->check(CLI::Range(0, 63))
      ->option_text("RANK");
  cmd->add_option("--timeout", options->timeout_seconds,
                  "Give up when no batch comes for this many seconds: 0.001 to 604800 (default 60)")
      ->check(kTimeoutValidator)
      ->option_text("SECONDS");
  AddBytesOption(cmd, bytes.get());
  AddRuntimeDirOption(cmd, &options->runtime_dir);
  auto run = [options, batches, bytes]() {
    ringfeed::DumpOptions o = *options;
    o.bytes = BytesFormatOf(*bytes);
    o.runtime_dir = RuntimeDirOr(o.runtime_dir);
    if (*batches > 0) o.batches = *batches;
    try {
      const ringfeed::DumpResult r = ringfeed::DumpBatches(o, std::cout);
      if (r.stopped_by != 0 && r.write_errno == 0) {
        std::cout.flush();
        std::cerr << "ringfeedctl dump: stopped by SIG" << sigabbrev_np(r.stopped_by) << " after " << r.printed
                  << " batch(es), every batch taken from the job printed\n";
        return static_cast<ringfeed::ExitStatus>(128 + r.stopped_by);  // as a shell reports a process the signal ended
      }
      if (r.write_errno == EPIPE) {  // the reader went away (`| head`): the documented clean end
        std::cout.clear();
        return ringfeed::kExitOk;
      }
      if (r.write_errno != 0) {
        std::cerr << "ringfeedctl dump: writing standard output failed: " << std::strerror(r.write_errno) << " after "
                  << r.printed << " batch(es); the batch being written was taken from the job (other consumers "
                  << "will not get it)\n";
        std::cout.clear();
        return ringfeed::kExitDataProblems;
      }
      if (r.end_of_data && !r.end_reason.empty()) {
        // The daemon ended the data early (an epoch that delivered no batch): said whatever was dumped.
        std::cout.flush();
        std::cerr << "ringfeedctl dump: job '" << o.job << "' ended its data early: " << r.end_reason << ": "
                  << r.printed << " batch(es) dumped\n";
      } else if (r.end_of_data && (r.printed == 0 || (o.batches && r.printed < *o.batches))) {
        std::cout.flush();
        // In ranks mode the end is this rank's: other ranks' batches may still wait.
        std::cerr << "ringfeedctl dump: job '" << o.job << "' is at the end of its data"
                  << (o.rank >= 0 ? " for rank " + std::to_string(o.rank) + " (every epoch produced and this rank's "
                                                                               "batches taken)"
                                  : std::string(" (every epoch produced and taken)"))
                  << ": " << r.printed << " batch(es) dumped\n";
      }
      return ringfeed::kExitOk;
    } catch (const std::exception& e) {
      std::cout.flush();
      std::cerr << "ringfeedctl dump: " << e.what() << "\n";
      return ringfeed::kExitDataProblems;
    }
  };
  return {cmd, run};
}

}  // namespace

int main(int argc, char** argv) {
  // A closed stdout (`>&-`) is an error for every command (they all print), said before a socket
  // to the daemon can take its descriptor; a closed stdin or stderr becomes /dev/null.
  const std::vector<int> closed = ringfeed::OccupyClosedStandardFds();
  if (std::find(closed.begin(), closed.end(), STDOUT_FILENO) != closed.end()) {
    std::cerr << "ringfeedctl: standard output is closed (>&-): nothing can be printed; redirect it to a file or "
                 "/dev/null instead\n";
    return ringfeed::kExitDataProblems;
  }
  std::ios::sync_with_stdio(false);  // std::cerr stays tied to std::cout: messages keep their place
  CLI::App app("ringfeedctl: ringfeed's command-line tool", "ringfeedctl");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ringfeedctl ") + RINGFEED_VERSION);
  app.footer(
      "Examples:\n"
      "  ringfeedctl inspect --schema data/*.gz\n"
      "  ringfeedctl check job.yaml\n"
      "  ringfeedctl list\n"
      "  ringfeedctl status taxi-train\n"
      "  ringfeedctl dump taxi-train --batches 1\n"
      "Run 'ringfeedctl COMMAND --help' for the options of a command.");

  const std::vector<Command> commands = {
      AddInspectCommand(app),
      AddCheckCommand(app),
      AddListCommand(app),
      AddStatusCommand(app),
      AddDumpCommand(app),
  };

  if (!CheckCommandName(app, argc, argv)) return ringfeed::kExitUsage;
  // A usage error names the command it is about ("ringfeedctl status: JOB is required"), and
  // where that command's help is.
  std::string command_name = "ringfeedctl";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("-")) continue;
    for (const Command& command : commands) {
      if (command.app->get_name() == arg) command_name += " " + std::string(arg);
    }
    break;
  }
  app.failure_message([&command_name](const CLI::App*, const CLI::Error& e) {
    return command_name + ": " + e.what() + "\nRun '" + command_name + " --help' for more information.\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // `check --config job.yaml`, as ringfeedd takes it: check takes the config as its argument.
    // (Not when help was asked for: that comes first.)
    const bool help = dynamic_cast<const CLI::CallForHelp*>(&e) != nullptr ||
                      dynamic_cast<const CLI::CallForAllHelp*>(&e) != nullptr;
    for (int i = 1; i < argc && !help && command_name == "ringfeedctl check"; ++i) {
      const std::string_view arg = argv[i];
      const size_t joined = arg.starts_with("--config=") ? 9 : arg.starts_with("-c=") ? 3 : 0;
      if (joined > 0 || arg == "--config" || arg == "-c") {
        const std::string_view path = joined > 0 ? arg.substr(joined) : i + 1 < argc ? argv[i + 1] : "";
        std::cerr << command_name << ": the job config is check's argument, without --config: ringfeedctl check "
                  << (path.empty() ? std::string_view("CONFIG") : path) << "\n";
        return ringfeed::kExitUsage;
      }
    }
    // CLI11 checks required arguments before unknown ones: `status -x` would say "JOB is
    // required". An unknown option is the error to name.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      for (const Command& command : commands) {
        if (!command.app->parsed()) continue;
        for (const std::string& extra : command.app->remaining()) {
          if (!extra.starts_with("-") || extra == "--") continue;  // "--" ends the options
          return app.exit(CLI::ExtrasError({extra})) == 0 ? ringfeed::kExitOk : ringfeed::kExitUsage;
        }
      }
    }
    const int status = app.exit(e);  // prints help, or the error and a hint to stderr
    return status == 0 ? ringfeed::kExitOk : ringfeed::kExitUsage;
  }
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    errno = 0;
    const int status = command.run();
    // Output that did not reach its file (a full disk, an I/O error) is a failure, not a quiet
    // exit 0. A closed pipe (`| head`) ends the process by SIGPIPE before this, except in dump,
    // which ignores it and handles it itself: a line whose write failed may still be in the
    // buffer, and fail here again (EPIPE), which is that same clean end.
    std::cout.flush();
    if (!std::cout && errno == EPIPE) return status;
    if (!std::cout) {
      std::cerr << "ringfeedctl: writing standard output failed" << (errno != 0 ? ": " : "")
                << (errno != 0 ? std::strerror(errno) : "") << "\n";
      return status == ringfeed::kExitOk ? ringfeed::kExitDataProblems : status;
    }
    return status;
  }
  return ringfeed::kExitUsage;  // unreachable: require_subcommand(1)
}
