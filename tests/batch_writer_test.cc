// BatchWriter on a real shared-memory segment: batches parsed straight into slots, the planned
// layout (no sizing pass) and its fallback when a batch outgrows it, the "slot too small" error,
// and on_error: skip inside a batch. Every slot is read back through the client's own checks
// (shm::ValidateBatch) and compared value by value.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/batch_writer.h"
#include "daemon/ring_setup.h"
#include "format/example_builder.h"
#include "shm/batch_check.h"
#include "shm/ring.h"
#include "shm/segment.h"

using namespace ringfeed;

namespace {

FeatureSpecs Specs() {
  FeatureSpecs specs(3);
  specs[0].name = "words";
  specs[0].type = FeatureType::kVarLen;
  specs[0].dtype = DType::kBytes;
  specs[1].name = "ids";
  specs[1].type = FeatureType::kVarLen;
  specs[1].dtype = DType::kInt64;
  specs[2].name = "score";
  specs[2].dtype = DType::kFloat32;
  return specs;
}

// Record r: `words` = r copies of a string of `len` bytes, `ids` = {r, r+1, ..., 2r-1}, score r/2.
OwnedRecord MakeRecord(uint64_t r, size_t len) {
  std::vector<std::string> words(r, std::string(len, static_cast<char>('a' + r % 26)));
  std::vector<std::string_view> views(words.begin(), words.end());
  std::vector<int64_t> ids;
  for (uint64_t k = 0; k < r; ++k) ids.push_back(static_cast<int64_t>(r + k));
  ExampleBuilder b;
  b.AddBytes("words", views).AddInt64("ids", ids).AddFloat("score", {static_cast<float>(r) / 2});
  const std::string bytes = b.Serialize();
  return OwnedRecord::Copy({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, 3, r, 100 * r);
}

BatchJob Job(uint64_t index, std::vector<uint64_t> records, size_t len) {
  BatchJob job;
  job.index = index;
  for (uint64_t r : records) job.records.push_back(MakeRecord(r, len));
  return job;
}

struct Ring {
  explicit Ring(uint64_t slot_bytes, const FeatureSpecs& specs) {
    name = "/ringfeed-test-batch-writer-" + std::to_string(::getpid());
    RingSetup setup;
    setup.job = "batch-writer-test";
    setup.slot_count = 2;
    setup.slot_bytes = slot_bytes;
    setup.geometry = shm::ComputeGeometry(setup.slot_count, slot_bytes);
    setup.batch_size = 16;
    segment = shm::Segment::Create(name, setup.geometry.segment_bytes);
    WriteSuperblock(setup, specs, segment.superblock());
    view = DaemonRing(setup, segment.data());
  }
  ~Ring() { shm::Segment::Remove(name); }
  std::string name;
  shm::Segment segment;
  shm::Ring view;  // the daemon's own geometry
};

// Reads slot `slot` back and checks it holds `records` (made with string length `len`).
void CheckSlot(const Ring& ring, uint32_t slot, const std::vector<uint64_t>& records, size_t len) {
  std::string error;
  REQUIRE(shm::ValidateBatch(*ring.segment.superblock(), ring.view.slot(slot), &error));
  INFO(error);
  const uint8_t* base = ring.view.slot(slot);
  const auto* header = reinterpret_cast<const shm::SlotHeader*>(base);
  REQUIRE(header->rows == records.size());
  const auto* columns = reinterpret_cast<const shm::ColumnDesc*>(base + header->columns_offset);
  const auto* sources = reinterpret_cast<const shm::RowSource*>(base + header->sources_offset);
  const auto* words = reinterpret_cast<const char*>(base + columns[0].values_offset);
  const auto* word_offsets = reinterpret_cast<const int64_t*>(base + columns[0].value_offsets_offset);
  const auto* word_splits = reinterpret_cast<const int64_t*>(base + columns[0].row_splits_offset);
  const auto* ids = reinterpret_cast<const int64_t*>(base + columns[1].values_offset);
  const auto* id_splits = reinterpret_cast<const int64_t*>(base + columns[1].row_splits_offset);
  const auto* scores = reinterpret_cast<const float*>(base + columns[2].values_offset);
  for (size_t row = 0; row < records.size(); ++row) {
    const uint64_t r = records[row];
    CHECK(sources[row].file_index == 3);
    CHECK(sources[row].record_index == r);
    CHECK(scores[row] == static_cast<float>(r) / 2);
    REQUIRE(word_splits[row + 1] - word_splits[row] == static_cast<int64_t>(r));
    for (int64_t s = word_splits[row]; s < word_splits[row + 1]; ++s) {
      CHECK(std::string(words + word_offsets[s], words + word_offsets[s + 1]) ==
            std::string(len, static_cast<char>('a' + r % 26)));
    }
    REQUIRE(id_splits[row + 1] - id_splits[row] == static_cast<int64_t>(r));
    for (int64_t k = 0; k < static_cast<int64_t>(r); ++k) CHECK(ids[id_splits[row] + k] == static_cast<int64_t>(r) + k);
  }
}

}  // namespace

TEST_CASE("batches are parsed straight into the slot; a batch that outgrows the planned layout is measured") {
  const FeatureSpecs specs = Specs();
  ExampleParser parser(specs);
  Ring ring(1 << 20, specs);
  BatchWriter writer(parser, ring.view);
  const std::vector<std::string> files = {"a", "b", "c", "part-3"};

  // First batch: measured. Second, similar: fits the plan. Third: strings 500x longer and many
  // more of them: does not fit the plan, measured again, still exact.
  const std::vector<uint64_t> small = {1, 2, 3, 4, 5, 6, 7, 8};
  auto r1 = writer.Write(Job(0, small, 2), 0, false, files);
  REQUIRE(r1.error.empty());
  CHECK(r1.rows == 8);
  CheckSlot(ring, 0, small, 2);
  auto r2 = writer.Write(Job(1, small, 3), 1, false, files);
  REQUIRE(r2.error.empty());
  CheckSlot(ring, 1, small, 3);
  CHECK(writer.remeasured() == 0);

  const std::vector<uint64_t> big = {30, 31, 29, 40, 1, 0, 12, 33, 35, 2};
  auto r3 = writer.Write(Job(2, big, 1000), 0, false, files);
  REQUIRE(r3.error.empty());
  CHECK(r3.rows == big.size());
  CheckSlot(ring, 0, big, 1000);
  CHECK(writer.remeasured() == 1);

  // Back to small: the plan shares the room by the big batch's proportions and fits.
  auto r4 = writer.Write(Job(3, small, 2), 1, false, files);
  REQUIRE(r4.error.empty());
  CheckSlot(ring, 1, small, 2);
  CHECK(writer.remeasured() == 1);
}

TEST_CASE("a batch larger than a slot is an error naming the bytes needed and ring.slot_bytes") {
  const FeatureSpecs specs = Specs();
  ExampleParser parser(specs);
  Ring ring(64 << 10, specs);
  BatchWriter writer(parser, ring.view);
  const std::vector<std::string> four_files = {"a", "b", "c", "d"};
  auto r = writer.Write(Job(7, {40, 50}, 4000), 0, false, four_files);
  CHECK(r.rows == 0);
  CHECK_THAT(r.error, Catch::Contains("batch 7 of epoch 0 needs") && Catch::Contains("ring.slot_bytes") &&
                          Catch::Contains("'words'"));
}

TEST_CASE("on_error: skip drops a bad record from its batch and names it; fail stops the batch") {
  const FeatureSpecs specs = Specs();
  ExampleParser parser(specs);
  Ring ring(1 << 20, specs);
  BatchWriter writer(parser, ring.view);
  BatchJob job = Job(0, {1, 2, 3}, 4);
  // Record 2 gets a float `ids` list: a type mismatch.
  const std::string bad = ExampleBuilder().AddFloat("ids", {1.5f}).AddFloat("score", {1}).Serialize();
  job.records[1] = OwnedRecord::Copy({reinterpret_cast<const uint8_t*>(bad.data()), bad.size()},
                                     job.records[1].file_index, job.records[1].record_index, job.records[1].offset);
  const std::vector<std::string> files = {"a", "b", "c", "part-3"};

  auto skipped = writer.Write(job, 0, true, files);
  CHECK(skipped.error.empty());
  CHECK(skipped.rows == 2);
  REQUIRE(skipped.skipped.size() == 1);
  CHECK_THAT(skipped.skipped[0], Catch::StartsWith("part-3: record 2 at byte 200: key 'ids'"));
  CheckSlot(ring, 0, {1, 3}, 4);

  auto failed = writer.Write(job, 1, false, files);
  CHECK_THAT(failed.error, Catch::StartsWith("part-3: record 2 at byte 200: key 'ids'"));

  // A GZIP file's offsets are in its uncompressed stream, and the message says so (as the
  // reader's own errors do); files not read compressed keep the plain form.
  const JobFiles gzip_part3(files, [](uint32_t i) { return i == 3 ? Compression::kGzip : Compression::kNone; });
  auto failed_gzip = writer.Write(job, 1, false, gzip_part3);
  CHECK_THAT(failed_gzip.error,
             Catch::StartsWith("part-3: record 2 at byte 200 of the uncompressed stream (gzip): key 'ids'"));
  const JobFiles gzip_other(files, [](uint32_t i) { return i == 0 ? Compression::kZlib : Compression::kNone; });
  CHECK_THAT(writer.Write(job, 1, false, gzip_other).error, Catch::StartsWith("part-3: record 2 at byte 200: key"));
}
