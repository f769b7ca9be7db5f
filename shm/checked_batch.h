// shm::CheckedBatch: a slot's header and column table, copied out of the slot and checked
// (shm::ReadBatch, inside the client library) before a batch is handed out; ringfeed::Batch
// holds one. The checks are listed in ringfeed's source (source: shm/batch_check.h); the
// layout they check is shm/ring_layout.h's. Plain data: copying is thread-safe as long as nothing writes the
// source at the same time.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "shm/ring_layout.h"

namespace ringfeed::shm {

// A checked copy of a slot's header and column table. The table is stored inline (no heap
// memory per batch): 12 KiB, of which only the first column_count entries are written,
// read or copied.
struct CheckedBatch {
  CheckedBatch() {}  // `columns` stays uninitialized: only [0, column_count) is ever read
  CheckedBatch(const CheckedBatch& other) { *this = other; }
  CheckedBatch& operator=(const CheckedBatch& other) {
    if (this != &other) {
      epoch = other.epoch;
      batch_index = other.batch_index;
      rows = other.rows;
      flags = other.flags;
      sources_offset = other.sources_offset;
      column_count = other.column_count;
      std::memcpy(columns, other.columns, column_count * sizeof(ColumnDesc));
    }
    return *this;
  }

  std::span<const ColumnDesc> column_span() const { return {columns, column_count}; }

  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  uint32_t rows = 0;
  uint32_t flags = 0;
  uint64_t sources_offset = 0;  // RowSource[rows] from the slot start
  uint32_t column_count = 0;    // = the number of features
  ColumnDesc columns[kMaxFeatures];  // [0, column_count): one per feature, regions inside the slot
};

}  // namespace ringfeed::shm
