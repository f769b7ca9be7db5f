// SegmentGuard: turns a SIGBUS in ringfeedd's shared-memory segment into a clear exit.
//
// The segment is a file in /dev/shm that its consumers may open read-write (they map batch data
// writable, docs/client.md). A process that truncates it (ftruncate, `: > /dev/shm/...`) makes
// every later access of the daemon to the lost pages raise SIGBUS, which would kill it with no
// word and leave its socket and the empty segment behind. While a SegmentGuard lives, a SIGBUS
// whose fault address lies in the segment writes one line to stderr ("[error] ringfeedd: the
// shared-memory segment NAME was truncated by another process ... stopping"), removes the
// socket, the segment name and the lock file (each only while it still names the daemon's own
// file, as at any stop: shm/file_id.h), and ends the process with exit status 1 (runtime
// failure, as documented for ringfeedd; systemd's Restart=on-failure starts it again on a
// fresh segment). Consumers see the daemon gone (their control connection closes) and fail
// within 2 s, as for any daemon death; one that touches the lost pages first dies of SIGBUS
// itself (the client library installs no handler). A SIGBUS elsewhere (another address, a hardware memory error, kill -BUS)
// goes to the action that was in place before the guard.
//
// Only async-signal-safe calls in the handler (write, lstat, unlink, sigaction, raise, and the
// exit_group system call);
// the names are copied into fixed buffers at construction. One guard at a time per process.
// Thread-safety: construct and destroy on one thread, before and after the threads that touch
// the segment.
#pragma once

#include <signal.h>

#include <cstdint>
#include <string>

#include "shm/file_id.h"

namespace ringfeed {

class SegmentGuard {
 public:
  // `base`, `bytes`: the daemon's mapping of the segment; `segment_name`: its POSIX shm name
  // ("/ringfeed.<job>.<hash>"), `segment_id` its file; `socket_path`: the job's control socket
  // (removed by the handler only once SocketBound said which file it is); `lock_path`,
  // `lock_id`: the job's lock file. Throws std::runtime_error when the handler cannot be
  // installed or the names are too long.
  SegmentGuard(const void* base, uint64_t bytes, const std::string& segment_name, shm::FileId segment_id,
               const std::string& socket_path, const std::string& lock_path, shm::FileId lock_id);
  ~SegmentGuard();  // restores the previous SIGBUS action
  SegmentGuard(const SegmentGuard&) = delete;
  SegmentGuard& operator=(const SegmentGuard&) = delete;

  // The control socket is bound: `id` is its file. Call before starting the threads that touch
  // the segment (they see it through the thread start); again when the daemon made its socket
  // again (RuntimeNames): a SIGBUS in the few instructions of that store may read a torn id and
  // leave the socket (the next start replaces a socket left so).
  void SocketBound(shm::FileId id);
  // The lock file was made again (LockFile::Reassert): `id` is the new one. As SocketBound.
  void LockFileIs(shm::FileId id);

};

}  // namespace ringfeed
