#include "daemon/ctl_client.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "client/client.h"
#include "client/control_connection.h"
#include "daemon/json_values.h"
#include "shm/names.h"
#include "shm/protocol.h"

namespace ringfeed {
namespace {

constexpr auto kReplyTimeout = std::chrono::seconds(5);

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

std::string Seconds(double s) {
  char buf[32];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  return buf;
}

// Seconds, with hundredths below 10 s: for stretches that may be short (a run of the quickstart).
std::string FineSeconds(double s) {
  if (s >= 10) return Seconds(s);
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 0.01 ? "%.3f s" : "%.2f s", s);
  return buf;
}

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
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

// "ringfeedd at SOCKET sent a reply ringfeedctl cannot read (WHAT); is it the same version?"
ReplyError UnreadableReply(const std::string& socket, const std::string& what) {
  return ReplyError("ringfeedd at " + socket + " sent a reply ringfeedctl cannot read (" + what +
                    "); is it the same version?");
}

// A field of a reply whose JSON type is not the one ringfeedctl reads: a daemon of another
// version, or another program answering on the socket. ReadingReply turns it into the error
// the user sees, where the socket is known.
struct BadReplyField {
  std::string field;     // its path in the reply: "throughput.records_per_second", "consumers[1].rank"
  std::string expected;  // "a number", "an object", ...
};

// The fields of one JSON object of a reply, read with their types checked: nlohmann's value()
// and operator[] throw "[json.exception.type_error.302] ..." naming no field, and a const
// operator[] of a missing key is undefined. A field that is missing or null reads as its
// fallback (what a daemon that does not send it means); one of another type throws
// BadReplyField. Holds a reference: the reply must outlive it.
class ReplyFields {
 public:
  explicit ReplyFields(const nlohmann::json& object, std::string path = "") : j_(object), path_(std::move(path)) {
    if (!j_.is_object()) throw BadReplyField{path_.empty() ? "the reply" : path_, "an object"};
  }

  bool Has(const char* key) const { return Find(key) != nullptr; }
  // Missing or null: an object without fields.
  ReplyFields Object(const char* key) const {
    static const nlohmann::json kEmpty = nlohmann::json::object();
    const nlohmann::json* v = Find(key);
    return ReplyFields(v ? *v : kEmpty, Path(key));
  }
  // Lists (missing or null: empty) of objects, strings, integers.
  std::vector<ReplyFields> Objects(const char* key) const {
    std::vector<ReplyFields> out;
    const nlohmann::json* list = List(key);
    for (size_t i = 0; list && i < list->size(); ++i) out.emplace_back((*list)[i], Element(key, i));
    return out;
  }
  std::vector<std::string> Strings(const char* key) const {
    std::vector<std::string> out;
    const nlohmann::json* list = List(key);
    for (size_t i = 0; list && i < list->size(); ++i) {
      if (!(*list)[i].is_string()) throw BadReplyField{Element(key, i), "a string"};
      out.push_back((*list)[i].get<std::string>());
    }
    return out;
  }
  std::vector<int64_t> Integers(const char* key) const {
    std::vector<int64_t> out;
    const nlohmann::json* list = List(key);
    for (size_t i = 0; list && i < list->size(); ++i) out.push_back(AsInteger((*list)[i], Element(key, i)));
    return out;
  }
  double Number(const char* key, double fallback = 0) const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_number()) throw BadReplyField{Path(key), "a number"};
    return v->get<double>();
  }
  int64_t Integer(const char* key, int64_t fallback = 0) const {
    const nlohmann::json* v = Find(key);
    return v ? AsInteger(*v, Path(key)) : fallback;
  }
  // An integer >= 0 (a count, bytes).
  uint64_t Count(const char* key, uint64_t fallback = 0) const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0)) {
      throw BadReplyField{Path(key), "an integer >= 0"};
    }
    return v->get<uint64_t>();
  }
  bool Bool(const char* key, bool fallback = false) const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) throw BadReplyField{Path(key), "true or false"};
    return v->get<bool>();
  }
  std::string String(const char* key, const std::string& fallback = "") const {
    const nlohmann::json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_string()) throw BadReplyField{Path(key), "a string"};
    return v->get<std::string>();
  }
  // A string that must be there (the fields that say what a message is).
  std::string RequiredString(const char* key) const {
    if (!Has(key)) throw BadReplyField{Path(key), "a string"};
    return String(key);
  }

 private:
  const nlohmann::json* Find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  const nlohmann::json* List(const char* key) const {
    const nlohmann::json* v = Find(key);
    if (v && !v->is_array()) throw BadReplyField{Path(key), "an array"};
    return v;
  }
  static int64_t AsInteger(const nlohmann::json& v, const std::string& path) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) {
      throw BadReplyField{path, "an integer"};
    }
    return v.get<int64_t>();
  }
  std::string Path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  std::string Element(const char* key, size_t i) const { return Path(key) + "[" + std::to_string(i) + "]"; }

  const nlohmann::json& j_;
  std::string path_;
};

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
struct JobSocket {
  std::string job;
  std::string runtime_dir;  // where its socket is: the runtime directory or one of its subdirectories
};

bool IsDirectory(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}

// The job sockets in `dir` (sorted by job).
std::vector<JobSocket> SocketsIn(const std::string& dir) {
  std::vector<JobSocket> jobs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    // A name no job may have (shm::IsValidJobName: a space, an escape sequence) is no
    // ringfeedd's socket: not listed (its name printed raw could drive the terminal).
    const std::string job = entry.path().stem().string();
    if (entry.path().extension() == ".sock" && shm::IsValidJobName(job)) jobs.push_back({job, dir});
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
    std::string jobs;
    for (const JobSocket& j : JobSockets(runtime_dir)) {
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
  detail::ControlConnection connection;
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
  const nlohmann::json welcome = ParseReply(connection.ReadLine(kReplyTimeout), path);
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

// When production waited for the trainers most of the tuner's last interval (the ring full, or
// no trainer attached yet), a status's rates are the trainers' pace, not the loader's speed:
// how to say why, or empty when they are the loader's.
std::string TrainersPace(const ReplyFields& s) {
  const ReplyFields measured = s.Object("autotune").Object("measured");
  if (measured.Number("interval_seconds") <= 0 ||
      measured.Number("sequencer_slot_wait_fraction") < 0.5 || measured.Number("consumer_wait_fraction") >= 0.5) {
    return "";
  }
  if (measured.Integer("consumers") > 0) return "ring full or prefetch depth reached";
  // After production ended, a trainer of its last stretch may have come and gone within it.
  if (s.String("state") != "running") return "no trainer attached at its end, or none for much of it";
  // The interval is the tuner's last one: a trainer may have attached since.
  return s.Objects("consumers").empty() ? "none attached" : "none attached during that interval";
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
      try {
        const Reply reply = Ask(j.runtime_dir, j.job, {{"type", "status"}});
        std::string state;
        ReadingReply(reply.socket, [&] { state = ReplyFields(reply.json).String("state", "?"); });
        entry["state"] = state;
        entry["status"] = reply.json;
        ++running;
      } catch (const std::exception& e) {
        entry["state"] = ListState(e);
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
    try {
      const Reply reply = Ask(j.runtime_dir, j.job, {{"type", "status"}});
      ReadingReply(reply.socket, [&] {
        const ReplyFields s(reply.json);
        const bool running_now = s.String("state") == "running";
        const std::string pace = running_now ? TrainersPace(s) : std::string();
        if (!pace.empty()) where = "   (the trainers' pace: " + pace + ")" + where;
        if (const size_t problems = s.Strings("problems").size(); problems > 0) {
          // Its segment, socket or lock file removed or replaced: `status` says which and what to do.
          where = "   (" + std::to_string(problems) + (problems == 1 ? " problem" : " problems") +
                  ": its segment, socket or lock file is gone or replaced; ringfeedctl status says which)" + where;
        }
        // Running: the last 10 s. Production over: the whole run's rate (the last 10 s only
        // fall towards 0 once nothing is produced, status's "overall").
        std::snprintf(line, sizeof line, "%-*s %-12s %8lld %10s %12.0f %10zu", name_width, j.job.c_str(),
                      s.String("state", "?").c_str(), static_cast<long long>(s.Integer("pid")),
                      Seconds(s.Number("uptime_seconds")).c_str(),
                      s.Object("throughput").Object("records_per_second").Number(running_now ? "last_10s" : "overall"),
                      s.Objects("consumers").size());
      });
      ++running;
      out << line << where << "\n";
    } catch (const std::exception& e) {
      // The table's columns stay in place ("-"); the reason follows, as other rows' notes do.
      std::snprintf(line, sizeof line, "%-*s %-12s %8s %10s %12s %10s", name_width, j.job.c_str(), ListState(e), "-",
                    "-", "-", "-");
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

namespace {

// The autotuner's part of `status`: what it may use, what it uses, why it changed.
// `running`: production goes on; otherwise the measurements are those of the tuner's last
// interval before it ended (the tuner stops with production).
void PrintAutotune(const ReplyFields& a, bool running, std::ostream& out) {
  const ReplyFields limits = a.Object("limits");
  const ReplyFields knobs = a.Object("knobs");
  char buf[1024];
  std::string fixed;
  for (const std::string& f : a.Strings("fixed")) fixed += (fixed.empty() ? "" : ", ") + f;
  const ReplyFields m = a.Object("measured");
  const bool measured = m.Number("interval_seconds") > 0;
  const int64_t readers = knobs.Integer("readers"), workers = knobs.Integer("workers");
  const int64_t reads_per_file = knobs.Integer("reads_per_file", 1);
  // Per file: the reads in flight (one read() into the reader's window, or a queue of blocks,
  // which then hold what is read ahead) and the records buffered beside them for the interleave.
  const std::string reads =
      reads_per_file == 1 ? std::string("1 read at a time")
                          : std::to_string(reads_per_file) + " queued reads of " +
                                Bytes(limits.Number("read_block_bytes")) + " in flight";
  std::snprintf(buf, sizeof buf,
                "autotune   readers %lld, per file %s and %s of records read ahead, workers %lld, prefetch %lld%s\n",
                static_cast<long long>(readers), reads.c_str(), Bytes(knobs.Number("read_ahead_bytes")).c_str(),
                static_cast<long long>(workers), static_cast<long long>(knobs.Integer("prefetch")),
                fixed.empty() ? "" : (" (fixed by the config: " + fixed + ")").c_str());
  out << buf;
  // The CPU the daemon used over the tuner's last interval; none before its first one ends.
  if (measured) {
    std::snprintf(buf, sizeof buf,
                  "           CPU%s: %.2f of %g cores (cpu_budget: %s); %s %.2f cores of that, waiting the rest "
                  "of %s time (for storage or for room to read ahead)\n",
                  running ? "" : (" (the last " + FineSeconds(m.Number("interval_seconds")) + " of production)").c_str(),
                  a.Number("cpu_cores"),
                  limits.Number("cpu_budget_cores"), limits.String("cpu_budget_source").c_str(),
                  readers == 1 ? "the reader uses" : ("the " + std::to_string(readers) + " readers use").c_str(),
                  m.Number("read_cpu_cores"),
                  readers == 1 ? "its" : "their");
  } else {
    std::snprintf(buf, sizeof buf, "           CPU: not measured %s; cpu_budget %g cores (%s)\n",
                  running ? "yet (the tuner's first interval has not ended)"
                          : "(production ended before it made a record)",
                  limits.Number("cpu_budget_cores"), limits.String("cpu_budget_source").c_str());
  }
  out << buf;
  std::snprintf(buf, sizeof buf, "           memory_budget %s (%s): read-ahead may hold %s of records\n",
                Bytes(limits.Number("memory_budget_bytes")).c_str(), limits.String("memory_budget_source").c_str(),
                Bytes(limits.Number("read_ahead_budget_bytes")).c_str());
  out << buf;
  if (a.Number("cpu_cores") > 1.05 * limits.Number("cpu_budget_cores")) {
    if (fixed.find("workers") != std::string::npos || fixed.find("readers") != std::string::npos) {
      out << "           (over the CPU budget because the config fixes " << fixed
          << "; the tuner never changes fixed knobs)\n";
    } else if (readers <= 1 && workers <= 1) {
      out << "           (over the CPU budget at the floor: one reader, one worker and the sequencer always run.\n"
             "            Not an error; give the job more CPU or accept it.)\n";
    }
  }
  if (measured) {
    std::snprintf(buf, sizeof buf,
                  "           %s%s: %.0f records/s, consumers waited %.0f%%, readers %.0f%% busy (%.0f%% of it CPU), "
                  "sequencer %.0f%% CPU, waited %.0f%% for records and %.0f%% for a slot (%.0f%% at the prefetch depth, "
                  "%.0f%% with the ring full), workers %.0f%% busy, %.1f batches ready\n",
                  running ? "last " : "the last ", (FineSeconds(m.Number("interval_seconds")) + (running ? "" : " of production")).c_str(),
                  m.Number("records_per_second"), 100 * m.Number("consumer_wait_fraction"),
                  100 * m.Number("read_busy_fraction"), 100 * m.Number("read_cpu_fraction"),
                  100 * m.Number("sequencer_cpu_fraction"), 100 * m.Number("sequencer_read_wait_fraction"),
                  100 * m.Number("sequencer_slot_wait_fraction"),
                  100 * m.Number("sequencer_prefetch_wait_fraction"),
                  100 * std::max(0.0, m.Number("sequencer_slot_wait_fraction") -
                                          m.Number("sequencer_prefetch_wait_fraction")),
                  100 * m.Number("parse_busy_fraction"), m.Number("ready_batches_mean"));
    out << buf;
  }
  if (running && a.Has("holding")) out << "           no raise: " << a.String("holding") << "\n";
  const std::vector<ReplyFields> changes = a.Objects("changes");
  if (changes.empty()) {
    out << (running ? "           no changes yet\n" : "           no changes: the job ran on the start values\n");
    return;
  }
  out << "           last changes:\n";
  for (const ReplyFields& c : changes) {
    std::snprintf(buf, sizeof buf, "             at %7.1f s  %s %lld -> %lld: %s\n", c.Number("at_seconds"),
                  c.String("knob").c_str(), static_cast<long long>(c.Integer("from")),
                  static_cast<long long>(c.Integer("to")), c.String("reason").c_str());
    out << buf;
  }
}

// The status object as a table; throws BadReplyField at the first field of another type.
void PrintStatusTable(const ReplyFields& s, std::ostream& out) {
  const ReplyFields files = s.Object("files");
  const ReplyFields tp = s.Object("throughput");
  const ReplyFields ring = s.Object("ring");
  const ReplyFields pipeline = s.Object("pipeline");
  const ReplyFields memory = s.Object("memory");
  const ReplyFields errors = s.Object("errors");
  const std::string state = s.String("state");
  const int64_t epochs = s.Integer("epochs");
  char buf[512];
  out << "job        " << s.String("job") << "   (pid " << s.Integer("pid") << ", config " << s.String("config")
      << ")\n";
  out << "state      " << state << ", up " << Seconds(s.Number("uptime_seconds"));
  if (state == "end_of_data") {
    // Production's end, not the trainers': batches may still wait in the ring.
    const int64_t ready = ring.Integer("ready"), in_hand = ring.Integer("held");
    if (s.Count("batches") == 0) {
      out << " (no batch was made)";
    } else if (ready > 0 || in_hand > 0) {
      out << " (every batch is made; " << ready << " ready for trainers to take, " << in_hand << " held by them)";
    } else {
      out << " (every batch is made and was taken)";
    }
  }
  out << "\n";
  for (const std::string& problem : s.Strings("problems")) out << "problem    " << problem << "\n";
  const int64_t start_epoch = s.Integer("start_epoch");
  const uint64_t start_batch = s.Count("start_batch");
  std::string started_at;
  if (start_epoch > 0) started_at += "; started at --start-epoch " + std::to_string(start_epoch);
  if (start_batch > 0) {
    started_at += (start_epoch > 0 ? " --start-batch " : "; started at --start-batch ") + std::to_string(start_batch);
  }
  // Batches formed, ahead of those taken (an older ringfeedd does not send the field).
  const std::string batches_made =
      s.Has("batches_in_epoch") ? ", " + std::to_string(s.Count("batches_in_epoch")) + " of its batches made" : "";
  // Counted from 1 for people, with the batches' 0-based epoch beside it: that is the number
  // --start-epoch and checkpoints use.
  std::snprintf(buf, sizeof buf,
                "progress   epoch %lld of %s (0-based %lld, as in batches and --start-epoch%s), %llu of %llu "
                "files of this epoch done%s\n",
                static_cast<long long>(s.Integer("epoch")) + 1,
                epochs == 0 ? "unlimited" : std::to_string(epochs).c_str(), static_cast<long long>(s.Integer("epoch")),
                started_at.c_str(),
                static_cast<unsigned long long>(files.Count("done_in_epoch")),
                static_cast<unsigned long long>(files.Count("in_shard")), batches_made.c_str());
  out << buf;
  const ReplyFields shard = s.Object("shard");
  if (shard.Count("count", 1) > 1) {
    const bool by_record = shard.String("by") == "record";
    std::snprintf(buf, sizeof buf, "shard      %llu of %llu, by %s\n",
                  static_cast<unsigned long long>(shard.Count("index")),
                  static_cast<unsigned long long>(shard.Count("count", 1)),
                  by_record ? "record (fewer files than shards: every node reads every file)" : "file");
    out << buf;
  }
  const uint64_t records = s.Count("records"), batches = s.Count("batches");
  std::snprintf(buf, sizeof buf, "produced   %llu record%s in %llu batch%s, %s\n",
                static_cast<unsigned long long>(records), records == 1 ? "" : "s",
                static_cast<unsigned long long>(batches), batches == 1 ? "" : "es",
                Bytes(s.Number("record_bytes")).c_str());
  out << buf;
  const ReplyFields records_per_second = tp.Object("records_per_second"), mb_per_second = tp.Object("mb_per_second");
  if (tp.Has("production_seconds")) {
    // Production has ended: the whole run's rates (a window over the time since would only fall).
    const double produced_for = tp.Number("production_seconds");
    std::snprintf(buf, sizeof buf, "throughput %.0f records/s, %.1f MB/s over the %s from start to %s (%s ago)\n",
                  records_per_second.Number("overall"), mb_per_second.Number("overall"), FineSeconds(produced_for).c_str(),
                  state == "end_of_data" ? "the end of data" : state == "failed" ? "the failure" : "the stop",
                  Seconds(std::max(0.0, s.Number("uptime_seconds") - produced_for)).c_str());
  } else {
    // The window is the last 10 s, or the whole uptime while that is shorter.
    const std::string window = Seconds(std::min(10.0, s.Number("uptime_seconds")));
    std::snprintf(buf, sizeof buf, "throughput %.0f records/s, %.1f MB/s (last %s); %.0f records/s, %.1f MB/s overall\n",
                  records_per_second.Number("last_10s"), mb_per_second.Number("last_10s"), window.c_str(),
                  records_per_second.Number("overall"), mb_per_second.Number("overall"));
  }
  out << buf;
  // A ring the trainers do not empty (or none attached yet) caps these rates: say so, so that
  // they are not read as the loader's speed.
  const ReplyFields measured = s.Object("autotune").Object("measured");
  if (const std::string pace = TrainersPace(s); !pace.empty()) {
    const std::string stretch =
        "the last " + FineSeconds(measured.Number("interval_seconds")) + (state == "running" ? "" : " of production");
    std::snprintf(buf, sizeof buf,
                  "           production waited %.0f%% of %s for the trainers to take batches (%s): these rates do "
                  "not show the loader's speed\n",
                  100 * measured.Number("sequencer_slot_wait_fraction"), stretch.c_str(), pace.c_str());
    out << buf;
  }
  const int64_t slots = ring.Integer("slots"), held = ring.Integer("held");
  std::snprintf(buf, sizeof buf, "ring       %lld slots x %s: %lld free, %lld filling, %lld ready, %lld held\n",
                static_cast<long long>(slots), Bytes(ring.Number("slot_bytes")).c_str(),
                static_cast<long long>(ring.Integer("free")), static_cast<long long>(ring.Integer("filling")),
                static_cast<long long>(ring.Integer("ready")), static_cast<long long>(held));
  out << buf;
  if (slots > 0 && held == slots && state == "running") {
    out << "           every slot is held by a consumer: no batch can be made until one is released";
    if (const std::string who = ring.String("all_held"); !who.empty()) out << "; " << who;  // and what to do
    out << "\n";
  }
  // A cycle_length above the files to read interleaves them all: say so rather than show a
  // figure no epoch reaches.
  const int64_t cycle_length = pipeline.Integer("cycle_length");
  const int64_t in_shard = s.Object("files").Integer("in_shard");
  const std::string cycle =
      std::to_string(cycle_length) +
      (in_shard == 1 && cycle_length > 1 ? " (its one file)"
       : in_shard > 0 && in_shard < cycle_length ? " (all " + std::to_string(in_shard) + " files at once)"
                                                 : "");
  // Readers serve the files being read in turns: one reader may keep several going.
  const int64_t open_files = pipeline.Integer("open_files");
  const std::string being_read = open_files == 0   ? std::string("no file being read now")
                                 : open_files == 1 ? std::string("taking turns on 1 file being read")
                                                   : "taking turns on " + std::to_string(open_files) + " files being read";
  std::snprintf(buf, sizeof buf,
                "pipeline   cycle_length %s, readers %lld (%s; read-ahead %s per file, %s buffered), workers %lld, "
                "prefetch %lld\n",
                cycle.c_str(), static_cast<long long>(pipeline.Integer("readers")), being_read.c_str(),
                Bytes(pipeline.Number("read_ahead_per_file_bytes")).c_str(),
                Bytes(pipeline.Number("read_ahead_bytes")).c_str(), static_cast<long long>(pipeline.Integer("workers")),
                static_cast<long long>(pipeline.Integer("prefetch")));
  out << buf;
  // Queued reads (slow storage): the reads sent again once late by 2x their mean round trip.
  if (const uint64_t hedged = pipeline.Count("hedged_reads"); hedged > 0) {
    const bool paused = pipeline.String("hedged_reads_state") == "paused";
    std::snprintf(buf, sizeof buf,
                  "           %llu late %s sent again (mean round trip %s), %llu answered first%s\n",
                  static_cast<unsigned long long>(hedged), hedged == 1 ? "read" : "reads",
                  FineSeconds(pipeline.Number("queued_read_round_trip_seconds")).c_str(),
                  static_cast<unsigned long long>(pipeline.Count("hedged_reads_won")),
                  paused ? "; paused: they ran out of tokens, too few answering first (a saturated link, or most "
                           "reads slow), one tried every 10 s until one wins"
                         : "");
    out << buf;
  }
  const std::string budget =
      memory.Has("budget_bytes") ? "budget " + Bytes(memory.Number("budget_bytes")) : "no budget set";
  std::snprintf(buf, sizeof buf, "memory     segment %s + private RSS %s (%s)\n", Bytes(memory.Number("segment_bytes")).c_str(),
                Bytes(memory.Number("private_rss_bytes")).c_str(), budget.c_str());
  out << buf;
  if (!memory.String("over_budget").empty()) out << "           " << memory.String("over_budget") << "\n";
  if (s.Has("autotune")) PrintAutotune(s.Object("autotune"), state == "running", out);
  const std::vector<ReplyFields> consumers = s.Objects("consumers");
  out << "consumers  " << consumers.size() << " attached";
  if (s.Count("batches_reclaimed") > 0) {
    out << ", " << s.Count("batches_reclaimed") << (s.Count("batches_reclaimed") == 1 ? " batch" : " batches")
        << " reclaimed from consumers that went away holding them";
  }
  if (s.Count("ring_repairs") > 0) {
    out << ", " << s.Count("ring_repairs") << " ring words repaired (written by a process that maps the segment)";
  }
  out << "\n";
  // Ranks mode: each rank's batches ready in the ring, beside its consumer (who is behind).
  std::map<int64_t, uint64_t> ready_of_rank;
  for (const ReplyFields& r : s.Objects("ranks")) ready_of_rank[r.Integer("rank")] = r.Count("ready");
  for (const ReplyFields& c : consumers) {
    const uint64_t taken = c.Count("batches_taken");
    std::string rank;
    if (c.Has("rank")) {
      rank = " rank " + std::to_string(c.Integer("rank"));
      if (const auto it = ready_of_rank.find(c.Integer("rank")); it != ready_of_rank.end()) {
        rank += " (" + std::to_string(it->second) + " ready)";
      }
    }
    std::string holds;  // (a daemon before slots_held has none)
    if (c.Has("slots_held")) {
      const uint64_t held = c.Count("slots_held");
      holds = ", holds " + std::to_string(held) + (held == 1 ? " slot" : " slots");
    }
    std::snprintf(buf, sizeof buf, "           id %lld pid %lld%s: %llu %s taken%s, waited %.1f s, attached %s\n",
                  static_cast<long long>(c.Integer("id")), static_cast<long long>(c.Integer("pid")), rank.c_str(),
                  static_cast<unsigned long long>(taken), taken == 1 ? "batch" : "batches", holds.c_str(),
                  c.Number("wait_seconds"), Seconds(c.Number("attached_seconds")).c_str());
    out << buf;
  }
  const std::vector<int64_t> missing = s.Integers("ranks_without_consumer");
  if (!missing.empty() && state == "running") {
    std::string list;
    for (int64_t r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    out << "           no consumer for rank" << (missing.size() > 1 ? "s " : " ") << list
        << (missing.size() > 1 ? ": their batches wait in the ring; once they take up the prefetch depth "
                                 "(workers + prefetch), production waits for consumers of those ranks\n"
                               : ": its batches wait in the ring; once they take up the prefetch depth (workers + "
                                 "prefetch), production waits for a consumer of that rank\n");
  }
  // Ranks mode: the daemon says which rank holds every rank up (`holds_up`: attached, batches
  // ready while another attached rank has none, production not ended); named once it has
  // taken nothing for 5 s (the log warns after 10 s). Once production ended no rank holds
  // others up: a rank with nothing ready gets the end of the data instead of waiting, so a
  // rank that leaves its last batches untaken then gets no line here.
  for (const ReplyFields& r : s.Objects("ranks")) {
    const int64_t rank = r.Integer("rank");
    const double since = r.Number("seconds_since_take");
    if (!r.Bool("holds_up") || since < 5) continue;
    std::string trainer;
    for (const ReplyFields& c : consumers) {
      if (c.Has("rank") && c.Integer("rank") == rank) {
        trainer = " (consumer " + std::to_string(c.Integer("id")) + ", pid " + std::to_string(c.Integer("pid")) + ")";
      }
    }
    std::snprintf(buf, sizeof buf,
                  "           rank %lld%s has not taken any of its %llu ready batches for %.0f s while another rank "
                  "waits: production stops at the prefetch depth, so every rank waits for it; is that trainer "
                  "stopped, stuck or far slower than its peers?\n",
                  static_cast<long long>(rank), trainer.c_str(), static_cast<unsigned long long>(r.Count("ready")),
                  since);
    out << buf;
  }
  std::snprintf(buf, sizeof buf, "errors     %llu read and %llu parse errors skipped, %llu batches dropped (ranks remainder)\n",
                static_cast<unsigned long long>(errors.Count("read_errors_skipped")),
                static_cast<unsigned long long>(errors.Count("parse_errors_skipped")),
                static_cast<unsigned long long>(errors.Count("batches_dropped")));
  out << buf;
  const std::string last = errors.String("last_error");
  if (!last.empty()) out << "last error " << last << "\n";
}

}  // namespace

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

DumpResult DumpBatches(const DumpOptions& options, std::ostream& out) {
  // A reader that goes away (`| head`) makes writes fail with EPIPE instead of killing us, so
  // the batch in hand is released and the daemon sees a clean detach, not a dead consumer.
  std::signal(SIGPIPE, SIG_IGN);
  ClientOptions co;
  co.job = options.job;
  co.rank = options.rank;
  co.runtime_dir = options.runtime_dir.empty() ? "" : JobRuntimeDir(options.runtime_dir, options.job);
  // --timeout bounds every wait, the answer to the hello included (a frozen daemon).
  co.liveness_timeout = std::min(co.liveness_timeout, std::chrono::milliseconds(std::max<int64_t>(
                                                          1, static_cast<int64_t>(options.timeout_seconds * 1000))));
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
    throw;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  DumpResult result;
  uint64_t& printed = result.printed;
  Batch batch;
  while (!options.batches || printed < *options.batches) {
    const Client::Status status = client->Next(timeout, &batch);
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
      throw std::runtime_error("job '" + options.job + "': no batch within " + Seconds(options.timeout_seconds) + why);
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
  }
  out.flush();
  return result;
}

}  // namespace ringfeed
