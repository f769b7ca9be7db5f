// ClientError: what the client library throws. The message says what happened, names the job,
// the daemon's pid or the file/segment involved, and the fix where there is one, e.g.
// "ringfeedd (pid 4242) for job train exited". A timeout is never an error (Client::Next
// returns Status::kTimeout).
#pragma once

#include <stdexcept>
#include <string>

// The C++ API passes std::string across the library's boundary, so a trainer must use the
// libstdc++ string ABI the library was built with (the C++11 one, GCC's default since 5). A
// trainer built with -D_GLIBCXX_USE_CXX11_ABI=0 (older libtorch builds ask for it) would link
// and then crash in Attach: stop it here. The C ABI (client/ringfeed.h) has no such dependence.
#if defined(__GLIBCXX__) && defined(_GLIBCXX_USE_CXX11_ABI) && !_GLIBCXX_USE_CXX11_ABI
#error "ringfeed's C++ API needs _GLIBCXX_USE_CXX11_ABI=1, the library's ABI; with 0 use the C ABI, client/ringfeed.h"
#endif

namespace ringfeed {

class ClientError : public std::runtime_error {
 public:
  explicit ClientError(const std::string& message) : std::runtime_error(message) {}
};

// What Client::Attach throws when nothing listens at the job's control socket: it does not
// exist or refuses connections (the daemon is not running or not ready yet, or uses another
// runtime directory). ClientOptions::attach_timeout waits for it instead.
class DaemonNotRunningError : public ClientError {
 public:
  // `reason`: the failed connect ("cannot connect to ringfeedd for job J at PATH: ..."); the
  // message may add how long Attach tried.
  DaemonNotRunningError(const std::string& message, const std::string& reason)
      : ClientError(message), reason_(reason) {}
  explicit DaemonNotRunningError(const std::string& reason) : DaemonNotRunningError(reason, reason) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// What Attach throws when this process may not connect to the job's control socket (EACCES:
// the runtime directory's or the socket's mode, the daemon's permissions.group); the message
// says which and the fix. The daemon is there: waiting (attach_timeout) does not help.
class AccessDeniedError : public ClientError {
 public:
  using ClientError::ClientError;
};

// What Attach and files() throw when ClientOptions::interrupted said to stop waiting (a
// binding's Ctrl-C): the wait was given up, nothing else went wrong.
class ClientInterrupted : public ClientError {
 public:
  using ClientError::ClientError;
};

}  // namespace ringfeed
