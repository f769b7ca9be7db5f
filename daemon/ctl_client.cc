#include "daemon/ctl_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
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

nlohmann::ordered_json FeatureJson(const TensorView& t) {
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
        const std::string_view v = t.string(i);
        values.push_back(Base64Encode({reinterpret_cast<const uint8_t*>(v.data()), v.size()}));
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

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
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
    if (entry.path().extension() == ".sock") jobs.push_back({entry.path().stem().string(), dir});
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
bool Accepts(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
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
  std::vector<std::string> found;
  for (const std::string& dir : Subdirectories(runtime_dir)) {
    if (std::filesystem::exists(shm::SocketPath(dir, job), ec)) found.push_back(dir);
  }
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

nlohmann::json QueryDaemon(const std::string& runtime_dir, const std::string& job, const nlohmann::json& request) {
  const std::string path = shm::SocketPath(JobRuntimeDir(runtime_dir, job), job);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::string jobs;
    for (const JobSocket& j : JobSockets(runtime_dir)) {
      jobs += (jobs.empty() ? "" : ", ") + j.job + (j.runtime_dir == runtime_dir ? "" : " (in " + j.runtime_dir + ")");
    }
    throw std::runtime_error("job '" + job + "' is not running in " + runtime_dir + " (no " + path + "); " +
                             (jobs.empty() ? std::string("no jobs run there")
                                           : "jobs there: " + jobs) +
                             ". Use --runtime-dir or RINGFEED_RUNTIME_DIR to look elsewhere");
  }
  detail::ControlConnection connection;
  try {
    connection.Connect(path, job);
  } catch (const std::exception& e) {
    // A socket nobody listens on (ECONNREFUSED) is what a killed daemon leaves.
    const bool stale = std::string_view(e.what()).find(std::strerror(ECONNREFUSED)) != std::string_view::npos;
    throw std::runtime_error(std::string(e.what()) +
                             (stale ? "; if ringfeedd was killed, the socket is stale: start the job again" : ""));
  }
  connection.SendLine(nlohmann::json{{"type", shm::kMessageHello},
                                     {"protocol", shm::kProtocolVersion},
                                     {"role", shm::kRoleControl},
                                     {"pid", ::getpid()}}
                          .dump());
  nlohmann::json welcome = nlohmann::json::parse(connection.ReadLine(kReplyTimeout), nullptr, false);
  if (!welcome.is_object()) throw std::runtime_error("job '" + job + "': malformed answer on " + path);
  if (welcome.value("type", "") == "error") {
    throw std::runtime_error("job '" + job + "': ringfeedd refused: " + welcome.value("message", ""));
  }
  connection.SendLine(request.dump());
  nlohmann::json reply = nlohmann::json::parse(connection.ReadLine(kReplyTimeout), nullptr, false);
  if (!reply.is_object()) throw std::runtime_error("job '" + job + "': malformed reply on " + path);
  if (reply.value("type", "") == "error") throw std::runtime_error("job '" + job + "': " + reply.value("message", ""));
  connection.Close();
  return reply;
}

int ListJobs(const std::string& runtime_dir, std::ostream& out) {
  const std::vector<JobSocket> jobs = JobSockets(runtime_dir);
  if (jobs.empty()) {
    out << "no ringfeed jobs in " << runtime_dir
        << " or its subdirectories (set RINGFEED_RUNTIME_DIR or --runtime-dir to look elsewhere)\n";
    return 0;
  }
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %-12s %8s %10s %12s %10s\n", "JOB", "STATE", "PID", "UPTIME", "RECORDS/S",
                "CONSUMERS");
  out << line;
  int running = 0;
  for (const JobSocket& j : jobs) {
    const std::string where = j.runtime_dir == runtime_dir ? "" : "   (in " + j.runtime_dir + ")";
    try {
      const nlohmann::json s = QueryDaemon(j.runtime_dir, j.job, {{"type", "status"}});
      std::snprintf(line, sizeof line, "%-24s %-12s %8lld %10s %12.0f %10zu", j.job.c_str(),
                    s.value("state", "?").c_str(), static_cast<long long>(s.value("pid", 0)),
                    Seconds(s.value("uptime_seconds", 0.0)).c_str(),
                    s["throughput"]["records_per_second"].value("last_10s", 0.0), s["consumers"].size());
      ++running;
      out << line << where << "\n";
    } catch (const std::exception& e) {
      std::snprintf(line, sizeof line, "%-24s %-12s", j.job.c_str(), "unreachable");
      out << line << " " << e.what() << "\n";
    }
  }
  return running;
}

// The autotuner's part of `status`: what it may use, what it uses, why it changed.
// `running`: production goes on; otherwise the measurements are those of the tuner's last
// interval before it ended (the tuner stops with production).
static void PrintAutotune(const nlohmann::json& a, bool running, std::ostream& out) {
  const auto& limits = a["limits"];
  const auto& knobs = a["knobs"];
  char buf[1024];
  std::string fixed;
  for (const auto& f : a["fixed"]) fixed += (fixed.empty() ? "" : ", ") + f.get<std::string>();
  // The CPU the daemon used over the tuner's last interval; none yet in the first one.
  const bool measured = a.contains("measured") && a["measured"].value("interval_seconds", 0.0) > 0;
  char cpu[64];
  if (measured) std::snprintf(cpu, sizeof cpu, "%.2f", a.value("cpu_cores", 0.0));
  else std::snprintf(cpu, sizeof cpu, "not measured yet");
  std::snprintf(buf, sizeof buf,
                "autotune   readers %lld, read-ahead %s per file, %lld %s in flight per file, workers %lld, "
                "prefetch %lld%s\n"
                "           CPU: %s of %.3g cores (cpu_budget: %s); %lld of %lld %s not using CPU (waiting for "
                "storage or for room to read ahead)\n"
                "           memory_budget %s (%s): read-ahead may use %s\n",
                static_cast<long long>(knobs.value("readers", int64_t{0})),
                Bytes(knobs.value("read_ahead_bytes", 0.0)).c_str(),
                static_cast<long long>(knobs.value("reads_per_file", int64_t{1})),
                knobs.value("reads_per_file", int64_t{1}) == 1 ? "read" : "reads",
                static_cast<long long>(knobs.value("workers", int64_t{0})),
                static_cast<long long>(knobs.value("prefetch", int64_t{0})),
                fixed.empty() ? "" : (" (fixed by the config: " + fixed + ")").c_str(), cpu,
                limits.value("cpu_budget_cores", 0.0), limits.value("cpu_budget_source", "").c_str(),
                static_cast<long long>(a.value("blocked_io_threads", int64_t{0})),
                static_cast<long long>(knobs.value("readers", int64_t{0})),
                knobs.value("readers", int64_t{0}) == 1 ? "reader" : "readers",
                Bytes(limits.value("memory_budget_bytes", 0.0)).c_str(), limits.value("memory_budget_source", "").c_str(),
                Bytes(limits.value("read_ahead_budget_bytes", 0.0)).c_str());
  out << buf;
  if (a.value("cpu_cores", 0.0) > 1.05 * limits.value("cpu_budget_cores", 0.0)) {
    if (fixed.find("workers") != std::string::npos || fixed.find("readers") != std::string::npos) {
      out << "           (over the CPU budget because the config fixes " << fixed
          << "; the tuner never changes fixed knobs)\n";
    } else if (knobs.value("readers", int64_t{0}) <= 1 && knobs.value("workers", int64_t{0}) <= 1) {
      out << "           (over the CPU budget at the floor: one reader, one worker and the sequencer always run.\n"
             "            Not an error; give the job more CPU or accept it.)\n";
    }
  }
  if (measured) {
    const auto& m = a["measured"];
    std::snprintf(buf, sizeof buf,
                  "           %s %.2f s: %.0f records/s, consumers waited %.0f%%, readers %.0f%% busy (%.0f%% of it CPU), "
                  "sequencer waited %.0f%% for records and %.0f%% for slots, workers %.0f%% busy, %.1f batches ready\n",
                  running ? "last" : "(before production ended) last", m.value("interval_seconds", 0.0),
                  m.value("records_per_second", 0.0),
                  100 * m.value("consumer_wait_fraction", 0.0), 100 * m.value("read_busy_fraction", 0.0),
                  100 * m.value("read_cpu_fraction", 0.0), 100 * m.value("sequencer_read_wait_fraction", 0.0),
                  100 * m.value("sequencer_slot_wait_fraction", 0.0), 100 * m.value("parse_busy_fraction", 0.0),
                  m.value("ready_batches_mean", 0.0));
    out << buf;
  }
  const auto& changes = a["changes"];
  if (changes.empty()) {
    out << "           no changes yet\n";
    return;
  }
  out << "           last changes:\n";
  for (const auto& c : changes) {
    std::snprintf(buf, sizeof buf, "             at %7.1f s  %s %lld -> %lld: %s\n", c.value("at_seconds", 0.0),
                  c.value("knob", "").c_str(), static_cast<long long>(c.value("from", int64_t{0})),
                  static_cast<long long>(c.value("to", int64_t{0})), c.value("reason", "").c_str());
    out << buf;
  }
}

void PrintStatusTable(const nlohmann::json& s, std::ostream& out) {
  auto num = [](const nlohmann::json& j, const char* key) { return j.contains(key) ? j[key].get<double>() : 0.0; };
  const auto& files = s["files"];
  const auto& tp = s["throughput"];
  const auto& ring = s["ring"];
  const auto& pipeline = s["pipeline"];
  const auto& memory = s["memory"];
  const auto& errors = s["errors"];
  const int64_t epochs = s.value("epochs", int64_t{0});
  char buf[512];
  out << "job        " << s.value("job", "") << "   (pid " << s.value("pid", 0) << ", config " << s.value("config", "")
      << ")\n";
  out << "state      " << s.value("state", "") << ", up " << Seconds(s.value("uptime_seconds", 0.0)) << "\n";
  std::snprintf(buf, sizeof buf, "progress   epoch %lld of %s, %llu of %llu files of this epoch done\n",
                static_cast<long long>(s.value("epoch", int64_t{0})) + 1,
                epochs == 0 ? "unlimited" : std::to_string(epochs).c_str(),
                static_cast<unsigned long long>(files.value("done_in_epoch", uint64_t{0})),
                static_cast<unsigned long long>(files.value("in_shard", uint64_t{0})));
  out << buf;
  if (s.contains("shard") && s["shard"].value("count", uint64_t{1}) > 1) {
    const auto& shard = s["shard"];
    const bool by_record = shard.value("by", "") == "record";
    std::snprintf(buf, sizeof buf, "shard      %llu of %llu, by %s\n",
                  static_cast<unsigned long long>(shard.value("index", uint64_t{0})),
                  static_cast<unsigned long long>(shard.value("count", uint64_t{1})),
                  by_record ? "record (fewer files than shards: every node reads every file)" : "file");
    out << buf;
  }
  std::snprintf(buf, sizeof buf, "produced   %llu records in %llu batches, %s\n",
                static_cast<unsigned long long>(s.value("records", uint64_t{0})),
                static_cast<unsigned long long>(s.value("batches", uint64_t{0})),
                Bytes(num(s, "record_bytes")).c_str());
  out << buf;
  std::snprintf(buf, sizeof buf, "throughput %.0f records/s, %.1f MB/s (last 10 s); %.0f records/s, %.1f MB/s overall\n",
                num(tp["records_per_second"], "last_10s"), num(tp["mb_per_second"], "last_10s"),
                num(tp["records_per_second"], "overall"), num(tp["mb_per_second"], "overall"));
  out << buf;
  std::snprintf(buf, sizeof buf, "ring       %d slots x %s: %d free, %d filling, %d ready, %d held\n",
                ring.value("slots", 0), Bytes(num(ring, "slot_bytes")).c_str(), ring.value("free", 0),
                ring.value("filling", 0), ring.value("ready", 0), ring.value("held", 0));
  out << buf;
  if (ring.value("slots", 0) > 0 && ring.value("held", 0) == ring.value("slots", 0) &&
      s.value("state", "") == "running") {
    out << "           every slot is held by a consumer: no batch can be made until one is released (consumers "
           "that keep a batch while they wait for the next need more ring.slots than consumers)\n";
  }
  std::snprintf(buf, sizeof buf,
                "pipeline   cycle_length %d, readers %d (read-ahead %s per file, %d files open, %s buffered), "
                "workers %d, prefetch %d\n",
                pipeline.value("cycle_length", 0), pipeline.value("readers", 0),
                Bytes(num(pipeline, "read_ahead_per_file_bytes")).c_str(), pipeline.value("open_files", 0),
                Bytes(num(pipeline, "read_ahead_bytes")).c_str(), pipeline.value("workers", 0),
                pipeline.value("prefetch", 0));
  out << buf;
  const std::string budget = memory["budget_bytes"].is_null() ? "no budget set" : "budget " + Bytes(num(memory, "budget_bytes"));
  std::snprintf(buf, sizeof buf, "memory     segment %s + private RSS %s (%s)\n", Bytes(num(memory, "segment_bytes")).c_str(),
                Bytes(num(memory, "private_rss_bytes")).c_str(), budget.c_str());
  out << buf;
  if (s.contains("autotune") && s["autotune"].is_object()) PrintAutotune(s["autotune"], s.value("state", "") == "running", out);
  const auto& consumers = s["consumers"];
  out << "consumers  " << consumers.size() << " attached";
  if (s.value("batches_reclaimed", 0) > 0) out << ", " << s.value("batches_reclaimed", 0) << " batches reclaimed from dead consumers";
  if (s.value("ring_repairs", 0) > 0) {
    out << ", " << s.value("ring_repairs", 0) << " ring words repaired (written by a process that maps the segment)";
  }
  out << "\n";
  for (const auto& c : consumers) {
    std::snprintf(buf, sizeof buf, "           id %d pid %d%s: %llu batches taken, waited %.1f s, attached %s\n",
                  c.value("id", 0), c.value("pid", 0),
                  c["rank"].is_null() ? "" : (" rank " + std::to_string(c["rank"].get<int>())).c_str(),
                  static_cast<unsigned long long>(c.value("batches_taken", uint64_t{0})), c.value("wait_seconds", 0.0),
                  Seconds(c.value("attached_seconds", 0.0)).c_str());
    out << buf;
  }
  const auto& missing = s.contains("ranks_without_consumer") ? s["ranks_without_consumer"] : nlohmann::json();
  if (missing.is_array() && !missing.empty() && s.value("state", "") == "running") {
    std::string list;
    for (const auto& r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r.get<int>());
    out << "           no consumer for rank" << (missing.size() > 1 ? "s " : " ") << list
        << (missing.size() > 1 ? ": their batches wait in the ring; once they take up the prefetch depth "
                                 "(workers + prefetch), production waits for consumers of those ranks\n"
                               : ": its batches wait in the ring; once they take up the prefetch depth (workers + "
                                 "prefetch), production waits for a consumer of that rank\n");
  }
  std::snprintf(buf, sizeof buf, "errors     %llu read and %llu parse errors skipped, %llu batches dropped (ranks remainder)\n",
                static_cast<unsigned long long>(errors.value("read_errors_skipped", uint64_t{0})),
                static_cast<unsigned long long>(errors.value("parse_errors_skipped", uint64_t{0})),
                static_cast<unsigned long long>(errors.value("batches_dropped", uint64_t{0})));
  out << buf;
  const std::string last = errors.value("last_error", "");
  if (!last.empty()) out << "last error " << last << "\n";
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
      break;
    }
    if (status == Client::Status::kTimeout) {
      throw std::runtime_error("job '" + options.job + "': no batch within " + Seconds(options.timeout_seconds) +
                               " (is the ring held by other consumers, or the data slow?)");
    }
    nlohmann::ordered_json line;
    line["epoch"] = batch.epoch();
    line["batch"] = batch.index();
    line["size"] = batch.rows();
    nlohmann::ordered_json features = nlohmann::ordered_json::object();
    for (size_t i = 0; i < batch.feature_count(); ++i) {
      const TensorView t = batch.feature(i);
      features[std::string(t.name())] = FeatureJson(t);
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
    if (!out) break;  // the reader went away (e.g. `| head`): detach cleanly
    ++printed;
  }
  out.flush();
  return result;
}

}  // namespace ringfeed
