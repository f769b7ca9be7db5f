#include "format/example_builder.h"

#include <cstring>

namespace ringfeed {
namespace {

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Field `field` with wire type 2 (length-delimited).
void PutLen(std::string& out, uint32_t field, std::string_view payload) {
  PutVarint(out, (uint64_t{field} << 3) | 2);
  PutVarint(out, payload.size());
  out.append(payload);
}

}  // namespace

void ExampleBuilder::AddEntry(std::string_view key, const std::string& feature) {
  std::string entry;
  PutLen(entry, 1, key);
  PutLen(entry, 2, feature);
  PutLen(entries_, 1, entry);
}

ExampleBuilder& ExampleBuilder::AddInt64(std::string_view key, std::span<const int64_t> values) {
  std::string packed, list, feature;
  for (int64_t v : values) PutVarint(packed, static_cast<uint64_t>(v));
  if (!values.empty()) PutLen(list, 1, packed);
  PutLen(feature, 3, list);
  AddEntry(key, feature);
  return *this;
}

ExampleBuilder& ExampleBuilder::AddFloat(std::string_view key, std::span<const float> values) {
  std::string packed(values.size() * 4, '\0'), list, feature;
  if (!values.empty()) std::memcpy(packed.data(), values.data(), packed.size());
  if (!values.empty()) PutLen(list, 1, packed);
  PutLen(feature, 2, list);
  AddEntry(key, feature);
  return *this;
}

ExampleBuilder& ExampleBuilder::AddBytes(std::string_view key, std::span<const std::string_view> values) {
  std::string list, feature;
  for (std::string_view v : values) PutLen(list, 1, v);
  PutLen(feature, 1, list);
  AddEntry(key, feature);
  return *this;
}

ExampleBuilder& ExampleBuilder::AddEmptyFeature(std::string_view key) {
  AddEntry(key, "");
  return *this;
}

std::string ExampleBuilder::Serialize() const {
  std::string out;
  PutLen(out, 1, entries_);
  return out;
}

}  // namespace ringfeed
