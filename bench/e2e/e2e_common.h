// Helpers shared by the end-to-end benchmark programs (consume_bench, client_overhead_bench,
// parse_alone_bench): a process's memory and CPU figures from /proc, percentiles, and the
// consumer's read of every byte (Touch).
// Header-only, no state, no ringfeed dependencies (attach_with_retry.h has the client part).
//
// Units: bytes, seconds, nanoseconds as named. /proc figures are Linux's (proc(5)): RssAnon and
// VmHWM in kB (1024 bytes), utime/stime in clock ticks. A process that is gone reads as 0.
// Thread-safety: plain functions.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace ringfeed::bench {

// A "Key:  1234 kB" line of /proc/<pid>/status, in bytes; 0 when absent.
inline uint64_t ProcStatusBytes(int pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':') {
      return std::stoull(line.substr(key.size() + 1)) * 1024;
    }
  }
  return 0;
}

// User + system CPU time of process `pid` so far (all its threads), from /proc/<pid>/stat.
inline double ProcCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may contain spaces
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {  // field 3 is the state; utime is 14, stime 15
    if (i == 14) utime = std::stoull(field);
    if (i == 15) {
      stime = std::stoull(field);
      break;
    }
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// This process's user + system CPU time so far (all threads).
inline double SelfCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The q-quantile (0..1) of `values` by the nearest-rank method; sorts `values`.
inline double Quantile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(q * static_cast<double>(values.size()) + 0.999999);
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// Reads n bytes as 64-bit words (plus the tail) and folds them into a sum the compiler cannot
// drop: the "trainer touches every byte" part of the benchmark (consume_bench on every batch
// from the ring, parse_alone_bench --touch on every batch it parses).
inline uint64_t Touch(const void* data, uint64_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t a = 0, b = 0, c = 0, d = 0;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof w);
    a += w[0];
    b ^= w[1];
    c += w[2];
    d ^= w[3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

}  // namespace ringfeed::bench
