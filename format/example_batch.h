// ExampleBatch: parsed records in columnar form, one Column per FeatureSpec, in host memory.
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
//
// Thread-safety: none; one writer (the parser) at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "format/feature_spec.h"

namespace ringfeed {

struct Column {
  std::vector<uint8_t> values;
  std::vector<int64_t> value_offsets;  // bytes dtype only
  std::vector<int64_t> row_splits;     // VarLen only

  // Typed views of `values` (no copies). T must match the feature's dtype.
  template <typename T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(values.data()), values.size() / sizeof(T)};
  }
};

class ExampleBatch {
 public:
  // `specs` must outlive the batch. `capacity` = maximum rows (the batch size).
  ExampleBatch(const FeatureSpecs& specs, size_t capacity);

  size_t rows() const { return rows_; }
  size_t capacity() const { return capacity_; }
  const FeatureSpecs& specs() const { return *specs_; }
  const Column& column(size_t feature) const { return columns_[feature]; }
  Column& column(size_t feature) { return columns_[feature]; }

  // Empties the batch, keeping allocations.
  void Clear();

  // Used by ExampleParser: drops whatever a failed row appended; records a completed row.
  void RollbackRow();
  void CommitRow();

 private:
  const FeatureSpecs* specs_;
  size_t capacity_;
  size_t rows_ = 0;
  std::vector<Column> columns_;
  // VarLen columns, the only ones CommitRow touches: index and element size (0 = bytes).
  struct VarLenColumn {
    size_t index;
    size_t element_size;
  };
  std::vector<VarLenColumn> varlen_;
};

}  // namespace ringfeed
