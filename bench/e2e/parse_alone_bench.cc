// parse_alone_bench: baseline (a) of the end-to-end benchmark — the job's files read and parsed
// in this one process, with no daemon, ring or consumer: N threads each take the next file
// (epoch by epoch, file by file), read it with TFRecordReader and parse every record with
// ExampleParser into the thread's own ExampleBatch of batch.size rows (cleared when full), as
// `ringfeedctl check` does on one thread. No shuffling.
// With --touch, each thread then reads every byte of every full batch (and of the last, partial
// one) as consume_bench reads every batch from the ring (bench::Touch: values, value_offsets,
// row_splits): a trainer that reads and parses in its own process and uses the data. The
// end-to-end benchmark reports the ring's cost against both: without the touch (the strict
// figure, the target) and with it (like for like: the only difference left is the ring).
//
// Prints one JSON line: {"threads", "touch", "examples", "record_bytes" (serialized records),
// "seconds" (first read to last parse; wall), "examples_per_s", "cpu_seconds" (this process),
// "checksum" (with --touch; else 0)}.
//
//   parse_alone_bench --config job.yaml --threads 2 [--epochs 3] [--touch]
//
// Exit status: 0 ok, 1 a read or parse error (named: file, record, offset), 2 bad config.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/e2e/e2e_common.h"
#include "config/job_config.h"
#include "daemon/file_list.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/tfrecord_reader.h"

int main(int argc, char** argv) {
  std::string config_path;
  size_t threads = 1;
  int64_t epochs = 0;
  bool touch = false;
  CLI::App app("parse_alone_bench: read and parse a job's files in one process (no daemon), print JSON");
  app.add_option("--config", config_path, "Job config (YAML)")->required();
  app.add_option("--threads", threads, "Reader+parser threads")->check(CLI::Range(1, 256));
  app.add_option("--epochs", epochs, "Passes over the files (default: the config's epochs, 0 counted as 1)");
  app.add_flag("--touch", touch, "Read every byte of every parsed batch, as consume_bench does from the ring");
  CLI11_PARSE(app, argc, argv);

  ringfeed::JobConfig config;
  std::vector<std::string> files;
  try {
    config = ringfeed::LoadJobConfig(config_path);
    files = ringfeed::ExpandFiles(config.source.files, config.source.file_origins, config.source.files_as_written);
  } catch (const std::exception& e) {
    std::cerr << "parse_alone_bench: " << e.what() << "\n";
    return 2;
  }
  if (epochs <= 0) epochs = config.epochs > 0 ? config.epochs : 1;
  const ringfeed::ExampleParser parser(config.features);
  ringfeed::ReaderOptions reader_options;
  reader_options.compression = config.source.compression;
  reader_options.max_record_bytes = config.source.max_record_bytes;

  const size_t work_items = files.size() * static_cast<size_t>(epochs);
  std::atomic<size_t> next_item{0};
  std::atomic<uint64_t> examples{0}, record_bytes{0}, checksum{0};
  std::mutex error_mutex;
  std::string error;

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      ringfeed::ExampleBatch batch(parser.specs(), static_cast<size_t>(config.batch.size));
      ringfeed::Record record;
      ringfeed::ReadError read_error;
      ringfeed::ParseError parse_error;
      uint64_t my_examples = 0, my_bytes = 0, my_checksum = 0;
      const auto touch_batch = [&] {
        if (!touch) return;
        for (size_t f = 0; f < batch.specs().size(); ++f) {
          const ringfeed::Column& c = batch.column(f);
          my_checksum += ringfeed::bench::Touch(c.values.data(), c.values.size());
          my_checksum += ringfeed::bench::Touch(c.value_offsets.data(), c.value_offsets.size() * sizeof(int64_t));
          my_checksum += ringfeed::bench::Touch(c.row_splits.data(), c.row_splits.size() * sizeof(int64_t));
        }
      };
      for (size_t item; (item = next_item.fetch_add(1)) < work_items;) {
        const std::string& file = files[item % files.size()];
        ringfeed::TFRecordReader reader(file, reader_options);
        while (true) {
          const auto st = reader.Next(&record, &read_error);
          if (st == ringfeed::TFRecordReader::Status::kEnd) break;
          if (st != ringfeed::TFRecordReader::Status::kRecord) {
            std::lock_guard lock(error_mutex);
            error = read_error.message;
            next_item = work_items;
            return;
          }
          if (batch.rows() == batch.capacity()) {
            touch_batch();
            batch.Clear();
          }
          if (!parser.Parse(record.data, batch, &parse_error)) {
            std::lock_guard lock(error_mutex);
            error = file + ": record " + std::to_string(record.index) + " at byte offset " +
                    std::to_string(record.offset) + ": " + parse_error.message;
            next_item = work_items;
            return;
          }
          ++my_examples;
          my_bytes += record.data.size();
        }
      }
      if (batch.rows() > 0) touch_batch();
      examples += my_examples;
      record_bytes += my_bytes;
      checksum += my_checksum;
    });
  }
  for (auto& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!error.empty()) {
    std::cerr << "parse_alone_bench: " << error << "\n";
    return 1;
  }
  nlohmann::ordered_json out = {
      {"threads", threads},
      {"touch", touch},
      {"examples", examples.load()},
      {"record_bytes", record_bytes.load()},
      {"seconds", seconds},
      {"examples_per_s", seconds > 0 ? static_cast<double>(examples.load()) / seconds : 0.0},
      {"cpu_seconds", ringfeed::bench::SelfCpuSeconds()},
      {"checksum", checksum.load()},
  };
  std::cout << out.dump() << std::endl;
  return 0;
}
