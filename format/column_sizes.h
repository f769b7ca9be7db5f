// Sizing an external ExampleBatch (a shared-memory batch slot) before parsing into it.
//
//   ColumnSizes sizes;
//   for (record : batch_records) parser.Measure(record, &sizes);   // upper bounds, summed
//   auto caps = ColumnCapacities(parser.specs(), batch_records.size(), sizes);
//   ... lay out caps[i] in the slot (or CarveColumnRegions) -> regions ...
//   ExampleBatch batch(parser.specs(), batch_records.size(), regions);
//   for (record : batch_records) parser.Parse(record, batch, &error);  // never out of room
//
// ColumnSize counts what Parse appends to the record-dependent arrays: `value_bytes` (values of
// VarLen numeric and of bytes features, incl. FixedLen bytes defaults) and `strings` (bytes
// features). FixedLen numeric columns need no measuring: their size follows from the rows.
// Units: bytes for *_bytes, elements (int64 entries) for value_offsets / row_splits.
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/example_batch.h"
#include "format/feature_spec.h"

namespace ringfeed {

struct ColumnSize {
  uint64_t value_bytes = 0;  // bytes Parse may append to `values` (VarLen numeric, bytes dtype)
  uint64_t strings = 0;      // strings Parse may append (bytes dtype): value_offsets entries
};

// Sums of ExampleParser::Measure over the records of one batch.
struct ColumnSizes {
  std::vector<ColumnSize> features;  // per spec feature (sized by the first Measure)
  uint64_t records = 0;              // records measured

  // Adds another Measure sum (one record's, or a batch's): as if its records were measured here.
  void Add(const ColumnSizes& other) {
    if (features.size() < other.features.size()) features.resize(other.features.size());
    for (size_t i = 0; i < other.features.size(); ++i) {
      features[i].value_bytes += other.features[i].value_bytes;
      features[i].strings += other.features[i].strings;
    }
    records += other.records;
  }
};

// The sizes one column's regions need.
struct ColumnCapacity {
  size_t values_bytes = 0;
  size_t value_offsets = 0;  // int64 entries; 0 when the column has none (numeric)
  size_t row_splits = 0;     // int64 entries; 0 when the column has none (FixedLen)
};

// Per feature, what an external batch of `capacity` rows needs to hold the records measured
// into `sizes` (FixedLen numeric exact from capacity and shape; value_offsets = strings + 1, or
// capacity * NumElements() + 1 for FixedLen bytes; row_splits = capacity + 1). `sizes` may be
// empty (nothing measured): record-dependent arrays then get their minimum.
std::vector<ColumnCapacity> ColumnCapacities(const FeatureSpecs& specs, size_t capacity, const ColumnSizes& sizes);

// Lays the arrays of `capacities` out one after another in `memory` (per feature: values,
// value_offsets, row_splits), each starting at a multiple of `align` bytes from memory.data()
// (a power of two >= 8; memory.data() must be 8-byte aligned). Returns the bytes used, and the
// regions in *regions; throws std::invalid_argument when memory is too small or misaligned.
// ColumnRegionsBytes gives the size to reserve beforehand.
size_t CarveColumnRegions(std::span<uint8_t> memory, std::span<const ColumnCapacity> capacities, size_t align,
                          std::vector<ColumnRegion>* regions);
size_t ColumnRegionsBytes(std::span<const ColumnCapacity> capacities, size_t align);

// The sizes of the largest batch of `rows` records that any order of the records added can
// make (shuffle.buffer, the interleave of cycle_length files): per feature, the sum of the
// `rows` largest value_bytes and, apart, of the `rows` largest strings among them. An upper
// bound for the ColumnSizes of every batch of at most `rows` of these records, as the column
// regions (and so the slot a batch needs) only grow with each sum. Add is O(log rows) per
// feature; memory 2 x rows x features counts. Not thread-safe.
class WorstBatch {
 public:
  explicit WorstBatch(size_t rows) : rows_(rows) {}
  void Add(const ColumnSizes& record);  // one record's ExampleParser::Measure
  ColumnSizes Sizes() const;            // records = min(rows, records added)

 private:
  size_t rows_;
  uint64_t added_ = 0;
  // Per feature, min-heaps of the largest values so far (at most rows_ each).
  std::vector<std::vector<uint64_t>> value_bytes_, strings_;
};

}  // namespace ringfeed
