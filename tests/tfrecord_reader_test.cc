// TFRecordReader against files built here: framing, CRCs, every compression and inflate backend,
// tiny buffers, and the reader/decompression cases of ../shared/reference/bad-inputs.md.
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "format/crc32c.h"
#include "format/read_queue.h"
#include "format/tfrecord_reader.h"
#include "format/tfrecord_writer.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;

namespace {

struct Outcome {
  std::vector<std::string> records;
  std::vector<uint64_t> offsets;
  std::vector<ReadError> errors;
};

// Gives NextInto a fresh buffer per record and remembers where, so a test can check that a
// record's bytes are in the caller's memory (not the reader's window).
class TestAllocator final : public RecordAllocator {
 public:
  uint8_t* Allocate(uint64_t length) override {
    buffers_.emplace_back(std::make_unique<uint8_t[]>(length + 1));
    lengths_.push_back(length);
    return buffers_.back().get();
  }
  const uint8_t* last() const { return buffers_.empty() ? nullptr : buffers_.back().get(); }
  const std::vector<uint64_t>& lengths() const { return lengths_; }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
  std::vector<uint64_t> lengths_;
};

// How ReadAll reads: Next (in the window), NextInto with its default direct-read threshold, or
// NextInto reading every record not wholly in the window straight into the allocator's memory.
enum class Mode { kNext, kNextInto, kNextIntoDirect };

// Reads the whole file, skipping recoverable errors (skip policy) and stopping at fatal ones.
Outcome ReadAllIn(Mode mode, const std::string& path, ReaderOptions options) {
  Outcome out;
  if (mode == Mode::kNextIntoDirect) options.direct_read_min_bytes = 1;
  TFRecordReader reader(path, options);
  TestAllocator allocator;
  Record record;
  ReadError error;
  for (int guard = 0; guard < 1000000; ++guard) {
    auto status = mode == Mode::kNext ? reader.Next(&record, &error) : reader.NextInto(allocator, &record, &error);
    if (status == TFRecordReader::Status::kRecord && mode != Mode::kNext) {
      REQUIRE(record.data.data() == allocator.last());
      REQUIRE(allocator.lengths().back() == record.data.size());
    }
    if (status == TFRecordReader::Status::kEnd) return out;
    if (status == TFRecordReader::Status::kError) {
      out.errors.push_back(error);
      if (!error.recoverable) {
        REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kEnd);
        return out;
      }
      continue;
    }
    out.records.emplace_back(reinterpret_cast<const char*>(record.data.data()), record.data.size());
    out.offsets.push_back(record.offset);
  }
  FAIL("reader did not terminate");
  return out;
}

// ReadAllIn with every mode; they must agree on every record and every error (kind, position,
// message), which is what NextInto promises.
Outcome ReadAll(const std::string& path, ReaderOptions options = {}) {
  Outcome out = ReadAllIn(Mode::kNext, path, options);
  for (Mode mode : {Mode::kNextInto, Mode::kNextIntoDirect}) {
    INFO("NextInto" << (mode == Mode::kNextIntoDirect ? " (direct reads from 1 byte)" : ""));
    const Outcome other = ReadAllIn(mode, path, options);
    INFO("Next: " << out.records.size() << " records, then " << (out.errors.empty() ? "no error" : out.errors.back().message));
    INFO("NextInto: " << other.records.size() << " records, then "
                      << (other.errors.empty() ? "no error" : other.errors.back().message));
    REQUIRE(other.records.size() == out.records.size());
    REQUIRE(other.records == out.records);
    REQUIRE(other.offsets == out.offsets);
    REQUIRE(other.errors.size() == out.errors.size());
    for (size_t i = 0; i < out.errors.size(); ++i) {
      CHECK(other.errors[i].kind == out.errors[i].kind);
      CHECK(other.errors[i].message == out.errors[i].message);
      CHECK(other.errors[i].record_index == out.errors[i].record_index);
      CHECK(other.errors[i].offset == out.errors[i].offset);
      CHECK(other.errors[i].recoverable == out.errors[i].recoverable);
      CHECK(other.errors[i].file == out.errors[i].file);
    }
  }
  return out;
}

std::vector<std::string> TenRecords() {
  std::vector<std::string> r;
  for (int i = 0; i < 10; ++i) r.push_back("record-" + std::to_string(i) + std::string(static_cast<size_t>(i) * 37, 'a' + i));
  return r;
}

// Ten records of 1000 bytes, record i all 'a' + i: each frame is 1016 bytes.
std::vector<std::string> ThousandByteRecords() {
  std::vector<std::string> records;
  for (int i = 0; i < 10; ++i) records.push_back(std::string(1000, static_cast<char>('a' + i)));
  return records;
}

uint64_t OffsetOf(const std::vector<std::string>& records, size_t index) {
  uint64_t off = 0;
  for (size_t i = 0; i < index; ++i) off += 16 + records[i].size();
  return off;
}

std::string LengthHeader(uint64_t length) {
  std::string h(12, '\0');
  std::memcpy(h.data(), &length, 8);
  uint32_t crc = MaskedCrc32c(h.data(), 8);
  std::memcpy(h.data() + 8, &crc, 4);
  return h;
}

}  // namespace

TEST_CASE("plain, GZIP and ZLIB round-trip through every buffer size and backend") {
  TempDir dir;
  std::vector<std::string> records = {"", "x", std::string(1000, 'q'), std::string(100000, 'z'), "tail"};
  for (int i = 0; i < 50; ++i) records.push_back(std::string(static_cast<size_t>(i * 13), static_cast<char>(i)));
  const std::string plain = FrameRecords(records);
  WriteFile(dir.file("p.tfrecord"), plain);
  WriteFile(dir.file("g.tfrecord.gz"), GzipBytes(plain));
  WriteFile(dir.file("z.tfrecord.zz"), ZlibBytes(plain));

  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    for (size_t buffer : {size_t{64}, size_t{100}, size_t{4096}, size_t{1} << 20}) {
      for (auto [name, declared] : std::vector<std::pair<std::string, Compression>>{
               {"p.tfrecord", Compression::kNone}, {"g.tfrecord.gz", Compression::kGzip},
               {"z.tfrecord.zz", Compression::kZlib}, {"p.tfrecord", Compression::kAuto},
               {"g.tfrecord.gz", Compression::kAuto}, {"z.tfrecord.zz", Compression::kAuto}}) {
        INFO(name << " declared " << CompressionName(declared) << " buffer " << buffer << " backend "
                  << InflateBackendName(backend));
        ReaderOptions o;
        o.compression = declared;
        o.buffer_bytes = buffer;
        o.inflate = backend;
        Outcome out = ReadAll(dir.file(name), o);
        REQUIRE(out.errors.empty());
        REQUIRE(out.records == records);
        CHECK(out.offsets[3] == OffsetOf(records, 3));
      }
    }
  }
}

TEST_CASE("bad input 1: a flipped payload byte fails or skips exactly that record") {
  TempDir dir;
  auto records = TenRecords();
  std::string bytes = FrameRecords(records);
  const uint64_t off4 = OffsetOf(records, 4);
  bytes[off4 + 12 + 3] ^= 0x01;  // a payload byte of the fifth record (index 4)
  WriteFile(dir.file("flip.tfrecord"), bytes);

  TFRecordReader reader(dir.file("flip.tfrecord"));
  Record rec;
  ReadError err;
  for (uint64_t i = 0; i < 4; ++i) {
    REQUIRE(reader.Next(&rec, &err) == TFRecordReader::Status::kRecord);
    CHECK(rec.index == i);
  }
  REQUIRE(reader.Next(&rec, &err) == TFRecordReader::Status::kError);
  CHECK(err.kind == ReadErrorKind::kCorruptedData);
  CHECK(err.recoverable);
  CHECK(err.record_index == 4);
  CHECK(err.offset == off4);
  CHECK_THAT(err.message, Catch::Contains("flip.tfrecord") && Catch::Contains("record 4") &&
                              Catch::Contains("byte " + std::to_string(off4)) && Catch::Contains("data CRC"));
  // Skip policy: the caller goes on and gets records 5..9, never the same offset again.
  for (uint64_t i = 5; i < 10; ++i) {
    REQUIRE(reader.Next(&rec, &err) == TFRecordReader::Status::kRecord);
    CHECK(rec.index == i);
    CHECK(std::string(reinterpret_cast<const char*>(rec.data.data()), rec.data.size()) == records[i]);
  }
  CHECK(reader.Next(&rec, &err) == TFRecordReader::Status::kEnd);
  CHECK(reader.records_read() == 9);
}

TEST_CASE("bad input 2: truncation inside a header, a payload and a data CRC") {
  TempDir dir;
  auto records = TenRecords();
  const std::string bytes = FrameRecords(records);
  const uint64_t off7 = OffsetOf(records, 7);
  struct Cut {
    const char* what;
    uint64_t at;
    uint64_t expected;
  } cuts[] = {
      {"inside the header", off7 + 5, 12},
      {"3 bytes into the payload", off7 + 12 + 3, 16 + records[7].size()},
      {"2 bytes into the data CRC", off7 + 12 + records[7].size() + 2, 16 + records[7].size()},
  };
  for (const Cut& cut : cuts) {
    for (auto compression : {Compression::kNone, Compression::kGzip}) {
      INFO(cut.what << " " << CompressionName(compression));
      std::string truncated = bytes.substr(0, cut.at);
      WriteFile(dir.file("cut"), compression == Compression::kGzip ? GzipBytes(truncated) : truncated);
      ReaderOptions o;
      o.buffer_bytes = 64;
      Outcome out = ReadAll(dir.file("cut"), o);
      REQUIRE(out.records.size() == 7);
      REQUIRE(out.errors.size() == 1);
      const ReadError& e = out.errors[0];
      CHECK(e.kind == ReadErrorKind::kTruncatedRecord);
      CHECK(e.record_index == 7);
      CHECK(e.offset == off7);
      CHECK_THAT(e.message, Catch::Contains("expected " + std::to_string(cut.expected)) &&
                                Catch::Contains(std::to_string(cut.at - off7) + " present"));
      if (compression == Compression::kGzip) CHECK_THAT(e.message, Catch::Contains("uncompressed stream"));
    }
  }
}

TEST_CASE("bad input 3: zero-byte files have zero records, whatever the declared compression") {
  TempDir dir;
  WriteFile(dir.file("empty"), "");
  for (auto c : {Compression::kAuto, Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    ReaderOptions o;
    o.compression = c;
    Outcome out = ReadAll(dir.file("empty"), o);
    CHECK(out.records.empty());
    CHECK(out.errors.empty());
  }
}

TEST_CASE("bad input 4: absurd lengths are rejected before allocating; text files are not TFRecord") {
  TempDir dir;
  // A length near 2^64 whose length CRC is valid, followed by a good record (unreachable).
  WriteFile(dir.file("huge.tfrecord"), FrameRecord("ok") + LengthHeader(~uint64_t{0} - 5) + "garbage");
  Outcome out = ReadAll(dir.file("huge.tfrecord"));
  REQUIRE(out.records.size() == 1);
  // The file is too short to hold it: one error, then the end (no skip into the end of the file).
  REQUIRE(out.errors.size() == 1);
  CHECK(out.errors[0].kind == ReadErrorKind::kRecordTooLarge);
  CHECK_FALSE(out.errors[0].recoverable);
  CHECK(out.errors[0].record_index == 1);
  CHECK(out.errors[0].offset == 18);
  CHECK_THAT(out.errors[0].message, Catch::Contains(std::to_string(~uint64_t{0} - 5)) &&
                                        Catch::Contains(std::to_string(kDefaultMaxRecordBytes)) &&
                                        Catch::Contains("huge.tfrecord"));

  WriteFile(dir.file("notes.tfrecord"), "This is a text file, not TFRecord.\nSecond line.\n");
  out = ReadAll(dir.file("notes.tfrecord"));
  CHECK(out.records.empty());
  REQUIRE(out.errors.size() == 1);
  CHECK(out.errors[0].kind == ReadErrorKind::kCorruptedLength);
  CHECK(out.errors[0].offset == 0);
  CHECK_THAT(out.errors[0].message, Catch::Contains("does not look like a TFRecord file"));
}

TEST_CASE("a bad length after good records: the error says the rest of the file is not read, and how much") {
  TempDir dir;
  const std::string good = FrameRecord("abc") + FrameRecord("defg");
  std::string bad = FrameRecord("hijkl");
  bad[8] = static_cast<char>(bad[8] ^ 0x01);  // the length's CRC
  WriteFile(dir.file("cut.tfrecord"), good + bad + FrameRecord("mn"));
  Outcome out = ReadAll(dir.file("cut.tfrecord"));
  REQUIRE(out.records.size() == 2);
  REQUIRE(out.errors.size() == 1);
  CHECK(out.errors[0].kind == ReadErrorKind::kCorruptedLength);
  CHECK_FALSE(out.errors[0].recoverable);
  CHECK(out.errors[0].message ==
        dir.file("cut.tfrecord") + ": record 2 at byte " + std::to_string(good.size()) +
            ": corrupted record length: length CRC mismatch (length field reads 5); the rest of the file is not read "
            "(its last " + std::to_string(bad.size() + FrameRecord("mn").size()) +
            " bytes, from this record on: no record boundary can be found past a bad length)");
  // At record 0 the whole file is unread, and the error is about what the file is instead.
  WriteFile(dir.file("first.tfrecord"), bad + FrameRecord("mn"));
  out = ReadAll(dir.file("first.tfrecord"));
  REQUIRE(out.errors.size() == 1);
  CHECK_THAT(out.errors[0].message, !Catch::Contains("the rest of the file"));
}

TEST_CASE("a plain file cut at a record boundary while it is read: an error saying so, not a silent end") {
  // A shard rewritten in place (`cp new old`, O_TRUNC) under a reader: cut inside a record it
  // is a truncated record; cut between two, the reader used to end there without a word.
  TempDir dir;
  const std::vector<std::string> records = ThousandByteRecords();
  const std::string bytes = FrameRecords(records);
  const std::string path = dir.file("shrinks.tfrecord");
  WriteFile(path, bytes);
  const uint64_t record_bytes = 1000 + 16;
  ReaderOptions o;
  o.buffer_bytes = 64;  // the least: what is read ahead of the records taken stays small
  TFRecordReader reader(path, o);
  Record record;
  ReadError error;
  std::vector<std::string> got;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
    got.emplace_back(record.data.begin(), record.data.end());
  }
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(6 * record_bytes)) == 0);  // records 0 to 5 left
  TFRecordReader::Status status;
  while ((status = reader.Next(&record, &error)) == TFRecordReader::Status::kRecord) {
    got.emplace_back(record.data.begin(), record.data.end());
  }
  CHECK(got == std::vector<std::string>(records.begin(), records.begin() + 6));
  REQUIRE(status == TFRecordReader::Status::kError);
  CHECK(error.kind == ReadErrorKind::kTruncatedRecord);
  CHECK_FALSE(error.recoverable);
  CHECK(error.record_index == 6);
  CHECK(error.message == path + ": record 6 at byte " + std::to_string(6 * record_bytes) +
                             ": truncated record: the file ends here, at byte " + std::to_string(6 * record_bytes) +
                             ", but had " + std::to_string(bytes.size()) +
                             " bytes when it was opened: it shrank while it was read (rewritten in place?), and the "
                             "records that were past this point are not read");
  CHECK(reader.Next(&record, &error) == TFRecordReader::Status::kEnd);
  // A file that grew while it was read is read to its end, where the change is said (appended
  // to, or written over with a longer file: the reader cannot tell which).
  WriteFile(path, FrameRecord("x"));
  TFRecordReader grows(path, o);
  REQUIRE(grows.Next(&record, &error) == TFRecordReader::Status::kRecord);
  {
    std::ofstream append(path, std::ios::app | std::ios::binary);
    append << FrameRecord("y");
  }
  size_t grown_records = 1;
  while ((status = grows.Next(&record, &error)) == TFRecordReader::Status::kRecord) ++grown_records;
  CHECK(grown_records == 2);
  REQUIRE(status == TFRecordReader::Status::kError);
  CHECK(error.kind == ReadErrorKind::kFileChanged);
  CHECK_THAT(error.message, Catch::Contains(": " + std::to_string(FrameRecord("x").size()) +
                                            " bytes when it was opened, " +
                                            std::to_string(2 * FrameRecord("x").size()) + " now, modified since"));
  CHECK(grows.Next(&record, &error) == TFRecordReader::Status::kEnd);
}

TEST_CASE("bad input 6: a header claiming 2^31+ bytes is rejected with size and limit, no 32-bit overflow") {
  TempDir dir;
  const uint64_t claimed = (uint64_t{1} << 31) + 7;
  WriteFile(dir.file("big.tfrecord"), LengthHeader(claimed) + std::string(100, 'x'));
  Outcome out = ReadAll(dir.file("big.tfrecord"));
  REQUIRE(!out.errors.empty());
  CHECK(out.errors[0].kind == ReadErrorKind::kRecordTooLarge);
  CHECK_THAT(out.errors[0].message, Catch::Contains("2147483655"));

  // Within a raised limit, a large record (3 MiB) is read intact with a small buffer.
  std::string large(3u << 20, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 7);
  WriteFile(dir.file("large.tfrecord"), FrameRecords({"a", large, "b"}));
  ReaderOptions o;
  o.max_record_bytes = 4u << 20;
  o.buffer_bytes = 4096;
  out = ReadAll(dir.file("large.tfrecord"), o);
  REQUIRE(out.errors.empty());
  REQUIRE(out.records.size() == 3);
  CHECK(out.records[1] == large);
  // With the limit below its size the big one is skipped and the rest survives.
  o.max_record_bytes = 1u << 20;
  out = ReadAll(dir.file("large.tfrecord"), o);
  CHECK(out.records == std::vector<std::string>{"a", "b"});
  REQUIRE(out.errors.size() == 1);
  CHECK(out.errors[0].kind == ReadErrorKind::kRecordTooLarge);
}

TEST_CASE("bad input 5: the same records plain, GZIP and ZLIB, read in every mode") {
  TempDir dir;
  auto records = TenRecords();
  const std::string plain = FrameRecords(records);
  WriteFile(dir.file("plain"), plain);
  WriteFile(dir.file("gzip"), GzipBytes(plain));
  WriteFile(dir.file("zlib"), ZlibBytes(plain));

  for (const char* file : {"plain", "gzip", "zlib"}) {
    ReaderOptions o;
    o.compression = Compression::kAuto;
    INFO(file << " in auto mode");
    Outcome out = ReadAll(dir.file(file), o);
    CHECK(out.errors.empty());
    CHECK(out.records == records);
  }
  struct Mismatch {
    const char* file;
    Compression declared;
    ReadErrorKind kind;
    const char* hint;
  } mismatches[] = {
      {"gzip", Compression::kNone, ReadErrorKind::kCorruptedLength, "looks like gzip"},
      {"zlib", Compression::kNone, ReadErrorKind::kCorruptedLength, "looks like zlib"},
      {"plain", Compression::kGzip, ReadErrorKind::kDecompression, "gzip"},
      {"plain", Compression::kZlib, ReadErrorKind::kDecompression, "zlib"},
      {"zlib", Compression::kGzip, ReadErrorKind::kDecompression, "gzip"},
      {"gzip", Compression::kZlib, ReadErrorKind::kDecompression, "zlib"},
  };
  for (const Mismatch& m : mismatches) {
    for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
      INFO(m.file << " declared " << CompressionName(m.declared) << " " << InflateBackendName(backend));
      ReaderOptions o;
      o.compression = m.declared;
      o.inflate = backend;
      Outcome out = ReadAll(dir.file(m.file), o);
      CHECK(out.records.empty());  // never garbage records
      REQUIRE(out.errors.size() == 1);
      CHECK(out.errors[0].kind == m.kind);
      CHECK(out.errors[0].record_index == 0);
      CHECK_THAT(out.errors[0].message, Catch::Contains(m.hint));
    }
  }
}

TEST_CASE("auto detection confirms gzip magic with the length CRC: a plain file may start with 1f 8b") {
  TempDir dir;
  // Length 35,615 = 0x8b1f: the little-endian length field begins with the gzip magic.
  std::string payload(35615, 'p');
  const std::string plain = FrameRecords({payload, "second"});
  REQUIRE(static_cast<uint8_t>(plain[0]) == 0x1f);
  REQUIRE(static_cast<uint8_t>(plain[1]) == 0x8b);
  WriteFile(dir.file("magic.tfrecord"), plain);
  TFRecordReader reader(dir.file("magic.tfrecord"));
  Record rec;
  ReadError err;
  REQUIRE(reader.Next(&rec, &err) == TFRecordReader::Status::kRecord);
  CHECK(reader.compression() == Compression::kNone);
  CHECK(rec.data.size() == payload.size());
  REQUIRE(reader.Next(&rec, &err) == TFRecordReader::Status::kRecord);
  CHECK(reader.Next(&rec, &err) == TFRecordReader::Status::kEnd);
  // And a zlib-looking start: length 0x9c78 = 40,056 begins with 78 9c.
  WriteFile(dir.file("zmagic.tfrecord"), FrameRecords({std::string(0x9c78, 'z')}));
  Outcome out = ReadAll(dir.file("zmagic.tfrecord"));
  CHECK(out.errors.empty());
  CHECK(out.records.size() == 1);
}

TEST_CASE("anything gzip -d accepts: header fields, block types, members, padding") {
  TempDir dir;
  auto records = TenRecords();
  const std::string plain = FrameRecords(records);
  struct Variant {
    const char* name;
    std::string bytes;
  };
  GzipOptions fields;
  fields.extra = std::string("RF\x04\x00" "abcd", 8);
  fields.name = "data.tfrecord";
  fields.comment = "written by the ringfeed test";
  fields.header_crc = true;
  GzipOptions stored;
  stored.level = 0;
  GzipOptions fixed;
  fixed.strategy = Z_FIXED;
  GzipOptions huffman;
  huffman.strategy = Z_HUFFMAN_ONLY;
  const size_t half = OffsetOf(records, 5) + 7;  // members split inside a record
  std::vector<Variant> variants = {
      {"FEXTRA+FNAME+FCOMMENT+FHCRC", GzipBytes(plain, fields)},
      {"stored blocks", GzipBytes(plain, stored)},
      {"fixed Huffman blocks", GzipBytes(plain, fixed)},
      {"Huffman-only", GzipBytes(plain, huffman)},
      {"two members", GzipBytes(plain.substr(0, half)) + GzipBytes(plain.substr(half))},
      {"three members, one empty", GzipBytes(plain.substr(0, half)) + GzipBytes("") + GzipBytes(plain.substr(half))},
      {"trailing zero padding", GzipBytes(plain) + std::string(1000, '\0')},
  };
  for (const Variant& v : variants) {
    for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
      for (size_t buffer : {size_t{64}, size_t{1} << 20}) {
        INFO(v.name << " " << InflateBackendName(backend) << " buffer " << buffer);
        WriteFile(dir.file("v.gz"), v.bytes);
        ReaderOptions o;
        o.inflate = backend;
        o.buffer_bytes = buffer;
        Outcome out = ReadAll(dir.file("v.gz"), o);
        for (auto& e : out.errors) UNSCOPED_INFO(e.message);
        CHECK(out.errors.empty());
        CHECK(out.records == records);
      }
    }
  }
}

TEST_CASE("a plain file cut inside a record while it is read: the truncated record's error says the file shrank") {
  TempDir dir;
  const std::string bytes = FrameRecords(ThousandByteRecords());
  const std::string path = dir.file("shrinks.tfrecord");
  const uint64_t record_bytes = 1000 + 16;
  for (const uint64_t cut : {6 * record_bytes + 100, 6 * record_bytes + 5}) {  // in record 6, in its header
    INFO("cut at " << cut);
    WriteFile(path, bytes);
    ReaderOptions o;
    o.buffer_bytes = 64;
    TFRecordReader reader(path, o);
    Record record;
    ReadError error;
    REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);
    size_t got = 1;
    TFRecordReader::Status status;
    while ((status = reader.Next(&record, &error)) == TFRecordReader::Status::kRecord) ++got;
    CHECK(got == 6);
    REQUIRE(status == TFRecordReader::Status::kError);
    CHECK(error.kind == ReadErrorKind::kTruncatedRecord);
    CHECK(error.record_index == 6);
    CHECK_THAT(error.message, Catch::EndsWith("; the file had " + std::to_string(bytes.size()) +
                                              " bytes when it was opened, and its reads ended at byte " +
                                              std::to_string(cut) +
                                              ": it shrank while it was read (rewritten in place?)"));
  }
}

TEST_CASE("a file written over while it is read: the bad record's error says the file changed") {
  // `cp new old` over a file being read: the CRC error named no cause (helper-156).
  TempDir dir;
  const std::vector<std::string> records = ThousandByteRecords();
  const std::string bytes = FrameRecords(records);
  const std::string path = dir.file("rewritten.tfrecord");
  const uint64_t record_bytes = 1000 + 16;
  for (const bool grows : {false, true}) {
    INFO((grows ? "written over with more bytes" : "bytes changed in place, same size"));
    WriteFile(path, bytes);
    ReaderOptions o;
    o.buffer_bytes = 64;
    TFRecordReader reader(path, o);
    Record record;
    ReadError error;
    REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
    // Record 6's payload changed (its CRC no longer matches); the time set apart from the
    // open's, which a coarse file system clock could otherwise share.
    std::string changed = bytes;
    changed[6 * record_bytes + 12 + 500] ^= 0x5A;
    if (grows) changed += FrameRecords({"one more"});
    WriteFile(path, changed);
    const timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
    size_t got = 1;
    TFRecordReader::Status status;
    while ((status = reader.Next(&record, &error)) == TFRecordReader::Status::kRecord) ++got;
    CHECK(got == 6);
    REQUIRE(status == TFRecordReader::Status::kError);
    CHECK(error.kind == ReadErrorKind::kCorruptedData);
    const std::string sizes = grows ? std::to_string(bytes.size()) + " bytes when it was opened, " +
                                          std::to_string(changed.size()) + " now"
                                    : std::to_string(bytes.size()) + " bytes then and now";
    CHECK_THAT(error.message, Catch::EndsWith("; the file changed while it was read (" + sizes +
                                              ", modified since it was opened): rewritten in place? Replace a data "
                                              "file by renaming a new one over it"));
  }
  // Unchanged, a bad record says nothing of the kind.
  std::string bad = bytes;
  bad[2 * record_bytes + 12 + 10] ^= 1;
  WriteFile(path, bad);
  Outcome out = ReadAll(path, ReaderOptions{});
  REQUIRE(out.errors.size() == 1);
  CHECK_THAT(out.errors[0].message, !Catch::Contains("changed while it was read"));
}

TEST_CASE("a file written over in place with intact records: an error at its end says its records may mix") {
  // `cp new old` with records of the new file where the old ones were passes every CRC: the
  // reader handed out records of both versions without a word (helper-156).
  TempDir dir;
  const std::vector<std::string> old_records = ThousandByteRecords();
  std::vector<std::string> new_records;
  for (int i = 0; i < 10; ++i) new_records.push_back(std::string(1000, static_cast<char>('A' + i)));
  for (const Compression compression : {Compression::kNone, Compression::kGzip}) {
    const bool gzip = compression == Compression::kGzip;
    INFO((gzip ? "GZIP" : "plain"));
    const std::string path = dir.file(gzip ? "rewritten.tfrecord.gz" : "rewritten.tfrecord");
    const auto file_bytes = [&](const std::vector<std::string>& records) {
      return gzip ? GzipBytes(FrameRecords(records)) : FrameRecords(records);
    };
    WriteFile(path, file_bytes(old_records));
    ReaderOptions o;
    o.buffer_bytes = 64;  // the plain file's later records are read after the write
    TFRecordReader reader(path, o);
    Record record;
    ReadError error;
    REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
    // The GZIP file is written over with its own bytes (a new deflate stream read from the middle
    // would be a decompression error instead): the reader cannot tell, and says so all the same.
    const std::string rewritten = file_bytes(gzip ? old_records : new_records);
    WriteFile(path, rewritten);
    const timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 0}};  // apart from a coarse clock's open time
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
    std::string firsts(1, static_cast<char>(record.data[0]));
    TFRecordReader::Status status;
    while ((status = reader.Next(&record, &error)) == TFRecordReader::Status::kRecord) firsts += record.data[0];
    // Every record intact (the plain file's later ones are the new file's: the mix), then the error.
    CHECK(firsts == (gzip ? "abcdefghij" : "aBCDEFGHIJ"));
    REQUIRE(status == TFRecordReader::Status::kError);
    CHECK(error.kind == ReadErrorKind::kFileChanged);
    CHECK_FALSE(error.recoverable);
    CHECK(error.record_index == 10);
    CHECK(error.message == RecordPlace(path, 10, 10 * 1016, compression) +
                               ": file changed while read: " + std::to_string(rewritten.size()) +
                               " bytes then and now, modified since it was opened; the 10 records read from it may mix "
                               "its old and new contents (rewritten in place, or appended to?); replace a data file by "
                               "renaming a new one over it");
    CHECK(reader.Next(&record, &error) == TFRecordReader::Status::kEnd);
  }
  // A file replaced by renaming a new one over it: the open file is the old one, unchanged.
  const std::string path = dir.file("renamed.tfrecord");
  WriteFile(path, FrameRecords(old_records));
  TFRecordReader reader(path, ReaderOptions{});
  Record record;
  ReadError error;
  REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
  WriteFile(path + ".new", FrameRecords(new_records));
  REQUIRE(::rename((path + ".new").c_str(), path.c_str()) == 0);
  size_t got = 1;
  TFRecordReader::Status status;
  while ((status = reader.Next(&record, &error)) == TFRecordReader::Status::kRecord) ++got;
  CHECK(got == 10);
  CHECK(status == TFRecordReader::Status::kEnd);
}

TEST_CASE("zero bytes between gzip members are an error after the records before them, not a member lost quietly") {
  // A member overwritten with zeros (a crash, a bad disk block): skipping the zeros and reading
  // on from the next member lost its records without a word (helper-145).
  TempDir dir;
  auto records = TenRecords();
  const std::string plain = FrameRecords(records);
  const size_t half = OffsetOf(records, 5);
  const std::string first = GzipBytes(plain.substr(0, half));
  WriteFile(dir.file("zeroed.gz"), first + std::string(1000, '\0') + GzipBytes(plain.substr(half)));
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    for (size_t buffer : {size_t{64}, size_t{1} << 20}) {
      INFO(InflateBackendName(backend) << " buffer " << buffer);
      ReaderOptions o;
      o.inflate = backend;
      o.buffer_bytes = buffer;
      Outcome out = ReadAll(dir.file("zeroed.gz"), o);
      CHECK(out.records == std::vector<std::string>(records.begin(), records.begin() + 5));
      REQUIRE(out.errors.size() == 1);
      CHECK(out.errors[0].kind == ReadErrorKind::kDecompression);
      CHECK(out.errors[0].record_index == 5);
      CHECK_THAT(out.errors[0].message,
                 Catch::Contains("1000 zero bytes after the gzip member that ends at compressed byte " +
                                 std::to_string(first.size()) + ", then more data at compressed byte " +
                                 std::to_string(first.size() + 1000) + ": not padding"));
      CHECK_THAT(out.errors[0].message, Catch::EndsWith("; the rest of the file is not read (the members after the "
                                                        "zeros are not read either)"));
    }
  }
  // ZLIB: one stream; a zero byte and more after it.
  const std::string z = ZlibBytes(plain);
  WriteFile(dir.file("zeroed.zz"), z + std::string(1, '\0') + "x");
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    INFO(InflateBackendName(backend));
    ReaderOptions o;
    o.inflate = backend;
    Outcome out = ReadAll(dir.file("zeroed.zz"), o);
    CHECK(out.records == records);
    REQUIRE(out.errors.size() == 1);
    CHECK_THAT(out.errors[0].message,
               Catch::Contains("1 zero byte after the zlib stream that ends at compressed byte " +
                               std::to_string(z.size()) + ", then more data at compressed byte " +
                               std::to_string(z.size() + 1)) &&
                   Catch::EndsWith("(nothing after the zeros is read)"));
  }
}

TEST_CASE("a GZIP file cut at a member's end while it is read: an error naming the size it had, not a quiet end") {
  TempDir dir;
  const std::vector<std::string> records = ThousandByteRecords();
  const std::string plain = FrameRecords(records);
  const std::string first = GzipBytes(plain.substr(0, OffsetOf(records, 6)));
  const std::string bytes = first + GzipBytes(plain.substr(OffsetOf(records, 6)));
  const std::string path = dir.file("shrinks.gz");
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    INFO(InflateBackendName(backend));
    WriteFile(path, bytes);
    ReaderOptions o;
    o.inflate = backend;
    o.buffer_bytes = 64;  // the least: little of the file is read ahead of the records taken
    TFRecordReader reader(path, o);
    Record record;
    ReadError error;
    std::vector<std::string> got;
    REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
    got.emplace_back(record.data.begin(), record.data.end());
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(first.size())) == 0);  // the first member left
    TFRecordReader::Status status;
    while ((status = reader.Next(&record, &error)) == TFRecordReader::Status::kRecord) {
      got.emplace_back(record.data.begin(), record.data.end());
    }
    CHECK(got == std::vector<std::string>(records.begin(), records.begin() + 6));
    REQUIRE(status == TFRecordReader::Status::kError);
    CHECK_FALSE(error.recoverable);
    CHECK(error.record_index == 6);
    if (error.kind == ReadErrorKind::kTruncatedRecord) {
      // The cut found at the member's end.
      CHECK_THAT(error.message,
                 Catch::Contains(": truncated record: the compressed file ends here, at compressed byte " +
                                 std::to_string(first.size()) + " (where a gzip member ends), but had " +
                                 std::to_string(bytes.size()) + " bytes when it was opened: it shrank"));
    } else {
      // ISA-L read the next member's first bytes before the cut: the stream ends inside it.
      CHECK(error.kind == ReadErrorKind::kDecompression);
      CHECK_THAT(error.message, Catch::Contains("unexpected end of compressed data") &&
                                    Catch::Contains("; the file had " + std::to_string(bytes.size()) +
                                                    " bytes when it was opened, and its reads ended at compressed "
                                                    "byte ") &&
                                    Catch::Contains(": it shrank while it was read"));
    }
    CHECK(reader.Next(&record, &error) == TFRecordReader::Status::kEnd);
  }
}

TEST_CASE("broken compressed streams deliver the good records, then one decompression error") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 200; ++i) records.push_back("rec" + std::to_string(i) + std::string(500, static_cast<char>('a' + i % 26)));
  const std::string plain = FrameRecords(records);
  const std::string gz = GzipBytes(plain);
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    INFO(InflateBackendName(backend));
    ReaderOptions o;
    o.inflate = backend;
    o.buffer_bytes = 256;

    WriteFile(dir.file("cut.gz"), gz.substr(0, gz.size() / 2));
    Outcome out = ReadAll(dir.file("cut.gz"), o);
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kDecompression);
    CHECK_THAT(out.errors[0].message, Catch::Contains("unexpected end"));
    CHECK(out.records.size() > 10);
    for (size_t i = 0; i < out.records.size(); ++i) CHECK(out.records[i] == records[i]);

    WriteFile(dir.file("garbage.gz"), gz + "NOT GZIP");
    out = ReadAll(dir.file("garbage.gz"), o);
    CHECK(out.records == records);
    REQUIRE(out.errors.size() == 1);
    CHECK_THAT(out.errors[0].message, Catch::Contains("trailing garbage"));

    std::string bad = gz;
    bad[bad.size() - 6] ^= 0x40;  // inside the CRC-32 trailer
    WriteFile(dir.file("crc.gz"), bad);
    out = ReadAll(dir.file("crc.gz"), o);
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kDecompression);
    // Named where it is: the trailer at the file's end (its last 8 bytes: zlib stops after the
    // CRC-32, ISA-L after ISIZE), not where the last step began.
    const std::string& m = out.errors[0].message;
    const std::string at = ", at the trailer near compressed byte ";
    REQUIRE(m.find(at) != std::string::npos);
    const uint64_t byte = std::stoull(m.substr(m.find(at) + at.size()));
    CHECK(byte + 8 >= gz.size());
    CHECK(byte <= gz.size());
  }
}

// Bytes a streaming zlib inflate gets out of `compressed` (gzip or zlib framing: windowBits
// 15 + 32 detects which) before it stops: at its end or at the first error.
std::string InflatePrefix(const std::string& compressed) {
  z_stream z{};
  REQUIRE(inflateInit2(&z, 15 + 32) == Z_OK);
  std::string out;
  char buf[65536];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z.avail_in = static_cast<uInt>(compressed.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (rc == Z_BUF_ERROR && z.avail_out == 0) rc = Z_OK;  // more output to come
  }
  inflateEnd(&z);
  return out;
}

// `count` records of `bytes` pseudo-random (xorshift64, from `seed`) bytes each: deflate cannot
// shrink them, so compressed offsets track record offsets.
std::vector<std::string> IncompressibleRecords(int count, size_t bytes, uint64_t seed) {
  std::vector<std::string> records;
  uint64_t x = seed;
  for (int i = 0; i < count; ++i) {
    std::string r(bytes, '\0');
    for (char& c : r) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      c = static_cast<char>(x);
    }
    records.push_back(std::move(r));
  }
  return records;
}

TEST_CASE("a damaged byte late in a GZIP/ZLIB file: every record before it is delivered") {
  // 2000 records of 600 incompressible bytes (1.2 MB): the damage lands more than one reader
  // window (1 MiB) of output past the start, where a whole inflate step's output used to be
  // dropped with the error (up to ~4 MiB of good records).
  TempDir dir;
  const std::vector<std::string> records = IncompressibleRecords(2000, 600, 88172645463325252ull);
  const std::string plain = FrameRecords(records);
  for (const bool gzip : {true, false}) {
    const std::string good = gzip ? GzipBytes(plain) : ZlibBytes(plain);
    std::string bad = good;
    const size_t pos = good.size() * 9 / 10;
    bad[pos] ^= 0x10;
    // Records whose frames zlib inflates in full from the bytes before the damage.
    const std::string before = InflatePrefix(good.substr(0, pos));
    size_t intact = 0;
    for (uint64_t off = 0; intact < records.size() && off + 16 + records[intact].size() <= before.size();
         off += 16 + records[intact].size()) {
      ++intact;
    }
    REQUIRE(intact > 1500);
    WriteFile(dir.file("bad"), bad);
    for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
      INFO((gzip ? "gzip, " : "zlib, ") << InflateBackendName(backend) << ": damage at compressed byte " << pos
                                        << ", " << intact << " records before it");
      ReaderOptions o;
      o.compression = gzip ? Compression::kGzip : Compression::kZlib;
      o.inflate = backend;
      const Outcome out = ReadAll(dir.file("bad"), o);
      REQUIRE(out.records.size() >= intact);
      CHECK(std::equal(records.begin(), records.begin() + static_cast<ptrdiff_t>(intact), out.records.begin()));
      REQUIRE(!out.errors.empty());
    }
  }
}

// `first` and `second` deflated into one gzip (or zlib) stream, with a full flush between them:
// the second part's first block header starts at byte *boundary of the result.
std::string DeflateInTwo(const std::string& first, const std::string& second, bool gzip, size_t* boundary) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(first.size() + second.size())) + 64, '\0');
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(first.data()));
  z.avail_in = static_cast<uInt>(first.size());
  REQUIRE(deflate(&z, Z_FULL_FLUSH) == Z_OK);
  *boundary = out.size() - z.avail_out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(second.data()));
  z.avail_in = static_cast<uInt>(second.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

TEST_CASE("an inflate error mid-stream (an invalid block) comes after every record inflated before it") {
  // 1800 records (1.1 MB, more than one reader window) before a block header turned into the
  // reserved block type 3: inflate fails there, mid-stream, with all of them produced, however
  // the input and output are cut up (ISA-L used to drop what it had inflated into its own buffer
  // beyond the room the reader gave it: 30-90 records).
  const std::vector<std::string> records = IncompressibleRecords(2000, 600, 0x9E3779B97F4A7C15ull);
  const std::string first = FrameRecords({records.begin(), records.begin() + 1800});
  const std::string second = FrameRecords({records.begin() + 1800, records.end()});
  // How the compressed input is cut up: read() calls of buffer_bytes, or 4 KiB queued blocks.
  struct Cut {
    size_t buffer_bytes;
    size_t reads_in_flight;
  };
  const size_t default_buffer = ReaderOptions{}.buffer_bytes;
  const Cut cuts[] = {{default_buffer, 1}, {64, 1}, {4096, 1}, {4096, 4}, {default_buffer, 4}};
  TempDir dir;
  for (const bool gzip : {true, false}) {
    size_t boundary = 0;
    std::string bad = DeflateInTwo(first, second, gzip, &boundary);
    REQUIRE(boundary < bad.size());
    bad[boundary] = 0x07;  // BFINAL = 1, BTYPE = 11 (reserved): "invalid block type"
    WriteFile(dir.file("bad"), bad);
    for (const Cut& cut : cuts) {
      for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
        INFO((gzip ? "gzip, " : "zlib, ") << InflateBackendName(backend) << ", buffer_bytes " << cut.buffer_bytes
                                          << ", reads_in_flight " << cut.reads_in_flight);
        ReaderOptions o;
        o.compression = gzip ? Compression::kGzip : Compression::kZlib;
        o.inflate = backend;
        o.buffer_bytes = cut.buffer_bytes;
        o.reads_in_flight = cut.reads_in_flight;
        o.read_block_bytes = 4096;
        const Outcome out = ReadAll(dir.file("bad"), o);
        CHECK(out.records == std::vector<std::string>(records.begin(), records.begin() + 1800));
        REQUIRE(out.errors.size() == 1);
        CHECK(out.errors[0].kind == ReadErrorKind::kDecompression);
        CHECK(out.errors[0].record_index == 1800);
        // The message names the byte after the damaged block header, however the input and
        // output were cut up (ReadAll also compares the messages of every read mode).
        const std::string& message = out.errors[0].message;
        INFO(message << " (damage at " << boundary << ")");
        CHECK_THAT(message, Catch::EndsWith(", found at compressed byte " + std::to_string(boundary + 1) +
                                            "; the rest of the file is not read (nothing past this point can be "
                                            "decompressed)"));
      }
    }
  }
}

// `count` records of text: words from a 300-word vocabulary (xorshift64 from `seed`), 100-700
// bytes each; deflate codes them with dynamic Huffman blocks.
std::vector<std::string> TextRecords(int count, uint64_t seed) {
  uint64_t x = seed;
  auto next = [&x] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  std::vector<std::string> words;
  for (int i = 0; i < 300; ++i) {
    std::string w(2 + next() % 8, 'a');
    for (char& c : w) c = static_cast<char>('a' + next() % 26);
    words.push_back(std::move(w));
  }
  std::vector<std::string> records;
  for (int i = 0; i < count; ++i) {
    std::string r = std::to_string(i) + ":";
    const size_t target = 100 + next() % 600;
    while (r.size() < target) r += " " + words[next() % words.size()] + std::to_string(next() % 1000);
    records.push_back(std::move(r));
  }
  return records;
}

TEST_CASE("a damaged dynamic block header: the decompression error after the records before it, whatever the backend") {
  // zlib rejects a dynamic Huffman block header with one bit changed ("invalid code lengths
  // set", ...); ISA-L accepts many such headers and decodes garbage with them for a while before
  // it fails. Its garbage used to reach the reader, which reported a corrupted record length
  // with a nonsense length (and, depending on the buffer sizes, sometimes the decompression
  // error instead). Now both report the decompression error, at the first record the damage
  // touches, however the input is cut up.
  const std::vector<std::string> records = TextRecords(1000, 0x853C49E6748FEA9Bull);
  const std::string first = FrameRecords({records.begin(), records.begin() + 600});
  const std::string second = FrameRecords({records.begin() + 600, records.end()});
  struct Cut {
    size_t buffer_bytes;
    size_t reads_in_flight;
  };
  const Cut cuts[] = {{ReaderOptions{}.buffer_bytes, 1}, {64, 1}, {4096, 1}, {4096, 4}};
  TempDir dir;
  for (const bool gzip : {true, false}) {
    size_t boundary = 0;
    const std::string good = DeflateInTwo(first, second, gzip, &boundary);
    size_t damaged_headers = 0;
    // One bit at a time in the first 8 bytes of the block header after the flush (past its
    // first 3 bits: BFINAL and BTYPE).
    for (size_t bit = 3; bit < 64; ++bit) {
      std::string bad = good;
      bad[boundary + bit / 8] = static_cast<char>(bad[boundary + bit / 8] ^ (1 << (bit % 8)));
      WriteFile(dir.file("bad"), bad);
      ReaderOptions zlib_options;
      zlib_options.inflate = InflateBackend::kZlib;
      const Outcome reference = ReadAllIn(Mode::kNext, dir.file("bad"), zlib_options);
      // The flips zlib finds in the header, before any record of the second part.
      if (reference.errors.size() != 1 || reference.errors[0].kind != ReadErrorKind::kDecompression ||
          reference.records.size() != 600) {
        continue;
      }
      ++damaged_headers;
      for (const Cut& cut : cuts) {
        for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
          INFO((gzip ? "gzip" : "zlib") << ", bit " << bit << " of the header at compressed byte " << boundary << ", "
                                        << InflateBackendName(backend) << ", buffer_bytes " << cut.buffer_bytes
                                        << ", reads_in_flight " << cut.reads_in_flight << "; zlib alone: "
                                        << reference.errors[0].message);
          ReaderOptions o;
          o.inflate = backend;
          o.buffer_bytes = cut.buffer_bytes;
          o.reads_in_flight = cut.reads_in_flight;
          o.read_block_bytes = 4096;
          const Outcome out = ReadAll(dir.file("bad"), o);  // Next and NextInto alike
          CHECK(out.records == reference.records);
          REQUIRE(out.errors.size() == 1);
          INFO(out.errors[0].message);
          CHECK(out.errors[0].kind == ReadErrorKind::kDecompression);
          CHECK(out.errors[0].record_index == 600);
          CHECK(out.errors[0].offset == reference.errors[0].offset);
        }
      }
    }
    INFO((gzip ? "gzip" : "zlib") << ": " << damaged_headers << " one-bit changes found by zlib in the header");
    CHECK(damaged_headers >= 20);
  }
}

TEST_CASE("I/O errors name the file") {
  Outcome out = ReadAll("/nonexistent/dir/file.tfrecord");
  REQUIRE(out.errors.size() == 1);
  CHECK(out.errors[0].kind == ReadErrorKind::kIo);
  CHECK_THAT(out.errors[0].message, Catch::Contains("/nonexistent/dir/file.tfrecord") && Catch::Contains("No such file"));
}

TEST_CASE("a FIFO, a directory or a device is an error naming it, never a wait for a writer") {
  TempDir dir;
  const std::string fifo = dir.file("pipe.tfrecord");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // no writer: a blocking open() would wait for good
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "a FIFO (named pipe)"}, {dir.path().string(), "a directory"}, {"/dev/zero", "a character device"}};
  for (const auto& [path, what] : cases) {
    for (const size_t reads_in_flight : {size_t{1}, size_t{4}}) {
      INFO(path << ", reads_in_flight " << reads_in_flight);
      ReaderOptions options;
      options.reads_in_flight = reads_in_flight;
      Outcome out = ReadAll(path, options);
      CHECK(out.records.empty());
      REQUIRE(out.errors.size() == 1);
      CHECK(out.errors[0].kind == ReadErrorKind::kIo);
      CHECK(out.errors[0].message == path + ": I/O error: not a regular file (" + what +
                                         "): TFRecord files are read as regular files");
    }
  }
}

TEST_CASE("TFRecordWriter output reads back in every compression") {
  TempDir dir;
  auto records = TenRecords();
  for (auto c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    WriterOptions w;
    w.compression = c;
    {
      TFRecordWriter writer(dir.file("w"), w);
      for (const auto& r : records) writer.Write(r);
      writer.Close();
    }
    Outcome out = ReadAll(dir.file("w"));
    CHECK(out.errors.empty());
    CHECK(out.records == records);
    // With queued reads `auto` takes the first bytes from the first block (or, shorter than
    // 16 bytes, reads them): the same records, and a compressed file's inflater reads its
    // compressed bytes through the same queue.
    for (size_t block : {size_t{4}, size_t{16}, size_t{100}, size_t{256} << 10}) {
      INFO("compression " << static_cast<int>(c) << ", block " << block);
      ReaderOptions o;
      o.reads_in_flight = 4;
      o.read_block_bytes = block;
      out = ReadAll(dir.file("w"), o);
      CHECK(out.errors.empty());
      CHECK(out.records == records);
      TFRecordReader reader(dir.file("w"), o);
      Record record;
      ReadError error;
      REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
      CHECK(reader.compression() == c);
      CHECK(reader.reads_in_flight() == 4u);
    }
  }
}

TEST_CASE("a huge claimed length within the limit is a truncation, not a huge allocation") {
  TempDir dir;
  // 100 GiB claimed, valid length CRC, 3 bytes present; the limit allows up to 1 TiB.
  WriteFile(dir.file("claim.tfrecord"), FrameRecord("ok") + LengthHeader(uint64_t{100} << 30) + "abc");
  ReaderOptions o;
  o.max_record_bytes = uint64_t{1} << 40;
  Outcome out = ReadAll(dir.file("claim.tfrecord"), o);  // would throw std::bad_alloc if it allocated first
  CHECK(out.records == std::vector<std::string>{"ok"});
  REQUIRE(out.errors.size() == 1);
  CHECK(out.errors[0].kind == ReadErrorKind::kTruncatedRecord);
  CHECK(out.errors[0].record_index == 1);
  CHECK(out.errors[0].offset == 18);
}

TEST_CASE("a too-large record cut short is reported at that record") {
  TempDir dir;
  const std::string bytes = FrameRecord("ok") + LengthHeader((uint64_t{1} << 31) + 5) + "abc";
  SECTION("plain: the file's size shows the length is impossible: one error, and the file ends there") {
    WriteFile(dir.file("big.tfrecord"), bytes);
    Outcome out = ReadAll(dir.file("big.tfrecord"));
    CHECK(out.records == std::vector<std::string>{"ok"});
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kRecordTooLarge);
    CHECK_FALSE(out.errors[0].recoverable);
    CHECK(out.errors[0].record_index == 1);
    CHECK(out.errors[0].offset == 18);
    CHECK_THAT(out.errors[0].message, Catch::Contains("the file has only 3 bytes after this header"));
  }
  SECTION("GZIP: no size to judge by: skipped at once, the stream ends inside it: one error, and the file ends there") {
    // It counted as two errors under on_error: skip (too large, then truncated), both at record 1.
    WriteFile(dir.file("big.tfrecord.gz"), GzipBytes(bytes));
    Outcome out = ReadAll(dir.file("big.tfrecord.gz"));
    CHECK(out.records == std::vector<std::string>{"ok"});
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kRecordTooLarge);
    CHECK_FALSE(out.errors[0].recoverable);
    CHECK(out.errors[0].record_index == 1);
    CHECK(out.errors[0].offset == 18);
    CHECK_THAT(out.errors[0].message,
               Catch::Contains("length 2147483653 bytes exceeds max_record_bytes ") &&
                   Catch::Contains(", and the file ends 15 bytes into this record (header included): the length is "
                                   "corrupt, or the file was cut short"));
  }
  SECTION("GZIP: a genuine too-large record is skipped, and the records after it are read") {
    const std::string big(5000, 'x');
    WriteFile(dir.file("genuine.tfrecord.gz"), GzipBytes(FrameRecord("ok") + FrameRecord(big) + FrameRecord("after")));
    ReaderOptions o;
    o.max_record_bytes = 4096;
    o.buffer_bytes = 64;  // the skip spans many windows
    Outcome out = ReadAll(dir.file("genuine.tfrecord.gz"), o);
    CHECK(out.records == std::vector<std::string>{"ok", "after"});
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kRecordTooLarge);
    CHECK(out.errors[0].recoverable);
    CHECK(out.errors[0].record_index == 1);
    CHECK(out.errors[0].offset == 18);
    CHECK_THAT(out.errors[0].message, Catch::Contains("raise max_record_bytes if the record is genuine"));
  }
}

TEST_CASE("bytes after a zlib stream are an error with both backends, even one or two") {
  TempDir dir;
  auto records = TenRecords();
  for (const std::string& tail : {std::string("A"), std::string("AA"), std::string("AAAAAAAAAA")}) {
    WriteFile(dir.file("z"), ZlibBytes(FrameRecords(records)) + tail);
    for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
      INFO(tail.size() << " trailing bytes, " << InflateBackendName(backend));
      ReaderOptions o;
      o.inflate = backend;
      Outcome out = ReadAll(dir.file("z"), o);
      CHECK(out.records == records);
      REQUIRE(out.errors.size() == 1);
      CHECK_THAT(out.errors[0].message, Catch::Contains("data after the end of the zlib stream"));
    }
  }
}

TEST_CASE("a zlib stream made with a preset dictionary: auto takes it as zlib and the error says what it is") {
  // compression: auto read it as plain ("this does not look like a TFRecord file", helper-156).
  const std::string plain = FrameRecords(TenRecords());
  z_stream z{};
  REQUIRE(deflateInit(&z, Z_DEFAULT_COMPRESSION) == Z_OK);
  const std::string dictionary = "ringfeed preset dictionary";
  REQUIRE(deflateSetDictionary(&z, reinterpret_cast<const Bytef*>(dictionary.data()),
                               static_cast<uInt>(dictionary.size())) == Z_OK);
  std::string compressed(deflateBound(&z, plain.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(compressed.data());
  z.avail_out = static_cast<uInt>(compressed.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  compressed.resize(z.total_out);
  deflateEnd(&z);
  REQUIRE((static_cast<unsigned char>(compressed[1]) & 0x20) != 0);  // FDICT
  TempDir dir;
  WriteFile(dir.file("dict.zlib"), compressed);
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    INFO(InflateBackendName(backend));
    ReaderOptions o;
    o.inflate = backend;  // compression: auto
    Outcome out = ReadAll(dir.file("dict.zlib"), o);
    CHECK(out.records.empty());
    REQUIRE(out.errors.size() == 1);
    CHECK_THAT(out.errors[0].message,
               Catch::Contains("record 0 at byte 0 of the uncompressed stream (zlib): decompression error: ") &&
                   Catch::Contains("(a zlib stream made with a preset dictionary, FDICT: TFRecord files never are, "
                                   "and TensorFlow cannot read it either), found at compressed byte 6"));
  }
}

TEST_CASE("a gzip header longer than 1 MiB (huge FNAME) is read like gzip -d reads it") {
  TempDir dir;
  auto records = TenRecords();
  GzipOptions o;
  o.name = std::string(2u << 20, 'n');
  WriteFile(dir.file("long.gz"), GzipBytes(FrameRecords(records), o) + GzipBytes(FrameRecords(records)));
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    ReaderOptions r;
    r.inflate = backend;
    Outcome out = ReadAll(dir.file("long.gz"), r);
    CHECK(out.errors.empty());
    CHECK(out.records.size() == 2 * records.size());
  }
}

TEST_CASE("naming the wrong decompressor hints at what the file is") {
  TempDir dir;
  const std::string plain = FrameRecords(TenRecords());
  WriteFile(dir.file("plain"), plain);
  WriteFile(dir.file("gz"), GzipBytes(plain));
  for (auto c : {Compression::kGzip, Compression::kZlib}) {
    ReaderOptions o;
    o.compression = c;
    Outcome out = ReadAll(dir.file("plain"), o);
    REQUIRE(out.errors.size() == 1);
    CHECK_THAT(out.errors[0].message, Catch::Contains("looks like plain TFRecord: set compression: none"));
  }
  ReaderOptions o;
  o.compression = Compression::kZlib;
  Outcome out = ReadAll(dir.file("gz"), o);
  REQUIRE(out.errors.size() == 1);
  CHECK_THAT(out.errors[0].message, Catch::Contains("looks like gzip: set compression: gzip"));

  // Files shorter than a gzip header that are not gzip: the reason is given, whatever the
  // backend (an empty ZLIB stream, what a ZLIB writer makes for 0 records, is 8 bytes).
  WriteFile(dir.file("empty.zz"), ZlibBytes(""));
  WriteFile(dir.file("two"), "ab");
  WriteFile(dir.file("one"), "x");
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    for (const char* name : {"empty.zz", "two", "one"}) {
      INFO(name << " backend " << InflateBackendName(backend));
      ReaderOptions g;
      g.compression = Compression::kGzip;
      g.inflate = backend;
      out = ReadAll(dir.file(name), g);
      REQUIRE(out.errors.size() == 1);
      CHECK_THAT(out.errors[0].message, Catch::Contains("decompression error: ") &&
                                            !Catch::Contains("decompression error:  ") &&
                                            !Catch::Contains("inside a gzip header"));
      if (backend == InflateBackend::kIsal) CHECK_THAT(out.errors[0].message, Catch::Contains("not in gzip format"));
    }
  }
}

namespace {
// Twelve records of 70-150 KB with small ones between them: with the default 1 MiB window the
// first few come from the window, the one across its end is partly copied, the rest are read
// straight into the caller's memory.
std::vector<std::string> LargeRecords() {
  std::vector<std::string> r;
  uint64_t x = 0x9e3779b97f4a7c15;  // xorshift64: incompressible, so a cut compressed file ends
  for (int i = 0; i < 12; ++i) {      // near the same plain byte
    std::string big(70000 + static_cast<size_t>(i) * 7000, '\0');
    for (char& c : big) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x >> 56);
    }
    r.push_back(std::move(big));
    if (i % 4 == 3) r.push_back("small-" + std::to_string(i));
  }
  return r;
}
}  // namespace

TEST_CASE("NextInto: large records land in the caller's memory, in every compression and buffer size") {
  TempDir dir;
  const auto records = LargeRecords();
  const std::string plain = FrameRecords(records);
  WriteFile(dir.file("p"), plain);
  WriteFile(dir.file("g"), GzipBytes(plain));
  WriteFile(dir.file("z"), ZlibBytes(plain));
  for (const char* file : {"p", "g", "z"}) {
    for (size_t buffer : {size_t{64}, size_t{4096}, size_t{200000}, size_t{1} << 20}) {
      for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
        INFO(file << " buffer " << buffer << " " << InflateBackendName(backend));
        ReaderOptions o;
        o.buffer_bytes = buffer;
        o.inflate = backend;
        const Outcome out = ReadAll(dir.file(file), o);  // also checks NextInto against Next
        REQUIRE(out.errors.empty());
        REQUIRE(out.records == records);
        CHECK(out.offsets.back() == OffsetOf(records, records.size() - 1));
      }
    }
  }

  // One Allocate per record, of its exact length; Next and NextInto mixed on one reader.
  TFRecordReader reader(dir.file("p"));
  TestAllocator allocator;
  Record rec;
  ReadError err;
  for (size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    const bool into = i % 3 != 1;
    REQUIRE((into ? reader.NextInto(allocator, &rec, &err) : reader.Next(&rec, &err)) == TFRecordReader::Status::kRecord);
    CHECK(rec.index == i);
    CHECK(std::string(reinterpret_cast<const char*>(rec.data.data()), rec.data.size()) == records[i]);
    if (into) {
      CHECK(rec.data.data() == allocator.last());
      CHECK(allocator.lengths().back() == records[i].size());
    }
  }
  CHECK(reader.NextInto(allocator, &rec, &err) == TFRecordReader::Status::kEnd);
  CHECK(allocator.lengths().size() == records.size() - records.size() / 3);
}

TEST_CASE("NextInto: every error in a directly read record matches Next's") {
  TempDir dir;
  const auto records = LargeRecords();
  const std::string plain = FrameRecords(records);
  const size_t last = records.size() - 1;  // read directly: the window holds only its header
  const uint64_t at = OffsetOf(records, last);
  const uint64_t length = records[last].size();
  struct Cut {
    const char* what;
    uint64_t size;  // bytes of the framed stream kept
  } cuts[] = {
      {"3 bytes into the payload", at + 12 + 3},
      {"half the payload", at + 12 + length / 2},
      {"at the end of the payload", at + 12 + length},
      {"2 bytes into the data CRC", at + 12 + length + 2},
  };
  for (const Cut& cut : cuts) {
    for (auto compression : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
      INFO(cut.what << " " << CompressionName(compression));
      const std::string bytes = plain.substr(0, cut.size);
      WriteFile(dir.file("cut"), compression == Compression::kGzip   ? GzipBytes(bytes)
                                 : compression == Compression::kZlib ? ZlibBytes(bytes)
                                                                     : bytes);
      const Outcome out = ReadAll(dir.file("cut"));
      REQUIRE(out.records.size() == last);
      REQUIRE(out.errors.size() == 1);
      CHECK(out.errors[0].kind == ReadErrorKind::kTruncatedRecord);
      CHECK(out.errors[0].record_index == last);
      CHECK(out.errors[0].offset == at);
      CHECK_THAT(out.errors[0].message, Catch::Contains("expected " + std::to_string(length + 16)) &&
                                            Catch::Contains(std::to_string(cut.size - at) + " present"));
    }
  }

  // A flipped payload byte deep inside a large record: that record is skipped, the next is read.
  std::string flipped = plain;
  const size_t bad = records.size() - 2;
  flipped[OffsetOf(records, bad) + 12 + 60000] ^= 0x10;
  for (auto compression : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    INFO("flipped byte, " << CompressionName(compression));
    WriteFile(dir.file("flip"), compression == Compression::kGzip   ? GzipBytes(flipped)
                                : compression == Compression::kZlib ? ZlibBytes(flipped)
                                                                    : flipped);
    const Outcome out = ReadAll(dir.file("flip"));
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kCorruptedData);
    CHECK(out.errors[0].recoverable);
    CHECK(out.errors[0].record_index == bad);
    CHECK(out.records.size() == records.size() - 1);
    CHECK(out.records.back() == records.back());
  }

  // Broken compressed streams inside a large record: a decompression error at that record.
  const std::string gz = GzipBytes(plain);
  for (auto backend : {InflateBackend::kIsal, InflateBackend::kZlib}) {
    INFO(InflateBackendName(backend));
    ReaderOptions o;
    o.inflate = backend;
    WriteFile(dir.file("cut.gz"), gz.substr(0, gz.size() - 3000));
    Outcome out = ReadAll(dir.file("cut.gz"), o);
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kDecompression);
    CHECK(out.errors[0].record_index >= last - 2);  // the inflater may hold back the last output
    std::string bad_trailer = gz;
    bad_trailer[bad_trailer.size() - 6] ^= 0x40;  // the gzip CRC-32 trailer
    WriteFile(dir.file("crc.gz"), bad_trailer);
    out = ReadAll(dir.file("crc.gz"), o);
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kDecompression);
  }

  // A claimed length that the data does not back is never allocated up front, compressed or not
  // (the window grows as data arrives and the record ends as a truncation).
  const std::string claim = FrameRecord("ok") + LengthHeader(uint64_t{100} << 30) + std::string(200000, 'c');
  WriteFile(dir.file("claim"), claim);
  WriteFile(dir.file("claim.gz"), GzipBytes(claim));
  for (const char* file : {"claim", "claim.gz"}) {
    INFO(file);
    ReaderOptions o;
    o.max_record_bytes = uint64_t{1} << 40;
    const Outcome out = ReadAll(dir.file(file), o);  // NextInto would throw std::bad_alloc if it allocated
    CHECK(out.records == std::vector<std::string>{"ok"});
    REQUIRE(out.errors.size() == 1);
    CHECK(out.errors[0].kind == ReadErrorKind::kTruncatedRecord);
  }
}

TEST_CASE("NextInto: an allocator that throws leaves the record to be read again") {
  TempDir dir;
  const auto records = LargeRecords();
  WriteFile(dir.file("p"), FrameRecords(records));
  struct Failing final : RecordAllocator {
    int fail = 0;  // the next `fail` calls throw
    std::string buffer;
    uint8_t* Allocate(uint64_t length) override {
      if (fail > 0) {
        --fail;
        throw std::bad_alloc();
      }
      buffer.assign(length, '\0');
      return reinterpret_cast<uint8_t*>(buffer.data());
    }
  } allocator;
  for (size_t min_direct : {size_t{1}, size_t{64} << 10}) {
    ReaderOptions o;
    o.direct_read_min_bytes = min_direct;
    TFRecordReader reader(dir.file("p"), o);
    Record rec;
    ReadError err;
    for (size_t i = 0; i < records.size(); ++i) {
      INFO("record " << i << ", direct from " << min_direct);
      allocator.fail = 1;
      CHECK_THROWS_AS(reader.NextInto(allocator, &rec, &err), std::bad_alloc);
      REQUIRE(reader.NextInto(allocator, &rec, &err) == TFRecordReader::Status::kRecord);
      CHECK(rec.index == i);
      CHECK(std::string(reinterpret_cast<const char*>(rec.data.data()), rec.data.size()) == records[i]);
    }
    CHECK(reader.NextInto(allocator, &rec, &err) == TFRecordReader::Status::kEnd);
  }
}

// ---- ReadQueue: several reads in flight (io_uring) ----------------------------------------------

TEST_CASE("ReadQueue returns the file's bytes in order, whatever the block size, depth and read sizes") {
  TempDir dir;
  std::string bytes(300'001, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  WriteFile(dir.file("f"), bytes);
  for (size_t block : {size_t{1}, size_t{4096}, size_t{65536}, size_t{1} << 20}) {
    for (size_t depth : {size_t{2}, size_t{3}, size_t{8}}) {
      for (size_t ask : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
        if (block == 1 && ask > 1000) continue;  // 300k one-byte reads are enough once
        INFO("block " << block << " depth " << depth << " ask " << ask);
        const int fd = ::open(dir.file("f").c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        std::string why;
        auto q = ReadQueue::Create(fd, 0, bytes.size(), block, depth, &why);
        if (!q) {
          ::close(fd);
          WARN("io_uring unavailable here: " << why);
          return;
        }
        CHECK(q->depth() == depth);
        std::string got;
        std::vector<uint8_t> buf(ask);
        for (ssize_t n; (n = q->Read(buf.data(), ask)) > 0;) {
          got.append(reinterpret_cast<const char*>(buf.data()), static_cast<size_t>(n));
        }
        CHECK(got == bytes);
        CHECK(q->Read(buf.data(), ask) == 0);  // the end again
        q.reset();
        ::close(fd);
      }
    }
  }
}

TEST_CASE("ReadQueue::Peek shows the bytes in place to the block's end; Consume takes them, mixed with Read") {
  TempDir dir;
  std::string bytes(100'003, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 11);
  WriteFile(dir.file("f"), bytes);
  for (size_t block : {size_t{1}, size_t{333}, size_t{4096}}) {
    INFO("block " << block);
    const int fd = ::open(dir.file("f").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::string why;
    auto q = ReadQueue::Create(fd, 0, bytes.size(), block, 3, &why);
    if (!q) {
      ::close(fd);
      WARN("io_uring unavailable here: " << why);
      return;
    }
    std::string got;
    for (size_t step = 0;; ++step) {
      if (step % 3 == 2) {  // a copy now and then
        uint8_t buf[100];
        const ssize_t n = q->Read(buf, sizeof buf);
        REQUIRE(n >= 0);
        if (n == 0) break;
        got.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
        continue;
      }
      const uint8_t* data = nullptr;
      const ssize_t n = q->Peek(&data);
      REQUIRE(n >= 0);
      if (n == 0) break;
      // Never past the block holding the position: its end is a multiple of the block size.
      const size_t position = got.size();
      const size_t end = position + static_cast<size_t>(n);
      CHECK(end <= (position / block + 1) * block);
      CHECK((end % block == 0 || end == bytes.size()));
      CHECK(q->Peek(&data) == n);  // nothing taken yet
      const size_t take = step % 2 ? static_cast<size_t>(n) : (static_cast<size_t>(n) + 1) / 2;
      got.append(reinterpret_cast<const char*>(data), take);
      q->Consume(take);
    }
    CHECK(got == bytes);
    const uint8_t* data = nullptr;
    CHECK(q->Peek(&data) == 0);
    q.reset();
    ::close(fd);
  }
}

TEST_CASE("ReadQueue::SetAllowance: never more blocks held than allowed, the bytes in order as it changes, blocks freed at the end") {
  TempDir dir;
  std::string bytes(200'003, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 9);
  WriteFile(dir.file("f"), bytes);
  constexpr size_t kBlock = 4096, kDepth = 9;
  // An allowance at Create, then one step of a pattern every 1000 bytes taken (a file opened
  // ahead of its turn taking more blocks as the files before it end, and back).
  const std::vector<std::pair<size_t, std::vector<size_t>>> cases = {
      {1, {1}}, {1, {1, 2, 3, 5, 9, 20}}, {9, {9, 4, 1, 1, 6}}, {3, {0, 3, 1, 9, 2}}};
  for (const auto& [start, steps] : cases) {
    INFO("allowance " << start << " then " << steps.size() << " steps");
    const int fd = ::open(dir.file("f").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::string why;
    auto q = ReadQueue::Create(fd, 0, bytes.size(), kBlock, kDepth, &why, start);
    if (!q) {
      ::close(fd);
      WARN("io_uring unavailable here: " << why);
      return;
    }
    size_t allowance = std::clamp<size_t>(start, 1, kDepth);
    CHECK(q->allowance() == allowance);
    CHECK(q->blocks() == allowance);  // read at once
    CHECK_FALSE(q->all_requested());
    std::string got;
    size_t step = 0;
    uint8_t buf[1000];
    for (;;) {
      const size_t before = q->blocks();
      const ssize_t n = q->Read(buf, sizeof buf);
      REQUIRE(n >= 0);
      if (n == 0) break;
      got.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
      // Never more than allowed, but blocks read before a lowering stay until taken.
      CHECK(q->blocks() <= std::max(allowance, before));
      // Until the file's last block is asked for, as many as allowed (a taken block is replaced).
      if (!q->all_requested()) CHECK(q->blocks() >= allowance);
      if (got.size() % 7000 < 1000) {
        allowance = std::clamp<size_t>(steps[step++ % steps.size()], 1, kDepth);
        q->SetAllowance(allowance);
        CHECK(q->allowance() == allowance);
        if (!q->all_requested()) CHECK(q->blocks() >= allowance);  // a raise reads at once
      }
    }
    CHECK(got == bytes);
    CHECK(q->all_requested());
    CHECK(q->blocks() == 0);  // every block taken and freed
    CHECK(q->Read(buf, sizeof buf) == 0);
    q.reset();
    ::close(fd);
  }
}

TEST_CASE("ReadQueue::SetDepth: deeper or shallower in place, the bytes in order, the allowance asked kept") {
  TempDir dir;
  std::string bytes(300'007, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 11);
  WriteFile(dir.file("f"), bytes);
  constexpr size_t kBlock = 4096;
  // (start depth, allowance at Create, the depths set one by one every 5000 bytes taken)
  const std::vector<std::tuple<size_t, size_t, std::vector<size_t>>> cases = {
      {3, SIZE_MAX, {9, 17, 5, 2, 31, 4}}, {9, SIZE_MAX, {2, 2, 9, 3, 17}}, {5, 3, {17, 2, 9, 3}}};
  for (const auto& [start, asked, steps] : cases) {
    INFO("depth " << start << ", allowance " << asked << ", " << steps.size() << " steps");
    const int fd = ::open(dir.file("f").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::string why;
    auto q = ReadQueue::Create(fd, 0, bytes.size(), kBlock, start, &why, asked);
    if (!q) {
      ::close(fd);
      WARN("io_uring unavailable here: " << why);
      return;
    }
    size_t depth = start, most = start;  // `most`: what a shallower queue may hold until taken
    size_t drained_at = 0;  // once this much is taken, a shallower queue holds its allowance at most
    std::string got;
    size_t step = 0;
    uint8_t buf[1000];
    for (;;) {
      const ssize_t n = q->Read(buf, sizeof buf);
      REQUIRE(n >= 0);
      if (n == 0) break;
      got.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
      const size_t allowance = std::min(asked, depth);
      CHECK(q->blocks() <= std::max(allowance, most));
      most = std::max<size_t>(q->blocks(), allowance);
      if (got.size() >= drained_at) CHECK(q->blocks() <= allowance);  // the blocks above it freed as taken
      if (!q->all_requested()) CHECK(q->blocks() >= allowance);  // a taken block is read again
      if (got.size() % 5000 < 1000 && step < steps.size()) {
        depth = steps[step++];
        drained_at = got.size() + q->blocks() * kBlock;
        REQUIRE(q->SetDepth(depth));
        CHECK(q->depth() == depth);
        CHECK(q->allowance() == std::min(asked, depth));
        if (!q->all_requested()) CHECK(q->blocks() >= std::min(asked, depth));  // deeper reads at once
      }
    }
    CHECK(step == steps.size());
    CHECK(got == bytes);  // nothing lost or read twice into the stream, whatever moved
    CHECK(q->blocks() == 0);
    // More reads than its io_uring was made for: refused, nothing changed.
    CHECK_FALSE(q->SetDepth(ReadQueue::kRingEntries));
    CHECK(q->depth() == depth);
    q.reset();
    ::close(fd);
  }
}

TEST_CASE("ReadQueue reads on past the size it was given (a file that grew) and from an offset") {
  TempDir dir;
  const std::string first(10'000, 'a');
  WriteFile(dir.file("g"), first + std::string(5'000, 'b'));
  const int fd = ::open(dir.file("g").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::string why;
  auto q = ReadQueue::Create(fd, 2'000, first.size(), 4096, 2, &why);  // 8000 queued bytes, then pread
  if (!q) {
    ::close(fd);
    WARN("io_uring unavailable here: " << why);
    return;
  }
  std::string got;
  uint8_t buf[3000];
  for (ssize_t n; (n = q->Read(buf, sizeof buf)) > 0;) got.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  CHECK(got == std::string(8'000, 'a') + std::string(5'000, 'b'));
  q.reset();
  ::close(fd);
}

namespace {

// The same records, offsets and errors (kind, record, offset; and the message when `messages`)
// in `b` as in `a`: a file read with queued reads against the same file read with read().
void CheckSameOutcome(const Outcome& a, const Outcome& b, bool messages) {
  CHECK(b.records == a.records);
  CHECK(b.offsets == a.offsets);
  REQUIRE(b.errors.size() == a.errors.size());
  for (size_t i = 0; i < a.errors.size(); ++i) {
    CHECK(b.errors[i].kind == a.errors[i].kind);
    CHECK(b.errors[i].record_index == a.errors[i].record_index);
    CHECK(b.errors[i].offset == a.errors[i].offset);
    if (messages) CHECK(b.errors[i].message == a.errors[i].message);
  }
}

}  // namespace

TEST_CASE("reads_in_flight: plain files give the same records, offsets and errors with a ReadQueue") {
  TempDir dir;
  std::vector<std::string> records = {"", "x", std::string(1000, 'q'), std::string(100000, 'z'), "tail"};
  for (int i = 0; i < 50; ++i) records.push_back(std::string(static_cast<size_t>(i * 13), static_cast<char>(i)));
  std::string plain = FrameRecords(records);
  WriteFile(dir.file("p.tfrecord"), plain);
  plain[OffsetOf(records, 2) + kRecordHeaderBytes + 10] ^= 1;  // record 2's payload: data CRC
  WriteFile(dir.file("flip.tfrecord"), plain);
  WriteFile(dir.file("cut.tfrecord"), plain.substr(0, OffsetOf(records, 4) + 5));  // inside record 4's header
  for (const Mode mode : {Mode::kNext, Mode::kNextInto, Mode::kNextIntoDirect}) {
    for (size_t buffer : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
      for (size_t block : {size_t{7}, size_t{4096}, size_t{256} << 10}) {
        INFO("mode " << static_cast<int>(mode) << " buffer " << buffer << " block " << block);
        ReaderOptions one;
        one.buffer_bytes = buffer;
        ReaderOptions queued = one;
        queued.reads_in_flight = 4;
        queued.read_block_bytes = block;
        for (const char* file : {"p.tfrecord", "flip.tfrecord", "cut.tfrecord"}) {
          INFO(file);
          CheckSameOutcome(ReadAllIn(mode, dir.file(file), one), ReadAllIn(mode, dir.file(file), queued),
                           /*messages=*/false);
        }
        const Outcome whole = ReadAllIn(mode, dir.file("p.tfrecord"), queued);
        CHECK(whole.records == records);
        CHECK(whole.errors.empty());
      }
    }
  }
  // The reader says whether it reads with a queue (1 where io_uring is not available).
  ReaderOptions queued;
  queued.reads_in_flight = 4;
  TFRecordReader reader(dir.file("p.tfrecord"), queued);
  Record record;
  ReadError error;
  REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
  CHECK((reader.reads_in_flight() == 4 || reader.reads_in_flight() == 1));
  // GZIP files too: the inflater reads the compressed bytes through the queue.
  WriteFile(dir.file("g.tfrecord.gz"), GzipBytes(FrameRecords(records)));
  TFRecordReader gz(dir.file("g.tfrecord.gz"), queued);
  REQUIRE(gz.Next(&record, &error) == TFRecordReader::Status::kRecord);
  CHECK(gz.reads_in_flight() == reader.reads_in_flight());
}

TEST_CASE("reads_in_flight: GZIP and ZLIB files give the same records, offsets and errors with a ReadQueue") {
  TempDir dir;
  std::vector<std::string> records = {"", "x", std::string(1000, 'q'), std::string(100000, 'z'), "tail"};
  for (int i = 0; i < 300; ++i) records.push_back(std::string(static_cast<size_t>(i * 13), static_cast<char>(i)));
  const std::string plain = FrameRecords(records);
  std::string flip = plain;
  flip[OffsetOf(records, 2) + kRecordHeaderBytes + 10] ^= 1;  // record 2's payload: data CRC
  const std::string gz = GzipBytes(plain);
  WriteFile(dir.file("g.gz"), gz);
  WriteFile(dir.file("z.zz"), ZlibBytes(plain));
  WriteFile(dir.file("flip.gz"), GzipBytes(flip));
  WriteFile(dir.file("cut.gz"), gz.substr(0, gz.size() * 2 / 3));  // the stream ends early
  std::string bad = gz;
  bad[bad.size() / 2] ^= 0x55;  // a deflate error (or a CRC one) half way
  WriteFile(dir.file("bad.gz"), bad);
  for (const Mode mode : {Mode::kNext, Mode::kNextInto, Mode::kNextIntoDirect}) {
    for (size_t block : {size_t{7}, size_t{4096}, size_t{256} << 10}) {
      INFO("mode " << static_cast<int>(mode) << " block " << block);
      ReaderOptions one;
      one.buffer_bytes = 4096;
      ReaderOptions queued = one;
      queued.reads_in_flight = 4;
      queued.read_block_bytes = block;
      for (const char* file : {"g.gz", "z.zz", "flip.gz", "cut.gz", "bad.gz"}) {
        INFO(file);
        CheckSameOutcome(ReadAllIn(mode, dir.file(file), one), ReadAllIn(mode, dir.file(file), queued),
                         /*messages=*/true);
      }
      CHECK(ReadAllIn(mode, dir.file("g.gz"), queued).records == records);
      CHECK(ReadAllIn(mode, dir.file("z.zz"), queued).records == records);
    }
  }
}

TEST_CASE("reads_in_flight: a file whose io_uring queue cannot be set up is read with read(), and says why") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 300; ++i) records.push_back(std::string(static_cast<size_t>(i * 7), static_cast<char>(i)));
  WriteFile(dir.file("p.tfrecord"), FrameRecords(records));
  std::string why;
  const bool io_uring = ReadQueue::Available(&why);
  ReaderOptions queued;
  queued.reads_in_flight = 4;
  queued.read_block_bytes = 4096;
  {
    TFRecordReader reader(dir.file("p.tfrecord"), queued);
    Record record;
    ReadError error;
    REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
    CHECK(reader.queued_reads_unavailable() == (io_uring ? "" : why));
  }
  // Out of descriptors after the file's own (RLIMIT_NOFILE at the lowest free one + 1): the
  // file opens, its queue's io_uring_queue_init fails with EMFILE, as where io_uring works but
  // not for one more ring.
  TFRecordReader reader(dir.file("p.tfrecord"), queued);
  Record record;
  ReadError error;
  TFRecordReader::Status first;
  {
    TightFileLimit tight(1);
    first = reader.Next(&record, &error);
  }
  INFO(error.message);
  REQUIRE(first == TFRecordReader::Status::kRecord);
  CHECK(reader.reads_in_flight() == 1);
  CHECK(reader.queued_reads_unavailable() ==
        (io_uring ? std::string("io_uring_queue_init: ") + std::strerror(EMFILE) : why));
  // Every record still comes, read with read().
  std::vector<std::string> got = {std::string(record.data.begin(), record.data.end())};
  while (reader.Next(&record, &error) == TFRecordReader::Status::kRecord) {
    got.emplace_back(record.data.begin(), record.data.end());
  }
  CHECK(got == records);
}

TEST_CASE("reads_in_flight: SetReadsInFlight says why its new queue could not be set up, and forgets it once one is") {
  std::string why;
  if (!ReadQueue::Available(&why)) {
    std::cout << "tfrecord_reader_test: io_uring is not available here (" << why << ")" << std::endl;
    return;
  }
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 2000; ++i) records.push_back(std::string(100, static_cast<char>(i)));
  WriteFile(dir.file("p.tfrecord"), FrameRecords(records));
  ReaderOptions one;
  one.read_block_bytes = 4096;
  one.buffer_bytes = 4096;
  TFRecordReader reader(dir.file("p.tfrecord"), one);
  Record record;
  ReadError error;
  REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
  CHECK(reader.queued_reads_unavailable().empty());
  {
    TightFileLimit tight(0);  // no descriptor left at all
    reader.SetReadsInFlight(4);
  }
  CHECK(reader.reads_in_flight() == 1);
  CHECK(reader.queued_reads_unavailable() == std::string("io_uring_queue_init: ") + std::strerror(EMFILE));
  reader.SetReadsInFlight(8);
  CHECK(reader.reads_in_flight() == 8);
  CHECK(reader.queued_reads_unavailable().empty());
  size_t n = 1;
  while (reader.Next(&record, &error) == TFRecordReader::Status::kRecord) ++n;
  CHECK(n == records.size());
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // their allocators keep no mallinfo
TEST_CASE("reads_in_flight: a queued file's window is 64 KiB, not buffer_bytes (the blocks hold what is read ahead)") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 20000; ++i) records.push_back(std::string(600, static_cast<char>('a' + i % 26)));
  WriteFile(dir.file("p.tfrecord"), FrameRecords(records));
  ReaderOptions queued;  // buffer_bytes: the default 1 MiB
  queued.reads_in_flight = 16;
  const size_t blocks = (queued.reads_in_flight + 1) * queued.read_block_bytes;
  const size_t before = mallinfo2().uordblks;
  {
    TFRecordReader reader(dir.file("p.tfrecord"), queued);
    Record record;
    ReadError error;
    size_t most = 0;
    size_t count = 0;
    while (reader.Next(&record, &error) == TFRecordReader::Status::kRecord) {
      REQUIRE(std::string(record.data.begin(), record.data.end()) == records[count]);
      ++count;
      if (count == 1 && reader.reads_in_flight() == 1) {
        WARN("io_uring is not available here: nothing to check");
        return;
      }
      most = std::max(most, mallinfo2().uordblks - before);
    }
    CHECK(count == records.size());
    INFO("heap in use while reading: " << most << " bytes, of which blocks " << blocks);
    CHECK(most >= blocks + TFRecordReader::kQueuedWindowBytes);
    CHECK(most < blocks + TFRecordReader::kQueuedWindowBytes + (32u << 10));  // + the queue's bookkeeping
  }
  CHECK(mallinfo2().uordblks < before + (16u << 10));  // all freed with the reader (Catch keeps a little)
}
#endif

TEST_CASE("reads_in_flight: a file that grows or shrinks after the first record, and a too-large record") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 300; ++i) records.push_back(std::string(static_cast<size_t>(i * 53 % 3000), static_cast<char>(i)));
  const std::string framed = FrameRecords(records);
  const size_t half = OffsetOf(records, 150);
  for (const size_t block : {size_t{700}, size_t{4096}}) {
    INFO("block " << block);
    ReaderOptions queued;
    queued.reads_in_flight = 3;
    queued.read_block_bytes = block;
    queued.buffer_bytes = 1000;
    Record record;
    ReadError error;
    {
      // Grows: 150 records at open, the other 150 appended after the first record is read. The
      // queue's blocks end at the size at open; the rest is read on with pread.
      WriteFile(dir.file("grow.tfrecord"), framed.substr(0, half));
      TFRecordReader reader(dir.file("grow.tfrecord"), queued);
      REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
      std::vector<std::string> got = {std::string(record.data.begin(), record.data.end())};
      {
        std::ofstream out(dir.file("grow.tfrecord"), std::ios::binary | std::ios::app);
        out << framed.substr(half);
      }
      TestAllocator allocator;
      for (size_t i = 1;; ++i) {
        const auto status = i % 2 ? reader.Next(&record, &error) : reader.NextInto(allocator, &record, &error);
        if (status == TFRecordReader::Status::kEnd) break;
        if (status == TFRecordReader::Status::kError && error.kind == ReadErrorKind::kFileChanged) {
          CHECK(i == records.size());  // said at the end, after every record
          continue;
        }
        REQUIRE(status == TFRecordReader::Status::kRecord);
        CHECK(record.offset == OffsetOf(records, i));
        got.emplace_back(record.data.begin(), record.data.end());
      }
      CHECK(got == records);
    }
    {
      // Shrinks to the middle of record 200 after the first record: the same truncation error
      // (record index and offset) as a reader without a queue reports on the cut file.
      WriteFile(dir.file("shrink.tfrecord"), framed);
      TFRecordReader reader(dir.file("shrink.tfrecord"), queued);
      REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
      REQUIRE(::truncate(dir.file("shrink.tfrecord").c_str(), static_cast<off_t>(OffsetOf(records, 200) + 20)) == 0);
      size_t n = 1;
      TFRecordReader::Status status;
      while ((status = reader.Next(&record, &error)) == TFRecordReader::Status::kRecord) {
        CHECK(std::string(record.data.begin(), record.data.end()) == records[n]);
        ++n;
      }
      // Blocks read before the cut still hold their bytes: the reader may get further than
      // the cut, never past the file as it was, and ends with an error or the end.
      CHECK(n >= 200);
      CHECK(n <= records.size());
      if (status == TFRecordReader::Status::kError) CHECK(error.offset == OffsetOf(records, n));
    }
    {
      // A record over max_record_bytes is skipped in place; its neighbours arrive.
      std::vector<std::string> big = {"a", std::string(20000, 'B'), "c", std::string(5000, 'd')};
      WriteFile(dir.file("big.tfrecord"), FrameRecords(big));
      ReaderOptions o = queued;
      o.max_record_bytes = 10000;
      TFRecordReader reader(dir.file("big.tfrecord"), o);
      std::vector<std::string> got;
      std::vector<ReadErrorKind> kinds;
      TFRecordReader::Status status;
      while ((status = reader.Next(&record, &error)) != TFRecordReader::Status::kEnd) {
        if (status == TFRecordReader::Status::kError) {
          kinds.push_back(error.kind);
          CHECK(error.offset == OffsetOf(big, 1));
          continue;
        }
        got.emplace_back(record.data.begin(), record.data.end());
      }
      CHECK(got == std::vector<std::string>{"a", "c", std::string(5000, 'd')});
      CHECK(kinds == std::vector<ReadErrorKind>{ReadErrorKind::kRecordTooLarge});
    }
  }
}

TEST_CASE("SetReadsInFlight keeps the record Next() returned last valid until the next call") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 200; ++i) records.push_back(std::string(static_cast<size_t>(100 + i), static_cast<char>('a' + i % 26)));
  WriteFile(dir.file("p.tfrecord"), FrameRecords(records));
  ReaderOptions o;
  o.read_block_bytes = 4096;
  o.reads_in_flight = 4;
  TFRecordReader reader(dir.file("p.tfrecord"), o);
  Record record;
  ReadError error;
  const size_t steps[] = {1, 3, 8, 2};
  for (size_t i = 0; i < records.size(); ++i) {
    REQUIRE(reader.Next(&record, &error) == TFRecordReader::Status::kRecord);
    if (i % 5 == 0) reader.SetReadsInFlight(steps[(i / 5) % 4]);
    if (i % 7 == 0) {  // several switches between two calls
      reader.SetReadsInFlight(4);
      reader.SetReadsInFlight(1);
    }
    // Read after the switch (ASan would see a freed or re-read block or window).
    CHECK(std::string(record.data.begin(), record.data.end()) == records[i]);
  }
  CHECK(reader.Next(&record, &error) == TFRecordReader::Status::kEnd);
}

TEST_CASE("SetReadsInFlight mid-file: the same records whatever is switched when") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 400; ++i) records.push_back(std::string(static_cast<size_t>(i * 37 % 5000), static_cast<char>(i)));
  WriteFile(dir.file("p.tfrecord"), FrameRecords(records));
  WriteFile(dir.file("g.tfrecord.gz"), GzipBytes(FrameRecords(records)));  // the inflater's queue switched
  for (const char* file : {"p.tfrecord", "g.tfrecord.gz"}) {
    for (size_t buffer : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
      INFO(file << ", buffer " << buffer);
      ReaderOptions o;
      o.buffer_bytes = buffer;
      o.read_block_bytes = 3000;
      TFRecordReader reader(dir.file(file), o);
      TestAllocator allocator;
      const size_t steps[] = {1, 4, 2, 1, 8, 3};
      std::vector<std::string> got;
      Record record;
      ReadError error;
      for (size_t i = 0;; ++i) {
        if (i % 17 == 0) reader.SetReadsInFlight(steps[(i / 17) % 6]);
        const auto status = i % 2 ? reader.Next(&record, &error) : reader.NextInto(allocator, &record, &error);
        if (status == TFRecordReader::Status::kEnd) break;
        REQUIRE(status == TFRecordReader::Status::kRecord);
        got.emplace_back(reinterpret_cast<const char*>(record.data.data()), record.data.size());
        CHECK(record.offset == OffsetOf(records, i));
      }
      CHECK(got == records);
    }
  }
}
