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
#include <string>
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
  // How this shard reads, for logs, `ringfeedctl check` and status: "shard 3 of 16, by record
  // (fewer files than shards: every node reads all 12 files and keeps records r with r mod 16 =
  // 3)" or "shard 0 of 2, by file (6 of 12 files)". Empty when count is 1 (no sharding).
  std::string Describe(size_t file_count) const {
    if (count <= 1) return {};
    const std::string head = "shard " + std::to_string(index) + " of " + std::to_string(count);
    if (by_record) {
      const std::string files = file_count == 1 ? "the 1 file" : "all " + std::to_string(file_count) + " files";
      return head + ", by record (fewer files than shards: every node reads " + files +
             " and keeps records r with r mod " + std::to_string(count) + " = " + std::to_string(index) + ")";
    }
    return head + ", by file (" + std::to_string(Files(file_count).size()) + " of " + std::to_string(file_count) +
           " files)";
  }
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
