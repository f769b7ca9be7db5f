#include "daemon/runtime_names.h"

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace ringfeed {

namespace {

// The first line of a lock file (a pid), or "unknown".
std::string LockPid(const std::string& path) {
  std::ifstream in(path);
  std::string pid;
  if (!std::getline(in, pid) || pid.empty()) return "unknown";
  return pid;
}

constexpr const char* kFindRemover =
    "find what removes files there (a tmp cleaner for /tmp/ringfeed-<uid>, a script clearing the runtime directory?)";

}  // namespace

RuntimeNames::RuntimeNames(std::string job, std::string runtime_dir, Name segment_file, Name socket, Name lock_file)
    : job_(std::move(job)),
      runtime_dir_(std::move(runtime_dir)),
      segment_file_{segment_file, shm::PathState::kSame, segment_file.id},
      socket_{socket, shm::PathState::kSame, socket.id},
      lock_file_{lock_file, shm::PathState::kSame, lock_file.id} {}

std::optional<shm::PathState> RuntimeNames::Watched::Changed() {
  shm::FileId now;
  const shm::PathState current = shm::StateOf(name.path.c_str(), name.id, &now);
  if (current == shm::PathState::kUnknown || (current == state && now == seen)) return std::nullopt;
  state = current;
  seen = now;
  return current;
}

bool RuntimeNames::Watched::Ours() const { return shm::StateOf(name.path.c_str(), name.id) == shm::PathState::kSame; }

void RuntimeNames::Check() {
  std::error_code dir_ec;
  const std::string with_dir =
      std::filesystem::exists(runtime_dir_, dir_ec) || dir_ec ? "" : " with its runtime directory " + runtime_dir_;
  if (const auto state = segment_file_.Changed()) {
    if (*state == shm::PathState::kGone) {
      spdlog::error("the shared-memory segment {} was removed while ringfeedd runs (a cleanup of /dev/shm, or "
                    "systemd-logind's RemoveIPC=yes for this user?): trainers attached now go on, new ones "
                    "cannot attach; restart the job",
                    segment_file_.name.path);
    } else if (*state == shm::PathState::kReplaced) {
      spdlog::error("the shared-memory segment {} was replaced by another file while ringfeedd runs (another "
                    "ringfeedd for job '{}' started, or a process wrote that file): trainers attached now go on, "
                    "new ones get the other file, not this daemon's ring; this daemon leaves that file when it "
                    "stops. Stop the daemons of this job and restart it",
                    segment_file_.name.path, job_);
    }
  }
  if (const auto state = socket_.Changed()) {
    if (*state == shm::PathState::kGone) {
      spdlog::error("the control socket {} was removed{} while ringfeedd runs: trainers attached now go on, new "
                    "ones (and ringfeedctl) cannot connect; restart the job, and {}",
                    socket_.name.path, with_dir, kFindRemover);
    } else if (*state == shm::PathState::kReplaced) {
      spdlog::error("the control socket {} was replaced while ringfeedd runs (another ringfeedd for job '{}' "
                    "started?): trainers attached now go on, new ones (and ringfeedctl) reach the other one, not "
                    "this daemon; this daemon leaves that socket when it stops. Stop the daemons of this job and "
                    "restart it",
                    socket_.name.path, job_);
    }
  }
  if (const auto state = lock_file_.Changed()) {
    if (*state == shm::PathState::kGone) {
      spdlog::error("the lock file {} was removed{} while ringfeedd runs: nothing keeps a second ringfeedd for job "
                    "'{}' from starting and taking over the job's socket and segment; restart the job, and {}",
                    lock_file_.name.path, with_dir, job_, kFindRemover);
    } else if (*state == shm::PathState::kReplaced) {
      spdlog::error("the lock file {} was replaced while ringfeedd runs: another ringfeedd for job '{}' (pid {}) "
                    "holds the job now, and new trainers reach that one, not this daemon; this daemon leaves "
                    "that file when it stops. Stop the daemons of this job and restart it",
                    lock_file_.name.path, job_, LockPid(lock_file_.name.path));
    }
  }
}

std::string RuntimeNames::Removal() const {
  std::vector<std::string> removed, left;
  for (const Watched* name : {&socket_, &segment_file_}) (name->Ours() ? removed : left).push_back(name->name.path);
  std::string text = removed.empty() ? "removed nothing" : fmt::format("removed {}", fmt::join(removed, " and "));
  if (!left.empty()) text += fmt::format("; left {}: not this daemon's files any more", fmt::join(left, " and "));
  return text;
}

}  // namespace ringfeed
