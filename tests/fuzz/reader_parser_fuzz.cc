// libFuzzer target: TFRecordReader (plain / GZIP / ZLIB / auto, ISA-L or zlib inflate, tiny
// buffers) feeding ExampleParser into an ExampleBatch, the way the daemon's data path does.
//
// Input layout (see README.md; tests/fuzz/make_corpus.cc writes seeds in this layout):
//   byte 0  bits 0-1  compression        0 none, 1 gzip, 2 zlib, 3 auto
//           bit  2    inflate backend    0 ISA-L, 1 zlib
//           bits 3-4  feature spec       0 taxi-like, 1 raw image, 2 VarLen only, 3 edge shapes
//           bit  5    verify_crc = false (lets mutated payloads reach the parser)
//           bits 6-7  batch capacity     1, 2, 3, 8
//   byte 1            buffer_bytes       64 + 16 * byte, at most 4096
//   byte 2  bits 0-1  max_record_bytes   4 MiB, 16, 200, 1000
//           bits 2-7  with byte 2 >= 0xf0 and byte 1 & 3 == 3 (one input in 64) the file is also
//                     read with queued reads: 2 + (bits 2-3) in flight, blocks of 1 + 8 * byte 1
//   byte 3...         the file contents, written to a memfd read through /proc/self/fd/N
//
// Besides the sanitizers, every run checks invariants and aborts on a violation:
//   reader: offsets strictly increase, only kCorruptedData/kRecordTooLarge are recoverable,
//           errors are sticky (kEnd afterwards), records_read() counts records; for plain
//           files the record/error sequence equals a ten-line reference walk of the framing;
//           for GZIP/ZLIB, the same records and errors with buffer_bytes 64 or 4096 with zlib
//           (with ISA-L the same records where CRCs are checked), and when both backends read
//           the file without error they return the same records;
//   parser: a failed Parse leaves the batch exactly as it was (rows and column sizes), a
//           successful one adds one row whose row_splits / value_offsets are consistent; every
//           row equals the same record parsed alone into a fresh batch, and committed rows are
//           never changed by later (failed or successful) parses.
// RINGFEED_FUZZ_VERBOSE=1 prints what each input did (records, errors, parses) to stderr.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "format/compression.h"
#include "format/crc32c.h"
#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/feature_spec.h"
#include "format/tfrecord_reader.h"

namespace {

using namespace ringfeed;

constexpr size_t kHeaderBytes = 3;
constexpr uint64_t kMaxRecordChoices[4] = {uint64_t{4} << 20, 16, 200, 1000};
constexpr size_t kCapacityChoices[4] = {1, 2, 3, 8};

bool Verbose() {
  static const bool verbose = [] {
    const char* v = std::getenv("RINGFEED_FUZZ_VERBOSE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return verbose;
}

[[noreturn]] void Violation(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "INVARIANT VIOLATED: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
  std::abort();
}
#define CHECK(cond, ...)                                             \
  do {                                                               \
    if (!(cond)) Violation(#cond " (" __FILE__ ")" __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Feature specs (fixed; the seeds in corpus/ hold Examples written for them).

FeatureSpec Fixed(std::string name, DType dtype, std::vector<int64_t> shape = {}) {
  FeatureSpec s;
  s.name = std::move(name);
  s.type = FeatureType::kFixedLen;
  s.dtype = dtype;
  s.shape = std::move(shape);
  return s;
}
FeatureSpec VarLen(std::string name, DType dtype) {
  FeatureSpec s;
  s.name = std::move(name);
  s.type = FeatureType::kVarLen;
  s.dtype = dtype;
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

std::vector<FeatureSpecs> MakeSpecs() {
  std::vector<FeatureSpecs> all(4);
  // 0: taxi-like: FixedLen scalars with and without defaults, VarLen of every dtype, and
  //    FixedLen shapes with broadcast and full defaults.
  all[0] = {
      VarLen("company", DType::kBytes),
      VarLen("dropoff_census_tract", DType::kInt64),
      VarLen("dropoff_latitude", DType::kFloat32),
      Fixed("fare", DType::kFloat32),
      WithBytes(Fixed("payment_type", DType::kBytes), {"Unknown"}),
      WithInt(Fixed("pickup_community_area", DType::kInt64), {-1}),
      WithFloat(Fixed("tips", DType::kFloat32), {0.0f}),
      Fixed("trip_start_hour", DType::kInt64),
      WithFloat(Fixed("pickup_lat_lon", DType::kFloat32, {2}), {41.8f, -87.6f}),
      WithInt(Fixed("trip_seconds_hist", DType::kInt64, {3}), {0}),
      WithBytes(Fixed("tags", DType::kBytes, {2}), {"a", "bc"}),
  };
  // 1: MNIST-like: 784 raw bytes decoded as uint8 [28, 28, 1], label with a default.
  all[1] = {
      Raw(Fixed("image", DType::kUInt8, {28, 28, 1})),
      WithInt(Fixed("label", DType::kInt64), {-1}),
  };
  // 2: VarLen only.
  all[2] = {
      VarLen("ids", DType::kInt64),
      VarLen("weights", DType::kFloat32),
      VarLen("tokens", DType::kBytes),
  };
  // 3: edge shapes: FixedLen without defaults, a zero-size shape, multi-dim, raw int16 and
  //    float64, a FixedLen bytes pair, a one-byte key and an empty key.
  all[3] = {
      Fixed("vec", DType::kInt64, {3}),
      Fixed("mat", DType::kFloat32, {2, 2}),
      Fixed("empty", DType::kFloat32, {0}),
      Raw(Fixed("raw16", DType::kInt16, {4})),
      Raw(Fixed("raw_f64", DType::kFloat64, {1, 2})),
      Fixed("pair", DType::kBytes, {2}),
      WithFloat(Fixed("k", DType::kFloat32), {1.5f}),
      VarLen("", DType::kInt64),
  };
  return all;
}

struct Parsers {
  std::vector<FeatureSpecs> specs = MakeSpecs();
  std::vector<ExampleParser> parsers;
  Parsers() {
    for (const FeatureSpecs& s : specs) parsers.emplace_back(s);
  }
};

const Parsers& GetParsers() {
  static const Parsers* p = new Parsers();  // never destroyed: outlives every batch
  return *p;
}

// ---------------------------------------------------------------------------------------------
// Batch invariants.

size_t ValueCount(const FeatureSpec& spec, const Column& c) {
  if (spec.dtype == DType::kBytes) return c.value_offsets.size() - 1;
  return c.values.size() / DTypeSize(spec.dtype);
}

void CheckBatch(const ExampleBatch& b) {
  const FeatureSpecs& specs = b.specs();
  CHECK(b.rows() <= b.capacity());
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& s = specs[i];
    const Column& c = b.column(i);
    const bool fixed = s.type == FeatureType::kFixedLen;
    const size_t n = fixed ? static_cast<size_t>(s.NumElements()) : 0;
    if (s.dtype == DType::kBytes) {
      CHECK(!c.value_offsets.empty(), s.name);
      CHECK(c.value_offsets.front() == 0, s.name);
      for (size_t k = 1; k < c.value_offsets.size(); ++k) {
        CHECK(c.value_offsets[k - 1] <= c.value_offsets[k], s.name);
      }
      CHECK(static_cast<size_t>(c.value_offsets.back()) == c.values.size(), s.name);
      if (fixed) CHECK(c.value_offsets.size() == b.rows() * n + 1, s.name);
    } else {
      CHECK(c.value_offsets.empty(), s.name);
      const size_t elem = DTypeSize(s.dtype);
      CHECK(c.values.size() % elem == 0, s.name);
      if (fixed) CHECK(c.values.size() == b.capacity() * n * elem, s.name);
    }
    if (fixed) {
      CHECK(c.row_splits.empty(), s.name);
    } else {
      CHECK(c.row_splits.size() == b.rows() + 1, s.name);
      CHECK(c.row_splits.front() == 0, s.name);
      for (size_t k = 1; k < c.row_splits.size(); ++k) CHECK(c.row_splits[k - 1] <= c.row_splits[k], s.name);
      CHECK(static_cast<size_t>(c.row_splits.back()) == ValueCount(s, c), s.name);
    }
  }
}

// Sizes of every column vector: a failed Parse must leave them (and rows()) unchanged.
std::vector<size_t> Shape(const ExampleBatch& b) {
  std::vector<size_t> out{b.rows()};
  for (size_t i = 0; i < b.specs().size(); ++i) {
    const Column& c = b.column(i);
    out.push_back(c.values.size());
    out.push_back(c.value_offsets.size());
    out.push_back(c.row_splits.size());
  }
  return out;
}

// Row `r` of the batch, column by column, as one byte string (lengths prefixed).
std::string RowBytes(const ExampleBatch& b, size_t r) {
  std::string out;
  auto put_len = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  auto put = [&](const uint8_t* p, size_t n) {
    put_len(n);
    out.append(reinterpret_cast<const char*>(p), n);
  };
  for (size_t i = 0; i < b.specs().size(); ++i) {
    const FeatureSpec& s = b.specs()[i];
    const Column& c = b.column(i);
    size_t first, last;  // value (or string) range of the row
    if (s.type == FeatureType::kFixedLen) {
      const size_t n = static_cast<size_t>(s.NumElements());
      first = r * n;
      last = first + n;
    } else {
      first = static_cast<size_t>(c.row_splits[r]);
      last = static_cast<size_t>(c.row_splits[r + 1]);
    }
    put_len(last - first);
    if (s.dtype == DType::kBytes) {
      for (size_t k = first; k < last; ++k) {
        const size_t from = static_cast<size_t>(c.value_offsets[k]);
        const size_t to = static_cast<size_t>(c.value_offsets[k + 1]);
        put(c.values.data() + from, to - from);
      }
    } else {
      const size_t elem = DTypeSize(s.dtype);
      CHECK(last * elem <= c.values.size(), s.name);
      put(c.values.data() + first * elem, (last - first) * elem);
    }
  }
  return out;
}

// Parses records into one batch of the chosen capacity, checking the invariants above.
class ParseChecker {
 public:
  ParseChecker(const ExampleParser& parser, size_t capacity)
      : parser_(parser), batch_(parser.specs(), capacity), solo_(parser.specs(), 1) {}

  void Add(std::span<const uint8_t> record) {
    if (batch_.rows() == batch_.capacity()) Flush();
    const std::vector<size_t> before = Shape(batch_);
    ParseError error;
    const bool ok = parser_.Parse(record, batch_, &error);
    CheckBatch(batch_);

    // The same record alone, into a fresh (cleared) one-row batch.
    solo_.Clear();
    ParseError solo_error;
    const bool solo_ok = parser_.Parse(record, solo_, &solo_error);
    CheckBatch(solo_);
    CHECK(ok == solo_ok);

    if (ok) {
      ++parsed_;
      CHECK(batch_.rows() == before[0] + 1);
      CHECK(solo_.rows() == 1);
      std::string row = RowBytes(batch_, batch_.rows() - 1);
      CHECK(row == RowBytes(solo_, 0), "row differs from the same record parsed alone");
      rows_.push_back(std::move(row));
    } else {
      ++failed_;
      CHECK(Shape(batch_) == before, "a failed Parse changed the batch: " + error.message);
      CHECK(solo_.rows() == 0);
      CHECK(!error.message.empty());
      CHECK(error.key == solo_error.key && error.message == solo_error.message);
      if (Verbose() && failed_ <= 3) std::fprintf(stderr, "  parse error: %s\n", error.message.c_str());
    }
    // Committed rows never change.
    CHECK(rows_.size() == batch_.rows());
    for (size_t r = 0; r < rows_.size(); ++r) CHECK(RowBytes(batch_, r) == rows_[r], "committed row changed");
  }

  void Flush() {
    batch_.Clear();
    rows_.clear();
    CHECK(batch_.rows() == 0);
    CheckBatch(batch_);
  }

  size_t parsed() const { return parsed_; }
  size_t failed() const { return failed_; }

 private:
  const ExampleParser& parser_;
  ExampleBatch batch_;
  ExampleBatch solo_;
  std::vector<std::string> rows_;  // committed rows of batch_, as RowBytes
  size_t parsed_ = 0, failed_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reader.

struct Event {
  bool is_record = false;
  ReadErrorKind kind = ReadErrorKind::kIo;  // errors only
  uint64_t index = 0;
  uint64_t offset = 0;
  std::string data;  // records only
  bool operator==(const Event&) const = default;
};

struct ReadResult {
  std::vector<Event> events;
  bool clean = false;  // ended with kEnd, no error of any kind
  Compression compression = Compression::kAuto;
};

// Reads the whole file, continuing past recoverable errors; hands each record to `on_record`.
template <typename OnRecord>
ReadResult ReadAll(const std::string& path, const ReaderOptions& options, OnRecord&& on_record) {
  ReadResult result;
  TFRecordReader reader(path, options);
  uint64_t last_offset = 0, records = 0, next_index = 0;
  bool any_error = false;
  // After a too-large record the next call skips it: it then reports either what follows it
  // (index + 1, at a later offset) or a truncation at the skipped record itself.
  bool skipping = false;
  uint64_t skip_index = 0, skip_offset = 0;
  auto check_position = [&](uint64_t index, uint64_t offset, bool is_error, ReadErrorKind kind) {
    if (!skipping) {
      CHECK(index == next_index);
      CHECK(offset == last_offset);
      return;
    }
    skipping = false;
    if (is_error && index == skip_index) {
      CHECK(offset == skip_offset);
      CHECK(kind == ReadErrorKind::kTruncatedRecord || kind == ReadErrorKind::kDecompression || kind == ReadErrorKind::kIo);
      return;
    }
    CHECK(index == skip_index + 1);
    CHECK(offset > skip_offset);
  };
  while (true) {
    Record record;
    ReadError error;
    const TFRecordReader::Status st = reader.Next(&record, &error);
    if (st == TFRecordReader::Status::kEnd) break;
    if (st == TFRecordReader::Status::kRecord) {
      ++records;
      check_position(record.index, record.offset, false, ReadErrorKind::kIo);
      CHECK(record.data.size() <= options.max_record_bytes);
      CHECK(reader.offset() == record.offset + kRecordHeaderBytes + record.data.size() + kRecordFooterBytes);
      CHECK(reader.records_read() == records);
      Event e;
      e.is_record = true;
      e.index = record.index;
      e.offset = record.offset;
      e.data.assign(reinterpret_cast<const char*>(record.data.data()), record.data.size());
      result.events.push_back(std::move(e));
      on_record(record.data);
      next_index = record.index + 1;
      last_offset = reader.offset();
      continue;
    }
    // An error.
    any_error = true;
    CHECK(!error.message.empty());
    CHECK(error.file == path);
    CHECK(error.message.find(path) != std::string::npos);
    check_position(error.record_index, error.offset, true, error.kind);
    const bool may_recover =
        error.kind == ReadErrorKind::kCorruptedData || error.kind == ReadErrorKind::kRecordTooLarge;
    if (error.kind == ReadErrorKind::kRecordTooLarge && !error.recoverable) {
      // A length that the plain file is too short to hold ends the file at once.
      CHECK(reader.compression() == Compression::kNone, error.message);
      CHECK(error.message.find("the length is corrupt, or the file was cut short") != std::string::npos, error.message);
    } else {
      CHECK(error.recoverable == may_recover, error.message);
    }
    Event e;
    e.kind = error.kind;
    e.index = error.record_index;
    e.offset = error.offset;
    result.events.push_back(e);
    if (Verbose()) std::fprintf(stderr, "  read error: %s\n", error.message.c_str());
    if (!error.recoverable) {
      // Sticky: the file is over.
      CHECK(reader.Next(&record, &error) == TFRecordReader::Status::kEnd);
      break;
    }
    if (error.kind == ReadErrorKind::kRecordTooLarge) {
      skipping = true;
      skip_index = error.record_index;
      skip_offset = error.offset;
      continue;
    }
    // Recoverable: the reader moved past the bad record (never re-reads the same offset).
    CHECK(reader.offset() >= error.offset + kRecordHeaderBytes + kRecordFooterBytes, error.message);
    next_index = error.record_index + 1;
    last_offset = reader.offset();
  }
  Record record;
  ReadError error;
  CHECK(reader.Next(&record, &error) == TFRecordReader::Status::kEnd);  // kEnd is sticky too
  CHECK(reader.records_read() == records);
  result.clean = !any_error;
  result.compression = reader.compression();
  CHECK(result.compression != Compression::kAuto);  // resolved by the first Next()
  return result;
}

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// Reference walk of a plain TFRecord file: the events TFRecordReader must produce. Offsets past
// a too-large record saturate at 2^64 - 1 rather than wrap.
std::vector<Event> ReferencePlain(const uint8_t* p, size_t size, const ReaderOptions& o) {
  std::vector<Event> out;
  uint64_t pos = 0, index = 0;
  auto error = [&](ReadErrorKind kind) {
    Event e;
    e.kind = kind;
    e.index = index;
    e.offset = pos;
    out.push_back(e);
  };
  while (pos < size) {
    const uint64_t left = size - pos;
    if (left < kRecordHeaderBytes) return error(ReadErrorKind::kTruncatedRecord), out;
    uint64_t length;
    uint32_t length_crc;
    std::memcpy(&length, p + pos, 8);
    std::memcpy(&length_crc, p + pos + 8, 4);
    if (o.verify_crc && MaskedCrc32c(p + pos, 8) != length_crc) return error(ReadErrorKind::kCorruptedLength), out;
    if (length > o.max_record_bytes) {
      error(ReadErrorKind::kRecordTooLarge);
      const uint64_t skip = SatAdd(length, kRecordHeaderBytes + kRecordFooterBytes);
      // A file too short to hold the record: that one error ends it (nothing to skip to).
      if (skip > left) return out;
      ++index;
      pos = SatAdd(pos, skip);  // offset of the next record
      continue;
    }
    const uint64_t total = kRecordHeaderBytes + length + kRecordFooterBytes;
    if (total > left) return error(ReadErrorKind::kTruncatedRecord), out;
    const uint8_t* data = p + pos + kRecordHeaderBytes;
    uint32_t data_crc;
    std::memcpy(&data_crc, data + length, 4);
    if (o.verify_crc && MaskedCrc32c(data, length) != data_crc) {
      error(ReadErrorKind::kCorruptedData);
    } else {
      Event e;
      e.is_record = true;
      e.index = index;
      e.offset = pos;
      e.data.assign(reinterpret_cast<const char*>(data), length);
      out.push_back(std::move(e));
    }
    ++index;
    pos += total;
  }
  return out;
}

std::string Describe(const std::vector<Event>& events) {
  std::string s;
  for (const Event& e : events) {
    s += e.is_record ? "record" : std::string(ReadErrorKindName(e.kind));
    s += " #" + std::to_string(e.index) + " @" + std::to_string(e.offset);
    if (e.is_record) s += " (" + std::to_string(e.data.size()) + " B)";
    s += "; ";
  }
  return s;
}

// The fuzz input's file, as an anonymous memory file that TFRecordReader opens by path.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("ringfeed-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) Violation("memfd_create failed");
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) Violation("write to memfd failed");
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return -1;  // not added to the corpus
  const uint8_t mode = data[0];
  static constexpr Compression kCompressions[4] = {Compression::kNone, Compression::kGzip, Compression::kZlib,
                                                   Compression::kAuto};
  ReaderOptions options;
  options.compression = kCompressions[mode & 3];
  options.inflate = (mode & 4) ? InflateBackend::kZlib : InflateBackend::kIsal;
  const size_t spec = (mode >> 3) & 3;
  options.verify_crc = (mode & 0x20) == 0;
  const size_t capacity = kCapacityChoices[mode >> 6];
  options.buffer_bytes = std::min<size_t>(64 + 16 * size_t{data[1]}, 4096);
  options.max_record_bytes = kMaxRecordChoices[data[2] & 3];

  const uint8_t* file = data + kHeaderBytes;
  const size_t file_size = size - kHeaderBytes;
  MemFile mem(file, file_size);

  const Parsers& parsers = GetParsers();
  ParseChecker checker(parsers.parsers[spec], capacity);
  ReadResult main = ReadAll(mem.path(), options, [&](std::span<const uint8_t> r) { checker.Add(r); });
  checker.Flush();

  if (Verbose()) {
    std::fprintf(stderr, "compression %s (asked %s), inflate %s, spec %zu, verify_crc %d, buffer %zu, max %llu: %s\n",
                 std::string(CompressionName(main.compression)).c_str(),
                 std::string(CompressionName(options.compression)).c_str(),
                 std::string(InflateBackendName(options.inflate)).c_str(), spec, options.verify_crc ? 1 : 0,
                 options.buffer_bytes, static_cast<unsigned long long>(options.max_record_bytes),
                 Describe(main.events).substr(0, 400).c_str());
    std::fprintf(stderr, "  %zu parsed, %zu failed\n", checker.parsed(), checker.failed());
  }

  // Plain framing: exactly the reference walk. (An empty file has zero records whatever its
  // declared or detected compression.)
  if (main.compression == Compression::kNone || (main.compression == Compression::kAuto && file_size == 0)) {
    std::vector<Event> want = ReferencePlain(file, file_size, options);
    CHECK(main.events == want, "reader: " + Describe(main.events) + "\nreference: " + Describe(want));
    // Queued reads (io_uring, several blocks in flight; records read from the blocks in place,
    // those across a block's end put together): the same walk. Where io_uring is not
    // available the reader reads as above. One input in 64 (data[2] >= 0xf0, data[1] & 3 == 3):
    // a ring per file costs ~4 ms (its kernel workers start and stop), 60x a plain read.
    if (data[2] >= 0xf0 && (data[1] & 3) == 3) {
      ReaderOptions queued = options;  // `auto` takes the first bytes from the first block
      queued.reads_in_flight = 2 + (data[2] >> 2 & 3);
      queued.read_block_bytes = 1 + 8 * size_t{data[1]};
      ReadResult q = ReadAll(mem.path(), queued, [](std::span<const uint8_t>) {});
      CHECK(q.events == want, "queued reader (" + std::to_string(queued.reads_in_flight) + " x " +
                                  std::to_string(queued.read_block_bytes) + " bytes): " + Describe(q.events) +
                                  "\nreference: " + Describe(want));
    }
  }
  if (file_size == 0) CHECK(main.events.empty() && main.clean);

  // Compressed: how the input is cut up (buffer_bytes; queued blocks) changes nothing with zlib
  // (every byte inflated before a deflate error comes out, whatever the buffer). ISA-L's fast
  // path, given more input at once, can decode on past an invalid distance code before it fails:
  // bytes the records' CRCs then reject, so with CRCs checked its records are the same, its
  // errors may differ. The other inflate backend must agree whenever both read the file cleanly.
  if (main.compression == Compression::kGzip || main.compression == Compression::kZlib) {
    auto records = [](const std::vector<Event>& events) {
      std::vector<Event> only;
      for (const Event& e : events) {
        if (e.is_record) only.push_back(e);
      }
      return only;
    };
    auto check_recut = [&](const ReaderOptions& recut, const std::string& how) {
      const ReadResult third = ReadAll(mem.path(), recut, [](std::span<const uint8_t>) {});
      const bool same = options.inflate == InflateBackend::kZlib ? main.events == third.events
                        : options.verify_crc                     ? records(main.events) == records(third.events)
                                                                 : true;
      CHECK(same, std::string(InflateBackendName(options.inflate)) + ", buffer_bytes " +
                      std::to_string(options.buffer_bytes) + ": " + Describe(main.events) + "\n" + how + ": " +
                      Describe(third.events));
    };
    ReaderOptions recut = options;
    recut.compression = main.compression;
    recut.buffer_bytes = options.buffer_bytes == 64 ? 4096 : 64;
    check_recut(recut, "buffer_bytes " + std::to_string(recut.buffer_bytes));
    // Queued reads (the inflater's input taken from io_uring blocks), as seldom as for plain files.
    if (data[2] >= 0xf0 && (data[1] & 3) == 3) {
      ReaderOptions queued = options;
      queued.compression = main.compression;
      queued.reads_in_flight = 2 + (data[2] >> 2 & 3);
      queued.read_block_bytes = 1 + 8 * size_t{data[1]};
      check_recut(queued, "queued reader (" + std::to_string(queued.reads_in_flight) + " x " +
                              std::to_string(queued.read_block_bytes) + " bytes)");
    }
    ReaderOptions other = options;
    other.compression = main.compression;
    other.inflate = options.inflate == InflateBackend::kZlib ? InflateBackend::kIsal : InflateBackend::kZlib;
    ReadResult second = ReadAll(mem.path(), other, [](std::span<const uint8_t>) {});
    if (main.clean && second.clean) {
      CHECK(main.events == second.events,
            std::string(InflateBackendName(options.inflate)) + ": " + Describe(main.events) + "\n" +
                std::string(InflateBackendName(other.inflate)) + ": " + Describe(second.events));
    }
  }
  return 0;
}
