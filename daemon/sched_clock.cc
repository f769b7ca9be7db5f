#include "daemon/sched_clock.h"

#include <time.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace ringfeed {

SchedClock::SchedClock() { Read(); }

SchedClock::Delta SchedClock::Read() {
  Delta d;
  timespec ts{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) {
    const uint64_t cpu = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
    d.cpu_ns = cpu > cpu_ns_ ? cpu - cpu_ns_ : 0;
    cpu_ns_ = cpu;
  }
  std::map<uint64_t, uint64_t> delays;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const std::string name = entry.path().filename().string();
    uint64_t tid = 0;
    if (std::from_chars(name.data(), name.data() + name.size(), tid).ec != std::errc()) continue;
    std::ifstream in(entry.path() / "schedstat");
    uint64_t cpu = 0, delay = 0;
    if (!(in >> cpu >> delay)) continue;
    const auto it = delays_.find(tid);
    const uint64_t before = it == delays_.end() ? 0 : it->second;
    d.run_delay_ns += delay > before ? delay - before : 0;
    delays.emplace(tid, delay);
  }
  delays_ = std::move(delays);
  return d;
}

}  // namespace ringfeed
