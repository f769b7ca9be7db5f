// Futex wait/wake on a 32-bit word in shared memory (futex(2)), for the ring's publish and
// free counters. Shared futexes (not FUTEX_PRIVATE_FLAG): the word is mapped by several
// processes, and the kernel keys a shared futex by the backing page, so a wake from the daemon
// reaches waiters in every process.
//
// Thread-safe; async-signal-safe (plain system calls).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ringfeed::shm {

// Sleeps while *word == expected, for at most `timeout` (relative). Returns on a wake, on the
// timeout, when *word != expected already (EAGAIN) or on a signal (EINTR): callers re-check
// their condition in a loop. A timeout <= 0 returns at once.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);

// Wakes every thread of every process waiting on `word`.
void FutexWakeAll(std::atomic<uint32_t>* word);

}  // namespace ringfeed::shm
