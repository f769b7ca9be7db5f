// JobConfig: one ringfeed job, loaded from YAML (yaml-cpp) and validated strictly.
//
// Every key is documented with its default in docs/config.md. Validation rules:
//  - unknown keys are errors (a typo must never be silently ignored);
//  - wrong types and impossible values are errors;
//  - every error names the config file, line and column (1-based) and the dotted key path;
//  - `${VAR}` and `${VAR:-default}` in scalar values are replaced from the environment before
//    the value is interpreted (an unset VAR without a default is an error);
//  - sizes accept plain byte counts or units: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB
//    (powers of 1024), e.g. `64MiB`.
// Knobs that may be `auto` are std::nullopt when auto.
//
// Thread-safety: LoadJobConfig is reentrant; JobConfig is a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "format/compression.h"
#include "format/feature_spec.h"

namespace ringfeed {

enum class OnError { kFail, kSkip };

struct SourceConfig {
  std::vector<std::string> files;           // globs, as written (after ${VAR} substitution)
  // Where each entry of `files` was written, "job.yaml:7:5: source.files[0]: ", so that a
  // pattern matching nothing can be reported like a config error. Empty for hand-built configs.
  std::vector<std::string> file_origins;
  // Each entry of `files` as written, before ${VAR} substitution (the same text when it has no
  // variable), so that a pattern matching nothing can name the variables it came from.
  std::vector<std::string> files_as_written;
  Compression compression = Compression::kAuto;
  OnError on_error = OnError::kFail;
  uint64_t max_record_bytes = 256ull << 20;
};

struct BatchConfig {
  int64_t size = 32;            // records per batch, >= 1
  bool drop_remainder = false;  // drop the last, smaller batch of an epoch
};

struct ShuffleConfig {
  bool files = false;      // shuffle the file order every epoch
  int64_t buffer = 0;      // records in the shuffle buffer; 0 or 1 = no record shuffling
  uint64_t seed = 0;       // seed of the project's PRNG (docs/config.md)
};

struct PipelineConfig {
  int64_t cycle_length = 4;                 // files interleaved (tf.data interleave); fixed, part of the order
  std::optional<int64_t> readers;           // files read ahead in parallel; nullopt = auto
  std::optional<uint64_t> read_ahead;       // bytes read ahead per open file, 64 KiB..16 GiB; nullopt = auto
  std::optional<int64_t> reads_per_file;    // reads in flight per plain file, 1..64; nullopt = auto
  bool hedged_reads = true;                 // late queued reads sent again (format/read_queue.h)
  std::optional<int64_t> workers;           // parse workers; nullopt = auto
  std::optional<int64_t> prefetch;          // ready batches kept ahead; nullopt = auto
  std::optional<uint64_t> memory_budget;    // bytes; nullopt = auto
  std::optional<double> cpu_budget;         // cores; nullopt = auto
};

// `shard`: this daemon's part of the data when several nodes read the same files: of the
// sorted file list, the files at positions p with p % count == index (tf.data
// `Dataset.shard(count, index)` on the file list); with fewer files than count, records r with
// r % count == index of every file (daemon/sequencer.h).
struct ShardConfig {
  int64_t index = 0;  // 0 <= index < count
  int64_t count = 1;  // >= 1; 1 = read everything
};

// `ring`: the shared-memory ring's geometry. nullopt = auto (the daemon sizes it from
// batch.size, the features, pipeline.workers/prefetch and the number of queues).
struct RingConfig {
  std::optional<int64_t> slots;        // batches in flight, 2..256 (shm::kMaxSlots)
  std::optional<uint64_t> slot_bytes;  // bytes per slot, 4 KiB..64 GiB
};

// `consumers.mode`: how batches reach the trainer processes attached to the job.
enum class DeliveryMode {
  kShared,  // one queue; every consumer takes the next ready batch
  kRanks,   // one queue per rank (0..count-1); a consumer attaches as one rank
};

struct ConsumersConfig {
  DeliveryMode mode = DeliveryMode::kShared;
  int64_t count = 0;  // ranks: number of ranks, 1..64 (shm::kMaxQueues); 0 in shared mode
};

// `permissions`: who besides the daemon's user may attach.
struct PermissionsConfig {
  // Group given read-write access (socket and segment mode 0660, group-owned); empty = none
  // (owner-only). A name, not yet resolved: the daemon looks it up at start.
  std::string group;
  // Where `group` was written, "job.yaml:30:11: permissions.group: ", so that a group the
  // machine does not have is reported like a config error. Empty for hand-built configs.
  std::string group_origin;
};

// `log_level`: the daemon's log threshold (spdlog's level names).
enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

struct JobConfig {
  std::string path;  // the file it was loaded from ("<string>" for LoadJobConfigFromString)
  std::string job;   // [A-Za-z0-9_.-]{1,64}; names the job's socket and shared memory
  SourceConfig source;
  FeatureSpecs features;  // in the order written in the file
  // The 1-based line of each feature's name in `path`, for messages about a feature that name
  // the config line; empty for hand-built configs.
  std::map<std::string, int> feature_lines;
  BatchConfig batch;
  ShuffleConfig shuffle;
  int64_t epochs = 1;  // 0 = forever
  PipelineConfig pipeline;
  // true: batch k of epoch e is a function of the (sharded) file list, the config and
  // shuffle.seed only, whatever the timing; false: the daemon may hand out whichever batch is
  // ready first.
  bool deterministic = true;
  ShardConfig shard;
  RingConfig ring;
  ConsumersConfig consumers;
  PermissionsConfig permissions;
  LogLevel log_level = LogLevel::kInfo;
};

// The edit distance between two words: insertions, deletions, substitutions and swaps of two
// neighbouring characters count 1 each (the optimal string alignment distance, Damerau 1964).
// For "did you mean" suggestions: config keys, and feature names against those in the data.
size_t EditDistance(std::string_view a, std::string_view b);

// The config words for the enums ("shared", "ranks"; "trace" ... "off"), for logs and status
// output that use the config's names.
std::string_view DeliveryModeName(DeliveryMode mode);
std::string_view LogLevelName(LogLevel level);

// A config problem. what() is the full message:
//   "<file>:<line>:<column>: <key.path>: <problem>"  (line/column omitted when unknown).
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, int line, int column, std::string key, const std::string& problem);
  const std::string& file() const { return file_; }
  int line() const { return line_; }      // 1-based, 0 when unknown
  int column() const { return column_; }  // 1-based, 0 when unknown
  const std::string& key() const { return key_; }

 private:
  std::string file_;
  int line_;
  int column_;
  std::string key_;
};

// The largest config file (or text) the loaders accept, in bytes. A job config is a few
// hundred bytes; yaml-cpp holds a document as a node graph of ~70x its size, so a huge or
// endless file (a wrong path, /dev/zero) is refused before it is parsed.
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

// `s` for messages: control characters (a NUL from "\0" in a quoted scalar, a tab, a newline
// from a ${VAR}) as \xHH, so that a message is never cut short or garbled by them, and with
// `ascii_only` every byte above 0x7E too. Else UTF-8 is kept as written, but for characters
// that show as nothing or as a plain space, written \uXXXX: C1 controls and U+00A0 (no-break
// space), U+00AD, U+2000-U+200F (spaces, zero-width characters), U+2028-U+202F, U+205F-U+2064,
// U+3000 and U+FEFF (a byte order mark).
std::string Escaped(std::string_view s, bool ascii_only = false);

// Why `name` cannot be a job name ("invalid job name 'x/y'; expected ..."), or "" when it can.
std::string JobNameProblem(const std::string& name);

// "job.yaml:30:11: permissions.group: no group named 'trainerz' on this machine; create it ...":
// for a permissions.group that getgrnam() does not find (ringfeedd and ringfeedctl check).
std::string MissingGroupMessage(const PermissionsConfig& permissions);

// Loads and validates a job config file. Throws ConfigError (also for an unreadable file, one
// larger than kMaxConfigBytes, or YAML syntax errors, with their position).
JobConfig LoadJobConfig(const std::string& path);
// Same, from text; `name` stands for the file name in messages.
JobConfig LoadJobConfigFromString(const std::string& yaml, const std::string& name = "<string>");

// Parses a size such as "64MiB", "2GiB", "1500", "10MB". nullopt when malformed or overflowing.
std::optional<uint64_t> ParseSize(const std::string& text);
// For a text ParseSize refused, what was meant, starting "; ": "; that is 2^64 bytes or more"
// (well formed, too large), "; sizes are whole numbers of their unit: 1.5GiB is 1536MiB",
// "; units are case-sensitive: did you mean 64MiB?", "; did you mean 64MiB (2^20 bytes) or
// 64MB (10^6 bytes)?"; "" when nothing better can be said.
std::string SizeHint(const std::string& text);

}  // namespace ringfeed
