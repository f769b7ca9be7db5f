// AttachWithRetry: Client::Attach for benchmark programs started beside ringfeedd, which opens
// its socket only after expanding the files, sampling records for the slot size and creating
// the segment. Errors: the last ClientError once `timeout` has passed. Thread-safety: as Attach.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include "client/client.h"

namespace ringfeed::bench {

// Attaches to `job`, retrying while the daemon is not listening yet (it samples the files for
// the slot size before it opens its socket). Throws the last ClientError after `timeout`.
inline std::unique_ptr<Client> AttachWithRetry(const ClientOptions& options, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    try {
      return Client::Attach(options);
    } catch (const ClientError&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace ringfeed::bench
