#include "format/read_queue.h"

#include "format/hedge_budget.h"

#include <errno.h>
#include <liburing.h>
#include <unistd.h>

#include <time.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <system_error>
#include <thread>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace ringfeed {

struct ReadQueue::Ring {
  io_uring ring{};
};

namespace {
// liburing maps and unmaps a ring's memory with system calls of its own, which ThreadSanitizer
// does not see: a ring mapped where a closed one was (on another thread) looks to it like memory
// two threads share without order. The kernel orders them (munmap before the mmap that reuses
// the address); these tell ThreadSanitizer so. Nothing without it.
#if defined(__SANITIZE_THREAD__)
char ring_mappings;  // the synchronization object: its address only
void RingUnmapping() { __tsan_release(&ring_mappings); }
void RingMapped() { __tsan_acquire(&ring_mappings); }
#else
void RingUnmapping() {}
void RingMapped() {}
#endif

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The running mean round trip of this process's queued reads (ns; 0 before the first), which
// every queue's hedges go by: its files are mostly on the same storage, and a file's first
// reads need a figure before they have their own.
std::atomic<int64_t> g_mean_round_trip_ns{0};
std::atomic<uint64_t> g_hedges_sent{0}, g_hedges_won{0};  // every queue's, for ringfeedd's status

// This process's hedges, paid for from one budget: its files are mostly on the same storage,
// and a saturated link is learnt once rather than again by every file's queue.
HedgeBudget& ProcessHedgeBudget() {
  static HedgeBudget budget(MonotonicNs());
  return budget;
}

void CountRoundTrip(int64_t ns, int64_t factor) {
  const int64_t mean = g_mean_round_trip_ns.load(std::memory_order_relaxed);
  if (mean == 0) {
    g_mean_round_trip_ns.store(ns, std::memory_order_relaxed);
    return;
  }
  ns = std::min(ns, factor * mean);  // a straggler moves the mean as one read of factor x mean
  g_mean_round_trip_ns.store(mean + (ns - mean) / 16, std::memory_order_relaxed);
}

// io_uring before Linux 5.6 has no IORING_OP_READ: every read would fail with EINVAL.
bool CanRead(io_uring* ring, std::string* why) {
  io_uring_probe* probe = io_uring_get_probe_ring(ring);
  const bool ok = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ);
  if (probe != nullptr) io_uring_free_probe(probe);
  if (!ok && why != nullptr) *why = "io_uring without IORING_OP_READ (Linux < 5.6)";
  return ok;
}
}  // namespace

std::unique_ptr<ReadQueue> ReadQueue::Create(int fd, uint64_t offset, uint64_t file_size, size_t block_bytes,
                                             size_t depth, std::string* why, size_t allowance, bool hedge) {
  block_bytes = std::max<size_t>(block_bytes, 1);
  depth = std::max<size_t>(depth, 2);
  std::unique_ptr<ReadQueue> q(new ReadQueue(fd, offset, file_size, block_bytes, depth));
  q->ring_entries_ = std::max(depth + 1, kRingEntries);  // + a hedge
  const int err = io_uring_queue_init(static_cast<unsigned>(q->ring_entries_), &q->ring_->ring, 0);
  RingMapped();
  if (err < 0) {
    q->ring_.reset();
    if (why != nullptr) *why = std::string("io_uring_queue_init: ") + std::strerror(-err);
    return nullptr;
  }
  if (!CanRead(&q->ring_->ring, why)) {
    RingUnmapping();
    io_uring_queue_exit(&q->ring_->ring);
    q->ring_.reset();
    return nullptr;
  }
  // The kernel's workers for this thread's rings are sized by its first ring (a queue of 2
  // would cap every later, deeper one at 2 reads at a time): let them reach kMaxWorkers.
  // Unbounded workers (0) stay as they are. Linux >= 5.15; older kernels keep their limit.
  unsigned workers[2] = {kMaxWorkers, 0};
  io_uring_register_iowq_max_workers(&q->ring_->ring, workers);
  // The ring holds the file for its reads (fixed file 0), so reads still in flight when the
  // queue goes can be left to a thread of their own (~ReadQueue). Without it: plain fds.
  q->registered_ = io_uring_register_files(&q->ring_->ring, &fd, 1) == 0;
  q->allowance_asked_ = allowance;
  q->allowance_ = std::clamp<size_t>(allowance, 1, depth);
  q->hedge_ = hedge;
  q->TopUp(nullptr);
  return q;
}

uint64_t ReadQueue::TotalHedgesSent() { return g_hedges_sent.load(std::memory_order_relaxed); }
uint64_t ReadQueue::TotalHedgesWon() { return g_hedges_won.load(std::memory_order_relaxed); }
int64_t ReadQueue::MeanRoundTripNs() { return g_mean_round_trip_ns.load(std::memory_order_relaxed); }
bool ReadQueue::HedgesPaused() { return ProcessHedgeBudget().Rationed(); }
void ReadQueue::ResetHedgeBudget() { ProcessHedgeBudget().Reset(MonotonicNs()); }

bool ReadQueue::Available(std::string* why) {
  io_uring ring{};
  const int err = io_uring_queue_init(2, &ring, 0);
  RingMapped();
  if (err < 0) {
    if (why != nullptr) *why = std::string("io_uring_queue_init: ") + std::strerror(-err);
    return false;
  }
  const bool reads = CanRead(&ring, why);
  RingUnmapping();
  io_uring_queue_exit(&ring);
  return reads;
}

ReadQueue::ReadQueue(int fd, uint64_t offset, uint64_t file_size, size_t block_bytes, size_t depth)
    : ring_(std::make_unique<Ring>()),
      fd_(fd),
      position_(offset),
      next_offset_(offset),
      file_size_(file_size),
      block_bytes_(block_bytes),
      blocks_(depth),
      depth_(depth),
      allowance_(depth) {}

void ReadQueue::ReapLeftovers(Ring* ring, std::vector<std::unique_ptr<uint8_t[]>>* buffers, size_t in_flight) {
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_peek_cqe(&ring->ring, &cqe) == 0 && cqe != nullptr) {
      io_uring_cqe_seen(&ring->ring, cqe);
      --in_flight;
      continue;
    }
    const int r = io_uring_submit_and_wait(&ring->ring, 1);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) break;
  }
  RingUnmapping();
  io_uring_queue_exit(&ring->ring);
  // Reads the ring could not wait for may still land: their memory is left allocated.
  if (in_flight > 0) {
    for (auto& b : *buffers) static_cast<void>(b.release());
  }
}

ReadQueue::~ReadQueue() {
  if (!ring_) return;
  ReapAvailable();
  if (in_flight_ > 0 && registered_) {
    // Reads still in flight (the losers of hedged reads are stragglers by definition): a
    // thread of their own waits for them, so the caller (a reader at a file's end, with the
    // file's last records not yet handed on) does not.
    struct Leftovers {
      std::unique_ptr<Ring> ring;
      std::vector<std::unique_ptr<uint8_t[]>> buffers;
      size_t in_flight;
    };
    std::shared_ptr<Leftovers> left;
    try {  // allocated before anything moves: out of memory, the reads are waited for below
      left = std::make_shared<Leftovers>();
      left->buffers.reserve(blocks_.size() + 1 + orphans_.size());
    } catch (const std::bad_alloc&) {
      left.reset();
    }
    if (left) {
      left->in_flight = in_flight_;
      for (Block& b : blocks_) {
        if (b.in_flight) left->buffers.push_back(std::move(b.bytes));
      }
      if (hedge_in_flight_) left->buffers.push_back(std::move(hedge_bytes_));
      for (Orphan& o : orphans_) left->buffers.push_back(std::move(o.bytes));
      left->ring = std::move(ring_);
      try {
        std::thread([left] {
          pthread_setname_np(pthread_self(), "rf-read-reap");
          ReapLeftovers(left->ring.get(), &left->buffers, left->in_flight);
        }).detach();
      } catch (...) {  // no thread (ulimit -u, memory): wait here
        ReapLeftovers(left->ring.get(), &left->buffers, left->in_flight);
      }
      return;
    }
  }
  while (in_flight_ > 0 && Reap()) {
  }
  RingUnmapping();
  io_uring_queue_exit(&ring_->ring);
  // Reads the ring could not wait for may still land after the ring is gone: their blocks are
  // left allocated rather than freed under them (only after an io_uring failure).
  if (in_flight_ > 0) {
    for (Block& b : blocks_) {
      if (b.in_flight) static_cast<void>(b.bytes.release());
    }
    if (hedge_in_flight_) static_cast<void>(hedge_bytes_.release());
    for (Orphan& o : orphans_) static_cast<void>(o.bytes.release());
  }
}

void ReadQueue::TopUp(Block* spare) {
  while (count_ < allowance_ && next_offset_ < file_size_) {
    const size_t index = (head_ + count_) % blocks_.size();
    Block& b = blocks_[index];
    if (!b.bytes) {
      if (spare != nullptr && spare->bytes) {
        b.bytes = std::move(spare->bytes);
      } else {
        b.bytes.reset(new uint8_t[block_bytes_]);
      }
    }
    b.offset = next_offset_;
    b.length = static_cast<size_t>(std::min<uint64_t>(block_bytes_, file_size_ - next_offset_));
    b.filled = 0;
    b.taken = 0;
    b.error = 0;
    next_offset_ += b.length;
    ++count_;
    Submit(index);
  }
}

size_t ReadQueue::blocks() const {
  return static_cast<size_t>(std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.bytes != nullptr; }));
}

void ReadQueue::SetAllowance(size_t blocks) {
  allowance_asked_ = blocks;
  allowance_ = std::clamp<size_t>(blocks, 1, depth_);
  TopUp(nullptr);
}

bool ReadQueue::SetDepth(size_t depth) {
  depth = std::max<size_t>(depth, 2);
  // Up to depth blocks in flight and a hedge, and while a shallower queue drains up to the old
  // depth: each needs a submission entry should its submit be left queued (Submit), and twice
  // the entries bound the completions waiting to be seen (io_uring's default CQ size).
  if (depth + 1 > ring_entries_) return false;
  if (depth > blocks_.size()) {
    // The ring of slots grows with the held blocks first, in file order (their reads in flight
    // are known by id, not by slot, so moving them is safe).
    std::vector<Block> grown(depth);
    for (size_t i = 0; i < blocks_.size(); ++i) grown[i] = std::move(blocks_[(head_ + i) % blocks_.size()]);
    blocks_ = std::move(grown);
    head_ = 0;
  }
  depth_ = depth;
  allowance_ = std::clamp<size_t>(allowance_asked_, 1, depth_);
  TopUp(nullptr);
  return true;
}

void ReadQueue::Submit(size_t index) {
  Block& b = blocks_[index];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  if (sqe == nullptr) {  // no free submission entry (never seen: one per block): an error, never a short file
    b.error = EAGAIN;
    return;
  }
  io_uring_prep_read(sqe, registered_ ? 0 : fd_, b.bytes.get() + b.filled, static_cast<unsigned>(b.length - b.filled),
                     b.offset + b.filled);
  b.read_id = next_id_++;
  b.submitted_ns = MonotonicNs();
  b.hedged = false;
  io_uring_sqe_set_data64(sqe, b.read_id);
  // Straight to the kernel's workers: some file systems (FUSE) block in the non-blocking first
  // attempt io_uring makes in io_uring_submit, which would make the reads one at a time.
  io_uring_sqe_set_flags(sqe, IOSQE_ASYNC | (registered_ ? IOSQE_FIXED_FILE : 0));
  b.in_flight = true;
  ++in_flight_;
  // A failed submit leaves the entry queued: Reap's io_uring_submit_and_wait sends it again.
  io_uring_submit(&ring_->ring);
}

void ReadQueue::SubmitHedge(size_t index) {
  Block& b = blocks_[index];
  b.hedged = true;  // once, sent or not (its token is spent)
  if (!hedge_bytes_) hedge_bytes_.reset(new uint8_t[block_bytes_]);
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  if (sqe == nullptr) return;  // no free entry: no hedge (the read it doubles goes on)
  io_uring_prep_read(sqe, registered_ ? 0 : fd_, hedge_bytes_.get(), static_cast<unsigned>(b.length), b.offset);
  b.hedge_id = next_id_++;
  hedge_submitted_ns_ = MonotonicNs();
  io_uring_sqe_set_data64(sqe, b.hedge_id);
  io_uring_sqe_set_flags(sqe, IOSQE_ASYNC | (registered_ ? IOSQE_FIXED_FILE : 0));
  hedge_in_flight_ = true;
  ++in_flight_;
  ++hedges_sent_;
  g_hedges_sent.fetch_add(1, std::memory_order_relaxed);
  io_uring_submit(&ring_->ring);
}

void ReadQueue::ReapAvailable() {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_->ring, &cqe) == 0 && cqe != nullptr) {
    const uint64_t id = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_->ring, cqe);
    --in_flight_;
    Completed(id, res, /*timely=*/false);
    cqe = nullptr;
  }
}

bool ReadQueue::Reap(int64_t timeout_ns) {
  io_uring_cqe* cqe = nullptr;
  bool waited = false;  // the completion arrived during this call: now is about when it came
  while (io_uring_peek_cqe(&ring_->ring, &cqe) != 0 || cqe == nullptr) {
    waited = true;
    // Submits what is queued (a submit that failed earlier) and waits for a completion.
    int r = 0;
    if (timeout_ns < 0) {
      r = io_uring_submit_and_wait(&ring_->ring, 1);
    } else {
      __kernel_timespec ts{timeout_ns / 1'000'000'000, timeout_ns % 1'000'000'000};
      r = io_uring_submit_and_wait_timeout(&ring_->ring, &cqe, 1, &ts, nullptr);
      if (r == -ETIME) return true;  // nothing answered in time: the caller looks again
    }
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) return false;
    cqe = nullptr;
  }
  const uint64_t id = io_uring_cqe_get_data64(cqe);
  const int res = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  --in_flight_;
  Completed(id, res, waited);
  return true;
}

void ReadQueue::Completed(uint64_t id, int res, bool timely) {
  for (size_t index = 0; index < blocks_.size(); ++index) {
    Block& b = blocks_[index];
    if (b.in_flight && b.read_id == id) {
      b.in_flight = false;
      if (res == -EINTR || res == -EAGAIN || res == -ECANCELED) {
        // Again: a read the kernel cancelled (its worker went away with the thread that queued
        // it, e.g. a reader the tuner retired) is not an error of the file.
        Submit(index);
      } else if (res < 0 && b.hedge_id != 0 && b.filled == 0) {
        // Failed while its hedge is in flight (a straggler that timed out, as network file
        // systems answer one): the hedge becomes the block's read, and its answer decides.
        std::swap(b.bytes, hedge_bytes_);
        b.read_id = b.hedge_id;
        b.submitted_ns = hedge_submitted_ns_;
        b.hedge_id = 0;
        b.in_flight = true;
        hedge_in_flight_ = false;
        return;
      } else if (res < 0) {
        b.error = -res;
      } else if (res == 0) {
        b.length = b.filled;  // the file shrank: the block ends here
      } else {
        // A completion seen only now (not while waiting) may have come long before: its time
        // is an upper bound, which counts only where it is below the mean (it can only be
        // lower still). Counting only the reads waited for would leave out the fast ones.
        if (b.filled == 0) {
          const int64_t ns = MonotonicNs() - b.submitted_ns;
          if (timely || ns < g_mean_round_trip_ns.load(std::memory_order_relaxed)) CountRoundTrip(ns, kHedgeFactor);
        }
        b.filled += static_cast<size_t>(res);
        if (b.filled < b.length) Submit(index);  // a short read: the rest
      }
      if (!b.in_flight && b.hedge_id != 0) {  // answered first: the hedge's memory waits for its answer
        orphans_.push_back({b.hedge_id, std::move(hedge_bytes_)});
        b.hedge_id = 0;
        hedge_in_flight_ = false;
      }
      return;
    }
    if (b.hedge_id == id) {
      b.hedge_id = 0;
      hedge_in_flight_ = false;
      // The whole block, before the read it doubles got anything: the blocks trade places. A
      // short or failed hedge is dropped: that read goes on and decides.
      if (res > 0 && static_cast<size_t>(res) == b.length && b.in_flight && b.filled == 0) {
        orphans_.push_back({b.read_id, std::move(b.bytes)});
        b.bytes = std::move(hedge_bytes_);
        b.in_flight = false;
        b.filled = b.length;
        ++hedges_won_;
        g_hedges_won.fetch_add(1, std::memory_order_relaxed);
        ProcessHedgeBudget().Won();
      }
      return;
    }
  }
  // An orphan's answer: its memory can go (or serve the next hedge).
  const auto it = std::find_if(orphans_.begin(), orphans_.end(), [&](const Orphan& o) { return o.id == id; });
  if (it == orphans_.end()) return;
  if (!hedge_bytes_) hedge_bytes_ = std::move(it->bytes);
  orphans_.erase(it);
}

ssize_t ReadQueue::Read(uint8_t* dst, size_t n) {
  if (n == 0) return 0;
  if (count_ == 0) {
    // Past the blocks (the file's size at Create): plain reads, so a file that grew is read on.
    while (true) {
      const ssize_t r = ::pread(fd_, dst, n, static_cast<off_t>(position_));
      if (r < 0 && errno == EINTR) continue;
      if (r > 0) position_ += static_cast<uint64_t>(r);
      return r;
    }
  }
  const uint8_t* data = nullptr;
  const ssize_t available = Peek(&data);
  if (available <= 0) return available;
  const size_t m = std::min(n, static_cast<size_t>(available));
  std::memcpy(dst, data, m);
  Consume(m);
  return static_cast<ssize_t>(m);
}

ssize_t ReadQueue::Peek(const uint8_t** data) {
  if (count_ == 0) return 0;
  Block& b = blocks_[head_];
  while (b.in_flight) {
    // Completions already there first: a read answered but not yet seen is not late.
    ReapAvailable();
    if (!b.in_flight) break;
    // Waiting for it: a read far later than usual is sent again (hedged; class comment).
    int64_t timeout_ns = -1;
    const int64_t mean = g_mean_round_trip_ns.load(std::memory_order_relaxed);
    const bool spare = hedge_bytes_ != nullptr || orphans_.size() < kMaxSpareBlocks;
    // Once per read: a hedge that came back short or failed (a file cut short) is not sent again.
    if (hedge_ && !hedge_in_flight_ && !b.hedged && b.filled == 0 && mean > 0 && spare) {
      const int64_t now = MonotonicNs();
      const int64_t late_in = b.submitted_ns + std::max(kHedgeMinNs, kHedgeFactor * mean) - now;
      if (late_in > 0) {
        timeout_ns = late_in;
      } else if (ProcessHedgeBudget().TryTake(now)) {
        SubmitHedge(head_);
      } else {
        b.hedged = true;  // no token (hedges have not been winning): this read is waited out
      }
    }
    if (!Reap(timeout_ns)) {
      errno = EIO;
      return -1;
    }
  }
  const size_t available = b.filled - b.taken;
  if (available == 0) {
    if (b.error != 0) {  // after the bytes read before it, as read() would
      errno = b.error;
      return -1;
    }
    return 0;  // the file ended inside this block (it shrank)
  }
  *data = b.bytes.get() + b.taken;
  return static_cast<ssize_t>(available);
}

void ReadQueue::Consume(size_t n) {
  Block& b = blocks_[head_];
  b.taken += n;
  position_ += n;
  if (b.taken == b.length) {
    const size_t slots = blocks_.size(), done = head_;
    head_ = (head_ + 1) % slots;
    --count_;
    TopUp(&b);  // the next block goes into the slot after the last one held, with b's bytes
    // Not read again (the file's end, or the allowance lowered): its memory goes now.
    if (b.bytes && (done + slots - head_) % slots >= count_) b.bytes.reset();
  }
}

}  // namespace ringfeed
