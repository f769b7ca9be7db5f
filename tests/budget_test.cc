// daemon/budget.h: CPU budget detection (cgroup v1, v2 and hybrid trees built in temp dirs, the
// real machine, a forked child with a narrowed affinity mask, a real cgroup v1 child), the
// default memory budget, the memory plan's arithmetic against hand-computed numbers and its
// error text, and /proc/<pid>/status reading against real allocations and shared memory.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <barrier>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "daemon/budget.h"
#include "daemon/read_ahead.h"
#include "tests/test_support.h"

#ifdef RINGFEED_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

namespace ringfeed {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * 1024;
constexpr uint64_t GiB = 1024 * MiB;

// A /proc + /sys/fs/cgroup look-alike: {relative path: content}.
SystemPaths MakeTree(const TempDir& dir, const std::map<std::string, std::string>& files) {
  for (const auto& [path, content] : files) {
    const fs::path full = dir.path() / path;
    fs::create_directories(full.parent_path());
    std::ofstream(full) << content;
  }
  fs::create_directories(dir.path() / "proc/self");
  fs::create_directories(dir.path() / "cgroup");
  return {(dir.path() / "proc").string(), (dir.path() / "cgroup").string()};
}

int64_t RealAffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  return CPU_COUNT(&set);
}

// What `nproc` prints (the affinity mask, without OMP_* overrides).
int64_t Nproc() {
  FILE* p = popen("env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc", "r");
  REQUIRE(p != nullptr);
  long n = 0;
  REQUIRE(std::fscanf(p, "%ld", &n) == 1);
  pclose(p);
  return n;
}

// Runs `body` in a forked child and returns what it returned (or "ERROR: ..." if it threw).
std::string InChild(const std::function<std::string()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {
      out = std::string("ERROR: ") + e.what();
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) _exit(2);
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return out;
}

// "cores|source" of DetectCpuBudget in the calling process.
std::string CoresAndSource(const SystemPaths& paths = {}) {
  const CpuBudget b = DetectCpuBudget(paths);
  char text[64];
  std::snprintf(text, sizeof text, "%.6f|", b.cores);
  return text + b.source;
}

// ---- CPU: cgroup trees -------------------------------------------------------------------------

TEST_CASE("cgroup v2: the smallest cpu.max on the way up wins", "[cpu]") {
  TempDir dir;
  SECTION("the parent's quota caps an unlimited child") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "0::/job/worker\n"},
                                      {"cgroup/cgroup.controllers", "cpu memory\n"},
                                      {"cgroup/job/cpu.max", "50000 100000\n"},
                                      {"cgroup/job/worker/cpu.max", "max 100000\n"}});
    const CpuBudget b = DetectCpuBudget(paths);
    CHECK(b.cores == 0.5);
    REQUIRE(b.quota_cores);
    CHECK(*b.quota_cores == 0.5);
    CHECK(b.affinity_cpus == RealAffinityCpus());
    CHECK(b.source == "cgroup v2 cpu.max 50000 100000 = 0.5 cores at " + paths.cgroup_root + "/job (" +
                          std::to_string(RealAffinityCpus()) + (RealAffinityCpus() == 1 ? " CPU" : " CPUs") +
                          " in the affinity mask)");
  }
  SECTION("a child's smaller quota wins over its parent's") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "0::/job/worker\n"},
                                      {"cgroup/cgroup.controllers", "cpu\n"},
                                      {"cgroup/job/cpu.max", "50000 100000\n"},
                                      {"cgroup/job/worker/cpu.max", "25000 100000\n"}});
    const CpuBudget b = DetectCpuBudget(paths);
    CHECK(b.cores == 0.25);
    CHECK(b.quota_source == "cgroup v2 cpu.max 25000 100000 = 0.25 cores at " + paths.cgroup_root + "/job/worker");
  }
  SECTION("a period other than 100 ms") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "0::/\n"},
                                      {"cgroup/cgroup.controllers", "cpu\n"},
                                      {"cgroup/cpu.max", "3000 10000\n"}});
    CHECK(DetectCpuBudget(paths).cores == Approx(0.3));
  }
  SECTION("a quota above the affinity mask: the mask wins, the quota is named") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "0::/big\n"},
                                      {"cgroup/cgroup.controllers", "cpu\n"},
                                      {"cgroup/big/cpu.max", "100000000 100000\n"}});  // 1000 cores
    const CpuBudget b = DetectCpuBudget(paths);
    CHECK(b.cores == static_cast<double>(RealAffinityCpus()));
    CHECK(*b.quota_cores == 1000);
    const int64_t n = RealAffinityCpus();
    CHECK(b.source == std::to_string(n) + (n == 1 ? " CPU" : " CPUs") +
                          " in the affinity mask (cgroup v2 cpu.max 100000000 100000 = 1000 cores at " +
                          paths.cgroup_root + "/big is not lower)");
  }
}

TEST_CASE("cgroup v2: 'max', missing files and no cgroup info mean no quota", "[cpu]") {
  TempDir dir;
  std::map<std::string, std::string> files = {{"cgroup/cgroup.controllers", "cpu\n"}};
  SECTION("max everywhere") {
    files["proc/self/cgroup"] = "0::/a/b\n";
    files["cgroup/a/cpu.max"] = "max 100000\n";
    files["cgroup/a/b/cpu.max"] = "max 100000\n";
  }
  SECTION("no cpu.max files (cpu controller not enabled)") {
    files["proc/self/cgroup"] = "0::/a/b\n";
    files["cgroup/a/b/cgroup.procs"] = "";
  }
  SECTION("no /proc/self/cgroup") {}
  SECTION("garbage in cpu.max") {
    files["proc/self/cgroup"] = "0::/\n";
    files["cgroup/cpu.max"] = "lots\n";
  }
  const auto paths = MakeTree(dir, files);
  const CpuBudget b = DetectCpuBudget(paths);
  CHECK_FALSE(b.quota_cores);
  CHECK(b.cores == static_cast<double>(RealAffinityCpus()));
  CHECK(b.source.find("in the affinity mask (no cgroup CPU quota)") != std::string::npos);
}

TEST_CASE("cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us, walking up", "[cpu]") {
  TempDir dir;
  SECTION("cpu,cpuacct hierarchy, quota on the job's cgroup") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "5:memory:/\n4:cpu,cpuacct:/kubepods/pod1\n0::/\n"},
                                      {"cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"},
                                      {"cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"},
                                      {"cgroup/cpu,cpuacct/kubepods/cpu.cfs_quota_us", "-1\n"},
                                      {"cgroup/cpu,cpuacct/kubepods/cpu.cfs_period_us", "100000\n"},
                                      {"cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us", "75000\n"},
                                      {"cgroup/cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us", "100000\n"}});
    const CpuBudget b = DetectCpuBudget(paths);
    CHECK(b.cores == 0.75);
    CHECK(b.quota_source == "cgroup v1 cpu.cfs_quota_us 75000 / cpu.cfs_period_us 100000 = 0.75 cores at " +
                                paths.cgroup_root + "/cpu,cpuacct/kubepods/pod1");
  }
  SECTION("separate cpu hierarchy (this machine's layout), quota on the parent") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "2:cpuacct:/a/b\n1:cpu:/a/b\n"},
                                      {"cgroup/cpu/a/cpu.cfs_quota_us", "40000\n"},
                                      {"cgroup/cpu/a/cpu.cfs_period_us", "100000\n"},
                                      {"cgroup/cpu/a/b/cpu.cfs_quota_us", "-1\n"},
                                      {"cgroup/cpu/a/b/cpu.cfs_period_us", "100000\n"}});
    const CpuBudget b = DetectCpuBudget(paths);
    CHECK(b.cores == 0.4);
    CHECK(b.quota_source.find("at " + paths.cgroup_root + "/cpu/a") != std::string::npos);
  }
  SECTION("-1 everywhere is no quota") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "1:cpu:/x\n"},
                                      {"cgroup/cpu/x/cpu.cfs_quota_us", "-1\n"},
                                      {"cgroup/cpu/x/cpu.cfs_period_us", "100000\n"}});
    CHECK_FALSE(DetectCpuBudget(paths).quota_cores);
  }
  SECTION("a container's own cgroup mounted as the root (path absent under the mount)") {
    const auto paths = MakeTree(dir, {{"proc/self/cgroup", "1:cpu,cpuacct:/docker/0123abcd\n"},
                                      {"cgroup/cpu,cpuacct/cpu.cfs_quota_us", "150000\n"},
                                      {"cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}});
    const CpuBudget b = DetectCpuBudget(paths);
    REQUIRE(b.quota_cores);
    CHECK(*b.quota_cores == 1.5);
    CHECK(b.cores == std::min(1.5, static_cast<double>(RealAffinityCpus())));
    CHECK(b.quota_source.find("= 1.5 cores at " + paths.cgroup_root + "/cpu,cpuacct") != std::string::npos);
  }
}

TEST_CASE("hybrid hierarchy: v1 cpu and v2 unified are both read, the smaller quota wins", "[cpu]") {
  TempDir dir;
  std::map<std::string, std::string> files = {{"proc/self/cgroup", "3:cpu:/svc\n0::/svc\n"},
                                              {"cgroup/unified/cgroup.controllers", ""},
                                              {"cgroup/cpu/svc/cpu.cfs_quota_us", "60000\n"},
                                              {"cgroup/cpu/svc/cpu.cfs_period_us", "100000\n"}};
  SECTION("v2 lower") {
    files["cgroup/unified/svc/cpu.max"] = "30000 100000\n";
    const auto paths = MakeTree(dir, files);
    const CpuBudget b = DetectCpuBudget(paths);
    CHECK(b.cores == 0.3);
    CHECK(b.quota_source == "cgroup v2 cpu.max 30000 100000 = 0.3 cores at " + paths.cgroup_root + "/unified/svc");
  }
  SECTION("v1 lower") {
    files["cgroup/unified/svc/cpu.max"] = "max 100000\n";
    const auto paths = MakeTree(dir, files);
    const CpuBudget b = DetectCpuBudget(paths);
    CHECK(b.cores == 0.6);
    CHECK(b.quota_source.rfind("cgroup v1 cpu.cfs_quota_us 60000", 0) == 0);
  }
}

// ---- CPU: the real machine -----------------------------------------------------------------------

TEST_CASE("the real machine: affinity = nproc, cores = min(nproc, quota)", "[cpu][real]") {
  const CpuBudget b = DetectCpuBudget();
  const int64_t nproc = Nproc();
  INFO("source: " << b.source);
  CHECK(b.affinity_cpus == nproc);
  if (b.quota_cores) {
    CHECK(b.cores == std::min(*b.quota_cores, static_cast<double>(nproc)));
  } else {
    CHECK(b.cores == static_cast<double>(nproc));
    CHECK(b.source == std::to_string(nproc) + (nproc == 1 ? " CPU" : " CPUs") +
                          " in the affinity mask (no cgroup CPU quota)");
  }
  WARN("this machine: cpu budget " << b.cores << " cores: " << b.source);
}

TEST_CASE("a forked child pinned to one CPU sees a budget of 1 core", "[cpu][real]") {
  const std::string out = InChild([] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return std::string("ERROR: sched_getaffinity");
    int first = 0;
    while (!CPU_ISSET(first, &set)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) return std::string("ERROR: sched_setaffinity");
    return CoresAndSource();
  });
  INFO(out);
  const CpuBudget parent = DetectCpuBudget();
  if (parent.quota_cores && *parent.quota_cores < 1) {
    CHECK(std::stod(out) == *parent.quota_cores);
  } else {
    CHECK(std::stod(out) == 1.0);
    CHECK(out.find("|1 CPU in the affinity mask") != std::string::npos);
  }
}

// Creates a cgroup v1 cpu child with a 0.5-core quota, moves a forked child into it and checks
// what DetectCpuBudget says there. Needs root and a writable v1 cpu hierarchy.
TEST_CASE("a real cgroup v1 cpu child with a quota", "[.cgroup_v1]") {
  std::string own_path;
  {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
      const auto a = line.find(':'), b = line.find(':', a + 1);
      std::string list = "," + line.substr(a + 1, b - a - 1) + ",";
      if (list.find(",cpu,") != std::string::npos) own_path = line.substr(b + 1);
    }
  }
  std::string hierarchy;
  for (const char* name : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    if (fs::exists(std::string(name) + "/cpu.cfs_quota_us")) {
      hierarchy = name;
      break;
    }
  }
  if (own_path.empty() || hierarchy.empty()) {
    ringfeed::testing::Skip("no cgroup v1 cpu hierarchy here");
    return;
  }
  const std::string dir =
      hierarchy + (own_path == "/" ? "" : own_path) + "/ringfeed-budget-test-" + std::to_string(getpid());
  if (mkdir(dir.c_str(), 0755) != 0) {
    ringfeed::testing::Skip("cannot create " + dir + ": " + std::strerror(errno) +
                            " (needs root and a writable cgroup v1 hierarchy)");
    return;
  }
  struct Remove {
    std::string dir;
    ~Remove() {
      // The child has exited; its cgroup empties as soon as it is reaped.
      for (int i = 0; i < 100 && rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i) usleep(10000);
    }
  } remove{dir};
  {
    std::ofstream period(dir + "/cpu.cfs_period_us");
    period << "100000\n";
  }
  {
    std::ofstream quota(dir + "/cpu.cfs_quota_us");
    quota << "50000\n";
    quota.flush();
    if (!quota) {
      ringfeed::testing::Skip("cannot set cpu.cfs_quota_us in " + dir);
      return;
    }
  }
  const std::string out = InChild([&] {
    std::ofstream procs(dir + "/cgroup.procs");
    procs << getpid() << "\n";
    procs.flush();
    if (!procs) return std::string("ERROR: cannot join ") + dir;
    return CoresAndSource();
  });
  INFO(out);
  REQUIRE(out.rfind("ERROR", 0) != 0);
  const double expected = std::min(0.5, static_cast<double>(RealAffinityCpus()));
  CHECK(std::stod(out) == expected);
  CHECK(out.find("cgroup v1 cpu.cfs_quota_us 50000 / cpu.cfs_period_us 100000 = 0.5 cores at " + dir) !=
        std::string::npos);
}

// ---- Memory: the default budget ----------------------------------------------------------------

TEST_CASE("default memory budget: min(2 GiB, 1/4 of the limit)", "[memory]") {
  TempDir dir;
  std::map<std::string, std::string> files = {{"proc/meminfo", "MemTotal:        8388608 kB\nMemFree: 1 kB\n"}};
  SECTION("cgroup v2 memory.max on the parent, 'max' on the child") {
    files["proc/self/cgroup"] = "0::/job/w\n";
    files["cgroup/cgroup.controllers"] = "memory\n";
    files["cgroup/job/memory.max"] = "1073741824\n";
    files["cgroup/job/w/memory.max"] = "max\n";
    const auto paths = MakeTree(dir, files);
    const MemoryBudgetDefault d = DefaultMemoryBudget(paths);
    CHECK(d.limit_bytes == 1 * GiB);
    CHECK(d.bytes == 256 * MiB);
    CHECK(d.source == "1/4 of cgroup v2 memory.max 1.0 GiB at " + paths.cgroup_root + "/job = 256.0 MiB");
  }
  SECTION("cgroup v1 'unlimited' is ignored: MemTotal 12 GiB / 4 is above the 2 GiB cap") {
    files["proc/meminfo"] = "MemTotal:        12582912 kB\n";
    files["proc/self/cgroup"] = "4:memory:/process_api/abc\n";
    files["cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712\n";
    files["cgroup/memory/process_api/abc/memory.limit_in_bytes"] = "9223372036854771712\n";
    const auto paths = MakeTree(dir, files);
    const MemoryBudgetDefault d = DefaultMemoryBudget(paths);
    CHECK(d.limit_bytes == 12 * GiB);
    CHECK(d.bytes == 2 * GiB);
    CHECK(d.source == "min(2.0 GiB cap, 1/4 of MemTotal 12.0 GiB = 3.0 GiB); no cgroup memory limit");
  }
  SECTION("MemTotal 8 GiB: a quarter is exactly the cap") {
    const MemoryBudgetDefault d = DefaultMemoryBudget(MakeTree(dir, files));
    CHECK(d.bytes == 2 * GiB);
    CHECK(d.source == "1/4 of MemTotal 8.0 GiB = 2.0 GiB; no cgroup memory limit");
  }
  SECTION("cgroup v1 limit below MemTotal") {
    files["proc/self/cgroup"] = "4:memory:/job\n";
    files["cgroup/memory/job/memory.limit_in_bytes"] = "536870912\n";
    const auto paths = MakeTree(dir, files);
    const MemoryBudgetDefault d = DefaultMemoryBudget(paths);
    CHECK(d.limit_bytes == 512 * MiB);
    CHECK(d.bytes == 128 * MiB);
    CHECK(d.source.rfind("1/4 of cgroup v1 memory.limit_in_bytes 512.0 MiB at ", 0) == 0);
  }
  SECTION("a cgroup limit above MemTotal: MemTotal wins") {
    files["proc/meminfo"] = "MemTotal:        4194304 kB\n";
    files["proc/self/cgroup"] = "0::/\n";
    files["cgroup/cgroup.controllers"] = "memory\n";
    files["cgroup/memory.max"] = "68719476736\n";  // 64 GiB
    const auto paths = MakeTree(dir, files);
    const MemoryBudgetDefault d = DefaultMemoryBudget(paths);
    CHECK(d.limit_bytes == 4 * GiB);
    CHECK(d.bytes == 1 * GiB);
    CHECK(d.source.find("is not lower") != std::string::npos);
  }
  SECTION("a large limit: capped at 2 GiB") {
    files["proc/meminfo"] = "MemTotal:        67108864 kB\n";  // 64 GiB
    files["proc/self/cgroup"] = "0::/\n";
    files["cgroup/cgroup.controllers"] = "memory\n";
    files["cgroup/memory.max"] = "17179869184\n";  // 16 GiB
    const MemoryBudgetDefault d = DefaultMemoryBudget(MakeTree(dir, files));
    CHECK(d.limit_bytes == 16 * GiB);
    CHECK(d.bytes == kMemoryBudgetCap);
  }
}

TEST_CASE("default memory budget on the real machine", "[memory][real]") {
  const MemoryBudgetDefault d = DefaultMemoryBudget();
  uint64_t mem_total_kib = 0;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    in >> key >> mem_total_kib;
    REQUIRE(key == "MemTotal:");
  }
  CHECK(d.limit_bytes <= mem_total_kib * 1024);
  CHECK(d.limit_bytes > 0);
  CHECK(d.bytes == std::min(kMemoryBudgetCap, d.limit_bytes / 4));
  WARN("this machine: default memory budget " << FormatBytes(d.bytes) << ": " << d.source);
}

// ---- Memory plan ----------------------------------------------------------------------------------

// A gzip job: 10 ring slots of 4 MiB, 2 KiB records (largest 9 KiB), shuffle.buffer 10000.
MemoryInputs ExampleInputs(uint64_t budget) {
  MemoryInputs in;
  in.budget_bytes = budget;
  in.ring_slots = 10;
  in.ring_slot_bytes = 4 * MiB;
  in.ring_segment_bytes = 10 * 4 * MiB + 64 * KiB;
  in.baseline_private_rss_bytes = 10 * MiB;
  in.cycle_length = 4;
  in.files = 100;
  in.compressed = true;
  in.reader_buffer_bytes = 1 * MiB;
  in.min_stream_buffer_bytes = 256 * KiB;
  in.mean_record_bytes = 2048;
  in.largest_record_bytes = 9216;
  in.shuffle_buffer = 10000;
  in.batch_size = 32;
  in.queues = 1;
  in.max_readers = 4;
  in.max_workers = 2;
  in.worker_scratch_bytes = 1 * MiB;
  return in;
}

// PlanMemory's error for `in` ("" when it fits).
std::string PlanError(const MemoryInputs& in) {
  try {
    PlanMemory(in);
  } catch (const BudgetError& e) {
    return e.what();
  }
  return "";
}

// The budget an error names: "needed at least 113.1 MiB (118623232 bytes: ...); raise ...".
uint64_t NeededBytes(const std::string& message) {
  const auto pos = message.find(" bytes: ");
  REQUIRE(pos != std::string::npos);
  return std::stoull(message.substr(message.rfind('(', pos) + 1));
}

TEST_CASE("PlanMemory: every part, hand-computed", "[plan]") {
  const MemoryPlan plan = PlanMemory(ExampleInputs(256 * MiB));
  CHECK(plan.budget_bytes == 268'435'456);
  CHECK(plan.open_files == 8);                      // cycle_length 4 + 4 readers' files opened ahead
  CHECK(plan.ring_bytes == 42'008'576);             // 10 x 4 MiB + 64 KiB
  CHECK(plan.baseline_bytes == 10'485'760);
  // Per open file: 1 MiB window + 1 MiB compressed input + 96 KiB inflate state + (9216 + 224).
  CHECK(plan.open_files_bytes == 8 * (1'048'576 + 1'048'576 + 98'304 + 9'440));
  // Per record: ceil(1.5 x 2048) + 80 = 3152; + the largest once.
  CHECK(plan.shuffle_bytes == 10'000 * 3'152 + 9'216);
  // (10 slots + 2 x 1 queue + 2) x 32 records x 3152.
  CHECK(plan.batches_bytes == 14 * 32 * 3'152);
  CHECK(plan.workers_bytes == 2 * MiB);
  CHECK(plan.threads_bytes == (4 + 2 + 4) * 256 * KiB);
  CHECK(plan.margin_bytes == 13'421'773);           // ceil(256 MiB / 20) > 8 MiB
  CHECK(plan.fixed_bytes == 121'215'181);
  CHECK(plan.read_ahead_memory_bytes == 268'435'456 - 121'215'181);
  // Payload P with P + P x 1.5 x 224 / 2048 <= 147'220'275: floor(147'220'275 x 4096 / 4768).
  CHECK(plan.read_ahead_bytes == 126'471'108);
  CHECK(plan.min_read_ahead_bytes == 8 * 256 * KiB);
  CHECK(plan.max_stream_buffer_bytes() == 126'471'108 / 8);

  const std::string text = plan.Describe();
  INFO(text);
  CHECK(text.rfind("memory budget 256.0 MiB (pipeline.memory_budget):\n", 0) == 0);
  CHECK(text.find("  ring: 10 slots x 4.0 MiB + 64.0 KiB superblock = 40.1 MiB\n") != std::string::npos);
  CHECK(text.find("  daemon before the pipeline: private RSS (RssAnon) at start = 10.0 MiB\n") != std::string::npos);
  CHECK(text.find("  open files: 8 (pipeline.cycle_length 4 + 4 files opened ahead) x (1.0 MiB window + 1.0 MiB "
                  "compressed input + 96.0 KiB inflate state + 9.2 KiB largest record beyond the stream buffer) = "
                  "16.8 MiB\n") != std::string::npos);
  CHECK(text.find("  shuffle buffer: 10000 records x (1.5 x 2.0 KiB mean + 80 B) + 9.0 KiB largest = 30.1 MiB\n") !=
        std::string::npos);
  CHECK(text.find("  batches in flight: (10 slots + 2 x 1 queue + 2) x 32 records x (1.5 x 2.0 KiB mean + 80 B) = "
                  "1.3 MiB\n") != std::string::npos);
  CHECK(text.find("  parse workers: up to 2 workers x 1.0 MiB scratch = 2.0 MiB\n") != std::string::npos);
  CHECK(text.find("  threads: (at most 4 readers + 2 workers + 4 others) x 256.0 KiB = 2.5 MiB\n") != std::string::npos);
  CHECK(text.find("  safety margin: max(5% of the budget, 8.0 MiB) = 12.8 MiB\n") != std::string::npos);
  CHECK(text.find("  read-ahead: what is left, for records read ahead of their turn: 120.6 MiB of record bytes (at "
                  "most 15.1 MiB per open file x 8) + 224 B of bookkeeping per record (1.3 KiB records assumed: 2/3 "
                  "of the mean) = 140.4 MiB\n") != std::string::npos);
  // The one line logged at info level: the fixed lines above but the margin, the margin, the read-ahead.
  CHECK(plan.Summary() ==
        "memory budget 256.0 MiB (pipeline.memory_budget): 102.8 MiB for the ring, buffers and threads (the "
        "largest: ring 40.1 MiB, shuffle buffer 30.1 MiB, open files 16.8 MiB), 12.8 MiB kept as a safety margin; "
        "the read-ahead may use up to the other 140.4 MiB (120.6 MiB of record bytes, the rest their bookkeeping), "
        "as far as it helps: ringfeedctl status shows what it uses (pipeline.read_ahead_bytes); the whole plan at "
        "--log-level debug");
  // No shuffling: the line says so instead of "1 record".
  MemoryInputs unshuffled = ExampleInputs(256 * MiB);
  unshuffled.shuffle_buffer = 0;
  CHECK_THAT(PlanMemory(unshuffled).Describe(),
             Catch::Contains("  shuffle buffer: none (shuffle.buffer 0), the one record passing through: 1 record x "));
}

TEST_CASE("PlanMemory: plain files, few files, a record bigger than the window", "[plan]") {
  MemoryInputs in = ExampleInputs(256 * MiB);
  in.compressed = false;
  in.files = 3;                      // fewer than cycle_length + lookahead: all open
  in.largest_record_bytes = 3 * MiB;  // the window grows to it
  in.shuffle_buffer = 0;              // one record passes through; records share read-ahead chunks
  const MemoryPlan plan = PlanMemory(in);
  CHECK(plan.open_files == 3);
  // + 128 KiB of chunk tails per file: without a shuffle buffer, records travel in chunks.
  CHECK(plan.open_files_bytes == 3 * ((3 * MiB + 16) + (3 * MiB + 224) + 128 * KiB));
  CHECK(plan.shuffle_bytes == 3'152 + 3 * MiB);
  CHECK(plan.Describe().find("open files: 3 (all files) x (3.0 MiB window + 3.0 MiB largest record beyond the "
                             "stream buffer + 128.0 KiB read-ahead chunk tails) = ") != std::string::npos);
  // Records over 16 KiB get their own allocation: a chunk's unused tail is under 16 KiB, so a
  // 64 KiB chunk holds >= 48 KiB of payload: P x 64/48 + P x 1.5 x 224 / 2048 <= left, i.e.
  // P = floor(left x 4096 x 48 / (4096 x 64 + 672 x 48)).
  const uint64_t left = plan.read_ahead_memory_bytes;
  CHECK(plan.read_ahead_bytes == left * 4096 * 48 / (4096 * 64 + 672 * 48));
  CHECK(plan.Describe().find("records assumed: 2/3 of the mean), in 64.0 KiB chunks with up to 16.0 KiB unused at "
                             "the end of each = ") != std::string::npos);
}

TEST_CASE("PlanMemory: reads_per_file fixed above 1 counts its queued reads in the minimum", "[plan]") {
  MemoryInputs in = ExampleInputs(256 * MiB);
  in.reads_per_file = 16;
  in.read_block_bytes = 256 * KiB;
  const MemoryPlan plan = PlanMemory(in);
  // Each queue: 16 reads in flight, the block being read and 2 spares for hedged reads.
  CHECK(plan.min_read_ahead_bytes == 8 * (256 * KiB + 19 * 256 * KiB));
  // 64 MiB is too small for 8 open files x 5 MiB: the error says so, and the budget it names fits.
  in.budget_bytes = 64 * MiB;
  const std::string message = PlanError(in);
  INFO(message);
  CHECK(message.find("read-ahead at least: 8 open files x (256.0 KiB min stream buffer + 19 x 256.0 KiB for 16 "
                     "queued reads (pipeline.reads_per_file), the block being read and hedged reads' spares)") !=
        std::string::npos);
  // The queued reads are the largest part the user can lower: the advice names them first, with
  // what lowering them takes off, 38.0 MiB of blocks + 1.5 x 224 B per 2 KiB record of them:
  // 8 x 19 x 256 KiB x (1 + 672 / 4096) = 46,383,104 B.
  CHECK(message.find(", or lower the queued reads (44.2 MiB: pipeline.reads_per_file; 1 or auto: one read at a time "
                     "until reads are slow)") != std::string::npos);
  in.budget_bytes = NeededBytes(message);
  CHECK(PlanMemory(in).read_ahead_bytes >= 8 * (256 * KiB + 19 * 256 * KiB));
  in.budget_bytes -= 1;
  CHECK_THROWS_AS(PlanMemory(in), BudgetError);
}

TEST_CASE("PlanMemory: chunk tails scale with the largest record up to 16 KiB", "[plan]") {
  MemoryInputs in = ExampleInputs(256 * MiB);
  in.shuffle_buffer = 0;
  in.mean_record_bytes = 12 * KiB;
  in.largest_record_bytes = 13 * KiB;  // ~13 KiB records leave up to 13 KiB of each 64 KiB chunk
  const MemoryPlan plan = PlanMemory(in);
  const uint64_t left = plan.read_ahead_memory_bytes;
  // P x 64/51 + P x 1.5 x 224 / 12288 <= left.
  CHECK(plan.read_ahead_bytes == left * (2 * 12288) * 51 / (2 * 12288 * 64 + 672 * 51));
  CHECK(plan.read_ahead_bytes < left * 51 / 64 + 1);
  // With a shuffle buffer every record has its own allocation: no tails.
  in.shuffle_buffer = 1000;
  const MemoryPlan shuffled = PlanMemory(in);
  CHECK(shuffled.read_ahead_bytes ==
        shuffled.read_ahead_memory_bytes * (2 * 12288) / (2 * 12288 + 672));
  // The smallest budget named in the error fits exactly, tails included.
  in.shuffle_buffer = 0;
  in.budget_bytes = 64 * MiB;
  const std::string message = PlanError(in);
  INFO(message);
  in.budget_bytes = NeededBytes(message);
  const MemoryPlan fits = PlanMemory(in);
  CHECK(fits.read_ahead_bytes >= fits.min_read_ahead_bytes);
  in.budget_bytes -= 1;
  CHECK_THROWS_AS(PlanMemory(in), BudgetError);
}

TEST_CASE("PlanMemory: lookahead_files and a sampled mean of 0", "[plan]") {
  MemoryInputs in = ExampleInputs(256 * MiB);
  in.lookahead_files = 1;
  CHECK(PlanMemory(in).open_files == 5);
  in.mean_record_bytes = 0;  // nothing sampled: 1 KiB records assumed
  const MemoryPlan plan = PlanMemory(in);
  CHECK(plan.shuffle_bytes == 10'000 * (1'536 + 80) + 9'216);
  CHECK(plan.Describe().find("1.0 KiB assumed mean (no records sampled)") != std::string::npos);
}

TEST_CASE("PlanMemory: a budget that cannot fit fails with the arithmetic", "[plan]") {
  const MemoryInputs in = ExampleInputs(64 * MiB);
  const std::string message = PlanError(in);
  REQUIRE(!message.empty());  // PlanMemory refused 64 MiB
  INFO(message);
  const std::vector<std::string> lines = {
      "pipeline.memory_budget 64.0 MiB is too small for this job:\n",
      "  ring: 10 slots x 4.0 MiB + 64.0 KiB superblock = 40.1 MiB\n",
      "  daemon before the pipeline: private RSS (RssAnon) at start = 10.0 MiB\n",
      "  open files: 8 (pipeline.cycle_length 4 + 4 files opened ahead) x (1.0 MiB window + 1.0 MiB compressed "
      "input + 96.0 KiB inflate state + 9.2 KiB largest record beyond the stream buffer) = 16.8 MiB\n",
      "  shuffle buffer: 10000 records x (1.5 x 2.0 KiB mean + 80 B) + 9.0 KiB largest = 30.1 MiB\n",
      "  batches in flight: (10 slots + 2 x 1 queue + 2) x 32 records x (1.5 x 2.0 KiB mean + 80 B) = 1.3 MiB\n",
      "  parse workers: up to 2 workers x 1.0 MiB scratch = 2.0 MiB\n",
      "  threads: (at most 4 readers + 2 workers + 4 others) x 256.0 KiB = 2.5 MiB\n",
      "  safety margin: max(5% of the budget, 8.0 MiB) = 8.0 MiB\n",
      "  read-ahead at least: 8 open files x 256.0 KiB min stream buffer + 224 B of bookkeeping per record (1.3 KiB "
      "records assumed: 2/3 of the mean) = 2.3 MiB (the budget leaves 0 B)\n",
      // fixed without margin 107'793'408 + read-ahead 2'097'152 + 344'064 + margin 8 MiB.
      "  needed at least 113.1 MiB (118623232 bytes: 105.1 MiB for the job + 8.0 MiB safety margin: 5% of the "
      "budget, at least 8.0 MiB); raise pipeline.memory_budget to at least 114MiB, or lower the ring "
      "(40.1 MiB: ring.slots or batch.size) or the shuffle buffer (30.1 MiB: shuffle.buffer; changes the batch "
      "order)",
  };
  size_t at = 0;
  for (const std::string& line : lines) {
    const size_t found = message.find(line, at);
    CHECK(found != std::string::npos);
    if (found != std::string::npos) at = found + line.size();
  }
  CHECK(at == message.size());

  // The number it names is exact: that budget fits, one byte less does not.
  CHECK(PlanMemory(ExampleInputs(118'623'232)).read_ahead_bytes == 8 * 256 * KiB);
  CHECK_THROWS_AS(PlanMemory(ExampleInputs(118'623'231)), BudgetError);
}

TEST_CASE("PlanMemory: the advice names only the parts that can go lower", "[plan]") {
  // A small ring and no shuffle buffer: the open files and the workers are the largest parts.
  MemoryInputs in = ExampleInputs(16 * MiB);
  in.ring_slots = 2;
  in.ring_slot_bytes = 64 * KiB;
  in.ring_segment_bytes = 2 * 64 * KiB + 64 * KiB;
  in.shuffle_buffer = 0;
  in.max_workers = 8;
  const auto advice = [](const MemoryInputs& in) {
    const std::string message = PlanError(in);
    return message.substr(message.find("MiB, or lower ") + 5);
  };
  // Fixed readers (4) and workers (8), cycle_length 4: each can go lower. The workers by what
  // workers: 1 takes off: 7 x (1 MiB scratch + 256 KiB thread), not the readers' threads.
  CHECK(advice(in) == "or lower the open files (17.8 MiB: pipeline.cycle_length or pipeline.readers; cycle_length "
                      "changes the batch order) or the parse workers (8.8 MiB: pipeline.workers)");
  // The same counts from auto knobs: only the tuner's reach, which PlanTuning lowers itself.
  in.readers_fixed = in.workers_fixed = false;
  CHECK(advice(in) == "or lower the open files (17.8 MiB: pipeline.cycle_length; changes the batch order) or the "
                      "batches in flight (591.0 KiB: batch.size)");
  // Auto readers and workers at 1 (PlanTuning's last try).
  in.max_readers = in.max_workers = 1;
  CHECK(advice(in) == "or lower the open files (11.1 MiB: pipeline.cycle_length; changes the batch order) or the "
                      "batches in flight (591.0 KiB: batch.size)");
  // Fixed at 1, and cycle_length 1: nothing of the open files or the workers to lower.
  in.readers_fixed = in.workers_fixed = true;
  in.cycle_length = 1;
  // (2 slots, the fewest: only batch.size lowers the ring, whose auto slot it sizes.)
  CHECK(advice(in) == "or lower the batches in flight (591.0 KiB: batch.size) or the ring (192.0 KiB: batch.size)");
  // A fixed ring.slot_bytes: lowering batch.size does not lower the ring.
  in.ring_slot_bytes_fixed = true;
  CHECK(advice(in) == "or lower the batches in flight (591.0 KiB: batch.size) or the ring (192.0 KiB: "
                      "ring.slot_bytes)");
  // A batch of 1 record in 2 slots: the batches have nothing to give; only the ring's slot size.
  in.batch_size = 1;
  CHECK_THAT(advice(in), !Catch::Contains("batches in flight") && Catch::Contains("the ring (192.0 KiB: ring.slot_bytes)"));
  in.batch_size = 32;
  in.ring_slot_bytes_fixed = false;
  // Fixed readers above 1 with cycle_length 1: the readers alone.
  in.max_readers = 3;
  CHECK(advice(in) == "or lower the open files (8.9 MiB: pipeline.readers) or the batches in flight (591.0 KiB: "
                      "batch.size)");
}

TEST_CASE("PlanMemory: 'needed at least' is exact also when the 5% margin is the larger", "[plan]") {
  for (int64_t shuffle : {100'000, 1'000'000, 3'000'000}) {
    MemoryInputs in = ExampleInputs(64 * MiB);
    in.shuffle_buffer = shuffle;
    in.budget_source = "the auto pipeline.memory_budget";
    const std::string message = PlanError(in);
    INFO("shuffle.buffer " << shuffle << ": " << message);
    REQUIRE(message.rfind("the auto pipeline.memory_budget 64.0 MiB is too small for this job:\n", 0) == 0);
    const uint64_t needed = NeededBytes(message);
    in.budget_bytes = needed;
    const MemoryPlan plan = PlanMemory(in);
    CHECK(plan.read_ahead_bytes >= plan.min_read_ahead_bytes);
    CHECK(plan.margin_bytes > kSafetyMarginMinBytes);
    in.budget_bytes = needed - 1;
    CHECK_THROWS_AS(PlanMemory(in), BudgetError);
  }
}

TEST_CASE("BudgetHolding: the smallest budget whose room beside its margin holds the bytes", "[plan]") {
  // The room beside the margin: B - max(ceil(B / 20), 8 MiB), negative below 8 MiB.
  __extension__ typedef __int128 I128;
  auto room = [](uint64_t budget) -> I128 {
    return static_cast<I128>(budget) -
           std::max<uint64_t>((budget + kSafetyMarginDivisor - 1) / kSafetyMarginDivisor, kSafetyMarginMinBytes);
  };
  for (uint64_t rest : {uint64_t{0}, uint64_t{1}, 100 * MiB, 152 * MiB - 1, 152 * MiB, 152 * MiB + 1, 190 * MiB,
                        190 * MiB + 7, uint64_t{3'000'000'007}}) {
    INFO("rest " << rest);
    const uint64_t budget = BudgetHolding(rest);
    CHECK((room(budget) >= rest));
    CHECK((room(budget - 1) < rest));
  }
  CHECK(BudgetHolding(0) == 8 * MiB);           // the least margin
  CHECK(BudgetHolding(100 * MiB) == 108 * MiB);  // 8 MiB > 108 MiB / 20
  CHECK(BudgetHolding(190 * MiB) == 200 * MiB);  // 200 MiB / 20 = 10 MiB
  CHECK(BudgetHolding(UINT64_MAX - 1) == UINT64_MAX);
  // More than a budget holds now: 200 MiB holds 190 MiB beside its margin.
  CHECK(BudgetHoldingMore(200 * MiB, 19 * MiB) == 220 * MiB);
  CHECK(BudgetHoldingMore(100 * MiB, 0) == 100 * MiB);
  CHECK(BudgetHoldingMore(UINT64_MAX, 1) == UINT64_MAX);
}

TEST_CASE("PlanMemory: nonsense inputs are errors, huge ones saturate", "[plan]") {
  MemoryInputs in = ExampleInputs(0);
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("the memory budget is 0 bytes"));
  in = ExampleInputs(GiB);
  in.cycle_length = 0;
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("cycle_length is 0"));
  in = ExampleInputs(GiB);
  in.shuffle_buffer = int64_t{1} << 62;
  in.mean_record_bytes = uint64_t{1} << 40;
  // No budget can hold 2^64 bytes: the advice is to lower the largest part, not a budget.
  CHECK_THROWS_WITH(PlanMemory(in), Catch::Contains("needed more than any memory budget can be (2^64 bytes or more); "
                                                    "lower the shuffle buffer (16.0 EiB: shuffle.buffer; changes the batch "
                                                    "order)") &&
                                        !Catch::Contains("raise pipeline.memory_budget"));
}

// ---- The constants against the structures they stand for ------------------------------------------

TEST_CASE("per-record and per-reader constants cover the real structures", "[constants]") {
  // A record buffered by the read-ahead: a StreamItem in a std::vector that may have twice the
  // capacity it uses; its payload in a chunk shared with its turn (no per-record overhead) or,
  // when large, in its own allocation (RecordStorage's 16-byte header; malloc: 8-byte header,
  // rounding to 16).
  CHECK(sizeof(RecordStorage) == 16);
  CHECK(2 * sizeof(StreamItem) + sizeof(RecordStorage) + 8 + 15 <= kReadAheadRecordOverheadBytes);
  CHECK(ReadAhead::kChunkOverheadBytes <= kReadAheadChunkOverheadBytes);
  CHECK(ReadAhead::kChunkBytes == kReadAheadChunkBytes);
  CHECK(ReadAhead::kOwnAllocationBytes == kReadAheadOwnAllocationBytes);
  // PlanMemory counts chunk tails exactly when ReadAhead uses chunks (shuffle.buffer <= 1).
  for (const int64_t shuffle : {0, 1, 2, 10000}) {
    MemoryInputs in = ExampleInputs(256 * MiB);
    in.shuffle_buffer = shuffle;
    INFO("shuffle.buffer " << shuffle);
    CHECK((PlanMemory(in).Describe().find("read-ahead chunk tails") != std::string::npos) ==
          ReadAhead::UsesChunks(shuffle));
  }
  // A record in the shuffle buffer (always in its own allocation) or a batch: an OwnedRecord and
  // the same allocation overhead.
  CHECK(sizeof(OwnedRecord) + sizeof(RecordStorage) + 8 + 15 <= kRecordOverheadBytes);
#ifdef RINGFEED_HAVE_ISAL
  CHECK(sizeof(inflate_state) <= kInflateStateBytes);
#endif
  // zlib's inflate state and window, measured through its allocator hooks while inflating.
  struct Counter {
    uint64_t bytes = 0;
  } counter;
  z_stream z{};
  z.opaque = &counter;
  z.zalloc = [](voidpf opaque, uInt items, uInt size) -> voidpf {
    static_cast<Counter*>(opaque)->bytes += uint64_t{items} * size;
    return calloc(items, size);
  };
  z.zfree = [](voidpf, voidpf p) { free(p); };
  REQUIRE(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK);
  const std::string plain(200'000, 'x');
  std::string packed = testing::GzipBytes(plain);
  std::string out(plain.size(), '\0');
  z.next_in = reinterpret_cast<Bytef*>(packed.data());
  z.avail_in = static_cast<uInt>(packed.size());
  // Small output steps, as the reader's window fills: zlib then keeps its 32 KiB window.
  int rc = Z_OK;
  size_t produced = 0;
  while (rc == Z_OK && produced < out.size()) {
    z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z.avail_out = static_cast<uInt>(std::min<size_t>(4096, out.size() - produced));
    const uInt before = z.avail_out;
    rc = inflate(&z, Z_NO_FLUSH);
    produced += before - z.avail_out;
  }
  CHECK(rc == Z_STREAM_END);
  inflateEnd(&z);
  CHECK(out == plain);
  CHECK(counter.bytes >= 32 * KiB);  // the window was allocated, so this measured something
  CHECK(counter.bytes <= kInflateStateBytes);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("kThreadBytes covers what a thread that allocates adds to RssAnon", "[constants][real]") {
  constexpr int kThreads = 16;
  std::barrier ready(kThreads + 1);
  std::barrier done(kThreads + 1);
  const uint64_t before = ReadProcessMemory().rss_anon;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      // Some stack, some small allocations kept and freed (each may get its own malloc arena).
      volatile char stack[16 * 1024];
      for (size_t k = 0; k < sizeof stack; k += 512) stack[k] = 1;
      std::vector<std::unique_ptr<char[]>> kept;
      for (int k = 0; k < 64; ++k) kept.emplace_back(new char[512]);
      ready.arrive_and_wait();
      done.arrive_and_wait();
    });
  }
  ready.arrive_and_wait();
  const uint64_t during = ReadProcessMemory().rss_anon;
  done.arrive_and_wait();
  for (auto& t : threads) t.join();
  const uint64_t per_thread = during > before ? (during - before) / kThreads : 0;
  WARN("RssAnon per thread: " << FormatBytes(per_thread));
  CHECK(per_thread <= kThreadBytes);
}
#endif

// ---- Process memory ------------------------------------------------------------------------------

TEST_CASE("ReadProcessMemory: private RSS follows the heap, shared memory is RssShmem", "[memory][real]") {
  const ProcessMemory start = ReadProcessMemory();
  CHECK(start.rss_anon > 0);
  CHECK(start.vm_rss == start.rss_anon + start.rss_file + start.rss_shmem);
  CHECK(start.vm_hwm >= start.vm_rss);
  CHECK(start.private_rss() == start.rss_anon);

  // 64 MiB of touched heap: RssAnon grows by about that much.
  {
    constexpr size_t kHeap = 64 * MiB;
    void* heap = mmap(nullptr, kHeap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(heap != MAP_FAILED);
    std::memset(heap, 1, kHeap);
    const ProcessMemory with_heap = ReadProcessMemory();
    CHECK(with_heap.rss_anon >= start.rss_anon + kHeap - 4 * MiB);
    CHECK(with_heap.rss_anon <= start.rss_anon + kHeap + 16 * MiB);
    munmap(heap, kHeap);
  }
  // 32 MiB of touched shared memory (like the ring segment): RssShmem, not RssAnon.
  {
    constexpr size_t kShm = 32 * MiB;
    const std::string name = "/ringfeed-budget-test-" + std::to_string(getpid());
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    shm_unlink(name.c_str());
    REQUIRE(ftruncate(fd, kShm) == 0);
    void* shm = mmap(nullptr, kShm, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(shm != MAP_FAILED);
    const ProcessMemory before = ReadProcessMemory();
    std::memset(shm, 1, kShm);
    const ProcessMemory with_shm = ReadProcessMemory();
    CHECK(with_shm.rss_shmem >= before.rss_shmem + kShm - 1 * MiB);
    CHECK(with_shm.rss_anon <= before.rss_anon + 4 * MiB);
    munmap(shm, kShm);
  }
}

TEST_CASE("ReadProcessMemory: another process, and one that is gone", "[memory][real]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[1]);
    char c;
    (void)!read(fds[0], &c, 1);  // wait until the parent has looked
    _exit(0);
  }
  close(fds[0]);
  const ProcessMemory child = ReadProcessMemory(pid);
  CHECK(child.vm_rss > 0);
  close(fds[1]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK_THROWS_WITH(ReadProcessMemory(pid),
                    Catch::Contains("/proc/" + std::to_string(pid) + "/status") &&
                        Catch::Contains("has process " + std::to_string(pid) + " exited?"));
}

TEST_CASE("ReadProcessMemory: a status file without the fields names the file", "[memory]") {
  TempDir dir;
  const auto paths = MakeTree(dir, {{"proc/77/status", "Name:\tkthreadd\nVmPeak:\t0 kB\n"}});
  CHECK_THROWS_WITH(ReadProcessMemory(77, paths),
                    Catch::Contains(paths.proc_root + "/77/status has no RssAnon"));
}

TEST_CASE("FormatBytes", "[plan]") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1024) == "1.0 KiB");
  CHECK(FormatBytes(3 * MiB / 2) == "1.5 MiB");
  CHECK(FormatBytes(2 * GiB) == "2.0 GiB");
}

TEST_CASE("PlanFileDescriptors and OpenFileLimitProblem: the arithmetic, and a limit that holds it", "[plan]") {
  const FileDescriptorPlan queued = PlanFileDescriptors(1116, true, 256);
  CHECK(queued.needed == 1116 * 2 + 256 + kOtherFileDescriptors);
  CHECK(queued.arithmetic == "1116 data files x 2 (each with its io_uring queue) + 256 control connections + 64 others = 2552");
  const FileDescriptorPlan plain = PlanFileDescriptors(1, false, 256);
  CHECK(plain.needed == 1 + 256 + 64);
  CHECK(plain.arithmetic == "1 data file + 256 control connections + 64 others = 321");
  CHECK(OpenFileLimitProblem(queued, 2552, 4096).empty());
  CHECK(OpenFileLimitProblem(queued, 2551, 2551) ==
        "this job may hold 2552 file descriptors at once (1116 data files x 2 (each with its io_uring queue) + 256 "
        "control connections + 64 others = 2552), more than the open-file limit 2551 (RLIMIT_NOFILE, hard limit "
        "2551): raise it (`ulimit -n`, LimitNOFILE= in the systemd unit)");
  // With PlanTuning's advice on the config keys that open fewer files.
  FileDescriptorPlan advised = queued;
  advised.lower = "set pipeline.readers to 1 (5 data files open)";
  CHECK_THAT(OpenFileLimitProblem(advised, 2551, 2551),
             Catch::EndsWith("(`ulimit -n`, LimitNOFILE= in the systemd unit), or set pipeline.readers to 1 (5 data "
                             "files open)"));
  // Under what the fewest data files need (PlanTuning's; here one: 256 connections + 64 others
  // + 1), no config helps.
  CHECK(queued.least == 321);
  CHECK_THAT(OpenFileLimitProblem(advised, 300, 300),
             Catch::EndsWith("raise it (`ulimit -n`, LimitNOFILE= in the systemd unit); no config fits under it: with "
                             "the fewest data files this job can open (readers 1, cycle_length 1, reads_per_file 1) "
                             "it still needs 321"));
}

}  // namespace
TEST_CASE("OverBudgetWarning: silent within the budget; over it, the arithmetic and the part that outgrew its share", "[plan]") {
  const MemoryPlan plan = PlanMemory(ExampleInputs(256 * MiB));  // shuffle share 31'529'216 B (10000 records)
  CHECK(OverBudgetWarning(plan, {200 * MiB, 56 * MiB, 10'000, 20 * MiB}, 10000).empty());  // exactly the budget
  MemoryPlan unset = plan;
  unset.budget_bytes = 0;
  CHECK(OverBudgetWarning(unset, {900 * MiB, 56 * MiB, 0, 0}, 10000).empty());  // no budget to be over

  // The shuffle buffer's records grew past the sampled ones: 10000 of 40 KiB = 390.6 MiB.
  CHECK(OverBudgetWarning(plan, {420 * MiB, 40 * MiB, 10'000, 10'000 * 40 * KiB}, 10000) ==
        "memory over pipeline.memory_budget 256.0 MiB: private RSS 420.0 MiB + segment 40.0 MiB = 460.0 MiB; the "
        "shuffle buffer holds 10000 records of 390.6 MiB (40.0 KiB each on average), where the memory plan gave it "
        "30.1 MiB for shuffle.buffer 10000 from the records sampled at start: the records later in the files are "
        "larger; raise pipeline.memory_budget to at least 637MiB (room for shuffle.buffer 10000 records of 40.0 "
        "KiB), or lower shuffle.buffer to 768 (what its share holds of records of 40.0 KiB)");
  // 768 = 31'529'216 / (40 KiB + 80 B of bookkeeping each); 636.3 MiB = 256 MiB + (10000 x (40 KiB
  // + 80 B) - 31'529'216) x 20/19 (the margin is 1/20 of the budget): 667'246'808 bytes, 637 MiB
  // rounded up (what a config takes).
  // Records larger than the buffer's mean came last: the advice is for records of the largest.
  CHECK_THAT(OverBudgetWarning(plan, {420 * MiB, 40 * MiB, 10'000, 10'000 * 40 * KiB, 200 * KiB}, 10000),
             Catch::EndsWith("raise pipeline.memory_budget to at least 2282MiB (room for shuffle.buffer 10000 records "
                             "of the largest so far, 200.0 KiB), or lower shuffle.buffer to 153 (what its share holds "
                             "of records of the largest so far, 200.0 KiB)"));
  // 153 = 31'529'216 / 204'880; 256 MiB + (10000 x 204'880 - 31'529'216) x 20/19 = 2'391'878'387 bytes.
  // Each record's bookkeeping counts as the plan counts it: 10000 x 3100 B of payload is under the
  // share, with 80 B each over it.
  CHECK_THAT(OverBudgetWarning(plan, {300 * MiB, 40 * MiB, 10'000, 10'000 * 3'100}, 10000),
             Catch::Contains("the shuffle buffer holds 10000 records of 29.6 MiB (3.0 KiB each"));
  // Records larger than the whole share: no shuffle.buffer of 2 or more fits it.
  CHECK_THAT(OverBudgetWarning(plan, {300 * MiB, 40 * MiB, 10, 10 * 20 * MiB}, 10000),
             Catch::Matchers::EndsWith("or lower shuffle.buffer (its share does not hold 2 records of 20.0 MiB)"));
  // Over, but the shuffle buffer within its share (or none): the general reason.
  const std::string general = OverBudgetWarning(plan, {300 * MiB, 40 * MiB, 10'000, 20 * MiB}, 10000);
  CHECK_THAT(general, Catch::Matchers::StartsWith("memory over pipeline.memory_budget 256.0 MiB: private RSS 300.0 MiB "
                                                  "+ segment 40.0 MiB = 340.0 MiB; the memory plan counts records"));
  CHECK_THAT(general, Catch::Matchers::EndsWith("raise pipeline.memory_budget to at least 340MiB (`ringfeedctl "
                                                "check` reads every record and says the largest)"));
  CHECK(OverBudgetWarning(plan, {300 * MiB, 40 * MiB, 0, 0}, 0) == general);
}

}  // namespace ringfeed
