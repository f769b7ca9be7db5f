// The tf.train.Example wire format, walked without protobuf message objects. Shared by
// ExampleParser (spec-driven, writes straight into columns) and `ringfeedctl inspect` (lists
// every feature), so both read a record the same way.
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   XxxList  { repeated xxx value = 1; }             packed (wire type 2) or not (0 / 5 / 2)
//
// Every function checks bounds and returns false on malformed input; nothing reads outside
// the span it is given. Decoding rules are protobuf's (see example_parser.h for where they meet
// TensorFlow's): the last `oneof` list kind set wins and lists of that kind merge; packed and
// unpacked values may be mixed. Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "format/feature_spec.h"

namespace ringfeed::wire {

static_assert(std::endian::native == std::endian::little, "multi-byte header checks load little-endian");

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

[[gnu::always_inline]] inline bool ReadVarint(const uint8_t*& p, const uint8_t* end, uint64_t* value) {
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

[[gnu::always_inline]] inline bool ReadTag(const uint8_t*& p, const uint8_t* end, uint32_t* field, uint32_t* wire) {
  uint64_t tag;
  if (!ReadVarint(p, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return false;
  *field = static_cast<uint32_t>(tag >> 3);
  *wire = static_cast<uint32_t>(tag & 7);
  return true;
}

// Reads a length-delimited payload; [*begin, *begin + *size) stays inside [p, end).
[[gnu::always_inline]] inline bool ReadLen(const uint8_t*& p, const uint8_t* end, const uint8_t** begin, size_t* size) {
  uint64_t len;
  if (!ReadVarint(p, end, &len) || len > static_cast<uint64_t>(end - p)) return false;
  *begin = p;
  *size = static_cast<size_t>(len);
  p += len;
  return true;
}

[[gnu::always_inline]] inline bool SkipField(const uint8_t*& p, const uint8_t* end, uint32_t wire) {
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

inline bool FindListRun(const FeatureRef& ref, ListRun* out) {
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
inline bool CountValues(const ListRun& run, size_t* count) {
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

// One numeric list in the form every protobuf serializer writes: the Feature holds exactly one
// list field, and that list holds one packed run (or nothing). `count` values are at `data`
// (floats: little-endian float32; int64: varints, all checked to decode).
struct PackedRun {
  uint32_t kind = 0;  // ListKind::kFloat or kInt64
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t count = 0;
};

// True when the Feature has exactly that shape and its values are well-formed; false for
// anything else (other encodings, bytes lists, malformed data), which the general walk handles.
inline bool FindCanonicalPackedRun(const FeatureRef& ref, PackedRun* out) {
  constexpr uint8_t kFloatListTag = (2 << 3) | kLen, kInt64ListTag = (3 << 3) | kLen, kValueTag = (1 << 3) | kLen;
  const uint8_t* p = ref.data;
  const uint8_t* const end = p + ref.size;
  if (p == end || (*p != kFloatListTag && *p != kInt64ListTag)) return false;
  out->kind = *p++ >> 3;
  const uint8_t* list;
  size_t list_size;
  if (!ReadLen(p, end, &list, &list_size) || p != end) return false;
  if (list_size == 0) {
    out->data = list;
    out->size = out->count = 0;
    return true;
  }
  const uint8_t* const list_end = list + list_size;
  if (*list++ != kValueTag || !ReadLen(list, list_end, &out->data, &out->size) || list != list_end) return false;
  if (out->kind == static_cast<uint32_t>(ListKind::kFloat)) {
    if (out->size % 4 != 0) return false;
    out->count = out->size / 4;
    return true;
  }
  // int64: one value per byte without the continuation bit; the last byte must end a value and
  // no value may be longer than 10 bytes.
  size_t count = 0, run = 0;
  for (size_t k = 0; k < out->size; ++k) {
    const bool last = out->data[k] < 0x80;
    count += last;
    run = last ? 0 : run + 1;
    if (run >= 10) return false;
  }
  if (run != 0) return false;
  out->count = count;
  return true;
}

// Writes a PackedRun's values to dst as little-endian int64 or float32.
inline void WritePackedRun(const PackedRun& run, uint8_t* dst) {
  if (run.kind == static_cast<uint32_t>(ListKind::kFloat)) {
    if (run.size == 4) std::memcpy(dst, run.data, 4);  // the common scalar: a fixed-size copy
    else if (run.size != 0) std::memcpy(dst, run.data, run.size);
    return;
  }
  const uint8_t* p = run.data;
  const uint8_t* const end = p + run.size;
  uint64_t v;
  while (p < end && ReadVarint(p, end, &v)) {
    const int64_t value = static_cast<int64_t>(v);
    std::memcpy(dst, &value, 8);
    dst += 8;
  }
}

// Whether a record has a top-level field 2 of wire type LEN: a tf.train.SequenceExample's
// feature_lists (tensorflow/core/example/example.proto; its field 1, context, reads as an
// Example's features). An Example has no field 2, so parsing one as an Example drops them.
// False for malformed input (the Example parse reports that).
inline bool HasFeatureLists(std::span<const uint8_t> record) {
  const uint8_t* p = record.data();
  const uint8_t* const end = p + record.size();
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return false;
    if (field == 2 && wire == kLen) return true;
    if (!SkipField(p, end, wire)) return false;
  }
  return false;
}

// Walks every map entry of every `features` field of an Example, calling
// on_entry(const uint8_t* key, size_t key_size, const FeatureRef& feature) in record order (a
// later duplicate key comes later: callers keep the last). A missing key is the empty string; a
// missing value is an empty Feature (no list set). A map entry with two values is malformed, as
// in TensorFlow (protobuf would merge them). On malformed input returns false and sets *why.
template <typename OnEntry>
bool ForEachFeature(std::span<const uint8_t> example, OnEntry&& on_entry, std::string* why) {
  constexpr uint8_t kEntryTag = (1 << 3) | kLen, kKeyTag = (1 << 3) | kLen, kValueTag = (2 << 3) | kLen;
  auto fail = [&](const char* what) {
    *why = what;
    return false;
  };
  const uint8_t* p = example.data();
  const uint8_t* const end = p + example.size();
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return fail("bad field tag");
    if (field != 1 || wire != kLen) {
      if (!SkipField(p, end, wire)) return fail("bad field");
      continue;
    }
    const uint8_t* q;
    size_t qn;
    if (!ReadLen(p, end, &q, &qn)) return fail("features length exceeds the record");
    const uint8_t* const qend = q + qn;
    while (q < qend) {
      const uint8_t* key = nullptr;
      size_t key_size = 0;
      FeatureRef value;
      value.present = true;
      // Fast path: the entry as serializers write it, with every length below 128:
      //   0a <entry length> 0a <key length> <key> 12 <value length> <value>
      // The four header bytes in one load and compare, then the value's tag and length in one.
      // On anything else the general walk below reads the entry. One call site for on_entry,
      // so that the compiler inlines it.
      uint32_t head;
      uint16_t value_head;
      size_t rn, kn;
      if (qend - q >= 4 && (std::memcpy(&head, q, 4), (head & 0x80ff80ff) == (kKeyTag << 16 | kEntryTag)) &&
          (rn = (head >> 8) & 0xff, kn = head >> 24, rn <= static_cast<size_t>(qend - q) - 2) && kn + 4 <= rn &&
          (std::memcpy(&value_head, q + 4 + kn, 2), (value_head & 0x80ff) == kValueTag) &&
          kn + 4 + (value_head >> 8) == rn) {
        key = q + 4;
        key_size = kn;
        value.data = q + 6 + kn;
        value.size = value_head >> 8;
        q += 2 + rn;
      } else {
        const uint8_t* r;
        if (!ReadTag(q, qend, &field, &wire)) return fail("bad tag in Features");
        if (field != 1 || wire != kLen) {
          if (!SkipField(q, qend, wire)) return fail("bad field in Features");
          continue;
        }
        if (!ReadLen(q, qend, &r, &rn)) return fail("map entry length exceeds Features");
        const uint8_t* const rend = r + rn;
        bool have_value = false;
        while (r < rend) {
          if (!ReadTag(r, rend, &field, &wire)) return fail("bad tag in feature map entry");
          if (field == 1 && wire == kLen) {
            if (!ReadLen(r, rend, &key, &key_size)) return fail("key length exceeds map entry");
          } else if (field == 2 && wire == kLen) {
            if (have_value) return fail("feature map entry holds two values");
            have_value = true;
            if (!ReadLen(r, rend, &value.data, &value.size)) return fail("Feature length exceeds map entry");
          } else if (!SkipField(r, rend, wire)) {
            return fail("bad field in feature map entry");
          }
        }
      }
      on_entry(key, key_size, value);
    }
  }
  return true;
}

}  // namespace ringfeed::wire
