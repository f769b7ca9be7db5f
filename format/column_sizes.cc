#include "format/column_sizes.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

namespace ringfeed {

std::vector<ColumnCapacity> ColumnCapacities(const FeatureSpecs& specs, size_t capacity, const ColumnSizes& sizes) {
  if (!sizes.features.empty() && sizes.features.size() != specs.size()) {
    throw std::invalid_argument("ColumnCapacities: sizes of " + std::to_string(sizes.features.size()) +
                                " features for a spec of " + std::to_string(specs.size()));
  }
  std::vector<ColumnCapacity> out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& spec = specs[i];
    const ColumnSize measured = sizes.features.empty() ? ColumnSize{} : sizes.features[i];
    const bool fixed = spec.type == FeatureType::kFixedLen;
    const size_t elements = fixed ? static_cast<size_t>(spec.NumElements()) : 0;
    ColumnCapacity& c = out[i];
    if (spec.dtype == DType::kBytes) {
      c.values_bytes = static_cast<size_t>(measured.value_bytes);
      c.value_offsets = fixed ? capacity * elements + 1 : static_cast<size_t>(measured.strings) + 1;
    } else if (fixed) {
      c.values_bytes = capacity * elements * DTypeSize(spec.dtype);
    } else {
      c.values_bytes = static_cast<size_t>(measured.value_bytes);
    }
    if (!fixed) c.row_splits = capacity + 1;
  }
  return out;
}

namespace {

size_t AlignUp(size_t n, size_t align) { return (n + align - 1) & ~(align - 1); }

// Calls place(feature, values_offset, value_offsets_offset, row_splits_offset) per feature;
// returns the end offset.
template <typename Place>
size_t Layout(std::span<const ColumnCapacity> capacities, size_t align, Place&& place) {
  if (align < 8 || (align & (align - 1)) != 0) {
    throw std::invalid_argument("column regions: alignment " + std::to_string(align) + " is not a power of two >= 8");
  }
  size_t offset = 0;
  for (size_t i = 0; i < capacities.size(); ++i) {
    const ColumnCapacity& c = capacities[i];
    const size_t values = offset;
    offset = AlignUp(offset + c.values_bytes, align);
    const size_t offsets = offset;
    offset = AlignUp(offset + c.value_offsets * sizeof(int64_t), align);
    const size_t splits = offset;
    offset = AlignUp(offset + c.row_splits * sizeof(int64_t), align);
    place(i, values, offsets, splits);
  }
  return offset;
}

}  // namespace

size_t ColumnRegionsBytes(std::span<const ColumnCapacity> capacities, size_t align) {
  return Layout(capacities, align, [](size_t, size_t, size_t, size_t) {});
}

size_t CarveColumnRegions(std::span<uint8_t> memory, std::span<const ColumnCapacity> capacities, size_t align,
                          std::vector<ColumnRegion>* regions) {
  const size_t need = ColumnRegionsBytes(capacities, align);
  if (need > memory.size()) {
    throw std::invalid_argument("column regions: the columns need " + std::to_string(need) + " bytes, the memory has " +
                                std::to_string(memory.size()));
  }
  if (reinterpret_cast<uintptr_t>(memory.data()) % alignof(int64_t) != 0) {
    throw std::invalid_argument("column regions: the memory is not 8-byte aligned");
  }
  regions->assign(capacities.size(), ColumnRegion{});
  uint8_t* const base = memory.data();
  Layout(capacities, align, [&](size_t i, size_t values, size_t offsets, size_t splits) {
    const ColumnCapacity& c = capacities[i];
    ColumnRegion& r = (*regions)[i];
    r.values = {base + values, c.values_bytes};
    r.value_offsets = {reinterpret_cast<int64_t*>(base + offsets), c.value_offsets};
    r.row_splits = {reinterpret_cast<int64_t*>(base + splits), c.row_splits};
  });
  return need;
}

void WorstBatch::Add(const ColumnSizes& record) {
  if (value_bytes_.size() < record.features.size()) {
    value_bytes_.resize(record.features.size());
    strings_.resize(record.features.size());
  }
  // Keeps the rows_ largest in a min-heap: a value above its smallest replaces it.
  const auto keep = [this](std::vector<uint64_t>& heap, uint64_t v) {
    if (rows_ == 0) return;
    if (heap.size() < rows_) {
      heap.push_back(v);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    } else if (v > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = v;
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (size_t i = 0; i < record.features.size(); ++i) {
    keep(value_bytes_[i], record.features[i].value_bytes);
    keep(strings_[i], record.features[i].strings);
  }
  ++added_;
}

ColumnSizes WorstBatch::Sizes() const {
  ColumnSizes out;
  out.features.resize(value_bytes_.size());
  for (size_t i = 0; i < value_bytes_.size(); ++i) {
    for (uint64_t v : value_bytes_[i]) out.features[i].value_bytes += v;
    for (uint64_t v : strings_[i]) out.features[i].strings += v;
  }
  out.records = std::min<uint64_t>(rows_, added_);
  return out;
}

}  // namespace ringfeed
