#include "daemon/budget.h"

#include "format/read_queue.h"
#include "shm/segment.h"

#include <execinfo.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>

namespace ringfeed {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return text.str();
}

std::string Trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

// A decimal number without sign, the whole string; nullopt otherwise (or on overflow).
std::optional<uint64_t> ParseUnsigned(const std::string& s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, c - '0', &value)) {
      return std::nullopt;
    }
  }
  return value;
}

std::string FormatCores(double cores) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", cores);
  std::string s = text;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

uint64_t SatAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// Products of two 64-bit byte counts (GCC's 128-bit integer; __extension__ keeps -Wpedantic quiet).
__extension__ typedef unsigned __int128 U128;

// One line of /proc/self/cgroup: "hierarchy-id:controller-list:path".
struct CgroupLine {
  std::string controllers;  // "" for the v2 line ("0::/path")
  std::string path;
};

std::vector<CgroupLine> ReadCgroupLines(const SystemPaths& paths) {
  std::vector<CgroupLine> lines;
  const auto text = ReadSmallFile(paths.proc_root + "/self/cgroup");
  if (!text) return lines;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    if (first == std::string::npos) continue;
    const auto second = line.find(':', first + 1);
    if (second == std::string::npos) continue;
    lines.push_back({line.substr(first + 1, second - first - 1), Trim(line.substr(second + 1))});
  }
  return lines;
}

bool HasController(const std::string& list, const std::string& controller) {
  for (const auto& c : Split(list, ',')) {
    if (c == controller) return true;
  }
  return false;
}

// The directories to read, from the process's cgroup up to the hierarchy's root (inclusive).
// A cgroup path missing under the mount (a container whose own cgroup is mounted as the root,
// without a cgroup namespace) is read at the root only.
std::vector<std::string> WalkUp(const std::string& hierarchy, const std::string& cgroup_path) {
  const fs::path root = fs::path(hierarchy).lexically_normal();
  fs::path relative = fs::path(cgroup_path).relative_path().lexically_normal();
  std::vector<std::string> dirs;
  std::error_code ec;
  fs::path dir = relative.empty() || relative == "." ? root : (root / relative).lexically_normal();
  if (!fs::is_directory(dir, ec)) dir = root;
  // Never walk outside the hierarchy (a path with ".." in it).
  const std::string root_text = root.string();
  while (true) {
    std::string text = dir.string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    if (text.compare(0, root_text.size(), root_text) != 0) break;
    dirs.push_back(text);
    if (text.size() <= root_text.size() || dirs.size() > 256) break;
    dir = fs::path(text).parent_path();
  }
  return dirs;
}

// The cgroup v2 mount: pure v2 (cgroup.controllers at the root) or hybrid (under unified/).
std::optional<std::string> UnifiedHierarchy(const SystemPaths& paths) {
  std::error_code ec;
  if (fs::exists(paths.cgroup_root + "/cgroup.controllers", ec)) return paths.cgroup_root;
  if (fs::exists(paths.cgroup_root + "/unified/cgroup.controllers", ec)) return paths.cgroup_root + "/unified";
  return std::nullopt;
}

// The v1 hierarchy holding `controller`, named as the line names it ("cpu,cpuacct") or by the
// usual alias symlinks.
std::optional<std::string> V1Hierarchy(const SystemPaths& paths, const std::string& controllers,
                                       const std::string& controller) {
  std::error_code ec;
  const std::string names[] = {controllers, controller, controller + ",cpuacct", "cpuacct," + controller};
  for (const std::string& name : names) {
    const std::string dir = paths.cgroup_root + "/" + name;
    if (fs::is_directory(dir, ec)) return dir;
  }
  return std::nullopt;
}

struct Quota {
  double cores = 0;
  std::string source;
};

void ConsiderQuota(std::optional<Quota>* best, Quota q) {
  if (!(q.cores > 0)) return;  // a zero quota is not something the kernel accepts; ignore it
  if (!*best || q.cores < (*best)->cores) *best = std::move(q);
}

std::optional<Quota> CgroupCpuQuota(const SystemPaths& paths) {
  std::optional<Quota> best;
  for (const CgroupLine& line : ReadCgroupLines(paths)) {
    if (line.controllers.empty()) {
      const auto hierarchy = UnifiedHierarchy(paths);
      if (!hierarchy) continue;
      for (const std::string& dir : WalkUp(*hierarchy, line.path)) {
        const auto text = ReadSmallFile(dir + "/cpu.max");
        if (!text) continue;
        const auto fields = Split(Trim(*text), ' ');
        if (fields.empty() || fields[0] == "max") continue;
        const auto quota = ParseUnsigned(fields[0]);
        const auto period = fields.size() > 1 ? ParseUnsigned(fields[1]) : std::optional<uint64_t>(100000);
        if (!quota || !period || *period == 0) continue;
        const double cores = static_cast<double>(*quota) / static_cast<double>(*period);
        ConsiderQuota(&best, {cores, "cgroup v2 cpu.max " + fields[0] + " " + std::to_string(*period) + " = " +
                                         FormatCores(cores) + " cores at " + dir});
      }
    } else if (HasController(line.controllers, "cpu")) {
      const auto hierarchy = V1Hierarchy(paths, line.controllers, "cpu");
      if (!hierarchy) continue;
      for (const std::string& dir : WalkUp(*hierarchy, line.path)) {
        const auto quota_text = ReadSmallFile(dir + "/cpu.cfs_quota_us");
        if (!quota_text) continue;
        const std::string quota_field = Trim(*quota_text);
        const auto quota = ParseUnsigned(quota_field);  // -1 (none) does not parse
        if (!quota) continue;
        const auto period_text = ReadSmallFile(dir + "/cpu.cfs_period_us");
        const auto period = period_text ? ParseUnsigned(Trim(*period_text)) : std::optional<uint64_t>(100000);
        if (!period || *period == 0) continue;
        const double cores = static_cast<double>(*quota) / static_cast<double>(*period);
        ConsiderQuota(&best, {cores, "cgroup v1 cpu.cfs_quota_us " + quota_field + " / cpu.cfs_period_us " +
                                         std::to_string(*period) + " = " + FormatCores(cores) + " cores at " + dir});
      }
    }
  }
  return best;
}

// CPUs in this thread's affinity mask, with a mask big enough for any machine.
int64_t AffinityCpus(std::string* source) {
  for (int n = 1024; n <= (1 << 22); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) break;
    const size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      const int count = CPU_COUNT_S(size, set);
      CPU_FREE(set);
      *source = std::to_string(count) + (count == 1 ? " CPU" : " CPUs") + " in the affinity mask";
      return std::max(count, 1);
    }
    const int error = errno;
    CPU_FREE(set);
    if (error != EINVAL) {
      const long online = sysconf(_SC_NPROCESSORS_ONLN);
      *source = std::to_string(std::max(online, 1L)) + " online CPUs (sched_getaffinity failed: " +
                std::strerror(error) + ")";
      return std::max<int64_t>(online, 1);
    }
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  *source = std::to_string(std::max(online, 1L)) + " online CPUs (no affinity mask could be read)";
  return std::max<int64_t>(online, 1);
}

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;
};

// v1's "no limit" is PAGE_COUNTER_MAX pages (0x7ffffffffffff000 with 4 KiB pages); anything
// this large is no limit, whatever the page size.
constexpr uint64_t kV1Unlimited = uint64_t{1} << 62;

std::optional<MemoryLimit> CgroupMemoryLimit(const SystemPaths& paths) {
  std::optional<MemoryLimit> best;
  auto consider = [&](uint64_t bytes, std::string source) {
    if (bytes == 0) return;
    if (!best || bytes < best->bytes) best = MemoryLimit{bytes, std::move(source)};
  };
  for (const CgroupLine& line : ReadCgroupLines(paths)) {
    if (line.controllers.empty()) {
      const auto hierarchy = UnifiedHierarchy(paths);
      if (!hierarchy) continue;
      for (const std::string& dir : WalkUp(*hierarchy, line.path)) {
        const auto text = ReadSmallFile(dir + "/memory.max");
        if (!text) continue;
        const auto value = ParseUnsigned(Trim(*text));  // "max" does not parse
        if (value) consider(*value, "cgroup v2 memory.max " + FormatBytes(*value) + " at " + dir);
      }
    } else if (HasController(line.controllers, "memory")) {
      const auto hierarchy = V1Hierarchy(paths, line.controllers, "memory");
      if (!hierarchy) continue;
      for (const std::string& dir : WalkUp(*hierarchy, line.path)) {
        const auto text = ReadSmallFile(dir + "/memory.limit_in_bytes");
        if (!text) continue;
        const auto value = ParseUnsigned(Trim(*text));
        if (value && *value < kV1Unlimited) {
          consider(*value, "cgroup v1 memory.limit_in_bytes " + FormatBytes(*value) + " at " + dir);
        }
      }
    }
  }
  return best;
}

MemoryLimit MemTotal(const SystemPaths& paths) {
  if (const auto text = ReadSmallFile(paths.proc_root + "/meminfo")) {
    std::istringstream in(*text);
    std::string key;
    while (in >> key) {
      if (key == "MemTotal:") {
        uint64_t kib = 0;
        if (in >> kib) return {kib * 1024, "MemTotal " + FormatBytes(kib * 1024)};
        break;
      }
      std::getline(in, key);
    }
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t bytes = static_cast<uint64_t>(std::max(pages, 1L)) * static_cast<uint64_t>(std::max(page, 1L));
  return {bytes, "physical memory " + FormatBytes(bytes) + " (" + paths.proc_root + "/meminfo unreadable)"};
}

}  // namespace

std::string FormatBytes(uint64_t bytes) { return shm::HumanBytes(bytes); }

std::string ConfigMiB(uint64_t bytes) { return std::to_string(CeilDiv(bytes, uint64_t{1} << 20)) + "MiB"; }

// ---- CPU ----------------------------------------------------------------------------------------

CpuBudget DetectCpuBudget(const SystemPaths& paths) {
  CpuBudget budget;
  std::string affinity_source;
  budget.affinity_cpus = AffinityCpus(&affinity_source);
  const auto quota = CgroupCpuQuota(paths);
  if (quota) {
    budget.quota_cores = quota->cores;
    budget.quota_source = quota->source;
  }
  if (quota && quota->cores < static_cast<double>(budget.affinity_cpus)) {
    budget.cores = quota->cores;
    budget.source = quota->source + " (" + affinity_source + ")";
  } else {
    budget.cores = static_cast<double>(budget.affinity_cpus);
    budget.source = affinity_source + (quota ? " (" + quota->source + " is not lower)" : " (no cgroup CPU quota)");
  }
  return budget;
}

// ---- Memory -------------------------------------------------------------------------------------

MemoryBudgetDefault DefaultMemoryBudget(const SystemPaths& paths) {
  MemoryBudgetDefault result;
  const MemoryLimit total = MemTotal(paths);
  const auto cgroup = CgroupMemoryLimit(paths);
  std::string limit_source, note;
  if (cgroup && cgroup->bytes < total.bytes) {
    result.limit_bytes = cgroup->bytes;
    limit_source = cgroup->source;
  } else {
    result.limit_bytes = total.bytes;
    limit_source = total.source;
    note = cgroup ? "; " + cgroup->source + " is not lower" : "; no cgroup memory limit";
  }
  result.limit_source = limit_source;
  const uint64_t quarter = result.limit_bytes / kMemoryBudgetDivisor;
  const std::string quarter_text = "1/4 of " + limit_source + " = " + FormatBytes(quarter);
  if (quarter > kMemoryBudgetCap) {
    result.bytes = kMemoryBudgetCap;
    result.source = "min(" + FormatBytes(kMemoryBudgetCap) + " cap, " + quarter_text + ")" + note;
  } else {
    result.bytes = quarter;
    result.source = quarter_text + note;
  }
  return result;
}

int64_t OpenFiles(int64_t cycle_length, int64_t lookahead_files, int64_t files) {
  const int64_t open = std::max<int64_t>(cycle_length, 1) + std::max<int64_t>(lookahead_files, 0);
  return std::max<int64_t>(files > 0 ? std::min(open, files) : open, 1);
}

namespace {

void Require(bool ok, const std::string& what) {
  if (!ok) throw BudgetError("memory plan: " + what);
}

// Payload bytes of read-ahead that `memory` bytes hold, when each record of `mean` bytes costs
// 1.5 x kReadAheadRecordOverheadBytes / mean extra (1.5: records may be smaller than sampled)
// and, in chunks (`tail` > 0), each kReadAheadChunkBytes of memory holds at least
// kReadAheadChunkBytes - `tail` of payload:
//   memory = payload x C / (C - tail) + payload x 3 overhead / (2 mean), C = kReadAheadChunkBytes.
// (A mean above 2^40, where the per-record term is nothing, is taken as 2^40: no overflow.)
uint64_t PayloadFor(uint64_t memory, uint64_t mean, uint64_t tail) {
  mean = std::min(mean, uint64_t{1} << 40);
  const U128 c = kReadAheadChunkBytes;
  const U128 num = static_cast<U128>(memory) * (2 * mean) * (c - tail);
  const U128 den = 2 * mean * c + 3 * kReadAheadRecordOverheadBytes * (c - tail);
  const U128 q = num / den;
  return q > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(q);
}

// The inverse: memory needed for `payload` bytes of read-ahead (rounded up).
uint64_t MemoryFor(uint64_t payload, uint64_t mean, uint64_t tail) {
  mean = std::min(mean, uint64_t{1} << 40);
  const U128 c = kReadAheadChunkBytes;
  const U128 chunks = (static_cast<U128>(payload) * c + (c - tail) - 1) / (c - tail);
  const U128 extra =
      (static_cast<U128>(payload) * 3 * kReadAheadRecordOverheadBytes + 2 * mean - 1) / (2 * mean);
  const U128 total = chunks + extra;
  return total > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(total);
}

uint64_t MarginFor(uint64_t budget) {
  return std::max(CeilDiv(budget, kSafetyMarginDivisor), kSafetyMarginMinBytes);
}

std::string Plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

uint64_t BudgetHolding(uint64_t rest) {
  // B - ceil(B / 20) = floor(19 B / 20) >= rest  <=>  B >= ceil(20 rest / 19).
  const U128 by_share =
      (static_cast<U128>(rest) * kSafetyMarginDivisor + kSafetyMarginDivisor - 2) / (kSafetyMarginDivisor - 1);
  return std::max(SatAdd(rest, kSafetyMarginMinBytes),
                  by_share > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(by_share));
}

uint64_t BudgetHoldingMore(uint64_t budget, uint64_t more) {
  return BudgetHolding(SatAdd(budget - std::min(budget, MarginFor(budget)), more));
}

MemoryPlan PlanMemory(const MemoryInputs& in) {
  Require(in.budget_bytes > 0, "the memory budget is 0 bytes; it must be at least 1 byte");
  Require(in.cycle_length >= 1, "cycle_length is " + std::to_string(in.cycle_length) + "; it must be at least 1");
  Require(in.ring_slots >= 0, "ring_slots is " + std::to_string(in.ring_slots) + "; it must not be negative");
  Require(in.lookahead_files >= 0,
          "lookahead_files is " + std::to_string(in.lookahead_files) + "; it must not be negative");
  Require(in.shuffle_buffer >= 0,
          "shuffle.buffer is " + std::to_string(in.shuffle_buffer) + "; it must not be negative");
  Require(in.batch_size >= 1, "batch.size is " + std::to_string(in.batch_size) + "; it must be at least 1");
  Require(in.queues >= 1, "queues is " + std::to_string(in.queues) + "; it must be at least 1");
  Require(in.max_readers >= 1, "max_readers is " + std::to_string(in.max_readers) + "; it must be at least 1");
  Require(in.max_workers >= 1, "max_workers is " + std::to_string(in.max_workers) + "; it must be at least 1");
  Require(in.reader_buffer_bytes >= 1, "reader_buffer_bytes is 0; it must be at least 1");

  MemoryPlan plan;
  plan.budget_bytes = in.budget_bytes;
  plan.budget_source = in.budget_source;
  const int64_t lookahead = in.lookahead_files > 0 ? in.lookahead_files : in.max_readers;
  plan.open_files = OpenFiles(in.cycle_length, lookahead, in.files);
  const uint64_t mean = in.mean_record_bytes > 0 ? in.mean_record_bytes : kAssumedMeanRecordBytes;
  const std::string mean_text =
      in.mean_record_bytes > 0 ? FormatBytes(mean) + " mean" : FormatBytes(mean) + " assumed mean (no records sampled)";
  // Records held by the sequencer (shuffle buffer, batches): 1.5 x the sampled mean each, plus
  // the OwnedRecord and its allocation's header.
  const uint64_t planned_record = CeilDiv(SatMul(mean, 3), 2) + kRecordOverheadBytes;
  const std::string record_text = "(1.5 x " + mean_text + " + " + FormatBytes(kRecordOverheadBytes) + ")";
  auto add = [&](const std::string& part, const std::string& arithmetic, uint64_t bytes) {
    plan.lines.push_back({part, arithmetic, bytes});
    plan.fixed_bytes = SatAdd(plan.fixed_bytes, bytes);
    return bytes;
  };

  // Ring.
  {
    std::string arithmetic = "segment";
    const uint64_t slots_bytes = SatMul(static_cast<uint64_t>(in.ring_slots), in.ring_slot_bytes);
    if (in.ring_slots > 0 && in.ring_slot_bytes > 0 && slots_bytes <= in.ring_segment_bytes) {
      arithmetic = Plural(in.ring_slots, "slot", "slots") + " x " + FormatBytes(in.ring_slot_bytes) + " + " +
                   FormatBytes(in.ring_segment_bytes - slots_bytes) + " superblock";
    }
    plan.ring_bytes = add("ring", arithmetic, in.ring_segment_bytes);
  }
  plan.baseline_bytes =
      add("daemon before the pipeline", "private RSS (RssAnon) at start", in.baseline_private_rss_bytes);

  // Open files: the reader's window (grown to the largest record), for compressed files the
  // compressed-input buffer and the decoder state, the one record a stream may hold beyond
  // its stream buffer (ReadAhead reads on until it passes the limit) and, when small records
  // share read-ahead chunks, the chunk space a stream holds beyond its records.
  {
    const uint64_t window = std::max(in.reader_buffer_bytes, SatAdd(in.largest_record_bytes, kRecordHeaderFooterBytes));
    uint64_t per_file = window;
    std::string arithmetic = FormatBytes(window) + " window";
    if (in.compressed) {
      per_file = SatAdd(per_file, SatAdd(in.reader_buffer_bytes, kInflateStateBytes));
      arithmetic += " + " + FormatBytes(in.reader_buffer_bytes) + " compressed input + " +
                    FormatBytes(kInflateStateBytes) + " inflate state" +
                    (in.compressed_why.empty() ? std::string() : " (" + in.compressed_why + ")");
    }
    const uint64_t beyond = SatAdd(in.largest_record_bytes, kReadAheadRecordOverheadBytes);
    per_file = SatAdd(per_file, beyond);
    arithmetic += " + " + FormatBytes(beyond) + " largest record beyond the stream buffer";
    if (in.shuffle_buffer <= 1) {  // ReadAhead::UsesChunks (budget_test checks they agree)
      per_file = SatAdd(per_file, kReadAheadChunkOverheadBytes);
      arithmetic += " + " + FormatBytes(kReadAheadChunkOverheadBytes) + " read-ahead chunk tails";
    }
    const bool all_files = in.files > 0 && in.files < in.cycle_length + lookahead;
    const std::string why = in.reader_buffer_why.empty() ? "" : "; " + in.reader_buffer_why;
    const std::string count = all_files ? std::to_string(plan.open_files) + " (all files" + why + ")"
                                        : std::to_string(plan.open_files) + " (pipeline.cycle_length " +
                                              std::to_string(in.cycle_length) + " + " +
                                              Plural(lookahead, "file", "files") + " opened ahead" + why + ")";
    plan.open_files_bytes = add("open files", count + " x (" + arithmetic + ")",
                                SatMul(static_cast<uint64_t>(plan.open_files), per_file));
  }

  // Shuffle buffer: shuffle.buffer records (at least the one record the sequencer passes through).
  {
    const int64_t records = std::max<int64_t>(in.shuffle_buffer, 1);
    plan.shuffle_bytes =
        add("shuffle buffer",
            (in.shuffle_buffer <= 1 ? "none (shuffle.buffer " + std::to_string(in.shuffle_buffer) +
                                          "), the one record passing through: "
                                    : std::string()) +
                Plural(records, "record", "records") +
                (in.shuffle_buffer_configured > in.shuffle_buffer
                     ? " (every record of this shard's epoch, counted at start: fewer than shuffle.buffer " +
                           std::to_string(in.shuffle_buffer_configured) + ")"
                     : std::string()) +
                " x " + record_text + " + " +
                FormatBytes(in.largest_record_bytes) + " largest",
            SatAdd(SatMul(static_cast<uint64_t>(records), planned_record), in.largest_record_bytes));
  }

  // Batches holding records: one per ring slot (being parsed or waiting for a worker), up to two
  // rounds of queues held back by the sequencer (end-of-epoch flags), the one being filled and
  // the one waiting for a free slot.
  {
    const uint64_t batches =
        SatAdd(static_cast<uint64_t>(in.ring_slots), SatAdd(SatMul(2, static_cast<uint64_t>(in.queues)), 2));
    const uint64_t records = SatMul(batches, static_cast<uint64_t>(in.batch_size));
    plan.batches_bytes = add("batches in flight",
                             "(" + Plural(in.ring_slots, "slot", "slots") + " + 2 x " +
                                 Plural(in.queues, "queue", "queues") + " + 2) x " +
                                 Plural(in.batch_size, "record", "records") +
                                 (in.batch_size_configured > in.batch_size
                                      ? " (every record of this shard's epoch, counted at start: fewer than batch.size " +
                                            std::to_string(in.batch_size_configured) + ")"
                                      : std::string()) +
                                 " x " + record_text,
                             SatMul(records, planned_record));
  }

  plan.workers_bytes = add("parse workers",
                           "up to " + Plural(in.max_workers, "worker", "workers") + " x " +
                               FormatBytes(in.worker_scratch_bytes) + " scratch",
                           SatMul(static_cast<uint64_t>(in.max_workers), in.worker_scratch_bytes));
  if (in.reader_check_bytes > 0) {
    plan.reader_checks_bytes = add("record checks (on_error: skip)",
                                   Plural(in.max_readers, "reader", "readers") + " x " +
                                       FormatBytes(in.reader_check_bytes) + " scratch (2 x the largest sampled row, parsed)",
                                   SatMul(static_cast<uint64_t>(in.max_readers), in.reader_check_bytes));
  }
  {
    const int64_t threads = in.max_readers + in.max_workers + kDaemonFixedThreads;
    plan.threads_bytes = add("threads",
                             "(at most " + Plural(in.max_readers, "reader", "readers") + " + " +
                                 Plural(in.max_workers, "worker", "workers") + " + " +
                                 std::to_string(kDaemonFixedThreads) + " others) x " + FormatBytes(kThreadBytes),
                             SatMul(static_cast<uint64_t>(threads), kThreadBytes));
  }
  const uint64_t fixed_without_margin = plan.fixed_bytes;
  plan.margin_bytes = add(kSafetyMarginPart, "max(5% of the budget, " + FormatBytes(kSafetyMarginMinBytes) + ")",
                          MarginFor(in.budget_bytes));

  // The elastic rest: the read-ahead.
  plan.read_ahead_memory_bytes = in.budget_bytes > plan.fixed_bytes ? in.budget_bytes - plan.fixed_bytes : 0;
  // Chunk tails: shorter than the record that did not fit, so at most the largest sampled
  // record (up to 16 KiB; with nothing sampled, 16 KiB). Like the other per-record bounds here,
  // it assumes the sample is representative.
  const bool chunks = in.shuffle_buffer <= 1;  // ReadAhead::UsesChunks, as above
  const uint64_t tail =
      !chunks ? 0
              : std::min(in.largest_record_bytes > 0 ? in.largest_record_bytes : kReadAheadOwnAllocationBytes,
                         kReadAheadOwnAllocationBytes);
  plan.read_ahead_bytes = PayloadFor(plan.read_ahead_memory_bytes, mean, tail);
  // reads_per_file is at most 64 (the config's bound): no overflow.
  const uint64_t queued =
      in.reads_per_file > 1 ? ReadQueue::MostBytes(static_cast<uint64_t>(in.reads_per_file), in.read_block_bytes) : 0;
  plan.min_read_ahead_bytes =
      SatMul(static_cast<uint64_t>(plan.open_files), SatAdd(in.min_stream_buffer_bytes, queued));
  std::string overhead_text = " + " + FormatBytes(kReadAheadRecordOverheadBytes) + " of bookkeeping per record (" +
                              FormatBytes(CeilDiv(SatMul(mean, 2), 3)) + " records assumed: 2/3 of the mean)";
  if (chunks) {
    overhead_text += ", in " + FormatBytes(kReadAheadChunkBytes) + " chunks with up to " + FormatBytes(tail) +
                     " unused at the end of each";
  }

  if (plan.read_ahead_bytes < plan.min_read_ahead_bytes || plan.read_ahead_bytes == 0) {
    const uint64_t min_memory = MemoryFor(std::max<uint64_t>(plan.min_read_ahead_bytes, 1), mean, tail);
    // Smallest budget B with B - margin(B) - fixed >= min_memory.
    const uint64_t needed = BudgetHolding(SatAdd(fixed_without_margin, min_memory));
    std::string message = (in.budget_source.empty() ? std::string("the memory budget") : in.budget_source) + " " +
                          FormatBytes(in.budget_bytes) + " is too small for this job:\n";
    for (const auto& line : plan.lines) {
      message += "  " + line.part + ": " + line.arithmetic + " = " + FormatBytes(line.bytes) + "\n";
    }
    const std::string per_file =
        queued > 0 ? "(" + FormatBytes(in.min_stream_buffer_bytes) + " min stream buffer + " +
                         std::to_string(in.reads_per_file + 1 + static_cast<int64_t>(ReadQueue::kMaxSpareBlocks)) +
                         " x " + FormatBytes(in.read_block_bytes) + " for " + std::to_string(in.reads_per_file) +
                         " queued reads (pipeline.reads_per_file), the block being read and hedged reads' spares)"
                   : FormatBytes(in.min_stream_buffer_bytes) + " min stream buffer";
    message += "  read-ahead at least: " + std::to_string(plan.open_files) +
               (plan.open_files == 1 ? " open file x " : " open files x ") + per_file +
               overhead_text + " = " +
               FormatBytes(min_memory) + " (the budget leaves " + FormatBytes(plan.read_ahead_memory_bytes) + ")\n";
    // What the user can lower, biggest first: a count already at 1, an auto one (at 1 here, as
    // PlanTuning lowers those before it gives up) or one whose least value opens as many files
    // (all the shard's) is no advice.
    struct Knob {
      std::string part;               // the plan's line it lowers: "ring", "shuffle buffer", ...
      std::vector<std::string> keys;  // the config keys that lower it
      uint64_t bytes;
      const char* note = "";  // after the keys: what else lowering them changes
      // "the ring (40.1 MiB: ring.slots, ring.slot_bytes or batch.size)"
      std::string Text() const {
        std::string text = "the " + part + " (" + FormatBytes(bytes) + ": ";
        for (size_t i = 0; i < keys.size(); ++i) {
          text += (i == 0 ? "" : i + 1 == keys.size() ? " or " : ", ") + keys[i];
        }
        return text + note + ")";
      }
    };
    constexpr const char* kOrder = "; changes the batch order";
    std::vector<std::string> file_keys;
    if (in.cycle_length > 1 && OpenFiles(1, lookahead, in.files) < plan.open_files) {
      file_keys.push_back("pipeline.cycle_length");
    }
    if (in.readers_fixed && in.max_readers > 1 && in.lookahead_files == 0 &&
        OpenFiles(in.cycle_length, 1, in.files) < plan.open_files) {
      file_keys.push_back("pipeline.readers");
    }
    // Keys that can go lower: the ring's slots down to 2, its slot size (ring.slot_bytes when
    // set, else sized from batch.size's records), a batch down to 1 record.
    std::vector<std::string> ring_keys, batch_keys;
    if (in.ring_slots > 2) ring_keys.push_back("ring.slots");
    if (in.ring_slot_bytes_fixed) {
      ring_keys.push_back("ring.slot_bytes");
    } else if (in.batch_size > 1) {
      ring_keys.push_back("batch.size");
    }
    if (in.batch_size > 1) batch_keys.push_back("batch.size");
    if (in.ring_slots > 2) batch_keys.push_back("ring.slots");
    std::vector<Knob> knobs = {{"ring", ring_keys, plan.ring_bytes}};
    if (in.shuffle_buffer > 1) knobs.push_back({"shuffle buffer", {"shuffle.buffer"}, plan.shuffle_bytes, kOrder});
    if (!file_keys.empty()) {
      knobs.push_back({"open files", file_keys, plan.open_files_bytes,
                       file_keys[0] != "pipeline.cycle_length" ? ""
                       : file_keys.size() == 1                 ? kOrder
                                                               : "; cycle_length changes the batch order"});
    }
    if (in.workers_fixed && in.max_workers > 1) {
      // What workers: 1 takes off: the other workers' scratch and threads (not the readers').
      knobs.push_back({"parse workers", {"pipeline.workers"},
                       SatMul(static_cast<uint64_t>(in.max_workers - 1), SatAdd(in.worker_scratch_bytes, kThreadBytes))});
    }
    knobs.push_back({"batches in flight", batch_keys, plan.batches_bytes});
    if (queued > 0) {  // a fixed reads_per_file above 1 (auto starts at 1)
      // Their share of the read-ahead's minimum, its bookkeeping per record included (with small
      // records the larger part): what reads_per_file: 1 would take off.
      const uint64_t without_queued = SatMul(static_cast<uint64_t>(plan.open_files), in.min_stream_buffer_bytes);
      const uint64_t queued_memory = min_memory - std::min(min_memory, MemoryFor(std::max<uint64_t>(without_queued, 1),
                                                                                   mean, tail));
      knobs.push_back({"queued reads", {"pipeline.reads_per_file"}, queued_memory,
                       "; 1 or auto: one read at a time until reads are slow"});
    }
    std::erase_if(knobs, [](const Knob& k) { return k.keys.empty() || k.bytes == 0; });
    std::stable_sort(knobs.begin(), knobs.end(), [](const Knob& a, const Knob& b) { return a.bytes > b.bytes; });
    const uint64_t mib = uint64_t{1} << 20;
    if (needed > UINT64_MAX - mib) {  // the sums saturated: no budget (at most 2^64 - 1 bytes) holds it
      message += "  needed more than any memory budget can be (2^64 bytes or more)" +
                 (knobs.empty() ? std::string() : "; lower " + knobs[0].Text());
      throw BudgetError(message);
    }
    // The margin is part of every budget (at least kSafetyMarginMinBytes): lowering the job's
    // parts cannot take the budget below it.
    const uint64_t needed_margin = MarginFor(needed);
    message += "  needed at least " + FormatBytes(needed) + " (" + std::to_string(needed) + " bytes: " +
               FormatBytes(needed - needed_margin) + " for the job + " + FormatBytes(needed_margin) +
               " safety margin: 5% of the budget, at least " + FormatBytes(kSafetyMarginMinBytes) +
               "); raise pipeline.memory_budget to at "
               "least " + ConfigMiB(needed) +
               (knobs.empty()       ? std::string()
                : knobs.size() == 1 ? ", or lower " + knobs[0].Text()
                                    : ", or lower " + knobs[0].Text() + " or " + knobs[1].Text());
    throw BudgetError(message, needed);
  }

  plan.lines.push_back({"read-ahead",
                        "what is left, for records read ahead of their turn: " + FormatBytes(plan.read_ahead_bytes) +
                            " of record bytes (at most " + FormatBytes(plan.max_stream_buffer_bytes()) +
                            " per open file x " + std::to_string(plan.open_files) + ")" + overhead_text,
                        plan.read_ahead_memory_bytes});
  return plan;
}

std::string MemoryPlan::Describe() const {
  std::string text = "memory budget " + FormatBytes(budget_bytes) +
                     (budget_source.empty() ? std::string() : " (" + budget_source + ")") + ":\n";
  for (const auto& line : lines) {
    text += "  " + line.part + ": " + line.arithmetic + " = " + FormatBytes(line.bytes) + "\n";
  }
  return text;
}

std::string MemoryPlan::Summary() const {
  // The fixed parts (every line but the safety margin and the last, the read-ahead), largest first.
  std::vector<MemoryPlanLine> fixed;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].part != kSafetyMarginPart) fixed.push_back(lines[i]);
  }
  std::stable_sort(fixed.begin(), fixed.end(),
                   [](const MemoryPlanLine& a, const MemoryPlanLine& b) { return a.bytes > b.bytes; });
  std::string largest;
  for (size_t i = 0; i < fixed.size() && i < 3; ++i) {
    largest += (i > 0 ? ", " : "") + fixed[i].part + " " + FormatBytes(fixed[i].bytes);
  }
  return "memory budget " + FormatBytes(budget_bytes) +
         (budget_source.empty() ? std::string() : " (" + budget_source + ")") + ": " +
         FormatBytes(fixed_bytes - margin_bytes) + " for the ring, buffers and threads (the largest: " + largest +
         "), " + FormatBytes(margin_bytes) + " kept as a safety margin; the read-ahead may use up to the other " +
         FormatBytes(read_ahead_memory_bytes) + " (" + FormatBytes(read_ahead_bytes) +
         " of record bytes, the rest their bookkeeping), as far as it helps: ringfeedctl status shows what it "
         "uses (pipeline.read_ahead_bytes); the whole plan at --log-level debug";
}

// ---- Process memory -----------------------------------------------------------------------------

ProcessMemory ReadProcessMemory(pid_t pid, const SystemPaths& paths) {
  const std::string file = paths.proc_root + "/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/status";
  std::ifstream in(file);
  if (!in) {
    throw std::runtime_error("cannot read " + file + ": " + std::strerror(errno) +
                             (pid != 0 ? " (has process " + std::to_string(pid) + " exited?)" : ""));
  }
  ProcessMemory memory;
  int found = 0;
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    uint64_t* field = key == "RssAnon"    ? &memory.rss_anon
                      : key == "RssFile"  ? &memory.rss_file
                      : key == "RssShmem" ? &memory.rss_shmem
                      : key == "VmRSS"    ? &memory.vm_rss
                      : key == "VmHWM"    ? &memory.vm_hwm
                                          : nullptr;
    if (field == nullptr) continue;
    std::istringstream value(line.substr(colon + 1));
    uint64_t kib = 0;
    std::string unit;
    if (!(value >> kib >> unit) || unit != "kB") {
      throw std::runtime_error(file + ": cannot parse '" + line + "' (expected '<n> kB')");
    }
    *field = kib * 1024;
    ++found;
  }
  if (found < 5) {
    throw std::runtime_error(file + " has no RssAnon/RssFile/RssShmem/VmRSS/VmHWM lines (a kernel before 4.5, "
                             "or a kernel thread)");
  }
  return memory;
}

uint64_t PrivateRssBytes() {
  try {
    return ReadProcessMemory().private_rss();
  } catch (const std::exception&) {
    return 0;
  }
}

uint64_t ShuffleHeldBytes(uint64_t records, uint64_t payload_bytes) {
  return SatAdd(payload_bytes, SatMul(records, kRecordOverheadBytes));
}

std::string OverBudgetWarning(const MemoryPlan& plan, const MemoryInUse& used, int64_t shuffle_buffer) {
  const uint64_t total = SatAdd(used.private_rss, used.segment_bytes);
  if (plan.budget_bytes == 0 || total <= plan.budget_bytes) return "";
  std::string text = "memory over pipeline.memory_budget " + FormatBytes(plan.budget_bytes) + ": private RSS " +
                     FormatBytes(used.private_rss) + " + segment " + FormatBytes(used.segment_bytes) + " = " +
                     FormatBytes(total) + "; ";
  const std::string raise = "raise pipeline.memory_budget to at least " + ConfigMiB(total);
  const uint64_t shuffle_held = ShuffleHeldBytes(used.shuffle_records, used.shuffle_bytes);
  if (shuffle_buffer > 1 && used.shuffle_records > 0 && shuffle_held > plan.shuffle_bytes) {
    const uint64_t mean = CeilDiv(used.shuffle_bytes, used.shuffle_records);
    // The advice holds for the records to come if they are as large as the largest seen: the
    // memory in use now is only a lower bound (raised to it, the job stops again a few records
    // later while larger records keep filling the buffer).
    const uint64_t each = std::max(mean, used.largest_shuffle_record);
    const std::string size = each > mean ? "the largest so far, " + FormatBytes(each) : FormatBytes(each);
    const uint64_t fit = plan.shuffle_bytes / (each + kRecordOverheadBytes);
    // shuffle.buffer records of that size in the buffer's share, the other parts as planned.
    const uint64_t wanted_share = SatMul(static_cast<uint64_t>(shuffle_buffer), each + kRecordOverheadBytes);
    const uint64_t enough = std::max(
        total, BudgetHoldingMore(plan.budget_bytes, wanted_share - std::min(wanted_share, plan.shuffle_bytes)));
    return text + "the shuffle buffer holds " + Plural(static_cast<int64_t>(used.shuffle_records), "record", "records") +
           " of " + FormatBytes(used.shuffle_bytes) + " (" + FormatBytes(mean) + " each on average), where the memory " +
           "plan gave it " + FormatBytes(plan.shuffle_bytes) + " for shuffle.buffer " + std::to_string(shuffle_buffer) +
           " from the records sampled at start: the records later in the files are larger; raise " +
           "pipeline.memory_budget to at least " + ConfigMiB(enough) + " (room for shuffle.buffer " +
           std::to_string(shuffle_buffer) + " records of " + size + ")" +
           (fit >= 2 ? ", or lower shuffle.buffer to " + std::to_string(fit) + " (what its share holds of records of " +
                           size + ")"
                     : ", or lower shuffle.buffer (its share does not hold 2 records of " + size + ")");
  }
  return text + "the memory plan counts records at 1.5 x the mean of those sampled at start, and larger records " +
         "later in the files hold more (in batches being made, read ahead); " + raise +
         " (`ringfeedctl check` reads every record and says the largest)";
}

FileDescriptorPlan PlanFileDescriptors(int64_t open_files, bool queued_reads, uint64_t connections) {
  const uint64_t files = static_cast<uint64_t>(std::max<int64_t>(open_files, 1));
  FileDescriptorPlan plan;
  plan.needed = SatAdd(SatMul(files, queued_reads ? 2 : 1), SatAdd(connections, kOtherFileDescriptors));
  plan.least = SatAdd(1, SatAdd(connections, kOtherFileDescriptors));  // PlanTuning sets the job's
  plan.arithmetic = Plural(static_cast<int64_t>(files), "data file", "data files") +
                    (queued_reads ? " x 2 (each with its io_uring queue)" : "") + " + " +
                    std::to_string(connections) + " control connections + " + std::to_string(kOtherFileDescriptors) +
                    " others = " + std::to_string(plan.needed);
  return plan;
}

std::string OpenFileLimitProblem(const FileDescriptorPlan& fds, uint64_t limit, uint64_t hard) {
  if (fds.needed <= limit) return "";
  std::string text = "this job may hold " + std::to_string(fds.needed) + " file descriptors at once (" +
                     fds.arithmetic + "), more than the open-file limit " + std::to_string(limit) +
                     " (RLIMIT_NOFILE, hard limit " + std::to_string(hard) +
                     "): raise it (`ulimit -n`, LimitNOFILE= in the systemd unit)";
  if (fds.least > limit) {
    return text + "; no config fits under it: with the fewest data files this job can open (readers 1, " +
           "cycle_length 1, reads_per_file 1) it still needs " + std::to_string(fds.least);
  }
  return fds.lower.empty() ? text : text + ", or " + fds.lower;
}

namespace {
// 512 KiB in blocks below glibc's default mmap threshold (128 KiB), so that they are freed into
// the heap. Not written to: they reserve address space and commit charge, not resident memory
// (the memory figures in docs/benchmarks.md stay as they were; only the blocks' headers are
// touched).
constexpr size_t kOomReserveBlocks = 8;
constexpr size_t kOomReserveBlockBytes = 64u << 10;
std::atomic<void**> oom_reserve{nullptr};
char oom_message[512] = "ringfeedd: out of memory, and again in its handler; stopping without cleanup (exit 1)";
}  // namespace

void ArmOomReserve() {
  if (oom_reserve.load() != nullptr) return;
  auto** blocks = static_cast<void**>(std::calloc(kOomReserveBlocks, sizeof(void*)));
  if (blocks == nullptr) return;
  for (size_t i = 0; i < kOomReserveBlocks; ++i) blocks[i] = std::malloc(kOomReserveBlockBytes);
  const std::string message = "ringfeedd: " + OutOfMemory(std::bad_alloc()) +
                              " where it could not be reported; stopping without cleanup (exit 1)";
  std::snprintf(oom_message, sizeof oom_message, "%s", message.c_str());
  oom_reserve.store(blocks);
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc_s now: the terminate handler below must not need memory for it
  std::set_terminate([] {
    if (const std::exception_ptr uncaught = std::current_exception()) {
      try {
        std::rethrow_exception(uncaught);
      } catch (const std::bad_alloc&) {
        // Where: the stack of the throw (terminate runs before any unwinding when no handler
        // is found), raw frames to resolve with addr2line -e ringfeedd for a bug report.
        void* frames[48];
        static const char kStack[] = "ringfeedd: the thread's stack (for a bug report):\n";
        if (::write(STDERR_FILENO, kStack, sizeof kStack - 1) > 0) {
          ::backtrace_symbols_fd(frames, ::backtrace(frames, 48), STDERR_FILENO);
        }
        DieOutOfMemory("a thread, on its way to or past its handler");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ringfeedd: internal error: uncaught exception: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "ringfeedd: internal error: uncaught exception of an unknown type\n");
      }
    }
    std::abort();
  });
}

void ReleaseOomReserve() {
  void** blocks = oom_reserve.exchange(nullptr);
  if (blocks == nullptr) return;
  for (size_t i = 0; i < kOomReserveBlocks; ++i) std::free(blocks[i]);
  std::free(static_cast<void*>(blocks));
}

void DieOutOfMemory(const char* where) {
  auto write_all = [](const char* text) {
    for (size_t left = std::strlen(text); left > 0;) {
      const ssize_t n = ::write(STDERR_FILENO, text, left);
      if (n <= 0) return;
      text += n;
      left -= static_cast<size_t>(n);
    }
  };
  write_all(oom_message);
  write_all(" [in ");
  write_all(where);
  write_all("]\n");
  ::_exit(1);
}

std::string OutOfMemory(const std::exception& error) {
  rlimit limit{};
  const bool limited = ::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
  return std::string("out of memory (") + error.what() +
         (limited ? "; this process's address space is limited to " + FormatBytes(limit.rlim_cur) + ", ulimit -v)"
                  : std::string("; the system, its overcommit policy or the cgroup's memory.max ran out)"));
}

std::string ThreadStartFailure(const std::system_error& error) {
  std::string limits;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    limits += "address space " + FormatBytes(limit.rlim_cur) + " (ulimit -v)";
    // Each thread's stack is that large (glibc's default): a few large ones fill the space.
    if (rlimit stack{}; ::getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY &&
        stack.rlim_cur > (uint64_t{64} << 20)) {
      limits += ", of which each thread's stack takes " + FormatBytes(stack.rlim_cur) + " (ulimit -s)";
    }
  }
  // RLIMIT_NPROC does not bind root.
  if (::geteuid() != 0 && ::getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    limits += (limits.empty() ? "" : ", ") + std::to_string(limit.rlim_cur) +
              " processes and threads of this user (ulimit -u)";
  }
  return "cannot start a thread: " + error.code().message() +
         (limits.empty() ? std::string(" (no address-space or process limit is set: the system ran out)")
                         : " (this process's limits: " + limits + ")");
}

}  // namespace ringfeed
