#include "format/feature_spec.h"

#include <array>
#include <utility>

namespace ringfeed {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;  // must agree with DTypeSize (checked below)
};

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::kInt64, "int64", 8},   {DType::kFloat32, "float32", 4}, {DType::kBytes, "bytes", 0},
    {DType::kUInt8, "uint8", 1},   {DType::kInt8, "int8", 1},       {DType::kUInt16, "uint16", 2},
    {DType::kInt16, "int16", 2},   {DType::kInt32, "int32", 4},     {DType::kUInt32, "uint32", 4},
    {DType::kFloat64, "float64", 8},
}};

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

constexpr bool SizesAgree() {
  for (const auto& info : kDTypes) {
    if (DTypeSize(info.dtype) != info.size) return false;
  }
  return true;
}
static_assert(SizesAgree(), "kDTypes sizes and DTypeSize disagree");

}  // namespace

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

std::string_view ListKindName(ListKind kind) {
  switch (kind) {
    case ListKind::kBytes: return "bytes";
    case ListKind::kFloat: return "float";
    case ListKind::kInt64: return "int64";
  }
  return "?";
}

int64_t FeatureSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

ListKind FeatureSpec::WireKind() const {
  if (decode_raw) return ListKind::kBytes;
  switch (dtype) {
    case DType::kInt64: return ListKind::kInt64;
    case DType::kFloat32: return ListKind::kFloat;
    default: return ListKind::kBytes;
  }
}

}  // namespace ringfeed
