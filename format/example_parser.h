// ExampleParser: serialized tf.train.Example -> one row of an ExampleBatch, by walking the
// protobuf wire format directly (no message objects) and writing values straight into the
// batch's columns.
//
// Semantics: TensorFlow's fast parser (tensorflow/core/util/example_proto_fast_parsing.cc) for
// everything a protobuf serializer writes, checked against TF 2.21 (tests/golden/, 874 edge
// cases in tests/golden/edge_cases.json):
//   - a Feature with no list set counts as missing; a missing FixedLen feature takes its default
//     or is an error; a missing VarLen feature is a row of length 0;
//   - a list that is set but empty is NOT missing: for a FixedLen feature it is a count error
//     (as in TF), for a VarLen feature a row of length 0;
//   - the list kind must match the spec ("data types don't match"), whatever the count;
//   - a FixedLen feature must hold exactly prod(shape) values;
//   - keys not in the spec are skipped without decoding; a key given twice: the last one wins;
//   - a map entry with two Feature values is rejected (as TF does);
//   - floats are copied bit for bit (NaN payloads and infinities unchanged);
//   - `decode: raw`: the one bytes value must hold exactly prod(shape) * DTypeSize(dtype)
//     bytes, reinterpreted as little-endian values (tf.io.decode_raw).
// Where TF's fast parser silently drops values that the protobuf encoding carries, ringfeed
// follows protobuf decoding instead (never losing data): packed and unpacked repeated fields
// are both accepted, also mixed; repeated lists of one kind concatenate; when a Feature sets
// several list kinds the last one wins (oneof); repeated `features` fields merge. TF reads only
// the first list / first packed run there. The full list of differences is in
// tests/golden/make_edge_cases.py (KNOWN_DIVERGENCES) and docs/config.md.
//
// Writing into a shared-memory slot: Measure() each record of the batch first, turn the sums
// into region sizes with ColumnCapacities (format/column_sizes.h), build an external
// ExampleBatch over the slot and Parse into it. A record that does not fit its regions (which
// Measure's bounds rule out) fails with a "no room" ParseError and leaves the batch unchanged.
//
// Thread-safety: Parse() and Measure() are const and may run concurrently (on distinct batches
// and ColumnSizes).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "format/column_sizes.h"
#include "format/example_batch.h"
#include "format/feature_spec.h"

namespace ringfeed {

struct ParseError {
  std::string key;      // the feature concerned; empty for a malformed Example
  std::string message;  // "key 'fare': data types don't match: ..." (no file/record prefix)
  // True when the record is fine but did not fit an external batch's regions (size them with
  // Measure); false for every error of the record itself.
  bool no_room = false;
};

class ExampleParser {
 public:
  // Throws std::invalid_argument for an inconsistent spec (the config validates first).
  explicit ExampleParser(FeatureSpecs specs);

  const FeatureSpecs& specs() const { return specs_; }

  // Appends one row to `batch` (which must have been built from specs() and have room).
  // Returns false and fills *error on failure; the batch is then unchanged.
  bool Parse(std::span<const uint8_t> example, ExampleBatch& batch, ParseError* error) const;

  // Whether Parse would accept the record (and, if not, why in *error), by parsing it into a
  // one-row batch of this thread's and dropping the row. Costs a Parse; the reader threads use
  // it to take records that do not match the spec out before they are batched
  // (on_error: skip, daemon/pipeline.h). Thread-safe (the scratch batch
  // is per thread and per parser). Memory: per thread, one row: the spec's FixedLen columns and
  // the checked record's values (up to 8x its bytes for a VarLen int64 list of one-byte
  // varints), kept for the next check while the values hold at most kCheckScratchKeepBytes,
  // else freed before Check returns. Throws std::bad_alloc.
  bool Check(std::span<const uint8_t> example, ParseError* error) const;
  static constexpr size_t kCheckScratchKeepBytes = size_t{1} << 20;
  // Bytes the calling thread's check scratch keeps now for record values, beyond the FixedLen
  // columns of its spec (0: none).
  static size_t ThreadCheckScratchBytes();

  // Adds to *sizes, per spec feature, an upper bound of what Parse appends for this record to
  // the record-dependent arrays (see ColumnSize), whatever the record: malformed, with repeated
  // keys (each occurrence counts) or wrong list kinds (they count what they hold of the spec's
  // kind, or 0). Exact for the encoding serializers write. One walk over the record, as Parse's;
  // values are counted, not decoded (about 2,200 instructions per taxi record, Parse about
  // 2,700; callgrind, inclusive). sizes->features is sized on first use.
  // Throws std::invalid_argument when *sizes was filled by a parser of another spec size.
  void Measure(std::span<const uint8_t> example, ColumnSizes* sizes) const;
  // Bytes the record takes as one row of a batch: its columns' arrays (ColumnCapacities of one
  // row, each 8-byte aligned) from Measure, so an upper bound whatever the record. One walk.
  size_t RowBytes(std::span<const uint8_t> example) const;

  // Index of the spec feature called `key`, or -1. Exposed for tests.
  int Lookup(std::span<const uint8_t> key) const;

 private:
  // A key's fingerprint: its length, its first and last (up to) 8 bytes and bytes 8..15,
  // zero-padded. For keys of at most 24 bytes equal fingerprints mean equal keys, so no memcmp.
  struct Fingerprint {
    uint64_t head = 0;
    uint64_t mid = 0;
    uint64_t tail = 0;
    uint64_t size = 0;
    bool operator==(const Fingerprint&) const = default;
  };
  struct Slot {
    Fingerprint key;
    int32_t feature = -1;
  };
  // `lowest`: the first byte that may be read (the record's start); a key shorter than 8 bytes
  // is then read with one load ending at its last byte instead of byte by byte.
  static Fingerprint FingerprintOf(const uint8_t* p, size_t n, const uint8_t* lowest);
  static uint32_t Hash(const Fingerprint& f);
  int Find(const Fingerprint& f, const uint8_t* key, size_t size) const;  // Lookup, fingerprint given
  // The key met at one entry position of the previous record, and its spec feature (-1: not in
  // the spec). Records of one dataset list their keys in the same order, so this is usually the
  // key at that position in the next record too.
  struct KeyHint {
    Fingerprint key;
    int32_t feature = -1;
    bool valid = false;  // false: no record had an entry at this position yet
  };
  // The spec feature of the key at entry `position` of a record whose bytes start at `lowest`
  // (-1: not in the spec): hints[position] when its key is this one, else the table's answer,
  // which then becomes the hint. Positions >= hint_count have no hint.
  int MatchKey(KeyHint* hints, size_t hint_count, size_t position, const uint8_t* key, size_t key_size,
               const uint8_t* lowest) const;
  // MatchKey when the hint does not match: out of line, and computing the fingerprint again,
  // so that the usual path keeps it in registers.
  int MatchKeySlow(KeyHint* hint, const uint8_t* key, size_t key_size, const uint8_t* lowest) const;
  // True when spec feature `feature` is the key [key, key + size) with fingerprint f.
  bool Matches(int feature, const Fingerprint& f, const uint8_t* key, size_t size) const;

  // The shape of value list Decode tries first (the one protobuf serializers write for the
  // spec), before the general walk.
  enum class FastPath : uint8_t {
    kFloatScalar,  // FixedLen float32, one value: float_list {value: [f]}
    kInt64Scalar,  // FixedLen int64, one value
    kFloatList,    // other float32: one packed run (one value is a packed run too)
    kInt64List,    // other int64
    kBytes,        // bytes dtype: one bytes_list of only values
    kNone,         // decode: raw: the general walk only
  };
  // Per feature, what Parse needs on every record, computed once.
  struct Plan {
    FastPath fast;
    uint32_t wire_kind;   // ListKind the record must hold
    bool fixed;           // FixedLen
    bool bytes;           // dtype bytes
    bool numeric_list;    // read from an int64_list / float_list (not bytes, not decode: raw)
    size_t elements;      // FixedLen: values per row
    size_t element_size;  // DTypeSize(dtype)
  };
  // Parse's two strategies (see example_parser.cc). ParseOnePass decodes each Feature where the
  // walk finds it and gives up (false, the row rolled back, no error reported) on anything the
  // two-pass walk must decide: an error, a repeated key, a malformed record. ParseTwoPass is the
  // reference.
  bool ParseOnePass(std::span<const uint8_t> example, ExampleBatch& batch) const;
  bool ParseTwoPass(std::span<const uint8_t> example, ExampleBatch& batch, ParseError* error) const;
  // One Feature (`size` bytes at `data`; size 0: absent or no list set) into row `row` of
  // column `feature`: the fast paths inline, the rest in DecodeGeneral. False: the row was
  // rolled back and *error says why.
  // `plans` and `columns` are plans_.data() and the batch's first column, held by the caller.
  bool Decode(size_t feature, const uint8_t* data, size_t size, const Plan* plans, Column* columns,
              ExampleBatch& batch, size_t row, ParseError* error) const;
  bool DecodeGeneral(size_t feature, const uint8_t* data, size_t size, ExampleBatch& batch, size_t row,
                     ParseError* error) const;

  // What Measure does per feature: 0 = nothing (FixedLen numeric), else the ListKind to count,
  // | kDefaultBytes for a FixedLen bytes feature with a default (taken when the record has no list).
  static constexpr uint8_t kDefaultBytes = 0x80;
  struct DefaultBytes {
    uint32_t feature;
    uint64_t bytes;    // one row of defaults
    uint64_t strings;  // NumElements()
  };

  uint64_t id_ = 0;  // unique per constructed parser (copies share it: same specs)
  FeatureSpecs specs_;
  std::vector<Plan> plans_;
  std::vector<uint8_t> measure_;  // per feature, see kDefaultBytes
  size_t measured_features_ = 0;
  std::vector<DefaultBytes> default_bytes_;
  std::vector<Fingerprint> fingerprints_;  // per feature
  std::vector<Slot> table_;  // open addressing, power-of-two size, >= 4x the feature count
  // Bit i set per spec feature i when the spec has at most 64 features (ParseOnePass's limit).
  uint64_t all_features_ = 0;
  bool one_pass_ = false;
  uint32_t mask_ = 0;
  // Defaults expanded to full rows (FixedLen numeric with has_default), as raw bytes.
  std::vector<std::vector<uint8_t>> default_rows_;
};

}  // namespace ringfeed
