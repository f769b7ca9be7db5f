#include "daemon/segment_guard.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "daemon/log_format.h"

namespace ringfeed {
namespace {

// What the handler needs, set before it is installed (plain data: read in a signal handler).
struct GuardState {
  const volatile uint8_t* base = nullptr;
  uint64_t bytes = 0;
  char segment_name[256] = {};  // "/ringfeed.<job>.<hash>", for the message
  char segment_file[272] = {};  // "/dev/shm" + name: unlink() is async-signal-safe, shm_unlink is not listed
  char socket_path[4096] = {};
  char lock_path[4096] = {};
  shm::FileId segment_id;  // the files to remove: only while the names still refer to them
  shm::FileId socket_id;   // {} until the socket is bound
  shm::FileId lock_id;
  struct sigaction previous {};  // the action before the guard, for faults that are not ours
  bool journal = false;           // under systemd: the line starts with a priority, not the time
  long utc_offset_seconds = 0;    // the log's time zone (localtime_r is not async-signal-safe)
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
  // Ours: an access to a page of the segment beyond the end of its file (BUS_ADRERR). A kill
  // -BUS (si_code <= 0), a hardware memory error (BUS_MCEERR_*) or an address elsewhere goes to
  // the action that was there before the guard: restored, then re-raised for a sent signal, or
  // met again when the faulting access is retried on return.
  if (info->si_code != BUS_ADRERR || g_state.base == nullptr || addr < g_state.base ||
      addr >= g_state.base + g_state.bytes) {
    ::sigaction(SIGBUS, &g_state.previous, nullptr);
    if (info->si_code <= 0) ::raise(signal);
    return;
  }
  // The line as the log's own error lines start (SetLogPattern): the time, or the journal's
  // priority (JournalPriority: error 3).
  if (g_state.journal) {
    Write("<3>");
  } else {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    char time[kLogTimeBytes + 1] = {};
    FormatLogTime(int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec, g_state.utc_offset_seconds, time);
    Write(time);
  }
  Write("[error] ringfeedd: the shared-memory segment ");
  Write(g_state.segment_name);
  Write(" was truncated by another process (an access at byte ");
  WriteNumber(static_cast<uint64_t>(addr - g_state.base));
  Write(" of ");
  WriteNumber(g_state.bytes);
  Write(" failed with SIGBUS); stopping, its socket, segment and lock file removed: trainers mapping it may die of "
        "SIGBUS too, the others get an error; start the job again\n");
  shm::UnlinkIfSame(g_state.socket_path, g_state.socket_id);
  shm::UnlinkIfSame(g_state.segment_file, g_state.segment_id);
  shm::UnlinkIfSame(g_state.lock_path, g_state.lock_id);
  // At once, every thread: the daemon's once-a-second check of its names would make a removed
  // socket and lock file again. (_exit is exit_group too, but ThreadSanitizer's _exit waits a
  // second first, its atexit_sleep_ms, and a TSan run of the daemon tests found both made
  // again.)
  ::syscall(SYS_exit_group, 1);
  ::_exit(1);  // not reached
}

}  // namespace

SegmentGuard::SegmentGuard(const void* base, uint64_t bytes, const std::string& segment_name,
                           shm::FileId segment_id, const std::string& socket_path, const std::string& lock_path,
                           shm::FileId lock_id) {
  const std::string segment_file = "/dev/shm" + segment_name;  // where glibc's shm_open puts it
  if (segment_file.size() >= sizeof g_state.segment_file || socket_path.size() >= sizeof g_state.socket_path ||
      lock_path.size() >= sizeof g_state.lock_path) {
    throw std::runtime_error("SegmentGuard: segment name, socket or lock path too long");
  }
  std::memcpy(g_state.segment_name, segment_name.c_str(), segment_name.size() + 1);
  std::memcpy(g_state.segment_file, segment_file.c_str(), segment_file.size() + 1);
  std::memcpy(g_state.socket_path, socket_path.c_str(), socket_path.size() + 1);
  std::memcpy(g_state.lock_path, lock_path.c_str(), lock_path.size() + 1);
  g_state.lock_id = lock_id;
  g_state.segment_id = segment_id;
  g_state.socket_id = {};
  g_state.bytes = bytes;
  g_state.journal = std::getenv("JOURNAL_STREAM") != nullptr;
  const time_t now = ::time(nullptr);
  if (tm local{}; ::localtime_r(&now, &local) != nullptr) g_state.utc_offset_seconds = local.tm_gmtoff;
  g_state.base = static_cast<const volatile uint8_t*>(base);
  struct sigaction action {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGBUS, &action, &g_state.previous) != 0) {
    throw std::runtime_error(std::string("SegmentGuard: sigaction(SIGBUS): ") + std::strerror(errno));
  }
}

void SegmentGuard::LockFileIs(shm::FileId id) { g_state.lock_id = id; }

void SegmentGuard::SocketBound(shm::FileId id) {
  g_state.socket_id = id;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // stored before this thread's next access can fault
}

SegmentGuard::~SegmentGuard() {
  ::sigaction(SIGBUS, &g_state.previous, nullptr);
  g_state.base = nullptr;
  g_state.bytes = 0;
}

}  // namespace ringfeed
