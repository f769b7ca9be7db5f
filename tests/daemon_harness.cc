#include "tests/daemon_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "format/example_builder.h"
#include "format/tfrecord_writer.h"
#include "shm/names.h"
#include "shm/ring_layout.h"
#include "tests/test_support.h"

namespace ringfeed::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(5);

[[noreturn]] void SysFail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

// A test process must survive writing to a pipe whose reader (a killed child) is gone. The
// processes it starts get the default action back.
const bool kSigpipeIgnored = [] {
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}();

// argv as the char* array execv wants, built before fork (no allocation in the child).
struct Argv {
  explicit Argv(const std::vector<std::string>& args) : strings(args) {
    for (std::string& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  std::vector<std::string> strings;
  std::vector<char*> pointers;
};

// In the child after fork: every descriptor above stderr closed, so the process never holds
// the test's pipes to other children open.
void CloseOtherFds() { ::syscall(SYS_close_range, 3u, ~0u, 0u); }

std::optional<ExitStatus> WaitPid(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return ExitStatus::FromWait(status);
    if (r < 0 && errno != EINTR) SysFail("waitpid " + std::to_string(pid));
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
}

void KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// True when something accepts connections on the Unix socket at `path`.
bool SocketAccepts(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) SysFail("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) SysFail("write to pipe");
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string DaemonBinary() { return std::string(RINGFEED_BINARY_DIR) + "/daemon/ringfeedd"; }
std::string CtlBinary() { return std::string(RINGFEED_BINARY_DIR) + "/daemon/ringfeedctl"; }
std::string ExampleTrainerBinary() { return std::string(RINGFEED_BINARY_DIR) + "/examples/example_trainer"; }

ExitStatus ExitStatus::FromWait(int wait_status) {
  ExitStatus s;
  if (WIFEXITED(wait_status)) {
    s.exited = true;
    s.code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    s.signal = WTERMSIG(wait_status);
  }
  return s;
}

std::string ExitStatus::ToString() const {
  if (exited) return "exit " + std::to_string(code);
  return "signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
}

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (Clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(kPollInterval);
  }
}

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         bool stdout_reader_gone) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) SysFail("pipe2");
  if (stdout_reader_gone) {
    ::close(out[0]);
    out[0] = -1;
  }
  Argv args(argv);
  const pid_t pid = ::fork();
  if (pid < 0) SysFail("fork");
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);  // an ignored signal stays ignored across exec
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    CloseOtherFds();
    ::execv(args.pointers[0], args.pointers.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  CommandResult result;
  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};  // poll skips an fd of -1
  std::string* sinks[2] = {&result.out, &result.err};
  int open = stdout_reader_gone ? 1 : 2;
  bool killed = false;
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 && !killed) {
      ::kill(pid, SIGKILL);  // its pipes close with it
      killed = true;
    }
    const int n = ::poll(fds, 2, left > 0 ? static_cast<int>(left) : 100);
    if (n < 0 && errno != EINTR) SysFail("poll");
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = ExitStatus::FromWait(status);
  return result;
}

// ---------------------------------------------------------------------------------------------
// DaemonProcess

DaemonStart WithArgs(std::vector<std::string> args) {
  DaemonStart start;
  start.args = std::move(args);
  return start;
}

DaemonProcess::DaemonProcess(const std::filesystem::path& dir, std::string job, const std::string& config_yaml,
                             const std::string& config_name)
    : job_(std::move(job)),
      config_path_((dir / (config_name.empty() ? job_ + ".yaml" : config_name)).string()),
      runtime_dir_((dir / "run").string()) {
  WriteFile(config_path_, config_yaml);
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0 && !status_) {
    KillAndReap(pid_);
    // A killed daemon leaves its segment; its name is unique to this test's runtime directory.
    ::shm_unlink(shm::SegmentName(runtime_dir_, job_).c_str());
  }
}

std::string DaemonProcess::socket_path() const { return shm::SocketPath(runtime_dir_, job_); }
std::string DaemonProcess::lock_path() const { return runtime_dir_ + "/" + job_ + ".lock"; }
std::string DaemonProcess::segment_path() const { return "/dev/shm" + shm::SegmentName(runtime_dir_, job_); }

ClientOptions DaemonProcess::client_options(int rank) const {
  ClientOptions o;
  o.job = job_;
  o.rank = rank;
  o.runtime_dir = runtime_dir_;
  return o;
}

bool DaemonProcess::Start(const DaemonStart& options) {
  if (pid_ > 0 && !status_) throw std::runtime_error("DaemonProcess::Start: ringfeedd for " + job_ + " is running");
  status_.reset();
  static int starts = 0;  // log names unique within the test program
  const std::filesystem::path config(config_path_);
  log_path_ = (config.parent_path() / (config.stem().string() + "." + std::to_string(++starts) + ".log")).string();
  std::vector<std::string> argv = options.wrapper;
  for (const std::string& a : {DaemonBinary(), std::string("--config"), config_path_, std::string("--runtime-dir")}) {
    argv.push_back(a);
  }
  argv.push_back(runtime_dir_);
  for (const std::string& a : options.args) argv.push_back(a);
  if (!options.wrapper.empty()) {
    // The wrapper is looked up on PATH; execv needs a path.
    for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"}) {
      if (::access((dir + argv[0]).c_str(), X_OK) == 0) {
        argv[0] = dir + argv[0];
        break;
      }
    }
  }
  const int log = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) SysFail("open " + log_path_);
  Argv args(argv);
  const pid_t test_pid = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) SysFail("fork");
  if (pid_ == 0) {
    // A test binary that dies (an abort in Catch2, a crash) takes its daemons with it: a stop
    // signal, so they remove their names (left running, they held /dev/shm segments and
    // runtime directories for hours). Daemons are started from the test's main thread, whose
    // end is the process's.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != test_pid) ::_exit(127);  // the test died before the prctl
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    CloseOtherFds();
    ::execv(args.pointers[0], args.pointers.data());
    ::_exit(127);
  }
  ::close(log);
  const auto deadline = Clock::now() + options.timeout;
  while (Clock::now() < deadline) {
    if (!running()) return false;
    if (Serves()) return true;
    std::this_thread::sleep_for(kPollInterval);
  }
  return false;
}

bool DaemonProcess::Serves() const {
  return pid_ > 0 && ReadText(lock_path()) == std::to_string(pid_) + "\n" && SocketAccepts(socket_path());
}

bool DaemonProcess::running() {
  if (pid_ <= 0 || status_) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    status_ = ExitStatus::FromWait(status);
    return false;
  }
  return true;
}

void DaemonProcess::Kill(int signal) {
  if (pid_ > 0 && !status_) ::kill(pid_, signal);
}

std::optional<ExitStatus> DaemonProcess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) throw std::runtime_error("DaemonProcess::Wait: never started");
  if (status_) return status_;
  status_ = WaitPid(pid_, timeout);
  // The ring repair (Pipeline::RepairRing) must never act on a sound ring: in every test whose
  // consumers keep to the protocol, the daemon logged no repair.
  if (status_ && !expect_ring_repairs_) {
    const std::string err = Stderr();
    INFO("ringfeedd stderr:\n" << err);
    CHECK(err.find("ring repaired") == std::string::npos);
  }
  return status_;
}

ExitStatus DaemonProcess::Stop(std::chrono::milliseconds timeout) {
  Kill(SIGTERM);
  if (auto s = Wait(timeout)) return *s;
  KillAndReap(pid_);
  status_ = ExitStatus{false, -1, SIGKILL};
  return *status_;
}

std::string DaemonProcess::Stderr() const { return log_path_.empty() ? "" : ReadText(log_path_); }

bool DaemonProcess::WaitForStderr(const std::string& text, std::chrono::milliseconds timeout) const {
  return WaitUntil([&] { return Stderr().find(text) != std::string::npos; }, timeout);
}

nlohmann::json DaemonProcess::Status() const {
  const CommandResult r = RunCommand({CtlBinary(), "status", job_, "--json", "--runtime-dir", runtime_dir_});
  if (!r.status.exited || r.status.code != 0) {
    throw std::runtime_error("ringfeedctl status " + job_ + ": " + r.status.ToString() + ": " + r.err);
  }
  return nlohmann::json::parse(r.out);
}

// ---------------------------------------------------------------------------------------------
// Batches

BatchInfo BatchInfo::Of(const Batch& batch) {
  BatchInfo info;
  info.epoch = batch.epoch();
  info.index = batch.index();
  info.rows = batch.rows();
  info.flags = (batch.end_of_epoch() ? shm::kBatchEndOfEpoch : 0) | (batch.end_of_data() ? shm::kBatchEndOfData : 0);
  for (size_t r = 0; r < batch.rows(); ++r) {
    const shm::RowSource s = batch.source(r);
    info.sources.emplace_back(s.file_index, s.record_index);
  }
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < batch.feature_count(); ++i) {
    const TensorView t = batch.feature(i);
    h = Fnv1a(h, t.data(), t.bytes());
    h = Fnv1a(h, t.value_offsets().data(), t.value_offsets().size_bytes());
    h = Fnv1a(h, t.row_splits().data(), t.row_splits().size_bytes());
    if (t.name() == "id" && t.dtype() == shm::DType::kInt64 && t.type() == shm::FeatureType::kFixedLen) {
      const auto ids = t.values<int64_t>();
      info.ids.assign(ids.begin(), ids.end());
    }
  }
  info.digest = h;
  return info;
}

std::string BatchInfo::ToLine() const {
  std::ostringstream s;
  s << "batch " << epoch << ' ' << index << ' ' << rows << ' ' << flags << ' ' << digest << ' ' << sources.size();
  for (const auto& [f, r] : sources) s << ' ' << f << ':' << r;
  s << ' ' << ids.size();
  for (int64_t id : ids) s << ' ' << id;
  return s.str();
}

BatchInfo BatchInfo::FromLine(const std::string& line) {
  std::istringstream s(line);
  std::string word;
  BatchInfo info;
  size_t n = 0;
  s >> word >> info.epoch >> info.index >> info.rows >> info.flags >> info.digest >> n;
  if (!s || word != "batch") throw std::runtime_error("not a batch line: " + line);
  for (size_t i = 0; i < n; ++i) {
    uint32_t f = 0;
    uint64_t r = 0;
    char colon = 0;
    s >> f >> colon >> r;
    info.sources.emplace_back(f, r);
  }
  s >> n;
  for (size_t i = 0; i < n; ++i) {
    int64_t id = 0;
    s >> id;
    info.ids.push_back(id);
  }
  if (!s) throw std::runtime_error("truncated batch line: " + line);
  return info;
}

// ---------------------------------------------------------------------------------------------
// Children

void ChildIo::WriteLine(const std::string& line) { WriteAll(out_, line + "\n"); }

std::string ChildIo::ReadLine() {
  std::string line;
  char c;
  for (;;) {
    const ssize_t n = ::read(in_, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') return line;
    line += c;
  }
}

ChildProcess::ChildProcess(const std::function<int(ChildIo&)>& body) {
  int up[2], down[2];
  if (::pipe2(up, O_CLOEXEC) != 0 || ::pipe2(down, O_CLOEXEC) != 0) SysFail("pipe2");
  std::cout.flush();
  std::cerr.flush();
  pid_ = ::fork();
  if (pid_ < 0) SysFail("fork");
  if (pid_ == 0) {
    // Keep only the two pipe ends (as fds 3 and 4): a copy of another child's pipe or of the
    // parent's client connection would keep it open after its owner closed it.
    const int out = ::fcntl(up[1], F_DUPFD, 1000), in = ::fcntl(down[0], F_DUPFD, 1000);
    if (out < 0 || in < 0 || ::dup2(out, 3) < 0 || ::dup2(in, 4) < 0) ::_exit(126);
    ::syscall(SYS_close_range, 5u, ~0u, 0u);
    ::signal(SIGPIPE, SIG_DFL);  // as in a trainer: the client must not die of a closed socket
    ChildIo io(3, 4);
    int code = 1;
    try {
      code = body(io);
    } catch (const std::exception& e) {
      try {
        std::string what = e.what();
        for (char& c : what) if (c == '\n') c = ' ';
        io.WriteLine("error " + what);
      } catch (...) {
      }
    } catch (...) {
    }
    ::_exit(code);
  }
  ::close(up[1]);
  ::close(down[0]);
  from_child_ = up[0];
  to_child_ = down[1];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) KillAndReap(pid_);
  if (from_child_ >= 0) ::close(from_child_);
  if (to_child_ >= 0) ::close(to_child_);
}

void ChildProcess::Send(const std::string& line) { WriteAll(to_child_, line + "\n"); }

std::optional<std::string> ChildProcess::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (eof_) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{from_child_, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno != EINTR) SysFail("poll");
    if (n <= 0) continue;
    char buf[65536];
    const ssize_t got = ::read(from_child_, buf, sizeof buf);
    if (got > 0) {
      buffer_.append(buf, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      eof_ = true;
      if (!buffer_.empty()) buffer_ += '\n';  // a last line without its newline
    }
  }
}

std::optional<std::string> ChildProcess::WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::optional<std::string> line = ReadLine(std::max(left, std::chrono::milliseconds(0)));
    if (!line) return std::nullopt;
    if (line->rfind(prefix, 0) == 0) return line;
    skipped_.push_back(*line);
  }
}

std::vector<std::string> ChildProcess::ReadAll(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> lines;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::optional<std::string> line = ReadLine(std::max(left, std::chrono::milliseconds(0)));
    if (line) {
      lines.push_back(std::move(*line));
      continue;
    }
    if (eof_) return lines;
    throw std::runtime_error("child " + std::to_string(pid_) + " did not finish within " +
                             std::to_string(timeout.count()) + " ms; its lines so far: " +
                             std::to_string(lines.size()));
  }
}

void ChildProcess::Kill(int signal) {
  if (pid_ > 0 && !status_) ::kill(pid_, signal);
}

ExitStatus ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (status_) return *status_;
  status_ = WaitPid(pid_, timeout);
  if (!status_) {
    KillAndReap(pid_);
    status_ = ExitStatus{false, -1, SIGKILL};
  }
  return *status_;
}

namespace {

// The standard consumer loop; `emit` gets each line.
int ConsumerLoop(const ConsumerSpec& spec, const std::function<void(const std::string&)>& emit,
                 const std::function<void()>& wait_for_go) {
  std::unique_ptr<Client> client;
  try {
    client = Client::Attach(spec.client);
  } catch (const ClientError& e) {
    emit(std::string("error ") + e.what());
    return 0;
  }
  emit("attached " + std::to_string(client->consumer_id()));
  if (spec.wait_for_go) wait_for_go();
  Batch batch;
  uint64_t taken = 0;
  try {
    for (;;) {
      if (spec.max_batches != 0 && taken == spec.max_batches) {
        emit("limit");
        return 0;
      }
      const Client::Status status = client->Next(spec.next_timeout, &batch);
      if (status == Client::Status::kEndOfData) {
        emit("end");
        return 0;
      }
      if (status == Client::Status::kTimeout) {
        emit("timeout");
        return 0;
      }
      emit(BatchInfo::Of(batch).ToLine());
      ++taken;
    }
  } catch (const ClientError& e) {
    std::string what = e.what();
    for (char& c : what) if (c == '\n') c = ' ';
    emit("error " + what);
  }
  return 0;
}

ConsumerReport ParseConsumerLines(const std::vector<std::string>& lines) {
  ConsumerReport report;
  for (const std::string& line : lines) {
    if (line.rfind("batch ", 0) == 0) {
      report.batches.push_back(BatchInfo::FromLine(line));
    } else if (line == "end" || line == "timeout" || line == "limit") {
      report.end = line;
    } else if (line.rfind("error ", 0) == 0) {
      report.end = "error";
      report.error = line.substr(6);
    }
  }
  return report;
}

}  // namespace

int RunConsumer(const ConsumerSpec& spec, ChildIo& io) {
  return ConsumerLoop(spec, [&](const std::string& line) { io.WriteLine(line); }, [&] { io.ReadLine(); });
}

ConsumerReport CollectConsumer(ChildProcess& child, std::chrono::milliseconds timeout) {
  std::vector<std::string> lines = child.ReadAll(timeout);
  ConsumerReport report = ParseConsumerLines(lines);
  report.status = child.Wait(timeout);
  return report;
}

ConsumerReport ConsumeInProcess(const ConsumerSpec& spec) {
  std::vector<std::string> lines;
  ConsumerSpec in_process = spec;
  in_process.wait_for_go = false;
  ConsumerLoop(in_process, [&](const std::string& line) { lines.push_back(line); }, [] {});
  ConsumerReport report = ParseConsumerLines(lines);
  report.status.exited = true;
  report.status.code = 0;
  return report;
}

// ---------------------------------------------------------------------------------------------
// Data

std::string IdRecord(int64_t id) {
  std::vector<float> vals;
  for (int64_t k = 0; k < id % 5; ++k) vals.push_back(static_cast<float>(id) + 0.25f * static_cast<float>(k));
  std::vector<std::string> tags;
  for (int64_t k = 0; k < id % 3; ++k) tags.push_back("tag-" + std::to_string(id) + "-" + std::to_string(k));
  std::vector<std::string_view> tag_views(tags.begin(), tags.end());
  ExampleBuilder b;
  b.AddInt64("id", {id});
  b.AddFloat("vals", vals);
  b.AddBytes("tag", tag_views);
  return b.Serialize();
}

void WriteIdFile(const std::string& path, int64_t first_id, int64_t count, Compression compression) {
  WriterOptions options;
  options.compression = compression;
  TFRecordWriter writer(path, options);
  for (int64_t id = first_id; id < first_id + count; ++id) writer.Write(IdRecord(id));
  writer.Close();
}

std::string IdFeaturesYaml() {
  return "  id: {type: fixed, dtype: int64}\n"
         "  vals: {type: varlen, dtype: float32}\n"
         "  tag: {type: varlen, dtype: bytes}\n";
}

std::string IdJobConfig(const std::string& job, const std::string& files, const std::string& extra) {
  return "job: " + job + "\n"
         "source: {files: [\"" + files + "\"]}\n"
         "features:\n" + IdFeaturesYaml() + extra;
}

void SkipOrFail(const std::string& why) {
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") FAIL("CI=true but this test cannot run here: " << why);
  Skip(why);
}

std::vector<int64_t> Iota(int64_t first_id, int64_t count) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  std::iota(ids.begin(), ids.end(), first_id);
  return ids;
}

std::vector<int64_t> SortedIds(const std::vector<BatchInfo>& batches) {
  std::vector<int64_t> ids;
  for (const BatchInfo& b : batches) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ringfeed::testing
