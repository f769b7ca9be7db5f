// Ringfeedd: one running loader daemon for one job — start-up checks, the shared-memory ring,
// the pipeline, the control socket, the heartbeat and systemd notifications, and a clean stop.
//
// Start-up, in order (each failure is a clear message and a non-zero exit, nothing left behind):
//   1. runtime directory (shm/names.h) created; `<job>.lock` locked (flock, daemon/job_lock.h) —
//      a second daemon for the job refuses to start and names the running pid, also when the
//      lock file was removed but that daemon still answers at the job's socket;
//   2. files expanded (daemon/file_list.h); slot size estimated from the first records
//      (ring.slot_bytes: auto) — exact for FixedLen features, for variable ones
//      1.5 x the sampled mean per row plus the largest sampled row;
//   3. the lock checked again (a lock file removed meanwhile is made again; one another daemon
//      took meanwhile ends this start); segment created (a stale one of the same name
//      replaced; /dev/shm space checked and reserved), superblock written and marked ready last;
//   4. control socket listening, pipeline and heartbeat (daemon/heartbeat.h) started, READY=1
//      to systemd; status requests answered from daemon/status_report.h.
// Stop (SIGTERM/SIGINT): pipeline stopped, consumers told (state kStopped with the reason),
// STOPPING=1, socket and segment removed, lock released.
//
// Thread-safety: RunDaemon on the main thread; it owns everything.
#pragma once

#include <cstdint>
#include <string>

#include "config/job_config.h"

namespace ringfeed {

// The largest --start-epoch and --start-batch the command line takes: 10^18 - 1 (18 digits).
inline constexpr uint64_t kMaxStartBatch = 999'999'999'999'999'999;

struct DaemonOptions {
  std::string config_path;
  std::string log_level;    // overrides the config's log_level when set
  std::string runtime_dir;  // overrides the runtime directory rules when set
  bool exit_when_done = false;  // exit once all epochs are produced and every batch is released
  // The first epoch produced (--start-epoch), 0-based as Batch::epoch(): resuming a job from a
  // checkpoint. Epoch e's batches do not depend on the epochs before it (daemon/sequencer.h).
  uint64_t start_epoch = 0;
  // The first batch of start_epoch produced (--start-batch), 0-based as Batch::index(): resuming
  // mid-epoch. The batches before it are read and dropped (their records checked under
  // on_error: fail), not put in the ring; in ranks mode a multiple
  // of consumers.count (every rank took as many).
  uint64_t start_batch = 0;
};

// From now until RunDaemon hands them to its event loop, a stop signal (SIGINT, SIGTERM, SIGHUP)
// ends the process at once with exit status 0 and a log line saying so (the lock file removed
// once RunDaemon holds it): called first thing in main, so that a stop right after exec is a
// clean exit too. Not thread-safe: before any thread starts.
void ArmStartupStop();

// Runs the daemon until it is stopped; returns the process exit status (0 clean stop or done,
// 1 runtime failure, 2 bad config or command line).
int RunDaemon(const DaemonOptions& options);

}  // namespace ringfeed
