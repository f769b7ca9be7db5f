// Parsing into caller memory (the shared-memory slot path): ColumnBuffer, the external
// ExampleBatch, ExampleParser::Measure and ColumnCapacities / CarveColumnRegions.
//
// The central check (SlotCheck): for every record, alone and in batches, an external batch whose
// regions are sized by Measure gives exactly what the owned batch gives: the same success or the
// same error message, byte-identical columns, and no byte written outside the regions. Measure is
// also checked to be >= what Parse appended, per record and feature. Inputs: real TFX files
// (taxi, penguin, SequenceExamples read as Examples), the fuzz corpus (tests/fuzz/corpus/) with
// its four specs, and truncated / bit-flipped versions of all of those. Random libprotobuf
// records are covered in example_differential_test.cc. Too-small regions must give a parse error
// naming the feature, never a write past a region (run under the ASan build as well).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "format/column_buffer.h"
#include "format/column_sizes.h"
#include "format/example_batch.h"
#include "format/example_builder.h"
#include "format/example_parser.h"
#include "format/example_wire.h"
#include "format/feature_spec.h"
#include "format/tfrecord_reader.h"
#include "tests/test_support.h"

using namespace ringfeed;

namespace {

constexpr uint8_t kPattern = 0xA5;

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

FeatureSpec Var(const std::string& name, DType dtype) {
  FeatureSpec s;
  s.name = name;
  s.type = FeatureType::kVarLen;
  s.dtype = dtype;
  return s;
}
FeatureSpec Fixed(const std::string& name, DType dtype, std::vector<int64_t> shape = {}) {
  FeatureSpec s;
  s.name = name;
  s.type = FeatureType::kFixedLen;
  s.dtype = dtype;
  s.shape = std::move(shape);
  return s;
}
FeatureSpec WithInt(FeatureSpec s, std::vector<int64_t> d) {
  s.has_default = true;
  s.default_int64 = std::move(d);
  return s;
}
FeatureSpec WithFloat(FeatureSpec s, std::vector<float> d) {
  s.has_default = true;
  s.default_float = std::move(d);
  return s;
}
FeatureSpec WithBytes(FeatureSpec s, std::vector<std::string> d) {
  s.has_default = true;
  s.default_bytes = std::move(d);
  return s;
}
FeatureSpec Raw(FeatureSpec s) {
  s.decode_raw = true;
  return s;
}

bool Measured(const FeatureSpec& s) { return s.dtype == DType::kBytes || (s.type == FeatureType::kVarLen); }

// Caller memory for an external batch: one 8-byte aligned buffer filled with kPattern, the
// regions carved from it; Untouched() checks that nothing outside the regions was written.
struct SlotMemory {
  std::vector<uint64_t> words;
  std::vector<ColumnRegion> regions;
  size_t bytes = 0;

  SlotMemory(const std::vector<ColumnCapacity>& caps, size_t align) {
    const size_t need = ColumnRegionsBytes(caps, align);
    words.assign(need / 8 + 16, 0);  // + 128 bytes past the end
    std::memset(words.data(), kPattern, words.size() * 8);
    bytes = words.size() * 8;
    CHECK(CarveColumnRegions({reinterpret_cast<uint8_t*>(words.data()), bytes}, caps, align, &regions) == need);
  }
  bool Untouched() const {
    const uint8_t* base = reinterpret_cast<const uint8_t*>(words.data());
    std::vector<bool> inside(bytes, false);
    auto mark = [&](const void* p, size_t n) {
      if (n == 0) return;
      const size_t from = static_cast<size_t>(static_cast<const uint8_t*>(p) - base);
      REQUIRE(from + n <= bytes);
      for (size_t k = from; k < from + n; ++k) inside[k] = true;
    };
    for (const ColumnRegion& r : regions) {
      mark(r.values.data(), r.values.size());
      mark(r.value_offsets.data(), r.value_offsets.size() * 8);
      mark(r.row_splits.data(), r.row_splits.size() * 8);
    }
    for (size_t k = 0; k < bytes; ++k) {
      if (!inside[k] && base[k] != kPattern) return false;
    }
    return true;
  }
};

// The committed content of every column (FixedLen numeric: the committed rows only).
void CheckSameColumns(const ExampleBatch& want, const ExampleBatch& got) {
  REQUIRE(got.rows() == want.rows());
  for (size_t i = 0; i < want.specs().size(); ++i) {
    const FeatureSpec& s = want.specs()[i];
    INFO("feature '" << s.name << "'");
    const Column& a = want.column(i);
    const Column& b = got.column(i);
    if (s.type == FeatureType::kFixedLen && s.dtype != DType::kBytes) {
      const size_t n = want.rows() * static_cast<size_t>(s.NumElements()) * DTypeSize(s.dtype);
      REQUIRE(b.values.size() == got.capacity() * static_cast<size_t>(s.NumElements()) * DTypeSize(s.dtype));
      CHECK((n == 0 || std::memcmp(a.values.data(), b.values.data(), n) == 0));
    } else {
      CHECK(std::vector<uint8_t>(b.values.begin(), b.values.end()) ==
            std::vector<uint8_t>(a.values.begin(), a.values.end()));
    }
    CHECK(std::vector<int64_t>(b.value_offsets.begin(), b.value_offsets.end()) ==
          std::vector<int64_t>(a.value_offsets.begin(), a.value_offsets.end()));
    CHECK(std::vector<int64_t>(b.row_splits.begin(), b.row_splits.end()) ==
          std::vector<int64_t>(a.row_splits.begin(), a.row_splits.end()));
  }
}

struct SlotStats {
  size_t records = 0, parsed = 0, errors = 0, exact = 0, batches = 0;
};

// Per record: Measure >= what Parse appended to each measured array, and an external batch of
// one row sized by Measure behaves exactly as an owned one. Per batch of `batch_rows`: the same
// with the summed sizes, plus no write outside the regions.
void SlotCheck(const ExampleParser& parser, const std::vector<std::string>& records, size_t batch_rows,
               SlotStats* stats) {
  const FeatureSpecs& specs = parser.specs();
  for (size_t first = 0; first < records.size(); first += batch_rows) {
    const size_t n = std::min(batch_rows, records.size() - first);
    ColumnSizes sum;
    for (size_t r = first; r < first + n; ++r) parser.Measure(Bytes(records[r]), &sum);
    CHECK(sum.records == n);
    const std::vector<ColumnCapacity> caps = ColumnCapacities(specs, n, sum);
    SlotMemory memory(caps, (stats->batches % 2) ? 8 : 64);
    ExampleBatch owned(specs, n);
    ExampleBatch external(specs, n, memory.regions);
    ++stats->batches;

    for (size_t r = first; r < first + n; ++r) {
      INFO("record " << r << " (" << records[r].size() << " bytes)");
      const auto rec = Bytes(records[r]);
      // Alone.
      ColumnSizes one;
      parser.Measure(rec, &one);
      ExampleBatch alone(specs, 1);
      ParseError alone_error;
      const bool alone_ok = parser.Parse(rec, alone, &alone_error);
      SlotMemory one_memory(ColumnCapacities(specs, 1, one), 8);
      ExampleBatch alone_external(specs, 1, one_memory.regions);
      ParseError alone_external_error;
      const bool alone_external_ok = parser.Parse(rec, alone_external, &alone_external_error);
      REQUIRE(alone_external_ok == alone_ok);
      CHECK(alone_external_error.message == alone_error.message);
      CHECK(alone_external_error.key == alone_error.key);
      CHECK_FALSE(alone_external_error.no_room);
      CheckSameColumns(alone, alone_external);
      CHECK(one_memory.Untouched());
      bool exact = alone_ok;
      if (alone_ok) {
        for (size_t i = 0; i < specs.size(); ++i) {
          if (!Measured(specs[i])) continue;
          INFO("feature '" << specs[i].name << "'");
          const Column& c = alone.column(i);
          CHECK(c.values.size() <= one.features[i].value_bytes);
          exact = exact && c.values.size() == one.features[i].value_bytes;
          if (specs[i].dtype == DType::kBytes) {
            CHECK(c.value_offsets.size() - 1 <= one.features[i].strings);
            exact = exact && c.value_offsets.size() - 1 == one.features[i].strings;
          }
        }
      }
      // In the batch.
      ParseError owned_error, external_error;
      const bool owned_ok = parser.Parse(rec, owned, &owned_error);
      const bool external_ok = parser.Parse(rec, external, &external_error);
      REQUIRE(owned_ok == alone_ok);
      REQUIRE(external_ok == owned_ok);
      CHECK(external_error.message == owned_error.message);
      ++stats->records;
      stats->parsed += owned_ok;
      stats->errors += !owned_ok;
      stats->exact += exact;
    }
    CheckSameColumns(owned, external);
    CHECK(memory.Untouched());
    // Clear() and a second fill of the same regions gives the same again.
    external.Clear();
    owned.Clear();
    ParseError e1, e2;
    for (size_t r = first; r < first + n; ++r) {
      REQUIRE(parser.Parse(Bytes(records[r]), external, &e1) == parser.Parse(Bytes(records[r]), owned, &e2));
    }
    CheckSameColumns(owned, external);
  }
}

// Every record of a (possibly broken) TFRecord file; read errors end the file quietly.
std::vector<std::string> ReadRecords(const std::string& path, Compression compression = Compression::kAuto,
                                     bool verify_crc = true) {
  ReaderOptions options;
  options.compression = compression;
  options.verify_crc = verify_crc;
  TFRecordReader reader(path, options);
  std::vector<std::string> out;
  Record rec;
  ReadError error;
  for (;;) {
    const auto status = reader.Next(&rec, &error);
    if (status == TFRecordReader::Status::kRecord) {
      out.emplace_back(reinterpret_cast<const char*>(rec.data.data()), rec.data.size());
    } else if (status == TFRecordReader::Status::kEnd || !error.recoverable) {
      break;
    }
  }
  return out;
}

std::vector<std::string> ReadDir(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& f : files) {
    auto recs = ReadRecords(f.string());
    out.insert(out.end(), recs.begin(), recs.end());
  }
  return out;
}

// Truncations at every length up to 64 and a few beyond, and single-bit flips, of each record.
std::vector<std::string> Mangle(const std::vector<std::string>& records, uint64_t seed, size_t flips_per_record) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (const std::string& r : records) {
    for (size_t len = 0; len < r.size(); len += (len < 64 ? 1 : 1 + r.size() / 16)) out.push_back(r.substr(0, len));
    for (size_t k = 0; k < flips_per_record && !r.empty(); ++k) {
      std::string m = r;
      m[rng() % m.size()] ^= static_cast<char>(1u << (rng() % 8));
      out.push_back(std::move(m));
    }
  }
  return out;
}

// The list kind of each key in the records: an all-VarLen spec (the kind first seen), and an
// all-FixedLen scalar spec with defaults (every taxi/penguin feature holds one value or none).
void SpecsFromRecords(const std::vector<std::string>& records, FeatureSpecs* varlen, FeatureSpecs* fixed) {
  std::map<std::string, uint32_t> kinds;
  for (const std::string& r : records) {
    std::string why;
    wire::ForEachFeature(
        Bytes(r),
        [&](const uint8_t* key, size_t key_size, const wire::FeatureRef& value) {
          wire::ListRun run;
          if (!wire::FindListRun(value, &run)) run.kind = 0;
          uint32_t& kind = kinds[std::string(reinterpret_cast<const char*>(key), key_size)];
          if (kind == 0) kind = run.kind;
        },
        &why);
  }
  for (const auto& [key, kind] : kinds) {
    const DType dtype = kind == 1 ? DType::kBytes : kind == 2 ? DType::kFloat32 : DType::kInt64;
    varlen->push_back(Var(key, dtype));
    if (dtype == DType::kBytes) fixed->push_back(WithBytes(Fixed(key, dtype), {"<none>"}));
    if (dtype == DType::kFloat32) fixed->push_back(WithFloat(Fixed(key, dtype), {-1.0f}));
    if (dtype == DType::kInt64) fixed->push_back(WithInt(Fixed(key, dtype), {-1}));
  }
}

// The four specs of the fuzz target (tests/fuzz/reader_parser_fuzz.cc), which its corpus is for.
std::vector<FeatureSpecs> FuzzSpecs() {
  std::vector<FeatureSpecs> all(4);
  all[0] = {
      Var("company", DType::kBytes),
      Var("dropoff_census_tract", DType::kInt64),
      Var("dropoff_latitude", DType::kFloat32),
      Fixed("fare", DType::kFloat32),
      WithBytes(Fixed("payment_type", DType::kBytes), {"Unknown"}),
      WithInt(Fixed("pickup_community_area", DType::kInt64), {-1}),
      WithFloat(Fixed("tips", DType::kFloat32), {0.0f}),
      Fixed("trip_start_hour", DType::kInt64),
      WithFloat(Fixed("pickup_lat_lon", DType::kFloat32, {2}), {41.8f, -87.6f}),
      WithInt(Fixed("trip_seconds_hist", DType::kInt64, {3}), {0}),
      WithBytes(Fixed("tags", DType::kBytes, {2}), {"a", "bc"}),
  };
  all[1] = {
      Raw(Fixed("image", DType::kUInt8, {28, 28, 1})),
      WithInt(Fixed("label", DType::kInt64), {-1}),
  };
  all[2] = {
      Var("ids", DType::kInt64),
      Var("weights", DType::kFloat32),
      Var("tokens", DType::kBytes),
  };
  all[3] = {
      Fixed("vec", DType::kInt64, {3}),
      Fixed("mat", DType::kFloat32, {2, 2}),
      Fixed("empty", DType::kFloat32, {0}),
      Raw(Fixed("raw16", DType::kInt16, {4})),
      Raw(Fixed("raw_f64", DType::kFloat64, {1, 2})),
      Fixed("pair", DType::kBytes, {2}),
      WithFloat(Fixed("k", DType::kFloat32), {1.5f}),
      Var("", DType::kInt64),
  };
  return all;
}

// Regions allocated one by one at their exact size (so ASan sees a write past any of them),
// each followed by a guard checked afterwards.
struct ExactRegions {
  static constexpr size_t kGuard = 64;
  std::vector<std::unique_ptr<uint64_t[]>> blocks;
  std::vector<size_t> sizes;  // bytes
  std::vector<ColumnRegion> regions;

  explicit ExactRegions(const std::vector<ColumnCapacity>& caps) {
    for (const ColumnCapacity& c : caps) {
      ColumnRegion r;
      r.values = {Block(c.values_bytes), c.values_bytes};
      r.value_offsets = {reinterpret_cast<int64_t*>(Block(c.value_offsets * 8)), c.value_offsets};
      r.row_splits = {reinterpret_cast<int64_t*>(Block(c.row_splits * 8)), c.row_splits};
      regions.push_back(r);
    }
  }
  uint8_t* Block(size_t bytes) {
    // Under ASan the guard is poisoned heap past the block; without it, kPattern bytes.
    const size_t words = (bytes + kGuard + 7) / 8;
    blocks.emplace_back(new uint64_t[words]);
    std::memset(blocks.back().get(), kPattern, words * 8);
    sizes.push_back(bytes);
    return reinterpret_cast<uint8_t*>(blocks.back().get());
  }
  bool GuardsIntact() const {
    for (size_t b = 0; b < blocks.size(); ++b) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(blocks[b].get());
      for (size_t k = sizes[b]; k < sizes[b] + kGuard; ++k) {
        if (p[k] != kPattern) return false;
      }
    }
    return true;
  }
};

bool NoRoom(const ParseError& e) {
  CHECK(e.no_room == (e.message.find("does not fit in the batch's column regions") != std::string::npos));
  return e.no_room;
}

// Parses `records` into an external batch with regions `caps` (some too small) and an owned
// batch that skips exactly the records the external one had no room for: both must agree on
// everything else, and each no-room failure must leave the batch as it was.
size_t CheckTooSmall(const ExampleParser& parser, const std::vector<std::string>& records,
                     const std::vector<ColumnCapacity>& caps, const std::string& feature) {
  const FeatureSpecs& specs = parser.specs();
  ExactRegions memory(caps);
  ExampleBatch external(specs, records.size(), memory.regions);
  ExampleBatch owned(specs, records.size());
  size_t no_room = 0;
  for (const std::string& r : records) {
    std::vector<std::vector<int64_t>> before;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Column& c = external.column(i);
      before.push_back({static_cast<int64_t>(c.values.size()), static_cast<int64_t>(c.value_offsets.size()),
                        static_cast<int64_t>(c.row_splits.size())});
    }
    const size_t rows = external.rows();
    ParseError e;
    if (!parser.Parse(Bytes(r), external, &e) && NoRoom(e)) {
      ++no_room;
      CHECK(e.key == feature);
      CHECK(e.message.find("key '" + feature + "'") == 0);
      CHECK(e.message.find("ExampleParser::Measure") != std::string::npos);
      CHECK(external.rows() == rows);
      for (size_t i = 0; i < specs.size(); ++i) {
        const Column& c = external.column(i);
        CHECK(before[i] == std::vector<int64_t>{static_cast<int64_t>(c.values.size()),
                                                static_cast<int64_t>(c.value_offsets.size()),
                                                static_cast<int64_t>(c.row_splits.size())});
      }
      continue;
    }
    ParseError e2;
    CHECK(parser.Parse(Bytes(r), owned, &e2) == e.message.empty());
    CHECK(e2.message == e.message);
  }
  CheckSameColumns(owned, external);
  CHECK(memory.GuardsIntact());
  return no_room;
}

}  // namespace

// ---- ColumnBuffer ------------------------------------------------------------------------------

TEST_CASE("ColumnBuffer: owned buffers grow; external ones stop at their capacity, unchanged") {
  ColumnBuffer<int64_t> owned;
  CHECK(owned.owns_memory());
  for (int64_t k = 0; k < 1000; ++k) REQUIRE(owned.push_back(k));
  const int64_t more[3] = {7, 8, 9};
  REQUIRE(owned.append(more, 3));
  REQUIRE(owned.size() == 1003);
  CHECK(owned[999] == 999);
  CHECK(owned.back() == 9);
  REQUIRE(owned.resize(5000));  // uninitialized tail, no zero-fill required
  owned.truncate(2);
  CHECK(owned == std::vector<int64_t>{0, 1});
  owned.truncate(10);  // never grows
  CHECK(owned.size() == 2);
  CHECK_THROWS_AS(owned.at(2), std::out_of_range);

  int64_t memory[6] = {-1, -1, -1, -1, -1, -1};
  auto external = ColumnBuffer<int64_t>::External({memory, 4});
  CHECK_FALSE(external.owns_memory());
  CHECK(external.capacity() == 4);
  REQUIRE(external.push_back(1));
  REQUIRE(external.append(more, 3));
  CHECK_FALSE(external.push_back(2));
  CHECK_FALSE(external.append(more, 1));
  CHECK(external.append(more, 0));
  CHECK_FALSE(external.resize(5));
  CHECK_FALSE(external.reserve(5));
  CHECK(external.reserve(4));
  CHECK(external == std::vector<int64_t>{1, 7, 8, 9});
  CHECK(memory[4] == -1);  // never past the capacity
  CHECK(memory[5] == -1);
  external.truncate(1);
  const int64_t four[4] = {1, 2, 3, 4};
  CHECK_FALSE(external.append(four, 4));  // 1 + 4 > 4: all or nothing
  CHECK(external.size() == 1);
  CHECK(external.data() == memory);

  ColumnBuffer<int64_t> moved(std::move(external));
  CHECK(moved.data() == memory);
  CHECK_FALSE(moved.owns_memory());
  CHECK(external.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is defined
  CHECK(external.owns_memory());
  REQUIRE(external.push_back(5));  // a moved-from buffer is an empty owned one
  moved = std::move(owned);
  CHECK(moved.owns_memory());
  CHECK(moved == std::vector<int64_t>{0, 1});
}

TEST_CASE("external ExampleBatch: regions are checked, the layout's leading zeros written") {
  const FeatureSpecs specs = {Fixed("f", DType::kFloat32, {2}), Var("v", DType::kInt64), Fixed("b", DType::kBytes),
                              Var("s", DType::kBytes)};
  std::vector<ColumnCapacity> caps = ColumnCapacities(specs, 3, ColumnSizes{});
  REQUIRE(caps.size() == 4);
  CHECK(caps[0].values_bytes == 3 * 2 * 4);
  CHECK(caps[0].value_offsets == 0);
  CHECK(caps[0].row_splits == 0);
  CHECK(caps[1].values_bytes == 0);
  CHECK(caps[1].row_splits == 4);
  CHECK(caps[2].value_offsets == 3 + 1);
  CHECK(caps[2].row_splits == 0);
  CHECK(caps[3].value_offsets == 1);
  CHECK(caps[3].row_splits == 4);
  CHECK(ColumnRegionsBytes(caps, 64) == 64 + 64 + 64 + 64 + 64);
  CHECK(ColumnRegionsBytes(caps, 8) == 24 + 32 + 32 + 8 + 32);

  SlotMemory memory(caps, 64);
  for (const ColumnRegion& r : memory.regions) {
    for (const void* p : {static_cast<const void*>(r.values.data()), static_cast<const void*>(r.value_offsets.data()),
                          static_cast<const void*>(r.row_splits.data())}) {
      CHECK((static_cast<const uint8_t*>(p) - reinterpret_cast<const uint8_t*>(memory.words.data())) % 64 == 0);
    }
  }
  {
    ExampleBatch batch(specs, 3, memory.regions);
    CHECK(batch.column(0).values.size() == 24);
    CHECK(batch.column(1).row_splits == std::vector<int64_t>{0});
    CHECK(batch.column(2).value_offsets == std::vector<int64_t>{0});
    CHECK(batch.column(3).value_offsets == std::vector<int64_t>{0});
    CHECK(batch.column(3).row_splits == std::vector<int64_t>{0});
    CHECK(memory.regions[1].row_splits[0] == 0);  // in the caller's memory
    // A consumer scribbled on the slot: Clear() writes the zeros again.
    memory.regions[1].row_splits[0] = 77;
    memory.regions[3].value_offsets[0] = 77;
    batch.Clear();
    CHECK(memory.regions[1].row_splits[0] == 0);
    CHECK(memory.regions[3].value_offsets[0] == 0);
  }

  auto expect_error = [&](std::vector<ColumnRegion> regions, const std::string& words) {
    try {
      ExampleBatch batch(specs, 3, regions);
      FAIL("no error for " << words);
    } catch (const std::invalid_argument& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(words) != std::string::npos);
    }
  };
  std::vector<ColumnRegion> r = memory.regions;
  r[0].values = r[0].values.first(23);
  expect_error(r, "feature 'f': the values region has 23 bytes, 3 rows of float32 x 2 need 24");
  r = memory.regions;
  r[1].row_splits = r[1].row_splits.first(3);
  expect_error(r, "feature 'v': the row_splits region has 3 entries, a batch of 3 rows needs 4");
  r = memory.regions;
  r[3].value_offsets = {};
  expect_error(r, "feature 's': the value_offsets region is empty");
  r = memory.regions;
  r[0].row_splits = r[1].row_splits;
  expect_error(r, "feature 'f': a row_splits region for a FixedLen feature");
  r = memory.regions;
  r[1].value_offsets = r[3].value_offsets;
  expect_error(r, "feature 'v': a value_offsets region for a numeric feature");
  r = memory.regions;
  r.pop_back();
  expect_error(r, "3 column regions for 4 features");

  std::vector<ColumnRegion> out;
  std::vector<uint64_t> small(2);
  CHECK_THROWS_AS(CarveColumnRegions({reinterpret_cast<uint8_t*>(small.data()), 16}, caps, 64, &out),
                  std::invalid_argument);
  CHECK_THROWS_AS(ColumnRegionsBytes(caps, 12), std::invalid_argument);
}

// ---- Measure -----------------------------------------------------------------------------------

TEST_CASE("Measure: exact for serializer output, defaults for missing FixedLen bytes, upper bound otherwise") {
  const FeatureSpecs specs = {Var("ids", DType::kInt64),
                              Var("w", DType::kFloat32),
                              Var("tok", DType::kBytes),
                              WithBytes(Fixed("pair", DType::kBytes, {2}), {"ab", "cde"}),
                              WithBytes(Fixed("one", DType::kBytes), {"xyz"}),
                              Fixed("fare", DType::kFloat32),
                              Raw(Fixed("img", DType::kUInt8, {4}))};
  const ExampleParser parser(specs);
  ExampleBuilder b;
  b.AddInt64("ids", {1, 300, -1, 1LL << 40})
      .AddFloat("w", {0.5f, 1.5f})
      .AddBytes("tok", {"hello", "", "w"})
      .AddBytes("pair", {"p", "qq"})
      .AddFloat("fare", {2.5f})
      .AddBytes("img", {"abcd"})
      .AddInt64("unknown", {1, 2, 3});
  ColumnSizes sizes;
  parser.Measure(Bytes(b.Serialize()), &sizes);
  REQUIRE(sizes.features.size() == specs.size());
  CHECK(sizes.records == 1);
  CHECK(sizes.features[0].value_bytes == 4 * 8);
  CHECK(sizes.features[1].value_bytes == 2 * 4);
  CHECK(sizes.features[2].value_bytes == 6);
  CHECK(sizes.features[2].strings == 3);
  CHECK(sizes.features[3].value_bytes == 3);
  CHECK(sizes.features[3].strings == 2);
  CHECK(sizes.features[4].value_bytes == 3);  // missing: its default
  CHECK(sizes.features[4].strings == 1);
  CHECK(sizes.features[5].value_bytes == 0);  // FixedLen numeric: sized from the rows
  CHECK(sizes.features[6].value_bytes == 0);

  // Adds up; a Feature{} (no list) takes the default; a wrong kind counts 0.
  ExampleBuilder c;
  c.AddEmptyFeature("pair").AddFloat("ids", {1, 2, 3}).AddBytes("one", {"q"});
  parser.Measure(Bytes(c.Serialize()), &sizes);
  CHECK(sizes.records == 2);
  CHECK(sizes.features[0].value_bytes == 4 * 8);
  CHECK(sizes.features[3].value_bytes == 3 + 5);
  CHECK(sizes.features[3].strings == 2 + 2);
  CHECK(sizes.features[4].value_bytes == 3 + 1);

  // Malformed input: nothing (Parse appends nothing either), and no crash.
  parser.Measure(Bytes(std::string("\x0a\x7f\x01", 3)), &sizes);
  CHECK(sizes.records == 3);
  CHECK(sizes.features[0].value_bytes == 4 * 8);

  // Sizes from another spec size are refused.
  const ExampleParser other({Var("ids", DType::kInt64)});
  CHECK_THROWS_AS(other.Measure(Bytes(b.Serialize()), &sizes), std::invalid_argument);
}

TEST_CASE("slot parsing equals owned parsing: real taxi, penguin and SequenceExample records") {
  const std::string dir = ringfeed::testing::TfxDirOrSkip();
  if (dir.empty()) return;
  struct Set {
    const char* name;
    std::string path;
    size_t batch;
  };
  const std::vector<Set> sets = {{"taxi", dir + "/csv_example_gen/Split-train", 256},
                                 {"penguin", dir + "/penguin/data/Split-train", 37},
                                 {"sequence", dir + "/tfrecord_sequence/Split-train", 512}};
  for (const Set& set : sets) {
    std::vector<std::string> records = ReadDir(set.path);
    INFO(set.name << ": " << records.size() << " records");
    REQUIRE(records.size() > 200);
    if (records.size() > 3000) records.resize(3000);  // test time under the sanitizers; the shape repeats
    FeatureSpecs varlen, fixed;
    SpecsFromRecords(records, &varlen, &fixed);
    REQUIRE(!varlen.empty());
    for (const FeatureSpecs* specs : {&varlen, &fixed}) {
      const ExampleParser parser(*specs);
      SlotStats stats;
      SlotCheck(parser, records, set.batch, &stats);
      CHECK(stats.records == records.size());
      WARN(set.name << " (" << (specs == &varlen ? "VarLen" : "FixedLen with defaults") << ", " << specs->size()
                    << " features): " << stats.parsed << " parsed, " << stats.errors << " errors, " << stats.exact
                    << " measured exactly, " << stats.batches << " batches");
      // Real records are serializer output: every one parses and Measure is exact.
      CHECK(stats.parsed == records.size());
      CHECK(stats.exact == stats.parsed);
    }
    // The benchmark's taxi schema (FixedLen without defaults where every record has the value).
    if (std::string(set.name) == "taxi") {
      const ExampleParser parser({Var("company", DType::kBytes), Var("dropoff_census_tract", DType::kInt64),
                                  Var("dropoff_latitude", DType::kFloat32), Fixed("fare", DType::kFloat32),
                                  Fixed("payment_type", DType::kBytes), Fixed("trip_start_hour", DType::kInt64)});
      SlotStats stats;
      SlotCheck(parser, records, 1024, &stats);
      CHECK(stats.parsed == records.size());
    }
  }
}

TEST_CASE("slot parsing equals owned parsing: fuzz corpus records, truncated and bit-flipped") {
  const std::filesystem::path corpus = std::filesystem::path(RINGFEED_SOURCE_DIR) / "tests/fuzz/corpus";
  REQUIRE(std::filesystem::is_directory(corpus));
  const std::vector<FeatureSpecs> all_specs = FuzzSpecs();
  std::vector<std::vector<std::string>> by_spec(all_specs.size());
  ringfeed::testing::TempDir tmp;
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(corpus)) {
    const std::string input = ringfeed::testing::ReadFile(e.path().string());
    if (input.size() < 3) continue;
    // The fuzz input layout (tests/fuzz/reader_parser_fuzz.cc): byte 0 = compression (bits 0-1),
    // spec (bits 3-4), verify_crc off (bit 5); the file from byte 3.
    const auto compression = static_cast<Compression>(static_cast<uint8_t>(input[0]) & 3);
    const size_t spec = (static_cast<uint8_t>(input[0]) >> 3) & 3;
    const bool verify = ((static_cast<uint8_t>(input[0]) >> 5) & 1) == 0;
    const std::string path = tmp.file("f" + std::to_string(files++));
    ringfeed::testing::WriteFile(path, input.substr(3));
    auto records = ReadRecords(path, compression, verify);
    records.push_back(input.substr(3));  // the raw file bytes, as an Example
    by_spec[spec].insert(by_spec[spec].end(), records.begin(), records.end());
  }
  REQUIRE(files > 30);
  size_t total = 0, errors = 0;
  for (size_t s = 0; s < all_specs.size(); ++s) {
    // Each record also under every spec (a record for one spec is odd input for another).
    std::vector<std::string> records;
    for (const auto& r : by_spec) records.insert(records.end(), r.begin(), r.end());
    std::vector<std::string> mangled = Mangle(by_spec[s], 0x5eed + s, 40);
    records.insert(records.end(), mangled.begin(), mangled.end());
    const ExampleParser parser(all_specs[s]);
    SlotStats stats;
    for (size_t batch : {size_t{1}, size_t{3}, size_t{64}}) SlotCheck(parser, records, batch, &stats);
    total += stats.records;
    errors += stats.errors;
    CHECK(stats.parsed > 0);
  }
  CHECK(errors > 1000);
  WARN("fuzz corpus: " << total << " record checks, " << errors << " of them parse errors");
}

TEST_CASE("too-small regions: a parse error naming the feature, the batch unchanged, nothing written past") {
  const FeatureSpecs specs = {Var("ids", DType::kInt64), Var("w", DType::kFloat32), Var("tok", DType::kBytes),
                              WithBytes(Fixed("pair", DType::kBytes, {2}), {"default-a", "default-b"}),
                              Fixed("fare", DType::kFloat32)};
  const ExampleParser parser(specs);
  // Records that take every append path: packed runs (one and many values), unpacked and
  // merged lists (the general walk), canonical and general bytes lists, FixedLen defaults.
  std::vector<std::string> records;
  std::mt19937_64 rng(42);
  for (int k = 0; k < 60; ++k) {
    ExampleBuilder b;
    std::vector<int64_t> ids(rng() % 5);
    for (auto& v : ids) v = static_cast<int64_t>(rng()) >> (rng() % 64);
    std::vector<float> w(rng() % 4, 0.25f);
    std::vector<std::string> tok(rng() % 4);
    for (auto& t : tok) t.assign(rng() % 9, 't');
    std::vector<std::string_view> tok_views(tok.begin(), tok.end());
    b.AddInt64("ids", ids).AddFloat("w", w).AddBytes("tok", tok_views).AddFloat("fare", {1.0f});
    if (k % 3 != 0) b.AddBytes("pair", {"p", "q"});
    std::string rec = b.Serialize();
    if (k % 4 == 1) {
      // An unpacked int64 list and a second bytes list for the same keys, appended as another
      // Features (protobuf merge: the later map entries win, lists of one kind concatenate).
      const std::string unpacked_ids = std::string("\x0a\x0d\x0a\x03ids\x12\x06\x1a\x04\x08\x05\x08\x06", 15);
      const std::string two_lists = std::string("\x0a\x0f\x0a\x03tok\x12\x08\x0a\x02\x0a\x00\x0a\x02\x0a\x00", 17);
      rec += std::string("\x0a", 1) + static_cast<char>(unpacked_ids.size() + two_lists.size()) + unpacked_ids +
             two_lists;
    }
    records.push_back(rec);
  }
  ColumnSizes sizes;
  for (const std::string& r : records) parser.Measure(Bytes(r), &sizes);
  // Sized by Measure: everything fits.
  CHECK(CheckTooSmall(parser, records, ColumnCapacities(specs, records.size(), sizes), "") == 0);
  // Exactly what the records take (Measure counts repeated keys twice): fits, and one byte or
  // entry less does not.
  ExampleBatch owned(parser.specs(), records.size());
  ParseError error;
  for (const std::string& r : records) REQUIRE(parser.Parse(Bytes(r), owned, &error));
  std::vector<ColumnCapacity> exact = ColumnCapacities(specs, records.size(), sizes);
  for (size_t f = 0; f < specs.size(); ++f) {
    if (specs[f].type == FeatureType::kFixedLen && specs[f].dtype != DType::kBytes) continue;
    exact[f].values_bytes = owned.column(f).values.size();
    if (specs[f].dtype == DType::kBytes) exact[f].value_offsets = owned.column(f).value_offsets.size();
  }
  CHECK(CheckTooSmall(parser, records, exact, "") == 0);

  size_t cases = 0;
  for (size_t f = 0; f < specs.size(); ++f) {
    for (int array = 0; array < 2; ++array) {
      for (size_t cut : {size_t{1}, size_t{5}, size_t{1000}}) {
        std::vector<ColumnCapacity> caps = exact;
        size_t& target = array == 0 ? caps[f].values_bytes : caps[f].value_offsets;
        const size_t minimum = array == 0 ? 0 : 1;
        if (specs[f].type == FeatureType::kFixedLen && specs[f].dtype != DType::kBytes) continue;
        if (target <= minimum) continue;
        target = std::max(minimum, target > cut ? target - cut : minimum);
        INFO("feature '" << specs[f].name << "', " << (array == 0 ? "values" : "value_offsets") << " short by "
                         << cut);
        CHECK(CheckTooSmall(parser, records, caps, specs[f].name) > 0);
        ++cases;
      }
    }
  }
  CHECK(cases >= 12);

  // A ParseError reused after a no-room error says which kind the next error is.
  const ExampleParser tokens({Var("tok", DType::kBytes)});
  uint8_t values[3];
  int64_t offsets[4], splits[3];
  const ColumnRegion region{{values, 3}, {offsets, 4}, {splits, 3}};
  ExampleBatch batch(tokens.specs(), 2, std::span<const ColumnRegion>(&region, 1));
  CHECK_FALSE(tokens.Parse(Bytes(ExampleBuilder().AddBytes("tok", {"abcd"}).Serialize()), batch, &error));
  CHECK(error.no_room);
  CHECK(error.message ==
        "key 'tok': the record does not fit in the batch's column regions (values: 3 bytes, value_offsets: 4 "
        "entries); size them with ExampleParser::Measure and ColumnCapacities");
  CHECK_FALSE(tokens.Parse(Bytes(ExampleBuilder().AddInt64("tok", {1}).Serialize()), batch, &error));
  CHECK_FALSE(error.no_room);
  CHECK(error.message.find("data types don't match") != std::string::npos);
  CHECK_FALSE(tokens.Parse(Bytes(std::string("\x0a\x05", 2)), batch, &error));
  CHECK_FALSE(error.no_room);
  REQUIRE(tokens.Parse(Bytes(ExampleBuilder().AddBytes("tok", {"ab", "c"}).Serialize()), batch, &error));
  CHECK(batch.column(0).value_offsets == std::vector<int64_t>{0, 2, 3});
  CHECK(batch.column(0).row_splits == std::vector<int64_t>{0, 2});
  CHECK(std::string(reinterpret_cast<const char*>(values), 3) == "abc");
}

TEST_CASE("too-small regions: real taxi records, one region at a time") {
  const std::string dir = ringfeed::testing::TfxDirOrSkip();
  if (dir.empty()) return;
  std::vector<std::string> records = ReadRecords(dir + "/csv_example_gen/Split-train/data_tfrecord-00000-of-00012.gz");
  REQUIRE(records.size() > 500);
  records.resize(500);
  FeatureSpecs varlen, fixed;
  SpecsFromRecords(records, &varlen, &fixed);
  for (const FeatureSpecs* specs : {&varlen, &fixed}) {
    const ExampleParser parser(*specs);
    ColumnSizes sizes;
    for (const std::string& r : records) parser.Measure(Bytes(r), &sizes);
    const std::vector<ColumnCapacity> exact = ColumnCapacities(*specs, records.size(), sizes);
    CHECK(CheckTooSmall(parser, records, exact, "") == 0);
    for (size_t f = 0; f < specs->size(); ++f) {
      const FeatureSpec& spec = (*specs)[f];
      if ((spec.type == FeatureType::kFixedLen && spec.dtype != DType::kBytes) || exact[f].values_bytes < 64) continue;
      std::vector<ColumnCapacity> caps = exact;
      caps[f].values_bytes /= 2;
      INFO("feature '" << (*specs)[f].name << "'");
      CHECK(CheckTooSmall(parser, records, caps, (*specs)[f].name) > 0);
    }
  }
}

TEST_CASE("wire::HasFeatureLists: a top-level field 2 of wire type LEN (SequenceExample.feature_lists)") {
  const auto bytes = [](std::initializer_list<uint8_t> b) { return std::vector<uint8_t>(b); };
  // context (field 1, LEN 0), feature_lists (field 2, LEN 0): a SequenceExample with both empty.
  CHECK(wire::HasFeatureLists(bytes({0x0A, 0x00, 0x12, 0x00})));
  CHECK(wire::HasFeatureLists(bytes({0x12, 0x02, 0x0A, 0x00})));  // feature_lists alone, holding an entry
  CHECK_FALSE(wire::HasFeatureLists(bytes({0x0A, 0x00})));        // an Example: features only
  CHECK_FALSE(wire::HasFeatureLists(bytes({})));
  CHECK_FALSE(wire::HasFeatureLists(bytes({0x10, 0x05})));        // field 2 as a varint: not feature_lists
  CHECK_FALSE(wire::HasFeatureLists(bytes({0x0A, 0x05, 0x00})));  // malformed (length past the end)
}
