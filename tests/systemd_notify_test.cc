// Tests of daemon/systemd_notify: the sd_notify(3) protocol as the service manager sees it. The
// test plays systemd: it binds an AF_UNIX datagram socket in a temporary directory (or in the
// abstract namespace), points $NOTIFY_SOCKET at it and reads back the exact datagrams. The
// watchdog interval is checked from $WATCHDOG_USEC / $WATCHDOG_PID, also in a forked child whose
// PID is not the one systemd named.
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/systemd_notify.h"

namespace ringfeed {
namespace {

using std::chrono::microseconds;

// Sets an environment variable for the lifetime of the object, restoring the old state after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = std::string(old);
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// The service manager's end: a bound AF_UNIX datagram socket. `address` is what goes into
// $NOTIFY_SOCKET: a path in a fresh temporary directory, or "@name" for the abstract namespace.
class FakeManager {
 public:
  explicit FakeManager(bool abstract = false) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socklen_t len;
    if (abstract) {
      address_ = "@ringfeed-notify-test-" + std::to_string(getpid());
      // Abstract address: a leading NUL, then the name, not NUL-terminated (sd_notify(3)).
      std::memcpy(addr.sun_path + 1, address_.data() + 1, address_.size() - 1);
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
    } else {
      char dir[] = "/tmp/ringfeed_notify_test_XXXXXX";
      REQUIRE(mkdtemp(dir) != nullptr);
      dir_ = dir;
      address_ = dir_ + "/notify";
      std::strcpy(addr.sun_path, address_.c_str());
      len = sizeof(addr);
    }
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    // Generous: "eventually" must not depend on timing luck; a datagram sent before sd_notify
    // returned is already queued.
    timeval timeout{10, 0};
    REQUIRE(setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) == 0);
  }
  ~FakeManager() {
    close(fd_);
    if (!dir_.empty()) {
      unlink(address_.c_str());
      rmdir(dir_.c_str());
    }
  }
  FakeManager(const FakeManager&) = delete;
  FakeManager& operator=(const FakeManager&) = delete;

  const std::string& address() const { return address_; }

  // The next datagram; "<timeout>" when none came within 10 s.
  std::string Receive() {
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0) return "<timeout>";
    return std::string(buf, static_cast<size_t>(n));
  }

  // True when no datagram is queued (the check is exact: sending is synchronous).
  bool Empty() {
    char buf[16];
    ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  std::string dir_;
  std::string address_;
};

TEST_CASE("without NOTIFY_SOCKET every call is a no-op", "[systemd][notify]") {
  FakeManager manager;
  ScopedEnv socket("NOTIFY_SOCKET", nullptr);
  ScopedEnv usec("WATCHDOG_USEC", nullptr);
  ScopedEnv pid("WATCHDOG_PID", nullptr);
  SystemdNotifier notifier;
  CHECK_FALSE(SystemdNotifier::Enabled());
  CHECK(notifier.Ready() == 0);
  CHECK(notifier.Status("reading") == 0);
  CHECK(notifier.Watchdog() == 0);
  CHECK(notifier.Stopping() == 0);
  CHECK_FALSE(SystemdNotifier::WatchdogInterval());
  CHECK(manager.Empty());

  ScopedEnv empty("NOTIFY_SOCKET", "");
  CHECK_FALSE(SystemdNotifier::Enabled());
  CHECK(notifier.Ready() == 0);
  CHECK(manager.Empty());
}

TEST_CASE("the manager receives the exact sd_notify assignments, in call order",
          "[systemd][notify]") {
  const bool abstract = GENERATE(false, true);
  INFO((abstract ? "abstract socket" : "socket path"));
  FakeManager manager(abstract);
  ScopedEnv socket("NOTIFY_SOCKET", manager.address().c_str());
  SystemdNotifier notifier;
  CHECK(SystemdNotifier::Enabled());

  CHECK(notifier.Status("starting: 12 files, ring of 8 slots x 64 MiB") > 0);
  CHECK(notifier.Ready() > 0);
  CHECK(notifier.Watchdog() > 0);
  CHECK(notifier.Status("epoch 3, 1204 batches, 2 consumers") > 0);
  CHECK(notifier.Status("two\nlines\r\n") > 0);
  CHECK(notifier.Status("") > 0);
  CHECK(notifier.Stopping() > 0);

  CHECK(manager.Receive() == "STATUS=starting: 12 files, ring of 8 slots x 64 MiB");
  CHECK(manager.Receive() == "READY=1");
  CHECK(manager.Receive() == "WATCHDOG=1");
  CHECK(manager.Receive() == "STATUS=epoch 3, 1204 batches, 2 consumers");
  CHECK(manager.Receive() == "STATUS=two lines  ");  // one line: no injected assignments
  CHECK(manager.Receive() == "STATUS=");
  CHECK(manager.Receive() == "STOPPING=1");
  CHECK(manager.Empty());
  // The variable stays for later calls (unset_environment = 0).
  CHECK(getenv("NOTIFY_SOCKET") == manager.address());
}

TEST_CASE("a missing manager socket is an error value, not a crash", "[systemd][notify]") {
  ScopedEnv socket("NOTIFY_SOCKET", "/nonexistent/ringfeed/notify");
  SystemdNotifier notifier;
  CHECK(notifier.Ready() == -ENOENT);
  CHECK(notifier.Watchdog() < 0);
}

TEST_CASE("concurrent notifications from many threads all arrive intact", "[systemd][notify]") {
  FakeManager manager;
  ScopedEnv socket("NOTIFY_SOCKET", manager.address().c_str());
  SystemdNotifier notifier;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;

  // Read while the threads send: the kernel queues only a few datagrams per socket
  // (net.unix.max_dgram_qlen), and sd_notify blocks until there is room.
  std::vector<std::string> received;
  std::thread reader([&] {
    for (int i = 0; i < kThreads * kPerThread; ++i) {
      std::string m = manager.Receive();
      if (m == "<timeout>") break;
      received.push_back(std::move(m));
    }
  });
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int r = (i % 2 == 0) ? notifier.Status("thread " + std::to_string(t) + " message " +
                                               std::to_string(i))
                             : notifier.Watchdog();
        if (r <= 0) ++failures[t];
      }
    });
  }
  for (std::thread& s : senders) s.join();
  reader.join();

  for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
  REQUIRE(received.size() == kThreads * kPerThread);
  std::multiset<std::string> got(received.begin(), received.end());
  std::multiset<std::string> want;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      want.insert(i % 2 == 0 ? "STATUS=thread " + std::to_string(t) + " message " +
                                   std::to_string(i)
                             : "WATCHDOG=1");
    }
  }
  CHECK(got == want);
}

TEST_CASE("WatchdogInterval is half of WATCHDOG_USEC, for the named process only",
          "[systemd][watchdog]") {
  ScopedEnv pid("WATCHDOG_PID", nullptr);
  {
    ScopedEnv usec("WATCHDOG_USEC", nullptr);
    CHECK_FALSE(SystemdNotifier::WatchdogInterval());
  }
  {
    ScopedEnv usec("WATCHDOG_USEC", "30000000");  // WatchdogSec=30s
    CHECK(SystemdNotifier::WatchdogInterval() == std::optional<microseconds>(15000000));

    const std::string self = std::to_string(getpid());
    ScopedEnv mine("WATCHDOG_PID", self.c_str());
    CHECK(SystemdNotifier::WatchdogInterval() == std::optional<microseconds>(15000000));

    ScopedEnv other("WATCHDOG_PID", std::to_string(getppid()).c_str());
    CHECK_FALSE(SystemdNotifier::WatchdogInterval());
  }
  {
    ScopedEnv usec("WATCHDOG_USEC", "3");
    CHECK(SystemdNotifier::WatchdogInterval() == std::optional<microseconds>(1));
  }
  for (const char* bad : {"0", "", "abc", "-5", "12s"}) {
    INFO("WATCHDOG_USEC=" << bad);
    ScopedEnv usec("WATCHDOG_USEC", bad);
    CHECK_FALSE(SystemdNotifier::WatchdogInterval());
  }
  {
    ScopedEnv usec("WATCHDOG_USEC", "30000000");
    ScopedEnv bad_pid("WATCHDOG_PID", "not-a-pid");
    CHECK_FALSE(SystemdNotifier::WatchdogInterval());
  }
}

TEST_CASE("a forked child is not the process the watchdog names", "[systemd][watchdog]") {
  // systemd sets WATCHDOG_PID to the main PID; a child that inherits the environment must not
  // think it owns the watchdog (nor send keep-alives for the daemon).
  ScopedEnv usec("WATCHDOG_USEC", "2000000");
  const std::string self = std::to_string(getpid());
  ScopedEnv pid("WATCHDOG_PID", self.c_str());
  REQUIRE(SystemdNotifier::WatchdogInterval() == std::optional<microseconds>(1000000));

  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Exit status 0: the child sees the watchdog as off; 1: it wrongly sees it on.
    _exit(SystemdNotifier::WatchdogInterval().has_value() ? 1 : 0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace ringfeed
