#include "client/control_connection.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "client/client_error.h"
#include "shm/names.h"
#include "shm/protocol.h"
#include "shm/segment.h"

namespace ringfeed::detail {
namespace {

// For a socket at `path` that refused this process (EACCES) though the way to it is open: who
// may connect (its owner, and its group when it may write it) and what lets this process in.
std::string SocketAccessAdvice(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return "run this process as the daemon's user or as a member of the job's permissions.group (id -Gn)";
  }
  const std::string user = shm::UserName(st.st_uid);
  if (!(st.st_mode & S_IWGRP)) {
    return "the socket is user " + user + "'s with mode " + shm::ModeText(st.st_mode) +
           ", which lets only that user connect (the job sets no permissions.group): run this process as " + user +
           ", or give the job a permissions.group this process is in (id -Gn) and restart it";
  }
  const std::string group = shm::GroupName(st.st_gid);
  const std::string my_name = shm::UserName(::geteuid());
  if (shm::AccountInGroup(::geteuid(), st.st_gid)) {
    // Added to the group after this process's login session began: its groups are that session's.
    return "the socket is user " + user + "'s and group " + group + "'s (mode " + shm::ModeText(st.st_mode) +
           ", the job's permissions.group); user " + my_name + " is in group " + group +
           " but this process is not (id -Gn): a process keeps the groups of the login session it started in, "
           "so start it from a new login (or run newgrp " + group + "; restart a service) or run it as " + user;
  }
  return "the socket is user " + user + "'s and group " + group + "'s (mode " + shm::ModeText(st.st_mode) +
         ", the job's permissions.group), and this process is in neither (id -Gn): add its user to the group "
         "(usermod -aG " + group + " " + my_name + ", then log in again) or run it as " + user;
}

// "; jobs there: a, b" for the job sockets in `dir` (at most 8 named), "; no jobs run there",
// or "" when the directory cannot be read.
std::string JobsIn(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return "";
  std::vector<std::string> jobs;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".sock") == 0) {
      const std::string job = name.substr(0, name.size() - 5);
      struct stat st {};
      const bool socket = entry->d_type == DT_SOCK ||
                          (entry->d_type == DT_UNKNOWN && ::lstat((dir + "/" + name).c_str(), &st) == 0 &&
                           S_ISSOCK(st.st_mode));
      if (socket && shm::IsValidJobName(job)) jobs.push_back(job);  // files named like one are not jobs
    }
  }
  ::closedir(d);
  if (jobs.empty()) return "; no jobs run there";
  std::sort(jobs.begin(), jobs.end());
  std::string list;
  for (size_t i = 0; i < jobs.size() && i < 8; ++i) list += (i == 0 ? "" : ", ") + jobs[i];
  if (jobs.size() > 8) list += ", ... (" + std::to_string(jobs.size()) + " in all)";
  return "; jobs there: " + list;
}

// "; job JOB runs one directory down, in DIR/inst: set RINGFEED_RUNTIME_DIR=DIR/inst ..." when a
// socket for `job` is in a subdirectory of `dir` (shm::SubdirectoriesWithSocket: where ringfeedctl
// looks too); "" when none is.
std::string JobOneLevelDown(const std::string& dir, const std::string& job) {
  const std::vector<std::string> found = shm::SubdirectoriesWithSocket(dir, job);
  if (found.empty()) return "";
  if (found.size() == 1) {
    return "; job " + job + " runs one directory down, in " + found[0] + ": set RINGFEED_RUNTIME_DIR=" + found[0] +
           " (or the client's runtime_dir) to attach to it";
  }
  std::string list;
  for (size_t i = 0; i < found.size() && i < 4; ++i) list += (i == 0 ? "" : ", ") + found[i];
  return "; a job " + job + " runs one directory down in each of " + list +
         (found.size() > 4 ? ", ..." : "") + ": set RINGFEED_RUNTIME_DIR (or the client's runtime_dir) to the one to attach to";
}

// What a file that is not a socket is, for messages: "a directory", "a regular file", ...
const char* KindOfFile(mode_t mode) {
  return S_ISDIR(mode) ? "a directory" : S_ISREG(mode) ? "a regular file" : S_ISFIFO(mode) ? "a FIFO (named pipe)"
         : S_ISLNK(mode) ? "a symbolic link" : "another kind of file";
}

}  // namespace

bool RunsRingfeedd(long pid) {
  if (pid <= 0 || shm::ProcessExited(static_cast<pid_t>(pid))) return false;
  const std::string proc = "/proc/" + std::to_string(pid);
  char name[4096] = {};
  ssize_t n = ::readlink((proc + "/exe").c_str(), name, sizeof name - 1);
  const char* base = name;
  if (n > 0) {
    name[n] = '\0';
    if (const char* slash = std::strrchr(name, '/')) base = slash + 1;
  } else {
    const int fd = ::open((proc + "/comm").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    n = ::read(fd, name, sizeof name - 1);
    ::close(fd);
    if (n <= 0) return false;
  }
  return std::strncmp(base, "ringfeedd", 9) == 0;
}

namespace {

// The pid of the live ringfeedd whose segment is the job's (its superblock names it), for a job
// whose lock file names no live daemon (replaced by a directory, say): 0 when there is no such
// segment, or its daemon has exited, or that pid is another program's now.
long LiveSegmentDaemonPid(const std::string& socket_path, const std::string& job) {
  const int32_t pid = shm::Segment::DaemonPid(shm::SegmentName(shm::DirectoryOf(socket_path), job));
  return RunsRingfeedd(pid) ? pid : 0;
}

}  // namespace

std::optional<LockHolder> ReadLockHolder(const std::string& socket_path, const std::string& job) {
  const std::string dir = shm::DirectoryOf(socket_path);
  // Read with plain POSIX calls, as the rest of this file: the client library stays small.
  const auto read_file = [](const std::string& path) {
    std::string text;
    // Non-blocking, and regular files only: a FIFO (or a device) at the lock file's path would
    // otherwise block this open() or read() for good, and with it every attach (attach_timeout
    // included) and ringfeedctl status, list and dump.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return text;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return text;
    }
    char chunk[512];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) != 0 && text.size() < 4096;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(chunk, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
  };
  const std::string lock = read_file(dir + "/" + job + ".lock");
  // ringfeedd writes "PID\n", and "PID stopping\n" once it stops; anything else (another
  // program wrote the file) names no pid.
  char* end = nullptr;
  const long pid = lock.empty() || !std::isdigit(static_cast<unsigned char>(lock[0]))
                       ? 0
                       : std::strtol(lock.c_str(), &end, 10);
  if (pid <= 0 || pid > INT32_MAX ||
      (std::strcmp(end, "\n") != 0 && std::strcmp(end, " stopping\n") != 0 && *end != '\0')) {
    return std::nullopt;
  }
  // A zombie (exited, its parent has not reaped it) is gone all the same, and so is a pid that
  // another program has taken since the daemon died (else taken for a daemon that is starting:
  // attach_timeout would wait for nothing). A process this /proc does not show (hidepid, another
  // user's) is not known to be another program.
  const bool exited = shm::ProcessExited(static_cast<pid_t>(pid));
  const bool reused = !exited && shm::ProcessState(static_cast<pid_t>(pid)) != '\0' && !RunsRingfeedd(pid);
  return LockHolder{pid, std::strcmp(end, " stopping\n") == 0, exited || reused};
}

std::optional<long> GoneDaemonPid(const std::string& socket_path, const std::string& job) {
  const std::optional<LockHolder> holder = ReadLockHolder(socket_path, job);
  return holder && holder->gone ? std::optional<long>(holder->pid) : std::nullopt;
}

ControlConnection::~ControlConnection() { Close(); }

void ControlConnection::Connect(const std::string& path, const std::string& job) {
  Close();
  path_ = path;
  job_ = job;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    throw ClientError("control socket path " + path + " is " + std::to_string(path.size()) +
                      " bytes, longer than a Unix socket allows (" + std::to_string(sizeof addr.sun_path - 1) +
                      "); use a shorter runtime directory (RINGFEED_RUNTIME_DIR)");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  owner_pid_ = getpid();
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw ClientError(std::string("cannot create a Unix socket: ") + std::strerror(errno));
  // A daemon whose queue of connections is full (stopped with SIGSTOP while clients kept
  // connecting) would hold a blocking connect forever: a Unix socket's connect waits at most
  // SO_SNDTIMEO (unix(7)), then fails with EAGAIN. Set back to no limit once connected.
  // A signal (EINTR) starts the connect again with what is left of the limit.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kConnectTimeoutSeconds);
  int rc;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      rc = -1;
      errno = EAGAIN;
      break;
    }
    const timeval connect_timeout{static_cast<time_t>(left.count() / 1'000'000),
                                  static_cast<suseconds_t>(left.count() % 1'000'000)};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &connect_timeout, sizeof connect_timeout);
    rc = connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    if (rc == 0 || errno != EINTR) break;
  }
  if (rc == 0) {
    const timeval no_limit{0, 0};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &no_limit, sizeof no_limit);
  }
  if (rc != 0) {
    const int err = errno;
    close(fd_);
    fd_ = -1;
    if (err == EAGAIN) {
      throw ClientError("ringfeedd for job " + job + " at " + path + " takes no connection: its queue of " +
                        "connections stayed full for " + std::to_string(kConnectTimeoutSeconds) +
                        " s (a ringfeedd stopped with SIGSTOP, or one that does not keep up with its clients; ps -o "
                        "pid,stat -C ringfeedd shows a stopped one as T)");
    }
    std::string message = "cannot connect to ringfeedd for job " + job + " at " + path + ": " + std::strerror(err);
    struct stat st {};
    if (err == ECONNREFUSED && ::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
      // connect() says "refused" for any path that is not a listening socket.
      message += std::string("; ") + path + " is " +
                 (S_ISLNK(st.st_mode) ? "a symbolic link to what is no socket" : KindOfFile(st.st_mode)) +
                 ", not a socket";
      // A live daemon whose socket was replaced so: it makes its socket again once the path is free.
      if (const std::optional<LockHolder> holder = ReadLockHolder(path, job);
          holder && !holder->gone && RunsRingfeedd(holder->pid)) {
        message += ": ringfeedd (pid " + std::to_string(holder->pid) + ") holds the job's lock but cannot be " +
                   "reached while that file is in the way of its socket; remove the file, and the daemon makes " +
                   "its socket again within a second";
      } else if (const long pid = LiveSegmentDaemonPid(path, job); pid > 0) {
        // Its lock file is no lock file it can take again either (a directory there, another
        // user's file): it makes its socket only through its lock.
        const std::string lock = shm::DirectoryOf(path) + "/" + job + ".lock";
        struct stat lock_st {};
        const std::string there = ::lstat(lock.c_str(), &lock_st) != 0 ? "is missing"
                                  : S_ISREG(lock_st.st_mode)          ? "names no running ringfeedd (not its lock)"
                                                                      : std::string("is ") + KindOfFile(lock_st.st_mode);
        message += ": ringfeedd (pid " + std::to_string(pid) + "), whose shared-memory segment is the job's, runs " +
                   "but cannot be reached while that file is in the way of its socket, and its lock file " + lock +
                   " " + there + "; remove what is at both paths, and the daemon makes them again within a second";
      } else {
        message += ": no ringfeedd made it (remove it, or use another runtime directory)";
      }
      throw DaemonNotRunningError(message);
    }
    // Refused because the daemon that made the socket is gone: said so, as ringfeedctl status says it.
    // (Another user is denied a dead daemon's socket before the refusal: the same then.)
    if (const auto pid = err == ECONNREFUSED || err == EACCES ? GoneDaemonPid(path, job) : std::nullopt) {
      throw DaemonGoneError("job '" + job + "' is not running: its ringfeedd (pid " + std::to_string(*pid) +
                            ") is gone and left its socket " + path +
                            " (killed or crashed: its log says why); starting the job again cleans up");
    }
    if (err == ENOENT && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      throw DaemonNotRunningError(message + "; " + path + " is a symbolic link to a file that does not exist, not a " +
                                  "socket: no ringfeedd made it (remove it, or use another runtime directory)");
    }
    if (err == ENOENT || err == ECONNREFUSED) {
      const size_t slash = path.find_last_of('/');
      if (err == ENOENT && slash != std::string::npos) {
        const std::string dir = path.substr(0, slash);
        const std::string below = JobOneLevelDown(dir, job);
        if (!below.empty()) throw DaemonNotRunningError(message + below);
        message += JobsIn(dir);
      }
      // The lock held by a live daemon that does not listen (yet, or any more): one starting
      // (listing and sampling the files, reserving the ring) after one that was killed left its
      // socket, one stopping, or one whose socket was removed (it makes it again within 1 s).
      if (const std::optional<LockHolder> holder = ReadLockHolder(path, job); holder && !holder->gone) {
        throw DaemonNotRunningError(
            message + "; ringfeedd (pid " + std::to_string(holder->pid) + ") holds the job's lock but does not " +
            (holder->stopping ? std::string("listen any more: it is stopping")
                              : std::string("listen yet: it is starting (listing and sampling the files, reserving "
                                            "the ring), or its socket was removed and it makes it again within a "
                                            "second; wait for it (attach_timeout) or see its log")));
      }
      message += "; is ringfeedd running for job " + job +
                 " (ringfeedctl list; under systemd: systemctl status 'ringfeed@*', the instance named after the config "
                 "file)? If it uses another runtime directory, "
                 "set RINGFEED_RUNTIME_DIR or the client's runtime_dir option (ClientOptions::runtime_dir; "
                 "runtime_dir= in Python) to it";
      throw DaemonNotRunningError(message);
    } else if (err == EACCES) {
      // Denied on the way to the socket (the runtime directory's mode), not by the socket's
      // own mode: another user or group would not help when this one owns the directory.
      const std::string dir = shm::DirectoryOf(path);
      if (::faccessat(AT_FDCWD, dir.c_str(), X_OK, AT_EACCESS) != 0 && errno == EACCES) {
        const std::string permissions = shm::RuntimeDirPermissions(dir);
        message += "; this process cannot enter the runtime directory " + dir +
                   (permissions.empty() ? "" : " (" + permissions + ")");
      } else if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && st.st_uid == ::geteuid()) {
        message += "; the socket is this user's but its mode is " + shm::ModeText(st.st_mode) +
                   " (ringfeedd makes it 0600, 0660 with permissions.group): something changed it; restart the job";
      } else {
        message += "; " + SocketAccessAdvice(path);
      }
      throw AccessDeniedError(message);
    }
    throw ClientError(message);
  }
  // Who listens there (the kernel's word, SO_PEERCRED): a socket another local user could
  // have put in its place is not trusted with this process's batches (shm::UntrustedDaemon).
  ucred peer{};
  socklen_t peer_size = sizeof peer;
  const std::string why = ::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) != 0
                              ? std::string("cannot tell who listens at ") + path + " (SO_PEERCRED: " +
                                    std::strerror(errno) + ")"
                              : shm::UntrustedDaemon(path, peer.uid);
  if (!why.empty()) {
    close(fd_);
    fd_ = -1;
    throw ClientError("not attaching to job " + job + ": " + why);
  }
}

void ControlConnection::SendLine(const std::string& line) {
  std::string data = line + "\n";
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      // A daemon that refuses a connection before reading it (too many connections) writes
      // its reason and closes: the reason, not EPIPE, is what the caller's ReadLine gets.
      try {
        const std::string reason = ReadLine(std::chrono::milliseconds(200));
        buffered_.insert(0, reason + "\n");
        return;
      } catch (const ClientError&) {
      }
      const std::string message = "cannot write to ringfeedd's control socket " + path_ + ": " + std::strerror(err);
      if (err == EPIPE || err == ECONNRESET) {
        throw ConnectionClosedError(message + " (is it stopping or restarting? attach again once it runs)");
      }
      throw ClientError(message);
    }
    sent += static_cast<size_t>(n);
  }
}

std::string ControlConnection::WhyNoAnswer() const {
  // The daemon's lock file names it: its state tells a stopped one from one that runs but
  // cannot take the connection (out of file descriptors: its accept fails, the connection
  // waits in the socket's queue).
  const std::optional<LockHolder> holder = ReadLockHolder(path_, job_);
  if (!holder || holder->gone || !RunsRingfeedd(holder->pid)) return " (stopped or frozen?)";
  const std::string pid = std::to_string(holder->pid);
  if (const std::string stopped = shm::StoppedProcess(static_cast<pid_t>(holder->pid)); !stopped.empty()) {
    return ": ringfeedd (pid " + pid + ") for job " + job_ + " is " + stopped +
           "; it answers once continued (kill -CONT " + pid + ")";
  }
  const char state = shm::ProcessState(static_cast<pid_t>(holder->pid));
  return ": ringfeedd (pid " + pid + ") for job " + job_ + " runs (state " + std::string(1, state ? state : '?') +
         ") but did not answer: out of file descriptors (its log then says \"cannot accept a connection: Too many "
         "open files\"), or its main thread is stuck; see its log";
}

std::string ControlConnection::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    if (buffered_.size() > shm::kMaxMessageBytes) {
      throw ClientError("ringfeedd sent a control message longer than " +
                        std::to_string(shm::kMaxMessageBytes) + " bytes on " + path_);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw ClientError("ringfeedd did not answer the hello on " + path_ + " within " +
                        std::to_string(timeout.count()) + " ms" + WhyNoAnswer());
    }
    if (interrupted_ && interrupted_()) {
      throw ClientInterrupted("the wait for ringfeedd's answer on " + path_ + " was interrupted");
    }
    pollfd pfd{fd_, POLLIN, 0};
    const int slice_ms = interrupted_ ? std::min<int>(static_cast<int>(left.count()), 100) : static_cast<int>(left.count());
    int rc = poll(&pfd, 1, slice_ms);
    if (rc < 0 && errno != EINTR) throw ClientError(std::string("poll on the control socket failed: ") + std::strerror(errno));
    if (rc <= 0) continue;
    char chunk[4096];
    ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    // Both happen when the daemon stops (or exits) between accepting the connection and answering.
    if (n < 0) {
      const int err = errno;
      const std::string message = "cannot read ringfeedd's control socket " + path_ + ": " + std::strerror(err) +
                                  " (is it stopping or restarting? attach again once it runs)";
      if (err == ECONNRESET) throw ConnectionClosedError(message);
      throw ClientError(message);
    }
    if (n == 0) {
      throw ConnectionClosedError("ringfeedd closed the control connection on " + path_ +
                                  " before answering (is it stopping or restarting? attach again once it runs)");
    }
    buffered_.append(chunk, static_cast<size_t>(n));
  }
}

bool ControlConnection::DaemonClosed() {
  if (fd_ < 0) return true;
  for (;;) {
    pollfd pfd{fd_, POLLIN | POLLRDHUP, 0};
    int rc = poll(&pfd, 1, 0);
    if (rc < 0) return errno != EINTR ? true : false;
    if (rc == 0) return false;
    if (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) return true;
    char chunk[4096];
    ssize_t n = recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    // Data after the welcome: nothing is defined yet; drop it and look again.
  }
}

void ControlConnection::Close() {
  buffered_.clear();
  if (fd_ < 0) return;
  // A forked child closes only its copy of the descriptor: the bye would speak for the parent.
  if (getpid() != owner_pid_) {
    close(fd_);
    fd_ = -1;
    return;
  }
  std::string bye = std::string("{\"type\":\"") + shm::kMessageBye + "\"}\n";
  (void)send(fd_, bye.data(), bye.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd_);
  fd_ = -1;
}

}  // namespace ringfeed::detail
