// `ringfeedctl inspect FILE...`: the first tool a user runs on their data.
//
// Modes (one per run; every mode reads the files in the order given, each with TFRecordReader,
// CRCs always checked, compression detected unless --compression says otherwise):
//
//   records (default)  One JSON line per record, written by nlohmann-json:
//                        {"file":F,"index":N,"offset":BYTES,"features":{NAME:{"kind":K,"values":[...]}}}
//                      `offset` is the record header's byte offset in the uncompressed stream.
//                      Features are sorted by name. K is "int64", "float", "bytes", or null for
//                      a Feature with no list set (values then []). int64 values are JSON
//                      integers; floats are the shortest decimal that reads back as the same
//                      float32 (0.1f prints 0.1), NaN/infinities are the strings "nan", "inf",
//                      "-inf"; bytes are standard padded base64.
//   count              Records per file and the total, as a table (or JSON with --json).
//   verify             Lists every corrupt or truncated record (file, index, offset, kind,
//                      message), going on past recoverable errors, then one summary line.
//   schema             Per feature: kind, records where it has values, values per record
//                      (min-max); then a `features:` block for the job config. The whole report
//                      is valid YAML (the summary lines are comments). A feature is `fixed`
//                      (shape [] for one value, [n] for n) when every record has it with the
//                      same number n >= 1 of values, `varlen` otherwise, so the block parses
//                      every record it was inferred from. A feature seen with two list kinds
//                      is a problem: no spec parses both; it is left out of the block.
//
// Problems (unreadable files, CRC mismatches, truncation, malformed Examples) are printed to
// the error stream as they happen, naming file, record index and byte offset; the run goes on
// with the next record (recoverable errors) or the next file, and the exit status is
// kExitDataProblems at the end. In verify mode the problem list is the report itself (stdout).
//
// The Example decoding here is a generic wire walk listing every (key, kind, values): the
// ExampleParser only decodes the keys of a spec, and inspect has no spec. It follows the
// parser's (and TensorFlow's) semantics; tests compare it with both.
#include "daemon/inspect.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ringfeed {
namespace {

using Json = nlohmann::ordered_json;  // keeps "file", "index", "offset", "features" in that order

// ---------------------------------------------------------------------------------------------
// tf.train.Example wire walk
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   XxxList  { repeated xxx value = 1; }             packed (wire type 2) or not (0 / 5 / 2)

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

constexpr uint64_t kMaxFieldNumber = (uint64_t{1} << 29) - 1;
constexpr int kMaxVarintBytes = 10;

// A read position inside one protobuf message.
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;

  bool AtEnd() const { return p >= end; }

  bool Varint(uint64_t* value) {
    uint64_t result = 0;
    for (int i = 0; i < kMaxVarintBytes && p < end; ++i) {
      const uint8_t b = *p++;
      result |= uint64_t{b & 0x7fu} << (7 * i);
      if (b < 0x80) {
        *value = result;
        return true;
      }
    }
    return false;  // runs past the message or longer than 10 bytes
  }

  bool Tag(uint32_t* field, uint32_t* wire) {
    uint64_t tag;
    if (!Varint(&tag) || (tag >> 3) == 0 || (tag >> 3) > kMaxFieldNumber) return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *wire = static_cast<uint32_t>(tag & 7);
    return true;
  }

  // A length-delimited payload, which must lie inside this message.
  bool Payload(Cursor* inner) {
    uint64_t size;
    if (!Varint(&size) || size > static_cast<uint64_t>(end - p)) return false;
    *inner = {p, p + size};
    p += size;
    return true;
  }

  bool Fixed(size_t size) {
    if (static_cast<size_t>(end - p) < size) return false;
    p += size;
    return true;
  }

  bool Skip(uint32_t wire) {
    uint64_t ignored;
    Cursor payload;
    switch (wire) {
      case kVarint: return Varint(&ignored);
      case kFixed64: return Fixed(8);
      case kLen: return Payload(&payload);
      case kFixed32: return Fixed(4);
      default: return false;  // groups are not part of an Example
    }
  }
};

bool DecodeFloats(Cursor list, std::vector<float>* out) {
  while (!list.AtEnd()) {
    uint32_t field, wire;
    if (!list.Tag(&field, &wire)) return false;
    if (field != 1) {
      if (!list.Skip(wire)) return false;
      continue;
    }
    const uint8_t* values = list.p;
    Cursor packed;
    if (wire == kLen) {
      if (!list.Payload(&packed) || (packed.end - packed.p) % 4 != 0) return false;
      values = packed.p;
    } else if (wire != kFixed32 || !list.Fixed(4)) {
      return false;
    }
    const size_t count = wire == kLen ? static_cast<size_t>(packed.end - packed.p) / 4 : 1;
    if (count == 0) continue;  // an empty packed run
    const size_t old = out->size();
    out->resize(old + count);
    std::memcpy(out->data() + old, values, count * 4);  // little-endian, bit for bit
  }
  return true;
}

bool DecodeInt64s(Cursor list, std::vector<int64_t>* out) {
  while (!list.AtEnd()) {
    uint32_t field, wire;
    if (!list.Tag(&field, &wire)) return false;
    uint64_t v;
    if (field != 1) {
      if (!list.Skip(wire)) return false;
    } else if (wire == kVarint) {
      if (!list.Varint(&v)) return false;
      out->push_back(static_cast<int64_t>(v));
    } else if (wire == kLen) {
      Cursor packed;
      if (!list.Payload(&packed)) return false;
      while (!packed.AtEnd()) {
        if (!packed.Varint(&v)) return false;
        out->push_back(static_cast<int64_t>(v));
      }
    } else {
      return false;
    }
  }
  return true;
}

bool DecodeBytes(Cursor list, std::vector<std::string>* out) {
  while (!list.AtEnd()) {
    uint32_t field, wire;
    if (!list.Tag(&field, &wire)) return false;
    if (field != 1) {
      if (!list.Skip(wire)) return false;
      continue;
    }
    Cursor value;
    if (wire != kLen || !list.Payload(&value)) return false;
    out->emplace_back(reinterpret_cast<const char*>(value.p), static_cast<size_t>(value.end - value.p));
  }
  return true;
}

bool DecodeList(ListKind kind, Cursor list, FeatureValues* out) {
  switch (kind) {
    case ListKind::kBytes: return DecodeBytes(list, &out->bytes_values);
    case ListKind::kFloat: return DecodeFloats(list, &out->float_values);
    case ListKind::kInt64: return DecodeInt64s(list, &out->int64_values);
  }
  return false;
}

// Protobuf oneof semantics: setting another kind clears the list; lists of the same kind merge.
// So the values are those of the lists of the last kind set, from where it was last switched to.
// Returns "" or what is malformed.
std::string DecodeFeature(Cursor feature, FeatureValues* out) {
  uint32_t kind = 0;
  Cursor run = feature;
  for (Cursor c = feature; !c.AtEnd();) {
    const Cursor start = c;
    uint32_t field, wire;
    if (!c.Tag(&field, &wire) || !c.Skip(wire)) return "bad field in Feature";
    if (field >= 1 && field <= 3 && wire == kLen && field != kind) {
      kind = field;
      run = start;
    }
  }
  *out = FeatureValues{};
  if (kind == 0) return "";  // no list set
  out->kind = static_cast<ListKind>(kind);
  while (!run.AtEnd()) {
    uint32_t field, wire;
    Cursor list;
    if (!run.Tag(&field, &wire)) return "bad field in Feature";  // (validated above)
    if (field != kind || wire != kLen) {
      if (!run.Skip(wire)) return "bad field in Feature";
    } else if (!run.Payload(&list) || !DecodeList(*out->kind, list, out)) {
      return "bad " + std::string(ListKindName(*out->kind)) + "_list";
    }
  }
  return "";
}

// One map entry: key = 1, value = 2 (a missing key is "", a missing value an empty Feature).
// A second value is malformed, as for ExampleParser and TensorFlow (protobuf would merge them).
// Returns "" or what is malformed.
std::string DecodeMapEntry(Cursor entry, std::string* key, Cursor* feature) {
  *key = "";
  *feature = {entry.p, entry.p};
  bool have_value = false;
  while (!entry.AtEnd()) {
    uint32_t field, wire;
    Cursor payload;
    if (!entry.Tag(&field, &wire)) return "bad tag in feature map entry";
    if ((field == 1 || field == 2) && wire == kLen) {
      if (!entry.Payload(&payload)) return field == 1 ? "key length exceeds map entry" : "Feature length exceeds map entry";
      if (field == 1) {
        key->assign(reinterpret_cast<const char*>(payload.p), static_cast<size_t>(payload.end - payload.p));
      } else {
        if (have_value) return "feature map entry holds two values";
        have_value = true;
        *feature = payload;
      }
    } else if (!entry.Skip(wire)) {
      return "bad field in feature map entry";
    }
  }
  return "";
}

// Collects key -> Feature bytes of every `features` field (later entries win).
bool CollectFeatures(Cursor example, std::map<std::string, Cursor>* features, std::string* error) {
  auto fail = [&](const std::string& what) {
    *error = "malformed Example: " + what;
    return false;
  };
  while (!example.AtEnd()) {
    uint32_t field, wire;
    if (!example.Tag(&field, &wire)) return fail("bad field tag");
    Cursor map;
    if (field != 1 || wire != kLen) {
      if (!example.Skip(wire)) return fail("bad field");
      continue;
    }
    if (!example.Payload(&map)) return fail("features length exceeds the record");
    while (!map.AtEnd()) {
      Cursor entry;
      if (!map.Tag(&field, &wire)) return fail("bad tag in Features");
      if (field != 1 || wire != kLen) {
        if (!map.Skip(wire)) return fail("bad field in Features");
        continue;
      }
      if (!map.Payload(&entry)) return fail("map entry length exceeds Features");
      std::string key;
      Cursor feature;
      if (std::string why = DecodeMapEntry(entry, &key, &feature); !why.empty()) return fail(why);
      (*features)[std::move(key)] = feature;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// JSON values

Json FloatJson(float f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // to_chars(float) is the shortest string that reads back as this float32; read as a double,
  // nlohmann prints the shortest string of that double, which is the same digits.
  char text[64];
  const auto written = std::to_chars(text, text + sizeof text, f);
  double d = 0;
  std::from_chars(text, written.ptr, d);
  return d;
}

Json FeatureJson(const FeatureValues& feature) {
  Json values = Json::array();
  if (feature.kind == ListKind::kInt64) {
    for (int64_t v : feature.int64_values) values.push_back(v);
  } else if (feature.kind == ListKind::kFloat) {
    for (float v : feature.float_values) values.push_back(FloatJson(v));
  } else if (feature.kind == ListKind::kBytes) {
    for (const std::string& v : feature.bytes_values) {
      values.push_back(Base64Encode({reinterpret_cast<const uint8_t*>(v.data()), v.size()}));
    }
  }
  Json kind = feature.kind ? Json(std::string(ListKindName(*feature.kind))) : Json(nullptr);
  return Json{{"kind", std::move(kind)}, {"values", std::move(values)}};
}

// One line of JSON. Invalid UTF-8 (file names, feature keys) becomes U+FFFD instead of throwing.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

// ---------------------------------------------------------------------------------------------
// Reading files

// "FILE: record N at byte B", the prefix of every problem about one record (as in ReadError).
std::string RecordPlace(const std::string& file, uint64_t index, uint64_t offset) {
  return file + ": record " + std::to_string(index) + " at byte " + std::to_string(offset);
}

// The reader's message, with the fix for a too-large record spelled as this tool's flag.
std::string ProblemMessage(const ReadError& error) {
  std::string message = error.message;
  if (error.kind == ReadErrorKind::kRecordTooLarge) {
    const std::string hint = "raise max_record_bytes";
    const size_t at = message.find(hint);
    if (at != std::string::npos) message.replace(at, hint.size(), "raise --max-record-bytes");
  }
  return message;
}

struct FileTotals {
  uint64_t records = 0;   // good records
  uint64_t problems = 0;  // read errors (and, counted by the caller, parse errors)
};

// Reads records 0 .. limit-1 of `file` (all when limit is 0): on_record for each good record,
// on_error for each read error; goes on after recoverable errors.
FileTotals ReadRecords(const std::string& file, const InspectOptions& options,
                       const std::function<void(const Record&)>& on_record,
                       const std::function<void(const ReadError&)>& on_error) {
  ReaderOptions reader_options = options.reader;
  reader_options.verify_crc = true;
  TFRecordReader reader(file, reader_options);
  FileTotals totals;
  Record record;
  ReadError error;
  while (true) {
    uint64_t index = 0;
    switch (reader.Next(&record, &error)) {
      case TFRecordReader::Status::kEnd: return totals;
      case TFRecordReader::Status::kRecord:
        ++totals.records;
        on_record(record);
        index = record.index;
        break;
      case TFRecordReader::Status::kError:
        ++totals.problems;
        on_error(error);
        index = error.record_index;
        break;
    }
    if (options.limit != 0 && index + 1 >= options.limit) return totals;
  }
}

void ReportReadError(const ReadError& error, std::ostream& err) { err << ProblemMessage(error) << '\n'; }

// Decodes a record, or reports why it is not a valid Example (returns false).
bool DecodeRecord(const std::string& file, const Record& record, ExampleFeatures* features, std::ostream& err) {
  std::string why;
  if (DecodeExample(record.data, features, &why)) return true;
  err << RecordPlace(file, record.index, record.offset) << ": " << why << '\n';
  return false;
}

std::string Plural(uint64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

int ExitFor(uint64_t problems) { return problems == 0 ? kExitOk : kExitDataProblems; }

// ---------------------------------------------------------------------------------------------
// records mode

int RunRecords(const InspectOptions& options, std::ostream& out, std::ostream& err) {
  uint64_t problems = 0;
  ExampleFeatures features;
  for (const std::string& file : options.files) {
    auto on_record = [&](const Record& record) {
      if (!DecodeRecord(file, record, &features, err)) {
        ++problems;
        return;
      }
      nlohmann::json by_name = nlohmann::json::object();  // a std::map: sorted, O(log n) inserts
      for (const auto& [name, values] : features) by_name[name] = FeatureJson(values);
      out << Dump({{"file", file}, {"index", record.index}, {"offset", record.offset}, {"features", Json(by_name)}}) << '\n';
    };
    problems += ReadRecords(file, options, on_record, [&](const ReadError& e) { ReportReadError(e, err); }).problems;
  }
  if (problems != 0) err << "inspect: " << Plural(problems, "problem") << " (see above)\n";
  return ExitFor(problems);
}

// ---------------------------------------------------------------------------------------------
// count mode

int RunCount(const InspectOptions& options, std::ostream& out, std::ostream& err) {
  std::vector<FileTotals> per_file;
  FileTotals total;
  for (const std::string& file : options.files) {
    FileTotals t = ReadRecords(file, options, [](const Record&) {}, [&](const ReadError& e) { ReportReadError(e, err); });
    per_file.push_back(t);
    total.records += t.records;
    total.problems += t.problems;
  }
  if (options.json) {
    Json files = Json::array();
    for (size_t i = 0; i < per_file.size(); ++i) {
      files.push_back({{"file", options.files[i]}, {"records", per_file[i].records}, {"problems", per_file[i].problems}});
    }
    out << Dump({{"files", std::move(files)}, {"records", total.records}, {"problems", total.problems}}) << '\n';
    return ExitFor(total.problems);
  }
  const int width = std::max<int>(7, static_cast<int>(std::to_string(total.records).size()));
  auto row = [&](uint64_t records, const std::string& label, uint64_t problems) {
    std::string n = std::to_string(records);
    out << std::string(static_cast<size_t>(width) - n.size(), ' ') << n << "  " << label;
    if (problems != 0) out << "  (" << Plural(problems, "problem") << ", see stderr)";
    out << '\n';
  };
  out << std::string(static_cast<size_t>(width) - 7, ' ') << "records  file\n";
  for (size_t i = 0; i < per_file.size(); ++i) row(per_file[i].records, options.files[i], per_file[i].problems);
  row(total.records, "total (" + Plural(per_file.size(), "file") + ")", total.problems);
  return ExitFor(total.problems);
}

// ---------------------------------------------------------------------------------------------
// verify mode

std::string VerifyLine(const ReadError& error) {
  std::string line = ProblemMessage(error);
  if (!error.recoverable && error.kind != ReadErrorKind::kTruncatedRecord && error.kind != ReadErrorKind::kIo) {
    line += " (the rest of this file cannot be checked)";
  }
  return line;
}

int RunVerify(const InspectOptions& options, std::ostream& out) {
  std::vector<ReadError> problems;
  uint64_t records = 0;
  uint64_t files_with_problems = 0;
  for (const std::string& file : options.files) {
    FileTotals t = ReadRecords(file, options, [](const Record&) {}, [&](const ReadError& e) {
      problems.push_back(e);
      if (!options.json) out << VerifyLine(e) << '\n';
    });
    records += t.records;
    if (t.problems != 0) ++files_with_problems;
  }
  if (options.json) {
    Json list = Json::array();
    for (const ReadError& e : problems) {
      list.push_back({{"file", e.file}, {"index", e.record_index}, {"offset", e.offset},
                      {"kind", std::string(ReadErrorKindName(e.kind))}, {"message", ProblemMessage(e)},
                      {"recoverable", e.recoverable}});
    }
    out << Dump({{"files", options.files.size()}, {"records", records}, {"ok", problems.empty()},
                 {"problems", std::move(list)}})
        << '\n';
    return ExitFor(problems.size());
  }
  out << "verify: " << (problems.empty() ? "OK" : "FAILED") << ": " << Plural(options.files.size(), "file") << ", "
      << Plural(records, "good record") << ", " << Plural(problems.size(), "problem");
  if (!problems.empty()) out << " in " << Plural(files_with_problems, "file");
  out << '\n';
  return ExitFor(problems.size());
}

// ---------------------------------------------------------------------------------------------
// schema mode

// Where a feature was first seen with a kind, for the "two kinds" problem.
struct KindSeen {
  uint64_t records = 0;
  std::string first_file;
  uint64_t first_index = 0;
};

struct FeatureStats {
  std::array<KindSeen, 4> kinds;  // indexed by ListKind (1..3)
  uint64_t with_key = 0;          // records whose feature map has the key
  uint64_t with_list = 0;         // ... and a list set
  uint64_t present = 0;           // ... and at least one value
  uint64_t min_values = std::numeric_limits<uint64_t>::max();  // over records with the key
  uint64_t max_values = 0;
  uint64_t min_present = std::numeric_limits<uint64_t>::max();  // over records with values

  int KindCount() const {
    return static_cast<int>(std::count_if(kinds.begin(), kinds.end(), [](const KindSeen& k) { return k.records > 0; }));
  }
  std::optional<ListKind> Kind() const {
    for (uint32_t k = 1; k <= 3; ++k) {
      if (kinds[k].records > 0) return static_cast<ListKind>(k);
    }
    return std::nullopt;
  }
};

struct Schema {
  uint64_t records = 0;  // records decoded (the denominator of every percentage)
  uint64_t problems = 0;
  std::map<std::string, FeatureStats> features;
};

void AddToSchema(const std::string& file, const Record& record, const ExampleFeatures& features, Schema* schema) {
  ++schema->records;
  for (const auto& [name, values] : features) {
    FeatureStats& s = schema->features[name];
    const uint64_t n = values.size();
    ++s.with_key;
    s.min_values = std::min(s.min_values, n);
    s.max_values = std::max(s.max_values, n);
    if (!values.kind) continue;
    ++s.with_list;
    KindSeen& kind = s.kinds[static_cast<size_t>(*values.kind)];
    if (kind.records++ == 0) {
      kind.first_file = file;
      kind.first_index = record.index;
    }
    if (n == 0) continue;
    ++s.present;
    s.min_present = std::min(s.min_present, n);
  }
}

// Values per record over all records: a record without the key has 0.
uint64_t MinValues(const FeatureStats& s, uint64_t records) { return s.with_key < records ? 0 : s.min_values; }

// The `fixed` rule: a list of one kind in every record, always with the same count n >= 1.
bool IsFixed(const FeatureStats& s, uint64_t records) {
  return s.KindCount() == 1 && s.with_list == records && s.min_values == s.max_values && s.min_values >= 1;
}

std::string DTypeFor(ListKind kind) {
  switch (kind) {
    case ListKind::kInt64: return "int64";
    case ListKind::kFloat: return "float32";
    case ListKind::kBytes: return "bytes";
  }
  return "?";
}

std::string KindsText(const FeatureStats& s) {
  std::string text;
  for (uint32_t k = 1; k <= 3; ++k) {
    const KindSeen& seen = s.kinds[k];
    if (seen.records == 0) continue;
    if (!text.empty()) text += ", ";
    text += std::string(ListKindName(static_cast<ListKind>(k))) + " in " + Plural(seen.records, "record") +
            " (first: " + seen.first_file + " record " + std::to_string(seen.first_index) + ")";
  }
  return text;
}

// "66.1%"; a partial presence never shows as 0% or 100%.
std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0 || part == 0) return "0%";
  if (part == whole) return "100%";
  const double pct = 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  if (pct < 0.1) return "<0.1%";
  if (pct > 99.9) return ">99.9%";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", pct);
  return text;
}

// A feature name as a YAML mapping key: plain when unambiguous, else a double-quoted (JSON)
// string, which YAML reads back to the same name.
std::string YamlKey(const std::string& name) {
  const bool plain_chars = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                           std::all_of(name.begin(), name.end(), [](char c) {
                             return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/';
                           });
  std::string lower(name.size(), ' ');
  std::transform(name.begin(), name.end(), lower.begin(), [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  // The YAML 1.2 core schema's non-string plain words (y/n/yes/no/on/off are strings there).
  constexpr std::array<std::string_view, 3> kYamlWords = {"null", "true", "false"};
  const bool reserved = std::find(kYamlWords.begin(), kYamlWords.end(), lower) != kYamlWords.end();
  if (plain_chars && !reserved) return name;
  return Json(name).dump(-1, ' ', true, nlohmann::detail::error_handler_t::replace);
}

// The spec of one feature for the `features:` block, or "" with *why set when it has none.
std::string SpecFor(const FeatureStats& s, uint64_t records, std::string* why) {
  if (s.KindCount() > 1) {
    *why = "left out: two list kinds: " + KindsText(s);
    return "";
  }
  if (s.KindCount() == 0) {
    *why = "left out: no record has a value list, so its kind is unknown";
    return "";
  }
  const std::string dtype = DTypeFor(*s.Kind());
  if (IsFixed(s, records)) {
    const std::string shape = s.min_values == 1 ? "[]" : "[" + std::to_string(s.min_values) + "]";
    return "{type: fixed, dtype: " + dtype + ", shape: " + shape + "}";
  }
  std::vector<std::string> reasons;
  if (s.present < records) reasons.push_back("missing or empty in " + std::to_string(records - s.present) + " of " + std::to_string(records) + " records");
  if (s.present > 0 && s.min_present != s.max_values) {
    reasons.push_back(std::to_string(s.min_present) + " to " + std::to_string(s.max_values) + " values when present");
  }
  *why = "";
  for (const std::string& r : reasons) *why += (why->empty() ? "" : "; ") + r;
  return "{type: varlen, dtype: " + dtype + "}";
}

void PrintSchemaTable(const Schema& schema, size_t files, std::ostream& out) {
  out << "# ringfeedctl inspect --schema: " << Plural(schema.records, "record") << " in " << Plural(files, "file") << '\n';
  if (schema.problems != 0) {
    out << "# " << Plural(schema.problems, "record") << " could not be read or decoded (see stderr); they are not counted\n";
  }
  size_t width = 7;
  for (const auto& [name, s] : schema.features) width = std::max(width, name.size());
  auto pad = [](std::string text, size_t to) { return text + std::string(to > text.size() ? to - text.size() : 0, ' '); };
  out << "#\n# " << pad("feature", width) << "  " << pad("kind", 5) << "  " << pad("present", 16) << "  values per record\n";
  for (const auto& [name, s] : schema.features) {
    std::string kind = s.KindCount() == 0 ? "none" : s.KindCount() > 1 ? "MIXED" : std::string(ListKindName(*s.Kind()));
    const uint64_t lo = MinValues(s, schema.records);
    std::string counts = std::to_string(lo) + (lo == s.max_values ? "" : "-" + std::to_string(s.max_values));
    std::string present = std::to_string(s.present) + " (" + Percent(s.present, schema.records) + ")";
    out << "# " << pad(name, width) << "  " << pad(kind, 5) << "  " << pad(present, 16) << "  " << counts << '\n';
  }
  out << "#\n";
}

void PrintFeaturesBlock(const Schema& schema, std::ostream& out) {
  if (schema.features.empty()) {
    out << "# no features found\nfeatures: {}\n";
    return;
  }
  struct Line {
    std::string key, spec, why;
  };
  std::vector<Line> lines;
  size_t key_width = 0, spec_width = 0;
  for (const auto& [name, s] : schema.features) {
    Line line{YamlKey(name) + ":", "", ""};
    if (name.empty()) line.why = "left out: a job config does not accept an empty feature name";
    else line.spec = SpecFor(s, schema.records, &line.why);
    key_width = std::max(key_width, line.key.size());
    if (!line.why.empty()) spec_width = std::max(spec_width, line.spec.size());  // aligns the comments
    lines.push_back(std::move(line));
  }
  out << "features:\n";
  for (const Line& line : lines) {
    if (line.spec.empty()) {
      out << "  # " << line.key << " " << line.why << '\n';
      continue;
    }
    out << "  " << line.key << std::string(key_width + 1 - line.key.size(), ' ') << line.spec;
    if (!line.why.empty()) out << std::string(spec_width - line.spec.size(), ' ') << "  # " << line.why;
    out << '\n';
  }
}

Json SchemaJson(const Schema& schema, size_t files) {
  Json features = Json::array();
  for (const auto& [name, s] : schema.features) {
    Json kinds = Json::object();
    for (uint32_t k = 1; k <= 3; ++k) {
      if (s.kinds[k].records > 0) kinds[std::string(ListKindName(static_cast<ListKind>(k)))] = s.kinds[k].records;
    }
    std::string why;
    const std::string spec = name.empty() ? "" : SpecFor(s, schema.records, &why);
    Json type = spec.empty() ? Json(nullptr) : Json(IsFixed(s, schema.records) ? "fixed" : "varlen");
    Json feature = {{"name", name}, {"kinds", std::move(kinds)}, {"present", s.present},
                    {"min_values", MinValues(s, schema.records)}, {"max_values", s.max_values}, {"type", std::move(type)}};
    if (spec.empty()) feature["problem"] = why;
    if (!spec.empty()) feature["dtype"] = DTypeFor(*s.Kind());
    if (!spec.empty() && IsFixed(s, schema.records)) {
      feature["shape"] = s.min_values == 1 ? Json::array() : Json::array({s.min_values});
    }
    features.push_back(std::move(feature));
  }
  return {{"files", files}, {"records", schema.records}, {"problems", schema.problems}, {"features", std::move(features)}};
}

int RunSchema(const InspectOptions& options, std::ostream& out, std::ostream& err) {
  Schema schema;
  ExampleFeatures features;
  for (const std::string& file : options.files) {
    auto on_record = [&](const Record& record) {
      if (DecodeRecord(file, record, &features, err)) AddToSchema(file, record, features, &schema);
      else ++schema.problems;
    };
    schema.problems += ReadRecords(file, options, on_record, [&](const ReadError& e) { ReportReadError(e, err); }).problems;
  }
  uint64_t mixed = 0;
  for (const auto& [name, s] : schema.features) {
    if (s.KindCount() > 1) {
      err << "schema: feature '" << name << "' has two list kinds: " << KindsText(s)
          << "; no spec parses both, so it is left out of the features block\n";
      ++mixed;
    }
  }
  if (options.json) {
    out << Dump(SchemaJson(schema, options.files.size())) << '\n';
  } else {
    PrintSchemaTable(schema, options.files.size(), out);
    PrintFeaturesBlock(schema, out);
  }
  return ExitFor(schema.problems + mixed);
}

}  // namespace

size_t FeatureValues::size() const {
  if (!kind) return 0;
  switch (*kind) {
    case ListKind::kBytes: return bytes_values.size();
    case ListKind::kFloat: return float_values.size();
    case ListKind::kInt64: return int64_values.size();
  }
  return 0;
}

bool DecodeExample(std::span<const uint8_t> example, ExampleFeatures* out, std::string* error) {
  std::map<std::string, Cursor> raw;
  if (!CollectFeatures({example.data(), example.data() + example.size()}, &raw, error)) return false;
  out->clear();
  for (const auto& [key, feature] : raw) {
    if (std::string why = DecodeFeature(feature, &(*out)[key]); !why.empty()) {
      *error = "key '" + key + "': malformed Feature: " + why;
      return false;
    }
  }
  return true;
}

std::string Base64Encode(std::span<const uint8_t> bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = uint32_t{bytes[i]} << 16 | uint32_t{bytes[i + 1]} << 8 | bytes[i + 2];
    for (int shift = 18; shift >= 0; shift -= 6) out += kAlphabet[(v >> shift) & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    const uint32_t v = uint32_t{bytes[i]} << 16 | (rest == 2 ? uint32_t{bytes[i + 1]} << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

int RunInspect(const InspectOptions& options, std::ostream& out, std::ostream& err) {
  switch (options.mode) {
    case InspectMode::kRecords: return RunRecords(options, out, err);
    case InspectMode::kCount: return RunCount(options, out, err);
    case InspectMode::kVerify: return RunVerify(options, out);
    case InspectMode::kSchema: return RunSchema(options, out, err);
  }
  return kExitUsage;
}

}  // namespace ringfeed
