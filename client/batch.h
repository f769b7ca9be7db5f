// Batch: one batch taken from the ring, zero-copy. Move-only RAII: it holds its shared-memory
// slot until Release() or destruction, which hands the slot back to the daemon for refilling.
//
// Accessors of a released (or moved-from, or never filled) batch throw ClientError, never
// read freed memory. TensorViews and spans obtained from a batch are valid only until it is
// released (see client/tensor_view.h).
//
// Checks: Client::Next has checked the batch's header and every column's regions against the
// slot; feature(i) checks column i's row_splits / value_offsets entries the first time it is
// called (source: shm/batch_check.h), so a trainer pays only for the columns it reads, and a batch
// with a bad entry fails there, naming it.
//
// Thread-safety: const accessors may run concurrently; Release/move/destruction must not race
// with other use of the same Batch. Different Batches are independent.
//
// Size: a Batch carries its checked column table inline (shm::CheckedBatch, about 12 KiB), so
// taking a batch allocates nothing; a move copies only the table's used entries.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "client/tensor_view.h"
#include "shm/checked_batch.h"
#include "shm/ring_layout.h"

namespace ringfeed {
namespace detail {
struct Attachment;
}  // namespace detail

class Batch {
 public:
  Batch();  // user-provided: Batch{} must not zero the 12 KiB column table
  ~Batch();
  // Moving leaves `other` empty (valid() false); move-assigning into a Batch that holds a slot
  // releases that slot first.
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // True while the batch holds its slot.
  bool valid() const { return attachment_ != nullptr; }
  // Returns the slot to the daemon. Idempotent.
  void Release() noexcept;

  uint64_t epoch() const;         // 0-based
  uint64_t index() const;         // 0-based batch index within the epoch (across all ranks)
  uint32_t rows() const;          // records in this batch (<= Schema::batch_size)
  bool end_of_epoch() const;      // the last batch of its epoch (for this queue)
  bool end_of_data() const;       // the last batch of the run (for this queue)
  uint32_t slot() const;          // ring slot (for diagnostics)

  size_t feature_count() const;
  // Feature i in schema order. Throws ClientError when i is out of range, or when the column's
  // row_splits / value_offsets are invalid ("... wrote an invalid batch into slot S ...:
  // feature 'x' (varlen int64): row_splits[3] = 2 < row_splits[2] = 5"); then the batch is
  // unusable (a daemon bug or memory corruption) and should be released.
  TensorView feature(size_t i) const;
  // Feature by name. Throws ClientError naming the known features when there is none, and as
  // feature(i).
  TensorView feature(std::string_view name) const;
  // Where row `row` (< rows()) came from: file_index in the job's file list, record_index in
  // that file. Throws ClientError for a row out of range ("row R out of range: the batch has N
  // rows") and on an empty Batch.
  shm::RowSource source(size_t row) const;

 private:
  friend class Client;
  void CheckValid(const char* what) const;
  void CheckOffsets(size_t i) const;  // once per column: shm::CheckColumnOffsets
  void ClearOffsetChecks();           // for a newly taken batch (Client::Next)

  std::shared_ptr<detail::Attachment> attachment_;
  uint32_t slot_ = 0;
  uint64_t seq_ = 0;
  uint8_t* base_ = nullptr;  // the slot's first byte
  shm::CheckedBatch checked_;
  // Bit i set: column i's offset arrays have been checked. [0, (column_count + 63) / 64) are
  // cleared by Next; atomic because concurrent feature() calls may both check and set.
  mutable std::atomic<uint64_t> offsets_checked_[shm::kMaxFeatures / 64];
};

}  // namespace ringfeed
