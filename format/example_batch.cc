#include "format/example_batch.h"

namespace ringfeed {

ExampleBatch::ExampleBatch(const FeatureSpecs& specs, size_t capacity)
    : specs_(&specs), capacity_(capacity), columns_(specs.size()) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& spec = specs[i];
    Column& c = columns_[i];
    const bool fixed = spec.type == FeatureType::kFixedLen;
    if (spec.dtype == DType::kBytes) {
      c.value_offsets.reserve(fixed ? capacity * spec.NumElements() + 1 : capacity + 1);
      c.value_offsets.push_back(0);
    } else if (fixed) {
      c.values.resize(capacity * spec.NumElements() * DTypeSize(spec.dtype));
    }
    if (!fixed) {
      c.row_splits.reserve(capacity + 1);
      c.row_splits.push_back(0);
      varlen_.push_back({i, DTypeSize(spec.dtype)});
    }
  }
}

void ExampleBatch::Clear() {
  rows_ = 0;
  RollbackRow();
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
      c.row_splits.resize(rows_ + 1);
      values = static_cast<size_t>(c.row_splits[rows_]);
    }
    if (spec.dtype == DType::kBytes) {
      c.value_offsets.resize(values + 1);
      c.values.resize(static_cast<size_t>(c.value_offsets[values]));
    } else if (!fixed) {
      c.values.resize(values * DTypeSize(spec.dtype));
    }
  }
}

void ExampleBatch::CommitRow() {
  for (const VarLenColumn& v : varlen_) {
    Column& c = columns_[v.index];
    const size_t values = v.element_size == 0 ? c.value_offsets.size() - 1 : c.values.size() / v.element_size;
    c.row_splits.push_back(static_cast<int64_t>(values));
  }
  ++rows_;
}

}  // namespace ringfeed
