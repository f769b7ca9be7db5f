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
  uint64_t files = 0;
  uint64_t records = 0;         // records parsed into batches
  uint64_t batches = 0;         // full batches, plus the last one unless drop_remainder
  uint64_t dropped_records = 0; // records of a final partial batch dropped by drop_remainder
  uint64_t read_errors = 0;
  uint64_t parse_errors = 0;
  uint64_t bytes = 0;           // serialized record bytes
  double seconds = 0;
  bool failed = false;          // on_error: fail and an error occurred (the check stopped there)
  std::string first_error;
};

// Prints per-file lines and error messages to `log` as it goes. Throws std::runtime_error for
// problems that stop a job before reading (no file matches a glob).
JobCheckResult RunJobCheck(const JobConfig& config, std::ostream& log);

}  // namespace ringfeed
