// make_bench_data: writes the data sets format_bench reads into a scratch directory (outside the
// repository). A data set that is already there (its MANIFEST names the same generator version
// and parameters) is reused, so the data is generated once per machine.
//
//   make_bench_data [--out DIR] [--taxi DIR] [--min-mb N] [--files N] [--force]
//
//   DIR/taxi_plain/       the real Chicago taxi records (../shared/data/tfx/csv_example_gen/Split-train,
//                         9,909 tf.train.Example records written by TensorFlow, read with
//                         TFRecordReader), replicated until the uncompressed TFRecord stream is
//                         >= N MB, re-written with TFRecordWriter, plain.
//   DIR/taxi_gzip/        the same records, GZIP (zlib level 6).
//   DIR/bytes100k_plain/  100 KiB records of random bytes, one bytes feature "data" per Example,
//                         plain.
//   DIR/text100k_gzip/    100 KiB records of text-like bytes (sentences over a Zipf vocabulary,
//                         gzip ratio about 5x), one bytes feature "data", GZIP (level 6).
//   DIR/taxi.schema       the 18-feature spec derived from the taxi records: one line per
//                         feature, "name fixed|var int64|float32|bytes". A feature that holds
//                         exactly one value in every record is FixedLen scalar, otherwise VarLen
//                         (the ones that are sometimes present-but-empty).
//
// Each data set directory holds part-NNNNN.tfrecord[.gz] files and a MANIFEST of key=value lines
// (records, stream_bytes, file_bytes, payload_bytes, ...) that format_bench reads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "format/tfrecord_reader.h"
#include "format/tfrecord_writer.h"

namespace fs = std::filesystem;
using ringfeed::Compression;

namespace {

constexpr int kGeneratorVersion = 1;
constexpr size_t kBigRecordBytes = 100 * 1024;  // "100 KB" records: 100 KiB of payload

// ---- tiny protobuf encoder / walker for tf.train.Example --------------------------------------

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void PutLen(std::string& out, uint32_t field, const std::string& bytes) {
  PutVarint(out, (uint64_t{field} << 3) | 2);
  PutVarint(out, bytes.size());
  out += bytes;
}

// Example{features{feature{key: name, value{bytes_list{value: data}}}}}
std::string BytesExample(const std::string& name, const std::string& data) {
  std::string bytes_list, feature, entry, features, example;
  PutLen(bytes_list, 1, data);
  PutLen(feature, 1, bytes_list);
  PutLen(entry, 1, name);
  PutLen(entry, 2, feature);
  PutLen(features, 1, entry);
  PutLen(example, 1, features);
  return example;
}

bool GetVarint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 70 && p < end; shift += 7) {
    const uint8_t b = *p++;
    r |= uint64_t{b & 0x7fu} << shift;
    if (b < 0x80) {
      *v = r;
      return true;
    }
  }
  return false;
}

// Calls on(field, wire, begin, end) for each field of a message; begin/end delimit the payload of
// length-delimited fields (for other wire types, the encoded value).
template <typename F>
bool Walk(const uint8_t* p, const uint8_t* end, F&& on) {
  while (p < end) {
    uint64_t tag, n;
    if (!GetVarint(p, end, &tag)) return false;
    const uint32_t field = static_cast<uint32_t>(tag >> 3), wire = static_cast<uint32_t>(tag & 7);
    const uint8_t* b = p;
    switch (wire) {
      case 0:
        if (!GetVarint(p, end, &n)) return false;
        break;
      case 1: p += 8; break;
      case 5: p += 4; break;
      case 2:
        if (!GetVarint(p, end, &n) || n > static_cast<uint64_t>(end - p)) return false;
        b = p;
        p += n;
        break;
      default: return false;
    }
    if (p > end) return false;
    on(field, wire, b, p);
  }
  return true;
}

struct KeyStats {
  int kind = 0;                // 1 bytes, 2 float, 3 int64 (0: never seen with a list set)
  uint64_t with_one_value = 0;  // records where the feature holds exactly one value
  uint64_t empty = 0;           // present with no list set, or an empty list
  uint64_t seen = 0;            // records where the key is present
};

// Records per-key statistics of one serialized Example.
bool Observe(const std::string& rec, std::map<std::string, KeyStats>& stats) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(rec.data());
  return Walk(p, p + rec.size(), [&](uint32_t f, uint32_t w, const uint8_t* b, const uint8_t* e) {
    if (f != 1 || w != 2) return;
    Walk(b, e, [&](uint32_t f2, uint32_t w2, const uint8_t* b2, const uint8_t* e2) {
      if (f2 != 1 || w2 != 2) return;
      std::string key;
      const uint8_t *fb = nullptr, *fe = nullptr;
      Walk(b2, e2, [&](uint32_t f3, uint32_t w3, const uint8_t* b3, const uint8_t* e3) {
        if (f3 == 1 && w3 == 2) key.assign(reinterpret_cast<const char*>(b3), e3 - b3);
        if (f3 == 2 && w3 == 2) fb = b3, fe = e3;
      });
      KeyStats& s = stats[key];
      ++s.seen;
      int kind = 0;
      uint64_t count = 0;
      if (fb) {
        Walk(fb, fe, [&](uint32_t lf, uint32_t lw, const uint8_t* lb, const uint8_t* le) {
          if (lf < 1 || lf > 3 || lw != 2) return;
          kind = static_cast<int>(lf);
          count = 0;
          Walk(lb, le, [&](uint32_t vf, uint32_t vw, const uint8_t* vb, const uint8_t* ve) {
            if (vf != 1) return;
            if (kind == 1 || vw != 2) {
              ++count;
            } else if (kind == 2) {
              count += (ve - vb) / 4;
            } else {
              for (const uint8_t* q = vb; q < ve; ++q) count += *q < 0x80;
            }
          });
        });
      }
      if (kind != 0) {
        if (s.kind != 0 && s.kind != kind) std::cerr << "warning: key " << key << " has mixed list kinds\n";
        s.kind = kind;
      }
      if (count == 1) ++s.with_one_value;
      if (count == 0) ++s.empty;
    });
  });
}

// ---- data sets --------------------------------------------------------------------------------

struct Manifest {
  std::map<std::string, std::string> kv;
  void Set(const std::string& k, uint64_t v) { kv[k] = std::to_string(v); }
  void Set(const std::string& k, const std::string& v) { kv[k] = v; }
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

struct Options {
  fs::path out = "/tmp/ringfeed-bench";
  fs::path taxi;
  uint64_t min_bytes = 200'000'000;
  int files = 8;
  bool force = false;
};

// Writes `count` records produced by make(i) into `files` files of `dir` (records split evenly,
// in order). Returns the uncompressed stream bytes.
template <typename Make>
void WriteDataSet(const Options& opt, const std::string& name, Compression compression, uint64_t count, Make&& make,
                  Manifest manifest) {
  const fs::path final_dir = opt.out / name;
  const std::string params = "v" + std::to_string(kGeneratorVersion) + " records=" + std::to_string(count) +
                             " files=" + std::to_string(opt.files);
  if (!opt.force && fs::exists(final_dir / "MANIFEST")) {
    auto old = ReadManifest(final_dir / "MANIFEST");
    if (old["params"] == params) {
      std::cout << name << ": present, reused (" << old["records"] << " records, " << old["stream_bytes"]
                << " bytes uncompressed, " << old["file_bytes"] << " on disk)\n";
      return;
    }
  }
  const fs::path tmp = opt.out / (name + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  ringfeed::WriterOptions wopt;
  wopt.compression = compression;
  wopt.level = 6;
  uint64_t stream_bytes = 0, payload = 0, file_bytes = 0, min_len = UINT64_MAX, max_len = 0;
  const char* ext = compression == Compression::kGzip ? ".tfrecord.gz" : ".tfrecord";
  for (int f = 0; f < opt.files; ++f) {
    char fname[64];
    std::snprintf(fname, sizeof fname, "part-%05d%s", f, ext);
    ringfeed::TFRecordWriter w((tmp / fname).string(), wopt);
    const uint64_t begin = count * f / opt.files, end = count * (f + 1) / opt.files;
    for (uint64_t i = begin; i < end; ++i) {
      uint64_t value_bytes = 0;
      const std::string rec = make(i, &value_bytes);
      w.Write(rec);
      stream_bytes += rec.size() + 16;
      payload += value_bytes;
      min_len = std::min<uint64_t>(min_len, rec.size());
      max_len = std::max<uint64_t>(max_len, rec.size());
    }
    w.Close();
    file_bytes += fs::file_size(tmp / fname);
  }
  manifest.Set("params", params);
  manifest.Set("compression", compression == Compression::kGzip ? "gzip" : "none");
  manifest.Set("files", static_cast<uint64_t>(opt.files));
  manifest.Set("records", count);
  manifest.Set("stream_bytes", stream_bytes);
  manifest.Set("file_bytes", file_bytes);
  manifest.Set("payload_bytes", payload);
  manifest.Set("min_record_bytes", min_len);
  manifest.Set("max_record_bytes", max_len);
  {
    std::ofstream m(tmp / "MANIFEST");
    for (auto& [k, v] : manifest.kv) m << k << "=" << v << "\n";
  }
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  std::printf("%s: wrote %llu records, %.1f MB uncompressed, %.1f MB on disk (ratio %.2f)\n", name.c_str(),
              static_cast<unsigned long long>(count), stream_bytes / 1e6, file_bytes / 1e6,
              static_cast<double>(stream_bytes) / static_cast<double>(file_bytes));
}

// Text-like bytes: sentences of 4-14 words; 85% of sentences come from a pool of 500 (Zipf-ish
// popularity), 15% are new; words from a 2,000-word Zipf vocabulary. gzip -6 ratio about 5.
class TextGen {
 public:
  explicit TextGen(uint64_t seed) : rng_(seed) {
    static const char kLetters[] = "etaoinshrdlcumwfgypbvkjxqz";
    std::vector<double> lw(26);
    for (int i = 0; i < 26; ++i) lw[i] = 26 - i;
    std::discrete_distribution<int> letter(lw.begin(), lw.end());
    const int lens[] = {2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 9, 10};
    for (int i = 0; i < 2000; ++i) {
      std::string w;
      const int n = lens[rng_() % 12];
      for (int k = 0; k < n; ++k) w.push_back(kLetters[letter(rng_)]);
      vocab_.push_back(w);
    }
    std::vector<double> ww(2000), sw(500);
    for (int i = 0; i < 2000; ++i) ww[i] = 1.0 / (i + 1);
    for (int i = 0; i < 500; ++i) sw[i] = 1.0 / std::pow(i + 1, 0.8);
    word_ = std::discrete_distribution<int>(ww.begin(), ww.end());
    sentence_ = std::discrete_distribution<int>(sw.begin(), sw.end());
    for (int i = 0; i < 500; ++i) pool_.push_back(Sentence());
  }

  std::string Make(size_t size) {
    static const char* kEnds[] = {". ", ". ", ". ", ", ", "? ", ".\n"};
    std::string out;
    out.reserve(size + 256);
    while (out.size() < size) {
      std::string s = (rng_() % 100) < 15 ? Sentence() : pool_[sentence_(rng_)];
      s[0] = static_cast<char>(s[0] - 'a' + 'A');
      out += s;
      out += kEnds[rng_() % 6];
    }
    out.resize(size);
    return out;
  }

 private:
  std::string Sentence() {
    std::string s;
    const int n = 4 + static_cast<int>(rng_() % 11);
    for (int i = 0; i < n; ++i) {
      if (i) s.push_back(' ');
      s += vocab_[word_(rng_)];
    }
    return s;
  }
  std::mt19937_64 rng_;
  std::vector<std::string> vocab_, pool_;
  std::discrete_distribution<int> word_, sentence_;
};

std::string RandomBytes(uint64_t seed, size_t size) {
  std::string out(size, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; i += 8) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(&out[i], &z, std::min<size_t>(8, size - i));
  }
  return out;
}

int Usage() {
  std::cerr << "usage: make_bench_data [--out DIR] [--taxi DIR] [--min-mb N] [--files N] [--force]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (const char* env = std::getenv("RINGFEED_BENCH_DIR")) opt.out = env;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        Usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--out") opt.out = next();
    else if (a == "--taxi") opt.taxi = next();
    else if (a == "--min-mb") opt.min_bytes = std::stoull(next()) * 1'000'000;
    else if (a == "--files") opt.files = std::stoi(next());
    else if (a == "--force") opt.force = true;
    else return Usage();
  }
  if (opt.taxi.empty()) {
    std::cerr << "make_bench_data: --taxi DIR (the csv_example_gen/Split-train folder) is required\n";
    return 2;
  }
  fs::create_directories(opt.out);

  // ---- the taxi records, read with TFRecordReader (GZIP auto-detected) ----
  std::vector<fs::path> shards;
  for (auto& e : fs::directory_iterator(opt.taxi)) {
    if (e.is_regular_file()) shards.push_back(e.path());
  }
  std::sort(shards.begin(), shards.end());
  std::vector<std::string> taxi;
  for (const auto& s : shards) {
    ringfeed::TFRecordReader r(s.string());
    ringfeed::Record rec;
    ringfeed::ReadError err;
    while (true) {
      auto st = r.Next(&rec, &err);
      if (st == ringfeed::TFRecordReader::Status::kEnd) break;
      if (st == ringfeed::TFRecordReader::Status::kError) {
        std::cerr << "make_bench_data: " << err.message << "\n";
        return 1;
      }
      taxi.emplace_back(reinterpret_cast<const char*>(rec.data.data()), rec.data.size());
    }
  }
  if (taxi.empty()) {
    std::cerr << "make_bench_data: no records under " << opt.taxi << "\n";
    return 1;
  }
  uint64_t taxi_stream = 0;
  for (auto& r : taxi) taxi_stream += r.size() + 16;
  std::printf("taxi source: %zu records from %zu files, %.1f bytes/record framed\n", taxi.size(), shards.size(),
              static_cast<double>(taxi_stream) / taxi.size());

  // ---- the schema ----
  std::map<std::string, KeyStats> stats;
  for (auto& r : taxi) {
    if (!Observe(r, stats)) {
      std::cerr << "make_bench_data: a taxi record is not a valid Example\n";
      return 1;
    }
  }
  {
    std::ofstream schema(opt.out / "taxi.schema");
    std::printf("taxi schema (%zu features):\n", stats.size());
    for (auto& [key, s] : stats) {
      const bool fixed = s.with_one_value == taxi.size();
      const char* dtype = s.kind == 1 ? "bytes" : s.kind == 2 ? "float32" : "int64";
      schema << key << " " << (fixed ? "fixed" : "var") << " " << dtype << "\n";
      std::printf("  %-26s %-5s %-7s  present %llu, empty %llu, one value %llu of %zu\n", key.c_str(),
                  fixed ? "fixed" : "var", dtype, static_cast<unsigned long long>(s.seen),
                  static_cast<unsigned long long>(s.empty), static_cast<unsigned long long>(s.with_one_value),
                  taxi.size());
    }
  }

  // ---- taxi replicated ----
  const uint64_t replicas = (opt.min_bytes + taxi_stream - 1) / taxi_stream;
  const uint64_t taxi_count = replicas * taxi.size();
  auto taxi_make = [&](uint64_t i, uint64_t* value_bytes) -> const std::string& {
    const std::string& r = taxi[i % taxi.size()];
    *value_bytes = r.size();
    return r;
  };
  Manifest m;
  m.Set("source", opt.taxi.string());
  m.Set("replicas", replicas);
  WriteDataSet(opt, "taxi_plain", Compression::kNone, taxi_count, taxi_make, m);
  WriteDataSet(opt, "taxi_gzip", Compression::kGzip, taxi_count, taxi_make, m);

  // ---- 100 KiB records ----
  const uint64_t big_count = ((opt.min_bytes + kBigRecordBytes - 1) / kBigRecordBytes + opt.files - 1) / opt.files * opt.files;
  Manifest mb;
  mb.Set("value_bytes", kBigRecordBytes);
  mb.Set("feature", "data");
  WriteDataSet(opt, "bytes100k_plain", Compression::kNone, big_count,
               [&](uint64_t i, uint64_t* value_bytes) {
                 *value_bytes = kBigRecordBytes;
                 return BytesExample("data", RandomBytes(i + 1, kBigRecordBytes));
               },
               mb);
  TextGen text(42);
  WriteDataSet(opt, "text100k_gzip", Compression::kGzip, big_count,
               [&](uint64_t, uint64_t* value_bytes) {
                 *value_bytes = kBigRecordBytes;
                 return BytesExample("data", text.Make(kBigRecordBytes));
               },
               mb);
  return 0;
}
