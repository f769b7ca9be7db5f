// Schema: the features of a job's batches, as the daemon wrote them into the segment's
// superblock (copied once at attach, so it never changes under the caller).
//
// FixedLen features have a per-row `shape` (empty = scalar): the batch tensor is
// [rows, ...shape]. VarLen features are ragged (values + row_splits); their `shape` is empty.
// dtype kBytes means strings (values + value_offsets). Immutable; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shm/dtype.h"
#include "shm/ring_layout.h"

namespace ringfeed {

struct FeatureInfo {
  std::string name;
  shm::DType dtype = shm::DType::kInt64;
  shm::FeatureType type = shm::FeatureType::kFixedLen;
  std::vector<int64_t> shape;  // FixedLen: per-row shape; VarLen: empty
};

struct Schema {
  std::string job;
  uint32_t batch_size = 0;  // rows of a full batch (the last of an epoch may hold fewer)
  shm::DeliveryMode mode = shm::DeliveryMode::kShared;
  uint32_t queue_count = 1;  // ranks mode: the number of ranks
  std::vector<FeatureInfo> features;

  // Index of the feature called `name`, or nullopt.
  std::optional<size_t> IndexOf(std::string_view name) const {
    for (size_t i = 0; i < features.size(); ++i) {
      if (features[i].name == name) return i;
    }
    return std::nullopt;
  }
};

}  // namespace ringfeed
