// ringfeedd: the ringfeed loader daemon, one per job. See daemon/ringfeedd.h and
// docs/operations.md.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "daemon/ringfeedd.h"

namespace {

// glibc malloc settings for the daemon's heap, which churns in blocks of 0.1-1 MiB: records of
// large-record files and read-ahead chunks (256 KiB), allocated on I/O threads and freed on
// parse workers, and the readers' 1 MiB windows as files open and close. With glibc's dynamic
// defaults, a block over the mmap threshold (128 KiB at first) is mmapped and munmapped, and a
// free that leaves more than twice that threshold unused at the top of a heap gives it back to
// the kernel (trim); either way the memory returns as fresh zero-filled pages, a page fault per
// 4 KiB. On 100 KB records that was 6-10% of the daemon's profile; with these settings (and
// records read straight into their allocation) the daemon's page faults halved, 32k -> 16k
// (docs/benchmarks.md, "End to end", session 4; its CPU moved within the noise). So: keep freed memory for
// reuse, and mmap only single blocks over 32 MiB (a record that large). Private RSS then stays
// at the heap's high-water mark instead of following it down; the memory plan (daemon/budget.h)
// already bounds the peak, not the average. A glibc.malloc setting in GLIBC_TUNABLES wins, so
// an operator can still choose.
constexpr int kMmapThresholdBytes = 32 << 20;
constexpr int kTrimThresholdBytes = 256 << 20;

void TuneMalloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  auto tuned = [&](const char* name) { return tunables != nullptr && std::strstr(tunables, name) != nullptr; };
  if (!tuned("glibc.malloc.mmap_threshold")) ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  if (!tuned("glibc.malloc.trim_threshold")) ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
}

}  // namespace

int main(int argc, char** argv) {
  TuneMalloc();
  ringfeed::DaemonOptions options;
  CLI::App app(
      "ringfeedd: reads the TFRecord files of one job, parses tf.train.Example records, shuffles and batches "
      "them, and serves ready batches to trainer processes through a shared-memory ring.\n"
      "Trainers attach with the client library (client/client.h, client/ringfeed.h); watch it with "
      "`ringfeedctl status JOB`. Stop it with SIGTERM or SIGINT (Ctrl-C).\n"
      "Exit status: 0 stopped cleanly (or done, with --exit-when-done), 1 runtime failure, 2 bad config.",
      "ringfeedd");
  app.add_option("-c,--config", options.config_path, "Job config (YAML; docs/config.md)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--log-level", options.log_level, "Overrides the config's log_level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.add_option("--runtime-dir", options.runtime_dir,
                 "Directory for the control socket and lock file (default: $RINGFEED_RUNTIME_DIR, else "
                 "$RUNTIME_DIRECTORY, else /run/ringfeed for root, else $XDG_RUNTIME_DIR/ringfeed, else "
                 "/tmp/ringfeed-<uid>)");
  app.add_flag("--exit-when-done", options.exit_when_done,
               "Exit once every epoch is produced and every batch has been released by a consumer "
               "(default: keep serving until stopped)");
  app.set_version_flag("--version", std::string("ringfeedd ") + RINGFEED_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A usage error is a configuration error: exit 2, which the systemd unit does not retry.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return ringfeed::RunDaemon(options);
}
