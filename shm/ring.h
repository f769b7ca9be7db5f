// The ring's hand-off operations on a mapped segment: the daemon fills and publishes slots,
// consumers claim and release them. The protocol is the one described in shm/ring_layout.h:
//
//   slot word   kFree --BeginFill--> kFilling --Publish--> kReady(queue, seq)
//               --TryClaim--> kHeld(owner, seq, queue) --Release / ReclaimConsumer--> kFree
//   queue       Publish: slot_of[seq % kMaxSlots] = slot, word = kReady, published = seq + 1
//               (release), publish_futex++, wake. TryClaim: seq = taken; CAS the slot word from
//               the exact kReady(queue, seq) to kHeld; then CAS taken seq -> seq + 1. A consumer
//               that finds seq's word no longer kReady(queue, seq) knows seq was claimed (only a
//               claim moves a word out of kReady, and slot_of[seq % kMaxSlots] can only be
//               overwritten once seq's slot came back) and helps advance `taken`, so a consumer
//               that dies between its two CASes does not stall the queue.
//
// No locks anywhere: every step is one atomic operation on the mapping, so consumers in many
// processes and threads may race freely (each batch is claimed exactly once, none is skipped).
// Waiting is the caller's: WaitForPublish (consumers) and WaitForFree (the daemon) sleep on
// QueueHeader::publish_futex and Superblock::free_futex, which the operations here bump. They
// wake sleepers only when the word's waiter count says there are any (a futex wake is a system
// call even when nobody sleeps), so a sleeper must count itself: use these two, not a bare
// FutexWait (which is woken by its timeout only).
//
// Thread-safety: every function may be called concurrently from any thread of any process,
// except that Publish/PublishWithoutWake/CloseQueue for one queue, BeginFill and SetState
// belong to the daemon's single producer of that queue/slot (the daemon keeps its own count of
// what it published and writes `published` from it; ringfeedd publishes under its pipeline
// mutex). WakePublishWaiters may be called from any thread, at any time.
//
// Trust: a Ring holds the geometry copied once (by the daemon from its own values, by a client
// right after CheckSuperblock), so later writes to the superblock's geometry by a buggy or
// hostile process can't move a slot outside the mapping.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shm/batch_check.h"
#include "shm/ring_layout.h"
#include "shm/superblock_check.h"

namespace ringfeed::shm {

struct Ring {
  Superblock* sb = nullptr;  // the mapping's start
  uint32_t slot_count = 0;
  uint32_t queue_count = 0;
  uint64_t slots_offset = 0;
  uint64_t slot_stride = 0;
  uint64_t slot_bytes = 0;

  // The geometry as the superblock at `mapping` holds it now. A client calls this only after
  // CheckSuperblock returned "" for that mapping.
  static Ring Of(void* mapping);

  // Slot `i` (< slot_count): its first byte and its header.
  uint8_t* slot(uint32_t i) const {
    return reinterpret_cast<uint8_t*>(sb) + slots_offset + uint64_t{i} * slot_stride;
  }
  SlotHeader* header(uint32_t i) const { return reinterpret_cast<SlotHeader*>(slot(i)); }
  QueueHeader& queue(uint32_t q) const { return sb->queues[q]; }
};

// CLOCK_MONOTONIC in nanoseconds (the clock of Superblock::heartbeat_ns).
uint64_t MonotonicNs();

// ---- Daemon side ----

// kFree -> kFilling. False when the word is not kFree (the daemon only calls this on slots its
// own record says are free; false then means a consumer scribbled on the word).
bool BeginFill(const Ring& ring, uint32_t slot);

// Publishes a kFilling slot to `queue` as sequence number `seq`, the queue's next: the
// daemon's own count of what it published there (never read back from `published`, which any
// process that maps the segment may write), and wakes the queue's waiters. The slot's header
// and data must be complete: the word's release store publishes them.
void Publish(const Ring& ring, uint32_t slot, uint32_t queue, uint64_t seq);
// Publish in two halves, for a caller that holds a lock when it publishes: the first does all
// of Publish but the wake, the second wakes the queue's waiters, if any (a FUTEX_WAKE system
// call, which on a virtual machine can cost 15 us when the waiter sleeps on another core:
// bench/e2e/wake_cost_bench), after the caller let go of its lock. Between the two, a consumer
// that looks finds the batch; one asleep since before it is woken by the second half.
void PublishWithoutWake(const Ring& ring, uint32_t slot, uint32_t queue, uint64_t seq);
void WakePublishWaiters(const Ring& ring, uint32_t queue);

// No more batches for `queue`; wakes its waiters. Consumers drain what was published, then
// wait for the state to say how the run ended (the client reports kEndOfData only in state
// kEndOfData): end a run with SetState, which closes every queue after writing the state.
void CloseQueue(const Ring& ring, uint32_t queue);

// Sets the daemon state. `message` (truncated to kErrorBytes - 1) is written before the state
// (release), so a consumer that reads kFailed/kStopped reads the message too. Terminal states
// (kEndOfData, kFailed, kStopped) then close every queue. Bumps and wakes every queue.
void SetState(const Ring& ring, DaemonState state, std::string_view message = {});

// Writes MonotonicNs() to heartbeat_ns (the daemon's heartbeat thread, every period).
void Heartbeat(const Ring& ring);

// True when the slot's word is kFree (released by its consumer, or never used).
bool IsFree(const Ring& ring, uint32_t slot);

// Slots held now, per consumer: element i counts the slots whose word is kHeld by consumer i
// (1..kMaxConsumers; element 0 counts held words with an owner outside that range, which a sound
// ring never has). A snapshot of the slot words (relaxed loads), for status and messages.
std::vector<uint32_t> HeldPerConsumer(const Ring& ring);

// The ring.slots to suggest for `consumers` consumers that each keep a batch while they wait for
// the next: a slot each and one to fill (2 x consumers), at least one more than `slots` now, at
// most kMaxSlots.
uint32_t RingSlotsForConsumers(uint32_t consumers, uint32_t slots);

// For messages when every slot of the ring is held: who holds them, largest first (at most four
// named, and always the holder `name` calls "this client"), and what to do. `held`: a
// HeldPerConsumer snapshot; `name(id)`: how to call consumer id (the daemon from its own
// records, a client from ConsumerTableName); `consumers`: the consumers that each need a slot
// (those attached; in ranks mode at least the ranks). Consumers holding 2 or more keep batches
// they have not released: they are told to release those they no longer need (or, needing them
// all at once, how many slots that takes); else each consumer holds one, and each needs a slot of
// its own and one to fill (RingSlotsForConsumers). E.g. "consumer 1 (pid 2458) holds 7,
// consumer 2 (pid 2460) 1: consumer 1 (pid 2458) keeps 7 batches it has not released (...)".
std::string AllHeldAdvice(const std::vector<uint32_t>& held, const std::function<std::string(uint32_t)>& name,
                          uint32_t consumers, uint32_t slot_count);

// "consumer ID (pid P)" or "consumer ID (pid P, rank R)" from the segment's consumer table, which
// any process mapping the segment can write (for a client's messages; the daemon names consumers
// from its own records); "consumer ID (not attached)" when its entry says so.
std::string ConsumerTableName(const Ring& ring, uint32_t id);

// Frees every slot held by consumer `consumer_id` (CAS from each exact kHeld word it owns) and
// returns how many; bumps and wakes free_futex when any. Called when that consumer's control
// connection ended (its process died or detached).
uint32_t ReclaimConsumer(const Ring& ring, uint32_t consumer_id);

// Sleeps until free_futex differs from `seen` (a slot was released or reclaimed since the
// caller read `seen`, before it looked for a free slot), a wake, or `timeout`; free_waiters is
// 1 while it sleeps and 0 after (set, not counted: one thread at a time, the daemon's, may
// call it; a count a consumer wrote is put right by the next wait). Callers re-check in a loop.
void WaitForFree(const Ring& ring, uint32_t seen, std::chrono::nanoseconds timeout);

// ---- Consumer side ----

enum class ClaimResult {
  kClaimed,  // *slot / *seq hold the claimed batch (now kHeld by consumer_id)
  kEmpty,    // nothing published yet beyond what was taken (or the cursors keep changing under
             // us: a process writing them); wait on publish_futex
  kClosed,   // the queue is closed and drained: nothing more will come
  kInvalid,  // the queue names a slot outside the ring, or its cursors are more than
             // kMaxSlots + kMaxConsumers apart (corrupt superblock)
};

// Claims the queue's next batch for consumer `consumer_id` (1..kMaxConsumers). Lock-free.
ClaimResult TryClaim(const Ring& ring, uint32_t queue, uint32_t consumer_id, uint32_t* slot,
                     uint64_t* seq);

// kHeld(consumer_id, seq) -> kFree; bumps free_futex and wakes the daemon if it sleeps on it.
// False when the slot was not held by that consumer with that seq (already released, or
// reclaimed by the daemon).
bool Release(const Ring& ring, uint32_t slot, uint32_t consumer_id, uint64_t seq);

// Sleeps until the queue's publish_futex differs from `seen` (read before the caller's
// TryClaim), a wake, or `timeout`; counted in publish_waiters. Callers re-check in a loop.
void WaitForPublish(const Ring& ring, uint32_t queue, uint32_t seen, std::chrono::nanoseconds timeout);

}  // namespace ringfeed::shm
