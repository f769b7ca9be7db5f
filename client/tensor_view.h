// TensorView: one feature's column of a Batch, zero-copy (pointers into the shared-memory
// slot). Valid only while its Batch holds the slot: after Batch::Release() or the Batch's
// destruction the daemon may overwrite the memory (copy what must outlive the batch).
//
// Layout (shm/ring_layout.h), rows = Batch::rows():
//   FixedLen numeric  data(): rows * prod(shape) elements, row-major; shape() = {rows, dims...}
//   VarLen numeric    data(): every row's values concatenated; row_splits(): rows + 1 int64
//                     entries, row r = values [row_splits[r], row_splits[r+1]);
//                     shape() = {number of values}
//   bytes (FixedLen)  data(): the strings' bytes concatenated; value_offsets(): strings + 1
//                     int64 entries (string i = bytes [value_offsets[i], value_offsets[i+1]));
//                     shape() = {rows, dims...} counting strings
//   bytes (VarLen)    as bytes, plus row_splits() counting strings per row;
//                     shape() = {number of strings}
// All offsets have been checked against the slot (source: shm/batch_check.h) before the view exists.
// The memory is writable (mutable_data) because NumPy/DLPack need writable buffers; writes land
// in the shared segment's slot, which only the holder reads until it releases the batch, and the
// daemon overwrites them when it reuses the slot.
// Thread-safety: a const view; reading from several threads is fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "client/client_error.h"
#include "shm/dtype.h"
#include "shm/ring_layout.h"

namespace ringfeed {

class TensorView {
 public:
  TensorView() = default;

  std::string_view name() const { return name_; }
  shm::DType dtype() const { return dtype_; }
  shm::FeatureType type() const { return type_; }
  // FixedLen: {rows, dims...}; VarLen: {number of values (strings for bytes)}.
  std::span<const int64_t> shape() const { return {shape_, rank_}; }

  // The values' bytes: numbers for numeric dtypes, the strings' concatenated bytes for kBytes.
  const void* data() const { return data_; }
  void* mutable_data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  // Numeric: number of values; kBytes: number of strings.
  uint64_t size() const { return size_; }

  // The values as T, which must match dtype() (int64_t, float, double, uint8_t, int8_t,
  // uint16_t, int16_t, int32_t, uint32_t; char, uint8_t or std::byte for kBytes, and char or
  // std::byte for kUInt8 too, byte views of the same memory). Throws ClientError on a mismatch.
  template <typename T>
  std::span<const T> values() const {
    if (!Matches<T>(dtype_)) {
      throw ClientError("feature '" + std::string(name_) + "' has dtype " + std::string(shm::DTypeName(dtype_)) +
                        "; values<T>() was called with another type: use values<" + CppTypeName(dtype_) + ">()");
    }
    return {static_cast<const T*>(data_), bytes_ / sizeof(T)};
  }

  // kBytes only: value_offsets (strings + 1 entries), else empty.
  std::span<const int64_t> value_offsets() const { return value_offsets_; }
  // VarLen only: row_splits (rows + 1 entries), else empty.
  std::span<const int64_t> row_splits() const { return row_splits_; }

  // kBytes only: string i (< size()). Throws ClientError otherwise. Its two value_offsets
  // entries are read once and checked against the column again: they were checked when the
  // column was first viewed, but the slot is writable memory (mutable_data(), NumPy views),
  // and a holder that wrote them must get an error, not a view of other memory.
  std::string_view string(uint64_t i) const {
    if (dtype_ != shm::DType::kBytes || i >= size_) {
      throw ClientError("feature '" + std::string(name_) + "': no string " + std::to_string(i));
    }
    const int64_t begin = value_offsets_[i], end = value_offsets_[i + 1];
    if (begin < 0 || end < begin || static_cast<uint64_t>(end) > bytes_) {
      throw ClientError("feature '" + std::string(name_) + "': string " + std::to_string(i) + " has value_offsets [" +
                        std::to_string(begin) + ", " + std::to_string(end) + ") outside the column's " +
                        std::to_string(bytes_) +
                        " bytes: the batch's offsets were overwritten after the client checked them "
                        "(through mutable_data() or a writable array view of the batch)");
    }
    return {static_cast<const char*>(data_) + begin, static_cast<size_t>(end - begin)};
  }

 private:
  friend class Batch;

  // The C++ type values<T>() takes for `d`.
  static std::string CppTypeName(shm::DType d) {
    switch (d) {
      case shm::DType::kInt64: return "int64_t";
      case shm::DType::kFloat32: return "float";
      case shm::DType::kFloat64: return "double";
      case shm::DType::kBytes: return "char";
      case shm::DType::kUInt8: return "uint8_t";
      case shm::DType::kInt8: return "int8_t";
      case shm::DType::kUInt16: return "uint16_t";
      case shm::DType::kInt16: return "int16_t";
      case shm::DType::kInt32: return "int32_t";
      case shm::DType::kUInt32: return "uint32_t";
    }
    return "?";
  }
  template <typename T>
  static constexpr bool Matches(shm::DType d) {
    using shm::DType;
    if constexpr (std::is_same_v<T, int64_t>) return d == DType::kInt64;
    else if constexpr (std::is_same_v<T, float>) return d == DType::kFloat32;
    else if constexpr (std::is_same_v<T, double>) return d == DType::kFloat64;
    else if constexpr (std::is_same_v<T, uint8_t>) return d == DType::kUInt8 || d == DType::kBytes;
    else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, std::byte>) return d == DType::kBytes || d == DType::kUInt8;
    else if constexpr (std::is_same_v<T, int8_t>) return d == DType::kInt8;
    else if constexpr (std::is_same_v<T, uint16_t>) return d == DType::kUInt16;
    else if constexpr (std::is_same_v<T, int16_t>) return d == DType::kInt16;
    else if constexpr (std::is_same_v<T, int32_t>) return d == DType::kInt32;
    else if constexpr (std::is_same_v<T, uint32_t>) return d == DType::kUInt32;
    else return false;
  }

  std::string_view name_;
  shm::DType dtype_ = shm::DType::kInt64;
  shm::FeatureType type_ = shm::FeatureType::kFixedLen;
  int64_t shape_[shm::kMaxRank + 1] = {};
  size_t rank_ = 0;
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t size_ = 0;
  std::span<const int64_t> value_offsets_;
  std::span<const int64_t> row_splits_;
};

}  // namespace ringfeed
