#include "shm/names.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>

namespace ringfeed::shm {
namespace {

std::string_view Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string_view(value) : std::string_view();
}

}  // namespace

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string RuntimeDir() {
  if (auto dir = Env("RINGFEED_RUNTIME_DIR"); !dir.empty()) return std::string(dir);
  if (auto dirs = Env("RUNTIME_DIRECTORY"); !dirs.empty()) {
    std::string_view first = dirs.substr(0, dirs.find(':'));
    if (!first.empty()) return std::string(first);
  }
  if (geteuid() == 0) return "/run/ringfeed";
  if (auto xdg = Env("XDG_RUNTIME_DIR"); !xdg.empty()) return std::string(xdg) + "/ringfeed";
  return FallbackRuntimeDir();
}

std::string FallbackRuntimeDir() { return "/tmp/ringfeed-" + std::to_string(geteuid()); }

bool IsValidJobName(std::string_view job) {
  const auto allowed = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  };
  return !job.empty() && job.size() <= kMaxJobNameBytes && job[0] != '.' && job[0] != '-' &&
         std::all_of(job.begin(), job.end(), allowed);
}

std::string SocketPath(std::string_view runtime_dir, std::string_view job) {
  std::string path(runtime_dir);
  path += '/';
  path += job;
  path += ".sock";
  return path;
}

std::vector<std::string> SubdirectoriesWithSocket(const std::string& runtime_dir, std::string_view job) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(runtime_dir, ec)) {
    std::error_code type_ec;
    if (!entry.is_directory(type_ec)) continue;
    const std::string sub = entry.path().string();
    if (std::filesystem::exists(SocketPath(sub, job), type_ec)) found.push_back(sub);
  }
  std::sort(found.begin(), found.end());
  return found;
}

namespace {

// The first bytes (up to 4 KiB) of /proc/PID/<file>; "" when it cannot be read.
std::string ProcFile(pid_t pid, const char* file) {
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/" + file).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[4096];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof buf);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

char ProcessState(pid_t pid) {
  if (pid <= 0) return '\0';
  // "PID (COMM) STATE ...": COMM is at most 16 bytes (TASK_COMM_LEN) but may hold ')'.
  const std::string stat = ProcFile(pid, "stat");
  const size_t name_end = stat.rfind(')');
  return name_end != std::string::npos && name_end + 2 < stat.size() ? stat[name_end + 2] : '\0';
}

std::string StoppedProcess(pid_t pid) {
  const char state = ProcessState(pid);
  if (state != 'T' && state != 't') return "";
  return std::string("stopped (state ") + state + ": SIGSTOP, Ctrl-Z or a debugger)";
}

bool ProcessExited(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;  // EPERM: another user's live process
  const char state = ProcessState(pid);
  if (state != 'Z' && state != 'X') return false;
  // The process's main thread shows Z as soon as it exits, also when it left with
  // pthread_exit and other threads go on (a trainer whose main thread ended): exited only
  // when it is the last one, "Threads: 1" in /proc/PID/status (the zombie leader counts).
  const std::string status = ProcFile(pid, "status");
  const size_t threads = status.find("\nThreads:");
  return threads == std::string::npos || std::strtol(status.c_str() + threads + 9, nullptr, 10) <= 1;
}

bool ProcessExiting(pid_t pid) {
  if (pid <= 0 || ProcessExited(pid)) return false;
  constexpr unsigned long long kPfExiting = 0x4;                      // PF_EXITING, linux/sched.h
  constexpr unsigned long long kSigKill = 1ull << (SIGKILL - 1);      // its bit in SigPnd / ShdPnd
  const std::string task = "task/";
  std::error_code error;
  std::filesystem::directory_iterator thread("/proc/" + std::to_string(pid) + "/task", error);
  size_t seen = 0;
  // A thread that ends while this looks (the killed process's threads do) is passed over.
  for (; !error && thread != std::filesystem::directory_iterator(); thread.increment(error)) {
    const std::string tid = thread->path().filename().string();
    const std::string status = ProcFile(pid, (task + tid + "/status").c_str());
    if (status.empty()) continue;
    unsigned long long pending = 0;
    for (const char* key : {"\nSigPnd:", "\nShdPnd:"}) {
      const size_t at = status.find(key);
      if (at != std::string::npos) pending |= std::strtoull(status.c_str() + at + std::strlen(key), nullptr, 16);
    }
    ++seen;
    if (pending & kSigKill) continue;
    // "TID (COMM) STATE PPID PGRP SESSION TTY_NR TPGID FLAGS ...": FLAGS is the 6th field after ')'.
    const std::string stat = ProcFile(pid, (task + tid + "/stat").c_str());
    const size_t name_end = stat.rfind(')');
    if (name_end == std::string::npos) continue;  // ended since its status was read
    unsigned long long flags = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + name_end + 1, " %c %*d %*d %*d %*d %*d %llu", &state, &flags) != 2) return false;
    if ((flags & kPfExiting) == 0) return false;  // a thread that goes on
  }
  return seen > 0;
}

namespace {
// A non-blocking connect to the Unix socket at `path`: the socket (the caller closes it), or -1
// when none could be made (a path too long, no descriptor); `*error`: connect's errno, 0 when
// connected. Non-blocking: a listener whose backlog is full (a daemon stopped with SIGSTOP and
// connected to since) answers EAGAIN at once, where a blocking connect would wait for it.
int ConnectNonBlocking(const std::string& path, int* error) {
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path) return -1;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  *error = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 ? 0 : errno;
  return fd;
}
}  // namespace

std::optional<SocketPeer> SocketListener(const std::string& path) {
  int error = 0;
  const int fd = ConnectNonBlocking(path, &error);
  if (fd < 0) return std::nullopt;
  std::optional<SocketPeer> listener;
  if (error == 0) {
    ucred peer{};
    socklen_t size = sizeof peer;
    listener = SocketPeer{::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 ? peer.pid : 0, false};
  } else if (error == EAGAIN) {
    listener = SocketPeer{0, true};
  }
  ::close(fd);
  return listener;
}

bool NobodyListens(const std::string& path) {
  int error = 0;
  const int fd = ConnectNonBlocking(path, &error);
  if (fd < 0) return false;
  ::close(fd);
  return error == ECONNREFUSED;
}

std::string SegmentName(std::string_view runtime_dir, std::string_view job) {
  const std::filesystem::path dir{std::string(runtime_dir)};
  std::error_code ec;
  std::string identity = std::filesystem::canonical(dir, ec).string();
  if (ec) {
    ec.clear();
    identity = std::filesystem::absolute(dir, ec).lexically_normal().string();
    if (ec) identity = std::string(runtime_dir);
  }
  // The device, not the inode: systemd recreates a unit's RuntimeDirectory (a new inode) at
  // every restart, and the next daemon must find a crashed one's segment under the same name.
  struct stat st {};
  if (::stat(identity.c_str(), &st) == 0) {
    identity += ':';  // two appends: `":" + to_string` sets off GCC 12's false -Wrestrict (PR 105329)
    identity += std::to_string(st.st_dev);
  }
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(Fnv1a64(identity)));
  std::string name = "/ringfeed.";
  name += job;
  name += '.';
  name += hash;
  return name;
}

std::string ModeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string UserName(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found) return found->pw_name;
  return "uid " + std::to_string(uid);
}

std::string GroupName(gid_t gid) {
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(65536);  // a group's member list can be long
  if (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == 0 && found) return found->gr_name;
  return "gid " + std::to_string(gid);
}

bool ProcessInGroup(gid_t gid) {
  if (::getegid() == gid) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  const int got = ::getgroups(n, groups.data());
  return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) != groups.begin() + got;
}

bool AccountInGroup(uid_t uid, gid_t gid) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) return false;
  if (found->pw_gid == gid) return true;
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    int n = static_cast<int>(groups.size());
    if (::getgrouplist(found->pw_name, found->pw_gid, groups.data(), &n) >= 0) {
      return std::find(groups.begin(), groups.begin() + n, gid) != groups.begin() + n;
    }
    groups.resize(static_cast<size_t>(std::max(n, 2 * static_cast<int>(groups.size()))));  // n: how many it has
  }
  return false;
}

namespace {
std::string Mode(const struct stat& st) { return ModeText(st.st_mode); }

// Whether `path` is `base` or lies below it, as written or with symbolic links resolved.
bool Within(const std::string& path, const std::string& base) {
  const auto below = [](const std::string& p, const std::string& b) {
    return p == b || (p.size() > b.size() && p.compare(0, b.size(), b) == 0 && p[b.size()] == '/');
  };
  const auto normal = [](const std::string& p) {
    std::string n = std::filesystem::path(p).lexically_normal().string();
    while (n.size() > 1 && n.back() == '/') n.pop_back();
    return n;
  };
  if (below(normal(std::filesystem::absolute(path).string()), normal(base))) return true;
  // The base's own name is not resolved: it may be a link (to /tmp, say) made to pass for it.
  std::error_code ec, ec2;
  const std::filesystem::path b(base);
  const std::string real = std::filesystem::weakly_canonical(path, ec).string();
  const std::string real_base = (std::filesystem::weakly_canonical(b.parent_path(), ec2) / b.filename()).string();
  return !ec && !ec2 && below(normal(real), normal(real_base));
}

// "/tmp/ringfeed-U, this user's fallback runtime directory, which uid X created" when that name
// exists (a directory or a symbolic link, not followed) and another user made it; "" otherwise.
std::string ForeignFallback() {
  const std::string fallback = FallbackRuntimeDir();
  struct stat st {};
  if (::lstat(fallback.c_str(), &st) != 0 || st.st_uid == ::geteuid()) return "";
  return fallback + ", this user's fallback runtime directory, which uid " + std::to_string(st.st_uid) +
         (S_ISLNK(st.st_mode) ? " made as a symbolic link" : " created");
}
// "P on the way to it is a symbolic link of uid U, who could point it elsewhere" for the first
// component of `path` (made absolute) that is a link owned by another user than root or this
// one; "" when none is.
std::string ForeignLinkOnTheWay(const std::string& path) {
  std::filesystem::path prefix;
  for (const auto& part : std::filesystem::absolute(path).lexically_normal()) {
    prefix /= part;
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != ::geteuid()) {
      return prefix.string() + " on the way to it is a symbolic link of uid " + std::to_string(st.st_uid) +
             ", who could point it elsewhere";
    }
  }
  return "";
}
}  // namespace

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string RuntimeDirProblem(const std::string& runtime_dir) {
  const std::string fix = "; use a directory of this user's (--runtime-dir, RINGFEED_RUNTIME_DIR)";
  if (const std::string foreign = ForeignFallback(); !foreign.empty() && Within(runtime_dir, FallbackRuntimeDir())) {
    // "... /tmp/ringfeed-U is this user's fallback ..." for the fallback itself, "... is in /tmp/ringfeed-U, ..." below it.
    const std::string fallback = FallbackRuntimeDir();
    return "the runtime directory " + runtime_dir +
           (runtime_dir == fallback ? " is " + foreign.substr(fallback.size() + 2) : " is in " + foreign) +
           ": that user could replace the job's socket and lock file and so take its trainers (remove it as root)" +
           fix;
  }
  if (const std::string link = ForeignLinkOnTheWay(runtime_dir); !link.empty()) {
    return "the runtime directory " + runtime_dir + ": " + link + fix;
  }
  struct stat st {};
  if (::stat(runtime_dir.c_str(), &st) != 0) {
    return "cannot use the runtime directory " + runtime_dir + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return "the runtime directory " + runtime_dir + " is not a directory";
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return "the runtime directory " + runtime_dir + " belongs to uid " + std::to_string(st.st_uid) +
           ", not to this daemon's user (uid " + std::to_string(me) +
           ") or root: that user could replace the job's socket and lock file and so take its trainers" + fix;
  }
  if (::access(runtime_dir.c_str(), W_OK | X_OK) != 0) {
    if (errno == EROFS) {
      return "the runtime directory " + runtime_dir + " is on a read-only file system: no socket or lock file can "
             "be made there" + fix;
    }
    return "this user (uid " + std::to_string(me) + ") may not make files in the runtime directory " + runtime_dir +
           " (owned by uid " + std::to_string(st.st_uid) + ", mode " + Mode(st) + ")" + fix;
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return "the runtime directory " + runtime_dir + " (mode " + Mode(st) +
           ") is writable by every user: any of them could put a socket or lock file of the job's name there, "
           "and trainers of other users would not trust this daemon; use a directory in it that only this user "
           "can write (mkdir -m 0755 " + runtime_dir + "/ringfeed; a shared container volume works so too)";
  }
  return "";
}

std::string UntrustedDaemon(const std::string& socket_path, uid_t peer_uid) {
  const uid_t me = ::geteuid();
  if (peer_uid == me || peer_uid == 0) return "";
  const std::string dir = DirectoryOf(socket_path);
  const std::string who = "the daemon at " + socket_path + " runs as uid " + std::to_string(peer_uid) +
                          ", not as this user (uid " + std::to_string(me) + ") or root";
  if (const std::string foreign = ForeignFallback(); !foreign.empty() && Within(dir, FallbackRuntimeDir())) {
    return who + ", in " + foreign +
           ": another user may be posing as the job's daemon. Remove it (as root) or set RINGFEED_RUNTIME_DIR to "
           "a directory of your own, for the daemon and its trainers";
  }
  // A symbolic link on the way that another user owns could point elsewhere by the time of
  // any check made here than at the connection: only root's and this user's are followed.
  if (const std::string link = ForeignLinkOnTheWay(dir); !link.empty()) {
    return who + ", and " + link + ". Use a path without it";
  }
  // Every directory on the way (links resolved) must be root's, this user's or the daemon's
  // user's, and none writable by users other than its owner (but for sticky ones above the
  // socket's, as /tmp): no one else could have put that socket there (OpenSSH's rule for its
  // files, roughly).
  std::error_code ec;
  std::filesystem::path at = std::filesystem::canonical(dir, ec);
  if (ec) return who + ", and its directory " + dir + " cannot be examined (" + ec.message() + ")";
  for (bool first = true;; first = false) {
    struct stat st {};
    const std::string d = at.string();
    if (::stat(d.c_str(), &st) != 0) {
      return who + ", and the directory " + d + " cannot be examined (" + std::strerror(errno) + ")";
    }
    if (st.st_uid != 0 && st.st_uid != me && st.st_uid != peer_uid) {
      return who + ", and " + d + " on the way to it belongs to uid " + std::to_string(st.st_uid) +
             ", who could have made that socket. Run the daemon as this user or in a runtime directory of its own";
    }
    if ((st.st_mode & (S_IWOTH | S_IWGRP)) != 0 && (first || (st.st_mode & S_ISVTX) == 0)) {
      return who + ", and " + d + " (mode " + Mode(st) + ") on the way to it may be written by " +
             ((st.st_mode & S_IWOTH) != 0 ? "every user" : "its group") +
             ": any of them could have made that socket. Run the daemon as this user or in a runtime directory "
             "only its owner can write";
    }
    if (!at.has_relative_path()) return "";  // "/"
    at = at.parent_path();
  }
}

std::string RuntimeDirPermissions(std::string_view runtime_dir) {
  const auto describe = [](const struct stat& st) {
    return "owned by uid " + std::to_string(st.st_uid) + (st.st_uid == ::geteuid() ? " (this user)" : "") +
           ", mode " + Mode(st);
  };
  // A directory above it that this process may not enter (no x for it) hides the runtime
  // directory whatever that one's own mode: name the first such one.
  const std::filesystem::path dir = std::filesystem::path(std::string(runtime_dir)).lexically_normal();
  std::filesystem::path above;
  for (auto part = dir.begin(); part != dir.end(); ++part) {
    if (std::next(part) == dir.end()) break;  // the runtime directory itself: below
    above /= *part;
    if (above.empty() || ::faccessat(AT_FDCWD, above.c_str(), X_OK, AT_EACCESS) == 0 || errno != EACCES) continue;
    struct stat st {};
    const std::string path = above.string();
    if (::stat(path.c_str(), &st) != 0) return "the directory " + path + " above it does not let this user in";
    const bool mine = st.st_uid == ::geteuid();
    // Its group's bits apply to this process when it is in that group (and is not its owner).
    const bool group_bits = !mine && ProcessInGroup(st.st_gid);
    return "the directory " + path + " above it does not let this user in (" + describe(st) +
           (group_bits ? ", group " + GroupName(st.st_gid) + ", which this process is in" : "") + "); " +
           (mine         ? "give it search permission: chmod u+x " + path
            : group_bits ? "ask its owner to let the group through (chmod g+x " + path + ")"
                         : "ask its owner to let this user through (chmod o+x " + path + ")");
  }
  const std::string path = dir.string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  const bool mine = st.st_uid == ::geteuid();
  // ringfeedd makes it 0755 whatever the umask (MakeRuntimeDir) and changes nothing after;
  // permissions.group applies to the socket and the segment, not to the directory.
  return describe(st) +
         "; ringfeedd creates it with mode 0755, "
         "ringfeed@.service with RuntimeDirectoryMode=0755; " +
         (mine ? "give it back: chmod 0755 " + path : "ask its owner to let this user in (chmod 0755 " + path + ")");
}

}  // namespace ringfeed::shm
