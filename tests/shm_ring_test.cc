// shm/: geometry and alignment, runtime directory and names, CheckSuperblock, ValidateBatch
// against a table of corrupt slots, futex wait/wake across processes.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "shm/futex.h"
#include "shm/names.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "tests/ring_test_producer.h"
#include "tests/test_support.h"

namespace ringfeed {
namespace {

using shm::ColumnDesc;
using shm::SlotHeader;
using shm::Superblock;
using testing::ProducerOptions;
using testing::RingTestProducer;
using testing::TempDir;

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1); else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

ProducerOptions Options(const TempDir& dir, const std::string& job = "ringtest") {
  ProducerOptions o;
  o.runtime_dir = dir.path().string();
  o.job = job;
  return o;
}

TEST_CASE("geometry: page-aligned slots, 64-byte slot header") {
  STATIC_REQUIRE(sizeof(SlotHeader) == 64);
  STATIC_REQUIRE(sizeof(Superblock) % shm::kPageBytes == 0);
  STATIC_REQUIRE(sizeof(ColumnDesc) == 48);
  STATIC_REQUIRE(sizeof(shm::RowSource) == 16);

  const shm::Geometry g = shm::ComputeGeometry(8, 65536);
  CHECK(g.slots_offset == sizeof(Superblock));
  CHECK(g.slots_offset % 4096 == 0);
  CHECK(g.slot_stride == 65536);
  CHECK(g.segment_bytes == sizeof(Superblock) + 8 * 65536);

  const shm::Geometry odd = shm::ComputeGeometry(3, 5000);
  CHECK(odd.slot_stride == 8192);
  CHECK(odd.segment_bytes == odd.slots_offset + 3 * 8192);

  CHECK_THROWS_WITH(shm::ComputeGeometry(0, 65536), Catch::Contains("ring.slots is 0"));
  CHECK_THROWS_WITH(shm::ComputeGeometry(257, 65536), Catch::Contains("1..256"));
  CHECK_THROWS_WITH(shm::ComputeGeometry(4, 10), Catch::Contains("at least 64 bytes"));
  CHECK_THROWS_AS(shm::ComputeGeometry(4, uint64_t{1} << 60), shm::ShmError);

  TempDir dir;
  RingTestProducer producer(Options(dir));
  const auto& ring = producer.ring();
  CHECK(reinterpret_cast<uintptr_t>(producer.segment().data()) % 4096 == 0);
  for (uint32_t i = 0; i < ring.slot_count; ++i) {
    CHECK(reinterpret_cast<uintptr_t>(ring.slot(i)) % 4096 == 0);
    CHECK(ring.slot(i) == producer.segment().data() + ring.slots_offset + uint64_t{i} * ring.slot_stride);
  }
  CHECK(producer.segment().size() == ring.slots_offset + ring.slot_count * ring.slot_stride);
}

TEST_CASE("names: runtime directory precedence, socket path, segment name") {
  {
    ScopedEnv a("RINGFEED_RUNTIME_DIR", "/srv/rf");
    ScopedEnv b("RUNTIME_DIRECTORY", "/run/ringfeed-x:/run/other");
    CHECK(shm::RuntimeDir() == "/srv/rf");
  }
  {
    ScopedEnv a("RINGFEED_RUNTIME_DIR", nullptr);
    ScopedEnv b("RUNTIME_DIRECTORY", "/run/ringfeed-x:/run/other");
    CHECK(shm::RuntimeDir() == "/run/ringfeed-x");
  }
  {
    ScopedEnv a("RINGFEED_RUNTIME_DIR", "");
    ScopedEnv b("RUNTIME_DIRECTORY", nullptr);
    ScopedEnv c("XDG_RUNTIME_DIR", "/run/user/1000");
    CHECK(shm::RuntimeDir() == (geteuid() == 0 ? "/run/ringfeed" : "/run/user/1000/ringfeed"));
  }
  if (geteuid() == 0) {
    // The non-root branches, in a child that drops to nobody (65534).
    int* results = static_cast<int*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    REQUIRE(results != MAP_FAILED);
    auto child = testing::ForkChild([&] {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
      unsetenv("RINGFEED_RUNTIME_DIR");
      unsetenv("RUNTIME_DIRECTORY");
      setenv("XDG_RUNTIME_DIR", "/run/user/65534", 1);
      results[0] = shm::RuntimeDir() == "/run/user/65534/ringfeed";
      unsetenv("XDG_RUNTIME_DIR");
      results[1] = shm::RuntimeDir() == "/tmp/ringfeed-65534";
    });
    const int status = child.Wait();
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(results[0] == 1);
    CHECK(results[1] == 1);
    munmap(results, 4096);
  }

  CHECK(shm::SocketPath("/run/ringfeed", "train") == "/run/ringfeed/train.sock");
  // FNV-1a 64 test vectors (the reference implementation's).
  CHECK(shm::Fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(shm::Fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(shm::Fnv1a64("foobar") == 0x85944171f73967e8ull);
  // A directory that does not exist: the hash of its normalized absolute path.
  const std::string name = shm::SegmentName("/nonexistent/./ringfeed", "train");
  CHECK(name.rfind("/ringfeed.train.", 0) == 0);
  REQUIRE(name.size() == std::string("/ringfeed.train.").size() + 16);
  char expected[17];
  std::snprintf(expected, sizeof expected, "%016llx",
                static_cast<unsigned long long>(shm::Fnv1a64("/nonexistent/ringfeed")));
  CHECK(name.substr(name.size() - 16) == expected);
  CHECK(shm::SegmentName("/nonexistent/ringfeed", "train") != shm::SegmentName("/nonexistent/ringfeed-0", "train"));
  CHECK(shm::SegmentName("/nonexistent/ringfeed", "train") != shm::SegmentName("/nonexistent/ringfeed", "eval"));

  // The same relative name in two working directories names two directories, two segments;
  // one directory by a relative, an absolute and a symlinked path is one segment.
  testing::TempDir a, b;
  std::filesystem::create_directory(a.path() / "run");
  std::filesystem::create_directory(b.path() / "run");
  std::filesystem::create_directory_symlink(a.path() / "run", b.path() / "link");
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(a.path());
  const std::string in_a = shm::SegmentName("run", "train");
  std::filesystem::current_path(b.path());
  const std::string in_b = shm::SegmentName("run", "train");
  const std::string via_link = shm::SegmentName("link", "train");
  std::filesystem::current_path(cwd);
  CHECK(in_a != in_b);
  CHECK(in_a == shm::SegmentName((a.path() / "run").string(), "train"));
  CHECK(in_a == via_link);
  // Recreated (a new inode, as systemd recreates a unit's RuntimeDirectory at a restart): the
  // same name, so a restarted daemon replaces the segment a crashed one left.
  std::filesystem::remove(a.path() / "run");
  std::filesystem::create_directory(a.path() / "run");
  CHECK(shm::SegmentName((a.path() / "run").string(), "train") == in_a);
}

// A private copy of a superblock to corrupt.
struct SuperblockCopy {
  explicit SuperblockCopy(const void* from)
      : bytes(static_cast<uint8_t*>(::operator new(sizeof(Superblock), std::align_val_t(4096)))) {
    std::memcpy(bytes, from, sizeof(Superblock));
  }
  ~SuperblockCopy() { ::operator delete(bytes, std::align_val_t(4096)); }
  Superblock& sb() { return *reinterpret_cast<Superblock*>(bytes); }
  uint8_t* bytes;
};

TEST_CASE("CheckSuperblock names what differs, with both values") {
  TempDir dir;
  RingTestProducer producer(Options(dir));
  const uint64_t size = producer.segment().size();
  CHECK(shm::CheckSuperblock(producer.segment().data(), size) == "");

  struct Case {
    const char* what;
    std::function<void(Superblock&)> corrupt;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"magic", [](Superblock& sb) { sb.magic[0] = 'X'; }, {"magic 'XINGFEED' in the segment, expected 'RINGFEED'"}},
      {"version", [](Superblock& sb) { sb.layout_version = 2; },
       {"layout version 2 in the segment, this client speaks 1: rebuild the trainer against the daemon's ringfeed version"}},
      {"superblock size", [](Superblock& sb) { sb.superblock_bytes = 4096; }, {"superblock size 4096 in the segment"}},
      {"hash", [](Superblock& sb) { sb.layout_hash ^= 1; }, {"layout hash 0x", "in the segment, this client has 0x"}},
      {"segment size", [size](Superblock& sb) { sb.segment_bytes = size + 4096; },
       {"segment size " + std::to_string(size + 4096) + " bytes in the superblock, but only " + std::to_string(size)}},
      {"not ready", [](Superblock& sb) { sb.ready.store(0); }, {"not ready"}},
      {"not ready, empty", [](Superblock& sb) { std::memset(static_cast<void*>(&sb), 0, sizeof sb); }, {"not ready"}},
      {"slot count", [](Superblock& sb) { sb.slot_count = 300; }, {"slot_count 300 is outside 1..256"}},
      {"slots past the end", [](Superblock& sb) { sb.slot_stride *= 2; }, {"do not fit in the segment"}},
      {"slot stride unaligned", [](Superblock& sb) { sb.slot_stride += 8; }, {"not a multiple of 4096"}},
      {"slot bytes > stride", [](Superblock& sb) { sb.slot_bytes = sb.slot_stride + 1; }, {"slot_bytes"}},
      {"slots over superblock", [](Superblock& sb) { sb.slots_offset = 0; }, {"overlaps the superblock"}},
      {"stride overflow", [](Superblock& sb) { sb.slot_stride = uint64_t{1} << 62; sb.slot_count = 8; }, {"do not fit"}},
      {"queues", [](Superblock& sb) { sb.mode = 1; sb.queue_count = 65; }, {"queue_count 65 is outside 1..64"}},
      {"shared mode queues", [](Superblock& sb) { sb.queue_count = 2; }, {"queue_count 2 in shared mode"}},
      {"mode", [](Superblock& sb) { sb.mode = 7; }, {"unknown delivery mode 7"}},
      {"batch size", [](Superblock& sb) { sb.batch_size = 0; }, {"batch_size is 0"}},
      {"feature count", [](Superblock& sb) { sb.feature_count = 300; }, {"feature_count 300 exceeds the maximum 256"}},
      {"name", [](Superblock& sb) { std::memset(sb.features[1].name, 'x', shm::kMaxNameBytes); },
       {"feature 1: name is not NUL-terminated"}},
      {"empty name", [](Superblock& sb) { sb.features[2].name[0] = '\0'; }, {"feature 2: empty name"}},
      {"rank", [](Superblock& sb) { sb.features[3].rank = 9; }, {"feature 3 'pixels': rank 9 exceeds the maximum 8"}},
      {"dtype", [](Superblock& sb) { sb.features[0].dtype = 42; }, {"feature 0 'label': unknown dtype 42"}},
      {"type", [](Superblock& sb) { sb.features[0].type = 5; }, {"unknown type 5"}},
      {"negative dim", [](Superblock& sb) { sb.features[3].shape[1] = -3; }, {"shape[1] = -3 < 0"}},
      {"job", [](Superblock& sb) { std::memset(sb.job, 'j', shm::kJobNameBytes); }, {"job name is not NUL-terminated"}},
      {"state", [](Superblock& sb) { sb.state.store(9); }, {"unknown daemon state 9"}},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      SuperblockCopy copy(producer.segment().data());
      c.corrupt(copy.sb());
      const std::string error = shm::CheckSuperblock(copy.bytes, size);
      INFO(error);
      for (const std::string& e : c.expected) CHECK_THAT(error, Catch::Contains(e));
    }
  }
  SECTION("mapping smaller than a superblock") {
    CHECK_THAT(shm::CheckSuperblock(producer.segment().data(), 100),
               Catch::Contains("segment is 100 bytes, smaller than a superblock"));
  }
}

TEST_CASE("ValidateBatch accepts well-formed batches") {
  TempDir dir;
  RingTestProducer producer(Options(dir));
  const Superblock& sb = *producer.ring().sb;
  uint8_t* slot = producer.ring().slot(0);
  std::string error;
  for (uint32_t rows : {4u, 3u, 1u, 0u}) {
    producer.WriteBatch(slot, 0, 7, 1, 0, rows);
    CHECK(shm::ValidateBatch(sb, slot, &error));
    INFO(error);
  }
  shm::CheckedBatch batch;
  producer.WriteBatch(slot, 0, 7, 2, shm::kBatchEndOfEpoch, 4);
  const std::vector<shm::FeatureDesc> features(sb.features, sb.features + sb.feature_count);
  REQUIRE(shm::ReadBatch(slot, sb.slot_bytes, sb.batch_size, features, &batch, &error));
  CHECK(batch.epoch == 2);
  CHECK(batch.batch_index == 7);
  CHECK(batch.rows == 4);
  CHECK(batch.flags == shm::kBatchEndOfEpoch);
  REQUIRE(batch.column_count == 4);
  CHECK(batch.column_span().size() == 4);
  const auto* table = reinterpret_cast<const ColumnDesc*>(slot + reinterpret_cast<const SlotHeader*>(slot)->columns_offset);
  CHECK(std::memcmp(batch.columns, table, 4 * sizeof(ColumnDesc)) == 0);

  // A copy carries the used part of the table.
  shm::CheckedBatch copy;
  copy = batch;
  CHECK(copy.rows == 4);
  CHECK(copy.column_count == 4);
  CHECK(std::memcmp(copy.columns, batch.columns, 4 * sizeof(ColumnDesc)) == 0);
  const shm::CheckedBatch copied(batch);
  CHECK(copied.epoch == 2);
  CHECK(copied.columns[3].values_bytes == batch.columns[3].values_bytes);

  // More features than a slot can describe.
  std::vector<shm::FeatureDesc> many(shm::kMaxFeatures + 1, features[0]);
  CHECK_FALSE(shm::ReadBatch(slot, sb.slot_bytes, sb.batch_size, many, &batch, &error));
  CHECK_THAT(error, Catch::Contains("257 features, more than the maximum 256"));
}

// The offset checks look at every entry (eight at a time, in a loop with a scalar tail): a bad
// value at any position of arrays of every length from 1 to 33 entries is found and named, by
// ValidateBatch and by CheckColumnOffsets of that column (ReadBatch alone does not look).
TEST_CASE("CheckColumnOffsets checks every row_splits and value_offsets entry, at every length") {
  TempDir dir;
  ProducerOptions o = Options(dir);
  o.batch_size = 16;
  RingTestProducer producer(o);
  const Superblock& sb = *producer.ring().sb;
  uint8_t* slot = producer.ring().slot(0);
  auto column = [&](int i) {
    return reinterpret_cast<ColumnDesc*>(slot + reinterpret_cast<SlotHeader*>(slot)->columns_offset) + i;
  };
  const std::vector<shm::FeatureDesc> features(sb.features, sb.features + sb.feature_count);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  size_t checked = 0;
  for (uint32_t rows = 0; rows <= 16; ++rows) {
    // weights: row_splits (rows + 1 entries); key: value_offsets (2 * rows + 1 entries).
    for (auto [index, field] : {std::pair{1, "row_splits"}, std::pair{2, "value_offsets"}}) {
      producer.WriteBatch(slot, 0, 1, 0, 0, rows);
      std::string error;
      REQUIRE(shm::ValidateBatch(sb, slot, &error));
      const ColumnDesc c = *column(index);
      const uint64_t offset = index == 1 ? c.row_splits_offset : c.value_offsets_offset;
      const uint64_t count = index == 1 ? c.row_splits_count : c.value_offsets_count;
      auto* entries = reinterpret_cast<int64_t*>(slot + offset);
      for (uint64_t i = 0; i < count; ++i) {
        const int64_t good = entries[i];
        std::vector<int64_t> bad = {-1, kMin, kMin + 1};
        if (i + 1 == count) bad.push_back(good + 1);  // the last entry must be the size
        if (i > 0 && entries[i - 1] > 0) bad.push_back(entries[i - 1] - 1);
        if (i + 1 < count) bad.push_back(kMax);  // then the next entry is smaller
        for (int64_t v : bad) {
          if (v == good) continue;
          entries[i] = v;
          INFO(field << " rows " << rows << " entry " << i << " = " << v);
          CHECK_FALSE(shm::ValidateBatch(sb, slot, &error));
          CHECK_THAT(error, Catch::Contains(std::string(field) + "["));
          shm::CheckedBatch batch;
          REQUIRE(shm::ReadBatch(slot, sb.slot_bytes, sb.batch_size, features, &batch, &error));
          CHECK_FALSE(shm::CheckColumnOffsets(slot, features[index], batch.columns[index], &error));
          CHECK_THAT(error, Catch::Contains(std::string(field) + "["));
          ++checked;
        }
        entries[i] = good;
      }
      REQUIRE(shm::ValidateBatch(sb, slot, &error));
    }
  }
  CHECK(checked > 1000);
}

// Whatever a writer scribbles over the header, the column table and the offset arrays,
// ReadBatch either names a problem or accepts only regions inside the slot, and
// CheckColumnOffsets then either names a problem or accepts only offset arrays that start at
// 0, never decrease and end at the region's size (checked here by a plain reimplementation of
// the rules).
TEST_CASE("ReadBatch and CheckColumnOffsets on randomly corrupted slots: what they accept is inside the slot") {
  TempDir dir;
  ProducerOptions o = Options(dir);
  o.batch_size = 16;
  RingTestProducer producer(o);
  const Superblock& sb = *producer.ring().sb;
  const uint64_t slot_bytes = sb.slot_bytes;
  uint8_t* slot = producer.ring().slot(0);
  const std::vector<shm::FeatureDesc> features(sb.features, sb.features + sb.feature_count);

  auto offsets_ok = [&](uint64_t offset, uint64_t count, uint64_t last) {
    if (count == 0 || offset > slot_bytes || count > (slot_bytes - offset) / 8) return false;
    const auto* e = reinterpret_cast<const int64_t*>(slot + offset);
    if (e[0] != 0) return false;
    for (uint64_t i = 1; i < count; ++i) {
      if (e[i] < e[i - 1]) return false;
    }
    return static_cast<uint64_t>(e[count - 1]) == last;
  };
  auto inside = [&](uint64_t offset, uint64_t bytes) {
    return offset <= slot_bytes && bytes <= slot_bytes - offset && offset % shm::kColumnAlign == 0 &&
           (bytes == 0 || offset >= sizeof(SlotHeader));
  };
  // The rules for the test schema: label fixed int64, weights varlen float32, key fixed bytes
  // [2], pixels fixed uint8 [2, 3].
  auto shape_valid = [&](const shm::CheckedBatch& b) {
    const uint64_t rows = b.rows;
    if (rows > sb.batch_size || b.column_count != 4) return false;
    if (b.sources_offset < sizeof(SlotHeader) || b.sources_offset > slot_bytes ||
        rows * sizeof(shm::RowSource) > slot_bytes - b.sources_offset) {
      return false;
    }
    const ColumnDesc* c = b.columns;
    for (int i = 0; i < 4; ++i) {
      if (!inside(c[i].values_offset, c[i].values_bytes)) return false;
    }
    return c[0].values_bytes == rows * 8 && c[0].row_splits_count == 0 && c[0].value_offsets_count == 0 &&
           c[1].value_offsets_count == 0 && c[1].row_splits_count == rows + 1 && c[1].values_bytes % 4 == 0 &&
           inside(c[1].row_splits_offset, c[1].row_splits_count * 8) &&
           c[2].row_splits_count == 0 && c[2].value_offsets_count == 2 * rows + 1 &&
           inside(c[2].value_offsets_offset, c[2].value_offsets_count * 8) &&
           c[3].values_bytes == rows * 6 && c[3].row_splits_count == 0 && c[3].value_offsets_count == 0;
  };
  auto offsets_valid = [&](const shm::CheckedBatch& b) {  // for a batch with a valid shape
    const ColumnDesc* c = b.columns;
    return offsets_ok(c[1].row_splits_offset, c[1].row_splits_count, c[1].values_bytes / 4) &&
           offsets_ok(c[2].value_offsets_offset, c[2].value_offsets_count, c[2].values_bytes);
  };

  std::mt19937_64 random(20240611);  // fixed seed: the same corruptions every run
  const int64_t interesting[] = {0, 1, -1, 2, 4, 6, 7, 8, 63, 64, 65, 4096,
                                 static_cast<int64_t>(slot_bytes), static_cast<int64_t>(slot_bytes) - 64,
                                 std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                 int64_t{1} << 61, (int64_t{1} << 61) + 9, int64_t{1} << 62};
  size_t accepted = 0, rejected = 0, rejected_offsets = 0;
  for (int round = 0; round < 20000; ++round) {
    producer.WriteBatch(slot, 0, 1, 0, 0, static_cast<uint32_t>(random() % 17));
    const auto* header = reinterpret_cast<const SlotHeader*>(slot);
    const uint64_t end = header->used_bytes;
    // 1 to 3 eight-byte words anywhere in the used part of the slot (header, table, row
    // sources, values, offset arrays), each set to an interesting value, a near neighbour of
    // its old value, or random bits.
    const int words = 1 + static_cast<int>(random() % 3);
    for (int w = 0; w < words; ++w) {
      const uint64_t at = (random() % (end / 8)) * 8;
      int64_t value;
      std::memcpy(&value, slot + at, 8);
      switch (random() % 3) {
        case 0: value = interesting[random() % std::size(interesting)]; break;
        case 1:  // wraps instead of overflowing (signed overflow is undefined)
          value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(random() % 5) - 2);
          break;
        default: value = static_cast<int64_t>(random()); break;
      }
      std::memcpy(slot + at, &value, 8);
    }
    shm::CheckedBatch batch;
    std::string error;
    auto no_reason = [&] { return error.empty() || error.find("changed while") != std::string::npos; };
    if (!shm::ReadBatch(slot, slot_bytes, sb.batch_size, features, &batch, &error)) {
      ++rejected;
      if (no_reason()) FAIL("round " << round << ": no reason given: '" << error << "'");
      continue;
    }
    if (!shape_valid(batch)) FAIL("accepted an invalid batch in round " << round);
    bool offsets_accepted = true;
    for (size_t i = 0; i < features.size() && offsets_accepted; ++i) {
      offsets_accepted = shm::CheckColumnOffsets(slot, features[i], batch.columns[i], &error);
    }
    if (offsets_accepted) {
      ++accepted;
      if (!offsets_valid(batch)) FAIL("accepted invalid offset arrays in round " << round);
    } else {
      ++rejected_offsets;
      if (no_reason()) FAIL("round " << round << ": no reason given: '" << error << "'");
    }
  }
  CHECK(accepted > 1000);
  CHECK(rejected > 1000);
  CHECK(rejected_offsets > 100);
}

TEST_CASE("ValidateBatch rejects every out-of-bounds or inconsistent slot") {
  TempDir dir;
  RingTestProducer producer(Options(dir));
  const Superblock& sb = *producer.ring().sb;
  uint8_t* slot = producer.ring().slot(0);
  const uint64_t slot_bytes = sb.slot_bytes;
  auto header = [&] { return reinterpret_cast<SlotHeader*>(slot); };
  auto column = [&](int i) { return reinterpret_cast<ColumnDesc*>(slot + header()->columns_offset) + i; };
  auto i64 = [&](uint64_t offset, uint64_t index) { return reinterpret_cast<int64_t*>(slot + offset) + index; };
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

  struct Case {
    const char* what;
    std::function<void()> corrupt;
    std::string expected;
  };
  // Batch number 1 of 4 rows: g = 4..7, weights have 0,1,2,3 values (6 in all), key 8 strings.
  const std::vector<Case> cases = {
      {"rows > batch_size", [&] { header()->rows = 5; }, "rows 5 exceeds batch_size 4"},
      {"used_bytes", [&] { header()->used_bytes = slot_bytes + 1; }, "used_bytes"},
      {"column table past the end", [&] { header()->columns_offset = slot_bytes - 64; }, "column table at offset"},
      {"column table overflow", [&] { header()->columns_offset = kMax - 7; }, "column table at offset"},
      {"column table in the header", [&] { header()->columns_offset = 0; }, "column table at offset 0"},
      {"column table unaligned", [&] { header()->columns_offset += 4; }, "column table"},
      {"row sources overflow", [&] { header()->sources_offset = kMax - 15; }, "row sources at offset"},
      {"row sources past the end", [&] { header()->sources_offset = slot_bytes - 32; }, "row sources"},
      {"values unaligned", [&] { column(0)->values_offset += 8; }, "feature 'label' (fixed int64): values offset"},
      {"values past the end", [&] { column(0)->values_offset = slot_bytes; }, "runs past the slot's"},
      {"values offset overflow", [&] { column(0)->values_offset = kMax & ~uint64_t{63}; }, "runs past the slot's"},
      {"values bytes overflow", [&] { column(3)->values_bytes = kMax; }, "runs past"},
      {"values in the header", [&] { column(0)->values_offset = 0; }, "overlaps the slot header"},
      {"fixed size", [&] { column(0)->values_bytes -= 8; }, "values_bytes 24, must be rows 4 x 1 values x 8 bytes"},
      {"fixed with row_splits", [&] { column(0)->row_splits_count = 5; }, "row_splits_count 5 for a fixed column"},
      {"numeric with value_offsets", [&] { column(1)->value_offsets_count = 2; }, "value_offsets_count 2 for a numeric"},
      {"row_splits count", [&] { column(1)->row_splits_count = 4; }, "row_splits_count 4, must be rows + 1 = 5"},
      {"row_splits count overflow", [&] { column(1)->row_splits_count = uint64_t{1} << 61; }, "overflows"},
      {"row_splits region", [&] { column(1)->row_splits_offset = slot_bytes; }, "row_splits ["},
      {"row_splits[0]", [&] { *i64(column(1)->row_splits_offset, 0) = 1; }, "row_splits[0] = 1, must be 0"},
      {"row_splits decreasing", [&] { *i64(column(1)->row_splits_offset, 2) = -1; }, "row_splits[2] = -1 < row_splits[1] = 0"},
      {"row_splits huge", [&] { *i64(column(1)->row_splits_offset, 3) = INT64_MAX; }, "row_splits[4] = 6 < row_splits[3]"},
      {"row_splits last", [&] { *i64(column(1)->row_splits_offset, 4) = 7; }, "row_splits[4] = 7, must be 6"},
      {"varlen values size", [&] { column(1)->values_bytes = 23; }, "values_bytes 23 is not a multiple of 4"},
      {"value_offsets count", [&] { column(2)->value_offsets_count = 8; }, "value_offsets_count 8, must be strings + 1 = 9"},
      {"value_offsets count overflow", [&] { column(2)->value_offsets_count = (uint64_t{1} << 61) + 9; }, "overflows"},
      {"value_offsets region", [&] { column(2)->value_offsets_offset = slot_bytes - 64; }, "value_offsets ["},
      {"value_offsets decreasing", [&] { *i64(column(2)->value_offsets_offset, 5) = 2; }, "value_offsets[5] = 2 < value_offsets[4]"},
      {"value_offsets last", [&] { *i64(column(2)->value_offsets_offset, 8) += 1; }, "must be " },
      {"value_offsets[0]", [&] { *i64(column(2)->value_offsets_offset, 0) = -4; }, "value_offsets[0] = -4, must be 0"},
      {"strings past values", [&] {
         column(2)->values_bytes = 2;  // offsets still end at the real length
       }, "value_offsets[8] = "},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      producer.WriteBatch(slot, 0, 1, 0, 0, 4);
      std::string error;
      REQUIRE(shm::ValidateBatch(sb, slot, &error));
      c.corrupt();
      CHECK_FALSE(shm::ValidateBatch(sb, slot, &error));
      CHECK_THAT(error, Catch::Contains(c.expected));
    }
  }
}

TEST_CASE("futex: a wake in one process ends a wait in another; timeouts return") {
  TempDir dir;
  RingTestProducer producer(Options(dir, "futex"));
  std::atomic<uint32_t>* word = &producer.ring().sb->free_futex;

  const auto t0 = std::chrono::steady_clock::now();
  shm::FutexWait(word, word->load(), std::chrono::milliseconds(50));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(40));
  shm::FutexWait(word, word->load() + 1, std::chrono::seconds(10));  // not equal: returns at once
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));

  const std::string name = producer.segment_name();
  auto child = testing::ForkChild([&] {
    shm::Segment segment = shm::Segment::Open(name);
    auto* w = &segment.superblock()->free_futex;
    const auto start = std::chrono::steady_clock::now();
    while (w->load() == 0) shm::FutexWait(w, 0, std::chrono::seconds(10));
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(8)) _exit(4);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  word->fetch_add(1);
  shm::FutexWakeAll(word);
  const int status = child.Wait(std::chrono::seconds(15));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("publish in two halves: the batch is there after the first, a sleeper wakes at the second") {
  // ringfeedd publishes under its pipeline mutex and wakes after letting go of it
  // (Pipeline::Complete): between the halves a consumer that looks finds the batch, and one
  // asleep since before it sleeps on until the wake.
  TempDir dir;
  RingTestProducer producer(Options(dir, "halves"));
  const shm::Ring& ring = producer.ring();
  shm::QueueHeader& q = ring.queue(0);
  std::atomic<bool> returned{false};
  std::thread sleeper([&] {
    const uint32_t seen = q.publish_futex.load();
    while (q.published.load() == 0) shm::WaitForPublish(ring, 0, seen, std::chrono::seconds(20));
    returned = true;
  });
  // Asleep: counted in publish_waiters, and 50 ms more to be inside FUTEX_WAIT (a sleeper not
  // yet there would see the bump below and return at once: on a machine so loaded that 50 ms
  // is not enough, the CHECK_FALSE below fails).
  for (int i = 0; i < 2000 && q.publish_waiters.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(q.publish_waiters.load() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));

  REQUIRE(shm::BeginFill(ring, 0));
  shm::PublishWithoutWake(ring, 0, 0, 0);
  CHECK(q.published.load() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  CHECK_FALSE(returned.load());  // no wake yet: still asleep
  CHECK(q.publish_waiters.load() == 1);

  const auto woken = std::chrono::steady_clock::now();
  shm::WakePublishWaiters(ring, 0);
  sleeper.join();
  CHECK(returned.load());
  CHECK(std::chrono::steady_clock::now() - woken < std::chrono::seconds(5));
  // Nobody asleep: the second half makes no wake call, and a looker finds the batch.
  shm::WakePublishWaiters(ring, 0);
  uint32_t slot = 99;
  uint64_t seq = 99;
  CHECK(shm::TryClaim(ring, 0, 1, &slot, &seq) == shm::ClaimResult::kClaimed);
  CHECK(slot == 0);
  CHECK(seq == 0);
}


TEST_CASE("RingSlotsForConsumers: a slot each and one to fill, one more than now, at most kMaxSlots") {
  CHECK(shm::RingSlotsForConsumers(6, 4) == 12);
  CHECK(shm::RingSlotsForConsumers(2, 7) == 8);
  CHECK(shm::RingSlotsForConsumers(64, 256) == 256);
  CHECK(shm::RingSlotsForConsumers(0, 2) == 3);
}

TEST_CASE("AllHeldAdvice: who holds every slot, largest first, and what to do") {
  std::vector<uint32_t> held(shm::kMaxConsumers + 1, 0);
  const auto name = [](uint32_t id) { return id == 9 ? std::string("this client") : "consumer " + std::to_string(id); };
  // Each holds one: more slots, two per consumer (3 attached, one of them holding nothing).
  held[1] = held[2] = 1;
  CHECK(shm::AllHeldAdvice(held, name, 3, 2) ==
        "consumer 1 holds 1, consumer 2 1: each consumer that keeps its previous batch while it waits for the next "
        "(a Python `for batch in client:` loop) needs a slot of its own and one to fill: give the job ring.slots: 6 "
        "or more");
  // One keeps several: named as the one to release them; the count for keeping them all.
  held[1] = 7;
  CHECK(shm::AllHeldAdvice(held, name, 2, 8) ==
        "consumer 1 holds 7, consumer 2 1: consumer 1 keeps 7 batches it has not released (batches a trainer "
        "stores, or arrays or tensors of them kept alive): release those no longer needed; trainers that need them "
        "all at once need more ring.slots (10 for these consumers)");
  // Several keepers, six holders: four named and this client (the sixth) always; a forged owner.
  held = std::vector<uint32_t>(shm::kMaxConsumers + 1, 0);
  held[1] = 3, held[2] = 2, held[3] = 1, held[4] = 1, held[5] = 1, held[9] = 1, held[0] = 2;
  CHECK(shm::AllHeldAdvice(held, name, 6, 11) ==
        "consumer 1 holds 3, consumer 2 2, consumer 3 1, consumer 4 1, this client 1 and 1 more: several consumers "
        "keep batches they have not released (consumer 1 3, consumer 2 2) (batches a trainer stores, or arrays or "
        "tensors of them kept alive): release those no longer needed; trainers that need them all at once need more "
        "ring.slots (15 for these consumers); 2 slots name an owner outside consumer ids 1-64 (a process wrote the "
        "ring)");
  // Nobody that can attach holds one (every held word forged).
  held = std::vector<uint32_t>(shm::kMaxConsumers + 1, 0);
  held[0] = 4;
  CHECK(shm::AllHeldAdvice(held, name, 1, 4) ==
        "no attached consumer holds one; 4 slots name an owner outside consumer ids 1-64 (a process wrote the ring)");
}

}  // namespace
}  // namespace ringfeed
