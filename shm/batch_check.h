// Checking one batch slot before anything in it is handed out, in two steps:
//   ReadBatch           the header, the tables and every column's geometry: once per batch
//                       (Client::Next);
//   CheckColumnOffsets  the contents of one column's offset arrays: once per column, before
//                       the first of its entries is handed out (Batch::feature);
//   ValidateBatch       both, for every column.
//
// Every offset and count a client will follow is checked against the slot's bounds
// (slot_bytes) with overflow-safe arithmetic, so a buggy or hostile writer of the slot can't
// make the client read outside it:
//   header     rows <= batch_size; used_bytes <= slot_bytes; ColumnDesc[feature_count] at
//              columns_offset and RowSource[rows] at sources_offset lie inside the slot, past
//              the SlotHeader, 8-byte aligned;
//   columns    every region (values, value_offsets, row_splits) lies inside the slot, starts
//              at a multiple of kColumnAlign and, unless empty, past the SlotHeader; sizes match
//              the schema (ring_layout.h):
//                fixed numeric  values_bytes == rows * prod(shape) * dtype size
//                varlen numeric row_splits_count == rows + 1, values_bytes a multiple of the
//                               dtype size
//                bytes          value_offsets_count == strings + 1 (fixed: rows * prod(shape)
//                               strings), >= 1
//              arrays a column does not have must have count 0.
//   offsets    (CheckColumnOffsets) row_splits: [0] == 0, non-decreasing, last == the
//              column's values (numeric: values_bytes / dtype size; bytes: strings =
//              value_offsets_count - 1); value_offsets: [0] == 0, non-decreasing, last ==
//              values_bytes.
// The header and the ColumnDescs are copied out of the slot first and the copies checked
// (a writer changing them later changes nothing the caller uses). The offset arrays are checked
// in place; the caller's zero-copy views of them are only as stable as the slot itself.
//
// Why two steps: the offset arrays are the only part whose size grows with the batch (about
// 2 KiB per varlen or bytes feature at 256 rows), and they were just written by the daemon on
// another core, so fetching them is most of the cost of a check. Checked per column on first
// use, a trainer pays for the columns it reads, and the fetch warms the cache for its own read
// of the same entries right after.
//
// Cost: this runs on every batch a trainer takes, so the success paths allocate nothing and
// build no strings: they check with plain comparisons (each offset array in one branch-free
// pass, four int64 lanes at a time, AVX2 where the CPU has it) and only a failed check runs
// the slow path again to name what is wrong. Both paths accept and reject exactly the same
// slots.
// Thread-safe (reads only). Internal to ringfeed (not installed): the library does not export
// these functions; the CheckedBatch they fill is in shm/checked_batch.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "shm/checked_batch.h"
#include "shm/ring_layout.h"

namespace ringfeed::shm {

// Checks the batch in `slot` (slot_bytes usable bytes) against the schema `features` and
// `batch_size`, all but the contents of the offset arrays (header, tables, columns above); on
// success fills *out and returns true, else sets *error (naming the feature, the field and its
// value) and returns false. More than kMaxFeatures features is an error.
bool ReadBatch(const uint8_t* slot, uint64_t slot_bytes, uint32_t batch_size,
               std::span<const FeatureDesc> features, CheckedBatch* out, std::string* error);

// Checks the contents of `column`'s row_splits (varlen) and value_offsets (bytes) ("offsets"
// above). `column` must be `feature`'s entry of a CheckedBatch that ReadBatch filled from this
// slot (its regions are then inside the slot). True when they hold, else sets *error (naming
// the feature, the array, the entry and its value) and returns false.
bool CheckColumnOffsets(const uint8_t* slot, const FeatureDesc& feature, const ColumnDesc& column,
                        std::string* error);

// ReadBatch and CheckColumnOffsets of every column, with the superblock's geometry and schema
// (which the caller has checked with CheckSuperblock).
bool ValidateBatch(const Superblock& sb, const uint8_t* slot, std::string* error);

}  // namespace ringfeed::shm
