#include "daemon/batch_writer.h"

#include <algorithm>

#include "shm/ring.h"
#include "shm/segment.h"  // HumanBytes

namespace ringfeed {
namespace {
constexpr uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
}  // namespace

std::vector<ColumnCapacity> BatchWriter::PlanFromHistory(size_t rows, uint64_t space) const {
  const FeatureSpecs& specs = parser_.specs();
  // Exact arrays first (FixedLen numeric values, FixedLen bytes offsets, row_splits).
  std::vector<ColumnCapacity> caps = ColumnCapacities(specs, rows, ColumnSizes{});
  uint64_t exact = 0, arrays = 0;
  double total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const bool fixed = specs[i].type == FeatureType::kFixedLen;
    const bool bytes = specs[i].dtype == DType::kBytes;
    if (fixed && !bytes) exact += AlignUp(caps[i].values_bytes, shm::kColumnAlign), ++arrays;
    if (fixed && bytes) exact += AlignUp(8 * caps[i].value_offsets, shm::kColumnAlign), ++arrays;
    if (!fixed) exact += AlignUp(8 * caps[i].row_splits, shm::kColumnAlign), ++arrays;
    if (!fixed || bytes) total += history_[i].value_bytes + shm::kColumnAlign, ++arrays;
    if (!fixed && bytes) total += history_[i].offset_bytes + shm::kColumnAlign, ++arrays;
  }
  // Room for rounding every array up to the alignment.
  const uint64_t reserved = exact + arrays * shm::kColumnAlign;
  if (space <= reserved) return {};
  const double share = static_cast<double>(space - reserved) / total;
  for (size_t i = 0; i < specs.size(); ++i) {
    const bool fixed = specs[i].type == FeatureType::kFixedLen;
    const bool bytes = specs[i].dtype == DType::kBytes;
    if (!fixed || bytes) {
      caps[i].values_bytes = static_cast<size_t>((history_[i].value_bytes + shm::kColumnAlign) * share);
    }
    if (!fixed && bytes) {
      caps[i].value_offsets = static_cast<size_t>((history_[i].offset_bytes + shm::kColumnAlign) * share) / 8;
    }
  }
  return caps;
}

std::string JobFiles::Place(const OwnedRecord& record) const {
  const std::string path = record.file_index < paths.size() ? paths[record.file_index]
                                                            : "file #" + std::to_string(record.file_index);
  return RecordPlace(path, record.record_index, record.offset,
                     compression ? compression(record.file_index) : Compression::kNone);
}

BatchWriter::Result BatchWriter::Write(const BatchJob& job, uint32_t slot, bool skip_errors, const JobFiles& files) {
  const FeatureSpecs& specs = parser_.specs();
  const uint64_t slot_bytes = ring_.slot_bytes;
  const size_t n = job.records.size();
  // The daemon's own record says the slot is free; a word that a consumer scribbled on does
  // not change that (the daemon never trusts consumer-writable words).
  if (!shm::BeginFill(ring_, slot)) {
    ring_.header(slot)->word.store(shm::SlotWord{shm::SlotState::kFilling}.Pack(), std::memory_order_release);
  }
  const uint64_t regions_offset = shm::SlotHeaderBytes(specs.size(), n);

  // Usually the batch fits a layout planned from the previous batches' column sizes, with the
  // slot's spare room shared in proportion: no sizing pass. If a record does not fit, the batch
  // is measured exactly and parsed again.
  if (!history_.empty() && regions_offset < slot_bytes) {
    const std::vector<ColumnCapacity> caps = PlanFromHistory(n, slot_bytes - regions_offset);
    if (!caps.empty()) {
      bool no_room = false;
      Result result = Fill(job, slot, caps, skip_errors, files, &no_room);
      if (!no_room) return result;
      ++remeasured_;
    }
  }

  // Sizing pass: an upper bound of every column, exact for the encoding serializers write.
  sizes_ = ColumnSizes{};
  for (const OwnedRecord& r : job.records) parser_.Measure(r.bytes(), &sizes_);
  const std::vector<ColumnCapacity> caps = ColumnCapacities(specs, n, sizes_);
  const uint64_t needed = regions_offset + ColumnRegionsBytes(caps, shm::kColumnAlign);
  if (needed > slot_bytes) {
    Result result;
    size_t largest = 0;
    uint64_t largest_bytes = 0;
    for (size_t i = 0; i < caps.size(); ++i) {
      const uint64_t b = caps[i].values_bytes + 8 * (caps[i].value_offsets + caps[i].row_splits);
      if (b > largest_bytes) largest_bytes = b, largest = i;
    }
    // The batch's largest record, to find the data that grew (a slot is sized from the first
    // records; a batch that does not fit is a capacity error, not a bad record: on_error does
    // not apply, and no data is cut).
    const OwnedRecord* big = nullptr;
    for (const OwnedRecord& r : job.records) {
      if (big == nullptr || r.size > big->size) big = &r;
    }
    const uint64_t kib = (needed + 1023) / 1024;
    result.error = "batch " + std::to_string(job.index) + " of epoch " + std::to_string(job.epoch) + " needs " +
                   std::to_string(needed) + " bytes (" + shm::HumanBytes(needed) + ") but a ring slot holds " +
                   std::to_string(slot_bytes) + " (" + shm::HumanBytes(slot_bytes) +
                   "): run `ringfeedctl check` on the job's config for the ring.slot_bytes that holds every batch "
                   "(it reads every record; where batches are shuffled or interleaved, a later batch can need "
                   "more than this one); this batch alone needs ring.slot_bytes of at least " + std::to_string(kib) +
                   "KiB (the largest column is '" + (specs.empty() ? std::string() : specs[largest].name) +
                   "' with " + std::to_string(largest_bytes) + " bytes; the largest record of the batch: " +
                   (big != nullptr ? files.Place(*big) + ", " + std::to_string(big->size) + " bytes"
                                   : std::string("none")) +
                   "). A capacity error: on_error does not apply";
    return result;
  }
  bool no_room = false;
  Result result = Fill(job, slot, caps, skip_errors, files, &no_room);
  if (no_room) result.error = "internal error: batch " + std::to_string(job.index) + " of epoch " +
                              std::to_string(job.epoch) + " did not fit the regions Measure sized";
  return result;
}

BatchWriter::Result BatchWriter::Fill(const BatchJob& job, uint32_t slot, const std::vector<ColumnCapacity>& caps,
                                      bool skip_errors, const JobFiles& files, bool* no_room) {
  Result result;
  const FeatureSpecs& specs = parser_.specs();
  uint8_t* const base = ring_.slot(slot);
  const uint64_t slot_bytes = ring_.slot_bytes;
  const size_t n = job.records.size();
  const uint64_t columns_offset = sizeof(shm::SlotHeader);
  const uint64_t sources_offset = AlignUp(columns_offset + specs.size() * sizeof(shm::ColumnDesc), shm::kColumnAlign);
  const uint64_t regions_offset = shm::SlotHeaderBytes(specs.size(), n);
  CarveColumnRegions(std::span<uint8_t>(base + regions_offset, slot_bytes - regions_offset), caps, shm::kColumnAlign,
                     &regions_);

  // Parse straight into the slot.
  ExampleBatch batch(specs, n, regions_);
  auto* sources = reinterpret_cast<shm::RowSource*>(base + sources_offset);
  ParseError error;
  for (const OwnedRecord& r : job.records) {
    if (!parser_.Parse(r.bytes(), batch, &error)) {
      if (error.no_room) {
        *no_room = true;
        return result;
      }
      std::string message = files.Place(r) + ": " + error.message;
      if (!skip_errors) {
        result.error = std::move(message) + " (on_error: fail)";
        return result;
      }
      result.skipped.push_back(std::move(message));
      continue;
    }
    sources[result.rows] = shm::RowSource{r.file_index, 0, r.record_index};
    ++result.rows;
    result.record_bytes += r.size;
  }

  // 4. Column directory and header.
  auto* columns = reinterpret_cast<shm::ColumnDesc*>(base + columns_offset);
  uint64_t used = regions_offset;
  // An empty array may have no memory at all; it is then described at an in-bounds offset.
  auto offset_of = [&](const void* p, uint64_t count) {
    return p != nullptr && count != 0 ? static_cast<uint64_t>(static_cast<const uint8_t*>(p) - base) : regions_offset;
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& spec = specs[i];
    const Column& c = batch.column(i);
    shm::ColumnDesc d{};
    d.values_bytes = spec.type == FeatureType::kFixedLen && spec.dtype != DType::kBytes
                         ? result.rows * static_cast<uint64_t>(spec.NumElements()) * DTypeSize(spec.dtype)
                         : c.values.size();
    d.values_offset = offset_of(c.values.data(), d.values_bytes);
    if (spec.dtype == DType::kBytes) {
      d.value_offsets_count = c.value_offsets.size();
      d.value_offsets_offset = offset_of(c.value_offsets.data(), d.value_offsets_count);
    }
    if (spec.type == FeatureType::kVarLen) {
      d.row_splits_count = c.row_splits.size();
      d.row_splits_offset = offset_of(c.row_splits.data(), d.row_splits_count);
    }
    used = std::max({used, d.values_offset + d.values_bytes, d.value_offsets_offset + 8 * d.value_offsets_count,
                     d.row_splits_offset + 8 * d.row_splits_count});
    columns[i] = d;
  }
  // What this batch used, per row: the plan for the next one.
  if (result.rows > 0) {
    history_.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const Column& c = batch.column(i);
      history_[i].value_bytes = static_cast<double>(c.values.size()) / static_cast<double>(result.rows) *
                                static_cast<double>(n);
      history_[i].offset_bytes = 8.0 * static_cast<double>(c.value_offsets.size()) /
                                 static_cast<double>(result.rows) * static_cast<double>(n);
    }
  }
  shm::SlotHeader* header = ring_.header(slot);
  header->epoch = job.epoch;
  header->batch_index = job.index;
  header->rows = static_cast<uint32_t>(result.rows);
  header->flags = job.flags;
  header->used_bytes = used;
  header->columns_offset = columns_offset;
  header->sources_offset = sources_offset;
  return result;
}

}  // namespace ringfeed
