// example_trainer: a stand-in for a training loop, linked only with the ringfeed client
// library (client/client.h). It attaches to a running ringfeedd job, takes batches until the
// end of the data, touches every byte of every feature (as a GPU upload would), checks the
// batch metadata, and prints examples/s per epoch.
//
//   example_trainer --job mnist [--rank R] [--runtime-dir DIR] [--timeout SECONDS] [--epochs N]
//
// Exit status: 0 end of data reached (or --epochs N taken), 1 the daemon failed or went away
// (its message printed), no batch within the timeout, or the data ended before this trainer
// took any batch (the reason printed). --epochs counts the epochs this trainer
// saw batches of (a first one joined midway counts); it stops after the last batch of the Nth,
// or, when another consumer of a shared-mode job took that one, on the first batch of the next
// epoch, which it then drops (no other consumer gets it).
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client/client.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: example_trainer --job JOB [--rank R] [--runtime-dir DIR] [--timeout SECONDS] [--epochs N]\n"
               "Takes every batch of a running ringfeedd job until the end of its data (or, with --epochs N, until\n"
               "it has taken N epochs' batches: for an endless job, epochs: 0) and prints examples/s per epoch.\n"
               "Exit status: 0 done; 1 the daemon failed or went away, no batch within --timeout, or the data\n"
               "ended before this trainer took a batch; 2 a bad command line.\n");
}

// Reads every byte of the batch's features: what a trainer copying it to a GPU would do.
uint64_t TouchEveryByte(const ringfeed::Batch& batch) {
  uint64_t sum = 0;
  for (size_t i = 0; i < batch.feature_count(); ++i) {
    const ringfeed::TensorView t = batch.feature(i);
    const auto* p = static_cast<const uint8_t*>(t.data());
    for (uint64_t b = 0; b < t.bytes(); ++b) sum += p[b];
    for (int64_t v : t.value_offsets()) sum += static_cast<uint64_t>(v);
    for (int64_t v : t.row_splits()) sum += static_cast<uint64_t>(v);
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  // A line at a time also into a pipe or file (scripts/quickstart.sh | tee): in order with the
  // daemon's log lines.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  ringfeed::ClientOptions options;
  double timeout_seconds = 60;
  uint64_t max_epochs = 0;  // 0: until the end of the data
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        Usage();
        std::exit(2);
      }
      return argv[++i];
    };
    // A whole number in [low, high], else usage and exit 2.
    auto number = [&](double low, double high, bool whole) {
      const std::string text = value();
      double v = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (text.empty() || error != std::errc() || end != text.data() + text.size() || !(v >= low && v <= high) ||
          (whole && v != static_cast<double>(static_cast<int64_t>(v)))) {
        std::fprintf(stderr, "example_trainer: %s '%s': expected %s from %g to %g\n", arg.c_str(), text.c_str(),
                     whole ? "a whole number" : "a number", low, high);
        Usage();
        std::exit(2);
      }
      return v;
    };
    if (arg == "--job") options.job = value();
    else if (arg == "--rank") options.rank = static_cast<int>(number(0, 1023, true));
    else if (arg == "--runtime-dir") options.runtime_dir = value();
    else if (arg == "--timeout") timeout_seconds = number(0.001, 1e6, false);
    else if (arg == "--epochs") max_epochs = static_cast<uint64_t>(number(1, 1e15, true));
    else if (arg == "-h" || arg == "--help") { Usage(); return 0; }
    else { Usage(); return 2; }
  }
  if (options.job.empty()) {
    Usage();
    return 2;
  }

  // Taken so far: what an error says came before it (on_error: fail delivers every batch
  // before the bad record).
  uint64_t total_examples = 0, total_batches = 0;
  try {
    auto client = ringfeed::Client::Attach(options);
    const std::string as = client->rank() >= 0 ? "rank " + std::to_string(client->rank()) + " (consumer " +
                                                     std::to_string(client->consumer_id()) + ")"
                                               : "consumer " + std::to_string(client->consumer_id());
    std::printf("attached to job '%s' (ringfeedd pid %d) as %s; %zu features\n", client->job().c_str(),
                client->daemon_pid(), as.c_str(), client->schema().features.size());
    using Clock = std::chrono::steady_clock;
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
    ringfeed::Batch batch;
    uint64_t epoch = 0, epoch_examples = 0, epoch_batches = 0, checksum = 0, epochs_done = 0;
    auto epoch_start = Clock::now();
    const auto start = epoch_start;
    auto report = [&] {
      const double s = std::chrono::duration<double>(Clock::now() - epoch_start).count();
      // An epoch of a few milliseconds (the quickstart's 10,000 records) is timed from its
      // first batch, which may have waited in the ring: the rate is a rough one.
      std::printf("epoch %llu: %llu examples in %llu batches, %.3f s, %.0f examples/s%s\n",
                  static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(epoch_examples),
                  static_cast<unsigned long long>(epoch_batches), s, s > 0 ? epoch_examples / s : 0.0,
                  s < 0.1 ? " (a short epoch: a rough figure)" : "");
    };
    for (;;) {
      const auto status = client->Next(timeout, &batch);
      if (status == ringfeed::Client::Status::kEndOfData) break;
      if (status == ringfeed::Client::Status::kTimeout) {
        std::fprintf(stderr,
                     "example_trainer: no batch for %g s; giving up after %llu examples in all, %llu batches of epoch "
                     "%llu\n",
                     timeout_seconds, static_cast<unsigned long long>(total_examples),
                     static_cast<unsigned long long>(epoch_batches), static_cast<unsigned long long>(epoch));
        // In ranks mode a rank nobody attached as, or one whose trainer does not take its
        // batches, stalls every rank.
        const std::string reason = client->timeout_reason();
        if (!reason.empty()) std::fprintf(stderr, "example_trainer: %s\n", reason.c_str());
        return 1;
      }
      if (batch.epoch() != epoch) {
        if (epoch_batches > 0) {
          report();
          if (++epochs_done == max_epochs) break;  // the batch just taken, of the next epoch, is dropped
        }
        epoch = batch.epoch();
        epoch_examples = epoch_batches = 0;
        epoch_start = Clock::now();
      }
      checksum += TouchEveryByte(batch);
      epoch_examples += batch.rows();
      total_examples += batch.rows();
      ++total_batches;
      ++epoch_batches;
      if (batch.end_of_epoch() && max_epochs != 0 && epochs_done + 1 == max_epochs) {
        report();
        epoch_batches = 0;
        ++epochs_done;
        break;
      }
    }
    if (epoch_batches > 0) report();
    if (max_epochs != 0 && epochs_done == max_epochs) {
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("%llu epoch(s) taken (--epochs): %llu examples, %.0f examples/s from attach (checksum %llu)\n",
                  static_cast<unsigned long long>(epochs_done), static_cast<unsigned long long>(total_examples),
                  s > 0 ? total_examples / s : 0.0, static_cast<unsigned long long>(checksum));
      return 0;
    }
    const std::string end_reason = client->end_reason();
    if (!end_reason.empty()) {
      // The daemon says why it ended the data early: an epoch that delivered no batch (files
      // emptied or rewritten in place, every record skipped, ...). Also on an endless job.
      std::fprintf(stderr, "example_trainer: the data ended %s: %s\n",
                   total_examples == 0 ? "before this trainer took any batch" : "early", end_reason.c_str());
    } else if (total_examples == 0) {
      // An ordinary end before the first batch, as ringfeed's Python binding warns: the batches
      // went to other consumers.
      std::fprintf(stderr,
                   "example_trainer: the data ended before this trainer took any batch: the daemon (pid %d) served "
                   "all its epochs to earlier consumers (restart it, or set epochs: 0; `ringfeedctl status %s` "
                   "shows the batches it produced)\n",
                   static_cast<int>(client->daemon_pid()), client->job().c_str());
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("end of data: %llu examples, %.0f examples/s from attach to end of data (checksum %llu)\n",
                static_cast<unsigned long long>(total_examples), s > 0 ? total_examples / s : 0.0,
                static_cast<unsigned long long>(checksum));
    return total_examples == 0 ? 1 : 0;  // a script must not take "no data" for a run
  } catch (const std::exception& e) {
    if (total_batches > 0) {
      std::fprintf(stderr, "example_trainer: after %llu examples in %llu batches: %s\n",
                   static_cast<unsigned long long>(total_examples), static_cast<unsigned long long>(total_batches),
                   e.what());
    } else {
      std::fprintf(stderr, "example_trainer: %s\n", e.what());
    }
    return 1;
  }
}
