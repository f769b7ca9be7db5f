#include "daemon/ringfeedd.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <grp.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <exception>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include <spdlog/fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/autotune.h"
#include "daemon/budget.h"
#include "daemon/consumer_registry.h"
#include "daemon/control_server.h"
#include "daemon/file_list.h"
#include "daemon/heartbeat.h"
#include "daemon/job_lock.h"
#include "daemon/log_format.h"
#include "daemon/pipeline.h"
#include "daemon/read_ahead.h"
#include "daemon/ring_setup.h"
#include "daemon/runtime_names.h"
#include "daemon/segment_guard.h"
#include "daemon/shard.h"
#include "daemon/status_report.h"
#include "daemon/systemd_notify.h"
#include "daemon/tuning_plan.h"
#include "format/example_parser.h"
#include "format/read_queue.h"
#include "format/utf8.h"
#include "shm/file_id.h"
#include "shm/names.h"
#include "shm/ring.h"
#include "shm/segment.h"

namespace ringfeed {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;


spdlog::level::level_enum SpdLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}


uint64_t RandomId() {
  uint64_t id = 0;
  if (::getrandom(&id, sizeof id, 0) != sizeof id) {
    id = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ (static_cast<uint64_t>(::getpid()) << 32);
  }
  return id;
}

// glibc malloc settings for the daemon's heap, which churns in blocks of 0.1-1 MiB: records of
// large-record files and read-ahead chunks (64 KiB), allocated on I/O threads and freed on
// parse workers, and the readers' 1 MiB windows as files open and close. With glibc's dynamic
// defaults, a block over the mmap threshold (128 KiB at first) is mmapped and munmapped, and a
// free that leaves more than twice that threshold unused at the top of a heap gives it back to
// the kernel (trim); either way the memory returns as fresh zero-filled pages, a page fault per
// 4 KiB. On 100 KB records that was 6-10% of the daemon's profile; with these settings (and
// records read straight into their allocation) the daemon's page faults halved, 32k -> 16k
// (docs/benchmarks.md, "End to end", session 4; its CPU moved within the noise). So: keep freed
// memory for reuse, and mmap only blocks of 1 MiB and more when the heap has no free block for
// them: the readers' windows (and a compressed file's input buffer), one per opened file, and
// records that large (a file of records over 1 MiB pays the mmap and its page faults per
// record again: not measured yet). In the heap,
// the windows came and went among the chunks and batches at every file's start and end and
// left holes the next window did not fit: private RSS crept up by 100-400 KiB/min in 5-minute
// soaks at 256 KiB of read-ahead per file; mmapped, it was flat within 60 KiB/min, for a few
// thousand more page faults (taxi, 30 epochs of 9 files: 2.8k -> 6.7-9.5k, throughput within
// the noise; docs/benchmarks.md, "Autotuning", session 9). Private RSS stays at the heap's high-water mark instead of following it down; the
// memory plan (daemon/budget.h) already bounds the peak, not the average.
//
// Arenas: glibc gives each thread that meets contention its own arena, and memory freed into
// one arena serves only the threads on it. Without a shuffle buffer (ReadAhead::UsesChunks),
// records travel in
// read-ahead chunks (one allocation per 64 KiB of records), and with 8 readers (a 20 ms mount) the
// readers' 8 arenas held 30 MiB of freed chunks: private RSS 63-65 MiB, 33-34 MiB with one arena
// at the same throughput (docs/benchmarks.md, "Autotuning", session 5). With a shuffle buffer
// every record is its own allocation (a malloc on a reader and a free on a worker per record),
// and one arena cost 8-18% of throughput there (lock contention), so those jobs keep glibc's
// default — unless the address space is limited (ulimit -v): each further arena reserves a
// 64 MiB heap of it, a thread whose arena could not be made has no heap to fall back on (its
// allocations fail while the main heap has room, also the handler's that reports them; see
// ArmOomReserve), and the mnist example needed 100-120 MB of address space with them, 80-90 MB
// with one. Called before any thread starts. A glibc.malloc setting in GLIBC_TUNABLES wins,
// so an operator can still choose.
constexpr int kMmapThresholdBytes = 1 << 20;
constexpr int kTrimThresholdBytes = 256 << 20;

void TuneMalloc(const JobConfig& config) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  auto tuned = [&](const char* name) { return tunables != nullptr && std::strstr(tunables, name) != nullptr; };
  if (!tuned("glibc.malloc.mmap_threshold")) ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  if (!tuned("glibc.malloc.trim_threshold")) ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
  rlimit address_space{};
  const bool limited = ::getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY;
  if (!tuned("glibc.malloc.arena_max") && (ReadAhead::UsesChunks(config.shuffle.buffer) || limited)) {
    ::mallopt(M_ARENA_MAX, 1);
  }
}

// Raises the soft open-file limit to the hard one (systemd starts services at 1024 soft; the
// unit sets LimitNOFILE=65536) and refuses a job that could still run out of descriptors
// (exit 2), with the arithmetic: out of them, the daemon could open neither its next data file
// nor a trainer's connection.
void CheckOpenFileLimit(const TuningPlan& plan) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      spdlog::debug("open-file limit (RLIMIT_NOFILE) raised from {} to its hard limit {}", limit.rlim_cur,
                    raised.rlim_cur);
      limit = raised;
    }
  }
  if (limit.rlim_cur == RLIM_INFINITY) return;
  // Descriptors open already beyond the plan's allowance for the daemon's own (a parent that
  // leaked hundreds into it) count too.
  FileDescriptorPlan fds = plan.file_descriptors;
  std::error_code ec;
  uint64_t open_now = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    ++open_now;
  }
  if (open_now > 0) --open_now;  // the iterator's own
  if (open_now > kOtherFileDescriptors) {
    const uint64_t inherited = open_now - kOtherFileDescriptors;
    fds.needed += inherited;
    fds.arithmetic += ", + " + std::to_string(inherited) + " more already open at start (inherited) = " +
                      std::to_string(fds.needed);
  }
  const std::string problem = OpenFileLimitProblem(fds, limit.rlim_cur, limit.rlim_max);
  if (!problem.empty()) throw StartupError(problem, 2);
}

// The --start-epoch and --start-batch notes: what is not produced, and that without determinism
// the resumed epoch's batches may differ from the run it resumes.
void LogStart(uint64_t start_epoch, uint64_t start_batch, bool deterministic) {
  if (start_epoch == 0 && start_batch == 0) return;
  if (start_epoch > 0) {
    spdlog::info("starting at epoch {} (--start-epoch): {} not produced", start_epoch,
                 start_epoch == 1 ? std::string("epoch 0 is")
                                  : "epochs 0 to " + std::to_string(start_epoch - 1) + " are");
  }
  if (start_batch > 0) {
    spdlog::info("starting at batch {} of epoch {} (--start-batch): {} read and dropped, not delivered", start_batch,
                 start_epoch,
                 start_batch == 1 ? std::string("batch 0 is")
                                  : "batches 0 to " + std::to_string(start_batch - 1) + " are");
  }
  if (!deterministic) {
    spdlog::warn("{} with deterministic: false: epoch {} has the same records, but maybe in other batches and another "
                 "order than in the run you resume{} (set deterministic: true for an exact resume)",
                 start_batch > 0 ? "--start-batch " + std::to_string(start_batch) : "--start-epoch " + std::to_string(start_epoch),
                 start_epoch, start_batch > 0 ? ", so the batches dropped are not those delivered before" : "");
  }
}

// Whether files can be read with several reads in flight (io_uring: ReadQueue::Available); when
// not, says so (a warning where the config asks for reads_per_file above 1).
bool QueuedReadsAvailable(const JobConfig& config) {
  std::string no_io_uring;
  if (ReadQueue::Available(&no_io_uring)) return true;
  if (config.pipeline.reads_per_file.value_or(1) > 1) {
    spdlog::warn("pipeline.reads_per_file {}: io_uring is not available here ({}); every file is read one read at a "
                 "time",
                 *config.pipeline.reads_per_file, no_io_uring);
  } else {
    spdlog::info("io_uring is not available here ({}): reads_per_file stays at 1 (one read at a time per file)",
                 no_io_uring);
  }
  return false;
}

// The start-up plan in the log: its memory summary and notes at info, its warnings, the whole
// plan at debug, and the CPU budget.
void LogPlan(const TuningPlan& plan) {
  // One line at info: the whole plan's caps ("16 readers", gigabytes of read-ahead) read as
  // alarming for a small job, though the tuner spends them only where they help.
  spdlog::info("{}", plan.memory.Summary());
  if (!plan.record_limit_why.empty()) spdlog::info("records are read up to {}", plan.record_limit_why);
  if (!plan.knob_caps.empty()) spdlog::info("{}", plan.knob_caps);
  if (!plan.shuffle_buffer_note.empty()) spdlog::info("{}", plan.shuffle_buffer_note);
  if (!plan.batch_size_note.empty()) spdlog::info("{}", plan.batch_size_note);
  if (!plan.memory_budget_warning.empty()) spdlog::warn("{}", plan.memory_budget_warning);
  if (!plan.cpu_budget_warning.empty()) spdlog::warn("{}", plan.cpu_budget_warning);
  if (!plan.batch_size_warning.empty()) spdlog::warn("{}", plan.batch_size_warning);
  if (!plan.slot_bytes_note.empty()) spdlog::warn("{}", plan.slot_bytes_note);
  if (!plan.ring_slots_warning.empty()) spdlog::warn("{}", plan.ring_slots_warning);
  spdlog::debug("{}", plan.memory.Describe());
  spdlog::info("memory_budget {} ({}): private RSS + the segment, the whole run",
               FormatBytes(plan.autotune.memory_budget_bytes), plan.autotune.memory_budget_source);
  spdlog::info("cpu_budget {} cores ({}): the CPU the daemon's threads may use together",
               plan.autotune.cpu_budget_cores, plan.autotune.cpu_budget_source);
}

// The pipeline's options: the order's inputs from the config (daemon/sequencer.h), the reader's,
// and the starting knobs and limits from the plan.
PipelineOptions PipelineOptionsFor(const JobConfig& config, const DaemonOptions& options,
                                   const std::vector<std::string>& files, uint32_t queues, const TuningPlan& plan) {
  PipelineOptions po;
  po.sequencer.files = files;
  po.sequencer.cycle_length = config.pipeline.cycle_length;
  po.sequencer.batch_size = config.batch.size;
  po.sequencer.drop_remainder = config.batch.drop_remainder;
  po.sequencer.shuffle_files = config.shuffle.files;
  po.sequencer.seed = config.shuffle.seed;
  po.sequencer.epochs = config.epochs;
  po.sequencer.first_epoch = options.start_epoch;
  po.sequencer.first_batch = options.start_batch;
  po.sequencer.queues = queues;
  po.sequencer.shard_index = config.shard.index;
  po.sequencer.shard_count = config.shard.count;
  po.sequencer.skip_errors = config.source.on_error == OnError::kSkip;
  // The buffer is shuffle.buffer whatever the records counted at start: an epoch that reads
  // more (files replaced or grown since) shuffles as a fresh start on those files would. The
  // plan counts at most the records counted; past its share, the budget is checked.
  po.sequencer.shuffle_buffer = config.shuffle.buffer;
  po.sequencer.shuffle_share_bytes = plan.memory.shuffle_bytes;
  po.sequencer.over_budget = [memory = plan.memory, segment = plan.geometry.segment_bytes,
                              buffer = config.shuffle.buffer](uint64_t records, uint64_t bytes, uint64_t largest) {
    return OverBudgetWarning(memory, MemoryInUse{PrivateRssBytes(), segment, records, bytes, largest}, buffer);
  };
  po.deterministic = config.deterministic;
  const TunerKnobs& start = plan.autotune.initial;
  po.readers = static_cast<size_t>(start.readers);
  po.workers = static_cast<size_t>(start.workers);
  po.prefetch = static_cast<size_t>(start.prefetch);
  po.stream_buffer_bytes = start.stream_buffer_bytes;
  po.reader.compression = config.source.compression;
  po.reader.reads_in_flight = static_cast<size_t>(start.reads_per_file);
  po.reader.hedged_reads = config.pipeline.hedged_reads;
  po.reader.buffer_bytes = static_cast<size_t>(plan.reader_buffer_bytes);
  po.reader.read_block_bytes = static_cast<size_t>(plan.read_block_bytes);
  // A record past the start-up sample that the budget cannot hold is a too-large record
  // (source.max_record_bytes, or less where the budget says so).
  po.reader.max_record_bytes = plan.record_limit_bytes;
  po.reader.max_record_bytes_why = plan.record_limit_why;
  po.reader.missing_file_note =
      " (it was listed when the job started, and the file list is fixed then: removed or renamed since?)";
  po.inflate_unplanned = !plan.inflate_planned;
  return po;
}

// Who may use the job's segment and socket: the daemon's user (0600), or with permissions.group
// that group too (0660). Throws StartupError (exit 2) for a group that does not exist or that the
// daemon's user may not give files to.
struct Access {
  mode_t mode = 0600;
  std::optional<gid_t> group;
};
Access AccessFor(const PermissionsConfig& permissions) {
  if (permissions.group.empty()) return {};
  const struct group* g = ::getgrnam(permissions.group.c_str());
  if (!g) throw StartupError(MissingGroupMessage(permissions), 2);
  const gid_t gid = g->gr_gid;
  // Only root, or a member, may give the segment and socket to the group (chown).
  if (::geteuid() != 0 && !shm::ProcessInGroup(gid)) {
    const std::string name = shm::UserName(::geteuid());
    if (shm::AccountInGroup(::geteuid(), gid)) {
      // Listed in the group, but added after this process's login session began.
      throw StartupError("permissions.group: ringfeedd runs as user '" + name + "', a member of group '" +
                             permissions.group + "' (gid " + std::to_string(gid) + "), but this process is not in "
                             "it (id -Gn): a process keeps the groups of the login session it started in, so start "
                             "it from a new login (or run newgrp " + permissions.group +
                             "; under systemd, restart the service), or choose another group",
                         2);
    }
    throw StartupError("permissions.group: ringfeedd runs as user '" + name + "', which is not a member of group '" +
                           permissions.group + "' (gid " + std::to_string(gid) + "): add the user to it (usermod -aG " +
                           permissions.group + " " + name + "), under systemd give it with SupplementaryGroups=" +
                           permissions.group + " in a drop-in, or choose another group",
                       2);
  }
  return {0660, gid};
}

// Why members of group `gid` (named `group`), not its owner, cannot reach a socket in
// `runtime_dir`: the first directory from it up to / that does not let them search it (the
// group's bits when the directory belongs to that group, else the others' bits); "" when none
// or when a directory cannot be stat'ed (the trainer's own error names it then).
std::string GroupReachProblem(const std::string& runtime_dir, gid_t gid, const std::string& group) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(runtime_dir, ec).lexically_normal();
  if (ec) return "";
  if (!dir.has_filename() && dir.has_parent_path() && dir != dir.root_path()) dir = dir.parent_path();
  for (;;) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return "";
    const bool group_bits = st.st_gid == gid;
    if (!(st.st_mode & (group_bits ? S_IXGRP : S_IXOTH))) {
      return "permissions.group " + group + ": its members cannot enter " + dir.string() + " (mode " +
             shm::ModeText(st.st_mode) +
             (group_bits ? ", group " + group
                         : ", group " + shm::GroupName(st.st_gid) + ", which they may not be in") +
             "), so trainers of that group cannot reach the socket made for them; let them through (chmod " +
             (group_bits ? "g+x " : "o+x ") + dir.string() + ") or use a runtime directory they can reach " +
             "(--runtime-dir, RINGFEED_RUNTIME_DIR)";
    }
    if (dir == dir.root_path() || !dir.has_parent_path()) return "";
    dir = dir.parent_path();
  }
}

// The job's segment, created (its space reserved), replacing a stale one of the name (said in a
// warning). A ring larger than all of /dev/shm needs an operator, as a config error does: exit
// 2, which the unit does not retry. Too little free space may pass (another job's segment, or
// one trainers still map after a crash), as may other errors: exit 1, retried.
shm::Segment CreateSegment(const std::string& name, uint64_t bytes, mode_t mode, std::optional<gid_t> group) {
  std::string replaced;
  shm::Segment segment = [&] {
    try {
      return shm::Segment::Create(name, bytes, mode, group, &replaced);
    } catch (const shm::SegmentNameTakenError& e) {
      throw StartupError(e.what(), 2);  // needs an operator: not retried
    } catch (const shm::ShmError& e) {
      const uint64_t total = shm::ShmTotalBytes();
      if (bytes > total) {
        throw StartupError(std::string(e.what()) + " (more than all of /dev/shm, " + shm::HumanBytes(total) +
                               ": not retried)",
                           2);
      }
      throw StartupError(e.what(), 1);
    }
  }();
  if (!replaced.empty()) {
    // The lock is this daemon's: most often the segment of a daemon of the job that was killed
    // (SIGKILL, OOM killer) or lost its power; rarely one that still runs, its lock file
    // removed under it before it could make it again.
    const bool alive = replaced.find("which still runs") != std::string::npos;
    spdlog::warn("replaced what was at {}: {}{}", shm::Segment::Path(name), replaced,
                 alive ? ": that daemon goes on serving the trainers attached to it, new ones reach this one; stop it "
                         "(see its log)"
                       : " (left by a daemon of this job that did not stop cleanly, or made by another process)");
  }
  return segment;
}

// --exit-when-done after a failure (`what` "the failure") or an end with no batch ("why"):
// what the daemon still waits for, as "a trainer of rank 1 has attached, taken its 2 ready
// batches and got the failure" (the ranks with batches ready or no trainer attached since the
// end: ConsumerRegistry::NotToldOfEnd); shared mode: "a trainer has taken the 3 ready batches
// and got the failure".
std::string FailedJobWaitsFor(bool ranks, uint64_t slots_ready, const std::vector<uint32_t>& ready_per_queue,
                              const std::vector<int>& untold, const std::string& what) {
  const auto batches = [](uint64_t n) { return n == 1 ? std::string("1 ready batch") : fmt::format("{} ready batches", n); };
  if (!ranks) {
    return slots_ready > 0 ? fmt::format("a trainer has taken the {} and got {}", batches(slots_ready), what)
                           : "a trainer has attached and got " + what;
  }
  std::vector<std::string> waits;
  for (size_t r = 0; r < ready_per_queue.size(); ++r) {
    const bool not_told = std::find(untold.begin(), untold.end(), static_cast<int>(r)) != untold.end();
    if (ready_per_queue[r] == 0 && !not_told) continue;
    waits.push_back(fmt::format("a trainer of rank {} has {}got {}", r,
                                ready_per_queue[r] > 0 ? "taken its " + batches(ready_per_queue[r]) + " and "
                                                       : std::string(not_told ? "attached and " : ""),
                                what));
  }
  return fmt::format("{}", fmt::join(waits, ", and "));
}

// Runs `work` on a thread of its own, the stop signals blocked there, and waits for it: a stop
// during start-up (ArmEarlyStop's handler, which ends the process) then runs on this thread at
// once, also while `work` waits for storage that does not answer. A thread blocked in such a
// read runs a handler only when the read returns, and the kernel may split one read into
// several requests that each wait (a FUSE mount: 60 s for a 1 MiB read at 30 s a request); the
// handler's _exit ends it with the process. Returns what `work` returns and rethrows what it
// throws; where no thread can start (a pids limit), runs it here.
template <typename Work>
auto AwayFromStopSignals(Work&& work) -> decltype(work()) {
  std::optional<decltype(work())> result;
  std::exception_ptr error;
  sigset_t stops, old;
  sigemptyset(&stops);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, signal);
  pthread_sigmask(SIG_BLOCK, &stops, &old);
  std::thread thread;
  try {
    thread = std::thread([&] {
      try {
        result.emplace(work());
      } catch (...) {
        error = std::current_exception();
      }
    });
  } catch (const std::system_error&) {
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!thread.joinable()) return work();
  thread.join();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace

void ArmStartupStop() { ArmEarlyStop(); }

int RunDaemon(const DaemonOptions& options) {
  // A reader of stderr that goes away (`ringfeedd ... | head`, a FIFO, a closed terminal's
  // pipe) must not end a data loader: with SIGPIPE ignored a log write fails with EPIPE, which
  // spdlog drops, and the daemon goes on.
  ::signal(SIGPIPE, SIG_IGN);
  auto logger = spdlog::stderr_color_mt("ringfeedd");
  // Under systemd the journal adds its own timestamps. Control characters in a message (a file
  // name with a newline) are escaped: daemon/log_format.h.
  SetLogPattern(*logger, std::getenv("JOURNAL_STREAM") != nullptr);
  spdlog::set_default_logger(logger);
  // Armed in main already (ArmStartupStop); again for a RunDaemon called without it. A stop
  // while the config is read (a FIFO not written yet) ends it the same way.
  ArmEarlyStop();

  JobConfig config;
  try {
    config = LoadJobConfig(options.config_path);
  } catch (const ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  {
    std::error_code ec;  // the log and status name the config by a path that works anywhere
    const std::filesystem::path absolute = std::filesystem::absolute(config.path, ec);
    if (!ec) config.path = absolute.string();
  }
  TuneMalloc(config);
  ArmOomReserve();  // after TuneMalloc: the reserve's blocks come from the heap it configured
  spdlog::set_level(SpdLevel(config.log_level));
  if (!options.log_level.empty()) spdlog::set_level(spdlog::level::from_str(options.log_level));
  if (config.epochs != 0 && options.start_epoch >= static_cast<uint64_t>(config.epochs)) {
    spdlog::error("--start-epoch {}: {} runs epochs: {} (epochs 0 to {}, counted from 0 as the batches' epoch "
                  "field)",
                  options.start_epoch, config.path, config.epochs, config.epochs - 1);
    return 2;
  }
  if (const auto ranks = static_cast<uint64_t>(config.consumers.count);
      config.consumers.mode == DeliveryMode::kRanks && options.start_batch % ranks != 0) {
    // The two nearest multiples (the upper one only where --start-batch takes it).
    const uint64_t below = options.start_batch / ranks * ranks, above = below + ranks;
    spdlog::error("--start-batch {}: {} delivers to {} ranks (consumers.mode: ranks), batch k to rank k mod {}, and "
                  "every rank takes one batch per step: give the steps taken in the epoch times {} ({})",
                  options.start_batch, config.path, ranks, ranks, ranks,
                  above <= kMaxStartBatch ? fmt::format("{} or {}", below, above) : std::to_string(below));
    return 2;
  }

  SystemdNotifier notifier;
  try {
    // 1. Runtime directory and lock.
    std::string runtime_dir = options.runtime_dir.empty() ? shm::RuntimeDir() : options.runtime_dir;
    while (runtime_dir.size() > 1 && runtime_dir.back() == '/') runtime_dir.pop_back();  // no "dir//job.sock"
    // A relative one made absolute, so that the status, the log and the messages name a socket
    // path that holds from any directory (the segment's name comes from the absolute path
    // anyway: shm::SegmentName); kept relative where the working directory cannot be named or
    // the absolute socket path would be longer than a Unix socket allows.
    if (!runtime_dir.empty() && runtime_dir.front() != '/') {
      std::error_code ec;
      const std::string absolute = std::filesystem::absolute(runtime_dir, ec).lexically_normal().string();
      if (!ec && shm::SocketPath(absolute, config.job).size() < sizeof(sockaddr_un{}.sun_path)) {
        runtime_dir = absolute;
        while (runtime_dir.size() > 1 && runtime_dir.back() == '/') runtime_dir.pop_back();
      }
    }
    const std::string socket_path = shm::SocketPath(runtime_dir, config.job);
    if (socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      throw StartupError("control socket path " + socket_path + " is " + std::to_string(socket_path.size()) +
                             " bytes, longer than a Unix socket allows (" +
                             std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
                             "); use a shorter runtime directory (--runtime-dir, RINGFEED_RUNTIME_DIR) or job name",
                         2);
    }
    MakeRuntimeDir(runtime_dir);
    // A daemon of the job still answering at its socket though its lock file is gone: refused
    // before a lock file is made, which that daemon's check of its names (once a second) could
    // take for a second daemon's.
    if (struct stat st {}; ::lstat((runtime_dir + "/" + config.job + ".lock").c_str(), &st) != 0 && errno == ENOENT) {
      RefuseIfSocketServed(socket_path, config.job, runtime_dir, runtime_dir + "/" + config.job + ".lock");
    }
    LockFile lock(runtime_dir, config.job);  // arms the start-up stop (ArmEarlyStop) with the lock file
    // The socket's name: a socket there is a killed daemon's, replaced below; anything else needs
    // an operator (exit 2: no restart moves it), said before the files are read and the ring made.
    if (struct stat st {}; ::lstat(socket_path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
      const char* what = S_ISDIR(st.st_mode) ? "a directory" : S_ISREG(st.st_mode) ? "a regular file"
                         : S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO" : "not a socket";
      throw StartupError("control socket " + socket_path + ": that path is " + what + " (uid " +
                             std::to_string(st.st_uid) + "), where ringfeedd puts its socket; remove it, or use "
                             "another runtime directory",
                         2);
    }
    // Checked again now that the lock is this daemon's: a lock file removed just before.
    RefuseIfSocketServed(socket_path, config.job, runtime_dir, lock.path());

    // 2. Files, parser, geometry.
    std::vector<std::string> files;
    try {
      files = AwayFromStopSignals(
          [&] { return ExpandFiles(config.source.files, config.source.file_origins, config.source.files_as_written); });
    } catch (const std::exception& e) {
      throw StartupError(e.what(), 2);
    }
    if (std::any_of(files.begin(), files.end(), [](const std::string& f) { return !f.starts_with('/'); })) {
      std::error_code ec;
      static_cast<void>(std::filesystem::current_path(ec));  // what made ExpandFiles keep them relative
      spdlog::warn("ringfeedd's working directory cannot be named ({}): source.files paths stay relative to it, and "
                   "status --files and the client's files() show them so (a trainer elsewhere cannot open them); "
                   "give source.files absolute paths",
                   ec ? ec.message() : "unknown reason");
    }
    ExampleParser parser(config.features);
    const bool ranks = config.consumers.mode == DeliveryMode::kRanks;
    const uint32_t queues = ranks ? static_cast<uint32_t>(config.consumers.count) : 1;

    LogStart(options.start_epoch, options.start_batch, config.deterministic);

    const Shard shard = Shard::For(files.size(), config.shard.count, config.shard.index);
    const std::vector<uint32_t> shard_files = shard.Files(files.size());
    // Sampling reads the files' first records (all of small files): seconds on slow storage,
    // while nothing else is logged and `ringfeedctl status` finds no socket yet.
    spdlog::info("starting job '{}' (pid {}): sampling the first records of its {} file{} to size the ring and plan "
                 "the memory budget",
                 config.job, ::getpid(), shard_files.size(), shard_files.size() == 1 ? "" : "s");
    notifier.Status("starting: sampling records");
    const RecordSample sample = AwayFromStopSignals([&] { return SampleRecords(config, parser, files, shard_files); });
    // As ringfeedctl check says them: a misspelt VarLen name otherwise gives empty rows, silently.
    for (const std::string& warning : sample.warnings) spdlog::warn("{}", warning);
    // A dtype that does not match the data showed only once the daemon was up, as the job's
    // failure (on_error: skip: every record skipped): when no sampled record parses, the
    // config is wrong, and ringfeedd says so before it takes the job's names.
    bool unparsable = false;
    if (const std::string problem = SampleParseProblem(config, sample, &unparsable); unparsable) {
      throw StartupError(problem, 2);
    } else if (!problem.empty()) {
      spdlog::warn("{}", problem);
    }
    const bool queued_reads = QueuedReadsAvailable(config);
    TuningPlan plan;
    try {
      plan = PlanTuning(config, sample, static_cast<int64_t>(shard_files.size()), queues, PrivateRssBytes(),
                        queued_reads);
    } catch (const BudgetError& e) {
      throw StartupError(e.what(), 2);
    }
    CheckOpenFileLimit(plan);
    LogPlan(plan);
    // Whether a read can be hedged at all in this run: queued reads (io_uring, reads_per_file
    // above 1 or auto) and not switched off. Status says "off" otherwise.
    const bool hedging = config.pipeline.hedged_reads && queued_reads && plan.autotune.limits.max_reads_per_file > 1;
    const PipelineOptions po = PipelineOptionsFor(config, options, files, queues, plan);
    const uint32_t slot_count = plan.slot_count;
    const uint64_t slot_bytes = plan.slot_bytes;
    const shm::Geometry geometry = plan.geometry;

    // 3. Segment.
    const auto [mode, group] = AccessFor(config.permissions);
    if (group) {
      if (const std::string problem = GroupReachProblem(runtime_dir, *group, config.permissions.group);
          !problem.empty()) {
        spdlog::warn("{}", problem);
      }
    }
    // From here the stop signals (SIGINT, SIGTERM, SIGHUP) and the ones ringfeedd ignores with a
    // warning (SIGUSR1, SIGUSR2, SIGALRM: their default action would end it without cleaning up)
    // wait (blocked) until their handlers are in place: a stop
    // while the ring is reserved (`systemctl stop` during the start of a large ring) then
    // stops cleanly once start-up is done and the segment is removed, where the default action
    // left it in /dev/shm. Before this point only the lock file needs cleaning up, and a stop
    // during a slow file listing or sampling ends the process at once (ArmEarlyStop). Every thread started from here
    // inherits the mask, so the signals reach this thread alone, which unblocks them once
    // asio's signal_set listens and start-up is done. (Not restored on a start-up error:
    // ringfeedd exits then.)
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM}) sigaddset(&stop_signals, s);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    const std::string segment_name = shm::SegmentName(runtime_dir, config.job);
    // Listing and sampling the files may have taken minutes: before the job's segment and socket
    // are taken, the lock must still be this daemon's, and no daemon must have taken the job.
    TakeJobNamesCheck(lock, socket_path, config.job, runtime_dir);
    notifier.Status("starting: reserving the ring (" + shm::HumanBytes(geometry.segment_bytes) + ")");
    shm::Segment segment = CreateSegment(segment_name, geometry.segment_bytes, mode, group);
    // Every way out removes the segment's name, unless it names another file by then.
    struct SegmentRemover {
      std::string path;
      shm::FileId id;
      ~SegmentRemover() { shm::UnlinkIfSame(path.c_str(), id); }
    } remover{shm::Segment::Path(segment_name), segment.file_id()};
    // A segment truncated under the daemon (by a process that may write it) ends it with a
    // message instead of a silent SIGBUS.
    SegmentGuard segment_guard(segment.data(), segment.size(), segment_name, segment.file_id(), socket_path,
                               lock.path(), lock.id());
    shm::Superblock* sb = segment.superblock();
    const uint64_t instance_id = RandomId();
    RingSetup setup;
    setup.job = config.job;
    setup.instance_id = instance_id;
    setup.geometry = geometry;
    setup.slot_count = slot_count;
    setup.slot_bytes = slot_bytes;
    setup.batch_size = static_cast<uint32_t>(config.batch.size);
    setup.ranks = ranks;
    setup.queue_count = queues;
    setup.heartbeat_period_ns = std::chrono::nanoseconds(HeartbeatThread::kPeriod).count();
    try {
      WriteSuperblock(setup, parser.specs(), sb);
    } catch (const std::invalid_argument& e) {
      throw StartupError(e.what(), 2);
    }
    const shm::Ring ring = DaemonRing(setup, segment.data());
    // The superblock as written, from the same inputs into private memory (not read back from
    // the segment, which another process may already have mapped): what RepairRing puts back.
    auto superblock_image = std::make_shared<shm::Superblock>();
    WriteSuperblock(setup, parser.specs(), superblock_image.get());
    spdlog::info("job '{}': {} file{} ({} in this shard), {} feature{}, batch.size {}, ring {} slots x {} + {} "
                 "superblock = {} ({})",
                 config.job, files.size(), files.size() == 1 ? "" : "s", shard_files.size(), parser.specs().size(),
                 parser.specs().size() == 1 ? "" : "s", config.batch.size, slot_count, shm::HumanBytes(slot_bytes),
                 shm::HumanBytes(geometry.slots_offset), shm::HumanBytes(geometry.segment_bytes), segment_name);
    if (shard.count > 1) spdlog::info("{}", shard.Describe(files.size()));

    // 4. Control socket, pipeline, heartbeat.
    asio::io_context io;
    ConsumerRegistry consumers(ring, ranks ? queues : 0);
    // When every slot is held: who holds them and what to do (shm::AllHeldAdvice), the consumers
    // named from the daemon's own records (any process mapping the segment can write its table).
    const std::function<std::string()> all_held_advice = [&] {
      const std::vector<ConsumerRegistry::Info> attached = consumers.List();
      const auto name = [&](uint32_t id) {
        for (const ConsumerRegistry::Info& c : attached) {
          if (c.id == id) {
            return "consumer " + std::to_string(id) + " (pid " + std::to_string(c.pid) +
                   (c.rank >= 0 ? ", rank " + std::to_string(c.rank) : std::string()) + ")";
          }
        }
        return "consumer " + std::to_string(id) + " (not attached)";
      };
      const auto needing = static_cast<uint32_t>(std::max<size_t>(attached.size(), ranks ? queues : 0));
      return shm::AllHeldAdvice(shm::HeldPerConsumer(ring), name, needing, slot_count);
    };
    const auto started = Clock::now();
    RateWindow window(started);
    std::atomic<bool> done_producing{false};
    std::atomic<int> exit_status{0};

    std::unique_ptr<Pipeline> pipeline;
    std::unique_ptr<Autotune> autotune;
    // RuntimeNames::Problems as of its last check (below; on the io thread, as status is).
    std::vector<std::string> name_problems;
    const JobStatusFacts status_facts{.job = config.job,
                                      .config_path = config.path,
                                      .socket_path = socket_path,
                                      .instance_id = instance_id,
                                      .started = started,
                                      .deterministic = config.deterministic,
                                      .epochs = config.epochs,
                                      .start_epoch = options.start_epoch,
                                      .start_batch = options.start_batch,
                                      .files_total = files.size(),
                                      .files_in_shard = shard_files.size(),
                                      .shard = shard,
                                      .ranks = ranks,
                                      .slot_count = slot_count,
                                      .slot_bytes = slot_bytes,
                                      .segment_bytes = geometry.segment_bytes,
                                      .cycle_length = config.pipeline.cycle_length,
                                      .hedging = hedging,
                                      .memory_budget_bytes = plan.autotune.memory_budget_bytes,
                                      .memory_budget_source = plan.autotune.memory_budget_source,
                                      .memory = plan.memory,
                                      .shuffle_buffer = config.shuffle.buffer,
                                      .batch_size = config.batch.size,
                                      .drop_remainder = config.batch.drop_remainder,
                                      .shuffle_files = config.shuffle.files,
                                      .shuffle_seed = config.shuffle.seed,
                                      .on_error = config.source.on_error == OnError::kSkip ? "skip" : "fail",
                                      .compression = std::string(CompressionName(config.source.compression))};
    const std::function<nlohmann::json()> autotune_status = [&] {
      return autotune ? autotune->StatusJson() : nlohmann::json(nullptr);
    };
    auto status_json = [&]() {
      const PipelineStats s = pipeline->Snapshot();
      return StatusJson(status_facts, {.stats = s,
                                       .at = Clock::now(),
                                       .ended_at = pipeline->ended_at(),
                                       .window = window,
                                       .consumers = consumers,
                                       .all_held_advice = all_held_advice,
                                       .autotune = autotune_status,
                                       .problems = name_problems,
                                       .private_rss_bytes = PrivateRssBytes(),
                                       .io_waiting = pipeline->IoWaiting(std::chrono::seconds(1))});
    };

    ControlServer::Handlers handlers;
    handlers.attach = [&](pid_t pid, std::optional<int> rank, std::string* error, bool* retry) {
      const std::optional<uint32_t> id = consumers.Attach(pid, rank, error, retry);
      if (id && pipeline) {
        // The trainer will get no batch (its client says so too, but a C++ loop may not look).
        const PipelineStats s = pipeline->Snapshot();
        if (s.end == PipelineEnd::kEndOfData && s.slots_ready == 0) {
          if (s.batches == 0 && !s.end_message.empty()) {  // the epoch's cause (Sequencer::empty_epoch)
            spdlog::warn("consumer {} (pid {}) attached after the end of the data, and the job produced no batch "
                         "at all: {}", *id, pid, s.end_message);
          } else if (s.batches == 0) {
            spdlog::warn("consumer {} (pid {}) attached after the end of the data, and the job produced no batch "
                         "at all ({} records and {} read errors skipped)", *id, pid, s.parse_errors_skipped,
                         s.read_errors_skipped);
          } else {
            spdlog::warn("consumer {} (pid {}) attached after the end of the data: every epoch was produced and "
                         "taken, so it gets no batch; restart ringfeedd for another pass, or give the job epochs: 0 "
                         "(endless)", *id, pid);
          }
        }
      }
      return id;
    };
    handlers.detach = [&](uint32_t id, pid_t pid) {
      // The pipeline records its end before it writes the end state that consumers act on, and
      // calls on_end after: a consumer that saw the end of the data and left at once may get
      // here in between.
      const PipelineEnd end = pipeline ? pipeline->Snapshot().end : PipelineEnd::kRunning;
      if (end != PipelineEnd::kRunning) consumers.SetProductionEnded(end == PipelineEnd::kEndOfData);
      consumers.Detach(id, pid);
    };
    handlers.request = [&](const nlohmann::json& request) -> nlohmann::json {
      const std::string type = request.value("type", "");
      if (type == "status") return status_json();
      if (type == "files") return FilesPage(files, request);
      // Quoted as JSON and cut: the type is the client's text (control characters, any length);
      // cut at a character boundary, or the dump would turn the part of a character into U+FFFD.
      const std::string quoted = nlohmann::json(type.substr(0, Utf8Prefix(type, 64)))
                                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return {{"type", "error"},
              {"message", "unknown request " + quoted + (type.size() > 64 ? "..." : "") + " (status, files)"}};
    };
    // Reserving a large ring takes a while too.
    TakeJobNamesCheck(lock, socket_path, config.job, runtime_dir, remover.path, remover.id);
    segment_guard.LockFileIs(lock.id());
    ControlServer server(io, socket_path, mode, group,
                         {config.job, segment_name, instance_id}, std::move(handlers));
    segment_guard.SocketBound(server.socket_id());

    // The job's failure, for the last line of the log (written by the pipeline's thread, read
    // after pipeline->Join()).
    std::string failure;
    pipeline = std::make_unique<Pipeline>(po, parser, ring, [&](PipelineEnd end, const std::string& message) {
      consumers.SetProductionEnded(end == PipelineEnd::kEndOfData);
      if (end == PipelineEnd::kEndOfData) {
        if (message.empty()) {
          spdlog::info("all epochs produced (end of data): {}", ProgressLogText(status_facts, pipeline->Snapshot()));
        } else {
          spdlog::warn("end of data: {}", message);
        }
      }
      if (end == PipelineEnd::kFailed) {
        spdlog::error("stopped producing: {}", message);
        failure = message;
        exit_status = 1;
      }
      done_producing = true;
    });

    HeartbeatThread heartbeat(ring, *pipeline, notifier, window, status_facts, all_held_advice);

    // SIGHUP (the terminal of a daemon started from a shell went away) stops it like SIGTERM,
    // cleanly: the default action left socket, lock and segment behind.
    asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
    std::string stop_reason;
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      lock.MarkStopping();  // first: a start from now on waits for this daemon to go
      stop_reason = std::string("ringfeedd stopped by SIG") + sigabbrev_np(signal);
      spdlog::info("{}: stopping at {}", stop_reason, ProgressLogText(status_facts, pipeline->Snapshot()));
      // What consumers are told (the superblock's error): what to do next.
      stop_reason += "; restart it and attach again (ringfeedd --start-epoch E --start-batch K starts at batch K "
                     "of epoch E, 0-based: the one after the last this trainer took; docs/operations.md, Restarts, "
                     "checkpoints and resuming)";
      io.stop();
    });
    asio::signal_set ignored_signals(io, SIGUSR1, SIGUSR2, SIGALRM);
    std::function<void()> ignore_next = [&] {
      ignored_signals.async_wait([&](const boost::system::error_code& ec, int signal) {
        if (ec) return;
        spdlog::warn("ignored SIG{}: ringfeedd stops on SIGTERM, SIGINT or SIGHUP and has no other signal actions",
                     sigabbrev_np(signal));
        ignore_next();
      });
    };
    ignore_next();
    // Destroyed before the signal_sets (declared after them), on every way out: the stop
    // signals are blocked again before asio gives them back their default action, which would
    // end the process mid-cleanup with the segment left in /dev/shm (a SIGTERM while a failed
    // start unwinds, or during the stop).
    struct StopSignalsBlockedAgain {
      const sigset_t& set;
      ~StopSignalsBlockedAgain() { pthread_sigmask(SIG_BLOCK, &set, nullptr); }
    } stop_signals_blocked_again{stop_signals};
    // --exit-when-done: poll for "produced everything and every batch was released".
    asio::steady_timer done_timer(io);
    std::optional<std::chrono::steady_clock::time_point> failed_wait_since;  // a failed job's wait to exit
    bool failed_wait_logged = false;
    std::function<void()> check_done = [&] {
      done_timer.expires_after(std::chrono::milliseconds(100));
      done_timer.async_wait([&](const boost::system::error_code& ec) {
        if (ec) return;
        if (done_producing.load()) {
          const PipelineStats s = pipeline->Snapshot();
          // A failed job too waits for its batches before the failure to be taken, and for
          // a consumer of every rank (shared mode: one consumer) to have been attached at the
          // failure or since (it reads the failure from the segment): a trainer starting
          // after the failure gets the error, not "cannot connect". Batches still held then
          // need no daemon (their mapping outlives it): a trainer that got the error may keep
          // its last one as long as it likes.
          // So does a job whose data gave no batch at all (fewer records than batch.size with
          // drop_remainder, every record skipped): the reason, in the segment, is all a trainer
          // can get.
          const bool failed = s.end == PipelineEnd::kFailed;
          const bool no_batch = s.end == PipelineEnd::kEndOfData && s.batches == 0;
          const std::vector<int> untold = failed || no_batch ? consumers.NotToldOfEnd() : std::vector<int>{};
          if (failed || no_batch ? s.slots_ready == 0 && untold.empty() : s.slots_ready == 0 && s.slots_held == 0) {
            stop_reason = failed     ? "ringfeedd exited: the job failed; every batch before the failure was delivered"
                          : no_batch ? "ringfeedd exited: the data gave no batch, and a trainer was told why"
                                     : "ringfeedd exited: all batches delivered";
            io.stop();
            return;
          }
          // Said once, after a while (the trainers may be starting now): whom such a job waits for.
          const auto now = std::chrono::steady_clock::now();
          if ((failed || no_batch) && !failed_wait_since) failed_wait_since = now;
          if ((failed || no_batch) && !failed_wait_logged &&
              now - *failed_wait_since >= ConsumerRegistry::kRankStallWarning) {
            failed_wait_logged = true;
            spdlog::warn("--exit-when-done: {}; ringfeedd exits once {}; stop it (SIGTERM) to exit now",
                         failed ? "the job failed" : "the data gave no batch",
                         FailedJobWaitsFor(ranks, s.slots_ready, s.ready_per_queue, untold,
                                           failed ? "the failure" : "why"));
          }
        }
        check_done();
      });
    };
    if (options.exit_when_done) check_done();
    // The names this daemon created, checked once a second (reap, below) and at the stop; the
    // stop removes only those that still name this daemon's files.
    // A removed lock file or socket is made again while this daemon holds the job's lock.
    const auto remake_lock = [&](std::string* why) {
      try {
        MakeRuntimeDir(runtime_dir);
        if (!lock.Reassert(/*running=*/true)) return shm::FileId{};  // another process holds it: Check says who
      } catch (const std::exception& e) {
        *why = std::string("could not make it again: ") + e.what();
        return shm::FileId{};
      }
      segment_guard.LockFileIs(lock.id());
      return lock.id();
    };
    shm::FileId asked_socket;  // the socket at the path last asked whether anyone listens on it
    const auto remake_socket = [&](std::string* why) {
      if (!remake_lock(why).valid()) {  // the directory and the lock first
        if (why->empty()) *why = "not made again: another process holds the job's lock " + lock.path() + " now";
        return shm::FileId{};
      }
      try {
        // A socket nobody listens on (this daemon's own, moved away and back after it made a new
        // one) is replaced, as at start; anything else there is not this daemon's to remove.
        // Asked once per file: each ask is a connection the listener sees.
        if (struct stat st {}; ::lstat(server.socket_path().c_str(), &st) == 0) {
          if (!S_ISSOCK(st.st_mode) || shm::FileId::Of(st) == asked_socket) return shm::FileId{};
          asked_socket = shm::FileId::Of(st);
          if (!shm::NobodyListens(server.socket_path())) return shm::FileId{};
          ::unlink(server.socket_path().c_str());
        }
        server.Rebind();
      } catch (const std::exception& e) {
        *why = std::string("could not make it again: ") + e.what();
        return shm::FileId{};
      }
      segment_guard.SocketBound(server.socket_id());
      return server.socket_id();
    };
    RuntimeNames names(config.job, runtime_dir, {shm::Segment::Path(segment_name), segment.file_id()},
                       {server.socket_path(), server.socket_id()}, {lock.path(), lock.id()}, remake_socket,
                       remake_lock);
    // Consumers whose process died while a forked child keeps their connection open.
    asio::steady_timer reap_timer(io);
    uint64_t logged_epoch = status_facts.start_epoch;  // the epoch the last "began" line named
    auto epoch_logged_at = status_facts.started;  // when it was logged (the start before)
    auto next_epoch_log = std::chrono::steady_clock::now();
    std::function<void()> reap = [&] {
      reap_timer.expires_after(std::chrono::seconds(1));
      reap_timer.async_wait([&](const boost::system::error_code& ec) {
        if (ec) return;
        names.Check();
        name_problems = names.Problems();
        if (const std::optional<std::string> was = lock.RestoreContent()) {
          spdlog::warn("the lock file {} was written by another program while ringfeedd runs (it said {}): wrote "
                       "this daemon's pid to it again; find what writes files there",
                       lock.path(),
                       nlohmann::json(*was).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        }
        consumers.ReapDead();
        // On this thread, as attaches: a consumer attached during the scan can't be missed.
        pipeline->RepairRing([&](uint32_t id) { return consumers.RankIfAttached(id); });
        const PipelineStats s = pipeline->Snapshot();
        if (ranks) consumers.WatchRanks(s.ready_per_queue);
        // An epoch begun: logged at most once a minute (a small data set's epochs may take
        // milliseconds), the epochs begun since the last line counted.
        if (const auto now = std::chrono::steady_clock::now();
            s.end == PipelineEnd::kRunning && s.epoch != logged_epoch && now >= next_epoch_log) {
          const uint64_t begun = s.epoch - logged_epoch;
          spdlog::info("{} began in the last {}; now at {}",
                       begun == 1 ? std::string("1 epoch") : fmt::format("{} epochs", begun),
                       fmt::format("{:.1f} s", std::chrono::duration<double>(now - epoch_logged_at).count()),
                       ProgressLogText(status_facts, s));
          logged_epoch = s.epoch;
          epoch_logged_at = now;
          next_epoch_log = now + std::chrono::minutes(1);
        }
        reap();
      });
    };
    reap();

    pipeline->Start();
    pipeline->SetSuperblockImage(superblock_image);
    if (plan.tune) {
      autotune = std::make_unique<Autotune>(plan.autotune, *pipeline, ring, consumers);
      autotune->Start();
    }
    notifier.Ready();
    spdlog::info("ready: socket {}, mode {:04o} ({}); starting at epoch {} of {} (0-based {}), batch {}",
                 server.socket_path(), mode,
                 group ? "the daemon's user and group " + config.permissions.group : std::string("the daemon's user only"),
                 status_facts.start_epoch + 1,
                 status_facts.epochs == 0 ? std::string("unlimited") : std::to_string(status_facts.epochs),
                 status_facts.start_epoch, status_facts.start_batch);
    // Only now, after every thread of the pipeline and the tuner has started (they inherit the
    // blocked mask, as do the threads they start later): the stop signals reach this thread
    // alone, and a stop requested during start-up arrives now.
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    io.run();

    // Stop: nothing is accepted from here on (io.run has returned); consumers see kStopped with
    // the reason (unless production already ended).
    server.StopListening();
    notifier.Stopping();
    lock.MarkStopping();
    names.Check(/*remake=*/false);  // a change since the last tick is logged too
    pipeline->RequestStop(stop_reason);
    // A thread blocked in a read of storage that does not answer (a hung network mount) would
    // hold the stop until systemd's SIGKILL (TimeoutStopSec=30s in the shipped unit) and leave
    // the segment behind: after kStopGrace ringfeedd names the calls and exits without them.
    std::vector<std::string> in_io;
    if (!pipeline->WaitForIo(kStopGrace, &in_io)) {
      pipeline->Abandon(stop_reason);
      const std::string removed = names.Removal();
      shm::UnlinkIfSame(server.socket_path().c_str(), server.socket_id());
      shm::UnlinkIfSame(remover.path.c_str(), remover.id);
      lock.Unlink();
      spdlog::error("stopping: still blocked {} s after the stop in {}: the storage does not answer; exiting without "
                    "waiting for it ({})",
                    std::chrono::duration_cast<std::chrono::seconds>(kStopGrace).count(), fmt::join(in_io, "; "),
                    removed);
      spdlog::shutdown();
      std::_Exit(1);
    }
    if (autotune) autotune->Stop();  // after WaitForIo: a change of readers joins I/O threads
    pipeline->Join();
    heartbeat.Stop();
    spdlog::info("stopped: {}", names.Removal());
    // The last line says why the exit status is 1 (what `journalctl -n` shows after a stop).
    if (!failure.empty()) spdlog::error("exit status 1: the job had failed: {}", failure);
    return exit_status.load();
  } catch (const StartupError& e) {
    spdlog::error("{}", e.what());
    return e.status();
  } catch (const shm::ShmError& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::system_error& e) {
    // std::thread's only failure: no thread could be made.
    const bool thread = e.code() == std::errc::resource_unavailable_try_again;
    spdlog::error("{}", thread ? ThreadStartFailure(e) : std::string(e.what()));
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace ringfeed
