// `ringfeedctl check CONFIG`: runs one epoch of a job the way the daemon reads it — every
// file through TFRecordReader and every record through ExampleParser into batches of
// batch.size — applying source.on_error, and reports what a trainer would get. No shuffling,
// no shared memory: it answers "does my config fit my data, and how fast can one core parse it".
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "config/job_config.h"

namespace ringfeed {

struct JobCheckResult {
  uint64_t files = 0;            // files matched by source.files
  uint64_t files_read = 0;       // files read (fewer when on_error: fail stopped the epoch)
  uint64_t records = 0;          // records parsed into batches
  uint64_t batches = 0;          // full batches, plus the last one unless drop_remainder
  uint64_t dropped_records = 0;  // records of a final partial batch dropped by drop_remainder
  uint64_t read_errors = 0;
  uint64_t parse_errors = 0;
  uint64_t bytes = 0;            // serialized record bytes
  double seconds = 0;
  bool failed = false;           // on_error: fail and an error occurred (the check stopped there)
  std::string first_error;
  // Spec features that no sampled record contains, each with a hint ("did you mean 'tips'?").
  std::vector<std::string> absent_features;
};

// The first kMaxProblemsShown problems are printed; the rest are only counted.
constexpr uint64_t kMaxProblemsShown = 20;

// Prints one line per file to `report` and the problems (error:/skipped: lines) to `problems`.
// Throws std::runtime_error for what stops a job before reading (a pattern matching nothing).
JobCheckResult RunJobCheck(const JobConfig& config, std::ostream& report, std::ostream& problems);

}  // namespace ringfeed
