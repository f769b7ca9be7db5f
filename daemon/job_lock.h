// One ringfeedd per job: the runtime directory, the job's lock file (`<runtime dir>/<job>.lock`,
// flock-ed for the daemon's lifetime, holding its pid), the start-up stop handler that removes
// it, and the checks a start makes before it takes the job's socket and segment names (a daemon
// of the job that still answers at its socket though its lock file was removed; another daemon
// that took the job meanwhile). The protocol, as operators see it: docs/operations.md ("Runtime
// files", "Stopping").
//
// Errors: StartupError, with the exit status RunDaemon returns (2: needs an operator, which
// systemd's unit does not retry; 1: may pass).
//
// Thread-safety: RunDaemon's main thread (and its event loop, which is the same thread). The
// start-up stop handler (ArmEarlyStop) is async-signal-safe.
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include "shm/file_id.h"

namespace ringfeed {

// A failed start: the message for the log and the process's exit status.
class StartupError : public std::runtime_error {
 public:
  StartupError(const std::string& what, int status = 1) : std::runtime_error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// How long a stop waits for file system calls under way (a read-ahead turn, opening a file) to
// return before ringfeedd gives up on them (docs/operations.md, "Stopping").
inline constexpr auto kStopGrace = std::chrono::milliseconds(5000);

// Until RunDaemon blocks the stop signals and hands them to its event loop: a stop (SIGINT,
// SIGTERM, SIGHUP) ends the process at once, exit status 0, with a log line saying so, removing
// the one thing a start has made by then, the lock file (`lock_path`, `lock_id`: once held; ""
// before). Called before any thread starts (sigaction and the process's signal mask), again
// when the lock is taken. The handler is async-signal-safe (clock_gettime, lstat, unlink, write,
// _exit).
void ArmEarlyStop(const std::string& lock_path = "", shm::FileId lock_id = {});

// The command that shows the job's daemon: `ringfeedctl status JOB`, with --runtime-dir where
// that is not the default one.
std::string StatusCommand(const std::string& job, const std::string& runtime_dir);

// The job's lock file: held (flock) for the daemon's lifetime; holds its pid, and once the
// daemon stops, "PID stopping". A daemon started while the job's previous one is stopping
// (within kStopGrace, ~0.1 s on healthy storage), or has a stop pending (sent while it
// reserved its ring), waits for it instead of refusing.
class LockFile {
 public:
  // Takes the lock, waiting for a stopping daemon of the job; throws StartupError naming the
  // daemon that holds it (or what else is at the lock's name: a symbolic link, a directory,
  // another user's file, a file with hard links). Arms the start-up stop handler with the file.
  LockFile(const std::string& runtime_dir, const std::string& job);
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;
  // Removes the lock file's name if it is still this lock file, and lets go of the lock.
  ~LockFile();

  // Whether the lock file at the path is still this lock. One removed (by hand, a cleaner of old
  // files: start-up may take minutes on slow storage, and a daemon runs for days) is taken
  // again, a new file locked and written as at start; false when another process holds the one
  // there now (a second ringfeedd for the job took it): then this daemon must not take the
  // job's names from under that one. `running`: called once the daemon serves (asio's
  // signal_set has the stop signals: the start-up stop handler is not armed again); the caller
  // says what happened. During start-up it is logged here.
  bool Reassert(bool running = false);
  // Says in the file that this daemon is stopping (a daemon started now waits for it).
  // Longer than the pid line it overwrites, so no truncation: a start reading it meanwhile
  // never finds it empty.
  void MarkStopping() const;
  // Writes "PID\n" to the lock file again when it says something else (another program or a
  // person wrote it in place: a start reading "PID stopping" there would wait minutes for a stop
  // that never comes); returns what it said then (its first 64 bytes, "..." after them when
  // longer), nullopt when it was right, or when what it said is this daemon's own write that
  // failed (a full file system: WriteContent warns once per cause, and says when it succeeds
  // again). Not after MarkStopping. A few system calls: called once a second.
  std::optional<std::string> RestoreContent() const;
  // Removes the lock file's name, keeping the lock: a process that cannot finish exiting (a
  // thread held by storage that does not answer) must not keep the job from starting again.
  // Only while the name is still this lock file: after the runtime directory was removed, it
  // may be the lock of another daemon for the job (shm/file_id.h).
  void Unlink() const { shm::UnlinkIfSame(path_.c_str(), id_); }
  const std::string& path() const { return path_; }
  shm::FileId id() const { return id_; }

 private:
  // How long a start waits for a stopping daemon: one stopped (SIGSTOP) while it stops, its
  // stop's grace for storage and then some (kStopWait); one that runs (a stop pending while it
  // reserves a large ring, or finishing its stop), as long as a systemd unit may take to start
  // (kLongStopWait: TimeoutStartSec=5min in the shipped unit).
  static constexpr auto kStopWait = kStopGrace + std::chrono::seconds(3);
  static constexpr auto kLongStopWait = std::chrono::minutes(5);
  static constexpr auto kRefuseAfter = std::chrono::milliseconds(300);

  enum class Take { kTaken, kHeld, kStale };
  // One try at the lock. kTaken: locked, the pid written, and the start-up stop handler told
  // the file (ArmEarlyStop). kHeld: another process holds it (fd_ left open for a look at what
  // it says). kStale: locked, but the name went meanwhile (a daemon removes it as it exits), so
  // the lock locks nothing: again, afresh. `arm_early_stop`: false once asio's signal_set
  // handles the stop signals (its handler must stay).
  Take TryTake(bool arm_early_stop = true);
  // Opens (creates) the file at path_ into fd_: only this user's regular file with one link,
  // never through a symbolic link; throws StartupError otherwise.
  void Open();
  void Close();
  void WriteContent(const std::string& content) const;

  std::string path_;
  int fd_ = -1;
  shm::FileId id_;
  mutable int write_error_ = 0;  // errno of the last WriteContent that failed; 0 once one succeeded
};

// Creates the runtime directory if needed (each missing directory 0755, whatever the umask) and
// checks it (shm::RuntimeDirProblem): at start, and when it was removed under a running daemon.
// Throws StartupError.
void MakeRuntimeDir(const std::string& runtime_dir);

// What listens at the job's control socket while this daemon starts: a ringfeedd of the job
// whose lock file was removed (by hand, or by a cleaner of old files such as systemd-tmpfiles),
// or another program. Starting would take its names from under it, and two daemons would
// serve one job: throws the StartupError that says which. Returns when nothing listens.
void RefuseIfSocketServed(const std::string& socket_path, const std::string& job, const std::string& runtime_dir,
                          const std::string& lock_path);

// Before this daemon takes the job's segment or socket name: its lock is still the job's lock
// (LockFile::Reassert makes a removed one again), no other daemon answers at the socket, and
// (`segment_path`: once this daemon made it) the segment's name is still its segment: a daemon
// started after the lock file was removed may have replaced it. Throws StartupError.
void TakeJobNamesCheck(LockFile& lock, const std::string& socket_path, const std::string& job,
                       const std::string& runtime_dir, const std::string& segment_path = "",
                       shm::FileId segment_id = {});

}  // namespace ringfeed
