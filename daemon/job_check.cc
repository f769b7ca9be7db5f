#include "daemon/job_check.h"

#include <chrono>

#include "daemon/file_list.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/tfrecord_reader.h"

namespace ringfeed {

JobCheckResult RunJobCheck(const JobConfig& config, std::ostream& log) {
  JobCheckResult result;
  const std::vector<std::string> files = ExpandFiles(config.source.files);
  const bool skip = config.source.on_error == OnError::kSkip;
  ExampleParser parser(config.features);
  ExampleBatch batch(parser.specs(), static_cast<size_t>(config.batch.size));
  ReaderOptions options;
  options.compression = config.source.compression;
  options.max_record_bytes = config.source.max_record_bytes;

  auto error = [&](const std::string& message) {
    if (result.first_error.empty()) result.first_error = message;
    log << (skip ? "skipped: " : "error: ") << message << "\n";
    if (!skip) result.failed = true;
  };

  const auto start = std::chrono::steady_clock::now();
  for (const std::string& file : files) {
    ++result.files;
    TFRecordReader reader(file, options);
    Record record;
    ReadError read_error;
    uint64_t file_records = 0;
    while (!result.failed) {
      const auto status = reader.Next(&record, &read_error);
      if (status == TFRecordReader::Status::kEnd) break;
      if (status == TFRecordReader::Status::kError) {
        ++result.read_errors;
        error(read_error.message);
        continue;  // a non-recoverable error makes the next Next() return kEnd
      }
      result.bytes += record.data.size();
      ParseError parse_error;
      if (!parser.Parse(record.data, batch, &parse_error)) {
        ++result.parse_errors;
        error(file + ": record " + std::to_string(record.index) + " at byte " + std::to_string(record.offset) +
              ": " + parse_error.message);
        continue;
      }
      ++file_records;
      ++result.records;
      if (batch.rows() == batch.capacity()) {
        ++result.batches;
        batch.Clear();
      }
    }
    log << file << ": " << file_records << " records (" << CompressionName(reader.compression()) << ")\n";
    if (result.failed) break;
  }
  if (batch.rows() > 0) {
    if (config.batch.drop_remainder) result.dropped_records = batch.rows();
    else ++result.batches;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace ringfeed
