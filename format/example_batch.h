// ExampleBatch: parsed records in columnar form, one Column per FeatureSpec, either in heap
// memory the batch owns (it grows as needed) or in caller memory of fixed capacity, e.g. a batch
// slot of the shared-memory ring, so the parser writes straight into the slot.
//
// Layout of each column (the same layout the daemon's shared-memory slots use):
//   FixedLen numeric (incl. decode: raw): `values` = rows x prod(shape) elements of the dtype,
//       row-major, little-endian; byte size rows * NumElements() * DTypeSize(dtype).
//   VarLen numeric: `values` = every row's values concatenated; `row_splits` (int64, rows + 1
//       entries, row_splits[0] = 0) delimits row r as values [row_splits[r], row_splits[r+1]).
//   bytes (FixedLen or VarLen): `values` = the strings' bytes concatenated; `value_offsets`
//       (int64, one per string + 1, starting at 0) delimits string i as bytes
//       [value_offsets[i], value_offsets[i+1]). FixedLen bytes has rows * prod(shape) strings;
//       VarLen bytes also has row_splits, counting strings.
// A FixedLen numeric column's `values` always spans all `capacity` rows (rows() of them hold
// records; the rest are zero in an owned batch and untouched caller memory in an external one).
//
// External memory (a slot): per feature a ColumnRegion. FixedLen numeric `values` needs exactly
// capacity * NumElements() * DTypeSize(dtype) bytes; VarLen `row_splits` needs capacity + 1
// entries; bytes features need at least 1 value_offsets entry. Those are checked by the
// constructor. The other sizes depend on the records: ExampleParser::Measure and
// ColumnCapacities (format/column_sizes.h) give them. A record that does not fit is a parse
// error of that record (the batch stays as it was); nothing is ever written past a region.
//
// Thread-safety: none; one writer (the parser) at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "format/column_buffer.h"
#include "format/feature_spec.h"

namespace ringfeed {

struct Column {
  ColumnBuffer<uint8_t> values;
  ColumnBuffer<int64_t> value_offsets;  // bytes dtype only
  ColumnBuffer<int64_t> row_splits;     // VarLen only

  // Typed views of `values` (no copies). T must match the feature's dtype.
  template <typename T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(values.data()), values.size() / sizeof(T)};
  }
};

// Caller memory for one column of an external batch. Spans the column does not have stay empty.
// The memory must outlive the batch; int64 regions must be 8-byte aligned (std::span<int64_t>).
struct ColumnRegion {
  std::span<uint8_t> values;
  std::span<int64_t> value_offsets;  // bytes dtype only
  std::span<int64_t> row_splits;     // VarLen only
};

class ExampleBatch {
 public:
  // Owned memory. `specs` must outlive the batch. `capacity` = maximum rows (the batch size).
  ExampleBatch(const FeatureSpecs& specs, size_t capacity);
  // External memory: regions[i] holds feature i's column (see the sizes above). Throws
  // std::invalid_argument naming the feature when a region is missing, too small or given for
  // an array the column does not have. Writes value_offsets[0] = row_splits[0] = 0.
  ExampleBatch(const FeatureSpecs& specs, size_t capacity, std::span<const ColumnRegion> regions);

  size_t rows() const { return rows_; }
  size_t capacity() const { return capacity_; }
  const FeatureSpecs& specs() const { return *specs_; }
  const Column& column(size_t feature) const { return columns_[feature]; }
  Column& column(size_t feature) { return columns_[feature]; }

  // Empties the batch, keeping allocations (or the regions).
  void Clear();

  // Used by ExampleParser: drops whatever a failed row appended; records a completed row.
  void RollbackRow();
  void CommitRow() {
    // Inline: once per record. Room for capacity + 1 row_splits entries is reserved (owned) or
    // checked (external) at construction, and Parse refuses a full batch before it starts.
    for (const VarLenColumn& v : varlen_) {
      Column& c = *v.column;
      const size_t values = v.bytes ? c.value_offsets.size() - 1 : c.values.size() >> v.value_shift;
      c.row_splits.push_back_reserved(static_cast<int64_t>(values));
    }
    ++rows_;
  }

 private:
  void IndexVarLenColumns();

  const FeatureSpecs* specs_;
  size_t capacity_;
  size_t rows_ = 0;
  std::vector<Column> columns_;
  // VarLen columns, the only ones CommitRow touches (columns_ never reallocates after
  // construction, and a move keeps its elements where they are).
  struct VarLenColumn {
    Column* column;
    bool bytes;          // row_splits count strings (value_offsets) rather than values
    uint8_t value_shift;  // log2 of the element size (numeric)
  };
  std::vector<VarLenColumn> varlen_;
};

}  // namespace ringfeed
