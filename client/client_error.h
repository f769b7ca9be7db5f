// ClientError: what the client library throws. The message says what happened, names the job,
// the daemon's pid or the file/segment involved, and the fix where there is one, e.g.
// "ringfeedd (pid 4242) for job train exited". A timeout is never an error (Client::Next
// returns Status::kTimeout).
#pragma once

#include <stdexcept>
#include <string>

namespace ringfeed {

class ClientError : public std::runtime_error {
 public:
  explicit ClientError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ringfeed
