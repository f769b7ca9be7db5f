#include "shm/ring.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "shm/futex.h"

namespace ringfeed::shm {
namespace {

uint64_t ReadyWord(uint32_t queue, uint64_t seq) {
  return SlotWord{SlotState::kReady, queue, 0, seq}.Pack();
}

// slot_of entries are plain uint32_t in the layout; every access goes through atomic_ref so
// concurrent publish/claim are well-defined (and visible to ThreadSanitizer).
uint32_t LoadSlotOf(QueueHeader& q, uint64_t seq) {
  return std::atomic_ref<uint32_t>(q.slot_of[seq % kMaxSlots]).load(std::memory_order_relaxed);
}

// The waker's half of the waiter-count handshake (ring_layout.h, "Waking"): bump, then look
// for sleepers. Both sequentially consistent, pairing with CountedWait: if this load misses a
// sleeper's increment, the increment (and the sleeper's FUTEX_WAIT after it) comes after the
// bump, so FUTEX_WAIT finds the word changed and does not sleep.
// The two halves may be apart (PublishWithoutWake, WakePublishWaiters): the argument holds for
// any delay, as long as the load comes after the bump.
void Bump(std::atomic<uint32_t>& futex) { futex.fetch_add(1, std::memory_order_seq_cst); }
void WakeWaiters(std::atomic<uint32_t>& futex, std::atomic<uint32_t>& waiters) {
  if (waiters.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&futex);
}
void BumpAndWake(std::atomic<uint32_t>& futex, std::atomic<uint32_t>& waiters) {
  Bump(futex);
  WakeWaiters(futex, waiters);
}

void CountedWait(std::atomic<uint32_t>& futex, std::atomic<uint32_t>& waiters, uint32_t seen,
                 std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  waiters.fetch_add(1, std::memory_order_seq_cst);
  if (futex.load(std::memory_order_seq_cst) == seen) FutexWait(&futex, seen, timeout);
  waiters.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

Ring Ring::Of(void* mapping) {
  Ring ring;
  ring.sb = static_cast<Superblock*>(mapping);
  ring.slot_count = ring.sb->slot_count;
  ring.queue_count = ring.sb->queue_count;
  ring.slots_offset = ring.sb->slots_offset;
  ring.slot_stride = ring.sb->slot_stride;
  ring.slot_bytes = ring.sb->slot_bytes;
  return ring;
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

bool BeginFill(const Ring& ring, uint32_t slot) {
  uint64_t expected = SlotWord{}.Pack();
  // acquire: the consumer's last reads (and possible writes) of the slot happen before the
  // daemon overwrites it.
  return ring.header(slot)->word.compare_exchange_strong(
      expected, SlotWord{SlotState::kFilling}.Pack(), std::memory_order_acquire);
}

void Publish(const Ring& ring, uint32_t slot, uint32_t queue, uint64_t seq) {
  PublishWithoutWake(ring, slot, queue, seq);
  WakePublishWaiters(ring, queue);
}

void PublishWithoutWake(const Ring& ring, uint32_t slot, uint32_t queue, uint64_t seq) {
  QueueHeader& q = ring.queue(queue);
  std::atomic_ref<uint32_t>(q.slot_of[seq % kMaxSlots]).store(slot, std::memory_order_relaxed);
  ring.header(slot)->word.store(ReadyWord(queue, seq), std::memory_order_release);
  q.published.store(seq + 1, std::memory_order_release);
  Bump(q.publish_futex);
}

void WakePublishWaiters(const Ring& ring, uint32_t queue) {
  QueueHeader& q = ring.queue(queue);
  WakeWaiters(q.publish_futex, q.publish_waiters);
}

void CloseQueue(const Ring& ring, uint32_t queue) {
  QueueHeader& q = ring.queue(queue);
  q.closed.store(1, std::memory_order_release);
  BumpAndWake(q.publish_futex, q.publish_waiters);
}

void SetState(const Ring& ring, DaemonState state, std::string_view message) {
  const size_t n = std::min<size_t>(message.size(), kErrorBytes - 1);
  std::memcpy(ring.sb->error, message.data(), n);
  ring.sb->error[n] = '\0';
  ring.sb->state.store(static_cast<uint32_t>(state), std::memory_order_release);
  const bool terminal = state == DaemonState::kEndOfData || state == DaemonState::kFailed ||
                        state == DaemonState::kStopped;
  // After the state: a consumer that sees `closed` (acquire) also sees why.
  for (uint32_t q = 0; q < ring.queue_count; ++q) {
    if (terminal) ring.queue(q).closed.store(1, std::memory_order_release);
    BumpAndWake(ring.queue(q).publish_futex, ring.queue(q).publish_waiters);
  }
}

void Heartbeat(const Ring& ring) {
  ring.sb->heartbeat_ns.store(MonotonicNs(), std::memory_order_release);
}

bool IsFree(const Ring& ring, uint32_t slot) {
  return SlotWord::Unpack(ring.header(slot)->word.load(std::memory_order_acquire)).state ==
         SlotState::kFree;
}

std::vector<uint32_t> HeldPerConsumer(const Ring& ring) {
  std::vector<uint32_t> held(kMaxConsumers + 1, 0);
  for (uint32_t i = 0; i < ring.slot_count; ++i) {
    const SlotWord w = SlotWord::Unpack(ring.header(i)->word.load(std::memory_order_relaxed));
    if (w.state == SlotState::kHeld) ++held[w.owner >= 1 && w.owner <= kMaxConsumers ? w.owner : 0];
  }
  return held;
}

uint32_t RingSlotsForConsumers(uint32_t consumers, uint32_t slots) {
  return static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(2ull * consumers, slots + 1ull), kMaxSlots));
}

std::string AllHeldAdvice(const std::vector<uint32_t>& held, const std::function<std::string(uint32_t)>& name,
                          uint32_t consumers, uint32_t slot_count) {
  std::vector<uint32_t> holders;  // consumer ids, most slots first
  uint64_t total = 0;
  for (uint32_t id = 1; id < held.size(); ++id) {
    if (held[id] == 0) continue;
    holders.push_back(id);
    total += held[id];
  }
  std::stable_sort(holders.begin(), holders.end(), [&](uint32_t a, uint32_t b) { return held[a] > held[b]; });
  std::string who;
  size_t unnamed = 0;
  for (size_t i = 0; i < holders.size(); ++i) {
    const std::string n = name(holders[i]);
    if (i >= 4 && n != "this client") {
      ++unnamed;
      continue;
    }
    who += (who.empty() ? "" : ", ") + n + (who.empty() ? " holds " : " ") + std::to_string(held[holders[i]]);
  }
  if (unnamed > 0) who += " and " + std::to_string(unnamed) + " more";
  // Held words naming no consumer that can attach: only a process writing the ring makes those.
  std::string forged;
  if (!held.empty() && held[0] > 0) {
    forged = "; " + std::to_string(held[0]) + (held[0] == 1 ? " slot names" : " slots name") +
             " an owner outside consumer ids 1-" + std::to_string(kMaxConsumers) + " (a process wrote the ring)";
  }
  if (holders.empty()) return "no attached consumer holds one" + forged;
  consumers = std::max<uint32_t>(consumers, static_cast<uint32_t>(holders.size()));
  std::vector<uint32_t> keepers;
  for (uint32_t id : holders) {
    if (held[id] >= 2) keepers.push_back(id);
  }
  if (keepers.empty()) {
    return who + ": each consumer that keeps its previous batch while it waits for the next (a Python `for batch in "
                 "client:` loop) needs a slot of its own and one to fill: give the job ring.slots: " +
           std::to_string(RingSlotsForConsumers(consumers, slot_count)) + " or more" + forged;
  }
  std::string kept;
  if (keepers.size() == 1) {
    kept = name(keepers[0]) + " keeps " + std::to_string(held[keepers[0]]) + " batches it has not released";
  } else {
    for (size_t i = 0; i < keepers.size() && i < 4; ++i) {
      kept += (i == 0 ? "" : ", ") + name(keepers[i]) + " " + std::to_string(held[keepers[i]]);
    }
    if (keepers.size() > 4) kept += " and " + std::to_string(keepers.size() - 4) + " more";
    kept = "several consumers keep batches they have not released (" + kept + ")";
  }
  // A trainer that needs its batches at once: what they keep, and a slot to fill for each consumer.
  const uint64_t needed = std::min<uint64_t>(std::max<uint64_t>(total + consumers, slot_count + 1ull), kMaxSlots);
  return who + ": " + kept +
         " (batches a trainer stores, or arrays or tensors of them kept alive): release those no longer needed; "
         "trainers that need them all at once need more ring.slots (" + std::to_string(needed) +
         " for these consumers)" + forged;
}

std::string ConsumerTableName(const Ring& ring, uint32_t id) {
  if (id < 1 || id > kMaxConsumers) return "consumer " + std::to_string(id);
  const ConsumerEntry& c = ring.sb->consumers[id - 1];
  if (c.attached.load(std::memory_order_relaxed) != 1) return "consumer " + std::to_string(id) + " (not attached)";
  return "consumer " + std::to_string(id) + " (pid " + std::to_string(c.pid) +
         (c.rank >= 0 ? ", rank " + std::to_string(c.rank) : std::string()) + ")";
}

uint32_t ReclaimConsumer(const Ring& ring, uint32_t consumer_id) {
  uint32_t freed = 0;
  for (uint32_t i = 0; i < ring.slot_count; ++i) {
    std::atomic<uint64_t>& word = ring.header(i)->word;
    uint64_t w = word.load(std::memory_order_acquire);
    const SlotWord sw = SlotWord::Unpack(w);
    if (sw.state != SlotState::kHeld || sw.owner != consumer_id) continue;
    if (word.compare_exchange_strong(w, SlotWord{}.Pack(), std::memory_order_acq_rel)) ++freed;
  }
  if (freed > 0) BumpAndWake(ring.sb->free_futex, ring.sb->free_waiters);
  return freed;
}

void WaitForFree(const Ring& ring, uint32_t seen, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  // The daemon is the one sleeper: it sets the count instead of adding to it, so a consumer
  // that wrote the count (0 while the daemon sleeps: no release woke it, every wait ran to its
  // timeout, 10x slower for good) is put right at the next wait.
  std::atomic<uint32_t>& waiters = ring.sb->free_waiters;
  waiters.store(1, std::memory_order_seq_cst);
  if (ring.sb->free_futex.load(std::memory_order_seq_cst) == seen) FutexWait(&ring.sb->free_futex, seen, timeout);
  waiters.store(0, std::memory_order_relaxed);
}

ClaimResult TryClaim(const Ring& ring, uint32_t queue, uint32_t consumer_id, uint32_t* slot,
                     uint64_t* seq) {
  QueueHeader& q = ring.queue(queue);
  // Each pass claims, or sees `taken` claimed and helps it on: on a sound queue far fewer passes
  // than this. A process that keeps rewriting the cursors could keep us here; the caller looks
  // again after its wait, its timeout counting.
  for (uint32_t pass = 0; pass < 2 * (kMaxSlots + kMaxConsumers); ++pass) {
    uint64_t taken = q.taken.load(std::memory_order_acquire);
    const uint64_t published = q.published.load(std::memory_order_acquire);
    // A sound queue has at most kMaxSlots batches waiting, and `taken` lags behind the claims
    // by at most one per consumer that died between its two CASes (until a claim walks past).
    // More: cursors a process scribbled on (walking them one by one could take hours); the
    // daemon puts its own `published` back.
    if (published > taken && published - taken > kMaxSlots + kMaxConsumers) return ClaimResult::kInvalid;
    if (taken >= published) {
      if (q.closed.load(std::memory_order_acquire) == 0) return ClaimResult::kEmpty;
      // Everything was published before `closed` was set: re-read to be sure it was all taken.
      if (q.published.load(std::memory_order_acquire) <= taken) return ClaimResult::kClosed;
      continue;
    }
    const uint32_t s = LoadSlotOf(q, taken);
    if (s >= ring.slot_count) return ClaimResult::kInvalid;
    std::atomic<uint64_t>& word = ring.header(s)->word;
    uint64_t expected = ReadyWord(queue, taken);
    const uint64_t held = SlotWord{SlotState::kHeld, queue, consumer_id, taken}.Pack();
    if (word.compare_exchange_strong(expected, held, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      uint64_t advance = taken;  // a failed CAS overwrites its argument; `taken` must stay ours
      q.taken.compare_exchange_strong(advance, taken + 1, std::memory_order_acq_rel);
      *slot = s;
      *seq = taken;
      return ClaimResult::kClaimed;
    }
    // `taken` was claimed by someone else (its word left kReady(queue, taken)), or our view of
    // `taken` is stale; either way, help advance it and try again.
    q.taken.compare_exchange_strong(taken, taken + 1, std::memory_order_acq_rel);
  }
  return ClaimResult::kEmpty;
}

bool Release(const Ring& ring, uint32_t slot, uint32_t consumer_id, uint64_t seq) {
  std::atomic<uint64_t>& word = ring.header(slot)->word;
  uint64_t w = word.load(std::memory_order_relaxed);
  const SlotWord sw = SlotWord::Unpack(w);
  if (sw.state != SlotState::kHeld || sw.owner != consumer_id || sw.seq != (seq & SlotWord::kSeqMask)) {
    return false;
  }
  // release: our reads of the batch happen before the daemon refills the slot.
  if (!word.compare_exchange_strong(w, SlotWord{}.Pack(), std::memory_order_release)) return false;
  BumpAndWake(ring.sb->free_futex, ring.sb->free_waiters);
  return true;
}

void WaitForPublish(const Ring& ring, uint32_t queue, uint32_t seen, std::chrono::nanoseconds timeout) {
  QueueHeader& q = ring.queue(queue);
  CountedWait(q.publish_futex, q.publish_waiters, seen, timeout);
}

}  // namespace ringfeed::shm
