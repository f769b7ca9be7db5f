// SystemdNotifier: thin wrapper over sd_notify(3) / sd_watchdog_enabled(3); see the header for
// the protocol.
#include "daemon/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstdlib>

namespace ringfeed {

bool SystemdNotifier::Enabled() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return socket != nullptr && *socket != '\0';
}

int SystemdNotifier::Ready() { return Send("READY=1"); }

int SystemdNotifier::Status(std::string_view text) {
  // A newline would start a second assignment: "STATUS=x\nREADY=1" must not be possible.
  std::string message = "STATUS=";
  for (char c : text) message += (c == '\n' || c == '\r') ? ' ' : c;
  return Send(message);
}

int SystemdNotifier::Stopping() { return Send("STOPPING=1"); }

int SystemdNotifier::Watchdog() { return Send("WATCHDOG=1"); }

std::optional<std::chrono::microseconds> SystemdNotifier::WatchdogInterval() {
  uint64_t usec = 0;
  // > 0: enabled for this process; 0: off or meant for another PID; < 0: malformed variables.
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec >= 2 ? usec / 2 : 1);
}

int SystemdNotifier::Send(const std::string& message) {
  if (!Enabled()) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  return sd_notify(/*unset_environment=*/0, message.c_str());
}

}  // namespace ringfeed
