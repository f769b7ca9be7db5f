// The shared-memory ring's layout: the contract between ringfeedd (the only writer of batch
// data) and the client library in each trainer process. Plain structs and constants, no
// behaviour; the operations on them are in ringfeed's source (source: shm/ring.h).
//
// One segment per job (POSIX shared memory, /dev/shm), laid out as
//
//   offset 0             Superblock            magic, version, layout hash, instance id, pid,
//                                              state + error, heartbeat, geometry, schema,
//                                              delivery queues, consumer table
//   slots_offset         slot 0                SlotHeader, ColumnDesc[feature_count],
//   + i * slot_stride    slot i                RowSource[rows], then the column data
//
// slots_offset and slot_stride are multiples of kPageBytes (4096), so each slot and the whole
// slot area can be registered with a GPU driver (cuMemHostRegister needs 4 KiB alignment).
// Every column region inside a slot starts at a multiple of kColumnAlign (64) bytes from the
// slot start. All integers are little-endian host order; the segment is never shared between
// machines.
//
// Column layout inside a slot (the same as source: format/example_batch.h), rows = SlotHeader::rows:
//   FixedLen numeric      values: rows * prod(shape) elements of dtype, row-major
//   VarLen numeric        values: the rows' values concatenated; row_splits: int64[rows + 1]
//   FixedLen bytes        values: the strings' bytes; value_offsets: int64[rows*prod(shape)+1]
//   VarLen bytes          values + value_offsets (one per string + 1) + row_splits (strings)
// value_offsets[0] == row_splits[0] == 0; both are non-decreasing. A client checks all of this
// against the slot bounds before handing a pointer out (source: shm/batch_check.h).
//
// Hand-off (no locks; atomics in the mapping, futex waits with timeouts):
//   Each slot has one 64-bit state word (SlotWord): kFree -> kFilling (daemon lays out and
//   parses a batch) -> kReady (published to delivery queue q as that queue's sequence number
//   seq) -> kHeld (claimed by consumer c with one CAS from the exact kReady word) -> kFree
//   (released by c with one CAS from the exact kHeld word, or reclaimed by the daemon when c's
//   process died).
//   A delivery queue (QueueHeader) is a sequence of published batches: the daemon writes
//   slot_of[seq % kMaxSlots], then increments `published` (release) and `publish_futex`, and
//   wakes waiters if `publish_waiters` says there are any. Consumers of the queue claim seq = `taken` by CAS on the slot word, then
//   advance `taken` from seq to seq + 1 (any consumer that sees the slot already claimed helps
//   advance it). consumers.mode shared: one queue that every consumer takes from; ranks: queue
//   r holds the batches for rank r.
//   `closed` = 1 means no more batches will be published (end of data, failure or shutdown);
//   the consumer drains what was published first when state is kEndOfData.
//   Waking: a futex wake is a system call (about 1 us even when nobody sleeps), so each futex
//   word has a waiter count beside it (publish_waiters, free_waiters). A sleeper increments the
//   count before its FUTEX_WAIT and decrements it after (source: shm/ring.h, WaitForPublish,
//   WaitForFree, whose one sleeper sets it to 1 and back to 0); a waker bumps the futex word,
//   then wakes only when the count is non-zero (both sides sequentially consistent, so either
//   the waker sees the sleeper or the sleeper's FUTEX_WAIT sees the bumped word and returns at
//   once). A sleeper that does not count itself is still woken by its timeout.
//
// Trust: consumers map the segment read-write (NumPy/DLPack need writable buffers), so the
// daemon acts on nothing a consumer can write without checking it against its own records:
// it keeps the geometry and each queue's publish count itself (never read back); slot words
// are checked against its record of each slot; free_futex and the waiter counts only decide
// when to wake or look again (a wrong value costs a needless wake, or a wait until a 100 ms
// slice ends; never a lost or duplicated batch; free_waiters is set anew at each of the
// daemon's waits); the consumer-table counters are statistics.
// Once a second it compares the geometry, `published`, `taken`, `slot_of` and the words of
// the slots it published with its records and puts back what differs (source: daemon/pipeline.h, RepairRing,
// logged as "ring repaired"), and the identity, geometry, schema and (while it runs) state
// and error text that clients read; in ranks mode, slots held by a consumer of another rank
// than the batch's are freed. Not repairable: slots forged as held by a consumer that is
// attached, of the batch's rank (freed when it detaches).
//
// Changing anything here changes kLayoutHash (computed from the sizes and offsets below);
// bump kLayoutVersion for intentional format changes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ringfeed::shm {

inline constexpr char kMagic[8] = {'R', 'I', 'N', 'G', 'F', 'E', 'E', 'D'};
inline constexpr uint32_t kLayoutVersion = 1;

inline constexpr size_t kPageBytes = 4096;
inline constexpr size_t kColumnAlign = 64;
inline constexpr uint32_t kMaxFeatures = 256;
inline constexpr uint32_t kMaxNameBytes = 128;  // feature name incl. the terminating NUL
inline constexpr uint32_t kMaxRank = 8;         // FixedLen shape dimensions per row
inline constexpr uint32_t kMaxSlots = 256;
inline constexpr uint32_t kMaxQueues = 64;      // = the largest consumers.count in ranks mode
inline constexpr uint32_t kMaxConsumers = 64;   // attached at once; consumer ids 1..kMaxConsumers
inline constexpr uint32_t kErrorBytes = 1024;
inline constexpr uint32_t kJobNameBytes = 72;

// Superblock::state.
enum class DaemonState : uint32_t {
  kStarting = 0,   // not ready yet
  kRunning = 1,    // producing
  kEndOfData = 2,  // all epochs produced; published batches may still be taken
  kFailed = 3,     // on_error: fail hit an error; `error` says which (file, record, offset)
  kStopped = 4,    // the daemon shut down (SIGTERM/SIGINT); `error` says why
};

// Superblock::mode (consumers.mode).
enum class DeliveryMode : uint32_t { kShared = 0, kRanks = 1 };

// SlotHeader::flags.
inline constexpr uint32_t kBatchEndOfEpoch = 1;  // last batch of its epoch (for its queue)
inline constexpr uint32_t kBatchEndOfData = 2;   // last batch of the run (for its queue)

// FeatureDesc::type.
inline constexpr uint8_t kFixedLen = 0;
inline constexpr uint8_t kVarLen = 1;

// One feature of the batch schema. dtype uses shm/dtype.h's DType numbering
// (0 int64, 1 float32, 2 bytes, 3 uint8, 4 int8, 5 uint16, 6 int16, 7 int32, 8 uint32,
// 9 float64), repeated here so shm/ depends on nothing of ours.
struct FeatureDesc {
  char name[kMaxNameBytes];  // NUL-terminated
  uint8_t dtype;
  uint8_t type;              // kFixedLen or kVarLen
  uint8_t rank;              // FixedLen: number of dims in `shape` (0 = scalar)
  uint8_t reserved[5];
  int64_t shape[kMaxRank];   // FixedLen: per-row shape
};

// A delivery queue. See the hand-off description above.
struct alignas(64) QueueHeader {
  std::atomic<uint64_t> published;      // batches published so far (sequence numbers < published)
  std::atomic<uint64_t> taken;          // next sequence number to claim
  std::atomic<uint32_t> publish_futex;  // bumped on every publish, close and state change
  std::atomic<uint32_t> closed;         // 1: nothing more will be published
  std::atomic<uint32_t> publish_waiters;  // consumers sleeping on publish_futex right now
  uint32_t reserved;
  uint32_t slot_of[kMaxSlots];          // slot holding sequence number seq: slot_of[seq % kMaxSlots]
};

// One attached consumer. `pid`, `rank` and `attached` are written by the daemon when it
// accepts the consumer; the counters are written by the consumer (statistics only).
struct alignas(64) ConsumerEntry {
  std::atomic<uint32_t> attached;       // 1 while the consumer's control connection is open
  int32_t pid;
  int32_t rank;                         // -1 in shared mode
  uint32_t reserved;
  std::atomic<uint64_t> batches_taken;
  std::atomic<uint64_t> wait_ns;        // total time spent in next() waiting for a batch (a wait
                                        // in progress is added every 100 ms, not only at its end)
};

struct alignas(kPageBytes) Superblock {
  char magic[8];
  uint32_t layout_version;
  uint32_t superblock_bytes;   // sizeof(Superblock)
  uint64_t layout_hash;        // kLayoutHash of the writer
  uint64_t instance_id;        // random per daemon start
  int32_t daemon_pid;
  std::atomic<uint32_t> ready;  // 1 once everything above and below is written (set last)
  char job[kJobNameBytes];      // NUL-terminated

  std::atomic<uint32_t> state;            // DaemonState
  std::atomic<uint32_t> free_futex;       // bumped by consumers on release; the daemon waits on it
  std::atomic<uint32_t> free_waiters;     // 1 while the daemon sleeps on free_futex (WaitForFree)
  uint32_t reserved1;
  std::atomic<uint64_t> heartbeat_ns;     // CLOCK_MONOTONIC, written by the daemon's heartbeat thread
  uint64_t heartbeat_period_ns;
  char error[kErrorBytes];                // NUL-terminated; valid once state is kFailed/kStopped/kEndOfData

  // Geometry.
  uint64_t segment_bytes;
  uint64_t slots_offset;      // multiple of kPageBytes
  uint64_t slot_stride;       // multiple of kPageBytes
  uint64_t slot_bytes;        // usable bytes per slot (<= slot_stride)
  uint32_t slot_count;        // <= kMaxSlots
  uint32_t batch_size;        // rows per full batch
  uint32_t mode;              // DeliveryMode
  uint32_t queue_count;       // 1 (shared) or consumers.count (ranks)

  // Schema.
  uint32_t feature_count;     // <= kMaxFeatures
  uint32_t reserved0;
  FeatureDesc features[kMaxFeatures];

  QueueHeader queues[kMaxQueues];
  ConsumerEntry consumers[kMaxConsumers];  // consumer id c uses consumers[c - 1]
};

// Where one column of a batch lives, as byte offsets from the slot start. Counts are in
// elements: `values_bytes` in bytes, `value_offsets_count` and `row_splits_count` in int64
// entries (0 when the column has none).
struct ColumnDesc {
  uint64_t values_offset;
  uint64_t values_bytes;
  uint64_t value_offsets_offset;
  uint64_t value_offsets_count;
  uint64_t row_splits_offset;
  uint64_t row_splits_count;
};

// Where row r of a batch came from: the file's index in the job's file list (sorted glob
// expansion, after sharding; `ringfeedctl status --json` lists them) and the record's
// 0-based index in that file.
struct RowSource {
  uint32_t file_index;
  uint32_t reserved;
  uint64_t record_index;
};

// At the start of each slot; ColumnDesc[feature_count] follows at columns_offset, then
// RowSource[rows] at sources_offset. Written by the daemon while the slot is kFilling; read
// by the consumer holding it.
struct alignas(64) SlotHeader {
  std::atomic<uint64_t> word;  // SlotWord
  uint64_t epoch;              // 0-based
  uint64_t batch_index;        // 0-based index within the epoch (across all queues)
  uint32_t rows;               // records in this batch (<= batch_size)
  uint32_t flags;              // kBatchEndOfEpoch | kBatchEndOfData
  uint64_t used_bytes;         // bytes of the slot in use, from the slot start
  uint64_t columns_offset;     // offset of ColumnDesc[feature_count]
  uint64_t sources_offset;     // offset of RowSource[rows]
};

// Bytes a slot of `rows` rows and `features` features needs before its column regions: the
// SlotHeader, ColumnDesc[features] and RowSource[rows], each part rounded up to kColumnAlign.
constexpr uint64_t SlotHeaderBytes(size_t features, size_t rows) {
  const uint64_t sources = (sizeof(SlotHeader) + features * sizeof(ColumnDesc) + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
  return (sources + rows * sizeof(RowSource) + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
}

// The slot state word: state (4 bits) | queue (6 bits) | owner consumer id (14 bits) |
// sequence number in the queue (40 bits).
enum class SlotState : uint64_t { kFree = 0, kFilling = 1, kReady = 2, kHeld = 3 };

struct SlotWord {
  SlotState state = SlotState::kFree;
  uint32_t queue = 0;
  uint32_t owner = 0;
  uint64_t seq = 0;

  static constexpr uint64_t kSeqMask = (uint64_t{1} << 40) - 1;
  constexpr uint64_t Pack() const {
    return static_cast<uint64_t>(state) | (uint64_t{queue} & 0x3f) << 4 |
           (uint64_t{owner} & 0x3fff) << 10 | (seq & kSeqMask) << 24;
  }
  static constexpr SlotWord Unpack(uint64_t w) {
    return {static_cast<SlotState>(w & 0xf), static_cast<uint32_t>(w >> 4 & 0x3f),
            static_cast<uint32_t>(w >> 10 & 0x3fff), w >> 24};
  }
};

namespace detail {
constexpr uint64_t Fnv1a(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}
}  // namespace detail

// FNV-1a over every size and offset the two sides must agree on. A client built from another
// version of this header refuses the segment (source: shm/superblock_check.h, CheckSuperblock).
inline constexpr uint64_t kLayoutHash = [] {
  const uint64_t parts[] = {
      kLayoutVersion, kPageBytes, kColumnAlign, kMaxFeatures, kMaxNameBytes, kMaxRank, kMaxSlots,
      kMaxQueues, kMaxConsumers, kErrorBytes, kJobNameBytes,
      sizeof(FeatureDesc), offsetof(FeatureDesc, dtype), offsetof(FeatureDesc, shape),
      sizeof(QueueHeader), offsetof(QueueHeader, taken), offsetof(QueueHeader, publish_waiters),
      offsetof(QueueHeader, slot_of),
      sizeof(ConsumerEntry), offsetof(ConsumerEntry, batches_taken),
      sizeof(Superblock), offsetof(Superblock, ready), offsetof(Superblock, state),
      offsetof(Superblock, free_waiters), offsetof(Superblock, heartbeat_ns), offsetof(Superblock, error),
      offsetof(Superblock, segment_bytes), offsetof(Superblock, features),
      offsetof(Superblock, queues), offsetof(Superblock, consumers),
      sizeof(ColumnDesc), sizeof(RowSource), sizeof(SlotHeader),
      offsetof(SlotHeader, rows), offsetof(SlotHeader, sources_offset)};
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t p : parts) h = detail::Fnv1a(h, p);
  return h;
}();

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the hand-off needs lock-free atomics in shared memory");
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);
static_assert(sizeof(Superblock) % kPageBytes == 0);

}  // namespace ringfeed::shm
