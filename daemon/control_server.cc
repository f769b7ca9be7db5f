#include "daemon/control_server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <istream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "daemon/budget.h"
#include "format/utf8.h"
#include "shm/protocol.h"

namespace ringfeed {
namespace asio = boost::asio;
using stream_protocol = asio::local::stream_protocol;

namespace {
constexpr size_t kMaxRequestBytes = 64 * 1024;  // a hello or a request is tiny
// Requests are flat objects: a deeper one is refused before it is parsed. nlohmann::json copies,
// dumps and compares values recursively, and one 64 KiB line of 32,000 nested '[' took 4-5 MiB
// of stack to copy: a SIGSEGV under a 4 MiB stack limit (this session's breaker).
constexpr int kMaxRequestDepth = 16;
// Untrusted values are quoted in replies and logs at most this long.
constexpr size_t kMaxQuotedBytes = 64;
// A connection must say hello within this time.
constexpr auto kHelloTimeout = std::chrono::seconds(5);
// A control connection (ringfeedctl, a monitoring script) that sends no request for this long
// is closed: idle ones held open could use up kMaxControlConnections and lock trainers out. Consumers'
// connections stay open as long as they live.
constexpr auto kControlIdleTimeout = std::chrono::seconds(60);
// After accept() fails (e.g. EMFILE), wait before trying again instead of spinning.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
constexpr auto kAcceptWarningEvery = std::chrono::seconds(10);  // the warning while accept fails
constexpr auto kRefusalWarningEvery = std::chrono::seconds(10);  // ... and while connections are refused
constexpr auto kAttachRefusalLogEvery = std::chrono::seconds(1);  // a refused consumer's reason, at most

// The deepest nesting of objects and arrays in `line` (a JSON text), counted outside strings;
// stops counting once over `limit`.
int JsonDepth(const std::string& line, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : line) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// `value` as JSON text for a message, cut to at most kMaxQuotedBytes at a character boundary: a
// character cut in two would be invalid UTF-8, which the reply's dump turns into U+FFFD.
std::string Quoted(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxQuotedBytes) {
    text = text.substr(0, Utf8Prefix(text, kMaxQuotedBytes)) + "... (" + std::to_string(text.size()) + " bytes)";
  }
  return text;
}

}  // namespace

class ControlServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ControlServer* server, stream_protocol::socket socket)
      : server_(server),
        alive_(server->alive_),
        socket_(std::move(socket)),
        input_(kMaxRequestBytes),
        hello_timer_(server->io_),
        idle_timer_(server->io_) {
    ++server_->connections_;
  }

  ~Connection() {
    if (!*alive_) return;
    --server_->connections_;
    if (consumer_id_ != 0) server_->handlers_.detach(consumer_id_, peer_pid_);
  }

  void Start() {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) peer_pid_ = cred.pid;
    auto self = shared_from_this();
    hello_timer_.expires_after(kHelloTimeout);
    hello_timer_.async_wait([this, self](const boost::system::error_code& ec) {
      if (ec || said_hello_) return;
      boost::system::error_code ignored;
      socket_.close(ignored);  // pending reads end; the connection goes away
    });
    Read();
  }

 private:
  void Read() {
    auto self = shared_from_this();
    asio::async_read_until(socket_, input_, '\n', [this, self](const boost::system::error_code& ec, size_t) {
      if (ec == asio::error::not_found && *alive_) {  // kMaxRequestBytes without a newline
        hello_timer_.cancel();
        idle_timer_.cancel();
        Fail("request line longer than " + std::to_string(kMaxRequestBytes - 1) + " bytes (one JSON object per line, "
             "ended by a newline; requests are small)");
        return;
      }
      if (ec || !*alive_) {  // closed (EOF), or server gone: the destructor detaches
        hello_timer_.cancel();  // its handler holds this connection alive
        idle_timer_.cancel();
        return;
      }
      idle_timer_.cancel();  // a request came
      std::istream in(&input_);
      std::string line;
      std::getline(in, line);
      bool keep = false;
      try {
        keep = Handle(line);
      } catch (const std::exception& e) {  // a field of an unexpected JSON type, ...: this connection's fault
        keep = Fail(std::string("malformed request: ") + e.what());
      }
      if (!keep) return;
      // One request at a time: the next is read once the reply is out, so a client that never
      // reads its replies can't make the daemon queue them without bound.
      if (outbox_.empty()) Read();
      else read_after_flush_ = true;
    });
  }

  // Returns false when the connection should close after the reply.
  bool Handle(const std::string& line) {
    if (JsonDepth(line, kMaxRequestDepth) > kMaxRequestDepth) {
      return Fail("malformed request: nested deeper than " + std::to_string(kMaxRequestDepth) +
                  " levels (requests are flat JSON objects)");
    }
    // nlohmann's lexer takes a NUL byte for the end of its input, so `{"type":"status"}\0junk` parsed
    // as a status request. JSON text has no raw NUL (a string writes it \u0000): such a line is refused.
    if (const size_t nul = line.find('\0'); nul != std::string::npos) {
      return Fail("malformed request: not JSON (a NUL byte at column " + std::to_string(nul + 1) +
                  "; JSON text has none: a string writes it \\u0000)");
    }
    nlohmann::json request;
    try {
      // parse() is strict: anything but whitespace after the value is a parse_error.
      request = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error (the byte and why), out_of_range (a number)
      // what() quotes the bytes last read (the client's text): cut at a character boundary, as
      // Quoted cuts, or the reply's dump would turn the part of a character into U+FFFD.
      std::string why = e.what();
      if (why.size() > 200) why = why.substr(0, Utf8Prefix(why, 200)) + "...";
      return Fail("malformed request: not JSON (" + why + ")");
    }
    if (!request.is_object() || !request.contains("type") || !request["type"].is_string()) {
      return Fail("malformed request: expected one JSON object per line with a \"type\" string, got " +
                  Quoted(request));
    }
    const std::string type = request["type"];
    if (!said_hello_) {
      if (type != "hello") return Fail("the first message must be a hello");
      const auto protocol = request.value("protocol", nlohmann::json());
      if (!protocol.is_number_integer() || protocol.get<int64_t>() != shm::kProtocolVersion) {
        return Fail("protocol version " + Quoted(protocol) + " not supported: this ringfeedd speaks version " +
                    std::to_string(shm::kProtocolVersion) + "; use a client of the same ringfeed version");
      }
      said_hello_ = true;
      hello_timer_.cancel();
      if (!request.contains("role")) return Fail("hello: \"role\" is missing (consumer or control)");
      if (!request["role"].is_string()) return Fail("\"role\" must be a string (consumer or control)");
      const std::string role = request.value("role", "");
      nlohmann::json welcome = {{"type", "welcome"},
                                {"protocol", shm::kProtocolVersion},
                                {"job", server_->welcome_.job},
                                {"segment", server_->welcome_.segment},
                                {"instance_id", shm::InstanceIdText(server_->welcome_.instance_id)},
                                {"daemon_pid", static_cast<int64_t>(getpid())}};
      if (role == "consumer") {
        std::optional<int> rank;
        if (request.contains("rank") && !request["rank"].is_null()) {
          const nlohmann::json& r = request["rank"];
          if (!r.is_number_integer() || (r.is_number_unsigned() ? r.get<uint64_t>() > INT32_MAX
                                                                 : r.get<int64_t>() < INT32_MIN || r.get<int64_t>() > INT32_MAX)) {
            return Fail("\"rank\" must be an integer (a rank of consumers.count) or null, not " + Quoted(r));
          }
          rank = r.get<int>();
        }
        std::string error;
        bool retry = false;
        const auto id = server_->handlers_.attach(peer_pid_, rank, &error, &retry);
        if (!id) {
          // The trainer gets the reason; the operator sees it too (it was only the trainer's).
          ++server_->refused_attaches_;
          if (const auto now = std::chrono::steady_clock::now(); now >= server_->next_attach_refusal_log_) {
            server_->next_attach_refusal_log_ = now + kAttachRefusalLogEvery;
            spdlog::info("refused a consumer (pid {}): {} [{} refused so far]", peer_pid_, error,
                         server_->refused_attaches_);
          }
          return Fail(error, retry);
        }
        consumer_id_ = *id;
        welcome["consumer_id"] = *id;
      } else if (role != "control") {
        return Fail("unknown role " + Quoted(role) + " (consumer or control)");
      }
      Write(welcome, false);
      if (consumer_id_ == 0) ArmIdleTimer();
      return true;
    }
    if (type == "bye") return false;  // the client is closing (ControlConnection::Close)
    if (consumer_id_ != 0) return true;  // consumers send nothing else; ignore
    Write(server_->handlers_.request(request), false);
    ArmIdleTimer();
    return true;
  }

  // A control connection with no request for kControlIdleTimeout is closed.
  void ArmIdleTimer() {
    auto self = shared_from_this();
    idle_timer_.expires_after(kControlIdleTimeout);
    idle_timer_.async_wait([this, self](const boost::system::error_code& ec) {
      // Re-armed by a request that came while this expiry was already queued: not idle.
      if (ec || idle_timer_.expiry() > std::chrono::steady_clock::now()) return;
      boost::system::error_code ignored;
      socket_.close(ignored);  // the pending read ends; the connection goes away
    });
  }

  // `retry`: the refusal is for now (shm/protocol.h).
  bool Fail(const std::string& message, bool retry = false) {
    nlohmann::json reply = {{"type", "error"}, {"message", message}};
    if (retry) reply["retry"] = true;
    Write(reply, true);
    return false;
  }

  void Write(const nlohmann::json& message, bool close_after) {
    outbox_.push_back(message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    close_after_ = close_after_ || close_after;
    if (outbox_.size() == 1) Flush();
  }

  void Flush() {
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(outbox_.front()), [this, self](const boost::system::error_code& ec, size_t) {
      outbox_.pop_front();
      if (ec) {
        idle_timer_.cancel();  // the peer is gone: nothing may keep this connection alive
        return;
      }
      if (!outbox_.empty()) return Flush();
      if (read_after_flush_ && !close_after_) {
        read_after_flush_ = false;
        Read();
      }
      if (close_after_) {
        boost::system::error_code ignored;
        socket_.shutdown(stream_protocol::socket::shutdown_both, ignored);
      }
    });
  }

  ControlServer* server_;
  std::shared_ptr<bool> alive_;
  stream_protocol::socket socket_;
  asio::streambuf input_;
  std::deque<std::string> outbox_;
  asio::steady_timer hello_timer_;
  asio::steady_timer idle_timer_;  // control connections only
  bool said_hello_ = false;
  bool close_after_ = false;
  bool read_after_flush_ = false;
  pid_t peer_pid_ = 0;
  uint32_t consumer_id_ = 0;
};

ControlServer::ControlServer(asio::io_context& io, std::string socket_path, mode_t mode, std::optional<gid_t> group,
                             Welcome welcome, Handlers handlers)
    : io_(io),
      socket_path_(std::move(socket_path)),
      mode_(mode),
      group_(group),
      welcome_(std::move(welcome)),
      handlers_(std::move(handlers)),
      acceptor_(io),
      backoff_(io),
      alive_(std::make_shared<bool>(true)) {
  // A socket left there (a daemon killed before it could remove it) is replaced; anything else
  // at the path is not ours to delete.
  struct stat st {};
  if (::lstat(socket_path_.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode) ? "a directory" : S_ISREG(st.st_mode) ? "a regular file" : "not a socket";
    throw std::runtime_error("control socket " + socket_path_ + ": that path is " + what +
                             ", where ringfeedd puts its socket; remove it (or use another runtime directory)");
  }
  if (::unlink(socket_path_.c_str()) == 0) {
    spdlog::info("replaced the socket left at {} (its daemon is gone: this one holds the job's lock)", socket_path_);
  }
  Bind();
  Accept();
}

ControlServer::~ControlServer() {
  *alive_ = false;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  shm::UnlinkIfSame(socket_path_.c_str(), socket_id_);
}

void ControlServer::StopListening() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  backoff_.cancel();
}

void ControlServer::Rebind() {
  // The connections waiting in the old socket's queue (clients that connected before its name
  // went, a trainer among them) are taken first: closing it would reset them.
  boost::system::error_code ec;
  acceptor_.non_blocking(true, ec);
  while (!ec) {
    stream_protocol::socket socket(io_);
    acceptor_.accept(socket, ec);
    if (!ec) Admit(std::move(socket));
  }
  boost::system::error_code ignored;
  acceptor_.close(ignored);  // the accept pending on it ends with operation_aborted
  backoff_.cancel();
  Bind();
  Accept();
}

void ControlServer::Bind() {
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  // Created with the final mode: no window in which another user could connect.
  const mode_t old_umask = ::umask(0777 & ~mode_);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(socket_path_), ec);
  ::umask(old_umask);
  shm::FileId bound;  // the file bind() made, once known
  const auto fail = [&](const std::string& why) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    shm::UnlinkIfSame(socket_path_.c_str(), bound);
    throw std::runtime_error("control socket " + socket_path_ + ": " + why);
  };
  if (ec) fail(ec.message());
  // The file's identity, group and mode before it listens: a client can connect from listen()
  // on, and a file put at the path after that (by a test, a cleaner) must not be taken for this
  // socket (the daemon would then never report it, and remove it at its stop).
  if (struct stat st {}; ::lstat(socket_path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    bound = shm::FileId::Of(st);
    socket_id_ = bound;
  }
  if (group_ && ::chown(socket_path_.c_str(), static_cast<uid_t>(-1), *group_) != 0) {
    fail("cannot give it to group " + std::to_string(*group_) + ": " + std::strerror(errno));
  }
  ::chmod(socket_path_.c_str(), mode_);
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail(ec.message());
}

void ControlServer::Accept() {
  acceptor_.async_accept([this, alive = alive_](const boost::system::error_code& ec, stream_protocol::socket socket) {
    if (!*alive || ec == asio::error::operation_aborted) return;  // closed (Rebind makes a new one)
    if (ec) {
      if (!acceptor_.is_open()) return;
      // Out of file descriptors or similar: retry later rather than spin on the error, and say
      // so (every client waiting for its hello would otherwise see a daemon that never answers).
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_accept_warning_) {
        next_accept_warning_ = now + kAcceptWarningEvery;
        std::string limit;
        rlimit nofile{};
        if (ec == boost::system::errc::too_many_files_open && ::getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
          limit = " (this process may have " + std::to_string(nofile.rlim_cur) +
                  " files open, RLIMIT_NOFILE: raise it with `ulimit -n` or LimitNOFILE= under systemd)";
        }
        spdlog::warn("control socket: cannot accept a connection: {}{}; retrying every {} ms (clients wait meanwhile)",
                     ec.message(), limit, std::chrono::duration_cast<std::chrono::milliseconds>(kAcceptBackoff).count());
      }
      backoff_.expires_after(kAcceptBackoff);
      backoff_.async_wait([this, alive](const boost::system::error_code& e) {
        if (!e && *alive && acceptor_.is_open()) Accept();
      });
      return;
    }
    Admit(std::move(socket));
    if (acceptor_.is_open()) Accept();
  });
}

void ControlServer::Admit(stream_protocol::socket socket) {
  if (connections_ >= kMaxControlConnections) {  // refuse this one, saying why (best effort)
    const std::string message = nlohmann::json{{"type", "error"},
                                                {"message", "ringfeedd has " + std::to_string(kMaxControlConnections) +
                                                                " control connections open already; try again"},
                                                {"retry", true}}
                                    .dump() + "\n";
    boost::system::error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(message), ignored);
    socket.close(ignored);
    ++refused_connections_;
    if (const auto now = std::chrono::steady_clock::now(); now >= next_refusal_warning_) {
      next_refusal_warning_ = now + kRefusalWarningEvery;
      spdlog::warn("refused a connection: {} control connections are open already (trainers attaching now are "
                   "refused too; ringfeedctl list / ss -xp shows who holds them) [{} refused so far]",
                   kMaxControlConnections, refused_connections_);
    }
  } else {
    std::make_shared<Connection>(this, std::move(socket))->Start();
  }
}

}  // namespace ringfeed
