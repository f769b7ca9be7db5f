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

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
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
  std::optional<int64_t> workers;           // parse workers; nullopt = auto
  std::optional<int64_t> prefetch;          // ready batches kept ahead; nullopt = auto
  std::optional<uint64_t> memory_budget;    // bytes; nullopt = auto
  std::optional<double> cpu_budget;         // cores; nullopt = auto
};

struct JobConfig {
  std::string path;  // the file it was loaded from ("<string>" for LoadJobConfigFromString)
  std::string job;   // [A-Za-z0-9_.-]{1,64}; names the job's socket and shared memory
  SourceConfig source;
  FeatureSpecs features;  // in the order written in the file
  BatchConfig batch;
  ShuffleConfig shuffle;
  int64_t epochs = 1;  // 0 = forever
  PipelineConfig pipeline;
};

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

// Loads and validates a job config file. Throws ConfigError (also for an unreadable file or
// YAML syntax errors, with their position).
JobConfig LoadJobConfig(const std::string& path);
// Same, from text; `name` stands for the file name in messages.
JobConfig LoadJobConfigFromString(const std::string& yaml, const std::string& name = "<string>");

// Parses a size such as "64MiB", "2GiB", "1500", "10MB". nullopt when malformed or overflowing.
std::optional<uint64_t> ParseSize(const std::string& text);

}  // namespace ringfeed
