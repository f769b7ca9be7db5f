// The hand-off under contention: many consumers (threads and forked processes) claiming
// batches exactly once, per-rank queues, reclaiming the slots of a SIGKILLed consumer, and
// a consumer dying between its two CASes.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "shm/ring.h"
#include "shm/segment.h"
#include "tests/ring_test_producer.h"
#include "tests/test_support.h"

namespace ringfeed {
namespace {

using shm::ClaimResult;
using shm::SlotState;
using shm::SlotWord;
using testing::ProducerOptions;
using testing::RingTestProducer;
using testing::TempDir;

// Shared (MAP_SHARED) memory visible to forked children: per-batch claim counters.
template <typename T>
struct SharedArray {
  explicit SharedArray(size_t n) : size(n) {
    void* p = mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    data = new (p) T[n]();
  }
  ~SharedArray() { munmap(data, size * sizeof(T)); }
  T& operator[](size_t i) { return data[i]; }
  T* data;
  size_t size;
};

// Claims from `queue` until it is closed and drained; counts each batch (by its label, which
// identifies the batch) in `counts`. Returns a description of the first problem, or "".
std::string ConsumeAll(const shm::Ring& ring, uint32_t queue, uint32_t consumer_id, uint32_t batch_size,
                       std::atomic<uint32_t>* counts, size_t count_size, uint64_t* claimed) {
  uint64_t last_seq = 0;
  bool first = true;
  *claimed = 0;
  for (;;) {
    const uint32_t futex = ring.queue(queue).publish_futex.load(std::memory_order_acquire);
    uint32_t slot = 0;
    uint64_t seq = 0;
    const ClaimResult r = shm::TryClaim(ring, queue, consumer_id, &slot, &seq);
    if (r == ClaimResult::kClosed) return "";
    if (r == ClaimResult::kInvalid) return "invalid";
    if (r == ClaimResult::kEmpty) {
      shm::WaitForPublish(ring, queue, futex, std::chrono::milliseconds(100));
      continue;
    }
    if (!first && seq <= last_seq) return "sequence numbers went backwards";
    first = false;
    last_seq = seq;
    const SlotWord w = SlotWord::Unpack(ring.header(slot)->word.load());
    if (w.state != SlotState::kHeld || w.owner != consumer_id || w.queue != queue || w.seq != seq) {
      return "claimed word is not kHeld by us";
    }
    const shm::SlotHeader* h = ring.header(slot);
    std::string error;
    if (!shm::ValidateBatch(*ring.sb, ring.slot(slot), &error)) return "invalid batch: " + error;
    const auto* columns = reinterpret_cast<const shm::ColumnDesc*>(ring.slot(slot) + h->columns_offset);
    int64_t label = 0;
    std::memcpy(&label, ring.slot(slot) + columns[0].values_offset, 8);
    const uint64_t n = static_cast<uint64_t>(label) / batch_size;
    if (n != h->batch_index) return "label does not match batch_index";
    if (n >= count_size) return "batch number out of range";
    counts[n].fetch_add(1);
    ++*claimed;
    if (!shm::Release(ring, slot, consumer_id, seq)) return "release failed";
  }
}

ProducerOptions Options(const TempDir& dir, uint32_t slots) {
  ProducerOptions o;
  o.runtime_dir = dir.path().string();
  o.job = "claim";
  o.slot_count = slots;
  o.slot_bytes = 8192;
  o.batch_size = 2;
  return o;
}

TEST_CASE("8 threads claim 10,000 batches: each exactly once (in one process, for TSan)") {
  TempDir dir;
  RingTestProducer producer(Options(dir, 16));
  constexpr size_t kBatches = 10000;
  std::vector<std::atomic<uint32_t>> counts(kBatches);
  std::vector<std::string> errors(8);
  std::vector<uint64_t> claimed(8);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      errors[t] = ConsumeAll(producer.ring(), 0, t + 1, 2, counts.data(), kBatches, &claimed[t]);
    });
  }
  for (uint64_t n = 0; n < kBatches; ++n) REQUIRE(producer.PublishBatch(0, n) >= 0);
  shm::CloseQueue(producer.ring(), 0);
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (uint32_t t = 0; t < 8; ++t) {
    CHECK(errors[t] == "");
    total += claimed[t];
  }
  CHECK(total == kBatches);
  size_t wrong = 0;
  for (auto& c : counts) wrong += c.load() != 1;
  CHECK(wrong == 0);
  CHECK(producer.ring().sb->queues[0].taken.load() == kBatches);
  for (uint32_t i = 0; i < producer.ring().slot_count; ++i) CHECK(shm::IsFree(producer.ring(), i));
}

TEST_CASE("4 processes x 2 threads claim 10,000 batches: each exactly once") {
  TempDir dir;
  RingTestProducer producer(Options(dir, 32));
  constexpr size_t kBatches = 10000;
  SharedArray<std::atomic<uint32_t>> counts(kBatches);
  SharedArray<std::atomic<uint64_t>> claimed(8);
  const std::string name = producer.segment_name();
  std::vector<testing::ChildProcess> children;
  for (uint32_t p = 0; p < 4; ++p) {
    children.push_back(testing::ForkChild([&, p] {
      shm::Segment segment = shm::Segment::Open(name);
      if (!shm::CheckSuperblock(segment.data(), segment.size()).empty()) _exit(5);
      const shm::Ring ring = shm::Ring::Of(segment.data());
      std::string errors[2];
      std::thread threads[2];
      for (int t = 0; t < 2; ++t) {
        threads[t] = std::thread([&, t] {
          uint64_t n = 0;
          errors[t] = ConsumeAll(ring, 0, p + 1, 2, counts.data, kBatches, &n);
          claimed[p * 2 + t] = n;
        });
      }
      for (auto& t : threads) t.join();
      for (auto& e : errors) {
        if (!e.empty()) {
          std::fprintf(stderr, "consumer %u: %s\n", p + 1, e.c_str());
          _exit(6);
        }
      }
    }));
  }
  for (uint64_t n = 0; n < kBatches; ++n) REQUIRE(producer.PublishBatch(0, n) >= 0);
  shm::CloseQueue(producer.ring(), 0);
  for (auto& child : children) {
    const int status = child.Wait(std::chrono::seconds(15));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < 8; ++i) total += claimed[i].load();
  CHECK(total == kBatches);
  size_t wrong = 0;
  for (size_t n = 0; n < kBatches; ++n) wrong += counts[n].load() != 1;
  CHECK(wrong == 0);
}

TEST_CASE("ranks: queue r is only seen by rank r") {
  TempDir dir;
  ProducerOptions o = Options(dir, 12);
  o.mode = shm::DeliveryMode::kRanks;
  o.queue_count = 3;
  RingTestProducer producer(o);
  constexpr size_t kBatches = 300;
  SharedArray<std::atomic<uint32_t>> counts(kBatches);
  SharedArray<std::atomic<uint32_t>> foreign(3);
  const std::string name = producer.segment_name();
  std::vector<testing::ChildProcess> children;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    children.push_back(testing::ForkChild([&, rank] {
      shm::Segment segment = shm::Segment::Open(name);
      const shm::Ring ring = shm::Ring::Of(segment.data());
      for (;;) {
        const uint32_t futex = ring.queue(rank).publish_futex.load();
        uint32_t slot;
        uint64_t seq;
        const ClaimResult r = shm::TryClaim(ring, rank, rank + 1, &slot, &seq);
        if (r == ClaimResult::kClosed) break;
        if (r == ClaimResult::kEmpty) {
          shm::WaitForPublish(ring, rank, futex, std::chrono::milliseconds(100));
          continue;
        }
        if (r != ClaimResult::kClaimed) _exit(7);
        const shm::SlotHeader* h = ring.header(slot);
        shm::RowSource source;
        std::memcpy(&source, ring.slot(slot) + h->sources_offset, sizeof source);
        if (source.file_index != rank || h->batch_index % 3 != rank) foreign[rank]++;
        counts[h->batch_index]++;
        shm::Release(ring, slot, rank + 1, seq);
      }
    }));
  }
  for (uint64_t n = 0; n < kBatches; ++n) REQUIRE(producer.PublishBatch(static_cast<uint32_t>(n % 3), n) >= 0);
  for (uint32_t q = 0; q < 3; ++q) shm::CloseQueue(producer.ring(), q);
  for (auto& child : children) {
    const int status = child.Wait(std::chrono::seconds(15));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (uint32_t q = 0; q < 3; ++q) {
    CHECK(foreign[q].load() == 0);
    CHECK(producer.ring().sb->queues[q].taken.load() == kBatches / 3);
  }
  size_t wrong = 0;
  for (size_t n = 0; n < kBatches; ++n) wrong += counts[n].load() != 1;
  CHECK(wrong == 0);
}

TEST_CASE("a consumer SIGKILLed while holding 2 slots: ReclaimConsumer frees exactly those") {
  TempDir dir;
  RingTestProducer producer(Options(dir, 8));
  const shm::Ring& ring = producer.ring();
  for (uint64_t n = 0; n < 4; ++n) REQUIRE(producer.PublishBatch(0, n) >= 0);

  // Consumer 3 (this process) holds one batch.
  uint32_t my_slot;
  uint64_t my_seq;
  REQUIRE(shm::TryClaim(ring, 0, 3, &my_slot, &my_seq) == ClaimResult::kClaimed);

  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const std::string name = producer.segment_name();
  auto child = testing::ForkChild([&] {
    shm::Segment segment = shm::Segment::Open(name);
    const shm::Ring r = shm::Ring::Of(segment.data());
    uint32_t slot;
    uint64_t seq;
    for (int i = 0; i < 2; ++i) {
      if (shm::TryClaim(r, 0, 7, &slot, &seq) != ClaimResult::kClaimed) _exit(8);
    }
    if (write(ready[1], "x", 1) != 1) _exit(9);
    for (;;) pause();
  });
  char c;
  REQUIRE(read(ready[0], &c, 1) == 1);
  child.Kill(SIGKILL);
  const int status = child.Wait();
  CHECK(WIFSIGNALED(status));

  std::vector<uint32_t> held_by_7;
  for (uint32_t i = 0; i < ring.slot_count; ++i) {
    const SlotWord w = SlotWord::Unpack(ring.header(i)->word.load());
    if (w.state == SlotState::kHeld && w.owner == 7) held_by_7.push_back(i);
  }
  REQUIRE(held_by_7.size() == 2);
  const uint32_t free_before = ring.sb->free_futex.load();
  CHECK(shm::ReclaimConsumer(ring, 7) == 2);
  CHECK(ring.sb->free_futex.load() != free_before);
  for (uint32_t i : held_by_7) CHECK(shm::IsFree(ring, i));
  CHECK(shm::ReclaimConsumer(ring, 7) == 0);
  // Ours is still held, the fourth batch still ready.
  const SlotWord mine = SlotWord::Unpack(ring.header(my_slot)->word.load());
  CHECK(mine.state == SlotState::kHeld);
  CHECK(mine.owner == 3);
  uint32_t slot;
  uint64_t seq;
  REQUIRE(shm::TryClaim(ring, 0, 3, &slot, &seq) == ClaimResult::kClaimed);
  CHECK(seq == 3);
  CHECK_FALSE(shm::Release(ring, slot, 4, seq));      // not the owner
  CHECK_FALSE(shm::Release(ring, slot, 3, seq + 1));  // not that batch
  CHECK(shm::Release(ring, slot, 3, seq));
  CHECK_FALSE(shm::Release(ring, slot, 3, seq));      // twice
  CHECK(shm::Release(ring, my_slot, 3, my_seq));
  CHECK(shm::TryClaim(ring, 0, 3, &slot, &seq) == ClaimResult::kEmpty);
}

TEST_CASE("a consumer that dies between its two CASes does not stall the queue") {
  TempDir dir;
  RingTestProducer producer(Options(dir, 4));
  const shm::Ring& ring = producer.ring();
  for (uint64_t n = 0; n < 4; ++n) REQUIRE(producer.PublishBatch(0, n) >= 0);

  // Consumer 9 claims seq 0 by its word but never advances `taken`.
  const uint32_t slot0 = ring.queue(0).slot_of[0];
  uint64_t ready = SlotWord{SlotState::kReady, 0, 0, 0}.Pack();
  REQUIRE(ring.header(slot0)->word.compare_exchange_strong(ready, SlotWord{SlotState::kHeld, 0, 9, 0}.Pack()));
  REQUIRE(ring.queue(0).taken.load() == 0);

  uint32_t slot;
  uint64_t seq;
  REQUIRE(shm::TryClaim(ring, 0, 2, &slot, &seq) == ClaimResult::kClaimed);
  CHECK(seq == 1);
  CHECK(ring.queue(0).taken.load() == 2);
  CHECK(shm::Release(ring, slot, 2, seq));

  // The daemon reclaims consumer 9's slot and reuses it for seq 4 while `taken` is still 2.
  CHECK(shm::ReclaimConsumer(ring, 9) == 1);
  REQUIRE(producer.PublishBatch(0, 4) >= 0);
  REQUIRE(producer.PublishBatch(0, 5) >= 0);
  std::vector<uint64_t> seqs;
  while (shm::TryClaim(ring, 0, 2, &slot, &seq) == ClaimResult::kClaimed) {
    seqs.push_back(seq);
    shm::Release(ring, slot, 2, seq);
  }
  CHECK(seqs == std::vector<uint64_t>{2, 3, 4, 5});
  shm::CloseQueue(ring, 0);
  CHECK(shm::TryClaim(ring, 0, 2, &slot, &seq) == ClaimResult::kClosed);
}

TEST_CASE("a full ring of 256 slots, one consumer dead between its CASes and its slot reused: still claimable") {
  // `published` - `taken` is then 257, more than there are slots: on a sound queue, not a
  // scribble (TryClaim's bound leaves room for it).
  TempDir dir;
  RingTestProducer producer(Options(dir, shm::kMaxSlots));
  const shm::Ring& ring = producer.ring();
  for (uint64_t n = 0; n < shm::kMaxSlots; ++n) REQUIRE(producer.PublishBatch(0, n) >= 0);
  const uint32_t slot0 = ring.queue(0).slot_of[0];
  uint64_t ready = SlotWord{SlotState::kReady, 0, 0, 0}.Pack();
  REQUIRE(ring.header(slot0)->word.compare_exchange_strong(ready, SlotWord{SlotState::kHeld, 0, 9, 0}.Pack()));
  CHECK(shm::ReclaimConsumer(ring, 9) == 1);
  REQUIRE(producer.PublishBatch(0, shm::kMaxSlots) == static_cast<int>(slot0));
  REQUIRE(ring.queue(0).published.load() - ring.queue(0).taken.load() == shm::kMaxSlots + 1);
  uint32_t slot;
  uint64_t seq;
  REQUIRE(shm::TryClaim(ring, 0, 2, &slot, &seq) == ClaimResult::kClaimed);
  CHECK(seq == 1);
}

// Wakes are skipped when nobody sleeps (a futex wake is a system call), so a lost wake-up
// would show as a sleeper that sleeps until its timeout. Both sides here sleep with a 20 s
// timeout and each acts only once the other is counted as sleeping: the test takes
// milliseconds if every Release wakes the "daemon" in WaitForFree and every Publish the
// consumer in WaitForPublish, across processes, and at least 20 s for a single lost wake.
TEST_CASE("Release wakes a WaitForFree sleeper, Publish a WaitForPublish sleeper; counts return to 0") {
  using namespace std::chrono_literals;
  TempDir dir;
  RingTestProducer producer(Options(dir, 1));  // one slot: every batch waits for the last release
  const shm::Ring& ring = producer.ring();
  CHECK(ring.sb->free_waiters.load() == 0);
  CHECK(ring.queue(0).publish_waiters.load() == 0);
  constexpr uint64_t kBatches = 40;
  constexpr auto kSleep = std::chrono::seconds(20);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + 60s;  // for the polls below, which only wait for the other side
  auto until = [&](const std::function<bool()>& condition) {
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  };
  const std::string name = producer.segment_name();
  auto child = testing::ForkChild([&] {
    shm::Segment segment = shm::Segment::Open(name);
    const shm::Ring r = shm::Ring::Of(segment.data());
    for (uint64_t n = 0; n < kBatches;) {
      const uint32_t seen = r.queue(0).publish_futex.load();
      uint32_t slot = 0;
      uint64_t seq = 0;
      const ClaimResult c = shm::TryClaim(r, 0, 1, &slot, &seq);
      if (c == ClaimResult::kEmpty) {
        shm::WaitForPublish(r, 0, seen, kSleep);
        continue;
      }
      if (c != ClaimResult::kClaimed || seq != n) _exit(3);
      // Hold the batch until the producer sleeps waiting for the slot.
      if (!until([&] { return r.sb->free_waiters.load() != 0; })) _exit(4);
      if (!shm::Release(r, slot, 1, seq)) _exit(5);
      ++n;
    }
  });
  // The consumer holds the only slot: sleep until its release wakes us.
  auto wait_for_free_slot = [&] {
    for (;;) {
      const uint32_t seen = ring.sb->free_futex.load();
      if (shm::IsFree(ring, 0)) return;
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      shm::WaitForFree(ring, seen, kSleep);
    }
  };
  for (uint64_t n = 0; n < kBatches; ++n) {
    if (n > 0) {
      wait_for_free_slot();
      // Publish only once the consumer sleeps on the empty queue.
      REQUIRE(until([&] { return ring.queue(0).publish_waiters.load() != 0; }));
    }
    REQUIRE(producer.PublishBatch(0, n) == 0);
  }
  wait_for_free_slot();  // the consumer releases its last batch only while we sleep
  const int status = child.Wait(std::chrono::seconds(60));
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::chrono::steady_clock::now() - start < 15s);  // no wait ran into its timeout
  CHECK(ring.sb->free_waiters.load() == 0);
  CHECK(ring.queue(0).publish_waiters.load() == 0);
  CHECK(ring.queue(0).taken.load() == kBatches);

  // A wait whose word already moved on returns at once, and counts nothing afterwards.
  const auto t0 = std::chrono::steady_clock::now();
  shm::WaitForFree(ring, ring.sb->free_futex.load() + 1, kSleep);
  shm::WaitForPublish(ring, 0, ring.queue(0).publish_futex.load() + 1, kSleep);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(ring.sb->free_waiters.load() == 0);
  CHECK(ring.queue(0).publish_waiters.load() == 0);
}

// A consumer that wrote free_waiters (one decrement too many: 0 while the daemon sleeps) made
// every later wait run to its timeout, since releases wake only a counted sleeper: 10x slower
// for good, with nothing logged (helper-147). The daemon's wait sets the count.
TEST_CASE("WaitForFree is woken by a release after a consumer wrote free_waiters") {
  using namespace std::chrono_literals;
  TempDir dir;
  RingTestProducer producer(Options(dir, 1));
  const shm::Ring& ring = producer.ring();
  REQUIRE(producer.PublishBatch(0, 0) == 0);
  uint32_t slot = 0;
  uint64_t seq = 0;
  REQUIRE(shm::TryClaim(ring, 0, 1, &slot, &seq) == ClaimResult::kClaimed);
  ring.sb->free_waiters.store(UINT32_MAX);  // 0 - 1: a count that an increment takes to 0
  const uint32_t seen = ring.sb->free_futex.load();
  std::thread consumer([&] {
    std::this_thread::sleep_for(200ms);
    CHECK(shm::Release(ring, slot, 1, seq));
  });
  const auto start = std::chrono::steady_clock::now();
  shm::WaitForFree(ring, seen, std::chrono::seconds(20));
  const auto waited = std::chrono::steady_clock::now() - start;
  consumer.join();
  CHECK(waited < 10s);  // woken by the release, not by the timeout
  CHECK(shm::IsFree(ring, slot));
  CHECK(ring.sb->free_waiters.load() == 0);
}

TEST_CASE("SetState writes the message before the state, closes queues on terminal states") {
  TempDir dir;
  ProducerOptions o = Options(dir, 4);
  o.mode = shm::DeliveryMode::kRanks;
  o.queue_count = 2;
  RingTestProducer producer(o);
  const shm::Ring& ring = producer.ring();
  REQUIRE(producer.PublishBatch(1, 0) >= 0);
  const uint32_t futex = ring.queue(0).publish_futex.load();
  shm::SetState(ring, shm::DaemonState::kFailed, std::string(5000, 'e'));
  CHECK(ring.sb->state.load() == static_cast<uint32_t>(shm::DaemonState::kFailed));
  CHECK(std::strlen(ring.sb->error) == shm::kErrorBytes - 1);
  CHECK(ring.queue(0).publish_futex.load() != futex);
  uint32_t slot;
  uint64_t seq;
  CHECK(shm::TryClaim(ring, 0, 1, &slot, &seq) == ClaimResult::kClosed);
  // Published before the failure: still delivered, then closed.
  CHECK(shm::TryClaim(ring, 1, 1, &slot, &seq) == ClaimResult::kClaimed);
  CHECK(shm::TryClaim(ring, 1, 1, &slot, &seq) == ClaimResult::kClosed);
}

}  // namespace
}  // namespace ringfeed
