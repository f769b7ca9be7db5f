#include "daemon/job_lock.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>

#include <spdlog/spdlog.h>

#include "daemon/log_format.h"
#include "shm/names.h"

namespace ringfeed {
namespace {

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
  static inline bool journal = false;  // under systemd: a priority, not the time (SetLogPattern)
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
    if (journal) {
      std::memcpy(line, "<6>", 3);  // info's priority (JournalPriority)
      n = 3;
    } else {
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

}  // namespace

void ArmEarlyStop(const std::string& lock_path, shm::FileId lock_id) { EarlyStop::Arm(lock_path, lock_id); }

std::string StatusCommand(const std::string& job, const std::string& runtime_dir) {
  return "ringfeedctl status " + job + (runtime_dir == shm::RuntimeDir() ? "" : " --runtime-dir " + runtime_dir);
}

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

LockFile::LockFile(const std::string& runtime_dir, const std::string& job) : path_(runtime_dir + "/" + job + ".lock") {
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

bool LockFile::Reassert(bool running) {
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

void LockFile::MarkStopping() const {
  const std::string content = std::to_string(::getpid()) + " stopping\n";
  if (::pwrite(fd_, content.data(), content.size(), 0) < 0) {
    spdlog::warn("cannot write to {}: {}", path_, std::strerror(errno));
  }
}

std::optional<std::string> LockFile::RestoreContent() const {
  const std::string content = std::to_string(::getpid()) + "\n";
  char buf[64] = {};
  const ssize_t n = ::pread(fd_, buf, sizeof buf, 0);
  struct stat st {};
  if (n < 0 || ::fstat(fd_, &st) != 0 ||
      (std::string_view(buf, static_cast<size_t>(n)) == content && st.st_size == static_cast<off_t>(n))) {
    return std::nullopt;
  }
  // What is there after this daemon's own write failed (a full file system) is its own doing.
  const bool own_failed_write = write_error_ != 0;
  WriteContent(content);
  if (own_failed_write) return std::nullopt;
  return st.st_size > n ? std::string(buf, static_cast<size_t>(n)) + "..." : std::string(buf, static_cast<size_t>(n));
}

LockFile::~LockFile() {
  if (fd_ >= 0) {
    Unlink();
    ::close(fd_);
  }
}

LockFile::Take LockFile::TryTake(bool arm_early_stop) {
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

void LockFile::Open() {
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
    // ENOENT with the directory there: a pseudo file system that makes no files (/proc).
    const bool lasting = err == EISDIR || err == EACCES || err == EPERM || err == EROFS || err == ENOTDIR ||
                         (err == ENOENT && std::filesystem::is_directory(path.substr(0, path.rfind('/') + 1)));
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
  } else if ((st.st_mode & 07777) != 0644) {
    // 0644 whatever the umask: ringfeedctl and trainers of other users read the pid in it.
    ::fchmod(fd_, 0644);
  }
}

void LockFile::Close() {
  ::close(fd_);
  fd_ = -1;
}

void LockFile::WriteContent(const std::string& content) const {
  errno = 0;
  const bool written = ::ftruncate(fd_, 0) == 0 &&
                       ::pwrite(fd_, content.data(), content.size(), 0) == static_cast<ssize_t>(content.size());
  const int err = written ? 0 : errno != 0 ? errno : ENOSPC;  // a short write: the file system is full
  // Said once per cause, not at each try (RestoreContent tries again every second).
  if (err != 0 && err != write_error_) {
    spdlog::warn("cannot write the pid to {}: {}; the lock holds, but until the pid is written a start of the job "
                 "and ringfeedctl cannot say which process holds it (tried again every second)",
                 path_, std::strerror(err));
  } else if (err == 0 && write_error_ != 0) {
    spdlog::info("wrote the pid to {} again", path_);
  }
  write_error_ = err;
}

void MakeRuntimeDir(const std::string& runtime_dir) {
  // Each missing directory on the way made 0755 whatever the umask: writable by this user alone,
  // and others reach the socket through it as its own mode (0600, or 0660 with permissions.group)
  // allows. Not 0777 less the umask (std::filesystem::create_directories): under a umask of 0
  // RuntimeDirProblem would refuse it as writable by every user, and under 077 the group of
  // permissions.group could not reach a socket made for it.
  std::error_code ec;
  for (size_t slash = runtime_dir.find('/', 1); !ec; slash = runtime_dir.find('/', slash + 1)) {
    const std::string part = runtime_dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0755) == 0) {
      if (::chmod(part.c_str(), 0755) != 0) ec = std::error_code(errno, std::generic_category());
    } else if (errno != EEXIST) {
      ec = std::error_code(errno, std::generic_category());
    }
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
                         ec == std::errc::too_many_symbolic_link_levels ||
                         ec == std::errc::no_such_file_or_directory;  // made in order: a pseudo file system (/proc)
    throw StartupError("cannot create the runtime directory " + runtime_dir + ": " + ec.message(), lasting ? 2 : 1);
  }
  if (const std::string problem = shm::RuntimeDirProblem(runtime_dir); !problem.empty()) {
    throw StartupError(problem, 2);
  }
}

void TakeJobNamesCheck(LockFile& lock, const std::string& socket_path, const std::string& job,
                       const std::string& runtime_dir, const std::string& segment_path, shm::FileId segment_id) {
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

}  // namespace ringfeed
