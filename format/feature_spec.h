// FeatureSpec: what a job wants out of each tf.train.Example, in TensorFlow's terms.
//
// A spec maps feature names to either a FixedLenFeature (tf.io.FixedLenFeature: every record
// yields exactly prod(shape) values, or the default when the feature is missing) or a
// VarLenFeature (tf.io.VarLenFeature: any number of values per record, returned ragged as
// values + row_splits). Semantics follow TensorFlow's fast Example parser
// (tensorflow/core/util/example_proto_fast_parsing.cc); see docs/config.md.
//
// Plain data, no behaviour: built by config/ from YAML, consumed by ExampleParser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringfeed {

// The three value lists of tf.train.Feature (its `kind` oneof).
enum class ListKind : uint8_t { kBytes = 1, kFloat = 2, kInt64 = 3 };

// Element type of an output tensor. kInt64/kFloat32/kBytes are the Example dtypes; the others
// are only produced by `decode: raw` (tf.io.decode_raw, little-endian).
enum class DType : uint8_t { kInt64, kFloat32, kBytes, kUInt8, kInt8, kUInt16, kInt16, kInt32,
                             kUInt32, kFloat64 };

// Size in bytes of one element; 0 for kBytes (variable-size strings).
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
// Canonical lower-case name used in configs and JSON: "int64", "float32", "bytes", "uint8", ...
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName; nullopt for unknown names.
std::optional<DType> ParseDType(std::string_view name);
// Name of a list kind as TensorFlow and `ringfeedctl inspect` print it: "int64", "float", "bytes".
std::string_view ListKindName(ListKind kind);

enum class FeatureType : uint8_t {
  kFixedLen,  // tf.io.FixedLenFeature
  kVarLen,    // tf.io.VarLenFeature (ragged: values + row_splits)
};

struct FeatureSpec {
  std::string name;
  FeatureType type = FeatureType::kFixedLen;
  // Output dtype. For `decode_raw`, the dtype the bytes are reinterpreted as; otherwise one of
  // kInt64, kFloat32, kBytes, which also names the list kind the record must hold.
  DType dtype = DType::kInt64;
  // FixedLen only: output shape per record, row-major; empty = scalar. All dims >= 0.
  std::vector<int64_t> shape;
  // FixedLen only, optional. Either one value (broadcast to the whole shape) or exactly
  // NumElements() values. Only the vector matching `dtype` is used.
  bool has_default = false;
  std::vector<int64_t> default_int64;
  std::vector<float> default_float;
  std::vector<std::string> default_bytes;
  // FixedLen only: the record holds one bytes value whose raw little-endian bytes are the
  // NumElements() values of `dtype` (like tf.io.decode_raw). The wire list kind is then kBytes.
  bool decode_raw = false;

  // Number of values per record for a FixedLen feature: product of `shape` (1 for a scalar).
  int64_t NumElements() const;
  // Whether a record without this feature fails to parse: a FixedLen feature without a default
  // (tf.io.FixedLenFeature without default_value; its shape [0] too, as in TensorFlow).
  bool RequiredInRecords() const { return type == FeatureType::kFixedLen && !has_default; }
  // The tf.train.Feature list kind this feature must be read from.
  ListKind WireKind() const;
};

using FeatureSpecs = std::vector<FeatureSpec>;

}  // namespace ringfeed
