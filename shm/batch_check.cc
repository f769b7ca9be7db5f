#include "shm/batch_check.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "shm/dtype.h"

namespace ringfeed::shm {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

template <typename T>
T Load(const uint8_t* slot, size_t offset) {
  T value;
  std::memcpy(&value, slot + offset, sizeof value);
  return value;
}

bool Fits(uint64_t offset, uint64_t bytes, uint64_t limit) {
  return offset <= limit && bytes <= limit - offset;
}

// ---- The fast path: comparisons only, no strings, no allocation. Each function accepts
// exactly what its message-building twin below accepts. ----

bool TableOk(uint64_t offset, uint64_t count, uint64_t entry_bytes, uint64_t slot_bytes) {
  uint64_t bytes = 0;
  return !__builtin_mul_overflow(count, entry_bytes, &bytes) && Fits(offset, bytes, slot_bytes) &&
         offset >= sizeof(SlotHeader) && offset % 8 == 0;
}

bool RegionOk(uint64_t offset, uint64_t bytes, uint64_t slot_bytes) {
  return offset % kColumnAlign == 0 && Fits(offset, bytes, slot_bytes) &&
         (bytes == 0 || offset >= sizeof(SlotHeader));
}

// Entries 1..count-1 of the int64 array at p are >= 0 and >= their predecessor. With both
// values non-negative their wrapping difference is the true one, so a sign bit anywhere in
// (value | value - predecessor) is a violation: OR everything together and test the sign bit
// once. Four int64 lanes per vector (GCC/Clang vector extensions), two vectors per step, no
// branch but the loop's.
inline __attribute__((always_inline)) bool NonNegativeNonDecreasingBody(const uint8_t* p, uint64_t count) {
  using U64x4 = uint64_t __attribute__((vector_size(32)));
  U64x4 acc0 = {0, 0, 0, 0};
  U64x4 acc1 = {0, 0, 0, 0};
  uint64_t i = 1;
  for (; i + 8 <= count; i += 8) {
    U64x4 prev0, cur0, prev1, cur1;
    std::memcpy(&prev0, p + (i - 1) * 8, sizeof prev0);  // entries i-1 .. i+2
    std::memcpy(&cur0, p + i * 8, sizeof cur0);          // entries i .. i+3
    std::memcpy(&prev1, p + (i + 3) * 8, sizeof prev1);  // entries i+3 .. i+6
    std::memcpy(&cur1, p + (i + 4) * 8, sizeof cur1);    // entries i+4 .. i+7
    acc0 |= cur0 | (cur0 - prev0);
    acc1 |= cur1 | (cur1 - prev1);
  }
  const U64x4 acc = acc0 | acc1;
  uint64_t bad = acc[0] | acc[1] | acc[2] | acc[3];
  for (; i < count; ++i) {
    const auto cur = Load<uint64_t>(p, i * 8);
    bad |= cur | (cur - Load<uint64_t>(p, (i - 1) * 8));
  }
  return bad >> 63 == 0;
}

// The body compiled for the x86-64 baseline (SSE2: two instructions per vector operation)
// and, on x86-64, once more for AVX2 (one), picked at run time. Not target_clones: its ifunc
// resolver runs before sanitizer runtimes start and crashes TSan builds.
bool NonNegativeNonDecreasingGeneric(const uint8_t* p, uint64_t count) {
  return NonNegativeNonDecreasingBody(p, count);
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) bool NonNegativeNonDecreasingAvx2(const uint8_t* p, uint64_t count) {
  return NonNegativeNonDecreasingBody(p, count);
}
bool HasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}
#endif

bool NonNegativeNonDecreasing(const uint8_t* p, uint64_t count) {
#if defined(__x86_64__)
  if (HasAvx2()) return NonNegativeNonDecreasingAvx2(p, count);
#endif
  return NonNegativeNonDecreasingGeneric(p, count);
}

// CheckOffsets' condition: count >= 1, [0] == 0, non-decreasing, [count - 1] == last.
bool OffsetsOk(const uint8_t* slot, uint64_t offset, uint64_t count, uint64_t last) {
  if (count == 0) return false;
  const uint8_t* p = slot + offset;
  return Load<int64_t>(p, 0) == 0 && Load<uint64_t>(p, (count - 1) * 8) == last &&
         NonNegativeNonDecreasing(p, count);
}

// CheckColumnShape's condition: regions, counts and sizes, not the offset arrays' contents.
bool ColumnShapeOk(const FeatureDesc& f, const ColumnDesc& c, uint64_t slot_bytes, uint32_t rows) {
  if (!IsKnownDType(f.dtype) || (f.type != kFixedLen && f.type != kVarLen) || f.rank > kMaxRank) {
    return false;
  }
  const auto dtype = static_cast<DType>(f.dtype);
  const bool varlen = f.type == kVarLen;
  const bool bytes = dtype == DType::kBytes;
  uint64_t offsets_bytes = 0, splits_bytes = 0;
  if (__builtin_mul_overflow(c.value_offsets_count, uint64_t{8}, &offsets_bytes) ||
      __builtin_mul_overflow(c.row_splits_count, uint64_t{8}, &splits_bytes)) {
    return false;
  }
  const bool regions_ok =
      RegionOk(c.values_offset, c.values_bytes, slot_bytes) &&
      (bytes ? RegionOk(c.value_offsets_offset, offsets_bytes, slot_bytes) : c.value_offsets_count == 0) &&
      (varlen ? RegionOk(c.row_splits_offset, splits_bytes, slot_bytes) : c.row_splits_count == 0);
  if (!regions_ok) return false;
  if (varlen) {
    if (c.row_splits_count != uint64_t{rows} + 1) return false;
    if (bytes) return c.value_offsets_count != 0;
    return c.values_bytes % DTypeSize(dtype) == 0;
  }
  uint64_t elements = rows;
  for (uint32_t d = 0; d < f.rank; ++d) {
    if (f.shape[d] < 0 || __builtin_mul_overflow(elements, static_cast<uint64_t>(f.shape[d]), &elements)) {
      return false;
    }
  }
  if (bytes) return c.value_offsets_count == elements + 1;
  uint64_t expected = 0;
  return !__builtin_mul_overflow(elements, DTypeSize(dtype), &expected) && c.values_bytes == expected;
}

// What row_splits must end at: the column's number of values (numeric) or strings (bytes).
// Only for a varlen column that passed the shape check (then it cannot divide by zero or wrap).
uint64_t RowSplitsLast(const FeatureDesc& f, const ColumnDesc& c) {
  const auto dtype = static_cast<DType>(f.dtype);
  return dtype == DType::kBytes ? c.value_offsets_count - 1 : c.values_bytes / DTypeSize(dtype);
}

// CheckColumnOffsets' condition, for a column that passed the shape check.
bool ColumnOffsetsOk(const FeatureDesc& f, const ColumnDesc& c, const uint8_t* slot) {
  const bool varlen = f.type == kVarLen;
  const bool bytes = static_cast<DType>(f.dtype) == DType::kBytes;
  return (!varlen || OffsetsOk(slot, c.row_splits_offset, c.row_splits_count, RowSplitsLast(f, c))) &&
         (!bytes || OffsetsOk(slot, c.value_offsets_offset, c.value_offsets_count, c.values_bytes));
}

// Starts loading the int64 array at `offset` (count entries, inside the slot) into the cache
// without waiting for it.
void Prefetch(const uint8_t* slot, uint64_t offset, uint64_t count) {
  for (uint64_t b = 0; b < count * 8; b += 64) __builtin_prefetch(slot + offset + b);
}

// ReadBatch's condition; fills *out on the way (also when it then fails).
bool ReadFast(const uint8_t* slot, uint64_t slot_bytes, uint32_t batch_size,
              std::span<const FeatureDesc> features, CheckedBatch* out) {
  if (slot_bytes < sizeof(SlotHeader) || features.size() > kMaxFeatures) return false;
  const auto rows = Load<uint32_t>(slot, offsetof(SlotHeader, rows));
  const auto used_bytes = Load<uint64_t>(slot, offsetof(SlotHeader, used_bytes));
  const auto columns_offset = Load<uint64_t>(slot, offsetof(SlotHeader, columns_offset));
  const auto sources_offset = Load<uint64_t>(slot, offsetof(SlotHeader, sources_offset));
  if (rows > batch_size || used_bytes > slot_bytes ||
      !TableOk(columns_offset, features.size(), sizeof(ColumnDesc), slot_bytes) ||
      !TableOk(sources_offset, rows, sizeof(RowSource), slot_bytes)) {
    return false;
  }
  out->epoch = Load<uint64_t>(slot, offsetof(SlotHeader, epoch));
  out->batch_index = Load<uint64_t>(slot, offsetof(SlotHeader, batch_index));
  out->rows = rows;
  out->flags = Load<uint32_t>(slot, offsetof(SlotHeader, flags));
  out->sources_offset = sources_offset;
  out->column_count = static_cast<uint32_t>(features.size());
  if (!features.empty()) {
    std::memcpy(out->columns, slot + columns_offset, features.size() * sizeof(ColumnDesc));
  }
  for (size_t i = 0; i < features.size(); ++i) {
    if (!ColumnShapeOk(features[i], out->columns[i], slot_bytes, rows)) return false;
  }
  return true;
}

// ---- The slow path: the same checks, naming the first that fails. ----

// A table (column descriptors, row sources) inside the slot, past the header.
std::string CheckTable(const char* what, uint64_t offset, uint64_t count, uint64_t entry_bytes,
                       uint64_t slot_bytes) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, entry_bytes, &bytes) || !Fits(offset, bytes, slot_bytes) ||
      offset < sizeof(SlotHeader) || offset % 8 != 0) {
    return std::string(what) + " at offset " + Str(offset) + " (" + Str(count) + " entries of " +
           Str(entry_bytes) + " bytes) is not an 8-byte aligned range after the slot header and "
           "inside the slot's " + Str(slot_bytes) + " bytes";
  }
  return "";
}

// A column region: kColumnAlign-aligned, inside the slot, past the header unless empty.
std::string CheckRegion(const std::string& column, const char* field, uint64_t offset,
                        uint64_t bytes, uint64_t slot_bytes) {
  if (offset % kColumnAlign != 0) {
    return column + ": " + field + " offset " + Str(offset) + " is not a multiple of " + Str(kColumnAlign);
  }
  if (!Fits(offset, bytes, slot_bytes)) {
    return column + ": " + field + " [" + Str(offset) + ", +" + Str(bytes) +
           " bytes) runs past the slot's " + Str(slot_bytes) + " bytes";
  }
  if (bytes > 0 && offset < sizeof(SlotHeader)) {
    return column + ": " + field + " at offset " + Str(offset) + " overlaps the slot header";
  }
  return "";
}

// An int64 offsets array (value_offsets or row_splits): starts at 0, never decreases, ends at
// `last`. `count` entries at `offset`, already checked to lie inside the slot.
std::string CheckOffsets(const std::string& column, const char* field, const uint8_t* slot,
                         uint64_t offset, uint64_t count, uint64_t last) {
  if (count == 0) return column + ": " + field + " is empty, must hold at least one entry";
  const uint8_t* p = slot + offset;
  int64_t prev = Load<int64_t>(p, 0);
  if (prev != 0) return column + ": " + field + "[0] = " + std::to_string(prev) + ", must be 0";
  for (uint64_t i = 1; i < count; ++i) {
    const int64_t v = Load<int64_t>(p, i * 8);
    if (v < prev) {
      return column + ": " + field + "[" + Str(i) + "] = " + std::to_string(v) + " < " + field + "[" +
             Str(i - 1) + "] = " + std::to_string(prev);
    }
    prev = v;
  }
  if (static_cast<uint64_t>(prev) != last) {
    return column + ": " + field + "[" + Str(count - 1) + "] = " + std::to_string(prev) +
           ", must be " + Str(last);
  }
  return "";
}

std::string ColumnName(const FeatureDesc& f) {
  const bool known = IsKnownDType(f.dtype);
  return "feature '" + std::string(f.name, strnlen(f.name, kMaxNameBytes)) + "' (" +
         (f.type == kVarLen ? "varlen " : "fixed ") +
         (known ? std::string(DTypeName(static_cast<DType>(f.dtype))) : "dtype " + Str(f.dtype)) + ")";
}

std::string CheckColumnShape(const FeatureDesc& f, const ColumnDesc& c, uint64_t slot_bytes, uint32_t rows) {
  const std::string column = ColumnName(f);
  if (!IsKnownDType(f.dtype) || (f.type != kFixedLen && f.type != kVarLen) || f.rank > kMaxRank) {
    return column + ": invalid feature description";
  }
  const auto dtype = static_cast<DType>(f.dtype);
  const bool varlen = f.type == kVarLen;
  const bool bytes = dtype == DType::kBytes;
  uint64_t offsets_bytes = 0, splits_bytes = 0;
  if (__builtin_mul_overflow(c.value_offsets_count, uint64_t{8}, &offsets_bytes) ||
      __builtin_mul_overflow(c.row_splits_count, uint64_t{8}, &splits_bytes)) {
    return column + ": value_offsets_count " + Str(c.value_offsets_count) + " or row_splits_count " +
           Str(c.row_splits_count) + " overflows";
  }
  if (std::string e = CheckRegion(column, "values", c.values_offset, c.values_bytes, slot_bytes); !e.empty()) return e;
  if (bytes) {
    if (auto e = CheckRegion(column, "value_offsets", c.value_offsets_offset, offsets_bytes, slot_bytes); !e.empty()) return e;
  } else if (c.value_offsets_count != 0) {
    return column + ": value_offsets_count " + Str(c.value_offsets_count) + " for a numeric column, must be 0";
  }
  if (varlen) {
    if (auto e = CheckRegion(column, "row_splits", c.row_splits_offset, splits_bytes, slot_bytes); !e.empty()) return e;
  } else if (c.row_splits_count != 0) {
    return column + ": row_splits_count " + Str(c.row_splits_count) + " for a fixed column, must be 0";
  }
  if (varlen) {
    if (c.row_splits_count != uint64_t{rows} + 1) {
      return column + ": row_splits_count " + Str(c.row_splits_count) + ", must be rows + 1 = " + Str(rows + uint64_t{1});
    }
    if (bytes && c.value_offsets_count == 0) return column + ": value_offsets_count 0, must be strings + 1";
    if (!bytes && c.values_bytes % DTypeSize(dtype) != 0) {
      return column + ": values_bytes " + Str(c.values_bytes) + " is not a multiple of " + Str(DTypeSize(dtype));
    }
    return "";
  }
  uint64_t elements = rows;
  for (uint32_t d = 0; d < f.rank; ++d) {
    if (f.shape[d] < 0 || __builtin_mul_overflow(elements, static_cast<uint64_t>(f.shape[d]), &elements)) {
      return column + ": rows * shape overflows";
    }
  }
  if (!bytes) {
    uint64_t expected = 0;
    if (__builtin_mul_overflow(elements, DTypeSize(dtype), &expected) || c.values_bytes != expected) {
      return column + ": values_bytes " + Str(c.values_bytes) + ", must be rows " + Str(rows) + " x " +
             Str(elements / (rows ? rows : 1)) + " values x " + Str(DTypeSize(dtype)) + " bytes";
    }
  } else if (c.value_offsets_count != elements + 1) {
    return column + ": value_offsets_count " + Str(c.value_offsets_count) + ", must be strings + 1 = " +
           Str(elements + 1);
  }
  return "";
}

// For a column that passed CheckColumnShape.
std::string CheckColumnOffsetsSlow(const FeatureDesc& f, const ColumnDesc& c, const uint8_t* slot) {
  const std::string column = ColumnName(f);
  if (f.type == kVarLen) {
    if (auto e = CheckOffsets(column, "row_splits", slot, c.row_splits_offset, c.row_splits_count, RowSplitsLast(f, c));
        !e.empty()) {
      return e;
    }
  }
  if (static_cast<DType>(f.dtype) == DType::kBytes) {
    return CheckOffsets(column, "value_offsets", slot, c.value_offsets_offset, c.value_offsets_count, c.values_bytes);
  }
  return "";
}

// What is wrong with the batch, or "" when nothing is.
std::string Explain(const uint8_t* slot, uint64_t slot_bytes, uint32_t batch_size,
                    std::span<const FeatureDesc> features) {
  if (slot_bytes < sizeof(SlotHeader)) return "slot_bytes " + Str(slot_bytes) + " cannot hold a slot header";
  if (features.size() > kMaxFeatures) {
    return Str(features.size()) + " features, more than the maximum " + Str(kMaxFeatures);
  }
  const auto rows = Load<uint32_t>(slot, offsetof(SlotHeader, rows));
  const auto used_bytes = Load<uint64_t>(slot, offsetof(SlotHeader, used_bytes));
  const auto columns_offset = Load<uint64_t>(slot, offsetof(SlotHeader, columns_offset));
  const auto sources_offset = Load<uint64_t>(slot, offsetof(SlotHeader, sources_offset));
  if (rows > batch_size) return "rows " + Str(rows) + " exceeds batch_size " + Str(batch_size);
  if (used_bytes > slot_bytes) return "used_bytes " + Str(used_bytes) + " exceeds slot_bytes " + Str(slot_bytes);
  if (auto e = CheckTable("column table", columns_offset, features.size(), sizeof(ColumnDesc), slot_bytes);
      !e.empty()) {
    return e;
  }
  if (auto e = CheckTable("row sources", sources_offset, rows, sizeof(RowSource), slot_bytes); !e.empty()) {
    return e;
  }
  std::vector<ColumnDesc> columns(features.size());
  if (!features.empty()) {
    std::memcpy(columns.data(), slot + columns_offset, features.size() * sizeof(ColumnDesc));
  }
  for (size_t i = 0; i < features.size(); ++i) {
    if (auto e = CheckColumnShape(features[i], columns[i], slot_bytes, rows); !e.empty()) return e;
  }
  return "";
}

}  // namespace

bool ReadBatch(const uint8_t* slot, uint64_t slot_bytes, uint32_t batch_size,
               std::span<const FeatureDesc> features, CheckedBatch* out, std::string* error) {
  if (ReadFast(slot, slot_bytes, batch_size, features, out)) return true;
  *error = Explain(slot, slot_bytes, batch_size, features);
  if (error->empty()) {
    // Only a writer changing the slot between the two passes gets here.
    *error = "the slot changed while it was being checked (is something still writing it?)";
  }
  return false;
}

bool CheckColumnOffsets(const uint8_t* slot, const FeatureDesc& feature, const ColumnDesc& column,
                        std::string* error) {
  // The arrays were written by the daemon on another core: ask for all their cache lines at
  // once, then check (ReadBatch has put the regions inside the slot).
  if (feature.type == kVarLen) Prefetch(slot, column.row_splits_offset, column.row_splits_count);
  if (static_cast<DType>(feature.dtype) == DType::kBytes) {
    Prefetch(slot, column.value_offsets_offset, column.value_offsets_count);
  }
  if (ColumnOffsetsOk(feature, column, slot)) return true;
  *error = CheckColumnOffsetsSlow(feature, column, slot);
  if (error->empty()) *error = "the slot changed while it was being checked (is something still writing it?)";
  return false;
}

bool ValidateBatch(const Superblock& sb, const uint8_t* slot, std::string* error) {
  CheckedBatch batch;
  const uint32_t count = sb.feature_count <= kMaxFeatures ? sb.feature_count : kMaxFeatures;
  const std::span<const FeatureDesc> features(sb.features, count);
  if (!ReadBatch(slot, sb.slot_bytes, sb.batch_size, features, &batch, error)) return false;
  for (size_t i = 0; i < features.size(); ++i) {
    if (!CheckColumnOffsets(slot, features[i], batch.columns[i], error)) return false;
  }
  return true;
}

}  // namespace ringfeed::shm
