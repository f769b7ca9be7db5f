// Test harness for end-to-end tests of ringfeedd with real processes: the daemon run with
// fork+exec in its own runtime directory, consumers (ringfeed::Client) in forked children that
// report what they got through a pipe, ringfeedctl run as a command, and TFRecord files of
// numbered records to feed them.
//
// Processes: every process started here is killed (SIGKILL) and reaped by its owner's
// destructor, so a failing REQUIRE never leaves a daemon or a consumer behind; a daemon that
// was killed also has its shared-memory segment removed (the name is unique to the test's
// runtime directory). Waits poll a condition every few milliseconds up to a deadline
// (kEventually, 10 s, unless stated) instead of sleeping a guessed time.
//
// Fork safety: the children run only the body given to them and end with _exit (no Catch2,
// no atexit handlers), holding no descriptor of the parent's but stdin/stdout/stderr and their
// pipe; fork them while the test process has no other threads.
//
// Errors: misuse and system-call failures throw std::runtime_error naming the call.
// Thread-safety: none; one test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "format/compression.h"

namespace ringfeed::testing {

// How long "eventually" may take: generous, so that a loaded machine never fails a test.
inline constexpr std::chrono::milliseconds kEventually{10000};

// Built with AddressSanitizer or ThreadSanitizer: their shadow memory alone puts the daemon's
// baseline RSS at ~30-40 MiB, so memory figures are not asserted and budgets are larger.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

std::string DaemonBinary();  // <build>/daemon/ringfeedd
std::string CtlBinary();     // <build>/daemon/ringfeedctl
std::string ExampleTrainerBinary();  // <build>/examples/example_trainer

// How a process ended.
struct ExitStatus {
  bool exited = false;  // true: exit(code); false: killed by `signal`
  int code = -1;
  int signal = 0;
  static ExitStatus FromWait(int wait_status);
  std::string ToString() const;  // "exit 2", "signal 9 (Killed)"
};

// Polls `condition` every 5 ms until it is true or `timeout` has passed; returns its last value.
bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout = kEventually);

// Runs `argv` (argv[0] a path) to its end with stdout and stderr captured; SIGKILLs it after
// `timeout` (the status then says signal 9).
struct CommandResult {
  ExitStatus status;
  std::string out, err;
};
// With `stdout_reader_gone`, stdout is a pipe whose reader has gone before the command starts
// (`| head` that has exited): each write to it fails with EPIPE (or SIGPIPE); `out` stays empty.
CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = kEventually,
                         bool stdout_reader_gone = false);

struct DaemonStart {
  std::vector<std::string> args;     // more ringfeedd arguments, e.g. "--exit-when-done"
  std::vector<std::string> wrapper;  // command run instead, with ringfeedd's argv appended
  std::chrono::milliseconds timeout = kEventually;
};
// Starts `daemon` (a DaemonProcess) with the DaemonStart given, if any; on failure shows its
// stderr and exit status.
#define RINGFEED_REQUIRE_STARTED(daemon, ...)                                                 \
  do {                                                                                        \
    const bool ringfeed_started_ = (daemon).Start(__VA_ARGS__);                               \
    INFO("ringfeedd " << ((daemon).exit_status() ? (daemon).exit_status()->ToString() : "") \
                      << " stderr:\n" << (daemon).Stderr());                                  \
    REQUIRE(ringfeed_started_);                                                               \
  } while (false)

// A DaemonStart with only `args`, e.g. WithArgs({"--exit-when-done"}).
DaemonStart WithArgs(std::vector<std::string> args);

// One ringfeedd. The config is written to <dir>/<config_name> (default <job>.yaml), the runtime
// directory is <dir>/run, stdout and stderr go to <dir>/<config stem>.<n>.log.
class DaemonProcess {
 public:
  DaemonProcess(const std::filesystem::path& dir, std::string job, const std::string& config_yaml,
                const std::string& config_name = "");
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Starts ringfeedd and waits until it serves: its lock file names its pid and its socket
  // accepts connections (a leftover socket of a killed daemon does not count). Returns false
  // when the process exited first (exit_status() and Stderr() say why) or on timeout.
  bool Start(const DaemonStart& options = {});

  pid_t pid() const { return pid_; }
  // Whether this start serves the job now: its lock file names its pid and its socket accepts
  // connections (what Start waits for).
  bool Serves() const;
  // Every Wait that sees the daemon end checks that it logged no "ring repaired" (its consumers
  // kept to the protocol); a test that writes the ring's words itself turns that off.
  void ExpectRingRepairs() { expect_ring_repairs_ = true; }
  bool running();  // reaps the process when it has exited
  // Sends `signal`; does not wait.
  void Kill(int signal);
  // Waits for the process to end; nullopt on timeout (it keeps running).
  std::optional<ExitStatus> Wait(std::chrono::milliseconds timeout = kEventually);
  // SIGTERM, then waits; SIGKILL after the timeout.
  ExitStatus Stop(std::chrono::milliseconds timeout = kEventually);
  const std::optional<ExitStatus>& exit_status() const { return status_; }

  std::string Stderr() const;  // everything the daemon wrote so far (this start)
  bool WaitForStderr(const std::string& text, std::chrono::milliseconds timeout = kEventually) const;

  // `ringfeedctl status JOB --json`; throws std::runtime_error when it fails.
  nlohmann::json Status() const;

  const std::string& job() const { return job_; }
  const std::string& config_path() const { return config_path_; }
  const std::string& runtime_dir() const { return runtime_dir_; }
  std::string socket_path() const;
  std::string lock_path() const;
  std::string segment_path() const;  // /dev/shm/ringfeed.<job>.<hash>
  ClientOptions client_options(int rank = -1) const;

 private:
  std::string job_, config_path_, runtime_dir_, log_path_;
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
  bool expect_ring_repairs_ = false;
};

// What a consumer saw of one batch. digest: FNV-1a-64 over every feature's values bytes,
// value_offsets and row_splits, in schema order, so two batches with the same digest hold the
// same data.
struct BatchInfo {
  uint64_t epoch = 0, index = 0;
  uint32_t rows = 0, flags = 0;  // flags: shm::kBatchEndOfEpoch | shm::kBatchEndOfData
  std::vector<std::pair<uint32_t, uint64_t>> sources;  // (file_index, record_index) per row
  std::vector<int64_t> ids;  // the "id" feature per row when the schema has one (int64 fixed)
  uint64_t digest = 0;

  static BatchInfo Of(const Batch& batch);
  std::string ToLine() const;  // "batch <epoch> <index> ..."
  static BatchInfo FromLine(const std::string& line);
  bool operator==(const BatchInfo&) const = default;
};

// The child's end of a ChildProcess: lines to the parent, lines from it.
class ChildIo {
 public:
  ChildIo(int to_parent, int from_parent) : out_(to_parent), in_(from_parent) {}
  void WriteLine(const std::string& line);
  std::string ReadLine();  // blocks; "" at EOF

 private:
  int out_, in_;
};

// A forked child running `body`; its return value is the exit code. An exception in the body
// is written as the line "error <what>" and the exit code is 1.
class ChildProcess {
 public:
  explicit ChildProcess(const std::function<int(ChildIo&)>& body);
  ~ChildProcess();  // SIGKILL + reap
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void Send(const std::string& line);  // to ChildIo::ReadLine
  // The next line, or nullopt at EOF or timeout.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout = kEventually);
  // Reads lines until one starts with `prefix` (returned); the lines before it are kept in
  // skipped(). nullopt at EOF or timeout.
  std::optional<std::string> WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout = kEventually);
  // Every line until EOF (the child exited or closed its end); throws on timeout.
  std::vector<std::string> ReadAll(std::chrono::milliseconds timeout = kEventually);
  const std::vector<std::string>& skipped() const { return skipped_; }
  void Kill(int signal);
  ExitStatus Wait(std::chrono::milliseconds timeout = kEventually);  // SIGKILL after the timeout

 private:
  pid_t pid_ = -1;
  int from_child_ = -1, to_child_ = -1;
  std::string buffer_;
  bool eof_ = false;
  std::vector<std::string> skipped_;
  std::optional<ExitStatus> status_;
};

// The standard consumer: attaches, writes "attached <consumer_id>", optionally waits for a
// line from the parent ("go"), then one BatchInfo line per batch, and last "end" (kEndOfData),
// "timeout", "limit" (max_batches reached) or "error <ClientError text>".
struct ConsumerSpec {
  ClientOptions client;
  std::chrono::milliseconds next_timeout = kEventually;
  uint64_t max_batches = 0;  // 0: until the end of the data
  bool wait_for_go = false;
};
int RunConsumer(const ConsumerSpec& spec, ChildIo& io);

struct ConsumerReport {
  std::vector<BatchInfo> batches;
  std::string end;    // "end", "timeout", "limit", "error" or "" (the child died)
  std::string error;  // the text after "error "
  ExitStatus status;
};
// Reads the child's lines to EOF (from after any line already consumed) and waits for it.
ConsumerReport CollectConsumer(ChildProcess& child, std::chrono::milliseconds timeout = kEventually);
// Runs the standard consumer loop in this process.
ConsumerReport ConsumeInProcess(const ConsumerSpec& spec);

// One record with an int64 feature "id" = id, a varlen float32 "vals" of id % 5 values and a
// varlen bytes "tag" of id % 3 strings, so batches vary in size.
std::string IdRecord(int64_t id);
// Writes records with ids first_id .. first_id + count - 1 to `path`.
void WriteIdFile(const std::string& path, int64_t first_id, int64_t count,
                 Compression compression = Compression::kNone);
// The features: block (indented by two spaces under "features:") matching IdRecord.
std::string IdFeaturesYaml();
// A job config over IdRecord files: "job: <job>", source.files ["<files>"] (a path or glob), the
// IdFeaturesYaml features, then `extra` (whole YAML lines, e.g. "epochs: 0\n").
std::string IdJobConfig(const std::string& job, const std::string& files, const std::string& extra = "");

// first_id, first_id + 1, ..., first_id + count - 1: the ids WriteIdFile writes.
std::vector<int64_t> Iota(int64_t first_id, int64_t count);
// Every row's id across `batches`, sorted (which consumer or batch held it is dropped).
std::vector<int64_t> SortedIds(const std::vector<BatchInfo>& batches);
// Seconds (steady clock) since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start);

// "RINGFEED_SKIP: <why>" on stdout, or a failure with CI=true (as TfxDirOrSkip). The caller
// returns after it.
void SkipOrFail(const std::string& why);

}  // namespace ringfeed::testing
