// format_bench: TFRecordReader + ExampleParser on one core, beside the machine's ceilings measured
// in the same run. Run it through bench/run_format_bench.sh (Release build, data generation,
// `taskset -c 1`, ratio table); see bench/README.md and docs/benchmarks.md.
//
//   format_bench [--data_dir=DIR] [--batch=N] [Google Benchmark flags]
//
// DIR (default $RINGFEED_BENCH_DIR, else /tmp/ringfeed-bench) holds the data sets written by
// make_bench_data. Benchmarks (one pass over all the files of a data set per iteration):
//
//   ceiling/memcpy_256MiB                     memcpy between two 256 MiB buffers
//   ceiling/read_crc_copy/<plain set>         read() 1 MiB chunks from the page cache into a
//                                             buffer, ringfeed::Crc32c over it, memcpy it into a
//                                             256 MiB ring (no TFRecord work)
//   ceiling/read_crc_copy_cached/<plain set>  the same, the memcpy into one 1 MiB buffer (stays
//                                             in cache: the stricter ceiling)
//   ceiling/inflate_raw/<gzip set>/<lib>      the library alone (isal_inflate streaming or zlib
//                                             inflate), 1 MiB read()s in, a reused 1 MiB output
//                                             buffer (no TFRecord work)
//   inflate_stream/<gzip set>/<lib>           ringfeed::InflateStream alone (the reader's decoder
//                                             wrapper), same buffers
//   reader/<set>[/<lib>]                      TFRecordReader: framing + CRC-32C, no parse
//   reader_parse/<set>[/<lib>]                TFRecordReader + ExampleParser into an ExampleBatch of
//                                             --batch rows (Clear() when full)
//   parse_only/taxi                           ExampleParser alone over the records of one taxi file
//                                             held in memory
//
// Counters: items_per_second = records/s, bytes_per_second = bytes of the uncompressed TFRecord
// stream per second (for plain files, the file bytes), payload_per_second = bytes written into the
// batch's value columns per second (only where that is the figure of interest), file_bytes = bytes
// of the files per pass. Rates use CPU time (thread CPU time, including the kernel's read()).
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#ifdef RINGFEED_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#include "format/crc32c.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/feature_spec.h"
#include "format/inflate_stream.h"
#include "format/tfrecord_reader.h"

namespace fs = std::filesystem;
using namespace ringfeed;

namespace {

constexpr size_t kChunk = size_t{1} << 20;        // read() granularity, as the reader's default
constexpr size_t kBigBuffer = size_t{256} << 20;  // memcpy ceiling buffers / copy ring

size_t g_batch_rows = 1024;

struct DataSet {
  std::string name;
  std::vector<std::string> files;
  Compression compression = Compression::kNone;
  uint64_t records = 0, stream_bytes = 0, file_bytes = 0;
};

std::map<std::string, std::string> ReadManifest(const fs::path& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

bool LoadDataSet(const fs::path& root, const std::string& name, DataSet* ds) {
  const fs::path dir = root / name;
  if (!fs::exists(dir / "MANIFEST")) return false;
  auto m = ReadManifest(dir / "MANIFEST");
  ds->name = name;
  ds->compression = m["compression"] == "gzip" ? Compression::kGzip : Compression::kNone;
  ds->records = std::stoull(m["records"]);
  ds->stream_bytes = std::stoull(m["stream_bytes"]);
  ds->file_bytes = std::stoull(m["file_bytes"]);
  for (auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("part-", 0) == 0) ds->files.push_back(e.path().string());
  }
  std::sort(ds->files.begin(), ds->files.end());
  return !ds->files.empty();
}

FeatureSpecs LoadTaxiSpecs(const fs::path& path) {
  FeatureSpecs specs;
  std::ifstream in(path);
  std::string name, type, dtype;
  while (in >> name >> type >> dtype) {
    FeatureSpec s;
    s.name = name;
    s.type = type == "fixed" ? FeatureType::kFixedLen : FeatureType::kVarLen;
    s.dtype = *ParseDType(dtype);
    specs.push_back(std::move(s));
  }
  return specs;
}

FeatureSpecs BytesSpecs() {
  FeatureSpec s;
  s.name = "data";
  s.type = FeatureType::kFixedLen;
  s.dtype = DType::kBytes;
  return {s};
}

uint8_t* BigBuffer(int which) {
  static std::unique_ptr<uint8_t[]> bufs[2];
  if (!bufs[which]) {
    bufs[which].reset(new uint8_t[kBigBuffer]);
    std::memset(bufs[which].get(), which + 1, kBigBuffer);  // fault the pages in
  }
  return bufs[which].get();
}

int OpenOrDie(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return fd;
}

void SetCommon(benchmark::State& state, const DataSet& ds) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ds.records));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * ds.stream_bytes));
  state.counters["file_bytes"] = static_cast<double>(ds.file_bytes);
  state.counters["records"] = static_cast<double>(ds.records);
  state.counters["stream_bytes"] = static_cast<double>(ds.stream_bytes);
}

// ---- ceilings ---------------------------------------------------------------------------------

void BM_Memcpy(benchmark::State& state) {
  uint8_t* src = BigBuffer(0);
  uint8_t* dst = BigBuffer(1);
  for (auto _ : state) {
    std::memcpy(dst, src, kBigBuffer);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBigBuffer));
}

// ring = true: the copy goes into a 256 MiB ring (stores reach DRAM, as when filling shared-memory
// slots far larger than the caches); false: into one cache-resident 1 MiB buffer.
void BM_ReadCrcCopy(benchmark::State& state, const DataSet* ds, bool ring) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[kChunk]), small(new uint8_t[kChunk]);
  std::memset(small.get(), 0, kChunk);
  uint8_t* dst = ring ? BigBuffer(1) : small.get();
  const size_t dst_size = ring ? kBigBuffer : kChunk;
  size_t pos = 0;
  uint64_t total = 0;
  for (auto _ : state) {
    total = 0;
    for (const auto& f : ds->files) {
      int fd = OpenOrDie(f);
      uint32_t crc = 0;
      ssize_t n;
      while ((n = ::read(fd, buf.get(), kChunk)) > 0) {
        crc = Crc32cExtend(crc, buf.get(), static_cast<size_t>(n));
        if (pos + static_cast<size_t>(n) > dst_size) pos = 0;
        std::memcpy(dst + pos, buf.get(), static_cast<size_t>(n));
        pos += static_cast<size_t>(n);
        total += static_cast<uint64_t>(n);
      }
      ::close(fd);
      benchmark::DoNotOptimize(crc);
    }
    benchmark::ClobberMemory();
  }
  if (total != ds->file_bytes) state.SkipWithError("read a different number of bytes than the MANIFEST says");
  SetCommon(state, *ds);
}

// Raw inflate of one gzip file with the library alone; returns the uncompressed bytes.
uint64_t InflateFileZlib(const std::string& path, uint8_t* in, uint8_t* out) {
  z_stream z;
  std::memset(&z, 0, sizeof z);
  inflateInit2(&z, 16 + MAX_WBITS);
  int fd = OpenOrDie(path);
  uint64_t total = 0;
  bool eof = false;
  while (true) {
    if (z.avail_in == 0 && !eof) {
      ssize_t n = ::read(fd, in, kChunk);
      eof = n <= 0;
      z.next_in = in;
      z.avail_in = n > 0 ? static_cast<uInt>(n) : 0;
    }
    z.next_out = out;
    z.avail_out = kChunk;
    int rc = inflate(&z, Z_NO_FLUSH);
    total += kChunk - z.avail_out;
    if (rc == Z_STREAM_END) break;
    if ((rc != Z_OK && rc != Z_BUF_ERROR) || (eof && z.avail_in == 0 && z.avail_out == kChunk)) {
      total = 0;
      break;
    }
  }
  inflateEnd(&z);
  ::close(fd);
  return total;
}

#ifdef RINGFEED_HAVE_ISAL
uint64_t InflateFileIsal(const std::string& path, uint8_t* in, uint8_t* out) {
  static inflate_state st;  // ~40 KiB; reused
  isal_inflate_init(&st);
  st.crc_flag = ISAL_GZIP;  // ISA-L parses the gzip header and checks CRC-32 + ISIZE
  int fd = OpenOrDie(path);
  uint64_t total = 0;
  bool eof = false;
  while (true) {
    if (st.avail_in == 0 && !eof) {
      ssize_t n = ::read(fd, in, kChunk);
      eof = n <= 0;
      st.next_in = in;
      st.avail_in = n > 0 ? static_cast<uint32_t>(n) : 0;
    }
    st.next_out = out;
    st.avail_out = kChunk;
    int rc = isal_inflate(&st);
    total += kChunk - st.avail_out;
    if (rc < 0) {
      total = 0;
      break;
    }
    if (st.block_state == ISAL_BLOCK_FINISH) break;
    if (eof && st.avail_in == 0 && st.avail_out == kChunk) {
      total = 0;
      break;
    }
  }
  ::close(fd);
  return total;
}
#endif

void BM_InflateRaw(benchmark::State& state, const DataSet* ds, InflateBackend backend) {
  std::unique_ptr<uint8_t[]> in(new uint8_t[kChunk]), out(new uint8_t[kChunk]);
  std::memset(out.get(), 0, kChunk);
  uint64_t total = 0;
  for (auto _ : state) {
    total = 0;
    for (const auto& f : ds->files) {
#ifdef RINGFEED_HAVE_ISAL
      if (backend == InflateBackend::kIsal) {
        total += InflateFileIsal(f, in.get(), out.get());
        continue;
      }
#endif
      total += InflateFileZlib(f, in.get(), out.get());
    }
    benchmark::ClobberMemory();
  }
  if (total != ds->stream_bytes) state.SkipWithError("inflated size differs from the MANIFEST (or inflate failed)");
  SetCommon(state, *ds);
}

// ---- the reader's own pieces ------------------------------------------------------------------

void BM_InflateStream(benchmark::State& state, const DataSet* ds, InflateBackend backend) {
  std::unique_ptr<uint8_t[]> out(new uint8_t[kChunk]);
  uint64_t total = 0;
  for (auto _ : state) {
    total = 0;
    for (const auto& f : ds->files) {
      int fd = OpenOrDie(f);
      InflateStream s(fd, ds->compression, backend, kChunk);
      size_t produced;
      InflateStream::Status st;
      while ((st = s.Read(out.get(), kChunk, &produced)) == InflateStream::Status::kOk) total += produced;
      ::close(fd);
      if (st != InflateStream::Status::kEnd) {
        state.SkipWithError(s.error().c_str());
        return;
      }
    }
    benchmark::ClobberMemory();
  }
  if (total != ds->stream_bytes) state.SkipWithError("inflated size differs from the MANIFEST");
  SetCommon(state, *ds);
}

// One pass over all files of the data set; on_record(span) for each record. False on error.
template <typename F>
bool ReadAll(benchmark::State& state, const DataSet& ds, InflateBackend backend, F&& on_record) {
  ReaderOptions opt;
  opt.compression = ds.compression;
  opt.inflate = backend;
  Record rec;
  ReadError err;
  for (const auto& f : ds.files) {
    TFRecordReader r(f, opt);
    while (true) {
      auto st = r.Next(&rec, &err);
      if (st == TFRecordReader::Status::kRecord) {
        if (!on_record(rec.data)) return false;
        continue;
      }
      if (st == TFRecordReader::Status::kEnd) break;
      state.SkipWithError(err.message.c_str());
      return false;
    }
  }
  return true;
}

void BM_Reader(benchmark::State& state, const DataSet* ds, InflateBackend backend) {
  uint64_t records = 0, sum = 0;
  for (auto _ : state) {
    records = 0;
    bool ok = ReadAll(state, *ds, backend, [&](std::span<const uint8_t> d) {
      ++records;
      sum += d.size();
      return true;
    });
    if (!ok) return;
  }
  benchmark::DoNotOptimize(sum);
  if (records != ds->records) state.SkipWithError("record count differs from the MANIFEST");
  SetCommon(state, *ds);
}

// Bytes written into the batch's value columns since the last call (for payload_per_second).
uint64_t ColumnBytes(const ExampleBatch& b) {
  uint64_t n = 0;
  for (size_t i = 0; i < b.specs().size(); ++i) n += b.column(i).values.size();
  return n;
}

// A parser and its batch, kept across the calls Google Benchmark makes of one benchmark so that
// the batch's columns are grown once (in the warm-up), as in a long-running loader.
struct ParseFixture {
  ExampleParser parser;
  ExampleBatch batch;
  explicit ParseFixture(const FeatureSpecs& specs) : parser(specs), batch(parser.specs(), g_batch_rows) {}
};

ParseFixture& Fixture(const std::string& key, const FeatureSpecs& specs) {
  static std::map<std::string, std::unique_ptr<ParseFixture>> fixtures;
  auto& f = fixtures[key];
  if (!f) f = std::make_unique<ParseFixture>(specs);
  f->batch.Clear();
  return *f;
}

void BM_ReaderParse(benchmark::State& state, const DataSet* ds, const FeatureSpecs* specs, InflateBackend backend,
                    bool payload_counter) {
  ParseFixture& fx = Fixture(ds->name + "/" + std::string(InflateBackendName(backend)), *specs);
  const ExampleParser& parser = fx.parser;
  ExampleBatch& batch = fx.batch;
  ParseError perr;
  uint64_t records = 0, payload = 0;
  for (auto _ : state) {
    records = 0;
    bool ok = ReadAll(state, *ds, backend, [&](std::span<const uint8_t> d) {
      if (batch.rows() == batch.capacity()) {
        payload += ColumnBytes(batch);
        batch.Clear();
      }
      if (!parser.Parse(d, batch, &perr)) {
        state.SkipWithError(("parse error: " + perr.message).c_str());
        return false;
      }
      ++records;
      return true;
    });
    if (!ok) return;
  }
  payload += ColumnBytes(batch);
  if (records != ds->records) state.SkipWithError("record count differs from the MANIFEST");
  SetCommon(state, *ds);
  if (payload_counter) state.counters["payload_per_second"] = benchmark::Counter(static_cast<double>(payload), benchmark::Counter::kIsRate);
}

void BM_ParseOnly(benchmark::State& state, const DataSet* ds, const FeatureSpecs* specs) {
  // The records of the first file, packed back to back in one arena (as in the reader's window).
  std::vector<uint8_t> arena;
  std::vector<std::pair<size_t, size_t>> recs;
  {
    ReaderOptions opt;
    opt.compression = ds->compression;
    TFRecordReader r(ds->files[0], opt);
    Record rec;
    ReadError err;
    while (r.Next(&rec, &err) == TFRecordReader::Status::kRecord) {
      recs.emplace_back(arena.size(), rec.data.size());
      arena.insert(arena.end(), rec.data.begin(), rec.data.end());
    }
  }
  ParseFixture& fx = Fixture("parse_only/" + ds->name, *specs);
  const ExampleParser& parser = fx.parser;
  ExampleBatch& batch = fx.batch;
  ParseError perr;
  for (auto _ : state) {
    for (auto [off, size] : recs) {
      if (batch.rows() == batch.capacity()) batch.Clear();
      if (!parser.Parse({arena.data() + off, size}, batch, &perr)) {
        state.SkipWithError(("parse error: " + perr.message).c_str());
        return;
      }
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * recs.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * arena.size()));
  state.counters["records"] = static_cast<double>(recs.size());
}

// Reads every file once so that the first measured pass does not pay for the disk.
void WarmPageCache(const DataSet& ds) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[kChunk]);
  for (const auto& f : ds.files) {
    int fd = OpenOrDie(f);
    while (::read(fd, buf.get(), kChunk) > 0) {
    }
    ::close(fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  fs::path root = "/tmp/ringfeed-bench";
  if (const char* env = std::getenv("RINGFEED_BENCH_DIR")) root = env;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--data_dir=", 0) == 0) {
      root = a.substr(11);
    } else if (a.rfind("--batch=", 0) == 0) {
      g_batch_rows = std::stoul(a.substr(8));
    } else {
      std::cerr << "format_bench: unknown argument " << a << "\n"
                << "usage: format_bench [--data_dir=DIR] [--batch=N] [--benchmark_...]\n";
      return 2;
    }
  }

  static std::map<std::string, DataSet> sets;
  for (const char* name : {"taxi_plain", "taxi_gzip", "bytes100k_plain", "text100k_gzip"}) {
    DataSet ds;
    if (LoadDataSet(root, name, &ds)) sets[name] = std::move(ds);
  }
  if (sets.size() != 4 || !fs::exists(root / "taxi.schema")) {
    std::cerr << "format_bench: data sets missing under " << root
              << " (run make_bench_data, or bench/run_format_bench.sh)\n";
    return 1;
  }
  static const FeatureSpecs taxi_specs = LoadTaxiSpecs(root / "taxi.schema");
  static const FeatureSpecs bytes_specs = BytesSpecs();
  for (auto& [name, ds] : sets) WarmPageCache(ds);
  const DataSet* taxi = &sets["taxi_plain"];
  const DataSet* taxi_gz = &sets["taxi_gzip"];
  const DataSet* big = &sets["bytes100k_plain"];
  const DataSet* text_gz = &sets["text100k_gzip"];
  std::vector<std::pair<const char*, InflateBackend>> backends = {{"zlib", InflateBackend::kZlib}};
#ifdef RINGFEED_HAVE_ISAL
  backends.insert(backends.begin(), {"isal", InflateBackend::kIsal});  // built without ISA-L: zlib only
#endif

  // Ceilings.
  benchmark::RegisterBenchmark("ceiling/memcpy_256MiB", BM_Memcpy);
  for (const DataSet* ds : {taxi, big}) {
    benchmark::RegisterBenchmark(("ceiling/read_crc_copy/" + ds->name).c_str(), BM_ReadCrcCopy, ds, true);
    benchmark::RegisterBenchmark(("ceiling/read_crc_copy_cached/" + ds->name).c_str(), BM_ReadCrcCopy, ds, false);
  }
  for (const DataSet* ds : {text_gz, taxi_gz}) {
    for (auto [lib, b] : backends) {
      benchmark::RegisterBenchmark(("ceiling/inflate_raw/" + ds->name + "/" + lib).c_str(), BM_InflateRaw, ds, b);
    }
  }
  // a) taxi plain.
  benchmark::RegisterBenchmark("parse_only/taxi", BM_ParseOnly, taxi, &taxi_specs);
  benchmark::RegisterBenchmark("reader/taxi_plain", BM_Reader, taxi, InflateBackend::kDefault);
  benchmark::RegisterBenchmark("reader_parse/taxi_plain", BM_ReaderParse, taxi, &taxi_specs, InflateBackend::kDefault,
                               false);
  // b) 100 KiB random bytes, plain.
  benchmark::RegisterBenchmark("reader/bytes100k_plain", BM_Reader, big, InflateBackend::kDefault);
  benchmark::RegisterBenchmark("reader_parse/bytes100k_plain", BM_ReaderParse, big, &bytes_specs,
                               InflateBackend::kDefault, true);
  // c) 100 KiB text, GZIP; d) taxi GZIP.
  for (auto [ds, specs] : {std::pair{text_gz, &bytes_specs}, std::pair{taxi_gz, &taxi_specs}}) {
    for (auto [lib, b] : backends) {
      const std::string suffix = ds->name + "/" + lib;
      benchmark::RegisterBenchmark(("inflate_stream/" + suffix).c_str(), BM_InflateStream, ds, b);
      benchmark::RegisterBenchmark(("reader/" + suffix).c_str(), BM_Reader, ds, b);
      benchmark::RegisterBenchmark(("reader_parse/" + suffix).c_str(), BM_ReaderParse, ds, specs, b,
                                   ds == text_gz);
    }
  }

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
