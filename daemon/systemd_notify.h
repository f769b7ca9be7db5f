// SystemdNotifier: ringfeedd's side of the systemd service notification protocol, over
// libsystemd's sd_notify(3) and sd_watchdog_enabled(3).
//
// Protocol (sd_notify(3), systemd.service(5) Type=notify): the service manager passes the path
// of an AF_UNIX datagram socket in $NOTIFY_SOCKET ("/run/systemd/notify", or "@name" for the
// abstract namespace); the service sends newline-separated VAR=value assignments, one datagram
// per call:
//   READY=1        start-up finished (socket listening, segment created): `systemctl start`
//                  returns, units ordered After= this one start;
//   STATUS=text    free-form one-line status shown by `systemctl status`;
//   WATCHDOG=1     keep-alive; with WatchdogSec= set, systemd kills and (Restart=on-failure)
//                  restarts the service when none arrives for WatchdogSec;
//   STOPPING=1     shutdown began (after SIGTERM), so a slow drain is not taken for a hang.
// The watchdog period comes in $WATCHDOG_USEC (microseconds) and applies only to the process
// named by $WATCHDOG_PID when that is set. With NotifyAccess=main (systemd/ringfeed@.service)
// only messages from the main PID count: send from ringfeedd itself, any thread, never from a
// forked child.
//
// Outside systemd ($NOTIFY_SOCKET unset) every call is a no-op returning 0, so the daemon calls
// them unconditionally. The environment is read at each call, as sd_notify does, and left as it
// is (the daemon must not setenv/unsetenv these variables while other threads notify).
//
// Return values follow sd_notify(3): 1 sent, 0 not sent (no $NOTIFY_SOCKET), negative errno on
// failure (e.g. -ECONNREFUSED when the manager's socket is gone). A failure is worth a log line,
// never a reason to stop loading data.
//
// Thread-safety: every method may be called from any thread at the same time. Messages are
// sent one at a time under a mutex, so datagrams leave in call order.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace ringfeed {

class SystemdNotifier {
 public:
  SystemdNotifier() = default;
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  // True when $NOTIFY_SOCKET is set and non-empty (started by systemd with Type=notify).
  static bool Enabled();

  int Ready();                        // "READY=1"
  int Status(std::string_view text);  // "STATUS=<text>"; newlines become spaces (one line)
  int Stopping();                     // "STOPPING=1"
  int Watchdog();                     // "WATCHDOG=1"

  // How often to call Watchdog(): half of $WATCHDOG_USEC (sd_watchdog_enabled(3) recommends
  // pinging at half the timeout), so one late tick does not get the daemon killed. nullopt when
  // the watchdog is off: $WATCHDOG_USEC unset, zero or malformed, or $WATCHDOG_PID naming
  // another process.
  static std::optional<std::chrono::microseconds> WatchdogInterval();

 private:
  int Send(const std::string& message);

  std::mutex mutex_;
};

}  // namespace ringfeed
