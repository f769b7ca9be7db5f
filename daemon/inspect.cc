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
//                      "-inf"; bytes are standard padded base64, or with --bytes text the value
//                      itself where it is valid UTF-8 and {"base64": "..."} where not.
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
// The Example decoding lists every (key, kind, values): inspect has no spec, so it cannot use
// ExampleParser, which only decodes the keys of one. It uses the same wire walk
// (format/example_wire.h), so both read a record the same way; tests compare them.
#include "daemon/inspect.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "daemon/json_values.h"
#include "format/example_wire.h"
#include "format/utf8.h"

namespace ringfeed {
namespace {

using Json = nlohmann::ordered_json;  // keeps "file", "index", "offset", "features" in that order

// ---------------------------------------------------------------------------------------------
// Decoding one Feature (the wire walk is format/example_wire.h, shared with ExampleParser)

// The values of the list that counts (protobuf oneof + merge rules, as in ExampleParser).
// Returns "" or what is malformed.
std::string DecodeFeature(const wire::FeatureRef& ref, FeatureValues* out) {
  *out = FeatureValues{};
  wire::ListRun run;
  if (!wire::FindListRun(ref, &run)) return "bad field in Feature";
  if (run.kind == 0) return "";  // no list set
  const auto kind = static_cast<ListKind>(run.kind);
  out->kind = kind;
  const bool ok = wire::ForEachList(run, [&](const uint8_t* b, const uint8_t* e) {
    switch (kind) {
      case ListKind::kFloat:
        return wire::VisitFloatList(b, e, [&](const uint8_t* f, size_t n) {
          const size_t old = out->float_values.size();
          out->float_values.resize(old + n);
          if (n > 0) std::memcpy(out->float_values.data() + old, f, n * 4);
        });
      case ListKind::kInt64:
        return wire::VisitInt64List(b, e, [&](int64_t v) { out->int64_values.push_back(v); });
      case ListKind::kBytes:
        return wire::VisitBytesList(b, e, [&](const uint8_t* v, size_t n) {
          out->bytes_values.emplace_back(reinterpret_cast<const char*>(v), n);
        });
    }
    return false;
  });
  return ok ? "" : "bad " + std::string(ListKindName(kind)) + "_list";
}

}  // namespace

std::string TextForJson(const std::string& bytes) { return EscapeNonUtf8(bytes); }

namespace {

// One line of JSON. Names that are not valid UTF-8 were made so by TextForJson.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

// ---------------------------------------------------------------------------------------------
// Reading files

// The reader's message, with its fixes spelled as this tool's flags: the reader names the job
// config's keys (max_record_bytes, compression:), which are --max-record-bytes and --compression
// here.
std::string ProblemMessage(const ReadError& error) {
  std::string message = error.message;
  const auto respell = [&](const std::string& hint, const std::string& flag) {
    const size_t at = message.find(hint);
    if (at != std::string::npos) message.replace(at, hint.size(), flag);
  };
  if (error.kind == ReadErrorKind::kRecordTooLarge) respell("raise max_record_bytes", "raise --max-record-bytes");
  // "the file looks like gzip: set compression: gzip (or auto)" (TFRecordReader).
  if (error.kind == ReadErrorKind::kDecompression || error.kind == ReadErrorKind::kCorruptedLength) {
    respell("set compression: ", "use --compression ");
  }
  return message;
}

struct FileTotals {
  uint64_t records = 0;   // good records
  uint64_t problems = 0;  // read errors (and, counted by the caller, parse errors)
};

// Reads records 0 .. limit-1 of `file` (all when limit is 0): on_record for each good record
// (with the file's compression as read, for RecordPlace), on_error for each read error; goes on
// after recoverable errors.
FileTotals ReadRecords(const std::string& file, const InspectOptions& options,
                       const std::function<void(const Record&, Compression)>& on_record,
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
        on_record(record, reader.compression());
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
bool DecodeRecord(const std::string& file, const Record& record, Compression compression, ExampleFeatures* features,
                  std::ostream& err) {
  std::string why;
  if (DecodeExample(record.data, features, &why)) return true;
  err << RecordPlace(file, record.index, record.offset, compression) << ": " << why << '\n';
  return false;
}

std::string Plural(uint64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

int ExitFor(uint64_t problems) { return problems == 0 ? kExitOk : kExitDataProblems; }

// ---------------------------------------------------------------------------------------------
// records mode

// Writes one record's JSON line value by value, without building the whole document: a record
// may hold millions of values, and a JSON tree of them would take many times the record's size.
// The text is what nlohmann would print for the same object (keys sorted, no spaces).
void WriteRecordLine(std::ostream& out, const std::string& file, const Record& record, const ExampleFeatures& features,
                     BytesFormat bytes) {
  std::map<std::string, const FeatureValues*> by_name;  // sorted by the printed key
  for (const auto& [name, values] : features) by_name[TextForJson(name)] = &values;
  out << "{\"file\":" << Dump(Json(TextForJson(file))) << ",\"index\":" << record.index
      << ",\"offset\":" << record.offset << ",\"features\":{";
  const char* feature_separator = "";
  for (const auto& [name, feature] : by_name) {
    out << std::exchange(feature_separator, ",") << Dump(Json(name)) << ":{\"kind\":"
        << (feature->kind ? "\"" + std::string(ListKindName(*feature->kind)) + "\"" : std::string("null"))
        << ",\"values\":[";
    const char* separator = "";
    if (feature->kind == ListKind::kInt64) {
      for (int64_t v : feature->int64_values) out << std::exchange(separator, ",") << v;
    } else if (feature->kind == ListKind::kFloat) {
      for (float v : feature->float_values) out << std::exchange(separator, ",") << Dump(Float32Json(v));
    } else if (feature->kind == ListKind::kBytes) {
      for (const std::string& v : feature->bytes_values) {
        out << std::exchange(separator, ",") << Dump(BytesJson(v, bytes));
      }
    }
    out << "]}";
  }
  out << "}}\n";
}

int RunRecords(const InspectOptions& options, std::ostream& out, std::ostream& err) {
  uint64_t problems = 0;
  ExampleFeatures features;
  for (const std::string& file : options.files) {
    auto on_record = [&](const Record& record, Compression compression) {
      if (!DecodeRecord(file, record, compression, &features, err)) {
        ++problems;
        return;
      }
      WriteRecordLine(out, file, record, features, options.bytes);
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
    FileTotals t = ReadRecords(file, options, [](const Record&, Compression) {},
                               [&](const ReadError& e) { ReportReadError(e, err); });
    per_file.push_back(t);
    total.records += t.records;
    total.problems += t.problems;
  }
  if (options.json) {
    Json files = Json::array();
    for (size_t i = 0; i < per_file.size(); ++i) {
      files.push_back({{"file", TextForJson(options.files[i])}, {"records", per_file[i].records}, {"problems", per_file[i].problems}});
    }
    Json doc = {{"files", std::move(files)}, {"records", total.records}, {"problems", total.problems}};
    if (options.limit != 0) doc["limit"] = options.limit;  // the counts stop there: say so
    out << Dump(doc) << '\n';
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
  row(total.records,
      "total (" + Plural(per_file.size(), "file") +
          (options.limit != 0 ? "; --limit " + std::to_string(options.limit) + ": at most that many of each file" : "") +
          ")",
      total.problems);
  return ExitFor(total.problems);
}

// ---------------------------------------------------------------------------------------------
// verify mode

std::string VerifyLine(const ReadError& error) {
  std::string line = ProblemMessage(error);
  if (!error.recoverable && error.kind != ReadErrorKind::kTruncatedRecord && error.kind != ReadErrorKind::kIo &&
      error.kind != ReadErrorKind::kOutOfFileDescriptors && error.kind != ReadErrorKind::kFileChanged) {
    line += " (the rest of this file cannot be checked)";
  }
  return line;
}

int RunVerify(const InspectOptions& options, std::ostream& out) {
  std::vector<ReadError> problems;
  uint64_t records = 0;
  uint64_t files_with_problems = 0;
  for (const std::string& file : options.files) {
    FileTotals t = ReadRecords(file, options, [](const Record&, Compression) {}, [&](const ReadError& e) {
      problems.push_back(e);
      if (!options.json) out << VerifyLine(e) << '\n';
    });
    records += t.records;
    if (t.problems != 0) ++files_with_problems;
  }
  if (options.json) {
    Json list = Json::array();
    for (const ReadError& e : problems) {
      list.push_back({{"file", TextForJson(e.file)}, {"index", e.record_index}, {"offset", e.offset},
                      {"kind", std::string(ReadErrorKindName(e.kind))}, {"message", TextForJson(ProblemMessage(e))},
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

// JSON text (a dump) with DEL as \u007F, which JSON leaves raw and YAML allows only escaped
// (YAML 1.2 c-printable; the config loader refuses the raw byte, so a config inspect wrote for
// a name with DEL was refused: helper-149). \u007F reads back as DEL in JSON and YAML alike.
std::string EscapeDel(std::string json_text) {
  for (size_t at = json_text.find('\x7f'); at != std::string::npos; at = json_text.find('\x7f', at + 6)) {
    json_text.replace(at, 1, "\\u007F");
  }
  return json_text;
}

// A feature name for a one-line comment: as is when it is plain printable text, else quoted
// with escapes (so a newline in a key cannot break the YAML around it).
std::string DisplayName(const std::string& name) {
  const bool printable = std::all_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
  });
  if (printable && TextForJson(name) == name) return name;
  return EscapeDel(Json(TextForJson(name)).dump());
}

// A feature name as a YAML mapping key: plain when unambiguous, else a double-quoted (JSON)
// string, which YAML reads back to the same name. Non-ASCII text stays as UTF-8: JSON's \u
// escapes would write a character beyond U+FFFF as a surrogate pair, which YAML rejects.
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
  return EscapeDel(Json(name).dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace));
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
  const bool same_count = s.present > 0 && s.min_present == s.max_values;
  // Missing: no key, or a key with no value list (TFX writes those); a default fills them.
  // An empty list is not missing: a FixedLen feature rejects it, default or not (as TF does).
  const uint64_t missing = records - s.with_list, empty = s.with_list - s.present;
  if (missing + empty > 0) {
    std::string text = missing > 0 ? "missing in " + std::to_string(missing) : "";
    if (empty > 0) text += (missing > 0 ? " and " : "") + std::string("an empty list in ") + std::to_string(empty);
    text += " of " + std::to_string(records) + " records";
    // Always the same number of values when present: fixed with a default would do too.
    if (same_count && empty == 0) text += " (or type: fixed with a default:, which fills those)";
    reasons.push_back(text);
  }
  if (s.present > 0 && !same_count) {
    reasons.push_back(std::to_string(s.min_present) + " to " + std::to_string(s.max_values) + " values when present");
  }
  *why = "";
  for (const std::string& r : reasons) *why += (why->empty() ? "" : "; ") + r;
  return "{type: varlen, dtype: " + dtype + "}";
}

void PrintSchemaTable(const Schema& schema, size_t files, std::ostream& out) {
  out << "# ringfeedctl inspect --schema: " << Plural(schema.records, "record") << " in " << Plural(files, "file") << '\n';
  if (schema.problems != 0) {
    out << "# " << Plural(schema.problems, "problem") << " reading or decoding (see stderr): what could not be read "
        << "is not counted\n";
  }
  size_t width = 7;
  for (const auto& [name, s] : schema.features) width = std::max(width, DisplayName(name).size());
  auto pad = [](std::string text, size_t to) { return text + std::string(to > text.size() ? to - text.size() : 0, ' '); };
  out << "#\n# " << pad("feature", width) << "  " << pad("kind", 5) << "  " << pad("present", 16) << "  values per record\n";
  for (const auto& [name, s] : schema.features) {
    std::string kind = s.KindCount() == 0 ? "none" : s.KindCount() > 1 ? "MIXED" : std::string(ListKindName(*s.Kind()));
    const uint64_t lo = MinValues(s, schema.records);
    std::string counts = std::to_string(lo) + (lo == s.max_values ? "" : "-" + std::to_string(s.max_values));
    std::string present = std::to_string(s.present) + " (" + Percent(s.present, schema.records) + ")";
    out << "# " << pad(DisplayName(name), width) << "  " << pad(kind, 5) << "  " << pad(present, 16) << "  " << counts << '\n';
  }
  out << "#\n";
}

// The ring's schema limits (config/job_config.cc checks them; shm/ring_layout.h).
constexpr size_t kMaxSchemaNameBytes = 127;
constexpr size_t kMaxSchemaFeatures = 256;

struct FeaturesBlock {
  size_t specs = 0;       // features given a spec
  size_t over_limit = 0;  // features left out because a job holds at most kMaxSchemaFeatures
};
FeaturesBlock PrintFeaturesBlock(const Schema& schema, std::ostream& out) {
  if (schema.features.empty()) {
    out << "# no features found\nfeatures: {}\n";
    return {};
  }
  struct Line {
    std::string key, spec, why;
  };
  std::vector<Line> lines;
  size_t key_width = 0, spec_width = 0;
  size_t specs = 0;  // features given a spec so far
  size_t over_limit = 0;
  for (const auto& [name, s] : schema.features) {
    Line line{YamlKey(name) + ":", "", ""};
    if (name.empty()) line.why = "left out: a job config does not accept an empty feature name";
    else if (!IsUtf8(name)) {
      line.key = DisplayName(name) + ":";
      line.why = "left out: the name is not valid UTF-8, which a YAML config cannot hold";
    } else if (name.find('\0') != std::string::npos) {
      line.key = DisplayName(name) + ":";
      line.why = "left out: the name has a NUL byte, which the ring's schema cannot hold";
    } else if (name.size() > kMaxSchemaNameBytes) {
      line.key = DisplayName(name).substr(0, 40) + "...:";
      line.why = "left out: the name has " + std::to_string(name.size()) + " bytes; the ring holds names of at most " +
                 std::to_string(kMaxSchemaNameBytes);
    } else if (specs >= kMaxSchemaFeatures) {
      line.why = "left out: a job has at most " + std::to_string(kMaxSchemaFeatures) + " features";
      ++over_limit;
    } else {
      line.spec = SpecFor(s, schema.records, &line.why);
    }
    if (!line.spec.empty()) ++specs;
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
  return {.specs = specs, .over_limit = over_limit};
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
  uint64_t with_feature_lists = 0;
  for (const std::string& file : options.files) {
    auto on_record = [&](const Record& record, Compression compression) {
      if (DecodeRecord(file, record, compression, &features, err)) AddToSchema(file, record, features, &schema);
      else ++schema.problems;
      with_feature_lists += wire::HasFeatureLists(record.data);
    };
    schema.problems += ReadRecords(file, options, on_record, [&](const ReadError& e) { ReportReadError(e, err); }).problems;
  }
  if (with_feature_lists > 0) {
    err << "schema: " << with_feature_lists << " of " << schema.records
        << " records also hold feature lists (a tf.train.SequenceExample's feature_lists): ringfeed reads "
           "tf.train.Example, so the features block below has only their context features; the feature lists "
           "are not read\n";
  }
  uint64_t block_problems = 0;  // mixed list kinds, an empty block
  for (const auto& [name, s] : schema.features) {
    if (s.KindCount() > 1) {
      err << "schema: feature '" << name << "' has two list kinds: " << KindsText(s)
          << "; no spec parses both, so it is left out of the features block\n";
      ++block_problems;
    }
  }
  if (options.json) {
    out << Dump(SchemaJson(schema, options.files.size())) << '\n';
    if (schema.features.empty()) {  // as the text mode says it (a features block needs one)
      err << "schema: no feature to propose: the " << schema.records
          << " records read hold no features (empty files, or SequenceExamples with no context features)\n";
      ++block_problems;
    }
  } else {
    PrintSchemaTable(schema, options.files.size(), out);
    const FeaturesBlock block = PrintFeaturesBlock(schema, out);
    if (block.over_limit > 0) {
      err << "schema: " << block.over_limit << " more features than a job may hold (at most " << kMaxSchemaFeatures
          << "): the features block has the first " << kMaxSchemaFeatures
          << " in name order and lists the others as comments; keep the ones to train on\n";
    }
    if (block.specs == 0) {
      // An empty block is no config (check refuses it): a problem, not a proposal (helper-149).
      err << "schema: no feature to propose: "
          << (schema.features.empty() ? "the " + std::to_string(schema.records) +
                                            " records read hold no features (empty files, or SequenceExamples with "
                                            "no context features)"
                                      : std::string("every feature is left out (see the comments)"))
          << "; a job config needs at least one\n";
      ++block_problems;
    }
  }
  return ExitFor(schema.problems + block_problems);
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
  std::map<std::string, wire::FeatureRef> raw;  // sorted by key; a later duplicate wins
  std::string why;
  const bool well_formed = wire::ForEachFeature(
      example,
      [&](const uint8_t* key, size_t key_size, const wire::FeatureRef& feature) {
        raw[std::string(reinterpret_cast<const char*>(key), key_size)] = feature;
      },
      &why);
  if (!well_formed) {
    *error = "malformed Example: " + why;
    return false;
  }
  out->clear();
  for (const auto& [key, feature] : raw) {
    if (std::string bad = DecodeFeature(feature, &(*out)[key]); !bad.empty()) {
      *error = "key " + QuotedName(key) + ": malformed Feature: " + bad;
      return false;
    }
  }
  return true;
}

int RunInspect(const InspectOptions& options, std::ostream& out, std::ostream& err) {
  // A directory (TFX's Split-train, say) has no records of its own: said before anything is
  // read, with the pattern that names its files, and no empty report (an empty features:
  // block pasted into a config would not do).
  for (const std::string& path : options.files) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      const std::string base = path.back() == '/' ? path : path + "/";
      err << "ringfeedctl inspect: " << path << " is a directory: inspect reads TFRecord files; name its files, e.g. "
          << base << "* (the shell expands it)\n";
      return kExitUsage;
    }
    // A pattern the shell passed on as it was: it matched no file (said as such, not as a file
    // that cannot be opened, and before an empty report).
    if (path.find_first_of("*?[") != std::string::npos && !std::filesystem::exists(path, ec)) {
      err << "ringfeedctl inspect: no file matches " << path
          << " (the shell passes a pattern that matches nothing on as it is); check the directory and the "
             "extension (.tfrecord, .tfrecord.gz, ...)\n";
      return kExitDataProblems;
    }
  }
  switch (options.mode) {
    case InspectMode::kRecords: return RunRecords(options, out, err);
    case InspectMode::kCount: return RunCount(options, out, err);
    case InspectMode::kVerify: return RunVerify(options, out);
    case InspectMode::kSchema: return RunSchema(options, out, err);
  }
  return kExitUsage;
}

}  // namespace ringfeed
