// ControlServer: the job's Unix-domain control socket (Boost.Asio), speaking newline-delimited
// JSON (nlohmann-json). Protocol version shm::kProtocolVersion (shm/protocol.h):
//
//   client -> {"type":"hello","protocol":1,"role":"consumer"|"control","pid":P,"rank":R|null}
//   daemon -> {"type":"welcome","protocol":1,"job":...,"segment":...,"instance_id":"<16 hex>",
//              "consumer_id":C (consumers only),"daemon_pid":...}
//          or {"type":"error","message":"..."} and the connection is closed.
//   A consumer keeps its connection open while it lives: the connection closing (the process
//   exited or was killed; the kernel closes its sockets) is how the daemon learns that a
//   consumer is gone and reclaims the slots it held.
//   A control client then sends requests, one per line: {"type":"status"} -> the status object
//   (docs/operations.md), {"type":"files"} -> {"type":"files","files":[...]}.
// The consumer's pid is taken from the socket's peer credentials (SO_PEERCRED), not from the
// message. Limits against misbehaving clients: at most 256 open connections, a hello within
// 5 s, a control connection closed after 60 s without a request, one request at a time (the
// next is read once the reply is written), 64 KiB per line.
//
// Threading: everything runs on the io_context's thread; the handlers are called there.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "shm/file_id.h"

namespace ringfeed {

class ControlServer {
 public:
  struct Handlers {
    // A consumer says hello; returns its consumer id, or an error message for the client and
    // whether the refusal is for now (*retry: the reply says "retry", which a client with
    // attach_timeout tries again).
    std::function<std::optional<uint32_t>(pid_t pid, std::optional<int> rank, std::string* error, bool* retry)>
        attach;
    // The consumer's connection closed (`pid`: its peer credentials, to tell it from a later
    // consumer given the same id).
    std::function<void(uint32_t consumer_id, pid_t pid)> detach;
    // {"type":"status"} and other requests: returns the reply object.
    std::function<nlohmann::json(const nlohmann::json& request)> request;
  };
  // What the welcome message carries besides the consumer id.
  struct Welcome {
    std::string job;
    std::string segment;
    uint64_t instance_id = 0;
  };

  // Binds and listens on `socket_path` (an existing file there is removed first: the caller
  // has made sure no live daemon owns it). `mode` 0600 or 0660; `group` chowns the socket.
  // Throws std::runtime_error naming the path on failure.
  ControlServer(boost::asio::io_context& io, std::string socket_path, mode_t mode, std::optional<gid_t> group,
                Welcome welcome, Handlers handlers);
  // Closes the acceptor and every connection; removes the socket file if the path still names
  // the socket this server bound (another daemon may have put its own there meanwhile).
  ~ControlServer();

  // Binds and listens at socket_path() again, after its file was removed under the daemon (a
  // cleaner of the runtime directory): the old listening socket is closed, open connections
  // (attached trainers) stay. The caller has made sure that nothing is at the path and that
  // this daemon still holds the job's lock. Throws std::runtime_error naming the path.
  void Rebind();
  // Stops listening, as the daemon stops: the connections waiting in the socket's queue are
  // reset and later ones refused, so that a trainer attaching then is told so at once (and
  // waits for the next daemon with attach_timeout) instead of waiting for a welcome no one
  // sends. Open connections stay; the socket file stays until the destructor.
  void StopListening();

  const std::string& socket_path() const { return socket_path_; }
  // The socket file as bound (shm/file_id.h).
  shm::FileId socket_id() const { return socket_id_; }

 private:
  class Connection;
  void Bind();  // a new listening socket at socket_path_, with mode_ and group_; sets socket_id_
  void Accept();
  // A connection accepted: served, or refused over kMaxControlConnections.
  void Admit(boost::asio::local::stream_protocol::socket socket);

  boost::asio::io_context& io_;
  std::string socket_path_;
  mode_t mode_;
  std::optional<gid_t> group_;
  shm::FileId socket_id_;
  Welcome welcome_;
  Handlers handlers_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer backoff_;  // after a failed accept
  std::chrono::steady_clock::time_point next_accept_warning_{};  // rate limit of its warning
  std::chrono::steady_clock::time_point next_refusal_warning_{};  // ... and of refused connections
  uint64_t refused_connections_ = 0;
  std::chrono::steady_clock::time_point next_attach_refusal_log_{};  // ... and of refused attaches
  uint64_t refused_attaches_ = 0;
  size_t connections_ = 0;
  std::shared_ptr<bool> alive_;  // connections outliving the server see false
};

}  // namespace ringfeed
