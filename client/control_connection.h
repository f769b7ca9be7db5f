// ControlConnection: the consumer's end of the control socket to ringfeedd (protocol in
// shm/protocol.h): connect, send the hello line, read the welcome line, then stay open for the
// consumer's lifetime. Its end tells each side that the other is gone.
//
// Plain POSIX Unix stream socket; no event loop. Errors throw ClientError naming the socket
// path. Thread-safety: DaemonClosed() may be called from several threads at once; the
// handshake (Connect, SendLine, ReadLine) happens on one thread before the object is shared.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "client/client_error.h"

namespace ringfeed::detail {

// What Connect throws when the daemon that left the socket is gone (GoneDaemonPid): ringfeedctl
// list shows such a job as "gone", not "unreachable".
class DaemonGoneError : public DaemonNotRunningError {
 public:
  using DaemonNotRunningError::DaemonNotRunningError;
};

// What ReadLine and SendLine throw when the daemon closed or reset the connection before a whole
// line came: in Attach, a daemon that accepted the connection and then stopped (SIGTERM, a
// restart: the connections still queued at its socket are reset as it closes it), which
// ClientOptions::attach_timeout waits out as it waits for a daemon that does not run yet.
class ConnectionClosedError : public ClientError {
 public:
  using ClientError::ClientError;
};

// The pid in the job's lock file beside the socket at `socket_path` (`<dir>/<job>.lock`, written
// by the ringfeedd that held it) when no ringfeedd has that pid any more: no process has it, its
// process exited and is not reaped yet (a zombie), or another program got the pid since: the
// daemon is gone and its socket was left behind (SIGKILL, a crash, the OOM killer). nullopt when
// there is no such file, it names no pid, or a ringfeedd has that pid (another ringfeedd that
// got the pid is not told apart). Only reads: taking the lock to test it would refuse a
// ringfeedd starting at that moment.
std::optional<long> GoneDaemonPid(const std::string& socket_path, const std::string& job);

// Whether process `pid` runs and is a ringfeedd (its executable's name, /proc/PID/exe, else
// its command name, /proc/PID/comm, where exe is another user's): a pid read from a file may be
// another program's (a file written by hand, a pid reused since). Another ringfeedd's reused
// pid is not told apart.
bool RunsRingfeedd(long pid);

// What the job's lock file beside the socket says: the pid of the ringfeedd that holds (or
// held) it, whether it wrote that it is stopping, and whether that ringfeedd is gone (as
// GoneDaemonPid): exited, or its pid now another program's (a process this /proc shows that is
// not a ringfeedd: RunsRingfeedd). nullopt when there is no such file or it names no pid.
struct LockHolder {
  long pid = 0;
  bool stopping = false;
  bool gone = false;
};
std::optional<LockHolder> ReadLockHolder(const std::string& socket_path, const std::string& job);

class ControlConnection {
 public:
  ControlConnection() = default;
  ~ControlConnection();
  ControlConnection(const ControlConnection&) = delete;
  ControlConnection& operator=(const ControlConnection&) = delete;

  // Connects to the Unix socket at `path`; `job` is for messages and names the lock file beside
  // it. Throws ClientError: DaemonNotRunningError when nothing listens there, DaemonGoneError
  // when that is because the daemon that made the socket is gone, a plain ClientError when the
  // daemon's queue of connections stays full for kConnectTimeoutSeconds (it is stopped).
  // A connection still open (an attach trying again) is closed first, as Close does.
  void Connect(const std::string& path, const std::string& job);
  static constexpr int kConnectTimeoutSeconds = 5;
  // Writes `line` + '\n' completely. Throws ClientError (ConnectionClosedError where the daemon
  // closed or reset the connection); not when the daemon closed the connection after writing a
  // line (its refusal): ReadLine returns that line next.
  void SendLine(const std::string& line);
  // Reads up to and excluding the next '\n', waiting at most `timeout`. Throws ClientError on
  // timeout or a line longer than shm::kMaxMessageBytes; ConnectionClosedError at EOF or a reset.
  std::string ReadLine(std::chrono::milliseconds timeout);
  // Asked every 100 ms while ReadLine waits: true ends the wait with ClientInterrupted.
  void SetInterrupted(std::function<bool()> interrupted) { interrupted_ = std::move(interrupted); }
  // Non-blocking: true once the daemon has closed its end (EOF, hang-up or error). Anything
  // the daemon sends after the welcome is read and dropped.
  bool DaemonClosed();
  // Sends {"type":"bye"} (best effort) and closes; what was read past the last line is dropped,
  // so the object can connect again. Idempotent.
  void Close();

 private:
  // Why the daemon at path_ may not have answered, from its lock file and its process state:
  // " (stopped or frozen?)" when neither tells.
  std::string WhyNoAnswer() const;

  int fd_ = -1;
  int owner_pid_ = 0;  // the process that connected
  std::string path_;
  std::string job_;
  std::string buffered_;  // bytes read past the last line
  std::function<bool()> interrupted_;
};

}  // namespace ringfeed::detail
