#include "daemon/runtime_names.h"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace ringfeed {

namespace {

// Who holds the lock file now at `path`: "another ringfeedd for job 'J' (pid P) holds the job
// now" when the file is locked (flock) and names a pid, else what it is. The shared lock taken
// to find out is let go at once: a ringfeedd starting in those microseconds would be refused.
std::string LockHolder(const std::string& path, const std::string& job) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return "it is not a lock file ringfeedd can read";
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  if (!held) ::flock(fd, LOCK_UN);
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  std::string pid(buf, n > 0 ? static_cast<size_t>(n) : 0);
  pid = pid.substr(0, pid.find('\n'));
  const bool numeric = !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos;
  if (held) {
    return "another ringfeedd for job '" + job + "'" + (numeric ? " (pid " + pid + ")" : "") +
           " holds the job now, and new trainers reach that one, not this daemon";
  }
  return "no process holds it (another program wrote it), but a second ringfeedd for job '" + job +
         "' can now start and take over the job's socket and segment";
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
      segment_file_{segment_file, shm::PathState::kSame, segment_file.id, {}},
      socket_{socket, shm::PathState::kSame, socket.id, {}},
      lock_file_{lock_file, shm::PathState::kSame, lock_file.id, {}} {}

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
  const std::string with_dir =
      std::filesystem::exists(runtime_dir_, dir_ec) || dir_ec ? "" : " with its runtime directory " + runtime_dir_;
  if (const auto state = segment_file_.Changed()) {
    if (*state == shm::PathState::kGone) {
      segment_file_.problem = fmt::format(
          "the shared-memory segment {} was removed while ringfeedd runs (a cleanup of /dev/shm, or "
          "systemd-logind's RemoveIPC=yes for this user?): trainers attached now go on, new ones cannot attach; "
          "restart the job",
          segment_file_.name.path);
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
  if (const auto state = lock_file_.Changed()) {
    std::string why;
    const shm::FileId remade = *state != shm::PathState::kSame && remake && remake_lock_ ? remake_lock_(&why) : shm::FileId{};
    if (remade.valid()) {
      if (*state == shm::PathState::kGone) {
        spdlog::warn("the lock file {} was removed{} while ringfeedd runs: made it again and locked it (a second "
                     "ringfeedd for job '{}' is refused as before); {}",
                     lock_file_.name.path, with_dir, job_, kFindRemover);
      } else {
        spdlog::warn("the lock file {} was replaced by a file no process held while ringfeedd runs: locked that one "
                     "and wrote this daemon's pid to it (a second ringfeedd for job '{}' is refused as before); find "
                     "what writes files there",
                     lock_file_.name.path, job_);
      }
      lock_file_.Remade(remade);
    } else {
      if (*state == shm::PathState::kGone) {
        lock_file_.problem = fmt::format(
            "the lock file {} was removed{} while ringfeedd runs: a second ringfeedd for job '{}' is refused only "
            "while this one answers at its socket; restart the job, and {}",
            lock_file_.name.path, with_dir, job_, kFindRemover);
      } else if (*state == shm::PathState::kReplaced) {
        lock_file_.problem = fmt::format(
            "the lock file {} was replaced while ringfeedd runs: {}; this daemon leaves that file when it stops. Stop "
            "the daemons of this job and restart it",
            lock_file_.name.path, LockHolder(lock_file_.name.path, job_));
      }
      if (!why.empty()) lock_file_.problem += " (" + why + ")";
      lock_file_.Report(*state);
    }
  }
  if (const auto state = socket_.Changed()) {
    std::string why;
    const shm::FileId remade = *state == shm::PathState::kGone && remake && remake_socket_ ? remake_socket_(&why) : shm::FileId{};
    if (remade.valid()) {
      spdlog::warn("the control socket {} was removed{} while ringfeedd runs: made it again (new trainers and "
                   "ringfeedctl reach this daemon again; attached ones were not disturbed); {}",
                   socket_.name.path, with_dir, kFindRemover);
      socket_.Remade(remade);
    } else {
      if (*state == shm::PathState::kGone) {
        socket_.problem = fmt::format(
            "the control socket {} was removed{} while ringfeedd runs: trainers attached now go on, new ones (and "
            "ringfeedctl) cannot connect; restart the job, and {}",
            socket_.name.path, with_dir, kFindRemover);
      } else if (*state == shm::PathState::kReplaced) {
        socket_.problem = fmt::format(
            "the control socket {} was replaced while ringfeedd runs (another ringfeedd for job '{}' started?): "
            "trainers attached now go on, new ones (and ringfeedctl) reach the other one, not this daemon; this "
            "daemon leaves that socket when it stops. Stop the daemons of this job and restart it",
            socket_.name.path, job_);
      }
      if (!why.empty()) socket_.problem += " (" + why + ")";
      socket_.Report(*state);
    }
  }
}

void RuntimeNames::Watched::Remade(shm::FileId id) {
  name.id = id;
  seen = id;
  state = shm::PathState::kSame;
  problem.clear();
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
