#include "format/example_batch.h"

#include <bit>
#include <stdexcept>
#include <string>

#include "format/utf8.h"

namespace ringfeed {

ExampleBatch::ExampleBatch(const FeatureSpecs& specs, size_t capacity)
    : specs_(&specs), capacity_(capacity), columns_(specs.size()) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& spec = specs[i];
    Column& c = columns_[i];
    const bool fixed = spec.type == FeatureType::kFixedLen;
    if (spec.dtype == DType::kBytes) {
      if (!c.value_offsets.reserve(fixed ? capacity * spec.NumElements() + 1 : capacity + 1)) throw std::bad_alloc();
      c.value_offsets.push_back_reserved(0);
    } else if (fixed) {
      const size_t bytes = capacity * spec.NumElements() * DTypeSize(spec.dtype);
      if (!c.values.resize(bytes)) throw std::bad_alloc();
      if (bytes != 0) std::memset(c.values.data(), 0, bytes);  // once, as std::vector did
    }
    if (!fixed) {
      if (!c.row_splits.reserve(capacity + 1)) throw std::bad_alloc();
      c.row_splits.push_back_reserved(0);
    }
  }
  IndexVarLenColumns();
}

ExampleBatch::ExampleBatch(const FeatureSpecs& specs, size_t capacity, std::span<const ColumnRegion> regions)
    : specs_(&specs), capacity_(capacity), columns_(specs.size()) {
  if (regions.size() != specs.size()) {
    throw std::invalid_argument("ExampleBatch: " + std::to_string(regions.size()) + " column regions for " +
                                std::to_string(specs.size()) + " features; give one per feature");
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& spec = specs[i];
    const ColumnRegion& r = regions[i];
    Column& c = columns_[i];
    const bool fixed = spec.type == FeatureType::kFixedLen;
    const bool bytes = spec.dtype == DType::kBytes;
    auto bad = [&](const std::string& what) {
      return std::invalid_argument("ExampleBatch: feature " + QuotedName(spec.name) + ": " + what);
    };
    if (!bytes && !r.value_offsets.empty()) throw bad("a value_offsets region for a numeric feature");
    if (fixed && !r.row_splits.empty()) throw bad("a row_splits region for a FixedLen feature");
    if (bytes && r.value_offsets.empty()) throw bad("the value_offsets region is empty; it needs at least 1 entry");
    if (!fixed && r.row_splits.size() < capacity + 1) {
      throw bad("the row_splits region has " + std::to_string(r.row_splits.size()) + " entries, a batch of " +
                std::to_string(capacity) + " rows needs " + std::to_string(capacity + 1));
    }
    c.values = ColumnBuffer<uint8_t>::External(r.values);
    c.value_offsets = ColumnBuffer<int64_t>::External(r.value_offsets);
    c.row_splits = ColumnBuffer<int64_t>::External(r.row_splits);
    if (fixed && !bytes) {
      const size_t need = capacity * static_cast<size_t>(spec.NumElements()) * DTypeSize(spec.dtype);
      if (!c.values.resize(need)) {
        throw bad("the values region has " + std::to_string(r.values.size()) + " bytes, " +
                  std::to_string(capacity) + " rows of " + std::string(DTypeName(spec.dtype)) + " x " +
                  std::to_string(spec.NumElements()) + " need " + std::to_string(need));
      }
    }
    if (bytes) c.value_offsets.push_back_reserved(0);
    if (!fixed) c.row_splits.push_back_reserved(0);
  }
  IndexVarLenColumns();
}

void ExampleBatch::IndexVarLenColumns() {
  for (size_t i = 0; i < specs_->size(); ++i) {
    const FeatureSpec& spec = (*specs_)[i];
    if (spec.type == FeatureType::kFixedLen) continue;
    const size_t size = DTypeSize(spec.dtype);
    varlen_.push_back({&columns_[i], size == 0, static_cast<uint8_t>(size == 0 ? 0 : std::countr_zero(size))});
  }
}

void ExampleBatch::Clear() {
  rows_ = 0;
  // Written, not read back: a slot's consumer maps it writable, and the leading zeros are part
  // of the layout contract.
  for (size_t i = 0; i < columns_.size(); ++i) {
    const FeatureSpec& spec = (*specs_)[i];
    Column& c = columns_[i];
    const bool fixed = spec.type == FeatureType::kFixedLen;
    if (spec.dtype == DType::kBytes) {
      c.value_offsets.truncate(1);
      c.value_offsets[0] = 0;
      c.values.truncate(0);
    } else if (!fixed) {
      c.values.truncate(0);
    }
    if (!fixed) {
      c.row_splits.truncate(1);
      c.row_splits[0] = 0;
    }
  }
}

void ExampleBatch::RollbackRow() {
  for (size_t i = 0; i < columns_.size(); ++i) {
    const FeatureSpec& spec = (*specs_)[i];
    Column& c = columns_[i];
    const bool fixed = spec.type == FeatureType::kFixedLen;
    size_t values;  // committed values (strings for bytes)
    if (fixed) {
      values = rows_ * static_cast<size_t>(spec.NumElements());
    } else {
      c.row_splits.truncate(rows_ + 1);
      values = static_cast<size_t>(c.row_splits[rows_]);
    }
    if (spec.dtype == DType::kBytes) {
      c.value_offsets.truncate(values + 1);
      c.values.truncate(static_cast<size_t>(c.value_offsets[values]));
    } else if (!fixed) {
      c.values.truncate(values * DTypeSize(spec.dtype));
    }
  }
}

}  // namespace ringfeed
