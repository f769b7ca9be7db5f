// SlowMount: a slowfs (bench/slowfs) mount for tests, over a fresh temporary mount point.
// Mounts in the constructor (slowfs in the foreground, ready once MOUNT/.slowfs_stats answers),
// unmounts in the destructor whatever happened: SIGTERM, then after 10 s a lazy
// `fusermount3 -u -z` and SIGKILL. Where FUSE is not usable (/dev/fuse missing, mount refused:
// slowfs exits 3), mounted() is false and PrintSkip() prints the "RINGFEED_SKIP:" marker.
// The slowfs binary is RINGFEED_SLOWFS_BIN, a compile definition of the test (see
// tests/slowfs_tests.cmake). Errors: Catch2 FAIL. Thread-safety: none.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

extern char** environ;

namespace ringfeed::testing {

inline constexpr auto kSlowMountTimeout = std::chrono::seconds(10);
inline constexpr int kExitMountFailed = 3;  // slowfs's exit status when the mount is refused

// Runs argv to its end, output discarded; returns the wait status or -1.
inline int RunQuietly(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

inline bool IsMountPoint(const std::filesystem::path& dir) {
  struct stat self {}, parent {};
  if (::stat(dir.c_str(), &self) != 0) return true;  // ENOTCONN: a dead FUSE mount is still there
  if (::stat(dir.parent_path().c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev;
}

// One slowfs process serving `source` at a fresh mount point, in the foreground, its stderr in
// a log file. Unmounts on destruction whatever happened: SIGTERM (slowfs unmounts itself and
// prints its stats), then, if it is still there after 10 s, a lazy `fusermount3 -u -z` and
// SIGKILL.
class SlowMount {
 public:
  SlowMount(const std::string& source, const std::vector<std::string>& options) {
    mountpoint_ = dir_.path() / "mnt";
    log_path_ = dir_.file("slowfs.log");
    std::filesystem::create_directory(mountpoint_);
#ifndef RINGFEED_SLOWFS_BIN
    skip_reason_ = "slowfs was not built (libfuse3-dev missing at configure time)";
    return;
#else
    if (::access("/dev/fuse", R_OK | W_OK) != 0) {
      skip_reason_ = std::string("/dev/fuse not usable (") + std::strerror(errno) + "); FUSE is not available here";
      return;
    }
    std::vector<std::string> argv = {RINGFEED_SLOWFS_BIN, source, mountpoint_.string(), "--foreground"};
    argv.insert(argv.end(), options.begin(), options.end());
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) FAIL("cannot start " << RINGFEED_SLOWFS_BIN << ": " << std::strerror(rc));

    // Mounted once the virtual stats file answers (the bare directory has none).
    const auto deadline = std::chrono::steady_clock::now() + kSlowMountTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      struct stat st {};
      if (::stat(StatsPath().c_str(), &st) == 0) return;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        const std::string log = ReadFile(log_path_);
        if (WIFEXITED(status) && WEXITSTATUS(status) == kExitMountFailed) {  // refused by the system
          skip_reason_ = "mounting FUSE is not possible here: " + log;
          return;
        }
        FAIL("slowfs exited before mounting (wait status " << status << "): " << log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const std::string log = Unmount();  // a throwing constructor runs no destructor
    FAIL("slowfs did not mount " << mountpoint_ << " within 10 s: " << log);
#endif
  }

  ~SlowMount() { Unmount(); }
  SlowMount(const SlowMount&) = delete;
  SlowMount& operator=(const SlowMount&) = delete;

  bool mounted() const { return skip_reason_.empty(); }
  // Prints the skip marker; call when !mounted().
  void PrintSkip() const { Skip(skip_reason_); }
  std::filesystem::path path(const std::string& name) const { return mountpoint_ / name; }
  std::string StatsPath() const { return (mountpoint_ / ".slowfs_stats").string(); }
  pid_t pid() const { return pid_; }
  nlohmann::json Stats() const { return nlohmann::json::parse(ReadFile(StatsPath())); }

  // slowfs's wait status once Unmount() has reaped it; -1 before.
  int exit_status() const { return exit_status_; }

  // Unmounts and waits for slowfs to exit; returns its log (with the stats printed at unmount).
  std::string Unmount() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      const auto deadline = std::chrono::steady_clock::now() + kSlowMountTimeout;
      int status = -1;
      bool exited = false;
      while (std::chrono::steady_clock::now() < deadline && !exited) {
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          exited = true;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      if (!exited) {
        RunQuietly({"fusermount3", "-u", "-z", mountpoint_.string()});
        ::kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
      exit_status_ = status;
      pid_ = -1;
    }
    if (IsMountPoint(mountpoint_)) RunQuietly({"fusermount3", "-u", "-z", mountpoint_.string()});
    std::error_code ec;
    return std::filesystem::exists(log_path_, ec) ? ReadFile(log_path_) : std::string();
  }

 private:
  TempDir dir_;  // destroyed after the destructor body has unmounted
  std::filesystem::path mountpoint_;
  std::string log_path_;
  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::string skip_reason_;
};

}  // namespace ringfeed::testing
