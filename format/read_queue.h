// ReadQueue: reads a file sequentially with several reads in flight at once (io_uring), for
// storage where each read waits out a round trip (network file systems, FUSE-mounted buckets):
// one read at a time gets at most block_bytes per round trip from a file, `depth` reads get
// `depth` times that. TFRecordReader uses one per file when ReaderOptions::reads_in_flight > 1
// (a GZIP/ZLIB file's inflater reads through it: InflateStream::SetQueue).
//
// It keeps up to `depth` blocks of `block_bytes`, each read at the next offset not yet asked
// for; a block is read again for the next offset as soon as all of it is taken (Read, Consume).
// So at most depth x block_bytes bytes are buffered and in flight, and the reads stay ahead of
// the caller by that much. SetDepth changes the depth in place: the blocks held keep their bytes
// and their reads in flight (none is asked for twice); a queue made shallower holds up to its
// old depth until those blocks are taken. An allowance (SetAllowance, <= depth) lowers how many blocks it
// holds at once: a file opened ahead of its turn reads one block at a time and takes more as
// files before it near their ends (ReadAhead hands their blocks on), so that its first records
// are there when its turn comes. A block with nothing left to read into (the file's end) or
// beyond the allowance is freed once it is taken. Reads run in the kernel's io_uring workers (for files, blocking reads in kernel
// threads); the caller's thread waits only when the block it needs is not there yet.
// The file's size at Create bounds the blocks read ahead; past it Read goes on with plain
// pread() calls, so a file that grew is still read to its end.
//
// Hedged reads (stragglers): while the caller waits for the block it needs, a read of it that
// has been in flight for longer than kHedgeFactor x the usual round trip (a running mean of this
// process's reads, at least kHedgeMinNs) is sent a second time, into a spare block, and the
// first answer is taken ("The Tail at Scale", Dean and Barroso, CACM 2013; Amazon S3's
// performance guidelines retry slow requests the same way). The other answer lands in memory
// kept until it arrives. Only the block the caller waits on is sent again, one at a time, and
// the spare blocks are at most kMaxSpareBlocks: a queue holds at most depth + kMaxSpareBlocks
// blocks. A read that fails while its hedge is in flight (a straggler that timed out) leaves
// the block to the hedge, whose answer decides. Each hedge takes a token of this process's
// HedgeBudget (format/hedge_budget.h): where hedges do not answer first (a bandwidth cap: the
// second read queues behind the same limit) they stop after a few, and one is tried every 10 s.
// Create's `hedge` = false sends none.
//
// Errors: Create returns nullptr (and says why) when io_uring is not available (seccomp
// profiles that block it, io_uring_disabled) or cannot read files (IORING_OP_READ: Linux < 5.6);
// the caller then reads as usual. Read
// returns -1 with errno set, as read() does.
// Thread-safety: one thread at a time. The fd is borrowed, not closed; the queue must be
// destroyed before it is closed. The queue registers the file with its ring (io_uring's fixed
// files), so the destructor does not wait for reads still in flight (a hedged read's straggler,
// blocks read ahead): a thread of its own ("rf-read-reap") waits for them with the ring, whose
// registration keeps the file open for them, and frees their memory then. Where the file could
// not be registered, or that thread not started, the destructor waits for them itself.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ringfeed {

class ReadQueue {
 public:
  // A queue reading `fd` from `offset` on, the blocks up to `file_size` ahead (block_bytes >= 1,
  // depth >= 2). nullptr when io_uring cannot be set up; `*why` then says why.
  // `allowance`: the most blocks held at once to begin with (1 to depth; SetAllowance).
  // `hedge`: whether late reads are sent again (hedged reads, above).
  static std::unique_ptr<ReadQueue> Create(int fd, uint64_t offset, uint64_t file_size, size_t block_bytes,
                                           size_t depth, std::string* why, size_t allowance = SIZE_MAX,
                                           bool hedge = true);
  // Whether this process can read files through io_uring (a ring of 2 entries, closed at
  // once): false, with `*why`, where a seccomp profile blocks io_uring_setup (Docker's default
  // one does since 2023), the sysctl io_uring_disabled forbids it, or the kernel has io_uring
  // but not its read operation (5.1-5.5). Every Create would then return nullptr.
  static bool Available(std::string* why);
  ~ReadQueue();  // waits for the reads in flight
  ReadQueue(const ReadQueue&) = delete;
  ReadQueue& operator=(const ReadQueue&) = delete;

  // Copies the next bytes of the file (at most `n`, fewer at a block's end) into `dst`. Returns
  // how many; 0 at the end of the file; -1 on a read error (errno set).
  ssize_t Read(uint8_t* dst, size_t n);
  // The same bytes in place (no copy): from the current position to the end of the block that
  // holds it, waiting for that block's read. Returns how many (`*data` points at them); 0 at the
  // end of the file and past the blocks (a file that grew after Create: Read goes on there); -1
  // on a read error (errno set). Nothing is taken: the bytes stay valid until Consume.
  ssize_t Peek(const uint8_t** data);
  // Takes the first `n` of the bytes Peek returned (n <= that count). A block taken to its end
  // is read again for the next offset, so what Peek showed of it is no longer valid.
  void Consume(size_t n);

  size_t depth() const { return depth_; }
  // A new depth (>= 2) for the queue as it is: a deeper one reads the next blocks at once; a
  // shallower one frees blocks as they are taken (until then it holds up to the old depth;
  // reads in flight finish). The allowance asked for (Create, SetAllowance) is clamped to the
  // new depth. False, and nothing changed, where the queue's io_uring cannot take
  // that many reads (more than kRingEntries - 1, or depth + 1 at Create where that was more):
  // the caller then makes a new queue.
  bool SetDepth(size_t depth);
  // The most blocks held at once from now on (clamped to 1..depth). Raising it reads the next
  // blocks at once; lowering it frees blocks as they are taken (reads in flight finish).
  void SetAllowance(size_t blocks);
  size_t allowance() const { return allowance_; }
  // Blocks allocated now (in flight, or holding bytes not taken yet); with the spare blocks of
  // hedged reads (at most kMaxSpareBlocks), the queue's memory is (blocks() + spare_blocks())
  // x block_bytes().
  size_t blocks() const;
  size_t spare_blocks() const { return (hedge_bytes_ ? 1 : 0) + orphans_.size(); }
  // Whether every block up to the file's size at Create has been asked for: from here on the
  // queue only shrinks, by a block each time one is taken.
  bool all_requested() const { return next_offset_ >= file_size_; }
  // Whether the next bytes come from a block (false past the blocks: a file that grew after
  // Create is read on with pread, and at the end).
  bool in_blocks() const { return count_ > 0; }
  // io_uring's kernel workers allowed per reading thread (all its queues together).
  static constexpr unsigned kMaxWorkers = 64;
  size_t block_bytes() const { return block_bytes_; }
  // Hedged reads (class comment): sent, and answered before the read they doubled.
  uint64_t hedges_sent() const { return hedges_sent_; }
  uint64_t hedges_won() const { return hedges_won_; }
  // The same over every queue of this process so far, and the running mean round trip the
  // hedges go by (ns; 0 before the first read). Any thread.
  static uint64_t TotalHedgesSent();
  static uint64_t TotalHedgesWon();
  static int64_t MeanRoundTripNs();
  // Whether this process's hedges are paused: their tokens ran out and none has answered
  // first since (HedgeBudget::Rationed; one is tried every 10 s). Any thread.
  static bool HedgesPaused();
  // A fresh budget for this process's hedges (HedgeBudget::kTokens): for tests, whose cases
  // share one process but not one storage.
  static void ResetHedgeBudget();
  // A read is doubled once in flight for kHedgeFactor x the running mean round trip, and no
  // less than kHedgeMinNs; the mean counts a read at most kHedgeFactor x itself (stragglers
  // move it little).
  static constexpr int64_t kHedgeFactor = 2;
  static constexpr int64_t kHedgeMinNs = 5'000'000;
  // Blocks a queue holds beyond its depth: the hedge's and those of reads still in flight whose
  // answer is no longer wanted. A hedge waits while they are all taken.
  static constexpr size_t kMaxSpareBlocks = 2;
  // Submission entries of a queue's io_uring: at least this many (depth + 1 where that is more),
  // so that SetDepth can deepen the queue in place up to kRingEntries - 1 (the tuner's reads per
  // file stay below). io_uring rounds entries up to a power of two: a queue of depth 17 had 32.
  static constexpr size_t kRingEntries = 32;
  // The most memory a TFRecordReader's queue for `reads` reads in flight (> 1) holds: its
  // depth, reads + 1 (the block being taken besides those in flight), and the spare blocks.
  // What the memory plan and the tuner count per file with queued reads.
  static constexpr uint64_t MostBytes(uint64_t reads, uint64_t block_bytes) {
    return (reads + 1 + kMaxSpareBlocks) * block_bytes;
  }
  // How many reads in flight MostBytes fits in `bytes` (0 when not even 1).
  static constexpr uint64_t MostReadsFor(uint64_t bytes, uint64_t block_bytes) {
    const uint64_t blocks = block_bytes == 0 ? 0 : bytes / block_bytes;
    return blocks > 1 + kMaxSpareBlocks ? blocks - 1 - kMaxSpareBlocks : 0;
  }

 private:
  struct Block {
    std::unique_ptr<uint8_t[]> bytes;
    uint64_t offset = 0;  // in the file
    size_t length = 0;    // bytes asked for
    size_t filled = 0;    // bytes read so far
    size_t taken = 0;     // bytes taken by Read or Consume
    int error = 0;        // errno of a failed read
    bool in_flight = false;
    uint64_t read_id = 0;      // the read in flight into `bytes` (io_uring user data)
    int64_t submitted_ns = 0;  // when it was sent (CLOCK_MONOTONIC)
    uint64_t hedge_id = 0;     // its hedged read into hedge_bytes_, in flight (0: none)
    // The read in flight was sent again once already, or its hedge was refused a token: never
    // sent (again) from here on.
    bool hedged = false;
  };
  // A read whose answer is no longer wanted (the other of a hedged pair answered first): its
  // memory is kept until it lands.
  struct Orphan {
    uint64_t id;
    std::unique_ptr<uint8_t[]> bytes;
  };
  ReadQueue(int fd, uint64_t offset, uint64_t file_size, size_t block_bytes, size_t depth);
  // (Re)submits the unread part of blocks_[index]; without a free submission entry the block
  // gets the error EAGAIN instead.
  void Submit(size_t index);
  void SubmitHedge(size_t index);  // sends blocks_[index]'s read again, into hedge_bytes_
  // Waits for one completion and handles it, at most `timeout_ns` (< 0: no limit); false:
  // io_uring failed.
  bool Reap(int64_t timeout_ns = -1);
  void ReapAvailable();  // handles the completions there now, without waiting
  // A completion's bookkeeping. `timely`: it arrived while the caller waited (so now is about
  // when the read was answered); others count in the mean round trip only below it.
  void Completed(uint64_t id, int res, bool timely);
  // Reads the next blocks while fewer than allowance_ are held and the file has more, each into
  // the slot after the last held one; `spare` (if it has bytes) is used before allocating.
  void TopUp(Block* spare);

  struct Ring;  // io_uring, kept out of this header
  // Waits for `in_flight` reads on `ring`, then closes it and frees `buffers` (the memory the
  // reads land in; left allocated if the ring fails first).
  static void ReapLeftovers(Ring* ring, std::vector<std::unique_ptr<uint8_t[]>>* buffers, size_t in_flight);
  std::unique_ptr<Ring> ring_;
  bool registered_ = false;  // fd_ is the ring's fixed file 0
  bool hedge_ = true;        // late reads may be sent again (Create's `hedge`)
  int fd_;
  uint64_t position_;       // offset of the next byte Read returns
  uint64_t next_offset_;    // offset of the next block to read
  const uint64_t file_size_;
  const size_t block_bytes_;
  // A ring of at least depth_ slots (more after SetDepth made it shallower): the held blocks are
  // head_ .. head_ + count_ - 1 (modulo its size), in file order.
  std::vector<Block> blocks_;
  size_t depth_;            // the most blocks read ahead (Create's depth, SetDepth)
  size_t ring_entries_ = 0;  // submission entries asked of io_uring (at least depth_ + 1)
  size_t head_ = 0;         // the block holding position_
  size_t count_ = 0;        // blocks held (more than depth_ only after SetDepth lowered it)
  size_t allowance_;        // the most blocks held at once: allowance_asked_ clamped to 1 .. depth_
  size_t allowance_asked_ = SIZE_MAX;  // Create's allowance, then SetAllowance's
  size_t in_flight_ = 0;     // reads sent and not answered: the blocks', the hedge's, orphans'
  uint64_t next_id_ = 1;
  std::unique_ptr<uint8_t[]> hedge_bytes_;  // the hedged read's block (kept for the next one)
  bool hedge_in_flight_ = false;
  int64_t hedge_submitted_ns_ = 0;  // when the hedge in flight was sent (CLOCK_MONOTONIC)
  std::vector<Orphan> orphans_;
  uint64_t hedges_sent_ = 0, hedges_won_ = 0;
};

}  // namespace ringfeed
