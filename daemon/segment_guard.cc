#include "daemon/segment_guard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ringfeed {
namespace {

// What the handler needs, set before it is installed (plain data: read in a signal handler).
struct GuardState {
  const volatile uint8_t* base = nullptr;
  uint64_t bytes = 0;
  char segment_name[256] = {};
  char socket_path[4096] = {};
};
GuardState g_state;

void Write(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void WriteNumber(uint64_t v) {
  char digits[24];
  size_t i = sizeof digits;
  digits[--i] = '\0';
  do {
    digits[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  Write(digits + i);
}

void OnSigbus(int signal, siginfo_t* info, void*) {
  const auto* addr = static_cast<const volatile uint8_t*>(info->si_addr);
  if (g_state.base == nullptr || addr < g_state.base || addr >= g_state.base + g_state.bytes) {
    // Not ours: the default action (terminate with a core dump), as if no guard were there.
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  Write("ringfeedd: the shared-memory segment ");
  Write(g_state.segment_name);
  Write(" was truncated by another process (an access at byte ");
  WriteNumber(static_cast<uint64_t>(addr - g_state.base));
  Write(" of ");
  WriteNumber(g_state.bytes);
  Write(" failed with SIGBUS); stopping: consumers get an error, start the job again\n");
  ::unlink(g_state.socket_path);
  ::shm_unlink(g_state.segment_name);
  ::_exit(1);
}

}  // namespace

SegmentGuard::SegmentGuard(const void* base, uint64_t bytes, const std::string& segment_name,
                           const std::string& socket_path) {
  if (segment_name.size() >= sizeof g_state.segment_name || socket_path.size() >= sizeof g_state.socket_path) {
    throw std::runtime_error("SegmentGuard: segment name or socket path too long");
  }
  std::memcpy(g_state.segment_name, segment_name.c_str(), segment_name.size() + 1);
  std::memcpy(g_state.socket_path, socket_path.c_str(), socket_path.size() + 1);
  g_state.bytes = bytes;
  g_state.base = static_cast<const volatile uint8_t*>(base);
  struct sigaction action {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGBUS, &action, &previous_) != 0) {
    throw std::runtime_error(std::string("SegmentGuard: sigaction(SIGBUS): ") + std::strerror(errno));
  }
}

SegmentGuard::~SegmentGuard() {
  ::sigaction(SIGBUS, &previous_, nullptr);
  g_state.base = nullptr;
  g_state.bytes = 0;
}

}  // namespace ringfeed
