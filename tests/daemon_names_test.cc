// ringfeedd and the job's names (lock file, control socket, runtime directory, shared-memory
// segment), with real processes (tests/daemon_harness.h):
//   * a second daemon for the same job refuses to start and names the first; a start while the
//     previous daemon stops waits for it;
//   * another program, a file or a directory at one of the names: a start-up error naming it;
//   * a name removed or replaced under a running daemon: logged, made again where it is the
//     daemon's own, and its stop removes only what is still its own;
//   * permissions: other users' directories and segments, groups, umask.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "shm/names.h"
#include "shm/segment.h"
#include "tests/daemon_harness.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

TEST_CASE("a second ringfeedd for the same job refuses to start and names the running one") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = IdJobConfig("twice-job", dir.file("data.tfrecord"));
  DaemonProcess first(dir.path(), "twice-job", config);
  RINGFEED_REQUIRE_STARTED(first);
  DaemonProcess second(dir.path(), "twice-job", config, "second.yaml");
  CHECK_FALSE(second.Start());
  const auto status = second.Wait();
  REQUIRE(status);
  INFO("second stderr:\n" << second.Stderr());
  CHECK(status->exited);
  CHECK(status->code != 0);
  CHECK_THAT(second.Stderr(), Catch::Contains("already running (pid " + std::to_string(first.pid())));
  // The command it suggests finds the running one: --runtime-dir, not the default, was given.
  CHECK_THAT(second.Stderr(), Catch::Contains("stop it first (ringfeedctl status twice-job --runtime-dir " +
                                              first.runtime_dir() + ")"));
  // The first one is unharmed.
  CHECK(first.running());
  CHECK(first.Status()["pid"] == first.pid());
  CHECK(first.Stop().ToString() == "exit 0");
}

TEST_CASE("a second ringfeedd refuses the job while the first answers at its socket, though its lock file was removed") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = IdJobConfig("unlocked-job", dir.file("data.tfrecord"));
  DaemonProcess first(dir.path(), "unlocked-job", config);
  RINGFEED_REQUIRE_STARTED(first);
  const auto segment_before = std::filesystem::last_write_time(first.segment_path());
  struct stat socket_before {};
  REQUIRE(::lstat(first.socket_path().c_str(), &socket_before) == 0);
  // Removed by hand, or by a cleaner of old files: the lock it held no longer has a name.
  REQUIRE(std::filesystem::remove(first.lock_path()));
  DaemonProcess second(dir.path(), "unlocked-job", config, "second.yaml");
  CHECK_FALSE(second.Start());
  const auto status = second.Wait();
  REQUIRE(status);
  INFO("second stderr:\n" << second.Stderr());
  CHECK(status->ToString() == "exit 1");
  // Told by the first's socket ("which answers at the control socket ... though its lock file
  // ... was removed"), or by its lock, when the first made it again (once a second) before the
  // second looked.
  CHECK_THAT(second.Stderr(), Catch::Contains("ringfeedd for job 'unlocked-job' is already running (pid " +
                                              std::to_string(first.pid()) + ", "));
  if (second.Stderr().find(", which answers at") != std::string::npos) {
    CHECK_THAT(second.Stderr(), Catch::Contains("(pid " + std::to_string(first.pid()) +
                                                ", which answers at the control socket " + first.socket_path() +
                                                ") though its lock file " + first.lock_path() + " was removed"));
  }
  // Before, the second one replaced the first's segment and socket and served the job beside it.
  struct stat socket_after {};
  REQUIRE(::lstat(first.socket_path().c_str(), &socket_after) == 0);
  CHECK(socket_after.st_ino == socket_before.st_ino);
  CHECK(std::filesystem::last_write_time(first.segment_path()) == segment_before);
  CHECK(first.running());
  CHECK(first.Status()["pid"] == first.pid());
  // The first made its lock file again (the second removed the one it made as it exited).
  INFO("first stderr:\n" << first.Stderr());
  CHECK(WaitUntil([&] {
    return std::filesystem::exists(first.lock_path()) && ReadFile(first.lock_path()) == std::to_string(first.pid()) + "\n";
  }));
  CHECK(first.WaitForStderr("the lock file " + first.lock_path() + " was removed while ringfeedd runs: made it again "
                            "and locked it (a second ringfeedd for job 'unlocked-job' is refused as before)"));
  CHECK(WaitUntil([&] { return first.Status()["problems"] == json::array(); }));
  CHECK(first.Stop().ToString() == "exit 0");
  CHECK_THAT(first.Stderr(), !Catch::Contains("the control socket " + first.socket_path() + " was replaced") &&
                                 !Catch::Contains("segment " + first.segment_path() + " was replaced"));
  CHECK_FALSE(std::filesystem::exists(first.lock_path()));  // its own again: removed at the stop
}


TEST_CASE("another program listening at the job's socket path: exit 2 naming it, its socket left alone") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "squatted-job", IdJobConfig("squatted-job", dir.file("data.tfrecord")));
  std::filesystem::create_directories(daemon.runtime_dir());
  const int listener = BindUnixSocket(daemon.socket_path(), SOCK_STREAM, 16);  // this test program: not a ringfeedd
  REQUIRE(listener >= 0);
  CHECK_FALSE(daemon.Start());
  const auto status = daemon.Wait();
  REQUIRE(status);
  INFO(daemon.Stderr());
  CHECK(status->ToString() == "exit 2");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("the control socket " + daemon.socket_path() +
                                              " of job 'squatted-job' is held by another program, daemon_names_test (pid " +
                                              std::to_string(::getpid()) + "), which listens there"));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));  // refused before a lock file was made
  CHECK(std::filesystem::is_socket(daemon.socket_path()));
  ::close(listener);
}

TEST_CASE("a listener whose queue of connections is full: the start says so, and a trainer's attach fails in 5 s") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "full-job", IdJobConfig("full-job", dir.file("data.tfrecord")));
  std::filesystem::create_directories(daemon.runtime_dir());
  // A listener that never accepts (as a ringfeedd stopped with SIGSTOP), its queue filled.
  const int listener = BindUnixSocket(daemon.socket_path(), SOCK_STREAM, 1);
  REQUIRE(listener >= 0);
  std::vector<int> queued;
  const sockaddr_un address = UnixAddress(daemon.socket_path());
  for (int i = 0; i < 64; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      REQUIRE(errno == EAGAIN);
      ::close(fd);
      break;
    }
    queued.push_back(fd);
  }
  REQUIRE(queued.size() < 64);
  CHECK_FALSE(daemon.Start());
  const auto status = daemon.Wait();
  REQUIRE(status);
  INFO(daemon.Stderr());
  CHECK(status->ToString() == "exit 1");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("a process listens at the control socket " + daemon.socket_path() +
                                              " of job 'full-job' but takes no connection (its queue is full)"));
  // Before, the trainer's connect waited for room in the queue without a limit.
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    Client::Attach(daemon.client_options());
  } catch (const ClientError& e) {
    error = e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK_THAT(error, Catch::Contains("takes no connection: its queue of connections stayed full for 5 s"));
  CHECK(waited >= std::chrono::milliseconds(4900));
  CHECK(waited < std::chrono::seconds(30));
  for (int fd : queued) ::close(fd);
  ::close(listener);
}

TEST_CASE("something other than a socket at the socket's path: a start-up error that says so, and it stays") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "blocked-job", IdJobConfig("blocked-job", dir.file("data.tfrecord")));
  std::filesystem::create_directories(daemon.socket_path());
  CHECK_FALSE(daemon.Start());
  const auto status = daemon.Wait();
  REQUIRE(status);
  INFO("stderr:\n" << daemon.Stderr());
  CHECK(status->ToString() == "exit 2");  // no restart moves it
  CHECK_THAT(daemon.Stderr(), Catch::Contains("control socket " + daemon.socket_path() +
                                              ": that path is a directory (uid " + std::to_string(::geteuid()) +
                                              "), where ringfeedd puts its socket; remove it, or use another "
                                              "runtime directory"));
  CHECK(std::filesystem::is_directory(daemon.socket_path()));
  std::filesystem::remove(daemon.socket_path());
  WriteFile(daemon.socket_path(), "not a socket");
  CHECK_FALSE(daemon.Start());
  CHECK_THAT(daemon.Stderr(), Catch::Contains("that path is a regular file"));
  CHECK(ReadFile(daemon.socket_path()) == "not a socket");  // not deleted
}

TEST_CASE("a start while the job's daemon has a stop pending (sent while it reserved its ring): it waits for it") {
  // A stop signal sent while the daemon reserves its ring waits (blocked) until that is done;
  // the lock file does not say "stopping" yet, and a start refused the job as "already
  // running" (helper-108). A ring of 2 x 1 GiB takes a second or more to reserve.
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = IdJobConfig("pending", dir.file("data.tfrecord"),
                                         "epochs: 0\nring: {slots: 2, slot_bytes: 1GiB}\n"
                                         "pipeline: {memory_budget: 3GiB}\n");
  if (shm::ShmFreeBytes() < (uint64_t{6} << 30)) {
    SkipOrFail("/dev/shm has less than 6 GiB free: no room for a 2 GiB ring beside the others");
    return;
  }
  DaemonProcess old(dir.path(), "pending", config);
  DaemonStart brief;
  brief.timeout = std::chrono::milliseconds(1);
  REQUIRE_FALSE(old.Start(brief));
  std::filesystem::create_directories(old.runtime_dir());  // as the daemon does; its identity names the segment
  // The segment's name appears as the reservation begins.
  REQUIRE(WaitUntil([&] { return std::filesystem::exists(old.segment_path()) || !old.running(); }));
  REQUIRE(old.running());
  old.Kill(SIGTERM);
  DaemonProcess again(dir.path(), "pending", config, "pending-again.yaml");
  DaemonStart patient;
  patient.timeout = std::chrono::seconds(30);
  RINGFEED_REQUIRE_STARTED(again, patient);
  INFO("the old daemon's stderr:\n" << old.Stderr() << "\nthe new one's:\n" << again.Stderr());
  const auto status = old.Wait();
  REQUIRE(status);
  CHECK(status->ToString() == "exit 0");
  CHECK_THAT(again.Stderr(), !Catch::Contains("already running"));
  CHECK(again.Status()["pid"] == again.pid());
  CHECK(again.Stop().ToString() == "exit 0");
}

TEST_CASE("a start while the job's previous daemon takes its stop signal (no longer pending, \"stopping\" not yet "
          "written): it goes on waiting") {
  // The window between a stop signal leaving the pending set and the handler writing
  // "PID stopping" to the lock file: a start saw neither and refused the job as "already
  // running" (a CI run under TSan, where the handler runs later). Held open here for 1 s by a
  // stand-in for the previous daemon: a child that holds the job's lock with its pid in it.
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess again(dir.path(), "window", IdJobConfig("window", dir.file("data.tfrecord"), "epochs: 0\n"));
  std::filesystem::create_directories(again.runtime_dir());
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  const std::string lock_path = again.lock_path();
  const pid_t previous = ::fork();
  REQUIRE(previous >= 0);
  if (previous == 0) {  // async-signal-safe calls only: the test program has threads
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &term, nullptr);
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(3);
    char line[32];
    int n = 0;
    for (pid_t p = ::getpid(); p > 0; p /= 10) line[n++] = static_cast<char>('0' + p % 10);
    std::reverse(line, line + n);
    line[n++] = '\n';
    if (::write(fd, line, static_cast<size_t>(n)) != n || ::write(ready[1], "r", 1) != 1) ::_exit(4);
    char byte;
    if (::read(go[0], &byte, 1) != 1) ::_exit(5);
    int taken = 0;
    ::sigwait(&term, &taken);  // the stop signal taken: no longer pending
    const timespec second{1, 0};
    ::nanosleep(&second, nullptr);  // ... and "stopping" not written
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(go[0]);
  struct Reap {
    pid_t pid;
    int go;
    ~Reap() {
      ::close(go);
      if (pid <= 0) return;  // reaped below
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{previous, go[1]};
  char byte;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  REQUIRE(::kill(previous, SIGTERM) == 0);  // pending: the child blocks it
  DaemonStart brief;
  brief.timeout = std::chrono::milliseconds(1);
  REQUIRE_FALSE(again.Start(brief));
  REQUIRE(again.WaitForStderr("the job's previous ringfeedd (pid " + std::to_string(previous) +
                              ") is stopping: waiting for it to exit (at most 300 s)"));
  REQUIRE(::write(reap.go, "g", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(previous, &status, 0) == previous);
  reap.pid = 0;
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  INFO(again.Stderr());
  // Its lock file names it before it lists the files; the socket comes after the segment.
  REQUIRE(WaitUntil([&] { return again.Serves() || !again.running(); }));
  REQUIRE(again.running());
  CHECK(again.WaitForStderr("the previous ringfeedd let go of the job's lock"));
  CHECK_THAT(again.Stderr(), !Catch::Contains("already running"));
  CHECK(again.Status()["pid"] == again.pid());
  CHECK(again.Stop().ToString() == "exit 0");
}

TEST_CASE("a directory where the segment goes: refused with exit 2 (a restart would not help), naming it") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "shmdir", IdJobConfig("shmdir", dir.file("data.tfrecord")));
  std::filesystem::create_directories(daemon.runtime_dir());  // its identity names the segment
  REQUIRE(std::filesystem::create_directory(daemon.segment_path()));
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{daemon.segment_path()};
  REQUIRE_FALSE(daemon.Start());
  INFO(daemon.Stderr());
  REQUIRE(daemon.exit_status());
  CHECK(daemon.exit_status()->ToString() == "exit 2");
  CHECK_THAT(daemon.Stderr(), Catch::Contains(daemon.segment_path() + " is a directory (uid ") &&
                                  Catch::Contains("), not a segment; remove it, or use another runtime directory"));
  CHECK(std::filesystem::is_directory(daemon.segment_path()));  // not ringfeedd's to remove
}

TEST_CASE("a directory at the lock file's or the socket's path: exit 2, before any file is read; a stopped daemon is "
          "named as stopped") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "inway", IdJobConfig("inway", dir.file("data.tfrecord"), "epochs: 0\n"));
  std::filesystem::create_directories(daemon.lock_path());
  REQUIRE_FALSE(daemon.Start());
  CHECK(daemon.exit_status()->ToString() == "exit 2");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("cannot open lock file " + daemon.lock_path() + ": Is a directory; "
                                              "ringfeedd makes a regular file of its own user there"));
  std::filesystem::remove(daemon.lock_path());
  std::filesystem::create_directories(daemon.socket_path());
  REQUIRE_FALSE(daemon.Start());
  CHECK(daemon.exit_status()->ToString() == "exit 2");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("control socket " + daemon.socket_path() + ": that path is a directory "
                                              "(uid ") &&
                                  !Catch::Contains("job 'inway': "));  // said before the files are listed
  std::filesystem::remove(daemon.socket_path());

  // A daemon stopped with SIGSTOP holds the job: a start says so, and how to go on.
  RINGFEED_REQUIRE_STARTED(daemon);
  daemon.Kill(SIGSTOP);
  REQUIRE(WaitUntil([&] { return ReadFile("/proc/" + std::to_string(daemon.pid()) + "/stat").find(") T ") !=
                                 std::string::npos; }));
  DaemonProcess again(dir.path(), "inway", IdJobConfig("inway", dir.file("data.tfrecord"), "epochs: 0\n"),
                      "inway-again.yaml");
  REQUIRE_FALSE(again.Start());
  daemon.Kill(SIGCONT);
  INFO(again.Stderr());
  CHECK(again.exit_status()->ToString() == "exit 1");
  CHECK_THAT(again.Stderr(), Catch::Contains("ringfeedd for job 'inway' (pid " + std::to_string(daemon.pid()) +
                                             ", lock ") &&
                                 Catch::Contains(") is stopped (SIGSTOP, Ctrl-Z or a debugger): it neither serves its "
                                                 "trainers nor exits until continued (kill -CONT "));
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("a runtime directory that cannot be made for a lasting reason: exit 2, which the unit does not retry") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  WriteFile(dir.file("job.yaml"), IdJobConfig("rundir", dir.file("data.tfrecord")));
  WriteFile(dir.file("a-file"), "x");
  const CommandResult r =
      RunCommand({DaemonBinary(), "--config", dir.file("job.yaml"), "--runtime-dir", dir.file("a-file") + "/run"});
  INFO(r.err);
  CHECK(r.status.ToString() == "exit 2");
  CHECK_THAT(r.err, Catch::Contains("cannot create the runtime directory " + dir.file("a-file") + "/run: Not a "
                                    "directory"));
  // In a pseudo file system that has no such directory and makes none (before: exit 1, retried).
  const CommandResult proc = RunCommand({DaemonBinary(), "--config", dir.file("job.yaml"), "--runtime-dir",
                                         "/proc/ringfeed-none/run"});
  INFO(proc.err);
  CHECK(proc.status.ToString() == "exit 2");
  CHECK_THAT(proc.err, Catch::Contains("cannot create the runtime directory /proc/ringfeed-none/run: No such file or "
                                       "directory"));
  // /proc itself: there, but no lock file can be made in it (before: exit 1).
  const CommandResult proc_itself = RunCommand({DaemonBinary(), "--config", dir.file("job.yaml"), "--runtime-dir",
                                                "/proc"});
  INFO(proc_itself.err);
  CHECK(proc_itself.status.ToString() == "exit 2");
  CHECK_THAT(proc_itself.err, Catch::Contains("cannot open lock file /proc/rundir.lock: No such file or directory"));
  // A usage error under systemd starts with error's priority, as the log lines do.
  const CommandResult usage = RunCommand({"/usr/bin/env", "JOURNAL_STREAM=1:1", DaemonBinary(), "--config",
                                          dir.file("job.yaml"), "--no-such-option"});
  CHECK(usage.status.ToString() == "exit 2");
  CHECK_THAT(usage.err, Catch::StartsWith("<3>ringfeedd: The following argument was not expected: --no-such-option"));
}

TEST_CASE("the segment truncated under the daemon: it says so, removes socket and segment, exits 1") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "truncated", IdJobConfig("truncated", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  REQUIRE(::truncate(daemon.segment_path().c_str(), 0) == 0);  // what any process that may write it can do
  // The heartbeat thread writes the superblock every 100 ms: its next write faults.
  const auto status = daemon.Wait();
  REQUIRE(status);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(status->ToString() == "exit 1");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("[error] ringfeedd: the shared-memory segment /ringfeed.truncated.") &&
                                  Catch::Contains("was truncated by another process (an access at byte ") &&
                                  Catch::Contains("failed with SIGBUS); stopping, its socket, segment and lock file "
                                                  "removed: trainers mapping it may die of SIGBUS too"));
  // Written by the signal handler, its line starts as the logger's do: the time (under systemd,
  // error's priority).
  const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  CHECK_THAT(daemon.Stderr(), Catch::Matches(std::string(R"(([\s\S]*\n)?)") +
                                             (journal ? "<3>" : R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} )") +
                                             R"(\[error\] ringfeedd: the shared-memory segment [\s\S]*)"));
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.segment_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
}

TEST_CASE("the segment removed under the daemon: logged, attached trainers go on, a new one is told why") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "unlinked", IdJobConfig("unlinked", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  CHECK(daemon.Status()["problems"] == json::array());
  auto attached = Client::Attach(daemon.client_options());
  REQUIRE(std::filesystem::remove(daemon.segment_path()));  // a cleanup of /dev/shm, logind's RemoveIPC
  Batch batch;
  REQUIRE(attached->Next(kEventually, &batch) == Client::Status::kBatch);
  batch = Batch();
  std::string error;
  try {
    Client::Attach(daemon.client_options());
  } catch (const ClientError& e) {
    error = e.what();
  }
  CHECK_THAT(error, Catch::Contains("ringfeedd (pid " + std::to_string(daemon.pid()) + ") for job unlinked answered on") &&
                        Catch::Contains("but its shared-memory segment " + daemon.segment_path() + " is gone") &&
                        Catch::Contains("until the job is restarted"));
  const auto start = Clock::now();
  while (daemon.Stderr().find("was removed while ringfeedd runs") == std::string::npos && Clock::now() - start < kEventually) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK_THAT(daemon.Stderr(), Catch::Contains("the shared-memory segment " + daemon.segment_path() +
                                              " was removed while ringfeedd runs"));
  REQUIRE(attached->Next(kEventually, &batch) == Client::Status::kBatch);  // still served
  // ringfeedctl says it too (before, status and list said "running" and nothing more).
  const std::string problem = "the shared-memory segment " + daemon.segment_path() +
                              " was removed while ringfeedd runs (a cleanup of /dev/shm, or systemd-logind's "
                              "RemoveIPC=yes for this user?): trainers attached now go on, new ones cannot attach; "
                              "restart the job";
  CHECK(daemon.Status()["problems"] == json::array({problem}));
  const CommandResult table = RunCommand({CtlBinary(), "status", "unlinked", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(table.out, Catch::Contains("\nproblem    " + problem + "\n"));
  const CommandResult list = RunCommand({CtlBinary(), "list", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(list.out, Catch::Contains(" running ") &&
                           Catch::Contains("   (1 problem: its segment, socket or lock file is gone or replaced; "
                                           "ringfeedctl status says which)"));
}

TEST_CASE("the lock file removed or replaced by a file no process holds under the daemon: locked again within a "
          "second; a second daemon stays refused") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = IdJobConfig("relocked", dir.file("data.tfrecord"), "epochs: 0\n");
  DaemonProcess daemon(dir.path(), "relocked", config);
  RINGFEED_REQUIRE_STARTED(daemon);
  const std::string pid_line = std::to_string(daemon.pid()) + "\n";
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  const std::string away = dir.file("relocked.lock.away");
  std::filesystem::rename(daemon.lock_path(), away);  // a cleaner moving old files aside
  REQUIRE(daemon.WaitForStderr("[warning] the lock file " + daemon.lock_path() + " was removed while ringfeedd runs: "
                               "made it again and locked it (a second ringfeedd for job 'relocked' is refused as "
                               "before); find what removes files there"));
  CHECK(ReadFile(daemon.lock_path()) == pid_line);
  CHECK(daemon.Status()["problems"] == json::array());
  DaemonProcess second(dir.path(), "relocked", config, "second.yaml");
  CHECK_FALSE(second.Start());
  CHECK_THAT(second.Stderr(), Catch::Contains("already running (pid " + std::to_string(daemon.pid()) + ", lock " +
                                              daemon.lock_path() + ")"));

  // The old file renamed back over the new one: nobody holds a lock on it any more.
  std::filesystem::rename(away, daemon.lock_path());
  CHECK(daemon.WaitForStderr("[warning] the lock file " + daemon.lock_path() + " was replaced by another file, which "
                             "no process holds, while ringfeedd runs: locked it and wrote this daemon's pid to it"));
  // Another program's file in its place (renamed over it: one change, never an empty name): the same.
  WriteFile(dir.file("junk"), "hello world\n");
  std::filesystem::rename(dir.file("junk"), daemon.lock_path());
  CHECK(WaitUntil([&] { return ReadFile(daemon.lock_path()) == pid_line; }));
  CHECK(daemon.Status()["problems"] == json::array());
  DaemonProcess third(dir.path(), "relocked", config, "third.yaml");
  CHECK_FALSE(third.Start());
  CHECK_THAT(third.Stderr(), Catch::Contains("already running (pid " + std::to_string(daemon.pid()) + ", lock "));

  // Its content written over in place (same file): "PID stopping" there would make a start
  // wait up to 5 minutes for a stop that never comes. Written back within a second.
  WriteFile(daemon.lock_path(), std::to_string(daemon.pid()) + " stopping\n");
  CHECK(daemon.WaitForStderr("[warning] the lock file " + daemon.lock_path() + " was written by another program "
                             "while ringfeedd runs (it said \"" + std::to_string(daemon.pid()) +
                             " stopping\\n\"): wrote this daemon's pid to it again"));
  CHECK(ReadFile(daemon.lock_path()) == pid_line);
  CHECK_THAT(daemon.Stderr(), !Catch::Contains("[error]"));
  CHECK(daemon.Stop().ToString() == "exit 0");
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));  // its own: removed at the stop
}

TEST_CASE("the runtime directory removed under the daemon: it makes the directory, its lock file and its socket "
          "again; trainers attach, ringfeedctl reaches it, a second daemon is refused") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = IdJobConfig("rtdir-back", dir.file("data.tfrecord"), "epochs: 0\n");
  DaemonProcess daemon(dir.path(), "rtdir-back", config);
  RINGFEED_REQUIRE_STARTED(daemon);
  auto attached = Client::Attach(daemon.client_options());
  std::filesystem::remove_all(daemon.runtime_dir());  // a tmp cleaner
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("[warning] the lock file " + daemon.lock_path() + " was removed with its runtime "
                             "directory " + daemon.runtime_dir() + " while ringfeedd runs: made it again and locked it"));
  CHECK(daemon.WaitForStderr("[warning] the control socket " + daemon.socket_path() + " was removed with its runtime "
                             "directory " + daemon.runtime_dir() + " while ringfeedd runs: made it again (new trainers "
                             "and ringfeedctl reach this daemon again; attached ones were not disturbed); find what "
                             "removes files there"));
  CHECK(ReadFile(daemon.lock_path()) == std::to_string(daemon.pid()) + "\n");
  struct stat socket {};
  REQUIRE(::lstat(daemon.socket_path().c_str(), &socket) == 0);
  CHECK(S_ISSOCK(socket.st_mode));
  CHECK((socket.st_mode & 0777) == 0600);
  const CommandResult status = RunCommand({CtlBinary(), "status", "rtdir-back", "--runtime-dir", daemon.runtime_dir()});
  INFO("ringfeedctl status:\n" << status.out << status.err);
  CHECK(status.status.ToString() == "exit 0");
  CHECK(daemon.Status()["problems"] == json::array());
  Batch batch;
  REQUIRE(attached->Next(kEventually, &batch) == Client::Status::kBatch);  // not disturbed
  batch = Batch();
  {
    auto client = Client::Attach(daemon.client_options());  // through the new socket
    REQUIRE(client->Next(kEventually, &batch) == Client::Status::kBatch);
    batch = Batch();
  }
  DaemonProcess second(dir.path(), "rtdir-back", config, "second.yaml");
  CHECK_FALSE(second.Start());
  CHECK_THAT(second.Stderr(), Catch::Contains("already running (pid " + std::to_string(daemon.pid())));
  attached.reset();
  CHECK(daemon.Stop().ToString() == "exit 0");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("stopped: removed " + daemon.socket_path() + " and " +
                                              daemon.segment_path() + "\n") &&
                                  !Catch::Contains("[error]"));
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
}

TEST_CASE("the runtime directory removed and a second daemon started there before the first looked: the first one's "
          "stop leaves the "
          "second one's socket, lock and segment") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = IdJobConfig("rtdir-job", dir.file("data.tfrecord"), "epochs: 0\n");
  DaemonProcess first(dir.path(), "rtdir-job", config);
  RINGFEED_REQUIRE_STARTED(first);
  auto attached = Client::Attach(first.client_options());
  // The first cannot make its names again before the second takes them: it is stopped.
  first.Kill(SIGSTOP);
  REQUIRE(WaitUntil([&] { return ReadFile("/proc/" + std::to_string(first.pid()) + "/stat").find(") T ") !=
                                 std::string::npos; }));
  std::filesystem::remove_all(first.runtime_dir());  // a tmp cleaner
  INFO("first ringfeedd stderr:\n" << first.Stderr());
  DaemonProcess second(dir.path(), "rtdir-job", config, "second.yaml");
  RINGFEED_REQUIRE_STARTED(second);  // nothing holds the lock: it starts, with the same segment name
  REQUIRE(second.segment_path() == first.segment_path());
  CHECK_THAT(second.Stderr(), Catch::Contains(", the ring of ringfeedd pid " + std::to_string(first.pid()) +
                                              ", which still runs (the job's lock file was removed under it): that "
                                              "daemon goes on serving the trainers attached to it"));
  first.Kill(SIGCONT);
  CHECK(first.WaitForStderr("the shared-memory segment " + first.segment_path() +
                            " was replaced by another file while ringfeedd runs"));
  CHECK(first.WaitForStderr("the control socket " + first.socket_path() + " was replaced by another socket, on which "
                            "another process listens (another ringfeedd for job 'rtdir-job' started?)"));
  CHECK(first.WaitForStderr("the lock file " + first.lock_path() +
                            " was replaced while ringfeedd runs: another ringfeedd for job 'rtdir-job' (pid " +
                            std::to_string(second.pid()) + ") holds the job now"));
  Batch batch;
  REQUIRE(attached->Next(kEventually, &batch) == Client::Status::kBatch);  // the first one still serves it
  batch = Batch();
  attached.reset();

  CHECK(first.Stop().ToString() == "exit 0");
  CHECK_THAT(first.Stderr(), Catch::Contains("stopped: left " + first.socket_path() + " and " +
                                             first.segment_path() + ": another file now, not this daemon's\n"));
  CHECK(std::filesystem::exists(second.socket_path()));
  CHECK(std::filesystem::exists(second.segment_path()));
  CHECK(ReadFile(second.lock_path()) == std::to_string(second.pid()) + "\n");
  // The second one is reachable, serves a consumer, and still keeps a third one out.
  const CommandResult status = RunCommand({CtlBinary(), "status", "rtdir-job", "--runtime-dir", second.runtime_dir()});
  INFO("ringfeedctl status:\n" << status.out << status.err);
  CHECK(status.status.ToString() == "exit 0");
  CHECK(second.Status()["pid"] == second.pid());
  {
    auto client = Client::Attach(second.client_options());
    REQUIRE(client->Next(kEventually, &batch) == Client::Status::kBatch);
    batch = Batch();
  }
  DaemonProcess third(dir.path(), "rtdir-job", config, "third.yaml");
  CHECK_FALSE(third.Start());
  CHECK_THAT(third.Stderr(), Catch::Contains("already running (pid " + std::to_string(second.pid())));
  INFO("second ringfeedd stderr:\n" << second.Stderr());
  CHECK(second.Stop().ToString() == "exit 0");
  CHECK_FALSE(std::filesystem::exists(second.socket_path()));
  CHECK_FALSE(std::filesystem::exists(second.lock_path()));
  CHECK_FALSE(std::filesystem::exists(second.segment_path()));
}

TEST_CASE("the segment replaced by another file under the daemon: logged once within 2 s, that file left at the stop") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "replaced", IdJobConfig("replaced", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  REQUIRE(std::filesystem::remove(daemon.segment_path()));
  WriteFile(daemon.segment_path(), "x\n");  // `echo x > /dev/shm/ringfeed...`
  const auto replaced = Clock::now();
  const std::string message = "the shared-memory segment " + daemon.segment_path() +
                              " was replaced by another file while ringfeedd runs";
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  REQUIRE(daemon.WaitForStderr(message));
  CHECK(SecondsSince(replaced) < 2.5);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // another check or more: said once
  CHECK(daemon.Stop().ToString() == "exit 0");
  const std::string err = daemon.Stderr();
  CHECK(err.find(message) == err.rfind(message));
  CHECK_THAT(err, Catch::Contains("new ones get the other file, not this daemon's ring") &&
                      Catch::Contains("stopped: removed " + daemon.socket_path() + "; left " + daemon.segment_path() +
                                      ": another file now, not this daemon's\n"));
  CHECK(ReadFile(daemon.segment_path()) == "x\n");  // not deleted
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
  std::filesystem::remove(daemon.segment_path());
}

TEST_CASE("the socket replaced by a regular file under the daemon: ringfeedctl names the daemon behind it; the file "
          "removed, the daemon makes its socket again") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "filed", IdJobConfig("filed", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  WriteFile(dir.file("junk"), "not a socket\n");
  std::filesystem::rename(dir.file("junk"), daemon.socket_path());
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("[error] the control socket " + daemon.socket_path() + " was replaced by a regular file "
                             "while ringfeedd runs: trainers attached now go on, new ones (and ringfeedctl) cannot "
                             "reach this daemon (they are told its pid); remove that file, and this daemon makes its "
                             "socket again within a second"));
  const CommandResult status = RunCommand({CtlBinary(), "status", "filed", "--runtime-dir", daemon.runtime_dir()});
  CHECK(status.status.ToString() == "exit 1");
  CHECK_THAT(status.err, Catch::Contains(daemon.socket_path() + " is a regular file, not a socket: ringfeedd (pid " +
                                         std::to_string(daemon.pid()) + ") holds the job's lock but cannot be reached "
                                         "while that file is in the way of its socket; remove the file, and the daemon "
                                         "makes its socket again within a second"));
  std::string error;
  try {
    Client::Attach(daemon.client_options());
  } catch (const ClientError& e) {
    error = e.what();
  }
  CHECK_THAT(error, Catch::Contains("ringfeedd (pid " + std::to_string(daemon.pid()) + ") holds the job's lock but "
                                    "cannot be reached"));
  CHECK(ReadFile(daemon.socket_path()) == "not a socket\n");  // not the daemon's to remove
  REQUIRE(std::filesystem::remove(daemon.socket_path()));
  CHECK(daemon.WaitForStderr("[warning] the control socket " + daemon.socket_path() + " was removed while ringfeedd "
                             "runs: made it again"));
  CHECK(WaitUntil([&] { return daemon.Status()["problems"] == json::array(); }));
  Batch batch;
  {
    auto client = Client::Attach(daemon.client_options());
    REQUIRE(client->Next(kEventually, &batch) == Client::Status::kBatch);
    batch = Batch();
  }
  CHECK(daemon.Stop().ToString() == "exit 0");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("stopped: removed " + daemon.socket_path() + " and " +
                                              daemon.segment_path() + "\n"));
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
}

TEST_CASE("the socket and the lock file both replaced by directories: ringfeedctl names the daemon from its segment; "
          "both removed, the daemon makes them again") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "dirs", IdJobConfig("dirs", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  REQUIRE(std::filesystem::remove(daemon.lock_path()));
  std::filesystem::create_directory(daemon.lock_path());
  REQUIRE(std::filesystem::remove(daemon.socket_path()));
  std::filesystem::create_directory(daemon.socket_path());
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  REQUIRE(daemon.WaitForStderr("the lock file " + daemon.lock_path()));
  const CommandResult status = RunCommand({CtlBinary(), "status", "dirs", "--runtime-dir", daemon.runtime_dir()});
  CHECK(status.status.ToString() == "exit 1");
  // Before: "... is a directory, not a socket: no ringfeedd made it" (no lock file to read a pid from).
  CHECK_THAT(status.err, Catch::Contains(daemon.socket_path() + " is a directory, not a socket: ringfeedd (pid " +
                                         std::to_string(daemon.pid()) + "), whose shared-memory segment is the job's, "
                                         "runs but cannot be reached while that file is in the way of its socket, and "
                                         "its lock file " + daemon.lock_path() + " is a directory; remove what is at "
                                         "both paths, and the daemon makes them again within a second"));
  std::filesystem::remove(daemon.socket_path());
  std::filesystem::remove(daemon.lock_path());
  CHECK(WaitUntil([&] { return std::filesystem::exists(daemon.socket_path()); }));
  CHECK(WaitUntil([&] { return daemon.Status()["problems"] == json::array(); }));
  CHECK(ReadFile(daemon.lock_path()) == std::to_string(daemon.pid()) + "\n");
  CHECK(daemon.Stop().ToString() == "exit 0");
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
  // The daemon gone, its segment gone with it: a directory at the socket path is nobody's again.
  std::filesystem::create_directory(daemon.socket_path());
  const CommandResult after = RunCommand({CtlBinary(), "status", "dirs", "--runtime-dir", daemon.runtime_dir()});
  CHECK_THAT(after.err, Catch::Contains(" is a directory, not a socket: no ringfeedd made it"));
  std::filesystem::remove(daemon.socket_path());
}

TEST_CASE("a remake that fails is tried again at every check: the runtime directory's path taken by a file for a "
          "while") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "retried", IdJobConfig("retried", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  std::filesystem::remove_all(daemon.runtime_dir());
  WriteFile(daemon.runtime_dir(), "");  // where the directory was: nothing can be made under it
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  REQUIRE(daemon.WaitForStderr("(could not make it again: cannot create the runtime directory " +
                               daemon.runtime_dir() + ": "));
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));  // two more checks fail the same way: said once
  const std::string err = daemon.Stderr();
  const std::string failed = "the control socket " + daemon.socket_path() + " was removed with its runtime directory";
  CHECK(err.find(failed) == err.rfind(failed));
  std::filesystem::remove(daemon.runtime_dir());  // the way is clear again
  CHECK(daemon.WaitForStderr("[warning] the control socket " + daemon.socket_path() + " was removed"));
  CHECK(WaitUntil([&] { return std::filesystem::exists(daemon.socket_path()); }));
  CHECK(daemon.Status()["problems"] == json::array());
  CHECK(ReadFile(daemon.lock_path()) == std::to_string(daemon.pid()) + "\n");
  CHECK(daemon.Stop().ToString() == "exit 0");
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
}

TEST_CASE("the socket moved away and back after the daemon made a new one: it puts its own there again") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "moved", IdJobConfig("moved", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const std::string aside = dir.file("moved.sock.aside");
  std::filesystem::rename(daemon.socket_path(), aside);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  REQUIRE(daemon.WaitForStderr("[warning] the control socket " + daemon.socket_path() + " was removed while ringfeedd "
                               "runs: made it again"));
  std::filesystem::rename(aside, daemon.socket_path());  // the old one: nobody listens on it any more
  CHECK(daemon.WaitForStderr("[warning] the control socket " + daemon.socket_path() + " was replaced by another "
                             "socket, on which no process listens (moved away and back?), while ringfeedd runs: put "
                             "its own there again"));
  CHECK(daemon.Status()["pid"] == daemon.pid());
  CHECK(daemon.Status()["problems"] == json::array());
  CHECK_THAT(daemon.Stderr(), !Catch::Contains("[error]"));
  CHECK(daemon.Stop().ToString() == "exit 0");
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
}

TEST_CASE("clients that connected before the socket was removed are served when the daemon makes it again") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "queued", IdJobConfig("queued", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  // Stopped, the daemon accepts nothing: three clients connect and wait in the socket's queue.
  daemon.Kill(SIGSTOP);
  REQUIRE(WaitUntil([&] { return ReadFile("/proc/" + std::to_string(daemon.pid()) + "/stat").find(") T ") !=
                                 std::string::npos; }));
  const std::string status = CtlBinary() + " status queued --json --runtime-dir " + daemon.runtime_dir();
  std::string clients;  // in the background, their output in files: the shell returns at once
  for (const char* name : {"1.json", "2.json", "3.json"}) clients += status + " > " + dir.file(name) + " 2>&1 & ";
  REQUIRE(RunCommand({"/bin/sh", "-c", clients}).status.ToString() == "exit 0");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  REQUIRE(std::filesystem::remove(daemon.socket_path()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // its once-a-second check is due when it goes on
  daemon.Kill(SIGCONT);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("the control socket " + daemon.socket_path() + " was removed while ringfeedd runs: made "
                             "it again"));
  for (const char* name : {"1.json", "2.json", "3.json"}) {
    std::string reply;
    CHECK(WaitUntil([&] {
      reply = ReadFile(dir.file(name));
      return json::accept(reply) && json::parse(reply)["pid"] == daemon.pid();  // not reset by the new socket
    }));
    INFO(name << ": " << reply);
  }
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("under umask 0 the runtime directory is made again 0755, not refused as writable by every user") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "umask0", IdJobConfig("umask0", dir.file("data.tfrecord"), "epochs: 0\n"));
  DaemonStart start;
  start.wrapper = {"bash", "-c", "umask 000 && exec \"$@\"", "bash"};
  RINGFEED_REQUIRE_STARTED(daemon, start);
  std::filesystem::remove_all(daemon.runtime_dir());
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  REQUIRE(daemon.WaitForStderr("[warning] the control socket " + daemon.socket_path() + " was removed with its "
                               "runtime directory"));
  struct stat st {};
  REQUIRE(::stat(daemon.runtime_dir().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0755);  // before: 0777, then refused at every check
  CHECK(daemon.Status()["problems"] == json::array());
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("under umask 077 with permissions.group the runtime directory is 0755 and the lock file 0644") {
  const struct group* g = ::getgrgid(65534);  // Debian's nogroup
  if (g == nullptr || ::geteuid() != 0) {
    SkipOrFail("needs root and a group of gid 65534, to give the socket to a group it is not in");
    return;
  }
  const std::string group = g->gr_name;
  // Before: 0700 and 0600 under this umask, while the ready line said the socket was the group's.
  TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "umask77", IdJobConfig("umask77", dir.file("data.tfrecord"),
                                                          "epochs: 0\npermissions: {group: " + group + "}\n"));
  DaemonStart start;
  start.wrapper = {"bash", "-c", "umask 077 && exec \"$@\"", "bash"};
  RINGFEED_REQUIRE_STARTED(daemon, start);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  struct stat st {};
  REQUIRE(::stat(daemon.runtime_dir().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0755);
  REQUIRE(::stat((daemon.runtime_dir() + "/umask77.lock").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  REQUIRE(::stat(daemon.socket_path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);
  CHECK(st.st_gid == g->gr_gid);
  CHECK_THAT(daemon.Stderr(), !Catch::Contains("its members cannot enter"));
  CHECK(daemon.Stop().ToString() == "exit 0");

  // A directory on the way that the group cannot enter: said at start, with the fix.
  TempDir closed;
  std::filesystem::permissions(closed.path(), std::filesystem::perms(0700));
  WriteIdFile(closed.file("data.tfrecord"), 0, 10);
  DaemonProcess shut(closed.path(), "shut", IdJobConfig("shut", closed.file("data.tfrecord"),
                                                        "epochs: 0\npermissions: {group: " + group + "}\n"));
  RINGFEED_REQUIRE_STARTED(shut);
  INFO("ringfeedd stderr:\n" << shut.Stderr());
  CHECK_THAT(shut.Stderr(), Catch::Contains("[warning] permissions.group " + group + ": its members cannot enter " +
                                            closed.path().string() + " (mode 0700, group root, which they may not be "
                                            "in), so trainers of that group cannot reach the socket made for them; "
                                            "let them through (chmod o+x " + closed.path().string() + ")"));
  CHECK(shut.Stop().ToString() == "exit 0");
}

TEST_CASE("a relative --runtime-dir: the status and the log name the socket by its absolute path") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "relative", IdJobConfig("relative", dir.file("data.tfrecord"), "epochs: 0\n"));
  REQUIRE(daemon.runtime_dir() == dir.file("run"));
  DaemonStart start;
  // The harness's --runtime-dir (the last argument, absolute) given as "run" from its directory.
  start.wrapper = {"bash", "-c", "cd \"$0\" && exec \"${@:1:$#-1}\" run", dir.path().string()};
  RINGFEED_REQUIRE_STARTED(daemon, start);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.Status()["socket"] == daemon.socket_path());  // before: "run/relative.sock"
  CHECK_THAT(daemon.Stderr(), Catch::Contains("ready: socket " + daemon.socket_path() + ","));
  // (And the start-up log says where the auto memory budget came from, as it does the CPU's.)
  CHECK_THAT(daemon.Stderr(),
             Catch::Matches(R"([\s\S]*\[info\] memory_budget [0-9.]+ [MG]iB \(default: [^\n]+\): )"
                            R"(private RSS \+ the segment, the whole run\n[\s\S]*)"));
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("another program's socket put at the socket's path is asked once whether it listens, and left alone") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "foreign", IdJobConfig("foreign", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  const int listener = BindUnixSocket(dir.file("other.sock"), SOCK_STREAM, 16);
  REQUIRE(listener >= 0);
  std::filesystem::rename(dir.file("other.sock"), daemon.socket_path());
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(daemon.WaitForStderr("[error] the control socket " + daemon.socket_path() + " was replaced by another socket, "
                             "on which another process listens"));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two more checks
  int connections = 0;
  ::fcntl(listener, F_SETFL, O_NONBLOCK);
  for (int fd; (fd = ::accept(listener, nullptr, nullptr)) >= 0; ++connections) ::close(fd);
  CHECK(connections == 1);  // before: one a second
  struct stat st {};
  CHECK(::lstat(daemon.socket_path().c_str(), &st) == 0);  // still the other program's
  ::close(listener);
  std::filesystem::remove(daemon.socket_path());
  CHECK(daemon.WaitForStderr("[warning] the control socket " + daemon.socket_path() + " was removed while ringfeedd "
                             "runs: made it again"));
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("the lock file replaced by one another program holds: said as such, and locked once it is let go") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  DaemonProcess daemon(dir.path(), "held", IdJobConfig("held", dir.file("data.tfrecord"), "epochs: 0\n"));
  RINGFEED_REQUIRE_STARTED(daemon);
  WriteFile(dir.file("other"), "x\n");
  const int other = ::open(dir.file("other").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(other >= 0);
  REQUIRE(::flock(other, LOCK_EX) == 0);  // `flock FILE sleep 100` in another program
  std::filesystem::rename(dir.file("other"), daemon.lock_path());
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  const std::string problem = "the lock file " + daemon.lock_path() + " was replaced while ringfeedd runs: another "
                              "process holds a lock on it: a second ringfeedd for job 'held' is refused while it does, "
                              "and this daemon locks the file again once it is let go";
  CHECK(daemon.WaitForStderr("[error] " + problem + "\n"));
  CHECK(daemon.Status()["problems"] == json::array({problem}));
  ::close(other);
  CHECK(daemon.WaitForStderr("[warning] the lock file " + daemon.lock_path() + " was replaced by another file, which "
                             "no process holds, while ringfeedd runs: locked it"));
  CHECK(ReadFile(daemon.lock_path()) == std::to_string(daemon.pid()) + "\n");
  CHECK(daemon.Status()["problems"] == json::array());

  // A hard link at its name: not written to (that would change the file under its other name).
  WriteFile(dir.file("precious"), "precious data\n");
  std::filesystem::create_hard_link(dir.file("precious"), dir.file("link"));
  std::filesystem::rename(dir.file("link"), daemon.lock_path());
  CHECK(daemon.WaitForStderr("the lock file " + daemon.lock_path() + " was replaced while ringfeedd runs: it is a file "
                             "with 2 hard links, where ringfeedd keeps its lock file"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  CHECK(ReadFile(dir.file("precious")) == "precious data\n");
  std::filesystem::remove(daemon.lock_path());
  CHECK(WaitUntil([&] {
    return std::filesystem::exists(daemon.lock_path()) && ReadFile(daemon.lock_path()) == std::to_string(daemon.pid()) + "\n";
  }));
  CHECK(ReadFile(dir.file("precious")) == "precious data\n");
  CHECK(daemon.Stop().ToString() == "exit 0");
}

TEST_CASE("a control socket path too long for a Unix socket: exit 2 naming the path and the fix") {
  TempDir dir;
  const std::filesystem::path deep = dir.path() / std::string(90, 'd');
  std::filesystem::create_directories(deep);
  WriteIdFile((deep / "data.tfrecord").string(), 0, 4);
  DaemonProcess daemon(deep, "long-socket", IdJobConfig("long-socket", (deep / "data.tfrecord").string()));
  CHECK_FALSE(daemon.Start());
  const auto status = daemon.Wait();
  REQUIRE(status);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(status->ToString() == "exit 2");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("control socket path " + daemon.socket_path() + " is ") &&
                                  Catch::Contains("longer than a Unix socket allows (107); use a shorter runtime "
                                                  "directory (--runtime-dir, RINGFEED_RUNTIME_DIR) or job name"));
}

TEST_CASE("permissions.group the daemon process is not in: exit 2 naming the user and the group and the fix") {
  if (::geteuid() != 0) {
    SkipOrFail("needs root, to run ringfeedd as user nobody");
    return;
  }
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  std::filesystem::permissions(dir.path(), std::filesystem::perms::all);  // nobody writes its lock file there
  DaemonProcess daemon(dir.path(), "foreign-group",
                       IdJobConfig("foreign-group", dir.file("data.tfrecord"), "permissions: {group: root}\n"));
  DaemonStart start;
  start.wrapper = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  CHECK_FALSE(daemon.Start(start));
  const auto status = daemon.Wait();
  REQUIRE(status);
  INFO("ringfeedd stderr:\n" << daemon.Stderr());
  CHECK(status->ToString() == "exit 2");
  CHECK_THAT(daemon.Stderr(), Catch::Contains("permissions.group: ringfeedd runs as user 'nobody', which is not a "
                                              "member of group 'root' (gid 0): add the user to it (usermod -aG root "
                                              "nobody)"));

  // Its own login group (nogroup), which the process was started without (as by a login
  // session older than the membership): a new login, not usermod.
  DaemonProcess stale(dir.path(), "stale-group",
                      IdJobConfig("stale-group", dir.file("data.tfrecord"), "permissions: {group: nogroup}\n"));
  start.wrapper = {"setpriv", "--reuid=65534", "--regid=1", "--clear-groups"};
  CHECK_FALSE(stale.Start(start));
  const auto stale_status = stale.Wait();
  REQUIRE(stale_status);
  INFO("ringfeedd stderr:\n" << stale.Stderr());
  CHECK(stale_status->ToString() == "exit 2");
  CHECK_THAT(stale.Stderr(), Catch::Contains("permissions.group: ringfeedd runs as user 'nobody', a member of group "
                                             "'nogroup' (gid 65534), but this process is not in it (id -Gn): a "
                                             "process keeps the groups of the login session it started in, so start "
                                             "it from a new login (or run newgrp nogroup; under systemd, restart the "
                                             "service), or choose another group"));
}

TEST_CASE("a runtime directory others can write, or a lock file that is a symbolic link: exit 2, nothing written") {
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = IdJobConfig("unsafe-dir", dir.file("data.tfrecord"));
  // Starts `daemon`, which must refuse: its exit status.
  const auto refused = [](DaemonProcess& daemon) {
    CHECK_FALSE(daemon.Start());
    const auto status = daemon.Wait();
    REQUIRE(status);
    return status->ToString();
  };
  {
    DaemonProcess daemon(dir.path(), "unsafe-dir", config);
    std::filesystem::create_directories(daemon.runtime_dir());
    std::filesystem::permissions(daemon.runtime_dir(), std::filesystem::perms::all);  // 0777, not sticky
    CHECK(refused(daemon) == "exit 2");
    INFO(daemon.Stderr());
    CHECK_THAT(daemon.Stderr(), Catch::Contains("the runtime directory " + daemon.runtime_dir() +
                                                " (mode 0777) is writable by every user: any of them could put a "
                                                "socket or lock file of the job's name there"));
    CHECK_FALSE(std::filesystem::exists(daemon.lock_path()));
    std::filesystem::permissions(daemon.runtime_dir(), std::filesystem::perms::owner_all);
  }
  // A lock file planted as a link to another file: the pid would have overwritten that file.
  DaemonProcess daemon(dir.path(), "unsafe-dir", config);
  WriteFile(dir.file("precious.txt"), "precious\n");
  std::filesystem::create_symlink(dir.file("precious.txt"), daemon.lock_path());
  CHECK(refused(daemon) == "exit 2");
  INFO(daemon.Stderr());
  CHECK_THAT(daemon.Stderr(), Catch::Contains("the lock file " + daemon.lock_path() +
                                              " is a symbolic link: not followed (ringfeedd makes a regular file "
                                              "there); remove it"));
  CHECK(ReadFile(dir.file("precious.txt")) == "precious\n");
}

TEST_CASE("another user's runtime directory or segment name: the daemon refuses (exit 2); its daemon is not trusted") {
  // The breaker's finding (session 39): /tmp/ringfeed-<uid>, a user's fallback runtime
  // directory, made first by another user, who then ran a ringfeedd there (or planted a lock
  // link): the user's trainers attached to the other user's daemon. Needs root: to run as two
  // users (setpriv).
  if (::geteuid() != 0) {
    SkipOrFail("needs root, to run ringfeedd and ringfeedctl as two other users");
    return;
  }
  const uid_t user = 54329, other = 65534;  // the one whose fallback directory it is; nobody
  const auto as = [](uid_t uid, std::vector<std::string> argv) {
    std::vector<std::string> cmd = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid),
                                    "--regid=" + std::to_string(uid), "--clear-groups", "/usr/bin/env", "-i",
                                    "PATH=/usr/bin:/bin"};
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return cmd;
  };
  if (RunCommand(as(user, {CtlBinary(), "--version"})).status.ToString() != "exit 0") {
    SkipOrFail("cannot run ringfeedctl as another user (setpriv, or the build directory is closed to other users)");
    return;
  }
  TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_exec |
                                               std::filesystem::perms::others_exec);
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  std::filesystem::permissions(dir.file("data.tfrecord"), std::filesystem::perms::owner_all |
                                                              std::filesystem::perms::others_read);
  // The other user's runtime directory (the harness keeps its daemons' runtime directories in
  // the test's directory), and the user's fallback directory made by that user, with a link
  // in it to that runtime directory: one level down, as ringfeedctl looks.
  const std::string config = IdJobConfig("victim", dir.file("data.tfrecord"), "epochs: 0\n");
  DaemonProcess daemon(dir.path(), "victim", config);
  REQUIRE(::mkdir(daemon.runtime_dir().c_str(), 0755) == 0);
  REQUIRE(::chown(daemon.runtime_dir().c_str(), other, other) == 0);
  const std::string fallback = "/tmp/ringfeed-" + std::to_string(user);
  std::filesystem::remove_all(fallback);
  struct Cleanup {
    std::string path;
    ~Cleanup() { std::filesystem::remove_all(path); }
  } cleanup{fallback};
  REQUIRE(::mkdir(fallback.c_str(), 0755) == 0);
  REQUIRE(::chown(fallback.c_str(), other, other) == 0);
  const std::string below = fallback + "/x";
  std::filesystem::create_directory_symlink(daemon.runtime_dir(), below);
  REQUIRE(::lchown(below.c_str(), other, other) == 0);

  // The user's own ringfeedd, with the fallback runtime directory: refused.
  WriteFile(dir.file("victim.yaml"), config);
  std::filesystem::permissions(dir.file("victim.yaml"), std::filesystem::perms::owner_all |
                                                            std::filesystem::perms::others_read);
  const std::string foreign = fallback + ", this user's fallback runtime directory, which uid 65534 created";
  const CommandResult own = RunCommand(as(user, {DaemonBinary(), "--config", dir.file("victim.yaml")}));
  INFO(own.err);
  CHECK(own.status.ToString() == "exit 2");
  CHECK_THAT(own.err, Catch::Contains("the runtime directory " + fallback + " is this user's fallback runtime "
                                      "directory, which uid 65534 created: that user could replace"));

  // The other user's ringfeedd, its socket opened to all: the user's ringfeedctl (a client)
  // refuses it, found one level down or named.
  DaemonStart start;
  start.wrapper = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  RINGFEED_REQUIRE_STARTED(daemon, start);
  std::filesystem::permissions(daemon.socket_path(), std::filesystem::perms::all);
  for (const std::string& env : {std::string("HOME=/"), "RINGFEED_RUNTIME_DIR=" + below}) {
    const CommandResult dump = RunCommand(as(user, {env, CtlBinary(), "dump", "victim", "--batches", "1"}));
    INFO(env << ": " << dump.out << dump.err);
    CHECK(dump.status.ToString() == "exit 1");
    CHECK(dump.out.empty());
    CHECK_THAT(dump.err, Catch::Contains("not attaching to job victim: the daemon at " + below +
                                         "/victim.sock runs as uid 65534, not as this user (uid 54329) or root, in " +
                                         foreign));
  }
  // Named by its own path, that user's daemon in that user's directory is trusted (a service
  // user with permissions.group) ...
  const std::string named = "RINGFEED_RUNTIME_DIR=" + daemon.runtime_dir();
  const CommandResult trusted = RunCommand(as(user, {named, CtlBinary(), "status", "victim"}));
  INFO(trusted.out << trusted.err);
  CHECK(trusted.status.ToString() == "exit 0");
  // ... but not in a directory every user may write, nor below one of a third user.
  ::chmod(daemon.runtime_dir().c_str(), 01777);
  const CommandResult anyone = RunCommand(as(user, {named, CtlBinary(), "status", "victim"}));
  INFO(anyone.out << anyone.err);
  CHECK_THAT(anyone.err, Catch::Contains("runs as uid 65534") && Catch::Contains("may be written by every user"));
  ::chmod(daemon.runtime_dir().c_str(), 0755);
  REQUIRE(::chown(dir.path().c_str(), 54328, 54328) == 0);
  const CommandResult third = RunCommand(as(user, {named, CtlBinary(), "status", "victim"}));
  REQUIRE(::chown(dir.path().c_str(), 0, 0) == 0);
  INFO(third.out << third.err);
  CHECK_THAT(third.err, Catch::Contains(dir.path().string() + " on the way to it belongs to uid 54328"));
  daemon.Stop();

  // The fallback as another user's symbolic link (to /tmp, which passes every other check).
  std::filesystem::remove_all(fallback);
  std::filesystem::create_directory_symlink("/tmp", fallback);
  REQUIRE(::lchown(fallback.c_str(), other, other) == 0);
  const CommandResult linked = RunCommand(as(user, {DaemonBinary(), "--config", dir.file("victim.yaml")}));
  INFO(linked.err);
  CHECK(linked.status.ToString() == "exit 2");
  CHECK_THAT(linked.err, Catch::Contains("which uid 65534 made as a symbolic link"));
  std::filesystem::remove(fallback);

  // A segment name another user took: this user's daemon cannot remove it (exit 2, named).
  const std::string own_dir = dir.file("own-run");
  REQUIRE(::mkdir(own_dir.c_str(), 0700) == 0);
  REQUIRE(::chown(own_dir.c_str(), user, user) == 0);
  const std::string segment = "/dev/shm" + shm::SegmentName(own_dir, "victim");
  WriteFile(segment, "");
  REQUIRE(::chown(segment.c_str(), other, other) == 0);
  const CommandResult squatted =
      RunCommand(as(user, {DaemonBinary(), "--config", dir.file("victim.yaml"), "--runtime-dir", own_dir}));
  std::filesystem::remove(segment);
  INFO(squatted.err);
  CHECK(squatted.status.ToString() == "exit 2");
  CHECK_THAT(squatted.err, Catch::Contains(segment + " exists and belongs to uid 65534, not to the daemon's user "
                                           "(uid 54329)"));
}
