// BatchWriter: parses one batch's serialized records straight into its shared-memory slot.
//
//   1. sizing: the slot's room beyond the exactly-known arrays (FixedLen numeric values,
//      row_splits, FixedLen bytes offsets) is shared among the variable arrays in proportion to
//      what the previous batch used. If a record does not fit, or for the first batch, the
//      sizing pass runs: ExampleParser::Measure over the records gives, per column, an upper
//      bound of what parsing appends (format/column_sizes.h), and the batch is parsed again;
//   2. layout: SlotHeader | ColumnDesc[features] | RowSource[records] | column regions, each
//      region 64-byte aligned (shm/ring_layout.h). A batch that does not fit the slot is an
//      error naming the bytes needed and ring.slot_bytes — never truncated data;
//   3. ExampleParser::Parse into an ExampleBatch whose columns are those regions: the values
//      are written once, into the memory the trainer reads (no staging copy);
//   4. the slot header and column directory are written; publishing is the caller's.
// A record that fails to parse fails the batch (on_error: fail). Under on_error: skip the
// readers took such records out before batches were cut (Pipeline); should one still fail here,
// it is skipped (the batch one row smaller, the message returned).
//
// Thread-safety: one BatchWriter per worker thread (it keeps its scratch vectors).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/sequencer.h"
#include "format/column_sizes.h"
#include "format/example_parser.h"
#include "shm/ring.h"

namespace ringfeed {

// The job's files as messages name them: the paths (FileList order: OwnedRecord::file_index)
// and, where known, each file's compression as read, so that a record's byte offset in a
// GZIP/ZLIB file is said to be one of the uncompressed stream (RecordPlace).
struct JobFiles {
  // Implicit: a plain list of paths names every record's offset as in a plain file.
  JobFiles(const std::vector<std::string>& paths,  // NOLINT(google-explicit-constructor)
           std::function<Compression(uint32_t file_index)> compression = {})
      : paths(paths), compression(std::move(compression)) {}
  // "PATH: record N at byte B[ of the uncompressed stream (gzip)]".
  std::string Place(const OwnedRecord& record) const;

  const std::vector<std::string>& paths;
  std::function<Compression(uint32_t)> compression;  // empty: not known (named as plain)
};

class BatchWriter {
 public:
  // `ring`: the daemon's own geometry (DaemonRing), never read back from the superblock.
  BatchWriter(const ExampleParser& parser, const shm::Ring& ring) : parser_(parser), ring_(ring) {}

  struct Result {
    size_t rows = 0;                   // records written
    uint64_t record_bytes = 0;         // serialized bytes of those records
    std::vector<std::string> skipped;  // on_error: skip: one message per skipped record
    std::string error;                 // non-empty: the batch failed (on_error: fail, or no room)
  };
  // Fills slot `slot` (which the caller owns: its word is kFree or kFilling) with `job`.
  // `files` is the job's file list, for messages.
  Result Write(const BatchJob& job, uint32_t slot, bool skip_errors, const JobFiles& files);

  // Batches that did not fit the planned layout and were measured and parsed again.
  uint64_t remeasured() const { return remeasured_; }

 private:
  // Per feature: bytes of values and of value_offsets the last batch used, scaled to a full batch.
  struct Usage {
    double value_bytes = 0;
    double offset_bytes = 0;
  };
  // Capacities sharing `space` bytes (after the header) by history_; empty when it can't.
  std::vector<ColumnCapacity> PlanFromHistory(size_t rows, uint64_t space) const;
  // Lays out `caps`, parses the batch into the slot and writes its header. *no_room: a record
  // did not fit (the result is then incomplete).
  Result Fill(const BatchJob& job, uint32_t slot, const std::vector<ColumnCapacity>& caps, bool skip_errors,
              const JobFiles& files, bool* no_room);

  const ExampleParser& parser_;
  shm::Ring ring_;
  ColumnSizes sizes_;
  std::vector<ColumnRegion> regions_;
  std::vector<Usage> history_;
  uint64_t remeasured_ = 0;
};

}  // namespace ringfeed
