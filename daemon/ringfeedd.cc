#include "daemon/ringfeedd.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include <spdlog/fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/autotune.h"
#include "daemon/batch_writer.h"
#include "daemon/budget.h"
#include "daemon/consumer_registry.h"
#include "daemon/control_server.h"
#include "daemon/file_list.h"
#include "daemon/log_format.h"
#include "daemon/pipeline.h"
#include "daemon/read_ahead.h"
#include "daemon/ring_setup.h"
#include "daemon/runtime_names.h"
#include "daemon/segment_guard.h"
#include "daemon/shard.h"
#include "daemon/systemd_notify.h"
#include "daemon/tuning_plan.h"
#include "daemon/thread_name.h"
#include "format/column_sizes.h"
#include "format/example_parser.h"
#include "format/read_queue.h"
#include "format/tfrecord_reader.h"
#include "format/utf8.h"
#include "shm/file_id.h"
#include "shm/futex.h"
#include "shm/names.h"
#include "shm/protocol.h"
#include "shm/ring.h"
#include "shm/segment.h"

namespace ringfeed {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(100);
// How long a stop waits for file system calls under way (a read-ahead turn, opening a file) to
// return before ringfeedd gives up on them (docs/operations.md, "Stopping").
constexpr auto kStopGrace = std::chrono::milliseconds(5000);
// How long every ring slot may stay held by consumers before ringfeedd logs why no batch comes.
constexpr auto kAllHeldWarnAfter = std::chrono::seconds(10);


class StartupError : public std::runtime_error {
 public:
  StartupError(const std::string& what, int status = 1) : std::runtime_error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

spdlog::level::level_enum SpdLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

// Private (anonymous) resident memory of this process (daemon/budget.h); 0 if unreadable.
uint64_t PrivateRssBytes() {
  try {
    return ReadProcessMemory().private_rss();
  } catch (const std::exception&) {
    return 0;
  }
}

// Whether process `pid` has a stop signal (SIGINT, SIGTERM, SIGHUP) pending: sent, and not
// taken yet because it has them blocked (a daemon reserving its ring takes a stop once that is
// done). From /proc/PID/status's SigPnd (the thread's) and ShdPnd (the process's) masks.
bool StopSignalPending(const std::string& pid) {
  std::ifstream status("/proc/" + pid + "/status");
  const uint64_t stops = (uint64_t{1} << (SIGINT - 1)) | (uint64_t{1} << (SIGTERM - 1)) | (uint64_t{1} << (SIGHUP - 1));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
      if (std::strtoull(line.c_str() + 7, nullptr, 16) & stops) return true;
    }
  }
  return false;
}

// Process `pid`'s state letter from /proc/PID/stat (R, S, D, T, t, Z, ...); '\0' when there is
// no such process or its pid is no number.
char ProcessState(const std::string& pid) {
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) return '\0';
  return shm::ProcessState(static_cast<pid_t>(std::stol(pid)));
}

// The command that shows the job's daemon: `ringfeedctl status JOB`, with --runtime-dir where
// that is not the default one.
std::string StatusCommand(const std::string& job, const std::string& runtime_dir) {
  return "ringfeedctl status " + job + (runtime_dir == shm::RuntimeDir() ? "" : " --runtime-dir " + runtime_dir);
}

// The base name of process `pid`'s executable (/proc/PID/exe: a ringfeedd started through a
// link of another name is still ringfeedd), else of its argv[0] (/proc/PID/cmdline, which
// every user may read, where exe is another user's); "" when neither can be read. `*gone`:
// there is no such process (a listening socket can outlive the process that made it, passed
// on to a child).
std::string ProgramName(pid_t pid, bool* gone) {
  const std::string proc = "/proc/" + std::to_string(pid);
  *gone = ::access(proc.c_str(), F_OK) != 0 && errno == ENOENT;
  std::error_code ec;
  std::string path = std::filesystem::read_symlink(proc + "/exe", ec).string();
  if (ec) {
    std::ifstream in(proc + "/cmdline");
    std::getline(in, path, '\0');
  }
  return path.substr(path.find_last_of('/') + 1);
}

// What listens at the job's control socket while this daemon starts: a ringfeedd of the job
// whose lock file was removed (by hand, or by a cleaner of old files such as systemd-tmpfiles),
// or another program. Starting would take its names from under it, and two daemons would
// serve one job: throws the start-up error that says which. Returns when nothing listens.
void RefuseIfSocketServed(const std::string& socket_path, const std::string& job, const std::string& runtime_dir,
                          const std::string& lock_path) {
  const std::optional<shm::SocketPeer> listener = shm::SocketListener(socket_path);
  if (!listener) return;
  if (listener->queue_full) {
    throw StartupError("a process listens at the control socket " + socket_path + " of job '" + job +
                       "' but takes no connection (its queue is full), though no daemon held the job's lock file " +
                       lock_path + ": a ringfeedd of the job stopped with SIGSTOP, its lock file removed by hand or by "
                       "a cleaner of old files? Find it (ps -C ringfeedd -o pid,stat,args), then kill -CONT or stop it");
  }
  const std::string removed = " though its lock file " + lock_path +
                              " was removed (by hand, or by a cleaner of old files such as systemd-tmpfiles); stop it "
                              "first (" + StatusCommand(job, runtime_dir) + ")";
  if (listener->pid == 0) {  // in another PID namespace (a container sharing the runtime directory)
    throw StartupError("ringfeedd for job '" + job + "' is already running (in another PID namespace: its pid is not " +
                       "visible here; it answers at the control socket " + socket_path + ")" + removed);
  }
  const std::string pid = std::to_string(listener->pid);
  bool gone = false;
  const std::string program = ProgramName(listener->pid, &gone);
  if (gone || (!program.empty() && !program.starts_with("ringfeedd"))) {
    throw StartupError("the control socket " + socket_path + " of job '" + job + "' is held by another program" +
                           (gone ? ": the process that listened there (pid " + pid + ") is gone, and one it passed "
                                   "the socket on to still listens"
                                 : ", " + program + " (pid " + pid + "), which listens there") +
                           ": not ringfeedd's to replace; stop it, or use another runtime directory",
                       2);
  }
  const char state = ProcessState(pid);
  if (state == 'T' || state == 't') {
    throw StartupError("ringfeedd for job '" + job + "' (pid " + pid + ", at the control socket " + socket_path +
                       ") is stopped (SIGSTOP, Ctrl-Z or a debugger) though its lock file " + lock_path +
                       " was removed: kill -CONT " + pid + " and stop it first");
  }
  throw StartupError("ringfeedd for job '" + job + "' is already running (pid " + pid +
                     ", which answers at the control socket " + socket_path + ")" + removed);
}

// A stop (SIGINT, SIGTERM, SIGHUP) before the segment is made (waiting for the job's previous
// daemon to exit, listing and sampling the files, which on slow storage takes a while): the
// process ends at once, exit status 0, as for a stop later, removing the one thing it made,
// the lock file, once it holds it, and logging a line as the logger would (with its time, but
// under systemd). Armed first thing in main (ArmStartupStop): a stop right after exec ends the
// process so too, not by the signal's default action (exit status 143). Async-signal-safe:
// clock_gettime, lstat, unlink, write, _exit. From the point where RunDaemon blocks those
// signals, asio's signal_set takes them over.
struct EarlyStop {
  static inline char lock_path[4096] = {};  // "" until the lock is held
  static inline shm::FileId lock_id;
  static inline bool journal = false;  // under systemd: no time in the line (SetLogPattern)
  static inline long utc_offset_seconds = 0;

  // `path`, `id`: the lock file once held; "" before.
  static void Arm(const std::string& path = "", shm::FileId id = {}) {
    if (path.size() >= sizeof lock_path) return;  // the handler then leaves the lock file
    sigset_t stops, old;
    sigemptyset(&stops);
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, signal);
    pthread_sigmask(SIG_BLOCK, &stops, &old);  // no handler in the middle of the copy
    std::memcpy(lock_path, path.c_str(), path.size() + 1);
    lock_id = id;
    journal = std::getenv("JOURNAL_STREAM") != nullptr;
    const time_t now = ::time(nullptr);
    tm local{};
    if (::localtime_r(&now, &local) != nullptr) utc_offset_seconds = local.tm_gmtoff;
    struct sigaction action {};
    action.sa_handler = OnStop;
    action.sa_mask = stops;  // one stop at a time: a second one waits (and never comes back: _exit)
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &action, nullptr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  static void OnStop(int signal) {
    if (lock_path[0] != '\0') shm::UnlinkIfSame(lock_path, lock_id);
    // One write of the whole line (the other stop signals are blocked while this runs): no
    // second signal's line in the middle of it, however slow stderr is.
    char line[256];
    size_t n = 0;
    if (!journal) {
      timespec now{};
      ::clock_gettime(CLOCK_REALTIME, &now);
      FormatLogTime(int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec, utc_offset_seconds, line);
      n = kLogTimeBytes;
    }
    const char* const name = signal == SIGINT ? "SIGINT" : signal == SIGHUP ? "SIGHUP" : "SIGTERM";
    for (const char* part : {"[info] ringfeedd: stopped by ", name,
                             " during start-up (before the ring was made: nothing else to clean up)\n"}) {
      const size_t length = std::min(std::strlen(part), sizeof line - n);
      std::memcpy(line + n, part, length);
      n += length;
    }
    for (size_t written = 0; written < n;) {
      const ssize_t r = ::write(STDERR_FILENO, line + written, n - written);
      if (r <= 0 && errno != EINTR) break;
      if (r > 0) written += static_cast<size_t>(r);
    }
    ::_exit(0);
  }
};

// The job's lock file: held (flock) for the daemon's lifetime; holds its pid, and once the
// daemon stops, "PID stopping". A daemon started while the job's previous one is stopping
// (within kStopGrace, ~0.1 s on healthy storage), or has a stop pending (sent while it
// reserved its ring), waits for it instead of refusing.
class LockFile {
 public:
  LockFile(const std::string& runtime_dir, const std::string& job) : path_(runtime_dir + "/" + job + ".lock") {
    const std::string& path = path_;
    const auto start = std::chrono::steady_clock::now();
    bool waiting = false;
    // The pid last seen stopping: its stop signal, once taken, is no longer pending, and its
    // handler writes " stopping" a moment later; in between it is still stopping.
    std::string stopping_pid;
    // Since when a look at the lock found no stop to wait for (a refusal follows); the epoch
    // while the last look found one. (Not a std::optional: GCC 12 warns that it may be read
    // uninitialized.)
    std::chrono::steady_clock::time_point refusing_since{};
    for (;;) {
      const Take take = TryTake();
      if (take == Take::kTaken) break;
      if (take == Take::kStale) continue;
      char buf[64] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      Close();
      const std::string content = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      const auto now = std::chrono::steady_clock::now();
      const auto waited = now - start;
      const std::string pid = content.empty() ? "unknown" : content.substr(0, content.find_first_of(" \n"));
      // Its state: a stopped process (T: SIGSTOP, Ctrl-Z, a debugger) neither serves nor exits
      // until continued; one that is gone does not hold the lock (another process does, and
      // the file does not name it).
      const char state = ProcessState(pid);
      const bool stopping = state != '\0' && state != 'Z' &&
                            (pid == stopping_pid || content.find(" stopping") != std::string::npos ||
                             StopSignalPending(pid));
      if (stopping) stopping_pid = pid;
      // A refusal only on a view that holds for kRefuseAfter: each look is a few reads apart,
      // and they may catch a moment between two steps of another process: a daemon that took
      // the lock and has not written its pid yet; one that exited between the flock and the
      // look at its state (its lock went with its files, before it became a zombie); one that
      // took its stop signal and has not yet written " stopping" (a CI run under TSan hit it).
      if (stopping) {
        refusing_since = {};
      } else {
        if (refusing_since == std::chrono::steady_clock::time_point{}) refusing_since = now;
        if (now - refusing_since < kRefuseAfter) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
      }
      // A stop waits at most kStopGrace for storage; but a stop sent while the daemon reserves
      // a ring of many GiB takes effect once that is done (tens of seconds): waited for while
      // the process runs, as systemd would wait for it to start.
      const bool frozen = state == 'T' || state == 't';
      const auto limit = frozen ? kStopWait : kLongStopWait;
      if (stopping && waited < limit) {
        if (!waiting) {
          spdlog::info("the job's previous ringfeedd (pid {}) is stopping: waiting for it to exit (at most {} s)", pid,
                       std::chrono::duration_cast<std::chrono::seconds>(limit).count());
          waiting = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      const std::string status_command = StatusCommand(job, runtime_dir);
      if (stopping) {
        const std::string seconds = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit).count());
        throw StartupError("ringfeedd for job '" + job + "' (pid " + pid + ", lock " + path + ") was stopped but has " +
                           "not exited in " + seconds + " s: " +
                           (frozen ? "that process is stopped (SIGSTOP, Ctrl-Z or a debugger): kill -CONT " + pid +
                                         " lets it finish its stop"
                                   : "ps -o stat,wchan -p " + pid + " shows where it is held; if it does not go, "
                                     "kill -KILL " + pid + " and start the job again"));
      }
      // (A stop signal it took just before the SIGSTOP shows nowhere until it runs again: hence
      // "or finishes a stop".)
      if (frozen) {
        throw StartupError("ringfeedd for job '" + job + "' (pid " + pid + ", lock " + path + ") is stopped (SIGSTOP, " +
                           "Ctrl-Z or a debugger): it neither serves its trainers nor exits until continued (kill -CONT " +
                           pid + ": it serves again, or finishes a stop it was sent); stop it first");
      }
      if (state == '\0' && !content.empty()) {
        const bool numeric = pid.find_first_not_of("0123456789") == std::string::npos;
        throw StartupError(
            "ringfeedd for job '" + job + "' is already running: another process holds the lock " + path +
            (numeric ? " (it says pid " + pid + ", which is not running: the file was written by something else)"
                     : " (it names no pid: the file was written by something else; fuser -v " + path +
                           " shows who holds it)"));
      }
      throw StartupError("ringfeedd for job '" + job + "' is already running (pid " + pid + ", lock " + path +
                         "); stop it first (" + status_command + ")");
    }
    if (waiting) spdlog::info("the previous ringfeedd let go of the job's lock");
  }
  // Whether the lock file at the path is still this lock. One removed (by hand, a cleaner of old
  // files: start-up may take minutes on slow storage, and a daemon runs for days) is taken
  // again, a new file locked and written as at start; false when another process holds the one
  // there now (a second ringfeedd for the job took it): then this daemon must not take the
  // job's names from under that one. `running`: called once the daemon serves (asio's
  // signal_set has the stop signals: the start-up stop handler is not armed again); the caller
  // says what happened. During start-up it is logged here.
  bool Reassert(bool running = false) {
    if (struct stat named {}; ::lstat(path_.c_str(), &named) == 0 && shm::FileId::Of(named) == id_) return true;
    const int old_fd = fd_;
    fd_ = -1;
    Take take = Take::kStale;
    try {
      for (int tries = 0; tries < 10 && take == Take::kStale; ++tries) take = TryTake(/*arm_early_stop=*/!running);
    } catch (...) {  // a file there that is no lock file of this user (StartupError)
      if (fd_ >= 0) Close();
      fd_ = old_fd;
      throw;
    }
    if (take != Take::kTaken) {
      if (fd_ >= 0) Close();
      fd_ = old_fd;
      return false;
    }
    ::close(old_fd);  // the lock on the file without a name
    if (!running) {
      spdlog::warn("the lock file {} was removed while ringfeedd started (by hand, or by a cleaner of old files): "
                   "made it again",
                   path_);
    }
    return true;
  }
  // Says in the file that this daemon is stopping (a daemon started now waits for it).
  // Longer than the pid line it overwrites, so no truncation: a start reading it meanwhile
  // never finds it empty.
  void MarkStopping() const {
    const std::string content = std::to_string(::getpid()) + " stopping\n";
    if (::pwrite(fd_, content.data(), content.size(), 0) < 0) {
      spdlog::warn("cannot write to {}: {}", path_, std::strerror(errno));
    }
  }
  // Writes "PID\n" to the lock file again when it says something else (another program or a
  // person wrote it in place: a start reading "PID stopping" there would wait minutes for a stop
  // that never comes); returns what it said then (its first 64 bytes, "..." after them when
  // longer), nullopt when it was right. Not after
  // MarkStopping. A few system calls: called once a second.
  std::optional<std::string> RestoreContent() const {
    const std::string content = std::to_string(::getpid()) + "\n";
    char buf[64] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf, 0);
    struct stat st {};
    if (n < 0 || ::fstat(fd_, &st) != 0 ||
        (std::string_view(buf, static_cast<size_t>(n)) == content && st.st_size == static_cast<off_t>(n))) {
      return std::nullopt;
    }
    WriteContent(content);
    return st.st_size > n ? std::string(buf, static_cast<size_t>(n)) + "..." : std::string(buf, static_cast<size_t>(n));
  }
  // Removes the lock file's name, keeping the lock: a process that cannot finish exiting (a
  // thread held by storage that does not answer) must not keep the job from starting again.
  // Only while the name is still this lock file: after the runtime directory was removed, it
  // may be the lock of another daemon for the job (shm/file_id.h).
  void Unlink() const { shm::UnlinkIfSame(path_.c_str(), id_); }
  ~LockFile() {
    if (fd_ >= 0) {
      Unlink();
      ::close(fd_);
    }
  }
  const std::string& path() const { return path_; }
  shm::FileId id() const { return id_; }

 private:
  // The longest a start waits for a stopping daemon: its stop's grace for storage, and then
  // some; for one that runs but has a stop pending (a large ring still being reserved), as long
  // as a systemd unit may take to start (TimeoutStartSec=5min in the shipped unit).
  static constexpr auto kStopWait = kStopGrace + std::chrono::seconds(3);
  static constexpr auto kLongStopWait = std::chrono::minutes(5);
  static constexpr auto kRefuseAfter = std::chrono::milliseconds(300);

  enum class Take { kTaken, kHeld, kStale };
  // One try at the lock. kTaken: locked, the pid written, and the start-up stop handler told
  // the file (EarlyStop). kHeld: another process holds it (fd_ left open for a look at what it
  // says). kStale: locked, but the name went meanwhile (a daemon removes it as it exits), so
  // the lock locks nothing: again, afresh. `arm_early_stop`: false once asio's signal_set
  // handles the stop signals (its handler must stay).
  Take TryTake(bool arm_early_stop = true) {
    // From the file's creation until the stop handler knows it: a stop meanwhile waits (a few
    // system calls), so that it removes the file too, as its line says.
    sigset_t stops, old;
    sigemptyset(&stops);
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, signal);
    pthread_sigmask(SIG_BLOCK, &stops, &old);
    struct Restore {
      const sigset_t& mask;
      ~Restore() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
    } restore{old};
    Open();
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) return Take::kHeld;
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      id_ = shm::FileId::Of(held);
      WriteContent(std::to_string(::getpid()) + "\n");
      if (arm_early_stop) EarlyStop::Arm(path_, id_);
      return Take::kTaken;
    }
    Close();
    return Take::kStale;
  }

  void Open() {
    const std::string& path = path_;
    // Not through a symbolic link, and only this user's regular file: the pid written below
    // truncates it.
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);  // no wait on a FIFO
    if (fd_ < 0 && errno == ELOOP) {
      throw StartupError("the lock file " + path + " is a symbolic link: not followed (ringfeedd makes a regular "
                         "file there); remove it",
                         2);
    }
    if (fd_ < 0) {
      // A directory there, another user's file, a read-only directory: no restart mends those.
      const int err = errno;
      const bool lasting = err == EISDIR || err == EACCES || err == EPERM || err == EROFS || err == ENOTDIR;
      throw StartupError("cannot open lock file " + path + ": " + std::strerror(err) +
                             (lasting ? "; ringfeedd makes a regular file of its own user there: remove what is "
                                        "there, or use another runtime directory"
                                      : ""),
                         lasting ? 2 : 1);
    }
    if (struct stat st {}; ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      Close();
      throw StartupError("the lock file " + path + " is not a regular file of this user (uid " +
                             std::to_string(::geteuid()) + "): ringfeedd makes one there; remove it",
                         2);
    } else if (st.st_nlink > 1) {  // the pid written below would change the file under its other names
      Close();
      throw StartupError("the lock file " + path + " has " + std::to_string(st.st_nlink) + " hard links: ringfeedd " +
                             "writes its pid to that file, which would change it under its other names too; remove it",
                         2);
    }
  }
  void Close() {
    ::close(fd_);
    fd_ = -1;
  }
  void WriteContent(const std::string& content) const {
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, content.data(), content.size(), 0) < 0) {
      spdlog::warn("cannot write the pid to {}: {}", path_, std::strerror(errno));
    }
  }

  std::string path_;
  int fd_ = -1;
  shm::FileId id_;
};

// Creates the runtime directory if needed and checks it (shm::RuntimeDirProblem): at start, and
// when it was removed under a running daemon. Throws StartupError.
void MakeRuntimeDir(const std::string& runtime_dir) {
  // Each missing directory on the way made 0755 less the umask: writable by this user alone
  // whatever the umask (others reach the socket through it, as permissions.group allows), never
  // 0777 under a umask of 0, which RuntimeDirProblem would then refuse (std::filesystem::
  // create_directories gives 0777 less the umask).
  std::error_code ec;
  for (size_t slash = runtime_dir.find('/', 1); !ec; slash = runtime_dir.find('/', slash + 1)) {
    const std::string part = runtime_dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) ec = std::error_code(errno, std::generic_category());
    if (slash == std::string::npos) break;
  }
  if (!ec && !std::filesystem::is_directory(runtime_dir, ec) && !ec) {
    ec = std::make_error_code(std::errc::not_a_directory);
  }
  if (ec) {
    // Permissions, a file in the way, a read-only file system: no restart mends those (exit 2,
    // not retried by the unit); no space or an I/O error may pass (exit 1).
    const bool lasting = ec == std::errc::permission_denied || ec == std::errc::not_a_directory ||
                         ec == std::errc::read_only_file_system || ec == std::errc::file_exists ||
                         ec == std::errc::operation_not_permitted || ec == std::errc::filename_too_long ||
                         ec == std::errc::too_many_symbolic_link_levels;
    throw StartupError("cannot create the runtime directory " + runtime_dir + ": " + ec.message(), lasting ? 2 : 1);
  }
  if (const std::string problem = shm::RuntimeDirProblem(runtime_dir); !problem.empty()) {
    throw StartupError(problem, 2);
  }
}

// Before this daemon takes the job's segment or socket name: its lock is still the job's lock
// (LockFile::Reassert makes a removed one again), no other daemon answers at the socket, and
// (`segment_path`: once this daemon made it) the segment's name is still its segment: a daemon
// started after the lock file was removed may have replaced it.
void TakeJobNamesCheck(LockFile& lock, const std::string& socket_path, const std::string& job,
                       const std::string& runtime_dir, const std::string& segment_path = "",
                       shm::FileId segment_id = {}) {
  if (!std::filesystem::is_directory(runtime_dir)) {
    throw StartupError("the runtime directory " + runtime_dir + " was removed while ringfeedd started (by hand, or "
                       "by a cleaner of old files): start the job again");
  }
  if (!lock.Reassert()) {
    std::ifstream in(lock.path());
    std::string holder;
    std::getline(in, holder);
    holder = holder.substr(0, holder.find(' '));
    throw StartupError("the lock file " + lock.path() + " was removed while ringfeedd started (by hand, or by a "
                       "cleaner of old files), and another process took the job's lock meanwhile (" +
                       (holder.empty() ? std::string("it names no pid") : "it names pid " + holder) + "; " +
                       StatusCommand(job, runtime_dir) + "): not starting beside it");
  }
  RefuseIfSocketServed(socket_path, job, runtime_dir, lock.path());
  if (!segment_path.empty() && shm::StateOf(segment_path.c_str(), segment_id) != shm::PathState::kSame) {
    throw StartupError("the shared-memory segment " + segment_path + " was removed or replaced while ringfeedd " +
                       "started (another ringfeedd for job '" + job + "' started after the lock file " + lock.path() +
                       " was removed?): not going on without it; start the job again");
  }
}

uint64_t RandomId() {
  uint64_t id = 0;
  if (::getrandom(&id, sizeof id, 0) != sizeof id) {
    id = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ (static_cast<uint64_t>(::getpid()) << 32);
  }
  return id;
}

// Throughput over the last 10 s: one sample of the counters per second (the first at the
// daemon's start, counters 0), the rate from the oldest sample kept (10 s back, or the start
// while the daemon is younger) to the counters now. Thread-safe.
class RateWindow {
 public:
  explicit RateWindow(Clock::time_point start) { Add(start, 0, 0); }
  void Add(Clock::time_point t, uint64_t records, uint64_t bytes) {
    std::lock_guard lock(mutex_);
    samples_.push_back({t, records, bytes});
    while (samples_.size() > 11) samples_.pop_front();
  }
  // records/s, bytes/s from the oldest sample to (`now`, `records`, `bytes`); 0 at the start.
  std::pair<double, double> Rates(Clock::time_point now, uint64_t records, uint64_t bytes) const {
    std::lock_guard lock(mutex_);
    const Sample& a = samples_.front();
    const double dt = std::chrono::duration<double>(now - a.t).count();
    if (dt <= 0) return {0, 0};
    return {static_cast<double>(records - a.records) / dt, static_cast<double>(bytes - a.bytes) / dt};
  }

 private:
  struct Sample {
    Clock::time_point t;
    uint64_t records, bytes;
  };
  mutable std::mutex mutex_;
  std::deque<Sample> samples_;
};

std::string_view EndName(PipelineEnd end) {
  switch (end) {
    case PipelineEnd::kRunning: return "running";
    case PipelineEnd::kEndOfData: return "end_of_data";
    case PipelineEnd::kFailed: return "failed";
    case PipelineEnd::kStopped: return "stopped";
  }
  return "?";
}

// Ranks mode's per-rank part of `status`: ready batches, seconds since the rank last took one,
// and whether it holds every rank up (ConsumerRegistry::RankStates).
nlohmann::json RanksJson(const std::vector<uint32_t>& ready, const std::vector<ConsumerRegistry::RankState>& states) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t r = 0; r < ready.size(); ++r) {
    const ConsumerRegistry::RankState state = r < states.size() ? states[r] : ConsumerRegistry::RankState{};
    out.push_back({{"rank", r},
                   {"ready", ready[r]},
                   {"seconds_since_take", state.seconds_since_take},
                   {"holds_up", state.holds_up}});
  }
  return out;
}

// {"type":"files","first":F} (F default 0): the job's sorted file list from index F, as many
// paths as fit in one reply under shm::kMaxMessageBytes (at least one: a path is < 4 KiB, at most
// 24 KiB as JSON), and the total: {"type":"files","total":N,"first":F,"files":[...]}. The client
// pages through it. Paths go as text, bytes that are not UTF-8 as \xNN (shm/protocol.h): the
// JSON's UTF-8 cannot hold them, and replaced by U+FFFD a name could not be told from another.
nlohmann::json FilesPage(const std::vector<std::string>& files, const nlohmann::json& request) {
  uint64_t first = 0;
  if (request.contains("first")) {
    const nlohmann::json& f = request["first"];
    if (!f.is_number_unsigned() && !(f.is_number_integer() && f.get<int64_t>() >= 0)) {
      return {{"type", "error"}, {"message", "\"first\" must be an integer from 0 to " + std::to_string(files.size())}};
    }
    first = f.get<uint64_t>();
    if (first > files.size()) {
      return {{"type", "error"}, {"message", "\"first\" " + std::to_string(first) + " is past the " +
                                             std::to_string(files.size()) + " files"}};
    }
  }
  // Paths as they will be written: as text, then JSON-escaped (a comma after each).
  constexpr size_t kPageBytes = shm::kMaxMessageBytes - 1024;
  nlohmann::json page = nlohmann::json::array();
  size_t bytes = 0;
  for (size_t i = first; i < files.size(); ++i) {
    std::string text = EscapeNonUtf8(files[i]);
    const size_t size = nlohmann::json(text).dump().size() + 1;
    if (!page.empty() && bytes + size > kPageBytes) break;
    bytes += size;
    page.push_back(std::move(text));
  }
  return {{"type", "files"}, {"total", files.size()}, {"first", first}, {"files", std::move(page)}};
}

// Whether the process has `gid` as its effective or a supplementary group.
bool InGroup(gid_t gid) {
  if (::getegid() == gid) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  const int got = ::getgroups(n, groups.data());
  return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) != groups.begin() + got;
}

// glibc malloc settings for the daemon's heap, which churns in blocks of 0.1-1 MiB: records of
// large-record files and read-ahead chunks (64 KiB), allocated on I/O threads and freed on
// parse workers, and the readers' 1 MiB windows as files open and close. With glibc's dynamic
// defaults, a block over the mmap threshold (128 KiB at first) is mmapped and munmapped, and a
// free that leaves more than twice that threshold unused at the top of a heap gives it back to
// the kernel (trim); either way the memory returns as fresh zero-filled pages, a page fault per
// 4 KiB. On 100 KB records that was 6-10% of the daemon's profile; with these settings (and
// records read straight into their allocation) the daemon's page faults halved, 32k -> 16k
// (docs/benchmarks.md, "End to end", session 4; its CPU moved within the noise). So: keep freed
// memory for reuse, and mmap only blocks of 1 MiB and more when the heap has no free block for
// them: the readers' windows (and a compressed file's input buffer), one per opened file, and
// records that large (a file of records over 1 MiB pays the mmap and its page faults per
// record again: not measured yet). In the heap,
// the windows came and went among the chunks and batches at every file's start and end and
// left holes the next window did not fit: private RSS crept up by 100-400 KiB/min in 5-minute
// soaks at 256 KiB of read-ahead per file; mmapped, it was flat within 60 KiB/min, for a few
// thousand more page faults (taxi, 30 epochs of 9 files: 2.8k -> 6.7-9.5k, throughput within
// the noise; docs/benchmarks.md, "Autotuning", session 9). Private RSS stays at the heap's high-water mark instead of following it down; the
// memory plan (daemon/budget.h) already bounds the peak, not the average.
//
// Arenas: glibc gives each thread that meets contention its own arena, and memory freed into
// one arena serves only the threads on it. Without a shuffle buffer (ReadAhead::UsesChunks),
// records travel in
// read-ahead chunks (one allocation per 64 KiB of records), and with 8 readers (a 20 ms mount) the
// readers' 8 arenas held 30 MiB of freed chunks: private RSS 63-65 MiB, 33-34 MiB with one arena
// at the same throughput (docs/benchmarks.md, "Autotuning", session 5). With a shuffle buffer
// every record is its own allocation (a malloc on a reader and a free on a worker per record),
// and one arena cost 8-18% of throughput there (lock contention), so those jobs keep glibc's
// default — unless the address space is limited (ulimit -v): each further arena reserves a
// 64 MiB heap of it, a thread whose arena could not be made has no heap to fall back on (its
// allocations fail while the main heap has room, also the handler's that reports them; see
// ArmOomReserve), and the mnist example needed 100-120 MB of address space with them, 80-90 MB
// with one. Called before any thread starts. A glibc.malloc setting in GLIBC_TUNABLES wins,
// so an operator can still choose.
constexpr int kMmapThresholdBytes = 1 << 20;
constexpr int kTrimThresholdBytes = 256 << 20;

void TuneMalloc(const JobConfig& config) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  auto tuned = [&](const char* name) { return tunables != nullptr && std::strstr(tunables, name) != nullptr; };
  if (!tuned("glibc.malloc.mmap_threshold")) ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  if (!tuned("glibc.malloc.trim_threshold")) ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
  rlimit address_space{};
  const bool limited = ::getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY;
  if (!tuned("glibc.malloc.arena_max") && (ReadAhead::UsesChunks(config.shuffle.buffer) || limited)) {
    ::mallopt(M_ARENA_MAX, 1);
  }
}

// Raises the soft open-file limit to the hard one (systemd starts services at 1024 soft; the
// unit sets LimitNOFILE=65536) and refuses a job that could still run out of descriptors
// (exit 2), with the arithmetic: out of them, the daemon could open neither its next data file
// nor a trainer's connection.
void CheckOpenFileLimit(const TuningPlan& plan) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      spdlog::debug("open-file limit (RLIMIT_NOFILE) raised from {} to its hard limit {}", limit.rlim_cur,
                    raised.rlim_cur);
      limit = raised;
    }
  }
  if (limit.rlim_cur == RLIM_INFINITY) return;
  // Descriptors open already beyond the plan's allowance for the daemon's own (a parent that
  // leaked hundreds into it) count too.
  FileDescriptorPlan fds = plan.file_descriptors;
  std::error_code ec;
  uint64_t open_now = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    ++open_now;
  }
  if (open_now > 0) --open_now;  // the iterator's own
  if (open_now > kOtherFileDescriptors) {
    const uint64_t inherited = open_now - kOtherFileDescriptors;
    fds.needed += inherited;
    fds.arithmetic += ", + " + std::to_string(inherited) + " more already open at start (inherited) = " +
                      std::to_string(fds.needed);
  }
  const std::string problem = OpenFileLimitProblem(fds, limit.rlim_cur, limit.rlim_max);
  if (!problem.empty()) throw StartupError(problem, 2);
}

}  // namespace

void ArmStartupStop() { EarlyStop::Arm(); }

int RunDaemon(const DaemonOptions& options) {
  // A reader of stderr that goes away (`ringfeedd ... | head`, a FIFO, a closed terminal's
  // pipe) must not end a data loader: with SIGPIPE ignored a log write fails with EPIPE, which
  // spdlog drops, and the daemon goes on.
  ::signal(SIGPIPE, SIG_IGN);
  auto logger = spdlog::stderr_color_mt("ringfeedd");
  // Under systemd the journal adds its own timestamps. Control characters in a message (a file
  // name with a newline) are escaped: daemon/log_format.h.
  SetLogPattern(*logger, std::getenv("JOURNAL_STREAM") != nullptr);
  spdlog::set_default_logger(logger);
  // Armed in main already (ArmStartupStop); again for a RunDaemon called without it. A stop
  // while the config is read (a FIFO not written yet) ends it the same way.
  EarlyStop::Arm();

  JobConfig config;
  try {
    config = LoadJobConfig(options.config_path);
  } catch (const ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  {
    std::error_code ec;  // the log and status name the config by a path that works anywhere
    const std::filesystem::path absolute = std::filesystem::absolute(config.path, ec);
    if (!ec) config.path = absolute.string();
  }
  TuneMalloc(config);
  ArmOomReserve();  // after TuneMalloc: the reserve's blocks come from the heap it configured
  spdlog::set_level(SpdLevel(config.log_level));
  if (!options.log_level.empty()) spdlog::set_level(spdlog::level::from_str(options.log_level));
  if (config.epochs != 0 && options.start_epoch >= static_cast<uint64_t>(config.epochs)) {
    spdlog::error("--start-epoch {}: {} runs epochs: {} (epochs 0 to {}, counted from 0 as the batches' epoch "
                  "field)",
                  options.start_epoch, config.path, config.epochs, config.epochs - 1);
    return 2;
  }

  SystemdNotifier notifier;
  try {
    // 1. Runtime directory and lock.
    std::string runtime_dir = options.runtime_dir.empty() ? shm::RuntimeDir() : options.runtime_dir;
    while (runtime_dir.size() > 1 && runtime_dir.back() == '/') runtime_dir.pop_back();  // no "dir//job.sock"
    const std::string socket_path = shm::SocketPath(runtime_dir, config.job);
    if (socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      throw StartupError("control socket path " + socket_path + " is " + std::to_string(socket_path.size()) +
                             " bytes, longer than a Unix socket allows (" +
                             std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
                             "); use a shorter runtime directory (--runtime-dir, RINGFEED_RUNTIME_DIR) or job name",
                         2);
    }
    MakeRuntimeDir(runtime_dir);
    // A daemon of the job still answering at its socket though its lock file is gone: refused
    // before a lock file is made, which that daemon's check of its names (once a second) could
    // take for a second daemon's.
    if (struct stat st {}; ::lstat((runtime_dir + "/" + config.job + ".lock").c_str(), &st) != 0 && errno == ENOENT) {
      RefuseIfSocketServed(socket_path, config.job, runtime_dir, runtime_dir + "/" + config.job + ".lock");
    }
    LockFile lock(runtime_dir, config.job);  // arms EarlyStop with the lock file
    // The socket's name: a socket there is a killed daemon's, replaced below; anything else needs
    // an operator (exit 2: no restart moves it), said before the files are read and the ring made.
    if (struct stat st {}; ::lstat(socket_path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
      const char* what = S_ISDIR(st.st_mode) ? "a directory" : S_ISREG(st.st_mode) ? "a regular file"
                         : S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO" : "not a socket";
      throw StartupError("control socket " + socket_path + ": that path is " + what + " (uid " +
                             std::to_string(st.st_uid) + "), where ringfeedd puts its socket; remove it, or use "
                             "another runtime directory",
                         2);
    }
    // Checked again now that the lock is this daemon's: a lock file removed just before.
    RefuseIfSocketServed(socket_path, config.job, runtime_dir, lock.path());

    // 2. Files, parser, geometry.
    std::vector<std::string> files;
    try {
      files = ExpandFiles(config.source.files, config.source.file_origins, config.source.files_as_written);
    } catch (const std::exception& e) {
      throw StartupError(e.what(), 2);
    }
    if (std::any_of(files.begin(), files.end(), [](const std::string& f) { return !f.starts_with('/'); })) {
      std::error_code ec;
      static_cast<void>(std::filesystem::current_path(ec));  // what made ExpandFiles keep them relative
      spdlog::warn("ringfeedd's working directory cannot be named ({}): source.files paths stay relative to it, and "
                   "status --files and the client's files() show them so (a trainer elsewhere cannot open them); "
                   "give source.files absolute paths",
                   ec ? ec.message() : "unknown reason");
    }
    ExampleParser parser(config.features);
    const bool ranks = config.consumers.mode == DeliveryMode::kRanks;
    const uint32_t queues = ranks ? static_cast<uint32_t>(config.consumers.count) : 1;

    PipelineOptions po;
    po.sequencer.files = files;
    po.sequencer.cycle_length = config.pipeline.cycle_length;
    po.sequencer.batch_size = config.batch.size;
    po.sequencer.drop_remainder = config.batch.drop_remainder;
    po.sequencer.shuffle_files = config.shuffle.files;
    po.sequencer.seed = config.shuffle.seed;
    po.sequencer.epochs = config.epochs;
    po.sequencer.first_epoch = options.start_epoch;
    if (options.start_epoch > 0) {
      spdlog::info("starting at epoch {} (--start-epoch): {} not produced", options.start_epoch,
                   options.start_epoch == 1 ? std::string("epoch 0 is")
                                            : "epochs 0 to " + std::to_string(options.start_epoch - 1) + " are");
      if (!config.deterministic) {
        spdlog::warn("--start-epoch {} with deterministic: false: epoch {} has the same records, but maybe in other "
                     "batches and another order than in the run you resume (set deterministic: true for an exact "
                     "resume)",
                     options.start_epoch, options.start_epoch);
      }
    }
    po.sequencer.queues = queues;
    po.sequencer.shard_index = config.shard.index;
    po.sequencer.shard_count = config.shard.count;
    po.sequencer.skip_errors = config.source.on_error == OnError::kSkip;
    po.reader.compression = config.source.compression;
    po.reader.max_record_bytes = config.source.max_record_bytes;
    po.deterministic = config.deterministic;

    const Shard shard = Shard::For(files.size(), config.shard.count, config.shard.index);
    const std::vector<uint32_t> shard_files = shard.Files(files.size());
    const RecordSample sample = SampleRecords(config, parser, files, shard_files);
    // As ringfeedctl check says them: a misspelt VarLen name otherwise gives empty rows, silently.
    for (const std::string& warning : sample.warnings) spdlog::warn("{}", warning);
    std::string no_io_uring;
    const bool queued_reads = ReadQueue::Available(&no_io_uring);
    if (!queued_reads) {
      if (config.pipeline.reads_per_file.value_or(1) > 1) {
        spdlog::warn("pipeline.reads_per_file {}: io_uring is not available here ({}); every file is read one read "
                     "at a time",
                     *config.pipeline.reads_per_file, no_io_uring);
      } else {
        spdlog::info("io_uring is not available here ({}): reads_per_file stays at 1 (one read at a time per file)",
                     no_io_uring);
      }
    }
    TuningPlan plan;
    try {
      plan = PlanTuning(config, sample, static_cast<int64_t>(shard_files.size()), queues, PrivateRssBytes(),
                        queued_reads);
    } catch (const BudgetError& e) {
      throw StartupError(e.what(), 2);
    }
    CheckOpenFileLimit(plan);
    const TunerKnobs& start = plan.autotune.initial;
    po.readers = static_cast<size_t>(start.readers);
    po.workers = static_cast<size_t>(start.workers);
    po.prefetch = static_cast<size_t>(start.prefetch);
    po.stream_buffer_bytes = start.stream_buffer_bytes;
    po.reader.reads_in_flight = static_cast<size_t>(start.reads_per_file);
    po.reader.hedged_reads = config.pipeline.hedged_reads;
    // Whether a read can be hedged at all in this run: queued reads (io_uring, reads_per_file
    // above 1 or auto) and not switched off. Status says "off" otherwise.
    const bool hedging = config.pipeline.hedged_reads && queued_reads && plan.autotune.limits.max_reads_per_file > 1;
    po.reader.buffer_bytes = static_cast<size_t>(plan.reader_buffer_bytes);
    po.inflate_unplanned = !plan.inflate_planned;
    // A record past the start-up sample that the budget cannot hold is a too-large record.
    po.reader.max_record_bytes = plan.record_limit_bytes;
    po.reader.max_record_bytes_why = plan.record_limit_why;
    const uint32_t slot_count = plan.slot_count;
    const uint64_t slot_bytes = plan.slot_bytes;
    const shm::Geometry geometry = plan.geometry;
    // One line at info: the whole plan's caps ("16 readers", gigabytes of read-ahead) read as
    // alarming for a small job, though the tuner spends them only where they help.
    spdlog::info("{}", plan.memory.Summary());
    if (!plan.record_limit_why.empty()) spdlog::info("records are read up to {}", plan.record_limit_why);
    if (!plan.knob_caps.empty()) spdlog::info("{}", plan.knob_caps);
    if (!plan.shuffle_buffer_note.empty()) spdlog::info("{}", plan.shuffle_buffer_note);
    if (!plan.batch_size_note.empty()) spdlog::info("{}", plan.batch_size_note);
    if (!plan.memory_budget_warning.empty()) spdlog::warn("{}", plan.memory_budget_warning);
    if (!plan.cpu_budget_warning.empty()) spdlog::warn("{}", plan.cpu_budget_warning);
    if (!plan.batch_size_warning.empty()) spdlog::warn("{}", plan.batch_size_warning);
    if (!plan.slot_bytes_note.empty()) spdlog::warn("{}", plan.slot_bytes_note);
    if (!plan.ring_slots_warning.empty()) spdlog::warn("{}", plan.ring_slots_warning);
    // The buffer is shuffle.buffer whatever the records counted at start: an epoch that reads
    // more (files replaced or grown since) shuffles as a fresh start on those files would. The
    // plan counts at most the records counted; past its share, the budget is checked.
    po.sequencer.shuffle_buffer = config.shuffle.buffer;
    po.sequencer.shuffle_share_bytes = plan.memory.shuffle_bytes;
    po.sequencer.over_budget = [memory = plan.memory, segment = plan.geometry.segment_bytes,
                                buffer = config.shuffle.buffer](uint64_t records, uint64_t bytes) {
      return OverBudgetWarning(memory, MemoryInUse{PrivateRssBytes(), segment, records, bytes}, buffer);
    };
    spdlog::debug("{}", plan.memory.Describe());
    spdlog::info("cpu_budget {} cores ({}): the CPU the daemon's threads may use together",
                 plan.autotune.cpu_budget_cores, plan.autotune.cpu_budget_source);

    // 3. Segment.
    std::optional<gid_t> group;
    mode_t mode = 0600;
    if (!config.permissions.group.empty()) {
      const struct group* g = ::getgrnam(config.permissions.group.c_str());
      if (!g) throw StartupError(MissingGroupMessage(config.permissions), 2);
      group = g->gr_gid;
      // Only root, or a member, may give the segment and socket to the group (chown).
      if (::geteuid() != 0 && !InGroup(*group)) {
        const struct passwd* user = ::getpwuid(::geteuid());
        const std::string name = user ? user->pw_name : std::to_string(::geteuid());
        throw StartupError("permissions.group: ringfeedd runs as user '" + name + "', which is not a member of group '" +
                               config.permissions.group + "' (gid " + std::to_string(*group) +
                               "): add the user to it (usermod -aG " + config.permissions.group + " " + name +
                               "), under systemd give it with SupplementaryGroups=" + config.permissions.group +
                               " in a drop-in, or choose another group",
                           2);
      }
      mode = 0660;
    }
    // From here the stop signals (SIGINT, SIGTERM, SIGHUP) and the ones ringfeedd ignores with a
    // warning (SIGUSR1, SIGUSR2, SIGALRM: their default action would end it without cleaning up)
    // wait (blocked) until their handlers are in place: a stop
    // while the ring is reserved (`systemctl stop` during the start of a large ring) then
    // stops cleanly once start-up is done and the segment is removed, where the default action
    // left it in /dev/shm. Before this point only the lock file needs cleaning up, and a stop
    // during a slow file listing or sampling ends the process at once (EarlyStop). Every thread started from here
    // inherits the mask, so the signals reach this thread alone, which unblocks them once
    // asio's signal_set listens and start-up is done. (Not restored on a start-up error:
    // ringfeedd exits then.)
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM}) sigaddset(&stop_signals, s);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    const std::string segment_name = shm::SegmentName(runtime_dir, config.job);
    // Listing and sampling the files may have taken minutes: before the job's segment and socket
    // are taken, the lock must still be this daemon's, and no daemon must have taken the job.
    TakeJobNamesCheck(lock, socket_path, config.job, runtime_dir);
    // A ring larger than all of /dev/shm needs an operator, as a config error does: exit 2,
    // which the unit does not retry. Too little free space may pass (another job's segment, or
    // one trainers still map after a crash), as may other errors: exit 1, retried.
    std::string replaced;
    shm::Segment segment = [&] {
      try {
        return shm::Segment::Create(segment_name, geometry.segment_bytes, mode, group, &replaced);
      } catch (const shm::SegmentNameTakenError& e) {
        throw StartupError(e.what(), 2);  // needs an operator: not retried
      } catch (const shm::ShmError& e) {
        const uint64_t total = shm::ShmTotalBytes();
        if (geometry.segment_bytes > total) {
          throw StartupError(std::string(e.what()) + " (more than all of /dev/shm, " + shm::HumanBytes(total) +
                                 ": not retried)",
                             2);
        }
        throw StartupError(e.what(), 1);
      }
    }();
    if (!replaced.empty()) {
      // The lock is this daemon's: most often the segment of a daemon of the job that was killed
      // (SIGKILL, OOM killer) or lost its power; rarely one that still runs, its lock file
      // removed under it before it could make it again.
      const bool alive = replaced.find("which still runs") != std::string::npos;
      spdlog::warn("replaced what was at {}: {}{}", shm::Segment::Path(segment_name), replaced,
                   alive ? ": that daemon goes on serving the trainers attached to it, new ones reach this one; stop "
                           "it (see its log)"
                         : " (left by a daemon of this job that did not stop cleanly, or made by another process)");
    }
    // Every way out removes the segment's name, unless it names another file by then.
    struct SegmentRemover {
      std::string path;
      shm::FileId id;
      ~SegmentRemover() { shm::UnlinkIfSame(path.c_str(), id); }
    } remover{shm::Segment::Path(segment_name), segment.file_id()};
    // A segment truncated under the daemon (by a process that may write it) ends it with a
    // message instead of a silent SIGBUS.
    SegmentGuard segment_guard(segment.data(), segment.size(), segment_name, segment.file_id(), socket_path,
                               lock.path(), lock.id());
    shm::Superblock* sb = segment.superblock();
    const uint64_t instance_id = RandomId();
    RingSetup setup;
    setup.job = config.job;
    setup.instance_id = instance_id;
    setup.geometry = geometry;
    setup.slot_count = slot_count;
    setup.slot_bytes = slot_bytes;
    setup.batch_size = static_cast<uint32_t>(config.batch.size);
    setup.ranks = ranks;
    setup.queue_count = queues;
    setup.heartbeat_period_ns = std::chrono::nanoseconds(kHeartbeatPeriod).count();
    try {
      WriteSuperblock(setup, parser.specs(), sb);
    } catch (const std::invalid_argument& e) {
      throw StartupError(e.what(), 2);
    }
    const shm::Ring ring = DaemonRing(setup, segment.data());
    // The superblock as written, from the same inputs into private memory (not read back from
    // the segment, which another process may already have mapped): what RepairRing puts back.
    auto superblock_image = std::make_shared<shm::Superblock>();
    WriteSuperblock(setup, parser.specs(), superblock_image.get());
    spdlog::info("job '{}': {} file{} ({} in this shard), {} feature{}, batch.size {}, ring {} slots x {} + {} "
                 "superblock = {} ({})",
                 config.job, files.size(), files.size() == 1 ? "" : "s", shard_files.size(), parser.specs().size(),
                 parser.specs().size() == 1 ? "" : "s", config.batch.size, slot_count, shm::HumanBytes(slot_bytes),
                 shm::HumanBytes(geometry.slots_offset), shm::HumanBytes(geometry.segment_bytes), segment_name);
    if (shard.count > 1) spdlog::info("{}", shard.Describe(files.size()));

    // 4. Control socket, pipeline, heartbeat.
    asio::io_context io;
    ConsumerRegistry consumers(ring, ranks ? queues : 0);
    // When every slot is held: who holds them and what to do (shm::AllHeldAdvice), the consumers
    // named from the daemon's own records (any process mapping the segment can write its table).
    const auto all_held_advice = [&] {
      const std::vector<ConsumerRegistry::Info> attached = consumers.List();
      const auto name = [&](uint32_t id) {
        for (const ConsumerRegistry::Info& c : attached) {
          if (c.id == id) {
            return "consumer " + std::to_string(id) + " (pid " + std::to_string(c.pid) +
                   (c.rank >= 0 ? ", rank " + std::to_string(c.rank) : std::string()) + ")";
          }
        }
        return "consumer " + std::to_string(id) + " (not attached)";
      };
      const auto needing = static_cast<uint32_t>(std::max<size_t>(attached.size(), ranks ? queues : 0));
      return shm::AllHeldAdvice(shm::HeldPerConsumer(ring), name, needing, slot_count);
    };
    const auto started = Clock::now();
    RateWindow window(started);
    std::atomic<bool> done_producing{false};
    std::atomic<int> exit_status{0};

    std::unique_ptr<Pipeline> pipeline;
    std::unique_ptr<Autotune> autotune;
    // RuntimeNames::Problems as of its last check (below; on the io thread, as status is).
    std::vector<std::string> name_problems;
    auto status_json = [&]() {
      const PipelineStats s = pipeline->Snapshot();
      const auto now = Clock::now();
      const double uptime = std::chrono::duration<double>(now - started).count();
      const auto [rate_records, rate_bytes] = window.Rates(now, s.records, s.record_bytes);
      // The overall rates stop at production's end: they are then the whole run's. (From the
      // pipeline's end time, stored before its end state, which consumers see first: not from
      // on_end, which runs after.)
      const double produced_for =
          s.end == PipelineEnd::kRunning ? -1 : std::chrono::duration<double>(pipeline->ended_at() - started).count();
      const double overall_seconds = produced_for >= 0 ? produced_for : uptime;
      nlohmann::json consumers_json = nlohmann::json::array();
      for (const auto& c : consumers.List()) {
        consumers_json.push_back({{"id", c.id},
                                  {"pid", c.pid},
                                  {"rank", c.rank < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.rank)},
                                  {"batches_taken", c.batches_taken},
                                  {"slots_held", c.slots_held},
                                  {"wait_seconds", static_cast<double>(c.wait_ns) / 1e9},
                                  {"attached_seconds", c.attached_seconds}});
      }
      const uint64_t private_rss = PrivateRssBytes();
      return nlohmann::json{
          {"type", "status"},
          {"job", config.job},
          {"state", EndName(s.end)},
          // What keeps new trainers (or ringfeedctl) from this daemon, or a second daemon
          // out: its segment, socket or lock file removed or replaced under it.
          {"problems", name_problems},
          {"pid", ::getpid()},
          {"config", config.path},
          {"instance_id", Hex16(instance_id)},
          {"uptime_seconds", uptime},
          {"deterministic", config.deterministic},
          {"epoch", s.epoch},
          {"epochs", config.epochs},
          {"start_epoch", options.start_epoch},
          {"files", {{"total", files.size()}, {"in_shard", shard_files.size()}, {"done_in_epoch", s.files_done_in_epoch}}},
          {"shard", {{"index", shard.index}, {"count", shard.count}, {"by", shard.by_record ? "record" : "file"}}},
          {"records", s.records},
          {"batches", s.batches},
          {"record_bytes", s.record_bytes},
          {"throughput",
           {{"records_per_second",
             {{"last_10s", rate_records}, {"overall", overall_seconds > 0 ? s.records / overall_seconds : 0.0}}},
            {"mb_per_second",
             {{"last_10s", rate_bytes / 1e6},
              {"overall", overall_seconds > 0 ? s.record_bytes / overall_seconds / 1e6 : 0.0}}},
            {"production_seconds", produced_for >= 0 ? nlohmann::json(produced_for) : nlohmann::json(nullptr)}}},
          {"ring",
           {{"slots", slot_count},
            {"slot_bytes", slot_bytes},
            {"free", s.slots_free},
            {"filling", s.slots_filling},
            {"ready", s.slots_ready},
            {"held", s.slots_held},
            // Every slot held while production runs: who holds them and what to do.
            {"all_held", s.slots_held >= slot_count && s.end == PipelineEnd::kRunning
                             ? nlohmann::json(all_held_advice())
                             : nlohmann::json(nullptr)}}},
          {"consumers", consumers_json},
          {"ranks_without_consumer", ranks ? nlohmann::json(consumers.RanksWithoutConsumer()) : nlohmann::json(nullptr)},
          {"ranks", ranks ? RanksJson(s.ready_per_queue, consumers.RankStates(s.ready_per_queue)) : nlohmann::json(nullptr)},
          {"batches_reclaimed", consumers.batches_reclaimed()},
          {"ring_repairs", s.ring_repairs},
          {"pipeline",
           {{"cycle_length", config.pipeline.cycle_length},
            {"readers", s.readers},
            {"read_ahead_per_file_bytes", s.stream_buffer_bytes},
            {"reads_per_file", s.reads_per_file},
            {"workers", s.workers},
            {"prefetch", s.prefetch},
            {"open_files", s.open_files},
            {"files_without_queued_reads", s.files_without_queued_reads},
            {"hedged_reads", s.hedged_reads},
            {"hedged_reads_won", s.hedged_reads_won},
            {"hedged_reads_state", !hedging                ? "off"
                                   : s.hedged_reads_paused ? "paused"
                                                           : "on"},
            {"queued_read_round_trip_seconds", static_cast<double>(s.read_round_trip_ns) / 1e9},
            {"read_ahead_bytes", s.read_ahead_bytes}}},
          {"autotune", autotune ? autotune->StatusJson() : nlohmann::json(nullptr)},
          {"memory",
           {{"segment_bytes", geometry.segment_bytes},
            {"private_rss_bytes", private_rss},
            {"budget_bytes", plan.autotune.memory_budget_bytes},
            {"budget_source", plan.autotune.memory_budget_source},
            {"shuffle_buffer_records", s.shuffle_records},
            {"shuffle_buffer_bytes", s.shuffle_bytes},
            {"shuffle_buffer_planned_bytes", plan.memory.shuffle_bytes},
            {"over_budget", OverBudgetWarning(plan.memory, {private_rss, geometry.segment_bytes, s.shuffle_records,
                                                            s.shuffle_bytes}, config.shuffle.buffer)}}},
          {"errors",
           {{"read_errors_skipped", s.read_errors_skipped},
            {"parse_errors_skipped", s.parse_errors_skipped},
            {"batches_dropped", s.batches_dropped},
            {"last_error", s.last_error}}}};
    };

    ControlServer::Handlers handlers;
    handlers.attach = [&](pid_t pid, std::optional<int> rank, std::string* error) {
      const std::optional<uint32_t> id = consumers.Attach(pid, rank, error);
      if (id && pipeline) {
        // The trainer will get no batch (its client says so too, but a C++ loop may not look).
        const PipelineStats s = pipeline->Snapshot();
        if (s.end == PipelineEnd::kEndOfData && s.slots_ready == 0) {
          if (s.batches == 0 && !s.end_message.empty()) {  // the epoch's cause (Sequencer::empty_epoch)
            spdlog::warn("consumer {} (pid {}) attached after the end of the data, and the job produced no batch "
                         "at all: {}", *id, pid, s.end_message);
          } else if (s.batches == 0) {
            spdlog::warn("consumer {} (pid {}) attached after the end of the data, and the job produced no batch "
                         "at all ({} records and {} read errors skipped)", *id, pid, s.parse_errors_skipped,
                         s.read_errors_skipped);
          } else {
            spdlog::warn("consumer {} (pid {}) attached after the end of the data: every epoch was produced and "
                         "taken, so it gets no batch; restart ringfeedd for another pass, or give the job epochs: 0 "
                         "(endless)", *id, pid);
          }
        }
      }
      return id;
    };
    handlers.detach = [&](uint32_t id, pid_t pid) {
      // The pipeline records its end before it writes the end state that consumers act on, and
      // calls on_end after: a consumer that saw the end of the data and left at once may get
      // here in between.
      const PipelineEnd end = pipeline ? pipeline->Snapshot().end : PipelineEnd::kRunning;
      if (end != PipelineEnd::kRunning) consumers.SetProductionEnded(end == PipelineEnd::kEndOfData);
      consumers.Detach(id, pid);
    };
    handlers.request = [&](const nlohmann::json& request) -> nlohmann::json {
      const std::string type = request.value("type", "");
      if (type == "status") return status_json();
      if (type == "files") return FilesPage(files, request);
      // Quoted as JSON and cut: the type is the client's text (control characters, any length);
      // cut at a character boundary, or the dump would turn the part of a character into U+FFFD.
      const std::string quoted = nlohmann::json(type.substr(0, Utf8Prefix(type, 64)))
                                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return {{"type", "error"},
              {"message", "unknown request " + quoted + (type.size() > 64 ? "..." : "") + " (status, files)"}};
    };
    // Reserving a large ring takes a while too.
    TakeJobNamesCheck(lock, socket_path, config.job, runtime_dir, remover.path, remover.id);
    segment_guard.LockFileIs(lock.id());
    ControlServer server(io, socket_path, mode, group,
                         {config.job, segment_name, instance_id}, std::move(handlers));
    segment_guard.SocketBound(server.socket_id());

    pipeline = std::make_unique<Pipeline>(po, parser, ring, [&](PipelineEnd end, const std::string& message) {
      consumers.SetProductionEnded(end == PipelineEnd::kEndOfData);
      if (end == PipelineEnd::kEndOfData) {
        if (message.empty()) spdlog::info("all epochs produced (end of data)");
        else spdlog::warn("end of data: {}", message);
      }
      if (end == PipelineEnd::kFailed) {
        spdlog::error("stopped producing: {}", message);
        exit_status = 1;
      }
      done_producing = true;
    });

    std::atomic<bool> heartbeat_stop{false};
    std::thread heartbeat;
    // Joined on every way out: an exception after it started (signal_set, Autotune) would
    // otherwise destroy a joinable thread (std::terminate, the segment left behind).
    struct HeartbeatJoiner {
      std::atomic<bool>& stop;
      std::thread& thread;
      ~HeartbeatJoiner() {
        stop = true;
        if (thread.joinable()) thread.join();
      }
    } heartbeat_joiner{heartbeat_stop, heartbeat};
    heartbeat = std::thread([&] {
      NameThread("rf-heartbeat");
      const auto watchdog = SystemdNotifier::WatchdogInterval();
      auto next_watchdog = Clock::now();
      auto next_sample = Clock::now();
      Clock::time_point all_held_since{};  // every slot held by consumers since ({}: not now)
      bool all_held_warned = false;
      bool over_budget_warned = false;  // said once per episode: until memory is back under 90% of it
      bool sample_out_of_memory = false;
      while (!heartbeat_stop.load()) {
        const auto now = Clock::now();
        shm::Heartbeat(ring);
        if (watchdog && now >= next_watchdog) {
          notifier.Watchdog();
          next_watchdog = now + *watchdog;
        }
        // The heartbeat itself needs no memory; its once-a-second sample does. Out of memory
        // there fails the job (said once), and the heartbeat goes on: trainers get that reason,
        // not "frozen".
        try {
          if (now >= next_sample) {
            const PipelineStats s = pipeline->Snapshot();
            const auto [r, b] = window.Rates(now, s.records, s.record_bytes);
            window.Add(now, s.records, s.record_bytes);
            // Every slot held for long: the daemon has nowhere to put a batch. Said once per
            // episode; trainers that hold batches this long on purpose need no action.
            if (s.slots_held < slot_count || s.end != PipelineEnd::kRunning) {  // nothing left to make
              all_held_since = {};
              all_held_warned = false;
            } else if (all_held_since == Clock::time_point{}) {
              all_held_since = now;
            } else if (now - all_held_since >= kAllHeldWarnAfter && !all_held_warned) {
              all_held_warned = true;
              spdlog::warn("all {} ring slots have been held by consumers for {} s: no batch can be made until one "
                           "is released; {}",
                           slot_count, std::chrono::duration_cast<std::chrono::seconds>(kAllHeldWarnAfter).count(),
                           all_held_advice());
            }
            // Memory over the budget: the plan was made from the records sampled at start, and
            // records later in the files can be far larger (OverBudgetWarning says which part).
            const MemoryInUse in_use{PrivateRssBytes(), geometry.segment_bytes, s.shuffle_records, s.shuffle_bytes};
            const std::string over = OverBudgetWarning(plan.memory, in_use, config.shuffle.buffer);
            if (!over.empty() && !over_budget_warned) {
              over_budget_warned = true;
              spdlog::warn("{}", over);
            } else if (over.empty() && (in_use.private_rss + in_use.segment_bytes) * 10 < plan.memory.budget_bytes * 9) {
              over_budget_warned = false;
            }
            if (s.end == PipelineEnd::kFailed) {
              // `systemctl status` shows why: the unit stays active (trainers that attach get the
              // same error) until it is stopped, so the reason belongs in its status line.
              notifier.Status("failed: " + s.last_error);
            } else {
              // The epoch counted from 1, as `ringfeedctl status`'s table counts it, with the
              // 0-based number of the log, the batches and --start-epoch beside it. The rates:
              // the last 10 s while production runs, the whole run's once it ended (as the table
              // and `list` give them; the last 10 s would fall towards 0).
              const bool running = s.end == PipelineEnd::kRunning;
              const double produced_for = std::chrono::duration<double>(pipeline->ended_at() - started).count();
              const double records_rate = running || produced_for <= 0 ? r : s.records / produced_for;
              const double mb_rate = (running || produced_for <= 0 ? b : s.record_bytes / produced_for) / 1e6;
              notifier.Status(fmt::format("{}: epoch {} of {} (0-based {}), {} batches, {:.0f} records/s, {:.1f} MB/s{}",
                                          EndName(s.end), s.epoch + 1,
                                          config.epochs == 0 ? std::string("unlimited") : std::to_string(config.epochs),
                                          s.epoch, s.batches, records_rate, mb_rate,
                                          running ? "" : " over the run"));
            }
            next_sample = now + std::chrono::seconds(1);
          }
        } catch (const std::bad_alloc& e) {
          next_sample = now + std::chrono::seconds(1);
          if (!sample_out_of_memory) pipeline->FailOutOfMemory("the heartbeat thread", e);
          sample_out_of_memory = true;
        }
        std::this_thread::sleep_for(kHeartbeatPeriod);
      }
    });

    // SIGHUP (the terminal of a daemon started from a shell went away) stops it like SIGTERM,
    // cleanly: the default action left socket, lock and segment behind.
    asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
    std::string stop_reason;
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      lock.MarkStopping();  // first: a start from now on waits for this daemon to go
      stop_reason = std::string("ringfeedd stopped by SIG") + sigabbrev_np(signal);
      spdlog::info("{}: stopping", stop_reason);
      io.stop();
    });
    asio::signal_set ignored_signals(io, SIGUSR1, SIGUSR2, SIGALRM);
    std::function<void()> ignore_next = [&] {
      ignored_signals.async_wait([&](const boost::system::error_code& ec, int signal) {
        if (ec) return;
        spdlog::warn("ignored SIG{}: ringfeedd stops on SIGTERM, SIGINT or SIGHUP and has no other signal actions",
                     sigabbrev_np(signal));
        ignore_next();
      });
    };
    ignore_next();
    // Destroyed before the signal_sets (declared after them), on every way out: the stop
    // signals are blocked again before asio gives them back their default action, which would
    // end the process mid-cleanup with the segment left in /dev/shm (a SIGTERM while a failed
    // start unwinds, or during the stop).
    struct StopSignalsBlockedAgain {
      const sigset_t& set;
      ~StopSignalsBlockedAgain() { pthread_sigmask(SIG_BLOCK, &set, nullptr); }
    } stop_signals_blocked_again{stop_signals};
    // --exit-when-done: poll for "produced everything and every batch was released".
    asio::steady_timer done_timer(io);
    std::function<void()> check_done = [&] {
      done_timer.expires_after(std::chrono::milliseconds(100));
      done_timer.async_wait([&](const boost::system::error_code& ec) {
        if (ec) return;
        if (done_producing.load()) {
          const PipelineStats s = pipeline->Snapshot();
          // A failed job too waits for its batches before the failure to be taken, and for
          // a consumer to have attached at all (it reads the failure from the segment): a
          // trainer starting after the failure gets the error, not "cannot connect". Batches
          // still held then need no daemon (their mapping outlives it): a trainer that got
          // the error may keep its last one as long as it likes.
          const bool failed = s.end == PipelineEnd::kFailed;
          if (failed ? s.slots_ready == 0 && consumers.consumers_seen() > 0
                     : s.slots_ready == 0 && s.slots_held == 0) {
            stop_reason = failed ? "ringfeedd exited: the job failed; every batch before the failure was delivered"
                                 : "ringfeedd exited: all batches delivered";
            io.stop();
            return;
          }
        }
        check_done();
      });
    };
    if (options.exit_when_done) check_done();
    // The names this daemon created, checked once a second (reap, below) and at the stop; the
    // stop removes only those that still name this daemon's files.
    // A removed lock file or socket is made again while this daemon holds the job's lock.
    const auto remake_lock = [&](std::string* why) {
      try {
        MakeRuntimeDir(runtime_dir);
        if (!lock.Reassert(/*running=*/true)) return shm::FileId{};  // another process holds it: Check says who
      } catch (const std::exception& e) {
        *why = std::string("could not make it again: ") + e.what();
        return shm::FileId{};
      }
      segment_guard.LockFileIs(lock.id());
      return lock.id();
    };
    shm::FileId asked_socket;  // the socket at the path last asked whether anyone listens on it
    const auto remake_socket = [&](std::string* why) {
      if (!remake_lock(why).valid()) {  // the directory and the lock first
        if (why->empty()) *why = "not made again: another process holds the job's lock " + lock.path() + " now";
        return shm::FileId{};
      }
      try {
        // A socket nobody listens on (this daemon's own, moved away and back after it made a new
        // one) is replaced, as at start; anything else there is not this daemon's to remove.
        // Asked once per file: each ask is a connection the listener sees.
        if (struct stat st {}; ::lstat(server.socket_path().c_str(), &st) == 0) {
          if (!S_ISSOCK(st.st_mode) || shm::FileId::Of(st) == asked_socket) return shm::FileId{};
          asked_socket = shm::FileId::Of(st);
          if (!shm::NobodyListens(server.socket_path())) return shm::FileId{};
          ::unlink(server.socket_path().c_str());
        }
        server.Rebind();
      } catch (const std::exception& e) {
        *why = std::string("could not make it again: ") + e.what();
        return shm::FileId{};
      }
      segment_guard.SocketBound(server.socket_id());
      return server.socket_id();
    };
    RuntimeNames names(config.job, runtime_dir, {shm::Segment::Path(segment_name), segment.file_id()},
                       {server.socket_path(), server.socket_id()}, {lock.path(), lock.id()}, remake_socket,
                       remake_lock);
    // Consumers whose process died while a forked child keeps their connection open.
    asio::steady_timer reap_timer(io);
    std::function<void()> reap = [&] {
      reap_timer.expires_after(std::chrono::seconds(1));
      reap_timer.async_wait([&](const boost::system::error_code& ec) {
        if (ec) return;
        names.Check();
        name_problems = names.Problems();
        if (const std::optional<std::string> was = lock.RestoreContent()) {
          spdlog::warn("the lock file {} was written by another program while ringfeedd runs (it said {}): wrote "
                       "this daemon's pid to it again; find what writes files there",
                       lock.path(),
                       nlohmann::json(*was).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        }
        consumers.ReapDead();
        // On this thread, as attaches: a consumer attached during the scan can't be missed.
        pipeline->RepairRing([&](uint32_t id) { return consumers.IsAttached(id); });
        if (ranks) consumers.WatchRanks(pipeline->Snapshot().ready_per_queue);
        reap();
      });
    };
    reap();

    pipeline->Start();
    pipeline->SetSuperblockImage(superblock_image);
    if (plan.tune) {
      autotune = std::make_unique<Autotune>(plan.autotune, *pipeline, ring, consumers);
      autotune->Start();
    }
    notifier.Ready();
    spdlog::info("ready: socket {}, mode {:04o} ({})", server.socket_path(), mode,
                 group ? "the daemon's user and group " + config.permissions.group : std::string("the daemon's user only"));
    // Only now, after every thread of the pipeline and the tuner has started (they inherit the
    // blocked mask, as do the threads they start later): the stop signals reach this thread
    // alone, and a stop requested during start-up arrives now.
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    io.run();

    // Stop: consumers see kStopped with the reason (unless production already ended).
    notifier.Stopping();
    lock.MarkStopping();
    names.Check(/*remake=*/false);  // a change since the last tick is logged too
    pipeline->RequestStop(stop_reason);
    // A thread blocked in a read of storage that does not answer (a hung network mount) would
    // hold the stop until systemd's SIGKILL (TimeoutStopSec=30s in the shipped unit) and leave
    // the segment behind: after kStopGrace ringfeedd names the calls and exits without them.
    std::vector<std::string> in_io;
    if (!pipeline->WaitForIo(kStopGrace, &in_io)) {
      pipeline->Abandon(stop_reason);
      const std::string removed = names.Removal();
      shm::UnlinkIfSame(server.socket_path().c_str(), server.socket_id());
      shm::UnlinkIfSame(remover.path.c_str(), remover.id);
      lock.Unlink();
      spdlog::error("stopping: still blocked {} s after the stop in {}: the storage does not answer; exiting without "
                    "waiting for it ({})",
                    std::chrono::duration_cast<std::chrono::seconds>(kStopGrace).count(), fmt::join(in_io, "; "),
                    removed);
      spdlog::shutdown();
      std::_Exit(1);
    }
    if (autotune) autotune->Stop();  // after WaitForIo: a change of readers joins I/O threads
    pipeline->Join();
    heartbeat_stop = true;
    heartbeat.join();
    spdlog::info("stopped: {}", names.Removal());
    return exit_status.load();
  } catch (const StartupError& e) {
    spdlog::error("{}", e.what());
    return e.status();
  } catch (const shm::ShmError& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::system_error& e) {
    // std::thread's only failure: no thread could be made.
    const bool thread = e.code() == std::errc::resource_unavailable_try_again;
    spdlog::error("{}", thread ? ThreadStartFailure(e) : std::string(e.what()));
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace ringfeed
