// NameThread: names the calling thread after its role in the pipeline, so that `top -H`,
// `ps -L`, `perf` and /proc/<pid>/task/*/comm show which stage uses the CPU:
//   rf-read-N   ReadAhead I/O thread N          rf-sequencer  the Sequencer
//   rf-parse-N  parse worker N                  rf-tuner      the autotuner
//   rf-heartbeat  liveness heartbeat, status samples, systemd watchdog
// (the main thread keeps the program's name and serves the control socket).
// Linux limits a name to 15 bytes; a longer one is cut. Thread-safe (names only the caller).
#pragma once

#include <pthread.h>

#include <cstddef>
#include <string>

namespace ringfeed {

inline void NameThread(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

inline void NameThread(const char* role, size_t index) { NameThread(std::string(role) + "-" + std::to_string(index)); }

}  // namespace ringfeed
