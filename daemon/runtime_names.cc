#include "daemon/runtime_names.h"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace ringfeed {

namespace {

// What is at `path`, the job's lock file's name, now that it is not this daemon's lock: a file
// that no ringfeedd can use as its lock ("a directory, where ...");  "another ringfeedd for job
// 'J' (pid P) holds the job now" when the file is locked (flock) by a ringfeedd; another
// process's lock; or a file nobody holds. The shared lock taken to find out is let go at once: a
// ringfeedd starting in those microseconds would be refused.
std::string LockHolder(const std::string& path, const std::string& job) {
  const std::string unusable = "a second ringfeedd for job '" + job + "' cannot start while it is there, nor can this "
                               "daemon lock it; remove it, and this daemon makes its lock file again within a second";
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1)) {
    const std::string what =
        S_ISDIR(st.st_mode)        ? "a directory"
        : S_ISLNK(st.st_mode)      ? "a symbolic link"
        : S_ISFIFO(st.st_mode)     ? "a FIFO"
        : !S_ISREG(st.st_mode)     ? "not a regular file"
        : st.st_uid != ::geteuid() ? "a file of another user (uid " + std::to_string(st.st_uid) + ")"
                                   : "a file with " + std::to_string(st.st_nlink) + " hard links";
    return "it is " + what + ", where ringfeedd keeps its lock file: " + unusable;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return "it is not a lock file ringfeedd can read (" + std::string(std::strerror(errno)) + ")";
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  if (!held) ::flock(fd, LOCK_UN);
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  std::string pid(buf, n > 0 ? static_cast<size_t>(n) : 0);
  pid = pid.substr(0, pid.find('\n'));
  const bool numeric = !pid.empty() && pid.size() < 10 && pid.find_first_not_of("0123456789") == std::string::npos;
  std::string program;  // of the pid the file names
  if (numeric) std::getline(std::ifstream("/proc/" + pid + "/comm"), program);
  if (held && program == "ringfeedd") {
    return "another ringfeedd for job '" + job + "' (pid " + pid + ") holds the job now, and new trainers reach that "
           "one, not this daemon; this daemon leaves that file when it stops. Stop the daemons of this job and "
           "restart it";
  }
  if (held) {
    const std::string named = program.empty() ? pid : pid + ", " + program;
    return "another process holds a lock on it" + (numeric ? " (the file names pid " + named + ")" : std::string()) +
           ": a second ringfeedd for job '" + job + "' is refused while it does, and this daemon locks the file "
           "again once it is let go";
  }
  return "no process holds it (another program wrote it), but a second ringfeedd for job '" + job +
         "' can now start and take over the job's socket and segment";
}

// What is at a socket's path: "a regular file", ..., "a socket".
std::string FileKind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "nothing";
  return S_ISSOCK(st.st_mode)   ? "a socket"
         : S_ISREG(st.st_mode)  ? "a regular file"
         : S_ISDIR(st.st_mode)  ? "a directory"
         : S_ISLNK(st.st_mode)  ? "a symbolic link"
         : S_ISFIFO(st.st_mode) ? "a FIFO"
                                : "another kind of file";
}

constexpr const char* kFindRemover =
    "find what removes files there (a tmp cleaner for /tmp/ringfeed-<uid>, a script clearing the runtime directory?)";

}  // namespace

RuntimeNames::RuntimeNames(std::string job, std::string runtime_dir, Name segment_file, Name socket, Name lock_file,
                           Remake remake_socket, Remake remake_lock)
    : job_(std::move(job)),
      runtime_dir_(std::move(runtime_dir)),
      remake_socket_(std::move(remake_socket)),
      remake_lock_(std::move(remake_lock)),
      segment_file_{segment_file, shm::PathState::kSame, segment_file.id, {}, {}},
      socket_{socket, shm::PathState::kSame, socket.id, {}, {}},
      lock_file_{lock_file, shm::PathState::kSame, lock_file.id, {}, {}} {}

std::optional<shm::PathState> RuntimeNames::Watched::Changed() {
  shm::FileId now;
  const shm::PathState current = shm::StateOf(name.path.c_str(), name.id, &now);
  if (current == shm::PathState::kUnknown || (current == state && now == seen)) return std::nullopt;
  state = current;
  seen = now;
  return current;
}

void RuntimeNames::Check(bool remake) {
  std::error_code dir_ec;
  const bool dir_there =
      std::filesystem::is_directory(runtime_dir_, dir_ec) ||
      (dir_ec && dir_ec != std::errc::no_such_file_or_directory && dir_ec != std::errc::not_a_directory);
  const std::string with_dir = dir_there ? "" : " with its runtime directory " + runtime_dir_;
  const shm::PathState segment_before = segment_file_.state;
  if (const auto state = segment_file_.Changed()) {
    if (*state == shm::PathState::kGone) {
      segment_file_.problem = fmt::format(
          "the shared-memory segment {} was removed while ringfeedd runs ({}): trainers attached now go on, new ones "
          "cannot attach; restart the job",
          segment_file_.name.path,
          segment_before == shm::PathState::kReplaced
              ? "the file that had replaced it is gone too: the other ringfeedd of the job stopped?"
              : "a cleanup of /dev/shm, or systemd-logind's RemoveIPC=yes for this user?");
    } else if (*state == shm::PathState::kReplaced) {
      segment_file_.problem = fmt::format(
          "the shared-memory segment {} was replaced by another file while ringfeedd runs (another ringfeedd for "
          "job '{}' started, or a process wrote that file): trainers attached now go on, new ones get the other "
          "file, not this daemon's ring; this daemon leaves that file when it stops. Stop the daemons of this job "
          "and restart it",
          segment_file_.name.path, job_);
    }
    segment_file_.Report(*state);
  }
  // The lock file before the socket: the socket is made again only while the lock is this
  // daemon's.
  lock_file_.Recheck(
      remake, remake_lock_,
      [&](shm::PathState state) {
        if (state == shm::PathState::kGone) {
          spdlog::warn("the lock file {} was removed{} while ringfeedd runs: made it again and locked it (a second "
                       "ringfeedd for job '{}' is refused as before); {}",
                       lock_file_.name.path, with_dir, job_, kFindRemover);
        } else {
          spdlog::warn("the lock file {} was replaced by another file, which no process holds, while ringfeedd runs: "
                       "locked it and wrote this daemon's pid to it (a second ringfeedd for job '{}' is refused as "
                       "before); find what writes files there",
                       lock_file_.name.path, job_);
        }
      },
      [&](shm::PathState state) {
        if (state == shm::PathState::kGone) {
          return fmt::format(
              "the lock file {} was removed{} while ringfeedd runs: a second ringfeedd for job '{}' is refused only "
              "while this one answers at its socket; {}",
              lock_file_.name.path, with_dir, job_, kFindRemover);
        }
        return fmt::format("the lock file {} was replaced while ringfeedd runs: {}", lock_file_.name.path,
                           LockHolder(lock_file_.name.path, job_));
      });
  const std::string kind = FileKind(socket_.name.path);  // before a remake that may replace it
  socket_.Recheck(
      remake, remake_socket_,
      [&](shm::PathState state) {
        if (state == shm::PathState::kGone) {
          spdlog::warn("the control socket {} was removed{} while ringfeedd runs: made it again (new trainers and "
                       "ringfeedctl reach this daemon again; attached ones were not disturbed); {}",
                       socket_.name.path, with_dir, kFindRemover);
        } else {
          spdlog::warn("the control socket {} was replaced by another socket, on which no process listens (moved "
                       "away and back?), while ringfeedd runs: put its own there again (new trainers and ringfeedctl "
                       "reach this daemon again); {}",
                       socket_.name.path, kFindRemover);
        }
      },
      [&](shm::PathState state) {
        if (state == shm::PathState::kGone) {
          return fmt::format(
              "the control socket {} was removed{} while ringfeedd runs: trainers attached now go on, new ones (and "
              "ringfeedctl) cannot connect; {}",
              socket_.name.path, with_dir, kFindRemover);
        }
        if (kind == "a socket") {
          return fmt::format(
              "the control socket {} was replaced by another socket, on which another process listens (another "
              "ringfeedd for job '{}' started?): trainers attached now go on, new ones (and ringfeedctl) reach that "
              "process, not this daemon; this daemon leaves that socket when it stops. Stop the daemons of this job "
              "and restart it",
              socket_.name.path, job_);
        }
        return fmt::format(
            "the control socket {} was replaced by {} while ringfeedd runs: trainers attached now go on, new ones "
            "(and ringfeedctl) cannot reach this daemon (they are told its pid); remove that file, and this daemon "
            "makes its socket again within a second",
            socket_.name.path, kind);
      });
}

void RuntimeNames::Watched::Recheck(bool remake, const Remake& remake_name,
                                    const std::function<void(shm::PathState)>& log_remade,
                                    const std::function<std::string(shm::PathState)>& problem_for) {
  const std::optional<shm::PathState> changed = Changed();
  const shm::PathState now = changed ? *changed : state;
  std::string failed;
  const shm::FileId remade =
      now != shm::PathState::kSame && remake && remake_name ? remake_name(&failed) : shm::FileId{};
  if (remade.valid()) {
    log_remade(now);
    Remade(remade);
    return;
  }
  if (!changed && failed == why) return;  // as before: said already
  why = failed;
  if (now != shm::PathState::kSame) problem = problem_for(now);
  if (!why.empty()) problem += " (" + why + ")";
  if (remake || now != shm::PathState::kGone) Report(now);  // at the stop, a gone name is the stop line's
}

void RuntimeNames::Watched::Remade(shm::FileId id) {
  name.id = id;
  seen = id;
  state = shm::PathState::kSame;
  problem.clear();
  why.clear();
}

void RuntimeNames::Watched::Report(shm::PathState now) {
  if (now == shm::PathState::kSame) {  // its own file again (renamed back)
    if (!problem.empty()) spdlog::info("{} is this daemon's own file again: the error about it is over", name.path);
    problem.clear();
  } else {
    spdlog::error("{}", problem);
  }
}

std::vector<std::string> RuntimeNames::Problems() const {
  std::vector<std::string> problems;
  for (const Watched* name : {&segment_file_, &socket_, &lock_file_}) {
    if (!name->problem.empty()) problems.push_back(name->problem);
  }
  return problems;
}

std::string RuntimeNames::Removal() const {
  std::vector<std::string> removed, gone, replaced, unknown;
  for (const Watched* name : {&socket_, &segment_file_}) {
    switch (shm::StateOf(name->name.path.c_str(), name->name.id)) {
      case shm::PathState::kSame: removed.push_back(name->name.path); break;
      case shm::PathState::kGone: gone.push_back(name->name.path); break;
      case shm::PathState::kReplaced: replaced.push_back(name->name.path); break;
      case shm::PathState::kUnknown: unknown.push_back(name->name.path + " (" + std::strerror(errno) + ")"); break;
    }
  }
  std::vector<std::string> parts;
  if (!removed.empty()) parts.push_back(fmt::format("removed {}", fmt::join(removed, " and ")));
  if (!gone.empty()) parts.push_back(fmt::format("{} already gone", fmt::join(gone, " and ")));
  if (!replaced.empty()) {
    parts.push_back(fmt::format("left {}: another file now, not this daemon's", fmt::join(replaced, " and ")));
  }
  if (!unknown.empty()) parts.push_back(fmt::format("left {}: could not check them", fmt::join(unknown, " and ")));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace ringfeed
