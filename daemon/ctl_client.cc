#include "daemon/ctl_client.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "client/client.h"
#include "client/control_connection.h"
#include "daemon/json_values.h"
#include "daemon/reply_fields.h"
#include "daemon/status_table.h"
#include "shm/names.h"
#include "shm/protocol.h"

namespace ringfeed {
namespace {

constexpr auto kReplyTimeout = std::chrono::seconds(5);
constexpr auto kRefusedRetryFor = std::chrono::seconds(3);  // a refusal for now (all connections taken)
constexpr auto kRefusedRetryEvery = std::chrono::milliseconds(100);

template <typename T>
nlohmann::ordered_json Number(T v) {
  if constexpr (std::is_same_v<T, float>) return Float32Json(v);
  if constexpr (std::is_same_v<T, double>) return Float64Json(v);
  return v;
}

template <typename T>
nlohmann::ordered_json Values(const TensorView& t) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const T& v : t.values<T>()) out.push_back(Number(v));
  return out;
}

nlohmann::ordered_json FeatureJson(const TensorView& t, BytesFormat bytes) {
  nlohmann::ordered_json f;
  f["dtype"] = std::string(shm::DTypeName(t.dtype()));
  nlohmann::ordered_json shape = nlohmann::ordered_json::array();
  for (int64_t d : t.shape()) shape.push_back(d);
  f["shape"] = shape;
  nlohmann::ordered_json values;
  using shm::DType;
  switch (t.dtype()) {
    case DType::kInt64: values = Values<int64_t>(t); break;
    case DType::kFloat32: values = Values<float>(t); break;
    case DType::kFloat64: values = Values<double>(t); break;
    case DType::kUInt8: values = Values<uint8_t>(t); break;
    case DType::kInt8: values = Values<int8_t>(t); break;
    case DType::kUInt16: values = Values<uint16_t>(t); break;
    case DType::kInt16: values = Values<int16_t>(t); break;
    case DType::kInt32: values = Values<int32_t>(t); break;
    case DType::kUInt32: values = Values<uint32_t>(t); break;
    case DType::kBytes:
      values = nlohmann::ordered_json::array();
      for (uint64_t i = 0; i < t.size(); ++i) {
        values.push_back(BytesJson(t.string(i), bytes));
      }
      break;
  }
  f["values"] = std::move(values);
  if (t.type() == shm::FeatureType::kVarLen) f["row_splits"] = t.row_splits();
  return f;
}

// A daemon answered, but not with what this ringfeedctl uses: a reply it cannot read, or a
// welcome from another job's daemon. `list` shows such a job as "bad reply", not "unreachable".
struct ReplyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The job's daemon is gone and left its socket (detail::GoneDaemonPid): `list` shows it as "gone".
struct DaemonGone : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The job's daemon runs but has no socket: it is starting, or stopping (SocketlessDaemon).
struct DaemonStarting : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "ringfeedd at SOCKET sent a reply ringfeedctl cannot read (WHAT); is it the same version?"
ReplyError UnreadableReply(const std::string& socket, const std::string& what) {
  return ReplyError("ringfeedd at " + socket + " sent a reply ringfeedctl cannot read (" + what +
                    "); is it the same version?");
}

// Runs `read` over a reply from the daemon at `socket`: a field of another type becomes the
// ReplyError that names it.
template <typename Read>
auto ReadingReply(const std::string& socket, Read read) {
  try {
    return read();
  } catch (const BadReplyField& bad) {
    throw UnreadableReply(socket, bad.field + ": expected " + bad.expected);
  }
}

// `line` as the JSON object every message is; ReplyError when it is not.
nlohmann::json ParseReply(const std::string& line, const std::string& socket) {
  nlohmann::json reply = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) {
    const nlohmann::json excerpt = line.substr(0, 80) + (line.size() > 80 ? "..." : "");
    throw UnreadableReply(socket, "not a JSON object: " +
                                      excerpt.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return reply;
}

}  // namespace

namespace {
// A job's ringfeedd that holds the job's lock file but has no socket: one starting (it makes its
// socket once the first records are sampled and its ring is reserved, which takes a while on slow
// storage or with a large ring) or stopping (it closed its socket and wrote "stopping" in the
// lock file).
struct SocketlessDaemon {
  long pid = 0;
  bool stopping = false;
};

// The job's ringfeedd in `dir` without a socket there (nothing at the socket's path, the lock
// file naming a live ringfeedd); nullopt otherwise.
std::optional<SocketlessDaemon> SocketlessDaemonIn(const std::string& dir, const std::string& job) {
  const std::string socket = shm::SocketPath(dir, job);
  std::error_code ec;
  if (std::filesystem::symlink_status(socket, ec).type() != std::filesystem::file_type::not_found) return std::nullopt;
  const std::optional<detail::LockHolder> holder = detail::ReadLockHolder(socket, job);
  if (!holder || holder->gone || !detail::RunsRingfeedd(holder->pid)) return std::nullopt;
  return SocketlessDaemon{holder->pid, holder->stopping};
}

// "job 'J' is starting: ringfeedd (pid P) ..." or "... is stopping: ...", for status and list.
std::string SocketlessText(const std::string& job, const std::string& dir, const SocketlessDaemon& d) {
  const std::string daemon = "ringfeedd (pid " + std::to_string(d.pid) + ")";
  if (d.stopping) {
    return "job '" + job + "' is stopping: " + daemon + " closed its socket in " + dir +
           " and is finishing its stop (its log says why it stops)";
  }
  return "job '" + job + "' is starting: " + daemon + " holds its lock file " + dir + "/" + job + ".lock" +
         " and opens its socket once it has sampled the first records and reserved its ring (a while on slow storage "
         "or with a large ring; its log says what it does); ask again in a moment";
}

struct JobSocket {
  std::string job;
  std::string runtime_dir;  // where its socket is: the runtime directory or one of its subdirectories
  // Set for a job whose ringfeedd has no socket there (starting or stopping): `list` shows it.
  std::optional<SocketlessDaemon> without_socket;
};

bool IsDirectory(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}

// The job sockets in `dir`, and the jobs whose ringfeedd is there without a socket (starting or
// stopping), sorted by job.
std::vector<JobSocket> SocketsIn(const std::string& dir) {
  std::vector<JobSocket> jobs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    // A name no job may have (shm::IsValidJobName: a space, an escape sequence) is no
    // ringfeedd's socket: not listed (its name printed raw could drive the terminal).
    const std::string job = entry.path().stem().string();
    if (!shm::IsValidJobName(job)) continue;
    if (entry.path().extension() == ".sock") {
      jobs.push_back({job, dir, std::nullopt});
    } else if (entry.path().extension() == ".lock") {
      if (const std::optional<SocketlessDaemon> d = SocketlessDaemonIn(dir, job)) jobs.push_back({job, dir, d});
    }
  }
  std::sort(jobs.begin(), jobs.end(), [](const JobSocket& a, const JobSocket& b) { return a.job < b.job; });
  return jobs;
}

// The runtime directory's subdirectories (sorted): where systemd's RuntimeDirectory=ringfeed/%i
// puts each instance of ringfeed@.service.
std::vector<std::string> Subdirectories(const std::string& runtime_dir) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(runtime_dir, ec)) {
    if (IsDirectory(entry.path())) dirs.push_back(entry.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// True when a daemon accepts connections on the Unix socket at `path` (a killed daemon's socket
// file refuses them).
bool Accepts(const std::string& path) { return shm::SocketListener(path).has_value(); }

// A runtime directory that exists but cannot be listed (`what` "read") or entered ("enter"):
// an error that says so, never "no jobs"; for a permission error, whose permissions deny it
// (its own, or a directory's above it) and the fix.
std::runtime_error UnreadableRuntimeDir(const std::string& dir, const std::error_code& ec, const char* what = "read") {
  const std::string permissions =
      ec == std::errc::permission_denied ? shm::RuntimeDirPermissions(dir) : std::string();
  return std::runtime_error(std::string("cannot ") + what + " the runtime directory " + dir + ": " + ec.message() +
                            (permissions.empty() ? "" : " (" + permissions + ")"));
}

// Why `dir` cannot be listed; none when it can, or when it does not exist (no jobs run there).
std::error_code ListingError(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) ec.clear();
  return ec;
}

// The runtime directory's subdirectories that cannot be listed (systemd's per-instance
// directories, made unreadable), with why: their jobs are not "not running".
std::vector<std::pair<std::string, std::error_code>> UnlistedSubdirectories(const std::string& runtime_dir) {
  std::vector<std::pair<std::string, std::error_code>> out;
  for (const std::string& dir : Subdirectories(runtime_dir)) {
    if (const std::error_code ec = ListingError(dir)) out.emplace_back(dir, ec);
  }
  return out;
}

// The sockets in the runtime directory, then those in its subdirectories.
std::vector<JobSocket> JobSockets(const std::string& runtime_dir) {
  std::vector<JobSocket> jobs = SocketsIn(runtime_dir);
  for (const std::string& dir : Subdirectories(runtime_dir)) {
    for (JobSocket& j : SocketsIn(dir)) jobs.push_back(std::move(j));
  }
  return jobs;
}
}  // namespace

std::string JobRuntimeDir(const std::string& runtime_dir, const std::string& job) {
  std::error_code ec;
  const bool here = std::filesystem::exists(shm::SocketPath(runtime_dir, job), ec);
  if (here && Accepts(shm::SocketPath(runtime_dir, job))) return runtime_dir;
  std::vector<std::string> found = shm::SubdirectoriesWithSocket(runtime_dir, job);
  // A socket left by a killed daemon does not hide a live one; among several, the live ones.
  std::vector<std::string> live;
  for (const std::string& dir : found) {
    if (Accepts(shm::SocketPath(dir, job))) live.push_back(dir);
  }
  if (!live.empty()) found = live;
  else if (here) return runtime_dir;  // nothing live anywhere: the caller's error names this one
  if (found.size() > 1) {
    std::string dirs;
    for (const std::string& d : found) dirs += (dirs.empty() ? "" : ", ") + d;
    throw std::runtime_error("job '" + job + "' has a socket in several directories under " + runtime_dir + ": " +
                             dirs + "; choose one with --runtime-dir");
  }
  return found.empty() ? runtime_dir : found.front();
}

namespace {
// A reply and the socket it came from (for messages).
struct Reply {
  nlohmann::json json;
  std::string socket;
};

// QueryDaemon's work, keeping the socket for the caller's messages.
Reply Ask(const std::string& runtime_dir, const std::string& job, const nlohmann::json& request) {
  const std::string path = shm::SocketPath(JobRuntimeDir(runtime_dir, job), job);
  std::error_code ec;
  // Not followed: a dangling symbolic link there is something in the way (Connect says what).
  const std::filesystem::file_status socket_status = std::filesystem::symlink_status(path, ec);
  if (socket_status.type() == std::filesystem::file_type::not_found) ec.clear();  // as exists(path, ec) does
  if (!std::filesystem::exists(socket_status)) {
    // Not "not running": the socket may be there, behind a directory this user cannot enter.
    if (ec) {
      const std::runtime_error why = UnreadableRuntimeDir(std::filesystem::path(path).parent_path().string(), ec, "enter");
      if (ec == std::errc::permission_denied) throw AccessDeniedError(why.what());  // `list`: denied
      throw why;
    }
    // A ringfeedd of the job that has no socket yet (or no more) is not "not running".
    const std::vector<JobSocket> all = JobSockets(runtime_dir);
    for (const JobSocket& j : all) {
      if (j.job == job && j.without_socket) throw DaemonStarting(SocketlessText(job, j.runtime_dir, *j.without_socket));
    }
    std::string jobs;
    for (const JobSocket& j : all) {
      jobs += (jobs.empty() ? "" : ", ") + j.job + (j.runtime_dir == runtime_dir ? "" : " (in " + j.runtime_dir + ")");
    }
    const std::error_code unlisted = ListingError(runtime_dir);
    std::string hidden;  // subdirectories whose jobs cannot be seen
    for (const auto& [dir, why] : UnlistedSubdirectories(runtime_dir)) {
      hidden += (hidden.empty() ? "" : ", ") + dir + " (" + why.message() + ")";
    }
    throw std::runtime_error("job '" + job + "' is not running in " + runtime_dir + " (no " + path + "); " +
                             (unlisted     ? "the jobs there cannot be listed (" + unlisted.message() + ")"
                              : jobs.empty() ? std::string("no jobs run there")
                                             : "jobs there: " + jobs) +
                             (hidden.empty() ? "" : "; the jobs of " + hidden + " cannot be seen: `ringfeedctl list` says why") +
                             ". Use --runtime-dir or RINGFEED_RUNTIME_DIR to look elsewhere");
  }
  // A daemon whose control connections are all taken refuses for now (`retry` in its error):
  // asked again for up to kRefusedRetryFor, so that status answers while a process holds many
  // connections open (it was refused at once: helper-147).
  detail::ControlConnection connection;
  nlohmann::json welcome;
  for (const auto retry_until = std::chrono::steady_clock::now() + kRefusedRetryFor;;) {
    try {
      connection.Connect(path, job);
    } catch (const detail::DaemonGoneError& e) {
      throw DaemonGone(e.what());
    } catch (const std::exception& e) {
      // A socket nobody listens on (ECONNREFUSED) is what a killed daemon leaves.
      const std::string_view what = e.what();
      const bool stale = what.find(std::strerror(ECONNREFUSED)) != std::string_view::npos &&
                         what.find(", not a socket") == std::string_view::npos &&
                         what.find("holds the job's lock") == std::string_view::npos;
      if (!stale) throw;
      throw std::runtime_error(std::string(e.what()) +
                               "; if ringfeedd was killed, the socket is stale: start the job again");
    }
    connection.SendLine(nlohmann::json{{"type", shm::kMessageHello},
                                       {"protocol", shm::kProtocolVersion},
                                       {"role", shm::kRoleControl},
                                       {"pid", ::getpid()}}
                            .dump());
    welcome = ParseReply(connection.ReadLine(kReplyTimeout), path);
    const bool for_now = welcome.is_object() && welcome.contains("retry") && welcome["retry"] == true;
    if (!for_now || std::chrono::steady_clock::now() >= retry_until) break;
    connection.Close();
    std::this_thread::sleep_for(kRefusedRetryEvery);
  }
  ReadingReply(path, [&] {
    const ReplyFields w(welcome);
    const std::string type = w.RequiredString("type");
    if (type == shm::kMessageError) {
      throw std::runtime_error("job '" + job + "': ringfeedd refused: " + w.String("message"));
    }
    if (type != shm::kMessageWelcome) throw BadReplyField{"type", "\"welcome\" or \"error\""};
    // A socket renamed or linked by hand leads to another job's daemon: its status is not this
    // job's (the client library refuses such a welcome too).
    const std::string serves = w.RequiredString("job");
    if (serves != job) throw ReplyError("the daemon at " + path + " serves job " + serves + ", not " + job);
  });
  connection.SendLine(request.dump());
  Reply reply{ParseReply(connection.ReadLine(kReplyTimeout), path), path};
  ReadingReply(path, [&] {
    const ReplyFields r(reply.json);
    if (r.String("type") == shm::kMessageError) throw std::runtime_error("job '" + job + "': " + r.String("message"));
  });
  connection.Close();
  return reply;
}

}  // namespace

nlohmann::json QueryDaemon(const std::string& runtime_dir, const std::string& job, const nlohmann::json& request) {
  return Ask(runtime_dir, job, request).json;
}

namespace {
// `list`'s state for a job it could not get a status from.
const char* ListState(const std::exception& e) {
  // A daemon that answered with what ringfeedctl cannot use is reachable, but not listable.
  if (dynamic_cast<const ReplyError*>(&e) != nullptr) return "bad reply";
  if (dynamic_cast<const DaemonGone*>(&e) != nullptr) return "gone";
  if (dynamic_cast<const AccessDeniedError*>(&e) != nullptr) return "denied";
  return "unreachable";
}

// `list`'s row for a job it could not get a status from: the state (ListState), and for a live
// ringfeedd that holds the job's lock (its pid, else 0) whose socket nobody listens at, what the
// lock file says: "stopping" (a stop that has closed the socket but not removed it yet: a
// daemon stopped with SIGSTOP meanwhile) or "starting" (its socket not made yet after a killed
// daemon's was left).
struct UnansweredRow {
  std::string state;
  long pid = 0;
};
UnansweredRow Unanswered(const std::exception& e, const JobSocket& j) {
  UnansweredRow row{ListState(e)};
  if (row.state != "unreachable") return row;
  const std::string socket = shm::SocketPath(j.runtime_dir, j.job);
  const std::optional<detail::LockHolder> holder = detail::ReadLockHolder(socket, j.job);
  if (!holder || holder->gone) return row;
  row.pid = holder->pid;
  if (shm::NobodyListens(socket)) row.state = holder->stopping ? "stopping" : "starting";
  return row;
}
}  // namespace

int ListJobs(const std::string& runtime_dir, std::ostream& out, bool json) {
  if (const std::error_code ec = ListingError(runtime_dir)) throw UnreadableRuntimeDir(runtime_dir, ec);
  const std::vector<JobSocket> jobs = JobSockets(runtime_dir);
  const auto unlisted = UnlistedSubdirectories(runtime_dir);
  if (json) {
    // {"runtime_dir": D, "jobs": [{"job", "runtime_dir", "state", "status" | "error"}, ...]}:
    // the status object as `status --json` prints it, or the state word and the reason.
    nlohmann::json list = {{"runtime_dir", runtime_dir}, {"jobs", nlohmann::json::array()}};
    int running = 0;
    for (const JobSocket& j : jobs) {
      nlohmann::json entry = {{"job", j.job}, {"runtime_dir", j.runtime_dir}};
      if (j.without_socket) {
        entry["state"] = j.without_socket->stopping ? "stopping" : "starting";
        entry["pid"] = j.without_socket->pid;
        entry["error"] = SocketlessText(j.job, j.runtime_dir, *j.without_socket);
        list["jobs"].push_back(std::move(entry));
        continue;
      }
      try {
        const Reply reply = Ask(j.runtime_dir, j.job, {{"type", "status"}});
        std::string state;
        ReadingReply(reply.socket, [&] { state = ReplyFields(reply.json).String("state", "?"); });
        entry["state"] = state;
        entry["status"] = reply.json;
        ++running;
      } catch (const std::exception& e) {
        const UnansweredRow row = Unanswered(e, j);
        entry["state"] = row.state;
        if (row.pid != 0) entry["pid"] = row.pid;
        entry["error"] = e.what();
      }
      list["jobs"].push_back(std::move(entry));
    }
    for (const auto& [dir, ec] : unlisted) {
      list["jobs"].push_back({{"job", nullptr}, {"runtime_dir", dir}, {"state", "unreadable"},
                              {"error", UnreadableRuntimeDir(dir, ec).what()}});
    }
    out << list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return running;
  }
  if (jobs.empty() && unlisted.empty()) {
    out << "no ringfeed jobs in " << runtime_dir
        << " or its subdirectories (set RINGFEED_RUNTIME_DIR or --runtime-dir to look elsewhere)\n";
    return 0;
  }
  // The JOB column is as wide as the longest name (24 at least; names have at most 64 bytes).
  int name_width = 24;
  for (const JobSocket& j : jobs) name_width = std::max(name_width, static_cast<int>(std::min<size_t>(j.job.size(), 64)));
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %-12s %8s %10s %12s %10s\n", name_width, "JOB", "STATE", "PID", "UPTIME",
                "RECORDS/S", "CONSUMERS");
  out << line;
  int running = 0;
  for (const JobSocket& j : jobs) {
    std::string where = j.runtime_dir == runtime_dir ? "" : "   (in " + j.runtime_dir + ")";
    if (j.without_socket) {
      std::snprintf(line, sizeof line, "%-*s %-12s %8ld %10s %12s %10s", name_width, j.job.c_str(),
                    j.without_socket->stopping ? "stopping" : "starting", j.without_socket->pid, "-", "-", "-");
      out << line << "   ("
          << (j.without_socket->stopping ? "its socket is closed: it is finishing its stop"
                                         : "no socket yet: it opens it once its ring is set up")
          << ")" << where << "\n";
      continue;
    }
    try {
      const Reply reply = Ask(j.runtime_dir, j.job, {{"type", "status"}});
      ReadingReply(reply.socket, [&] {
        const ReplyFields s(reply.json);
        const bool running_now = s.String("state") == "running";
        const std::string pace = running_now ? TrainersPace(s) : std::string();
        if (!pace.empty()) where = "   (the trainers' pace: " + pace + ")" + where;
        // Ranks mode: a rank that holds every rank up, as status names it (after 5 s): the
        // other ranks wait, so the job's rate falls with no trainers' pace to show.
        for (const ReplyFields& r : s.Objects("ranks")) {
          if (running_now && r.Bool("holds_up") && r.Number("seconds_since_take") >= 5) {
            where = "   (rank " + std::to_string(r.Integer("rank")) + " holds the other ranks up: `ringfeedctl " +
                    "status " + j.job + "` names its trainer)" + where;
            break;
          }
        }
        if (const size_t problems = s.Strings("problems").size(); problems > 0) {
          // Its segment, socket or lock file removed or replaced: `status` says which and what to do.
          where = "   (" + std::to_string(problems) + (problems == 1 ? " problem" : " problems") +
                  ": its segment, socket or lock file is gone or replaced; ringfeedctl status says which)" + where;
        }
        // Running: the last 10 s. Production over: the whole run's rate (the last 10 s only
        // fall towards 0 once nothing is produced, status's "overall").
        std::snprintf(line, sizeof line, "%-*s %-12s %8lld %10s %12.0f %10zu", name_width, j.job.c_str(),
                      s.String("state", "?").c_str(), static_cast<long long>(s.Integer("pid")),
                      SecondsText(s.Number("uptime_seconds")).c_str(),
                      s.Object("throughput").Object("records_per_second").Number(running_now ? "last_10s" : "overall"),
                      s.Objects("consumers").size());
      });
      ++running;
      out << line << where << "\n";
    } catch (const std::exception& e) {
      // The table's columns stay in place ("-"); the reason follows, as other rows' notes do.
      const UnansweredRow row = Unanswered(e, j);
      std::snprintf(line, sizeof line, "%-*s %-12s %8s %10s %12s %10s", name_width, j.job.c_str(), row.state.c_str(),
                    row.pid != 0 ? std::to_string(row.pid).c_str() : "-", "-", "-", "-");
      out << line << "   (" << e.what() << ")" << where << "\n";
    }
  }
  // A subdirectory that cannot be listed may hold running jobs: said, not skipped.
  for (const auto& [dir, ec] : unlisted) {
    std::snprintf(line, sizeof line, "%-*s %-12s %8s %10s %12s %10s", name_width, "?", "unreadable", "-", "-", "-",
                  "-");
    out << line << "   (" << UnreadableRuntimeDir(dir, ec).what() << ")\n";
  }
  return running;
}


void PrintStatus(const std::string& runtime_dir, const std::string& job, bool json, std::ostream& out) {
  const Reply reply = Ask(runtime_dir, job, {{"type", "status"}});
  if (json) {
    out << reply.json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  // Made whole before it is printed: a reply that cannot be read leaves no half table.
  std::ostringstream table;
  ReadingReply(reply.socket, [&] { PrintStatusTable(ReplyFields(reply.json), table); });
  out << table.str();
}

void PrintFiles(const std::string& runtime_dir, const std::string& job, bool json, std::ostream& out) {
  // Paged as the client pages it (Client::files): one request per reply's worth of paths. Each
  // path comes as text, bytes that are not UTF-8 as \xNN (shm/protocol.h).
  std::vector<std::string> files;
  for (uint64_t total = 1; files.size() < total;) {
    const Reply reply = Ask(runtime_dir, job, {{"type", "files"}, {"first", files.size()}});
    const nlohmann::json& page = reply.json;
    if (page.value("type", "") != "files" || !page.contains("total") || !page["total"].is_number_unsigned() ||
        !page.contains("files") || !page["files"].is_array()) {
      throw UnreadableReply(reply.socket, "not a file list");
    }
    total = page["total"].get<uint64_t>();
    if (files.size() < total && page["files"].empty()) throw UnreadableReply(reply.socket, "an empty page");
    for (const nlohmann::json& f : page["files"]) {
      if (!f.is_string()) throw UnreadableReply(reply.socket, "a file name that is not a string");
      files.push_back(f.get<std::string>());
    }
    if (total == 0) break;
  }
  if (json) {  // the text as it came: what `inspect --json` writes for the same file
    out << nlohmann::json{{"total", files.size()}, {"files", files}}.dump(-1, ' ', false,
                                                                           nlohmann::json::error_handler_t::replace)
        << "\n";
    return;
  }
  // One INDEX<TAB>PATH line per file, also for names with a newline, a tab or an escape
  // sequence in them: control characters, like bytes that are not UTF-8, as \xNN (as inspect
  // writes bytes that are not text).
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string name = shm::FileNameFromWire(files[i]);
    std::string line;
    for (size_t k = 0; k < name.size();) {
      const auto c = static_cast<unsigned char>(name[k]);
      const size_t n = Utf8SequenceLength(name, k);
      const bool starts_escape = c == '\\' && k + 1 < name.size() && name[k + 1] == 'x';
      // U+0080..U+009F (C1 controls, UTF-8 C2 80..C2 9F): CSI (U+009B) drives some terminals too.
      const bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(name[k + 1]) <= 0x9F;
      if (c1) {
        char escaped[16];
        std::snprintf(escaped, sizeof escaped, "\\xC2\\x%02X", static_cast<unsigned char>(name[k + 1]));
        line += escaped;
        k += 2;
      } else if (n == 0 || c < 0x20 || c == 0x7F || starts_escape) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\x%02X", c);
        line += escaped;
        ++k;
      } else {
        line.append(name, k, n);
        k += n;
      }
    }
    out << i << '\t' << line << '\n';
  }
}

namespace {
volatile std::sig_atomic_t dump_stop_signal = 0;
extern "C" void NoteDumpStop(int signal) { dump_stop_signal = signal; }
// The longest wait in Next between looks at dump_stop_signal.
constexpr std::chrono::milliseconds kDumpWaitSlice{100};
}  // namespace

DumpResult DumpBatches(const DumpOptions& options, std::ostream& out) {
  // A reader that goes away (`| head`) makes writes fail with EPIPE instead of killing us, so
  // the batch in hand is released and the daemon sees a clean detach, not a dead consumer.
  std::signal(SIGPIPE, SIG_IGN);
  // Ctrl-C (or a stop) ends the dump between batches: one taken from the job is printed first
  // (killed there, it would be lost to every consumer). Once: a second one ends it at once.
  dump_stop_signal = 0;
  struct sigaction stop {};
  stop.sa_handler = NoteDumpStop;
  stop.sa_flags = SA_RESETHAND;
  sigemptyset(&stop.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction was {};
    // Ignored by whoever started it (a background job of a non-interactive shell): stays so.
    if (::sigaction(s, nullptr, &was) == 0 && was.sa_handler == SIG_IGN) continue;
    ::sigaction(s, &stop, nullptr);
  }
  ClientOptions co;
  co.job = options.job;
  co.rank = options.rank;
  co.runtime_dir = options.runtime_dir.empty() ? "" : JobRuntimeDir(options.runtime_dir, options.job);
  // --timeout bounds every wait, the answer to the hello included (a frozen daemon).
  co.liveness_timeout = std::min(co.liveness_timeout, std::chrono::milliseconds(std::max<int64_t>(
                                                          1, static_cast<int64_t>(options.timeout_seconds * 1000))));
  co.interrupted = [] { return dump_stop_signal != 0; };
  std::unique_ptr<Client> client;
  try {
    client = Client::Attach(co);
  } catch (const DaemonNotRunningError& e) {
    throw ClientError(e.reason());  // without the library's advice on attach_timeout, not a dump option
  } catch (const ClientError& e) {
    // The daemon's refusal says "attach with a rank in 0..N-1"; here that is an option.
    const std::string what = e.what();
    if (options.rank < 0 && what.find("attach with a rank") != std::string::npos) {
      throw ClientError(what + " (ringfeedctl dump --rank R)");
    }
    // A refusal for now (a rank whose trainer is exiting) comes with the library's advice on
    // attach_timeout, not a dump option.
    const size_t advice = what.find(". To try again for a while, set attach_timeout");
    if (advice != std::string::npos) {
      throw ClientError(what.substr(0, advice) + "; run ringfeedctl dump again in a moment");
    }
    throw;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  DumpResult result;
  uint64_t& printed = result.printed;
  Batch batch;
  while (!options.batches || printed < *options.batches) {
    // In slices, so that a stop signal ends the wait within kDumpWaitSlice.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Client::Status status = Client::Status::kTimeout;
    for (auto left = timeout; dump_stop_signal == 0;) {
      status = client->Next(std::min<std::chrono::milliseconds>(left, kDumpWaitSlice), &batch);
      left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (status != Client::Status::kTimeout || left.count() <= 0) break;
    }
    if (status == Client::Status::kTimeout && dump_stop_signal != 0) break;  // nothing taken
    if (status == Client::Status::kEndOfData) {
      result.end_of_data = true;
      result.end_reason = client->end_reason();
      break;
    }
    if (status == Client::Status::kTimeout) {
      // Every slot held by consumers (who, and what to do), or in ranks mode a rank nobody
      // attached as or one whose trainer does not take its batches: the client library says.
      const std::string reason = client->timeout_reason();
      const std::string why =
          !reason.empty() ? ": " + reason
                          : " (the ring has free slots: the data is slow, or the daemon stopped producing; "
                            "ringfeedctl status " + options.job + ")";
      throw std::runtime_error("job '" + options.job + "': no batch within " + SecondsText(options.timeout_seconds) + why);
    }
    nlohmann::ordered_json line;
    line["epoch"] = batch.epoch();
    line["batch"] = batch.index();
    line["size"] = batch.rows();
    nlohmann::ordered_json features = nlohmann::ordered_json::object();
    for (size_t i = 0; i < batch.feature_count(); ++i) {
      const TensorView t = batch.feature(i);
      features[std::string(t.name())] = FeatureJson(t, options.bytes);
    }
    line["features"] = std::move(features);
    nlohmann::ordered_json sources = nlohmann::ordered_json::array();
    for (size_t r = 0; r < batch.rows(); ++r) {
      const shm::RowSource src = batch.source(r);
      sources.push_back({src.file_index, src.record_index});
    }
    line["sources"] = std::move(sources);
    out << line.dump() << "\n";
    out.flush();
    if (!out) {  // the reader went away (`| head`: EPIPE), or the output failed (a full disk): detach cleanly
      result.write_errno = errno != 0 ? errno : EIO;
      break;
    }
    ++printed;
    if (dump_stop_signal != 0) break;  // after printing the batch taken
  }
  out.flush();
  result.stopped_by = dump_stop_signal;
  return result;
}

}  // namespace ringfeed
