#include "format/read_queue.h"

#include <errno.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

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
                                             size_t depth, std::string* why, size_t allowance) {
  block_bytes = std::max<size_t>(block_bytes, 1);
  depth = std::max<size_t>(depth, 2);
  std::unique_ptr<ReadQueue> q(new ReadQueue(fd, offset, file_size, block_bytes, depth));
  const int err = io_uring_queue_init(static_cast<unsigned>(depth), &q->ring_->ring, 0);
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
  q->allowance_ = std::clamp<size_t>(allowance, 1, depth);
  q->TopUp(nullptr);
  return q;
}

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
      allowance_(depth) {}

ReadQueue::~ReadQueue() {
  if (!ring_) return;
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
    if (!Submit(index)) b.error = EAGAIN;  // no free submission entry: never happens (one per block)
  }
}

size_t ReadQueue::blocks() const {
  return static_cast<size_t>(std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.bytes != nullptr; }));
}

void ReadQueue::SetAllowance(size_t blocks) {
  allowance_ = std::clamp<size_t>(blocks, 1, blocks_.size());
  TopUp(nullptr);
}

bool ReadQueue::Submit(size_t index) {
  Block& b = blocks_[index];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  if (sqe == nullptr) return false;
  io_uring_prep_read(sqe, fd_, b.bytes.get() + b.filled, static_cast<unsigned>(b.length - b.filled),
                     b.offset + b.filled);
  io_uring_sqe_set_data64(sqe, index);
  // Straight to the kernel's workers: some file systems (FUSE) block in the non-blocking first
  // attempt io_uring makes in io_uring_submit, which would make the reads one at a time.
  io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
  b.in_flight = true;
  ++in_flight_;
  // A failed submit leaves the entry queued: Reap's io_uring_submit_and_wait sends it again.
  io_uring_submit(&ring_->ring);
  return true;
}

bool ReadQueue::Reap() {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_->ring, &cqe) != 0 || cqe == nullptr) {
    // Submits what is queued (a submit that failed earlier) and waits for a completion.
    const int r = io_uring_submit_and_wait(&ring_->ring, 1);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) return false;
  }
  const size_t index = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
  const int res = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  Block& b = blocks_[index];
  b.in_flight = false;
  --in_flight_;
  if (res == -EINTR || res == -EAGAIN || res == -ECANCELED) {
    // Again: a read the kernel cancelled (its worker went away with the thread that queued
    // it, e.g. a reader the tuner retired) is not an error of the file.
    Submit(index);
  } else if (res < 0) {
    b.error = -res;
  } else if (res == 0) {
    b.length = b.filled;  // the file shrank: the block ends here
  } else {
    b.filled += static_cast<size_t>(res);
    if (b.filled < b.length) Submit(index);  // a short read: the rest
  }
  return true;
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
    if (!Reap()) {
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
