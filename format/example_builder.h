// ExampleBuilder: serializes a tf.train.Example (protobuf wire format, packed numeric lists,
// features in insertion order). For the bundled sample data, benchmarks and tests; the loader
// itself only reads Examples.
//
// Thread-safety: none; a plain value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ringfeed {

class ExampleBuilder {
 public:
  ExampleBuilder& AddInt64(std::string_view key, std::span<const int64_t> values);
  ExampleBuilder& AddFloat(std::string_view key, std::span<const float> values);
  ExampleBuilder& AddBytes(std::string_view key, std::span<const std::string_view> values);
  ExampleBuilder& AddInt64(std::string_view key, std::initializer_list<int64_t> values) {
    return AddInt64(key, std::span<const int64_t>(values.begin(), values.size()));
  }
  ExampleBuilder& AddFloat(std::string_view key, std::initializer_list<float> values) {
    return AddFloat(key, std::span<const float>(values.begin(), values.size()));
  }
  ExampleBuilder& AddBytes(std::string_view key, std::initializer_list<std::string_view> values) {
    return AddBytes(key, std::span<const std::string_view>(values.begin(), values.size()));
  }
  // A Feature with no list set (TensorFlow treats it as missing).
  ExampleBuilder& AddEmptyFeature(std::string_view key);

  // The serialized Example.
  std::string Serialize() const;
  void Clear() { entries_.clear(); }

 private:
  void AddEntry(std::string_view key, const std::string& feature);
  std::string entries_;  // serialized Features.feature map entries
};

}  // namespace ringfeed
