// Shard: which files and records one node's shard of a job reads (shard.index of shard.count,
// docs/config.md). One rule for the Sequencer, ringfeedd's start-up sample and `ringfeedctl check`:
// - at least as many files as shards: file i belongs to shard i % count, which reads all of it;
// - fewer files than shards: every shard reads every file and keeps record r (0-based index in
//   its file) when r % count == index.
// Either way, across all shards every record is read exactly once per epoch.
// A value type: copies may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringfeed {

struct Shard {
  uint64_t count = 1;
  uint64_t index = 0;
  bool by_record = false;  // fewer files than shards

  // count < 1 is taken as 1 (the config validates 0 <= index < count).
  static Shard For(size_t file_count, int64_t count, int64_t index) {
    Shard s;
    s.count = count < 1 ? 1 : static_cast<uint64_t>(count);
    s.index = index < 0 ? 0 : static_cast<uint64_t>(index);
    s.by_record = file_count < s.count;
    return s;
  }
  bool OwnsFile(size_t file_index) const { return by_record || file_index % count == index; }
  bool OwnsRecord(uint64_t record_index) const { return !by_record || record_index % count == index; }
  // The indices of the files this shard reads, ascending.
  std::vector<uint32_t> Files(size_t file_count) const {
    std::vector<uint32_t> files;
    for (uint32_t i = 0; i < file_count; ++i) {
      if (OwnsFile(i)) files.push_back(i);
    }
    return files;
  }
};

}  // namespace ringfeed
