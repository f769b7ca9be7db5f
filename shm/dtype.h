// Element types and feature types as the ring stores them (FeatureDesc::dtype / ::type).
//
// The numbering (0 int64, 1 float32, 2 bytes, 3 uint8, 4 int8, 5 uint16, 6 int16, 7 int32,
// 8 uint32, 9 float64) is the DType of ringfeed's parser (source: format/feature_spec.h),
// repeated here so that shm/ and the client library depend on nothing of ours. It is part of
// the ring layout: never renumber.
// Plain constexpr functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shm/ring_layout.h"

namespace ringfeed::shm {

enum class DType : uint8_t {
  kInt64 = 0, kFloat32 = 1, kBytes = 2, kUInt8 = 3, kInt8 = 4, kUInt16 = 5, kInt16 = 6,
  kInt32 = 7, kUInt32 = 8, kFloat64 = 9,
};
inline constexpr uint8_t kDTypeCount = 10;

enum class FeatureType : uint8_t {
  kFixedLen = 0,  // tf.io.FixedLenFeature: [rows, ...shape]
  kVarLen = 1,    // tf.io.VarLenFeature: values + row_splits
};
static_assert(static_cast<uint8_t>(FeatureType::kFixedLen) == kFixedLen &&
              static_cast<uint8_t>(FeatureType::kVarLen) == kVarLen);

constexpr bool IsKnownDType(uint8_t dtype) { return dtype < kDTypeCount; }

// Bytes per element; 0 for kBytes (variable-size strings) and for unknown values.
constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kInt64: case DType::kFloat64: return 8;
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kUInt16: case DType::kInt16: return 2;
    case DType::kUInt8: case DType::kInt8: return 1;
    case DType::kBytes: return 0;
  }
  return 0;
}

// The name configs and NumPy use: "int64", "float32", "bytes", "uint8", ...; "unknown" else.
constexpr std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kBytes: return "bytes";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kFloat64: return "float64";
  }
  return "unknown";
}

constexpr std::string_view FeatureTypeName(FeatureType type) {
  return type == FeatureType::kFixedLen ? "fixed" : type == FeatureType::kVarLen ? "varlen" : "unknown";
}

}  // namespace ringfeed::shm
