#include "client/batch.h"

#include <cstring>
#include <utility>

#include "client/attachment.h"
#include "client/client_error.h"
#include "shm/ring.h"

namespace ringfeed {

Batch::Batch() {}
Batch::~Batch() { Release(); }

namespace {

// Words of Batch::offsets_checked_ in use for `columns` columns.
size_t CheckedWords(uint32_t columns) { return (columns + size_t{63}) / 64; }

void CopyCheckedBits(const std::atomic<uint64_t>* from, std::atomic<uint64_t>* to, uint32_t columns) {
  for (size_t w = 0; w < CheckedWords(columns); ++w) {
    to[w].store(from[w].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
}

}  // namespace

Batch::Batch(Batch&& other) noexcept
    : attachment_(std::move(other.attachment_)), slot_(other.slot_), seq_(other.seq_),
      base_(std::exchange(other.base_, nullptr)), checked_(std::move(other.checked_)) {
  CopyCheckedBits(other.offsets_checked_, offsets_checked_, checked_.column_count);
}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    Release();
    attachment_ = std::move(other.attachment_);
    slot_ = other.slot_;
    seq_ = other.seq_;
    base_ = std::exchange(other.base_, nullptr);
    checked_ = std::move(other.checked_);
    CopyCheckedBits(other.offsets_checked_, offsets_checked_, checked_.column_count);
  }
  return *this;
}

void Batch::Release() noexcept {
  if (!attachment_) return;
  // In a forked child the slot is the parent's, which may still be reading it: drop only
  // this process's reference.
  if (!attachment_->Forked()) shm::Release(attachment_->ring, slot_, attachment_->consumer_id, seq_);
  attachment_.reset();
  base_ = nullptr;
}

void Batch::CheckValid(const char* what) const {
  if (!attachment_) {
    throw ClientError(std::string("Batch::") + what +
                      " on a batch that holds no slot (released, moved from, or never filled by Next)");
  }
}

uint64_t Batch::epoch() const { CheckValid("epoch"); return checked_.epoch; }
uint64_t Batch::index() const { CheckValid("index"); return checked_.batch_index; }
uint32_t Batch::rows() const { CheckValid("rows"); return checked_.rows; }
bool Batch::end_of_epoch() const { CheckValid("end_of_epoch"); return checked_.flags & shm::kBatchEndOfEpoch; }
bool Batch::end_of_data() const { CheckValid("end_of_data"); return checked_.flags & shm::kBatchEndOfData; }
uint32_t Batch::slot() const { CheckValid("slot"); return slot_; }
size_t Batch::feature_count() const { CheckValid("feature_count"); return checked_.column_count; }

void Batch::ClearOffsetChecks() {
  for (size_t w = 0; w < CheckedWords(checked_.column_count); ++w) {
    offsets_checked_[w].store(0, std::memory_order_relaxed);
  }
}

void Batch::CheckOffsets(size_t i) const {
  const uint64_t bit = uint64_t{1} << (i % 64);
  std::atomic<uint64_t>& word = offsets_checked_[i / 64];
  if (word.load(std::memory_order_relaxed) & bit) return;
  const detail::Attachment& a = *attachment_;
  std::string error;
  if (!shm::CheckColumnOffsets(base_, a.features[i], checked_.columns[i], &error)) {
    throw ClientError(a.InvalidBatch(slot_, seq_, error) +
                      ". Release this batch. A process that maps the job's segment wrote into it (a trainer "
                      "writing past its batch), or this is a bug in ringfeedd: please report it");
  }
  word.fetch_or(bit, std::memory_order_relaxed);
}

TensorView Batch::feature(size_t i) const {
  CheckValid("feature");
  const Schema& schema = attachment_->schema;
  if (i >= schema.features.size()) {
    throw ClientError("feature index " + std::to_string(i) + " out of range: job " + schema.job + " has " +
                      std::to_string(schema.features.size()) + " features");
  }
  CheckOffsets(i);
  const FeatureInfo& info = schema.features[i];
  const shm::ColumnDesc& c = checked_.columns[i];
  TensorView v;
  v.name_ = info.name;
  v.dtype_ = info.dtype;
  v.type_ = info.type;
  v.data_ = base_ + c.values_offset;
  v.bytes_ = c.values_bytes;
  const bool is_bytes = info.dtype == shm::DType::kBytes;
  if (is_bytes) {
    v.value_offsets_ = {reinterpret_cast<const int64_t*>(base_ + c.value_offsets_offset), c.value_offsets_count};
    v.size_ = c.value_offsets_count - 1;
  } else {
    v.size_ = c.values_bytes / shm::DTypeSize(info.dtype);
  }
  if (info.type == shm::FeatureType::kVarLen) {
    v.row_splits_ = {reinterpret_cast<const int64_t*>(base_ + c.row_splits_offset), c.row_splits_count};
    v.shape_[0] = static_cast<int64_t>(v.size_);
    v.rank_ = 1;
  } else {
    v.shape_[0] = checked_.rows;
    for (size_t d = 0; d < info.shape.size(); ++d) v.shape_[d + 1] = info.shape[d];
    v.rank_ = info.shape.size() + 1;
  }
  return v;
}

TensorView Batch::feature(std::string_view name) const {
  CheckValid("feature");
  const Schema& schema = attachment_->schema;
  if (auto i = schema.IndexOf(name)) return feature(*i);
  std::string known;
  for (const FeatureInfo& f : schema.features) known += (known.empty() ? "" : ", ") + f.name;
  throw ClientError("job " + schema.job + " has no feature '" + std::string(name) + "'; known features: " + known);
}

shm::RowSource Batch::source(size_t row) const {
  CheckValid("source");
  if (row >= checked_.rows) {
    throw ClientError("row " + std::to_string(row) + " out of range: the batch has " +
                      std::to_string(checked_.rows) + " rows");
  }
  shm::RowSource s;
  std::memcpy(&s, base_ + checked_.sources_offset + row * sizeof(shm::RowSource), sizeof s);
  return s;
}

}  // namespace ringfeed
