// ControlConnection: the consumer's end of the control socket to ringfeedd (protocol in
// shm/protocol.h): connect, send the hello line, read the welcome line, then stay open for the
// consumer's lifetime. Its end tells each side that the other is gone.
//
// Plain POSIX Unix stream socket; no event loop. Errors throw ClientError naming the socket
// path. Thread-safety: DaemonClosed() may be called from several threads at once; the
// handshake (Connect, SendLine, ReadLine) happens on one thread before the object is shared.
#pragma once

#include <chrono>
#include <string>

namespace ringfeed::detail {

class ControlConnection {
 public:
  ControlConnection() = default;
  ~ControlConnection();
  ControlConnection(const ControlConnection&) = delete;
  ControlConnection& operator=(const ControlConnection&) = delete;

  // Connects to the Unix socket at `path`; `job` is for messages. Throws ClientError.
  void Connect(const std::string& path, const std::string& job);
  // Writes `line` + '\n' completely. Throws ClientError; not when the daemon closed the
  // connection after writing a line (its refusal): ReadLine returns that line next.
  void SendLine(const std::string& line);
  // Reads up to and excluding the next '\n', waiting at most `timeout`. Throws ClientError on
  // timeout, EOF or a line longer than shm::kMaxMessageBytes.
  std::string ReadLine(std::chrono::milliseconds timeout);
  // Non-blocking: true once the daemon has closed its end (EOF, hang-up or error). Anything
  // the daemon sends after the welcome is read and dropped.
  bool DaemonClosed();
  // Sends {"type":"bye"} (best effort) and closes. Idempotent.
  void Close();

 private:
  int fd_ = -1;
  int owner_pid_ = 0;  // the process that connected
  std::string path_;
  std::string buffered_;  // bytes read past the last line
};

}  // namespace ringfeed::detail
