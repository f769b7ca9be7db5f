// tf.train.Example -> columns (see example_parser.h for the semantics; the wire walk itself
// is format/example_wire.h).
//
// Parse walks the Example once and decodes each spec feature's Feature straight into its
// column where the walk finds it (ParseOnePass), trying the exact byte shapes serializers write
// first (one value, one packed run, one bytes list) before the general walk (DecodeGeneral).
// Keys not in the spec are never decoded. A record that walk cannot settle alone (an error, a
// repeated key, a malformed record) is rolled back and parsed again by the reference walk
// (ParseTwoPass): pass 1 remembers, per spec feature, where its last Feature message is; pass 2
// decodes them in spec order, so the last of repeated keys wins and the error reported is the
// first in spec order. Measure() is the walk with counting instead of decoding.
//
// Keys are matched by entry position first: the key at position k of the previous record, kept
// with its fingerprint, is compared in registers; only a miss goes to the hash table.
#include "format/example_parser.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "format/example_wire.h"
#include "format/utf8.h"

namespace ringfeed {
namespace {

using namespace wire;  // NOLINT: the wire-format walk (format/example_wire.h)

static_assert(std::endian::native == std::endian::little, "values are copied as little-endian");

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

// A Feature of exactly one numeric value in the form serializers write: float_list {value: [f]}
// = 12 06 0a 04 <4 bytes>, or int64_list {value: [v]} = 1a <n-2> 0a <n-4> <varint of n-4 bytes>,
// `n` bytes at `d` in all. Write the value (4 or 8 bytes, little-endian) to dst and return true;
// false otherwise (the packed-run walk then decides, and for these bytes it would give the same
// value). A scalar in a few compares instead of the general packed-run walk.
[[gnu::always_inline]] inline bool ReadOneFloat(const uint8_t* d, size_t n, uint8_t* dst) {
  constexpr uint32_t kOneFloat = 0x040a0612;  // float_list tag, length 6, value tag, length 4
  uint32_t head;
  if (n != 8) return false;
  std::memcpy(&head, d, 4);
  if (head != kOneFloat) return false;
  std::memcpy(dst, d + 4, 4);
  return true;
}

[[gnu::always_inline]] inline bool ReadOneInt64(const uint8_t* d, size_t n, uint8_t* dst) {
  if (n - 5 > 9) return false;  // n in [5, 14]: a varint of 1 to 10 bytes
  // The four header bytes in one compare: int64_list tag, n - 2, value tag, n - 4.
  const uint32_t expected = ((3 << 3) | kLen) | static_cast<uint32_t>(n - 2) << 8 | ((1 << 3) | kLen) << 16 |
                            static_cast<uint32_t>(n - 4) << 24;
  uint32_t head;
  std::memcpy(&head, d, 4);
  if (head != expected) return false;
  const uint8_t* p = d + 4;
  uint64_t v;
  if (!ReadVarint(p, d + n, &v) || p != d + n) return false;
  const int64_t value = static_cast<int64_t>(v);
  std::memcpy(dst, &value, 8);
  return true;
}

// The bytes list in the form protobuf serializers write (the Feature holds one bytes_list of
// only values): returns true with its value list, string count and total bytes; otherwise
// false (the general walk then handles the Feature).
struct CanonicalBytes {
  const uint8_t* list;
  const uint8_t* list_end;
  size_t count;
  size_t total;
};

bool FindCanonicalBytes(const FeatureRef& ref, CanonicalBytes* out) {
  constexpr uint8_t kBytesListTag = (1 << 3) | kLen, kValueTag = (1 << 3) | kLen;
  const uint8_t* p = ref.data;
  const uint8_t* const end = p + ref.size;
  if (p == end || *p++ != kBytesListTag) return false;
  const uint8_t* list;
  size_t list_size;
  if (!ReadLen(p, end, &list, &list_size) || p != end) return false;
  const uint8_t* const list_end = list + list_size;
  size_t n = 0, total = 0;
  for (const uint8_t* q = list; q < list_end; ++n) {
    const uint8_t* value;
    size_t size;
    if (*q++ != kValueTag || !ReadLen(q, list_end, &value, &size)) return false;
    total += size;
  }
  *out = {list, list_end, n, total};
  return true;
}

// Appends the strings FindCanonicalBytes found; false (column unchanged) when there is no room.
bool AppendCanonicalBytes(const CanonicalBytes& bytes, Column* c) {
  const size_t old = c->values.size();
  if (!c->value_offsets.reserve(c->value_offsets.size() + bytes.count)) return false;
  if (!c->values.resize(old + bytes.total)) return false;
  uint8_t* const base = c->values.data();
  uint8_t* dst = base + old;
  for (const uint8_t* q = bytes.list; q < bytes.list_end;) {
    const uint8_t* value = nullptr;
    size_t size = 0;
    ++q;
    ReadLen(q, bytes.list_end, &value, &size);  // validated by FindCanonicalBytes
    if (size != 0) std::memcpy(dst, value, size);
    dst += size;
    c->value_offsets.push_back_reserved(static_cast<int64_t>(dst - base));
  }
  return true;
}

// False when the column ran out of room (what was appended is rolled back by the caller).
bool AppendBytes(const ListRun& run, Column& c) {
  bool room = true;
  ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
    return VisitBytesList(b, e, [&](const uint8_t* s, size_t n) {
      room = room && c.values.append(s, n) && c.value_offsets.push_back(static_cast<int64_t>(c.values.size()));
    });
  });
  return room;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string ListName(uint32_t kind) { return std::string(ListKindName(static_cast<ListKind>(kind))) + "_list"; }

}  // namespace

[[gnu::always_inline]] inline ExampleParser::Fingerprint ExampleParser::FingerprintOf(const uint8_t* p, size_t n,
                                                                                  const uint8_t* lowest) {
  Fingerprint f;
  f.size = n;
  if (n >= 8) {
    std::memcpy(&f.head, p, 8);
    std::memcpy(&f.tail, p + n - 8, 8);
    // Bytes 8..15: with the tail this covers every byte of keys up to 24 bytes. Fixed-size
    // copies compile to plain loads (a variable-size memcpy would be a library call).
    if (n > 16) std::memcpy(&f.mid, p + 8, 8);
  } else if (n != 0 && static_cast<size_t>(p - lowest) + n >= 8) {
    // A short key ("fare", "tips") inside a record: one load of the 8 bytes ending at its last
    // byte (all in the record), shifted down to the key's bytes. Same value as the loop below.
    uint64_t w;
    std::memcpy(&w, p + n - 8, 8);
    f.head = w >> (64 - 8 * n);
  } else {
    for (size_t k = 0; k < n; ++k) f.head |= uint64_t{p[k]} << (8 * k);
  }
  return f;
}

uint32_t ExampleParser::Hash(const Fingerprint& f) {
  const uint64_t h = (f.head * 0x9E3779B97F4A7C15ull) ^ ((f.tail + f.size + f.mid) * 0xC2B2AE3D27D4EB4Full);
  return static_cast<uint32_t>(h >> 32) ^ static_cast<uint32_t>(h);
}

ExampleParser::ExampleParser(FeatureSpecs specs) : specs_(std::move(specs)) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  size_t size = 16;
  while (size < specs_.size() * 4) size *= 2;
  table_.resize(size);
  mask_ = static_cast<uint32_t>(size - 1);
  default_rows_.resize(specs_.size());
  for (const FeatureSpec& f : specs_) {
    const bool fixed = f.type == FeatureType::kFixedLen;
    const bool numeric_list = f.dtype != DType::kBytes && !f.decode_raw;
    const bool scalar = fixed && f.NumElements() == 1;
    FastPath fast = FastPath::kNone;
    if (f.dtype == DType::kBytes) fast = FastPath::kBytes;
    else if (f.dtype == DType::kFloat32 && !f.decode_raw) fast = scalar ? FastPath::kFloatScalar : FastPath::kFloatList;
    else if (f.dtype == DType::kInt64 && !f.decode_raw) fast = scalar ? FastPath::kInt64Scalar : FastPath::kInt64List;
    plans_.push_back({fast, static_cast<uint32_t>(f.WireKind()), fixed, f.dtype == DType::kBytes, numeric_list,
                      fixed ? static_cast<size_t>(f.NumElements()) : 0, DTypeSize(f.dtype)});
  }
  one_pass_ = specs_.size() <= 64;
  if (one_pass_) all_features_ = specs_.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << specs_.size()) - 1;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const FeatureSpec& s = specs_[i];
    const bool fixed_len = s.type == FeatureType::kFixedLen;
    for (int64_t dim : s.shape) {
      // Checked per dimension: [-1, -1] has a positive product.
      if (fixed_len && dim < 0) {
        throw std::invalid_argument("feature " + QuotedName(s.name) + ": negative dimension in shape");
      }
    }
    if (s.decode_raw && (!fixed_len || s.dtype == DType::kBytes)) {
      throw std::invalid_argument("feature " + QuotedName(s.name) +
                                  ": decode: raw needs a FixedLen feature of a numeric dtype");
    }
    if (!s.decode_raw && s.dtype != DType::kInt64 && s.dtype != DType::kFloat32 && s.dtype != DType::kBytes) {
      throw std::invalid_argument("feature " + QuotedName(s.name) + ": dtype " + std::string(DTypeName(s.dtype)) +
                                  " needs decode: raw");
    }
    if (fixed_len && s.has_default && s.dtype == DType::kBytes && s.default_bytes.size() != 1 &&
        s.default_bytes.size() != static_cast<size_t>(s.NumElements())) {
      throw std::invalid_argument("feature " + QuotedName(s.name) + ": default has " +
                                  std::to_string(s.default_bytes.size()) + " values, shape needs 1 or " +
                                  std::to_string(s.NumElements()));
    }
    auto key = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.name.data()), s.name.size());
    if (Lookup(key) >= 0) throw std::invalid_argument("feature " + QuotedName(s.name) + " listed twice");
    const Fingerprint f = FingerprintOf(key.data(), key.size(), key.data());
    uint32_t pos = Hash(f) & mask_;
    while (table_[pos].feature >= 0) pos = (pos + 1) & mask_;
    table_[pos] = {f, static_cast<int32_t>(i)};
    fingerprints_.push_back(f);

    const bool measured = s.dtype == DType::kBytes || (!fixed_len && !s.decode_raw);
    measure_.push_back(measured ? static_cast<uint8_t>(s.WireKind()) : 0);
    measured_features_ += measured;
    if (fixed_len && s.has_default && s.dtype == DType::kBytes) {
      measure_.back() |= kDefaultBytes;
      DefaultBytes d{static_cast<uint32_t>(i), 0, static_cast<uint64_t>(s.NumElements())};
      for (uint64_t k = 0; k < d.strings; ++k) d.bytes += s.default_bytes[s.default_bytes.size() == 1 ? 0 : k].size();
      default_bytes_.push_back(d);
    }

    if (s.type != FeatureType::kFixedLen || !s.has_default || s.dtype == DType::kBytes) continue;
    const size_t n = static_cast<size_t>(s.NumElements());
    const size_t given = s.dtype == DType::kInt64 ? s.default_int64.size() : s.default_float.size();
    if (s.decode_raw || (s.dtype != DType::kInt64 && s.dtype != DType::kFloat32)) {
      throw std::invalid_argument("feature " + QuotedName(s.name) + ": a default needs dtype int64, float32 or bytes");
    }
    if (given != 1 && given != n) {
      throw std::invalid_argument("feature " + QuotedName(s.name) + ": default has " + std::to_string(given) +
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

[[gnu::always_inline]] inline bool ExampleParser::Matches(int feature, const Fingerprint& f, const uint8_t* key,
                                                          size_t size) const {
  const Fingerprint& g = fingerprints_[static_cast<size_t>(feature)];
  // One branch for the four words (they differ or not together; the hint is usually right).
  if (((g.head ^ f.head) | (g.mid ^ f.mid) | (g.tail ^ f.tail) | (g.size ^ f.size)) != 0) return false;
  // Keys over 24 bytes have a middle the fingerprint does not cover.
  return size <= 24 || std::memcmp(specs_[static_cast<size_t>(feature)].name.data() + 16, key + 16, size - 24) == 0;
}

int ExampleParser::Lookup(std::span<const uint8_t> key) const {
  return Find(FingerprintOf(key.data(), key.size(), key.data()), key.data(), key.size());
}

int ExampleParser::Find(const Fingerprint& f, const uint8_t* key, size_t size) const {
  for (uint32_t pos = Hash(f) & mask_;; pos = (pos + 1) & mask_) {
    const Slot& slot = table_[pos];
    if (slot.feature < 0) return -1;
    if (Matches(slot.feature, f, key, size)) return slot.feature;
  }
}

namespace {

// Per-thread scratch of Parse: which feature was found at each entry position last time (records
// of one dataset list their keys in the same order, so that one is tried before the hash table),
// and, for the two-pass walk, where each spec feature's Feature is in this record. Reset when
// another parser uses it.
template <typename Hint>
struct Scratch {
  uint64_t owner = 0;  // ExampleParser::id_ (an address could be reused by another parser)
  std::vector<FeatureRef> found;
  std::vector<Hint> hints;
  // Where the one-pass walk's errors go: it gives up on them, and the caller's ParseError is
  // written only by the walk that decides (untouched when the record parses).
  ParseError discarded;
};

// `features`: the parser's spec size. Hints are kept for the first max(64, 4 x features) entry
// positions of a record (later entries are looked up in the table every time), so that the
// walk can hold them in a plain array.
template <typename Hint>
Scratch<Hint>& ScratchOf(uint64_t parser_id, size_t features) {
  thread_local Scratch<Hint> scratch;
  if (scratch.owner != parser_id) {
    scratch.owner = parser_id;
    scratch.hints.assign(std::max<size_t>(64, 4 * features), Hint{});
  }
  return scratch;
}

[[gnu::cold, gnu::noinline]] bool NoRoom(ExampleBatch& batch, const FeatureSpec& spec, size_t feature,
                                         ParseError* error) {
  const Column& c = batch.column(feature);
  std::string regions = "values: " + std::to_string(c.values.capacity()) + " bytes";
  if (spec.dtype == DType::kBytes) regions += ", value_offsets: " + std::to_string(c.value_offsets.capacity()) + " entries";
  batch.RollbackRow();
  error->no_room = true;
  error->key = spec.name;
  error->message = "key " + QuotedName(spec.name) + ": the record does not fit in the batch's column regions (" +
                   regions + "); size them with ExampleParser::Measure and ColumnCapacities";
  return false;
}

}  // namespace

[[gnu::always_inline]] inline int ExampleParser::MatchKey(KeyHint* hints, size_t hint_count, size_t position,
                                                          const uint8_t* key, size_t key_size,
                                                          const uint8_t* lowest) const {
  const Fingerprint f = FingerprintOf(key, key_size, lowest);
  KeyHint* const hint = position < hint_count ? &hints[position] : nullptr;
  if (hint != nullptr) {
    const Fingerprint& g = hint->key;
    // The four words in one branch; keys over 24 bytes have a middle the fingerprint does not
    // cover, which only a spec feature's name can confirm.
    if (((g.head ^ f.head) | (g.mid ^ f.mid) | (g.tail ^ f.tail) | (g.size ^ f.size)) == 0 && hint->valid &&
        (key_size <= 24 ||
         (hint->feature >= 0 &&
          std::memcmp(specs_[static_cast<size_t>(hint->feature)].name.data() + 16, key + 16, key_size - 24) == 0))) {
      return hint->feature;
    }
  }
  return MatchKeySlow(hint, key, key_size, lowest);
}

[[gnu::noinline]] int ExampleParser::MatchKeySlow(KeyHint* hint, const uint8_t* key, size_t key_size,
                                                  const uint8_t* lowest) const {
  const Fingerprint f = FingerprintOf(key, key_size, lowest);
  const int feature = Find(f, key, key_size);
  if (hint != nullptr) *hint = {f, feature, true};
  return feature;
}

bool ExampleParser::Parse(std::span<const uint8_t> example, ExampleBatch& batch, ParseError* error) const {
  if (batch.rows() >= batch.capacity()) throw std::out_of_range("ExampleParser::Parse: the batch is full");
  if (one_pass_ && ParseOnePass(example, batch)) return true;
  return ParseTwoPass(example, batch, error);
}

namespace {
// ExampleParser::Check's one-row batch of this thread. It refers to the specs of the parser that
// made it: `parser` (an address another parser may take later, hence the id too; copies share
// the id but not the address).
struct CheckScratch {
  const ExampleParser* parser = nullptr;
  uint64_t id = 0;
  std::unique_ptr<ExampleBatch> batch;
  size_t empty_bytes = 0;  // the batch's bytes before any record (the spec's FixedLen columns)
};
thread_local CheckScratch check_scratch;

size_t BatchBytes(const ExampleBatch& batch) {
  size_t bytes = 0;
  for (size_t i = 0; i < batch.specs().size(); ++i) {
    const Column& c = batch.column(i);
    bytes += c.values.capacity() + (c.value_offsets.capacity() + c.row_splits.capacity()) * sizeof(int64_t);
  }
  return bytes;
}
}  // namespace

bool ExampleParser::Check(std::span<const uint8_t> example, ParseError* error) const {
  CheckScratch& scratch = check_scratch;
  if (scratch.parser != this || scratch.id != id_ || scratch.batch == nullptr) {
    scratch.batch = std::make_unique<ExampleBatch>(specs_, 1);
    scratch.parser = this;
    scratch.id = id_;
    scratch.empty_bytes = BatchBytes(*scratch.batch);
  }
  scratch.batch->Clear();
  const bool ok = Parse(example, *scratch.batch, error);
  // A large row's memory is not kept after its check. A record's values take at most 8 bytes
  // per byte of it (one-byte varints), 16 with the columns' growth by doubling, so a record of
  // up to 1/16 of the limit cannot have grown the scratch past it: no need to sum the columns.
  if (example.size() > kCheckScratchKeepBytes / 16 &&
      BatchBytes(*scratch.batch) > scratch.empty_bytes + kCheckScratchKeepBytes) {
    scratch.batch.reset();
  }
  return ok;
}

size_t ExampleParser::ThreadCheckScratchBytes() {
  return check_scratch.batch == nullptr ? 0 : BatchBytes(*check_scratch.batch) - check_scratch.empty_bytes;
}

// One walk, each spec feature decoded where the walk finds it. For a record with distinct keys
// that parses without error this gives what ParseTwoPass gives: each feature writes only its own
// column, so the order in which features are decoded changes nothing. Anything else (a repeated
// key, an error, a malformed record) rolls the row back and returns false, and ParseTwoPass then
// decides: the last of repeated keys wins, and the error reported is the first in spec order.
bool ExampleParser::ParseOnePass(std::span<const uint8_t> example, ExampleBatch& batch) const {
  Scratch<KeyHint>& scratch = ScratchOf<KeyHint>(id_, specs_.size());
  ParseError* const error = &scratch.discarded;
  // Locals, not members: the column writes go through uint8_t pointers, which may alias
  // anything, so members would be reloaded after each of them.
  KeyHint* const hints = scratch.hints.data();
  const size_t hint_count = scratch.hints.size();
  const Plan* const plans = plans_.data();
  Column* const columns = specs_.empty() ? nullptr : &batch.column(0);
  const size_t row = batch.rows();
  const uint8_t* const lowest = example.data();
  uint64_t seen = 0;  // spec features met so far (bit i: feature i)
  bool ok = true;
  size_t position = 0;
  std::string why;
  const bool well_formed = ForEachFeature(
      example,
      [&](const uint8_t* key, size_t key_size, const FeatureRef& value) {
        if (!ok) return;
        const int idx = MatchKey(hints, hint_count, position++, key, key_size, lowest);
        if (idx < 0) return;  // not in the spec: never decoded
        const uint64_t bit = uint64_t{1} << idx;
        if (seen & bit) {
          ok = false;  // a repeated key
          return;
        }
        seen |= bit;
        ok = Decode(static_cast<size_t>(idx), value.data, value.size, plans, columns, batch, row, error);
      },
      &why);
  if (well_formed && ok && seen != all_features_) {
    // Spec features the record does not have: missing (VarLen: a row of length 0; FixedLen: the
    // default, or an error).
    for (uint64_t rest = all_features_ & ~seen; rest != 0 && ok; rest &= rest - 1) {
      ok = Decode(static_cast<size_t>(std::countr_zero(rest)), nullptr, 0, plans, columns, batch, row, error);
    }
  }
  if (well_formed && ok) {
    batch.CommitRow();
    return true;
  }
  batch.RollbackRow();
  return false;
}

// The reference walk. Pass 1 remembers, per spec feature, where its (last) Feature message is;
// pass 2 decodes them in spec order.
bool ExampleParser::ParseTwoPass(std::span<const uint8_t> example, ExampleBatch& batch, ParseError* error) const {
  Scratch<KeyHint>& scratch = ScratchOf<KeyHint>(id_, specs_.size());
  scratch.found.assign(specs_.size(), FeatureRef{});
  FeatureRef* const found = scratch.found.data();
  KeyHint* const hints = scratch.hints.data();
  const size_t hint_count = scratch.hints.size();
  const uint8_t* const lowest = example.data();

  // Pass 1: locate each spec feature's Feature message (a later duplicate key wins).
  size_t position = 0;
  std::string why;
  const bool well_formed = ForEachFeature(
      example,
      [&](const uint8_t* key, size_t key_size, const FeatureRef& value) {
        const int idx = MatchKey(hints, hint_count, position++, key, key_size, lowest);
        if (idx >= 0) found[idx] = value;
      },
      &why);
  if (!well_formed) {
    error->no_room = false;
    error->key.clear();
    error->message = "malformed Example: " + why;
    return false;
  }

  // Pass 2: decode into the columns, in spec order.
  const Plan* const plans = plans_.data();
  Column* const columns = specs_.empty() ? nullptr : &batch.column(0);
  const size_t row = batch.rows();
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!Decode(i, found[i].data, found[i].size, plans, columns, batch, row, error)) return false;
  }
  batch.CommitRow();
  return true;
}

// The fast paths for the encoding protobuf serializers write; everything else, including every
// error, goes to DecodeGeneral.
[[gnu::always_inline]] inline bool ExampleParser::Decode(size_t i, const uint8_t* d, size_t n, const Plan* plans,
                                                         Column* columns, ExampleBatch& batch, size_t row,
                                                         ParseError* error) const {
  const Plan& plan = plans[i];
  if (n == 0) {
    // Absent, or a Feature with no list set: both are missing in TF. VarLen: a row of length 0.
    if (!plan.fixed) return true;
    return DecodeGeneral(i, d, n, batch, row, error);  // the default, or an error
  }
  Column& col = columns[i];
  switch (plan.fast) {
    case FastPath::kFloatScalar:
      if (ReadOneFloat(d, n, col.values.data() + row * 4)) return true;
      break;
    case FastPath::kInt64Scalar:
      if (ReadOneInt64(d, n, col.values.data() + row * 8)) return true;
      break;
    case FastPath::kFloatList:
    case FastPath::kInt64List: {
      const bool is_float = plan.fast == FastPath::kFloatList;
      if (!plan.fixed) {
        // One value. Appended with a constant size: a run-time size would be a memcpy call.
        uint8_t value[8];
        if (is_float && ReadOneFloat(d, n, value)) {
          if (!col.values.append(value, 4)) return NoRoom(batch, specs_[i], i, error);
          return true;
        }
        if (!is_float && ReadOneInt64(d, n, value)) {
          if (!col.values.append(value, 8)) return NoRoom(batch, specs_[i], i, error);
          return true;
        }
      }
      PackedRun packed;
      if (!FindCanonicalPackedRun({d, n, true}, &packed) || packed.kind != plan.wire_kind ||
          (plan.fixed && packed.count != plan.elements)) {
        break;
      }
      if (plan.fixed) {
        WritePackedRun(packed, col.values.data() + row * packed.count * plan.element_size);
      } else if (is_float) {
        if (!col.values.append(packed.data, packed.size)) return NoRoom(batch, specs_[i], i, error);
      } else {
        const size_t old = col.values.size();
        if (!col.values.resize(old + packed.count * 8)) return NoRoom(batch, specs_[i], i, error);
        WritePackedRun(packed, col.values.data() + old);
      }
      return true;
    }
    case FastPath::kBytes: {
      // One string of under 126 bytes: bytes_list {value: [s]} = 0a <n-2> 0a <n-4> <s>.
      const uint32_t expected = ((1 << 3) | kLen) | static_cast<uint32_t>(n - 2) << 8 | ((1 << 3) | kLen) << 16 |
                                static_cast<uint32_t>(n - 4) << 24;
      uint32_t head;
      if (n - 4 < 126 && (!plan.fixed || plan.elements == 1) && (std::memcpy(&head, d, 4), head == expected)) {
        if (!col.values.append(d + 4, n - 4) ||
            !col.value_offsets.push_back(static_cast<int64_t>(col.values.size()))) {
          return NoRoom(batch, specs_[i], i, error);
        }
        return true;
      }
      CanonicalBytes canonical;
      if (!FindCanonicalBytes({d, n, true}, &canonical) || (plan.fixed && canonical.count != plan.elements)) break;
      if (!AppendCanonicalBytes(canonical, &col)) return NoRoom(batch, specs_[i], i, error);
      return true;
    }
    case FastPath::kNone:
      break;
  }
  return DecodeGeneral(i, d, n, batch, row, error);
}

// Every case, in the order TF decides them: the Feature's structure, missing, list kind, count.
// Also the fast shapes (Decode sends a fixed-count mismatch here for its message).
[[gnu::noinline]] bool ExampleParser::DecodeGeneral(size_t i, const uint8_t* d, size_t n, ExampleBatch& batch,
                                                    size_t row, ParseError* error) const {
  const FeatureSpec& spec = specs_[i];
  const Plan& plan = plans_[i];
  Column& col = batch.column(i);
  const bool fixed = plan.fixed;
  const uint32_t want = plan.wire_kind;
  // Present and absent Features are told apart by their size only: a Feature of 0 bytes sets no
  // list, so it is missing either way.
  const FeatureRef ref{d, n, true};
  auto fail = [&](std::string message) {
    batch.RollbackRow();
    error->no_room = false;
    error->key = spec.name;
    error->message = "key " + QuotedName(spec.name) + ": " + message;
    return false;
  };
  auto count_mismatch = [&](uint32_t kind, size_t count) {
    // An empty list is there, not missing: TF fills only a missing feature with the default.
    return fail("number of " + std::string(ListKindName(static_cast<ListKind>(kind))) +
                " values != expected: the record has " + std::to_string(count) + ", shape " +
                ShapeString(spec.shape) + " needs " + std::to_string(spec.NumElements()) +
                (count == 0 && spec.has_default ? " (an empty list is not a missing feature: the default fills only "
                                                  "records without it; for lists that may be empty, type: varlen)"
                                                : ""));
  };

  // The fast shapes first (Decode has tried a single value): one list holding one packed run, ...
  PackedRun packed;
  if (n != 0 && plan.numeric_list && FindCanonicalPackedRun(ref, &packed) && packed.kind == want) {
    if (fixed && packed.count != plan.elements) return count_mismatch(want, packed.count);
    const size_t bytes = packed.count * plan.element_size;
    if (fixed) {
      WritePackedRun(packed, col.values.data() + row * bytes);
    } else if (want == static_cast<uint32_t>(ListKind::kFloat)) {
      if (!col.values.append(packed.data, packed.size)) return NoRoom(batch, spec, i, error);
    } else {
      const size_t old = col.values.size();
      if (!col.values.resize(old + bytes)) return NoRoom(batch, spec, i, error);
      WritePackedRun(packed, col.values.data() + old);
    }
    return true;
  }
  // ... and a bytes list in that form (only bytes values).
  CanonicalBytes canonical;
  if (n != 0 && plan.bytes && FindCanonicalBytes(ref, &canonical)) {
    if (fixed && canonical.count != plan.elements) return count_mismatch(want, canonical.count);
    if (!AppendCanonicalBytes(canonical, &col)) return NoRoom(batch, spec, i, error);
    return true;
  }

  ListRun run;
  if (!FindListRun(ref, &run)) {
    batch.RollbackRow();
    error->no_room = false;
    error->key = spec.name;
    error->message = "key " + QuotedName(spec.name) + ": malformed Feature: bad field in Feature";
    return false;
  }
  if (run.kind == 0) {  // missing
    if (!fixed) return true;  // VarLen: a row of length 0
    if (!spec.has_default) {
      return fail("required feature is missing (FixedLenFeature " + std::string(DTypeName(spec.dtype)) + " " +
                  ShapeString(spec.shape) + " without a default: check its name against the record's features "
                  "(ringfeedctl inspect --schema FILE); if the name is right, give the feature a default: value, "
                  "or make it type: varlen if records may lack it)");
    }
    if (spec.dtype == DType::kBytes) {
      const size_t count = static_cast<size_t>(spec.NumElements());
      for (size_t k = 0; k < count; ++k) {
        const std::string& s = spec.default_bytes[spec.default_bytes.size() == 1 ? 0 : k];
        if (!col.values.append(reinterpret_cast<const uint8_t*>(s.data()), s.size()) ||
            !col.value_offsets.push_back(static_cast<int64_t>(col.values.size()))) {
          return NoRoom(batch, spec, i, error);
        }
      }
    } else {
      const std::vector<uint8_t>& row_default = default_rows_[i];
      if (!row_default.empty()) {
        std::memcpy(col.values.data() + row * row_default.size(), row_default.data(), row_default.size());
      }
    }
    return true;
  }

  if (run.kind != want) {
    // What the record holds reads as: a float_list as dtype float32, and so on (a bytes_list
    // could also be decode: raw, which the spec had not asked for).
    const char* fits = run.kind == static_cast<uint32_t>(ListKind::kFloat)   ? "float32"
                       : run.kind == static_cast<uint32_t>(ListKind::kInt64) ? "int64"
                                                                             : "bytes";
    return fail("data types don't match: the record has " + ListName(run.kind) + ", the spec expects " +
                ListName(want) + " (dtype " + std::string(DTypeName(spec.dtype)) +
                (spec.decode_raw ? ", decode: raw" : "") + "); for this data use dtype: " + fits);
  }
  size_t count;
  if (!CountValues(run, &count)) {
    batch.RollbackRow();
    error->no_room = false;
    error->key = spec.name;
    error->message = "key " + QuotedName(spec.name) + ": malformed Feature: bad " + ListName(run.kind);
    return false;
  }

  if (spec.decode_raw) {
    const size_t bytes = static_cast<size_t>(spec.NumElements()) * DTypeSize(spec.dtype);
    const uint8_t* src = nullptr;
    size_t src_size = 0;
    ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
      return VisitBytesList(b, e, [&](const uint8_t* s, size_t size) { src = s, src_size = size; });
    });
    if (count != 1 || src_size != bytes) {
      return fail("decode: raw needs exactly one bytes value of " + std::to_string(bytes) + " bytes (" +
                  std::string(DTypeName(spec.dtype)) + " " + ShapeString(spec.shape) + "), the record has " +
                  std::to_string(count) + " value(s)" + (count == 1 ? " of " + std::to_string(src_size) + " bytes" : ""));
    }
    if (bytes != 0) std::memcpy(col.values.data() + row * bytes, src, bytes);
    return true;
  }

  if (fixed && count != static_cast<size_t>(spec.NumElements())) return count_mismatch(run.kind, count);
  if (spec.dtype == DType::kBytes) {
    if (!AppendBytes(run, col)) return NoRoom(batch, spec, i, error);
  } else {
    const size_t elem = DTypeSize(spec.dtype);
    uint8_t* dst;
    if (fixed) {
      dst = col.values.data() + row * count * elem;
    } else {
      const size_t old = col.values.size();
      if (!col.values.resize(old + count * elem)) return NoRoom(batch, spec, i, error);
      dst = col.values.data() + old;
    }
    WriteNumeric(run, dst);
  }
  return true;
}

namespace {

// Adds to *bytes / *strings an upper bound of the values of list kind `want` in one list message
// (an XxxList): every value field counts, whatever its wire encoding; a packed int64 run counts
// its bytes without the continuation bit (each varint ends with exactly one). Stops at the first
// malformed field: Parse fails on a list it reads that is malformed, and never reads the rest.
[[gnu::always_inline]] inline void MeasureList(const uint8_t* p, const uint8_t* end, uint32_t want, uint64_t* bytes,
                                               uint64_t* strings) {
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return;
    if (field == 1 && wire == kLen) {
      const uint8_t* v;
      size_t n;
      if (!ReadLen(p, end, &v, &n)) return;
      if (want == static_cast<uint32_t>(ListKind::kInt64)) {
        size_t ends = 0;
        for (size_t k = 0; k < n; ++k) ends += v[k] < 0x80;
        *bytes += 8 * ends;
      } else {
        *bytes += n;  // float32 bytes, or one string's bytes
        *strings += want == static_cast<uint32_t>(ListKind::kBytes);
      }
    } else if (field == 1 && wire == kFixed32 && want == static_cast<uint32_t>(ListKind::kFloat)) {
      if (end - p < 4) return;
      p += 4;
      *bytes += 4;
    } else if (field == 1 && wire == kVarint && want == static_cast<uint32_t>(ListKind::kInt64)) {
      uint64_t ignored;
      if (!ReadVarint(p, end, &ignored)) return;
      *bytes += 8;
    } else if (!SkipField(p, end, wire)) {
      return;
    }
  }
}

// Measures every list of kind `want` in one Feature (protobuf's oneof and merge rules make the
// values Parse appends a subset of those). *listed: the Feature sets some list, so it is not
// missing (Parse's rule: a list field of any kind, wire type LEN).
[[gnu::always_inline]] inline void MeasureFeature(const FeatureRef& ref, uint32_t want, uint64_t* bytes,
                                                  uint64_t* strings, bool* listed) {
  const uint8_t* p = ref.data;
  const uint8_t* const end = p + ref.size;
  while (p < end) {
    uint32_t field, wire;
    if (!ReadTag(p, end, &field, &wire)) return;  // malformed Feature: Parse appends nothing
    if (wire != kLen) {
      if (!SkipField(p, end, wire)) return;
      continue;
    }
    const uint8_t* list;
    size_t list_size;
    if (!ReadLen(p, end, &list, &list_size)) return;
    if (field < 1 || field > 3) continue;
    *listed = true;
    if (field == want) MeasureList(list, list + list_size, want, bytes, strings);
  }
}

}  // namespace

size_t ExampleParser::RowBytes(std::span<const uint8_t> example) const {
  ColumnSizes sizes;
  Measure(example, &sizes);
  sizes.records = 1;
  return ColumnRegionsBytes(ColumnCapacities(specs_, 1, sizes), 8);
}

void ExampleParser::Measure(std::span<const uint8_t> example, ColumnSizes* sizes) const {
  if (sizes->features.size() != specs_.size()) {
    if (!sizes->features.empty()) {
      throw std::invalid_argument("ExampleParser::Measure: sizes of " + std::to_string(sizes->features.size()) +
                                  " features for a parser of " + std::to_string(specs_.size()));
    }
    sizes->features.resize(specs_.size());
  }
  ++sizes->records;
  if (measured_features_ == 0) return;  // only FixedLen numeric features: nothing depends on the record
  // Parse's key matching (position hints, then the table) with its own per-thread scratch, and
  // `listed`: per FixedLen bytes feature with a default, whether its last Feature set a list.
  struct MeasureScratch {
    uint64_t owner = 0;
    std::vector<KeyHint> hints;
    std::vector<uint8_t> listed;
  };
  thread_local MeasureScratch scratch;
  if (scratch.owner != id_) {
    scratch.owner = id_;
    scratch.hints.assign(std::max<size_t>(64, 4 * specs_.size()), KeyHint{});  // as Parse's (ScratchOf)
    scratch.listed.assign(specs_.size(), 0);
  }
  KeyHint* const hints = scratch.hints.data();
  const size_t hint_count = scratch.hints.size();
  uint8_t* const listed = scratch.listed.data();
  for (const DefaultBytes& d : default_bytes_) listed[d.feature] = 0;
  ColumnSize* const out = sizes->features.data();

  // One walk; each Feature is measured where it is found. A repeated key is counted every time
  // (Parse keeps the last: the sum bounds it). On malformed input the walk stops early: Parse
  // then fails and appends nothing, so what was added is still a bound.
  const uint8_t* const lowest = example.data();
  size_t position = 0;
  std::string why;
  ForEachFeature(
      example,
      [&](const uint8_t* key, size_t key_size, const FeatureRef& value) {
        const int idx = MatchKey(hints, hint_count, position++, key, key_size, lowest);
        if (idx < 0) return;
        const uint8_t what = measure_[static_cast<size_t>(idx)];
        if (what == 0) return;
        bool any_list = false;
        MeasureFeature(value, what & ~kDefaultBytes, &out[idx].value_bytes, &out[idx].strings, &any_list);
        if (what & kDefaultBytes) listed[idx] = any_list;
      },
      &why);
  for (const DefaultBytes& d : default_bytes_) {
    if (!listed[d.feature]) {  // missing (or Feature{}): Parse writes the defaults
      out[d.feature].value_bytes += d.bytes;
      out[d.feature].strings += d.strings;
    }
  }
}

}  // namespace ringfeed
