// Sequencer + ReadAhead: the order of records and batches (daemon/sequencer.h) on real
// TFRecord files, independent of read-ahead threads and buffer sizes.
#include <catch2/catch.hpp>
#include <set>

#include "daemon/read_ahead.h"
#include "daemon/sequencer.h"
#include "format/tfrecord_writer.h"
#include "shm/ring_layout.h"
#include "tests/test_support.h"

using namespace ringfeed;
using ringfeed::testing::TempDir;

namespace {

// Record j of file i holds "f<i>r<j>".
std::vector<std::string> WriteFiles(const TempDir& dir, const std::vector<int>& counts) {
  std::vector<std::string> files;
  for (size_t i = 0; i < counts.size(); ++i) {
    char name[48];
    std::snprintf(name, sizeof name, "part-%03zu.tfrecord", i);
    files.push_back(dir.file(name));
    TFRecordWriter writer(files.back());
    for (int j = 0; j < counts[i]; ++j) writer.Write("f" + std::to_string(i) + "r" + std::to_string(j));
    writer.Close();
  }
  return files;
}

struct Seen {
  uint64_t epoch, index;
  uint32_t queue, flags;
  std::vector<std::string> records;
  bool operator==(const Seen&) const = default;
};

std::vector<Seen> RunAll(const SequencerOptions& options, size_t readers, uint64_t stream_buffer,
                         Sequencer::Outcome* outcome = nullptr, uint64_t* skipped = nullptr,
                         std::string* failure = nullptr) {
  ReadAhead read_ahead({}, readers, stream_buffer);
  Sequencer sequencer(options, &read_ahead, nullptr);
  std::vector<Seen> seen;
  uint64_t expected_seq = 0;
  const auto result = sequencer.Run([&](BatchJob&& job) {
    REQUIRE(job.seq == expected_seq++);
    Seen s{job.epoch, job.index, job.queue, job.flags, {}};
    for (const OwnedRecord& r : job.records) {
      const std::string text(reinterpret_cast<const char*>(r.data.get()), r.size);
      // Provenance matches the content.
      REQUIRE(text == "f" + std::to_string(r.file_index) + "r" + std::to_string(r.record_index));
      s.records.push_back(text);
    }
    seen.push_back(std::move(s));
    return true;
  });
  if (outcome) *outcome = result;
  if (skipped) *skipped = sequencer.records_skipped();
  if (failure) *failure = sequencer.failure();
  return seen;
}

std::vector<std::string> Flatten(const std::vector<Seen>& batches, uint64_t epoch) {
  std::vector<std::string> out;
  for (const Seen& s : batches) {
    if (s.epoch == epoch) out.insert(out.end(), s.records.begin(), s.records.end());
  }
  return out;
}

}  // namespace

TEST_CASE("interleave takes one record per file in turn; an ended file's place goes to the next file") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {7, 5, 0, 2});
  o.cycle_length = 2;
  o.batch_size = 4;
  const auto batches = RunAll(o, 1, 1 << 20);
  // Positions start with f0, f1. f1 ends after r4: f2 (empty) then f3 take position 1.
  const std::vector<std::string> expected = {"f0r0", "f1r0", "f0r1", "f1r1", "f0r2", "f1r2", "f0r3",
                                             "f1r3", "f0r4", "f1r4", "f0r5", "f3r0", "f0r6", "f3r1"};
  CHECK(Flatten(batches, 0) == expected);
  REQUIRE(batches.size() == 4);
  CHECK(batches[3].records.size() == 2);  // the last, smaller batch is kept
  CHECK(batches[2].flags == 0);
  CHECK(batches[3].flags == (shm::kBatchEndOfEpoch | shm::kBatchEndOfData));
  for (size_t k = 0; k < batches.size(); ++k) CHECK(batches[k].index == k);
}

TEST_CASE("drop_remainder drops the last smaller batch of each epoch") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {7, 5, 0});
  o.batch_size = 5;
  o.drop_remainder = true;
  o.epochs = 2;
  const auto batches = RunAll(o, 2, 1 << 20);
  REQUIRE(batches.size() == 4);  // 12 records -> 2 full batches per epoch
  CHECK(batches[1].flags == shm::kBatchEndOfEpoch);
  CHECK(batches[3].flags == (shm::kBatchEndOfEpoch | shm::kBatchEndOfData));
  CHECK(batches[2].epoch == 1);
  CHECK(batches[2].index == 0);
}

TEST_CASE("the order is the same whatever the read-ahead threads and buffer sizes") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {50, 7, 0, 33, 1, 120, 9, 64});
  o.cycle_length = 3;
  o.batch_size = 16;
  o.shuffle_files = true;
  o.shuffle_buffer = 40;
  o.seed = 1234;
  o.epochs = 3;
  const auto reference = RunAll(o, 1, 1 << 20);
  CHECK(RunAll(o, 4, 1 << 20) == reference);
  CHECK(RunAll(o, 3, 64) == reference);  // tiny buffers: threads hand over after every record
  CHECK(RunAll(o, 8, 1000) == reference);

  // Every record exactly once per epoch, and the epochs differ in order.
  std::multiset<std::string> all;
  for (int f = 0; f < 8; ++f) {
    const int counts[] = {50, 7, 0, 33, 1, 120, 9, 64};
    for (int r = 0; r < counts[f]; ++r) all.insert("f" + std::to_string(f) + "r" + std::to_string(r));
  }
  for (uint64_t e = 0; e < 3; ++e) {
    const auto epoch = Flatten(reference, e);
    CHECK(std::multiset<std::string>(epoch.begin(), epoch.end()) == all);
  }
  CHECK(Flatten(reference, 0) != Flatten(reference, 1));

  // Another seed, another order.
  o.seed = 1235;
  CHECK(Flatten(RunAll(o, 1, 1 << 20), 0) != Flatten(reference, 0));
}

TEST_CASE("ranks mode: batch k goes to queue k mod N, and only whole rounds are delivered") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {7, 5, 0});
  o.batch_size = 2;
  o.queues = 4;
  o.epochs = 2;
  // 12 records -> 6 batches per epoch; one round of 4 is delivered, batches 4 and 5 dropped.
  ReadAhead read_ahead({}, 1, 1 << 20);
  Sequencer sequencer(o, &read_ahead, nullptr);
  std::vector<BatchJob> jobs;
  sequencer.Run([&](BatchJob&& job) {
    jobs.push_back(std::move(job));
    return true;
  });
  REQUIRE(jobs.size() == 8);
  CHECK(sequencer.batches_dropped() == 4);
  for (size_t i = 0; i < jobs.size(); ++i) {
    CHECK(jobs[i].queue == jobs[i].index % 4);
    CHECK(jobs[i].index == i % 4);
    CHECK((jobs[i].flags & shm::kBatchEndOfEpoch) != 0);  // each epoch's one round is its last
    CHECK(((jobs[i].flags & shm::kBatchEndOfData) != 0) == (i >= 4));
  }
}

TEST_CASE("ranks mode holds a round back until the next one is complete") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {20});
  o.batch_size = 2;
  o.queues = 2;
  // 10 batches = 5 rounds: rounds 0-3 carry no flag, round 4 is the end of the epoch.
  const auto batches = RunAll(o, 1, 1 << 20);
  REQUIRE(batches.size() == 10);
  for (size_t k = 0; k < 8; ++k) CHECK(batches[k].flags == 0);
  CHECK(batches[8].flags == (shm::kBatchEndOfEpoch | shm::kBatchEndOfData));
  CHECK(batches[9].flags == (shm::kBatchEndOfEpoch | shm::kBatchEndOfData));
}

TEST_CASE("shards split the files, or the records when there are fewer files than shards") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {3, 4, 5, 6});
  o.batch_size = 100;
  std::multiset<std::string> all, union_of_shards;
  for (int f = 0; f < 4; ++f) {
    for (int r = 0; r < 3 + f; ++r) all.insert("f" + std::to_string(f) + "r" + std::to_string(r));
  }
  SECTION("by file") {
    o.shard_count = 2;
    for (int64_t index = 0; index < 2; ++index) {
      o.shard_index = index;
      for (const std::string& r : Flatten(RunAll(o, 2, 1 << 20), 0)) {
        CHECK((r[1] - '0') % 2 == index);  // file i belongs to shard i % 2
        union_of_shards.insert(r);
      }
    }
  }
  SECTION("by record") {
    o.shard_count = 5;  // more shards than files
    for (int64_t index = 0; index < 5; ++index) {
      o.shard_index = index;
      for (const std::string& r : Flatten(RunAll(o, 2, 1 << 20), 0)) {
        CHECK(std::stoi(r.substr(r.find('r') + 1)) % 5 == index);
        union_of_shards.insert(r);
      }
    }
  }
  CHECK(union_of_shards == all);  // each record exactly once across the shards
}

TEST_CASE("read errors: on_error fail names the file; skip counts and goes on") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {4, 3});
  // Corrupt the payload of record 1 of file 1: record 0 ("f1r0") takes 12 + 4 + 4 bytes, so
  // record 1's payload starts at 20 + 12.
  std::string bytes = testing::ReadFile(o.files[1]);
  bytes[32] ^= 0x20;
  testing::WriteFile(o.files[1], bytes);
  o.batch_size = 100;

  Sequencer::Outcome outcome;
  uint64_t skipped = 0;
  std::string failure;
  const auto before_error = RunAll(o, 1, 1 << 20, &outcome, &skipped, &failure);
  CHECK(outcome == Sequencer::Outcome::kFailed);
  // Everything read before the error is still delivered (the last batch smaller).
  CHECK(Flatten(before_error, 0) == std::vector<std::string>{"f0r0", "f1r0", "f0r1"});
  CHECK_THAT(failure, Catch::Contains("part-001.tfrecord") && Catch::Contains("record 1"));

  o.skip_errors = true;
  const auto batches = RunAll(o, 1, 1 << 20, &outcome, &skipped, &failure);
  CHECK(outcome == Sequencer::Outcome::kEndOfData);
  CHECK(skipped == 1);
  // The skipped record takes no turn: file 1's next record comes in its place.
  CHECK(Flatten(batches, 0) == std::vector<std::string>{"f0r0", "f1r0", "f0r1", "f1r2", "f0r2", "f0r3"});
}

TEST_CASE("epochs: 0 runs until stopped; a dataset without records ends instead of spinning") {
  TempDir dir;
  SequencerOptions o;
  o.files = WriteFiles(dir, {3});
  o.batch_size = 2;
  o.epochs = 0;
  ReadAhead read_ahead({}, 1, 1 << 20);
  Sequencer sequencer(o, &read_ahead, nullptr);
  int emitted = 0;
  CHECK(sequencer.Run([&](BatchJob&&) { return ++emitted < 25; }) == Sequencer::Outcome::kStopped);
  CHECK(emitted == 25);

  o.files = WriteFiles(dir, {0});
  Sequencer empty(o, &read_ahead, nullptr);
  CHECK(empty.Run([&](BatchJob&&) { return true; }) == Sequencer::Outcome::kEndOfData);
}
