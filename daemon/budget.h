// Budgets: how much CPU and memory a ringfeedd job may use (issue 4 §2, docs/config.md
// `pipeline.cpu_budget`, `pipeline.memory_budget`), as arithmetic the daemon and the autotuner
// (daemon/tuner.h) share. Nothing here starts threads or allocates buffers; it only reads /proc
// and /sys/fs/cgroup and adds numbers.
//
// CPU (DetectCpuBudget): cores = min(CPUs in this thread's sched_getaffinity mask, cgroup CPU
// quota). Loaders run in containers, where the quota (docker --cpus, Kubernetes limits.cpu) is
// usually far below the machine's CPU count. The quota is the smallest one on the path from the
// process's cgroup up to the hierarchy's root (a parent's quota caps its children):
//   cgroup v2: `0::<path>` in /proc/self/cgroup, files `cpu.max` ("<quota> <period>", quota
//              "max" = none), under /sys/fs/cgroup (pure v2) or /sys/fs/cgroup/unified (hybrid).
//   cgroup v1: the `cpu` controller's line (`N:cpu:<path>` or `N:cpu,cpuacct:<path>`), files
//              `cpu.cfs_quota_us` / `cpu.cfs_period_us` (quota -1 = none).
// Both are read when both exist (hybrid hierarchies) and the smaller quota wins. A cgroup path
// that does not exist under the mount (a container that mounts its own cgroup as the root
// without a cgroup namespace) is read at the mount's root instead. A missing or unreadable file
// means "no limit at that level", never an error. cpusets need no cgroup reading: the kernel
// already narrows the affinity mask to them.
//
// Memory (DefaultMemoryBudget): pipeline.memory_budget's default is
//   min(2 GiB, 1/4 of the memory limit), limit = min(cgroup memory limit, MemTotal),
// cgroup v2 `memory.max` ("max" = none) and v1 `memory.limit_in_bytes` (values of 2^62 and more,
// the kernel's "unlimited" 0x7ffffffffffff000, = none), walked up like the CPU quota. Why: the
// trainer processes on the same node (model, optimizer state, their own copies of batches)
// need most of the memory; 1/4 leaves them 3/4 and a loader that needs more than 2 GiB for one
// job is unusual enough to ask for it explicitly. tf.data's autotune ram_budget defaults to
// half of the RAM, but tf.data runs inside the trainer, not beside it. The segment in /dev/shm
// is charged to the daemon's memory cgroup, so it counts against the same limit.
//
// Memory plan (PlanMemory): the budget is a hard cap for the daemon's private RSS plus its
// segment size. The fixed parts (ring segment, the daemon before the pipeline, per-open-file
// reader buffers, shuffle buffer, batches in flight, parse workers' scratch, thread stacks, a
// safety margin) are reserved first; what is left is the read-ahead, the elastic part the tuner
// spends (TunerLimits::read_ahead_budget_bytes). A plan whose read-ahead is below the minimum
// (open files x min_stream_buffer_bytes) throws BudgetError with the arithmetic line by line.
// Parts sized in bytes by the code (ring, reader windows, inflate state, read-ahead payload) are
// exact bounds; parts sized in records (shuffle buffer, batches in flight, the read-ahead's
// per-record bookkeeping) are bounds under the assumption that records average at most 1.5 x
// the sampled mean and are at least 2/3 of it (plus one record of the largest sampled size):
// nothing stops a dataset from having other records later. The margin absorbs the rest
// (malloc fragmentation, a reader window's brief copy while it grows).
//
// Process memory (ReadProcessMemory): RssAnon / RssFile / RssShmem / VmRSS / VmHWM from
// /proc/<pid>/status. The daemon's "private RSS" is RssAnon: heap, stacks and anonymous mmaps,
// the memory that is the daemon's alone. The segment is RssShmem (and only the pages touched so
// far), so it is counted as its whole size instead; RssFile is mostly shared-library text,
// shared with other processes and droppable by the kernel.
//
// Errors: DetectCpuBudget and DefaultMemoryBudget never throw (an unreadable file is no limit;
// an unreadable /proc/meminfo falls back to sysconf). PlanMemory throws BudgetError;
// ReadProcessMemory throws std::runtime_error naming the file (e.g. the process is gone).
// Units: bytes, cores (fractions allowed).
// Thread-safety: every function is reentrant (no shared state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace ringfeed {

// Where /proc and the cgroup hierarchies are; tests point these at directory trees in a temp dir.
struct SystemPaths {
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
};

// A plan that does not fit its budget (PlanMemory) or cannot be made. needed_bytes: the
// smallest memory budget that holds the plan, where PlanMemory computed it (0: not known).
class BudgetError : public std::runtime_error {
 public:
  explicit BudgetError(const std::string& message, uint64_t needed_bytes = 0)
      : std::runtime_error(message), needed_bytes_(needed_bytes) {}
  uint64_t needed_bytes() const { return needed_bytes_; }

 private:
  uint64_t needed_bytes_;
};

// ---- CPU --------------------------------------------------------------------------------------

struct CpuBudget {
  double cores = 1;        // min(affinity_cpus, quota_cores), > 0
  // Where `cores` came from, for the start-up log and `ringfeedctl status`, e.g.
  // "cgroup v2 cpu.max 150000 100000 = 1.5 cores at /sys/fs/cgroup/foo (2 CPUs in the affinity mask)".
  std::string source;
  int64_t affinity_cpus = 1;           // CPUs in sched_getaffinity (sysconf when that fails)
  std::optional<double> quota_cores;   // the smallest cgroup CPU quota; nullopt = none
  std::string quota_source;            // "cgroup v1 cpu.cfs_quota_us 50000 / ... at <dir>"; "" = none
};

CpuBudget DetectCpuBudget(const SystemPaths& paths = {});

// ---- Memory -----------------------------------------------------------------------------------

constexpr uint64_t kMemoryBudgetCap = uint64_t{2} << 30;  // the default never exceeds 2 GiB
constexpr uint64_t kMemoryBudgetDivisor = 4;              // default = limit / 4 below the cap

struct MemoryBudgetDefault {
  uint64_t bytes = 0;        // min(kMemoryBudgetCap, limit_bytes / 4)
  uint64_t limit_bytes = 0;  // min(cgroup limit, MemTotal)
  std::string limit_source;  // where limit_bytes comes from: "MemTotal 23.5 GiB", a cgroup file
  // e.g. "1/4 of cgroup v1 memory.limit_in_bytes 4.0 GiB at /sys/fs/cgroup/memory/job = 1.0 GiB"
  std::string source;
};

MemoryBudgetDefault DefaultMemoryBudget(const SystemPaths& paths = {});

// Sizes of the daemon's own data structures the plan counts (checked against sizeof and
// measured allocations in tests/budget_test.cc, so a change there shows up as a failing test).
constexpr uint64_t kInflateStateBytes = 96u << 10;        // ISA-L inflate_state (85 KiB) or zlib (~40 KiB)
constexpr uint64_t kRecordOverheadBytes = 80;             // OwnedRecord + its own RecordStorage + malloc header/rounding
constexpr uint64_t kReadAheadRecordOverheadBytes = 224;   // StreamItem in a vector (2x capacity) + RecordStorage + malloc
constexpr uint64_t kReadAheadChunkOverheadBytes = 128u << 10;  // per open file without a shuffle buffer: ReadAhead::kChunkOverheadBytes
// Without a shuffle buffer small records travel in chunks of kReadAheadChunkBytes (ReadAhead::
// kChunkBytes); a chunk is closed when the next record does not fit, so each leaves unused a
// tail shorter than that record: at most min(largest record, kReadAheadOwnAllocationBytes)
// (ReadAhead::kOwnAllocationBytes; larger records get their own allocation). The read-ahead's
// payload is planned at (chunk - that tail) / chunk of the memory it occupies.
constexpr uint64_t kReadAheadChunkBytes = 64u << 10;
constexpr uint64_t kReadAheadOwnAllocationBytes = 16u << 10;
constexpr uint64_t kThreadBytes = 256u << 10;             // resident stack + per-thread malloc state
constexpr int64_t kDaemonFixedThreads = 4;                // main/control socket, sequencer, heartbeat, tuner
constexpr uint64_t kSafetyMarginMinBytes = 8u << 20;      // margin = max(budget / 20, 8 MiB)
inline constexpr const char* kSafetyMarginPart = "safety margin";  // its MemoryPlanLine::part
constexpr uint64_t kSafetyMarginDivisor = 20;
constexpr uint64_t kRecordHeaderFooterBytes = 16;         // TFRecord length + 2 CRCs, in the window
// Records of a sampled mean of 0 (nothing sampled) are planned as this size.
constexpr uint64_t kAssumedMeanRecordBytes = 1u << 10;

struct MemoryInputs {
  uint64_t budget_bytes = 0;           // pipeline.memory_budget (or DefaultMemoryBudget().bytes)
  std::string budget_source = "pipeline.memory_budget";  // shown in Describe() and the error
  // The ring (shm::Geometry): the whole segment counts, touched or not.
  uint64_t ring_segment_bytes = 0;
  int64_t ring_slots = 0;
  uint64_t ring_slot_bytes = 0;        // slot stride; segment - slots x stride = superblock
  bool ring_slot_bytes_fixed = false;  // ring.slot_bytes set (else sized from batch.size's records)
  // RssAnon measured after the config is loaded and before the pipeline starts (ReadProcessMemory).
  uint64_t baseline_private_rss_bytes = 0;
  // Files. The sequencer keeps cycle_length files in the interleave plus lookahead_files opened
  // ahead of their turn for the read-ahead (daemon/sequencer.cc; the pipeline keeps one per
  // reader): open files = min(cycle_length + lookahead_files, files).
  int64_t cycle_length = 4;            // pipeline.cycle_length
  int64_t lookahead_files = 0;         // the most files opened ahead in the run; 0 = max_readers
  int64_t files = 0;                   // files of this shard; 0 = unknown (many)
  bool compressed = false;             // any file GZIP/ZLIB: + input buffer + inflate state per open file
  std::string compressed_why;          // after them in the plan, e.g. why compression: auto counts them
  uint64_t reader_buffer_bytes = 1u << 20;       // ReaderOptions::buffer_bytes
  // Why reader_buffer_bytes is below the default, for the arithmetic's text ("reads of 64.0 KiB:
  // the largest file is 33.9 KiB"); empty when it is not.
  std::string reader_buffer_why;
  uint64_t min_stream_buffer_bytes = 256u << 10; // TunerLimits::min_stream_buffer_bytes
  // pipeline.reads_per_file when the config fixes it above 1: each open file also holds that many
  // queued reads of read_block_bytes, the block being read and the spare blocks of hedged reads
  // (ReadQueue::MostBytes; counted in the read-ahead's minimum). Auto starts at 1
  // and the tuner raises it within the read-ahead budget.
  int64_t reads_per_file = 1;
  uint64_t read_block_bytes = 256u << 10;        // ReaderOptions::read_block_bytes
  // Records, from the start-up sample.
  uint64_t mean_record_bytes = 0;
  uint64_t largest_record_bytes = 0;
  int64_t shuffle_buffer = 0;          // the shuffle buffer's records (TuningPlan::shuffle_buffer)
  // shuffle.buffer when shuffle_buffer is less (the records the shard reads per epoch, counted
  // at start), for the arithmetic's text; 0 otherwise.
  int64_t shuffle_buffer_configured = 0;
  int64_t batch_size = 32;             // records per batch (BatchRows: batch.size, or fewer when the epoch is)
  // batch.size when batch_size is less (the records the shard reads per epoch, counted at start),
  // for the arithmetic's text; 0 otherwise.
  int64_t batch_size_configured = 0;
  int64_t queues = 1;                  // consumers.count in ranks mode, else 1
  // Threads the tuner may start (TunerLimits::max_readers / max_workers, or the fixed numbers).
  int64_t max_readers = 1;
  int64_t max_workers = 1;
  // Whether the config fixes pipeline.readers / pipeline.workers. Only a fixed count above 1 is
  // advised lower when the budget does not fit: an auto one is at 1 by then (PlanTuning lowers
  // auto knobs before it gives up).
  bool readers_fixed = true;
  bool workers_fixed = true;
  uint64_t worker_scratch_bytes = 1u << 20;  // heap one parse worker keeps (measure/layout vectors)
  // on_error: skip: heap one reader's record check holds (ExampleParser::Check's one-row batch),
  // estimated as 2 x the largest sampled row, parsed (RecordSample::largest_row_bytes: values,
  // offsets and row_splits, grown by doubling); 0 without skip.
  uint64_t reader_check_bytes = 0;
};

struct MemoryPlanLine {
  std::string part;        // "ring", "shuffle buffer", ...
  std::string arithmetic;  // "10 slots x 4.0 MiB + 64.0 KiB superblock"
  uint64_t bytes = 0;
};

struct MemoryPlan {
  uint64_t budget_bytes = 0;
  std::string budget_source;  // MemoryInputs::budget_source
  int64_t open_files = 0;
  // Fixed parts (bytes).
  uint64_t ring_bytes = 0;
  uint64_t baseline_bytes = 0;
  uint64_t open_files_bytes = 0;  // windows, compressed input, inflate state, one record beyond the buffer
  uint64_t shuffle_bytes = 0;
  uint64_t batches_bytes = 0;     // records of batches being formed and parsed
  uint64_t workers_bytes = 0;
  uint64_t reader_checks_bytes = 0;  // on_error: skip (MemoryInputs::reader_check_bytes)
  uint64_t threads_bytes = 0;
  uint64_t margin_bytes = 0;
  uint64_t fixed_bytes = 0;       // the sum of the above
  // The elastic part. read_ahead_memory_bytes = budget - fixed; of it, read_ahead_bytes is record
  // payload (what ReadAhead::buffered_bytes counts), the rest its per-record bookkeeping.
  // The tuner keeps open files x (stream_buffer_bytes + queued reads) <= read_ahead_bytes
  // (queued reads: ReadQueue::MostBytes, (reads_per_file + 3) x 256 KiB per file when above 1; a file with
  // queued reads also has a window of at most 16 KiB instead of the reader_buffer_bytes counted
  // above).
  uint64_t read_ahead_memory_bytes = 0;
  uint64_t read_ahead_bytes = 0;
  uint64_t min_read_ahead_bytes = 0;  // open_files x (min_stream_buffer_bytes + fixed queued reads)
  std::vector<MemoryPlanLine> lines;  // fixed parts, margin, read-ahead, in order

  // Largest stream_buffer_bytes the budget allows with every file open.
  uint64_t max_stream_buffer_bytes() const {
    return open_files > 0 ? read_ahead_bytes / static_cast<uint64_t>(open_files) : read_ahead_bytes;
  }
  // The whole plan, one part a line (ringfeedd's log at debug level, `ringfeedctl check`):
  //   memory budget 256.0 MiB (pipeline.memory_budget):
  //     ring: 10 slots x 4.0 MiB + 64.0 KiB superblock = 40.1 MiB
  //     ...
  //     read-ahead: what is left, for records read ahead of their turn: 120.6 MiB of record
  //       bytes (at most 15.1 MiB per open file x 8) + 224 B of bookkeeping per record (1.3 KiB
  //       records assumed: 2/3 of the mean) = 140.4 MiB
  std::string Describe() const;
  // One line of it, ringfeedd's start-up log at info level: the budget, the fixed parts' sum
  // (without the safety margin) and its three largest parts, the margin, and the most the
  // read-ahead may use, e.g. (the plan above)
  //   memory budget 256.0 MiB (pipeline.memory_budget): 102.8 MiB for the ring, buffers and
  //   threads (the largest: ring 40.1 MiB, shuffle buffer 30.1 MiB, open files 16.8 MiB), 12.8
  //   MiB kept as a safety margin; the read-ahead may use up to the other 140.4 MiB (120.6 MiB
  //   of record bytes, the rest their bookkeeping), as far as it helps: ringfeedctl status shows
  //   what it uses (pipeline.read_ahead_bytes); the whole plan at --log-level debug
  std::string Summary() const;
};

// Throws BudgetError when the read-ahead left is below min_read_ahead_bytes (or nothing is
// left), with every part's arithmetic and the fix, e.g.
//   pipeline.memory_budget 64.0 MiB is too small for this job:
//     ring: 10 slots x 4.0 MiB + 64.0 KiB superblock = 40.1 MiB
//     shuffle buffer: 10000 records x (1.5 x 2.0 KiB mean + 64 B) + 9.0 KiB largest = 29.9 MiB
//     ...
//     read-ahead at least: 8 open files x 256.0 KiB min stream buffer + ... = 2.3 MiB (the budget leaves 0 B)
//     needed at least 113.0 MiB (118456064 bytes); raise pipeline.memory_budget to at least 113MiB or
//     lower ring.slots / ring.slot_bytes / batch.size (40.1 MiB) or shuffle.buffer (29.9 MiB)
// The budget named is exact: the smallest that fits (the 5% margin grows with the budget). The
// parts to lower are the two largest of those that can go lower: pipeline.cycle_length above 1,
// pipeline.readers and pipeline.workers only when fixed above 1 (readers_fixed, workers_fixed),
// and cycle_length and readers only when their least value opens fewer files.
// Also throws BudgetError for inputs that make no sense (budget 0, cycle_length < 1, ...).
MemoryPlan PlanMemory(const MemoryInputs& inputs);

// Open files for an interleave of `cycle_length` with `lookahead_files` opened ahead, over
// `files` files (0 = unknown): min(cycle_length + lookahead_files, files), at least 1.
int64_t OpenFiles(int64_t cycle_length, int64_t lookahead_files, int64_t files);

// ---- File descriptors -------------------------------------------------------------------------

// Descriptors a job may hold at once, checked against RLIMIT_NOFILE at start (ringfeedd raises
// its soft limit to the hard one first): the data files open at once (MemoryPlan::open_files),
// each with its io_uring instance when reads can be queued, the control connections
// (kMaxControlConnections) and kOtherFileDescriptors for the rest (stdio, log, lock,
// socket, epoll and timers, the segment while it is mapped, sd_notify, files sampled at start).
// Out of descriptors, the daemon could open neither its next data file nor a trainer's
// connection.
constexpr uint64_t kOtherFileDescriptors = 64;
// ControlServer closes connections beyond this at once, so clients that connect and say nothing
// can't use up the descriptors the daemon needs for its data files.
constexpr uint64_t kMaxControlConnections = 256;
struct FileDescriptorPlan {
  uint64_t needed = 0;
  // "1116 data files x 2 (each with its io_uring queue) + 256 control connections + 64 others = 2552"
  std::string arithmetic;
  // Needed with the fewest data files the job can open (PlanTuning: readers 1, cycle_length 1,
  // reads_per_file 1; PlanFileDescriptors: one file): no config lowers the count below it.
  uint64_t least = 0;
  // The config keys that lower the data files' part, with what each gives (set by PlanTuning,
  // which knows which are fixed): "set pipeline.readers to 1 (5 data files open)"; "" for none.
  std::string lower;
};
FileDescriptorPlan PlanFileDescriptors(int64_t open_files, bool queued_reads, uint64_t connections);
// What is wrong when `fds` does not fit under the open-file limit `limit` (RLIMIT_NOFILE's soft
// value; ringfeedd raises it to `hard` first), with the arithmetic and the fix; "" when it fits.
std::string OpenFileLimitProblem(const FileDescriptorPlan& fds, uint64_t limit, uint64_t hard);

// "cannot start a thread: Resource temporarily unavailable (this process's limits: address
// space 29.3 MiB (ulimit -v), 95612 processes and threads of this user (ulimit -u))": for a
// std::thread that failed to start (std::system_error), naming the limits that are set (the
// process limit only where it applies: not for root).
std::string ThreadStartFailure(const std::system_error& error);
// "out of memory (std::bad_alloc; this process's address space is limited to 48.8 MiB, ulimit -v)",
// or without a limit "... the system, its overcommit policy or the cgroup's memory.max ran out".
std::string OutOfMemory(const std::exception& error);

// Out of memory inside an out-of-memory handler. A handler builds its message (OutOfMemory, a
// ReadError) with the heap that just failed; where that allocation fails again the exception
// leaves the catch block and std::terminate aborts the daemon with no word of why (seen with
// `ulimit -v` and a shuffle buffer: each reader's malloc arena wants a 64 MiB heap of address
// space). So:
//   - ArmOomReserve() (ringfeedd, at start, before its threads) sets 512 KiB of heap aside in
//     blocks below the mmap threshold (address space, not resident memory), writes the last-resort message while memory is there,
//     and installs a std::terminate handler that turns a std::bad_alloc no handler caught (an
//     allocation on a thread's way to its handler, or past it) into DieOutOfMemory; any other
//     uncaught exception is named on stderr before the usual abort;
//   - every std::bad_alloc handler calls ReleaseOomReserve() first: the blocks go back to the
//     heap, for the handler's message and for the daemon's orderly stop (the job fails; a limit
//     of the machine is never skipped). Only the first call frees anything;
//   - a handler that still fails calls DieOutOfMemory(where): the prepared message and `where`
//     to stderr with write(2), then _exit(1) (no cleanup: the next start replaces the segment
//     and socket a dead daemon left; consumers see the daemon gone within 2 s).
// Thread-safety: ReleaseOomReserve and DieOutOfMemory may be called from any thread.
void ArmOomReserve();
void ReleaseOomReserve();
[[noreturn]] void DieOutOfMemory(const char* where);

// ---- Process memory ---------------------------------------------------------------------------

struct ProcessMemory {
  uint64_t rss_anon = 0;   // RssAnon: heap, stacks, anonymous mappings
  uint64_t rss_file = 0;   // RssFile: file-backed pages (library text)
  uint64_t rss_shmem = 0;  // RssShmem: touched pages of shared memory (the segment)
  uint64_t vm_rss = 0;     // VmRSS = the three together
  uint64_t vm_hwm = 0;     // VmHWM: peak VmRSS
  uint64_t private_rss() const { return rss_anon; }  // see the top of this file
};

// From /proc/<pid>/status (pid 0 = this process). Throws std::runtime_error naming the file.
ProcessMemory ReadProcessMemory(pid_t pid = 0, const SystemPaths& paths = {});
// This process's private RSS (ReadProcessMemory().private_rss()); 0 when /proc cannot be read.
uint64_t PrivateRssBytes();

// The smallest memory budget that leaves `rest` bytes beside its safety margin: B - margin(B)
// >= rest, the margin (max(B / 20, 8 MiB)) growing with B. UINT64_MAX when no budget does.
uint64_t BudgetHolding(uint64_t rest);
// The smallest budget that holds `more` bytes beyond what `budget` holds beside its margin:
// the figure advice to raise pipeline.memory_budget names.
uint64_t BudgetHoldingMore(uint64_t budget, uint64_t more);

// "4.0 MiB", "512 B", "1.5 GiB": one decimal, binary units (shm::HumanBytes).
std::string FormatBytes(uint64_t bytes);
// `bytes` rounded up to whole MiB as a config takes it ("128MiB"): what advice to raise
// pipeline.memory_budget names, so that it can be pasted (FormatBytes' "127.8 MiB" cannot).
std::string ConfigMiB(uint64_t bytes);

// ---- Over the budget ---------------------------------------------------------------------------

// What ringfeedd measures against its budget: once a second (a warning), and each further MiB
// a shuffle buffer past its share takes (a failure: SequencerOptions::over_budget).
struct MemoryInUse {
  uint64_t private_rss = 0;      // RssAnon (ProcessMemory::private_rss)
  uint64_t segment_bytes = 0;    // the ring's segment
  uint64_t shuffle_records = 0;  // in the shuffle buffer now (Sequencer::shuffle_records)
  uint64_t shuffle_bytes = 0;    // ... their payload bytes
  // The largest record the shuffle buffer took this epoch (payload bytes; 0: not known, then
  // the buffer's mean stands for it).
  uint64_t largest_shuffle_record = 0;
};

// The shuffle buffer's memory as the plan counts it (MemoryPlan::shuffle_bytes): its records'
// payload bytes plus kRecordOverheadBytes of bookkeeping each (saturating).
uint64_t ShuffleHeldBytes(uint64_t records, uint64_t payload_bytes);

// "" while private RSS + segment is within plan.budget_bytes (or no budget is set); else a
// warning with the arithmetic. The memory plan sizes what it counts in records from the records
// sampled at start (1.5 x their mean each): records later in the files far larger than those
// are how a job goes past its budget. When the shuffle buffer holds more than its share of the
// plan, the warning names it, with the records of their present size that its share holds and
// the budget that would hold what is used now.
std::string OverBudgetWarning(const MemoryPlan& plan, const MemoryInUse& used, int64_t shuffle_buffer);

}  // namespace ringfeed
