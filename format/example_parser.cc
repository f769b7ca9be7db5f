// Wire format walk of tf.train.Example (see example_parser.h for the semantics).
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   XxxList  { repeated xxx value = 1; }             packed (wire type 2) or not (0 / 5 / 2)
//
// Pass 1 walks the Example once and remembers, per spec feature, where its (last) Feature
// message is; keys not in the spec are never decoded. Pass 2 decodes each remembered Feature
// straight into its column.
#include "format/example_parser.h"

#include <bit>
#include <cstring>
#include <stdexcept>

namespace ringfeed {
namespace {

static_assert(std::endian::native == std::endian::little, "values are copied as little-endian");

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

inline bool ReadVarint(const uint8_t*& p, const uint8_t* end, uint64_t* value) {
  if (p < end && *p < 0x80) {
    *value = *p++;
    return true;
  }
  uint64_t result = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (p >= end) return false;
    const uint8_t b = *p++;
    result |= uint64_t{b & 0x7fu} << shift;
    if (b < 0x80) {
      *value = result;
      return true;
    }
  }
  return false;  // more than 10 bytes
}

inline bool ReadTag(const uint8_t*& p, const uint8_t* end, uint32_t* field, uint32_t* wire) {
  uint64_t tag;
  if (!ReadVarint(p, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return false;
  *field = static_cast<uint32_t>(tag >> 3);
  *wire = static_cast<uint32_t>(tag & 7);
  return true;
}

// Reads a length-delimited payload; [*begin, *begin + *size) stays inside [p, end).
inline bool ReadLen(const uint8_t*& p, const uint8_t* end, const uint8_t** begin, size_t* size) {
  uint64_t len;
  if (!ReadVarint(p, end, &len) || len > static_cast<uint64_t>(end - p)) return false;
  *begin = p;
  *size = static_cast<size_t>(len);
  p += len;
  return true;
}

inline bool SkipField(const uint8_t*& p, const uint8_t* end, uint32_t wire) {
  uint64_t v;
  const uint8_t* b;
  size_t n;
  switch (wire) {
    case kVarint: return ReadVarint(p, end, &v);
    case kFixed64:
      if (end - p < 8) return false;
      p += 8;
      return true;
    case kLen: return ReadLen(p, end, &b, &n);
    case kFixed32:
      if (end - p < 4) return false;
      p += 4;
      return true;
    default: return false;  // groups are not part of Example; treat as malformed
  }
}

struct FeatureRef {
  const uint8_t* data = nullptr;
  size_t size = 0;
  bool present = false;
};

// The lists of one Feature that count (protobuf oneof + merge semantics): the fields of the
// final `kind`, starting at `run`. kind == 0: no list set (missing).
struct ListRun {
  uint32_t kind = 0;
  const uint8_t* run = nullptr;
  const uint8_t* end = nullptr;
};

bool FindListRun(const FeatureRef& ref, ListRun* out) {
  const uint8_t* p = ref.data;
  const uint8_t* end = ref.data + ref.size;
  out->kind = 0;
  out->end = end;
  while (p < end) {
    const uint8_t* start = p;
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return false;
    if (field >= 1 && field <= 3 && wire == kLen) {
      if (field != out->kind) {
        out->kind = field;
        out->run = start;
      }
    }
    if (!SkipField(p, end, wire)) return false;
  }
  return true;
}

// Calls visit(list_begin, list_end) for every list message of the run's kind.
template <typename Visit>
bool ForEachList(const ListRun& run, Visit&& visit) {
  const uint8_t* p = run.run;
  while (p < run.end) {
    uint32_t field, wire;
    if (!ReadTag(p, run.end, &field, &wire)) return false;
    if (field == run.kind && wire == kLen) {
      const uint8_t* b;
      size_t n;
      if (!ReadLen(p, run.end, &b, &n) || !visit(b, b + n)) return false;
    } else if (!SkipField(p, run.end, wire)) {
      return false;
    }
  }
  return true;
}

// Value visitors over one list message. Each returns false when malformed.
// Floats: on_packed(const uint8_t* le_floats, size_t count) for packed runs and single values.
template <typename OnFloats>
bool VisitFloatList(const uint8_t* p, const uint8_t* end, OnFloats&& on) {
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return false;
    if (field == 1 && wire == kLen) {
      const uint8_t* b;
      size_t n;
      if (!ReadLen(p, end, &b, &n) || n % 4 != 0) return false;
      on(b, n / 4);
    } else if (field == 1 && wire == kFixed32) {
      if (end - p < 4) return false;
      on(p, 1);
      p += 4;
    } else if (field == 1 || !SkipField(p, end, wire)) {
      return false;
    }
  }
  return true;
}

template <typename OnInt>
bool VisitInt64List(const uint8_t* p, const uint8_t* end, OnInt&& on) {
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return false;
    uint64_t v;
    if (field == 1 && wire == kLen) {
      const uint8_t* b;
      size_t n;
      if (!ReadLen(p, end, &b, &n)) return false;
      const uint8_t* e = b + n;
      while (b < e) {
        if (!ReadVarint(b, e, &v)) return false;
        on(static_cast<int64_t>(v));
      }
    } else if (field == 1 && wire == kVarint) {
      if (!ReadVarint(p, end, &v)) return false;
      on(static_cast<int64_t>(v));
    } else if (field == 1 || !SkipField(p, end, wire)) {
      return false;
    }
  }
  return true;
}

template <typename OnBytes>
bool VisitBytesList(const uint8_t* p, const uint8_t* end, OnBytes&& on) {
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return false;
    if (field == 1 && wire == kLen) {
      const uint8_t* b;
      size_t n;
      if (!ReadLen(p, end, &b, &n)) return false;
      on(b, n);
    } else if (field == 1 || !SkipField(p, end, wire)) {
      return false;
    }
  }
  return true;
}

// Number of values in the run (validating its structure on the way).
bool CountValues(const ListRun& run, size_t* count) {
  size_t c = 0;
  bool ok = ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
    switch (static_cast<ListKind>(run.kind)) {
      case ListKind::kFloat: return VisitFloatList(b, e, [&](const uint8_t*, size_t n) { c += n; });
      case ListKind::kInt64: {
        // Packed varints: count terminating bytes; unpacked ones via the visitor.
        return VisitInt64List(b, e, [&](int64_t) { ++c; });
      }
      case ListKind::kBytes: return VisitBytesList(b, e, [&](const uint8_t*, size_t) { ++c; });
    }
    return false;
  });
  *count = c;
  return ok;
}

// Writes the run's numeric values to dst (exactly `count` of them were counted before).
bool WriteNumeric(const ListRun& run, uint8_t* dst) {
  if (run.kind == static_cast<uint32_t>(ListKind::kFloat)) {
    return ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
      return VisitFloatList(b, e, [&](const uint8_t* f, size_t n) {
        if (n == 0) return;  // an empty packed run; dst may be null (no values at all)
        std::memcpy(dst, f, n * 4);
        dst += n * 4;
      });
    });
  }
  return ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
    return VisitInt64List(b, e, [&](int64_t v) {
      std::memcpy(dst, &v, 8);
      dst += 8;
    });
  });
}

bool AppendBytes(const ListRun& run, Column& c) {
  return ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
    return VisitBytesList(b, e, [&](const uint8_t* s, size_t n) {
      c.values.insert(c.values.end(), s, s + n);
      c.value_offsets.push_back(static_cast<int64_t>(c.values.size()));
    });
  });
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string ListName(uint32_t kind) { return std::string(ListKindName(static_cast<ListKind>(kind))) + "_list"; }

}  // namespace

uint32_t ExampleParser::Hash(const uint8_t* p, size_t n) {
  // Keys are short names: mix length with the first and last (up to) 8 bytes.
  uint64_t a = 0, b = 0;
  if (n >= 8) {
    std::memcpy(&a, p, 8);
    std::memcpy(&b, p + n - 8, 8);
  } else if (n > 0) {
    std::memcpy(&a, p, n);
  }
  uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b + n) * 0xC2B2AE3D27D4EB4Full;
  return static_cast<uint32_t>(h >> 32) ^ static_cast<uint32_t>(h);
}

ExampleParser::ExampleParser(FeatureSpecs specs) : specs_(std::move(specs)) {
  size_t size = 16;
  while (size < specs_.size() * 4) size *= 2;
  table_.resize(size);
  mask_ = static_cast<uint32_t>(size - 1);
  default_rows_.resize(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    const FeatureSpec& s = specs_[i];
    const bool fixed_len = s.type == FeatureType::kFixedLen;
    for (int64_t dim : s.shape) {
      // Checked per dimension: [-1, -1] has a positive product.
      if (fixed_len && dim < 0) throw std::invalid_argument("feature '" + s.name + "': negative dimension in shape");
    }
    if (s.decode_raw && (!fixed_len || s.dtype == DType::kBytes)) {
      throw std::invalid_argument("feature '" + s.name + "': decode: raw needs a FixedLen feature of a numeric dtype");
    }
    if (!s.decode_raw && s.dtype != DType::kInt64 && s.dtype != DType::kFloat32 && s.dtype != DType::kBytes) {
      throw std::invalid_argument("feature '" + s.name + "': dtype " + std::string(DTypeName(s.dtype)) +
                                  " needs decode: raw");
    }
    if (fixed_len && s.has_default && s.dtype == DType::kBytes && s.default_bytes.size() != 1 &&
        s.default_bytes.size() != static_cast<size_t>(s.NumElements())) {
      throw std::invalid_argument("feature '" + s.name + "': default has " + std::to_string(s.default_bytes.size()) +
                                  " values, shape needs 1 or " + std::to_string(s.NumElements()));
    }
    auto key = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.name.data()), s.name.size());
    if (Lookup(key) >= 0) throw std::invalid_argument("feature '" + s.name + "' listed twice");
    uint32_t h = Hash(key.data(), key.size());
    uint32_t pos = h & mask_;
    while (table_[pos].feature >= 0) pos = (pos + 1) & mask_;
    table_[pos] = {h, static_cast<int32_t>(i)};

    if (s.type != FeatureType::kFixedLen || !s.has_default || s.dtype == DType::kBytes) continue;
    const size_t n = static_cast<size_t>(s.NumElements());
    const size_t given = s.dtype == DType::kInt64 ? s.default_int64.size() : s.default_float.size();
    if (s.decode_raw || (s.dtype != DType::kInt64 && s.dtype != DType::kFloat32)) {
      throw std::invalid_argument("feature '" + s.name + "': a default needs dtype int64, float32 or bytes");
    }
    if (given != 1 && given != n) {
      throw std::invalid_argument("feature '" + s.name + "': default has " + std::to_string(given) +
                                  " values, shape needs 1 or " + std::to_string(n));
    }
    std::vector<uint8_t>& row = default_rows_[i];
    row.resize(n * DTypeSize(s.dtype));
    for (size_t k = 0; k < n; ++k) {
      const size_t src = given == 1 ? 0 : k;
      if (s.dtype == DType::kInt64) std::memcpy(&row[k * 8], &s.default_int64[src], 8);
      else std::memcpy(&row[k * 4], &s.default_float[src], 4);
    }
  }
}

int ExampleParser::Lookup(std::span<const uint8_t> key) const {
  const uint32_t h = Hash(key.data(), key.size());
  for (uint32_t pos = h & mask_;; pos = (pos + 1) & mask_) {
    const Slot& slot = table_[pos];
    if (slot.feature < 0) return -1;
    if (slot.hash == h) {
      const std::string& name = specs_[static_cast<size_t>(slot.feature)].name;
      // An absent map-entry key is the empty string, passed as (nullptr, 0): no memcmp then.
      if (name.size() == key.size() && (key.empty() || std::memcmp(name.data(), key.data(), key.size()) == 0)) {
        return slot.feature;
      }
    }
  }
}

bool ExampleParser::Parse(std::span<const uint8_t> example, ExampleBatch& batch, ParseError* error) const {
  if (batch.rows() >= batch.capacity()) throw std::out_of_range("ExampleParser::Parse: the batch is full");
  thread_local std::vector<FeatureRef> found;
  found.assign(specs_.size(), FeatureRef{});
  auto malformed = [&](const std::string& key, const std::string& what) {
    error->key = key;
    error->message = (key.empty() ? "malformed Example: " : "key '" + key + "': malformed Feature: ") + what;
    return false;
  };

  // Pass 1: locate each spec feature's Feature message.
  const uint8_t* p = example.data();
  const uint8_t* const end = p + example.size();
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return malformed("", "bad field tag");
    if (field != 1 || wire != kLen) {
      if (!SkipField(p, end, wire)) return malformed("", "bad field");
      continue;
    }
    const uint8_t* q;
    size_t qn;
    if (!ReadLen(p, end, &q, &qn)) return malformed("", "features length exceeds the record");
    const uint8_t* const qend = q + qn;
    while (q < qend) {
      if (!ReadTag(q, qend, &field, &wire)) return malformed("", "bad tag in Features");
      if (field != 1 || wire != kLen) {
        if (!SkipField(q, qend, wire)) return malformed("", "bad field in Features");
        continue;
      }
      const uint8_t* r;
      size_t rn;
      if (!ReadLen(q, qend, &r, &rn)) return malformed("", "map entry length exceeds Features");
      const uint8_t* const rend = r + rn;
      const uint8_t* key = nullptr;
      size_t key_size = 0;
      FeatureRef value;
      value.present = true;
      bool have_value = false;
      while (r < rend) {
        if (!ReadTag(r, rend, &field, &wire)) return malformed("", "bad tag in feature map entry");
        if (field == 1 && wire == kLen) {
          if (!ReadLen(r, rend, &key, &key_size)) return malformed("", "key length exceeds map entry");
        } else if (field == 2 && wire == kLen) {
          // Protobuf would merge a second value into the first; TensorFlow rejects the Example.
          // We reject it too rather than silently keep only one of them.
          if (have_value) return malformed("", "feature map entry holds two values");
          have_value = true;
          if (!ReadLen(r, rend, &value.data, &value.size)) return malformed("", "Feature length exceeds map entry");
        } else if (!SkipField(r, rend, wire)) {
          return malformed("", "bad field in feature map entry");
        }
      }
      const int idx = Lookup({key, key_size});
      if (idx >= 0) found[static_cast<size_t>(idx)] = value;  // a later duplicate wins
    }
  }

  // Pass 2: decode into the columns.
  const size_t row = batch.rows();
  for (size_t i = 0; i < specs_.size(); ++i) {
    const FeatureSpec& spec = specs_[i];
    Column& col = batch.column(i);
    ListRun run;
    if (found[i].present && !FindListRun(found[i], &run)) {
      batch.RollbackRow();
      return malformed(spec.name, "bad field in Feature");
    }
    const bool missing = !found[i].present || run.kind == 0;
    const bool fixed = spec.type == FeatureType::kFixedLen;
    auto fail = [&](std::string message) {
      batch.RollbackRow();
      error->key = spec.name;
      error->message = "key '" + spec.name + "': " + message;
      return false;
    };

    if (missing) {
      if (!fixed) continue;  // VarLen: a row of length 0
      if (!spec.has_default) {
        return fail("required feature is missing (FixedLenFeature " + std::string(DTypeName(spec.dtype)) + " " +
                    ShapeString(spec.shape) + " without a default)");
      }
      if (spec.dtype == DType::kBytes) {
        const size_t n = static_cast<size_t>(spec.NumElements());
        for (size_t k = 0; k < n; ++k) {
          const std::string& s = spec.default_bytes[spec.default_bytes.size() == 1 ? 0 : k];
          col.values.insert(col.values.end(), s.begin(), s.end());
          col.value_offsets.push_back(static_cast<int64_t>(col.values.size()));
        }
      } else {
        const std::vector<uint8_t>& d = default_rows_[i];
        if (!d.empty()) std::memcpy(col.values.data() + row * d.size(), d.data(), d.size());
      }
      continue;
    }

    const uint32_t want = static_cast<uint32_t>(spec.WireKind());
    if (run.kind != want) {
      return fail("data types don't match: the record has " + ListName(run.kind) + ", the spec expects " +
                  ListName(want) + " (dtype " + std::string(DTypeName(spec.dtype)) +
                  (spec.decode_raw ? ", decode: raw" : "") + ")");
    }
    size_t count;
    if (!CountValues(run, &count)) {
      batch.RollbackRow();
      return malformed(spec.name, "bad " + ListName(run.kind));
    }

    if (spec.decode_raw) {
      const size_t bytes = static_cast<size_t>(spec.NumElements()) * DTypeSize(spec.dtype);
      const uint8_t* src = nullptr;
      size_t src_size = 0;
      ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
        return VisitBytesList(b, e, [&](const uint8_t* s, size_t n) { src = s, src_size = n; });
      });
      if (count != 1 || src_size != bytes) {
        return fail("decode: raw needs exactly one bytes value of " + std::to_string(bytes) + " bytes (" +
                    std::string(DTypeName(spec.dtype)) + " " + ShapeString(spec.shape) + "), the record has " +
                    std::to_string(count) + " value(s)" + (count == 1 ? " of " + std::to_string(src_size) + " bytes" : ""));
      }
      if (bytes != 0) std::memcpy(col.values.data() + row * bytes, src, bytes);
      continue;
    }

    if (fixed && count != static_cast<size_t>(spec.NumElements())) {
      return fail("number of " + std::string(ListKindName(static_cast<ListKind>(run.kind))) +
                  " values != expected: the record has " + std::to_string(count) + ", shape " +
                  ShapeString(spec.shape) + " needs " + std::to_string(spec.NumElements()));
    }
    if (spec.dtype == DType::kBytes) {
      AppendBytes(run, col);
    } else {
      const size_t elem = DTypeSize(spec.dtype);
      uint8_t* dst;
      if (fixed) {
        dst = col.values.data() + row * count * elem;
      } else {
        const size_t old = col.values.size();
        col.values.resize(old + count * elem);
        dst = col.values.data() + old;
      }
      WriteNumeric(run, dst);
    }
  }
  batch.CommitRow();
  return true;
}

}  // namespace ringfeed
