// JobConfig loading: YAML text -> yaml-cpp node tree -> validated JobConfig.
//
// Design: the node tree is walked once, top-down, by small typed readers (ReadInt, ReadSize,
// ReadBool, ...) that each know the dotted key path of the value they read and the node's Mark,
// so every failure becomes a ConfigError "<file>:<line>:<column>: <key.path>: <problem>" at the
// exact spot. Every mapping is checked against its list of known keys first (unknown keys and
// duplicates are errors; yaml-cpp 0.7 keeps duplicate keys as separate pairs, so we can see them).
// `${VAR}` / `${VAR:-default}` substitution happens in ScalarText(), the single place every scalar
// value passes through, and never on keys. yaml-cpp's own conversions (as<int>, as<bool>) are not
// used: they accept yes/no/on/off, hex and octal, and report no position.
//
// Invariant: a JobConfig that leaves this file satisfies every rule in docs/config.md; consumers
// (ringfeedd, ringfeedctl, the tuner) do not re-validate.
#include "config/job_config.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>
#include <type_traits>
#include <utility>

#include "format/utf8.h"
#include "shm/names.h"

namespace ringfeed {
namespace {

// Limits of the schema (docs/config.md).
constexpr int64_t kMaxBatchSize = int64_t{1} << 24;
constexpr int kFifoWaitMs = 10000;  // a config FIFO nothing writes to: an error after this long
constexpr uint64_t kMinRecordBytes = 16;                  // the TFRecord frame alone is 16 bytes
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 40;
constexpr int64_t kMaxParallelism = 65536;  // cycle_length, readers, workers, prefetch
constexpr int64_t kMaxFeatureElements = int64_t{1} << 40;  // prod(shape) of one fixed feature
constexpr int64_t kMinRingSlots = 2;                   // one being filled while one is read
constexpr int64_t kMaxRingSlots = 256;                 // shm::kMaxSlots
constexpr size_t kMaxFeatureCount = 256;               // shm::kMaxFeatures: the superblock's schema
constexpr size_t kMaxFeatureNameBytes = 127;           // shm::kMaxNameBytes - 1 (NUL-terminated)

}  // namespace

namespace {
// `s` without the characters InvisibleAt finds, and without leading and trailing spaces.
std::string WithoutInvisible(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    size_t length = 0;
    if (static_cast<unsigned char>(s[i]) > 0x7F && InvisibleAt(s, i, &length)) {
      i += length - 1;
    } else {
      out += s[i];
    }
  }
  // Then without the plain spaces around (a no-break space typed before a space, say).
  const size_t first = out.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  return out.substr(first, out.find_last_not_of(' ') - first + 1);
}
}  // namespace

std::string Escaped(std::string_view s, bool ascii_only) { return EscapeForMessage(s, ascii_only); }

namespace {

// Bytes that are not printable ASCII as \xHH.
std::string Printable(const std::string& s) { return Escaped(s, /*ascii_only=*/true); }
constexpr size_t kMaxShapeRank = 8;                    // shm::kMaxRank
constexpr uint64_t kMinSlotBytes = uint64_t{4} << 10;  // one page
constexpr uint64_t kMaxSlotBytes = uint64_t{64} << 30;
constexpr int64_t kMaxRanks = 64;                      // shm::kMaxQueues
constexpr size_t kMaxGroupNameLength = 32;             // groupadd's limit
constexpr size_t kMaxSuggestionDistance = 2;

constexpr std::string_view kTopKeys[] = {"job", "source", "features", "batch", "shuffle",
                                         "epochs", "pipeline", "deterministic", "shard", "ring",
                                         "consumers", "permissions", "log_level"};
constexpr std::string_view kSourceKeys[] = {"files", "compression", "on_error",
                                            "max_record_bytes"};
constexpr std::string_view kFeatureKeys[] = {"type", "dtype", "shape", "default", "decode"};
constexpr std::string_view kBatchKeys[] = {"size", "drop_remainder"};
constexpr std::string_view kShuffleKeys[] = {"files", "buffer", "seed"};
constexpr std::string_view kPipelineKeys[] = {"cycle_length", "readers",  "read_ahead",    "reads_per_file", "hedged_reads",
                                              "workers",      "prefetch", "memory_budget", "cpu_budget"};
constexpr int64_t kMaxReadsPerFile = 64;  // io_uring queue depth per open file
constexpr std::string_view kShardKeys[] = {"index", "count"};
constexpr std::string_view kRingKeys[] = {"slots", "slot_bytes"};
constexpr std::string_view kConsumersKeys[] = {"mode", "count"};
constexpr std::string_view kPermissionsKeys[] = {"group"};

constexpr std::string_view kCompressionWords[] = {"auto", "none", "gzip", "zlib"};
constexpr std::string_view kOnErrorWords[] = {"fail", "skip"};
constexpr std::string_view kFeatureTypeWords[] = {"fixed", "varlen"};
constexpr std::string_view kDecodeWords[] = {"raw"};
// In the order of DeliveryMode and LogLevel.
constexpr std::string_view kDeliveryModeWords[] = {"shared", "ranks"};
constexpr std::string_view kLogLevelWords[] = {"trace", "debug", "info", "warn", "error", "off"};
constexpr std::string_view kDTypeWords[] = {"int64", "float32", "bytes", "uint8", "int8",
                                            "uint16", "int16", "int32", "uint32", "float64"};

// "; sizes are whole numbers of their unit: 1.5GiB is 1536MiB" for a size with a fraction that
// a smaller unit of the same kind writes whole, else "".
std::string WholeSizeHint(const std::string& text) {
  struct Unit {
    std::string_view name;
    uint64_t bytes;
  };
  static constexpr Unit kBinary[] = {
      {"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}, {"B", 1}};
  static constexpr Unit kDecimal[] = {
      {"TB", 1000000000000ull}, {"GB", 1000000000ull}, {"MB", 1000000ull}, {"KB", 1000ull}, {"B", 1}};
  for (const auto* units : {kBinary, kDecimal}) {
    for (size_t u = 0; u + 1 < 5; ++u) {
      const std::string_view unit = units[u].name;
      if (text.size() <= unit.size() || text.compare(text.size() - unit.size(), unit.size(), unit) != 0) continue;
      std::string number = text.substr(0, text.size() - unit.size());
      while (!number.empty() && number.back() == ' ') number.pop_back();  // "1.5 GiB"
      const size_t dot = number.find('.');
      if (dot == std::string::npos || dot == 0 || dot + 1 == number.size() || number.size() > 18) return "";
      uint64_t mantissa = 0, scale = 1;  // the number is mantissa / scale (at most 17 digits)
      for (size_t i = 0; i < number.size(); ++i) {
        if (i == dot) continue;
        if (number[i] < '0' || number[i] > '9') return "";
        mantissa = mantissa * 10 + static_cast<uint64_t>(number[i] - '0');
        if (i > dot) scale *= 10;
      }
      // Down one unit at a time until the amount is whole there (or overflows: no hint).
      for (size_t smaller = u + 1; smaller < 5; ++smaller) {
        if (__builtin_mul_overflow(mantissa, units[smaller - 1].bytes / units[smaller].bytes, &mantissa)) return "";
        if (mantissa % scale == 0) {
          return "; sizes are whole numbers of their unit: " + text + " is " + std::to_string(mantissa / scale) +
                 std::string(units[smaller].name);
        }
      }
      return "";
    }
  }
  return "";
}

// "; units are case-sensitive: did you mean 64MiB?" for a whole number with a unit spelt in
// another case ("64mib", "64mb"), or "; did you mean 64MiB (2^20 bytes) or 64MB (10^6 bytes)?"
// for one letter ("64M", "64k"; "; did you mean 64MiB?" for "64Mi"); else "".
std::string UnitSpellingHint(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits == text.size()) return "";
  const std::string number = text.substr(0, digits);
  std::string unit = text.substr(digits);
  if (unit[0] == ' ') unit.erase(0, 1);
  std::string lower;
  for (const char c : unit) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr std::string_view kUnits[] = {"B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
  for (const std::string_view u : kUnits) {
    std::string u_lower;
    for (const char c : u) u_lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == u_lower) return "; units are case-sensitive: did you mean " + number + std::string(u) + "?";
  }
  static constexpr std::string_view kPrefixes = "kmgt";
  const bool prefix_only = lower.size() == 1 || (lower.size() == 2 && lower[1] == 'i');
  if (prefix_only && kPrefixes.find(lower[0]) != std::string_view::npos) {
    const int power = static_cast<int>(kPrefixes.find(lower[0])) + 1;
    const char letter = static_cast<char>(std::toupper(static_cast<unsigned char>(lower[0])));
    if (lower.size() == 2) return "; did you mean " + number + letter + "iB?";
    return "; did you mean " + number + letter + "iB (2^" + std::to_string(10 * power) + " bytes) or " + number +
           letter + "B (10^" + std::to_string(3 * power) + " bytes)?";
  }
  return "";
}

constexpr std::string_view kSizeHelp =
    "a byte count with an optional unit B, KB, MB, GB, TB (powers of 1000) or "
    "KiB, MiB, GiB, TiB (powers of 1024), e.g. 256MiB";

template <size_t N>
std::string JoinWords(const std::string_view (&words)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += ", ";
    out += words[i];
  }
  return out;
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), so that both
// "sufle" and "bacth" find their key.

// "; did you mean 'x'?" for the closest word within kMaxSuggestionDistance, else "". A word
// that differs only in case says so first: TensorFlow's own spellings ("GZIP", "ZLIB") are
// uppercase. Words in `present` (keys the mapping has already) are not suggested: `dype`
// beside `type` means `dtype`.
template <size_t N>
std::string Suggestion(std::string_view word, const std::string_view (&words)[N],
                       const std::vector<std::string>& present = {}) {
  const auto taken = [&](std::string_view w) { return std::find(present.begin(), present.end(), w) != present.end(); };
  const auto lower = [](std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  for (std::string_view w : words) {
    if (w != word && !taken(w) && lower(w) == lower(word)) return "; did you mean '" + std::string(w) + "'? (lowercase)";
  }
  size_t best = kMaxSuggestionDistance + 1;
  std::string_view best_word;
  for (std::string_view w : words) {
    if (taken(w)) continue;
    size_t dist = EditDistance(word, w);
    if (dist < best) {
      best = dist;
      best_word = w;
    }
  }
  if (best_word.empty()) return "";
  return "; did you mean '" + std::string(best_word) + "'?";
}

// Suggestion() for a dtype, knowing TensorFlow's spellings first: "tf.int64" and "tf.string"
// (tf.io.FixedLenFeature's dtypes), "string", "float", "int", "double".
std::string DTypeSuggestion(std::string_view word) {
  std::string_view bare = word;
  if (bare.starts_with("tf.")) bare.remove_prefix(3);
  constexpr std::pair<std::string_view, std::string_view> kTensorFlowWords[] = {
      {"string", "bytes"}, {"str", "bytes"}, {"float", "float32"}, {"double", "float64"}, {"int", "int64"}};
  for (const auto& [tf, ours] : kTensorFlowWords) {
    if (bare == tf) return "; did you mean '" + std::string(ours) + "'?";
  }
  for (std::string_view w : kDTypeWords) {
    if (bare == w) return "; did you mean '" + std::string(w) + "'? (without 'tf.')";
  }
  return Suggestion(word, kDTypeWords);
}

// `s` in quotes, control characters as \xHH, UTF-8 as written.
std::string Quote(std::string_view s) { return "'" + Escaped(s, /*ascii_only=*/false) + "'"; }

std::string FormatMessage(const std::string& file, int line, int column, const std::string& key,
                          const std::string& problem) {
  std::string out = file;
  if (line > 0) {
    out += ":" + std::to_string(line);
    if (column > 0) out += ":" + std::to_string(column);
  }
  out += ": ";
  if (!key.empty()) out += Escaped(key) + ": ";
  out += problem;
  return out;
}

bool IsVarNameStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool IsVarNameChar(char c) { return IsVarNameStart(c) || (c >= '0' && c <= '9'); }

// A group name as systemd and shadow-utils accept it: a letter or '_', then letters, digits,
// '_', '-' or '.', optionally ending in '$' (Samba machine accounts); at most 32 characters. A
// leading digit is refused so that a name can never be mistaken for a numeric GID.
bool IsValidGroupName(std::string_view name) {
  if (name.empty() || name.size() > kMaxGroupNameLength || !IsVarNameStart(name[0])) return false;
  if (name.back() == '$') name.remove_suffix(1);
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsVarNameChar(c) || c == '-' || c == '.'; });
}

// Decimal integer with an optional sign. nullopt when malformed; `overflow` set when the text is
// a well-formed integer that does not fit.
template <typename T>
std::optional<T> ParseInteger(std::string_view text, bool* overflow) {
  *overflow = false;
  std::string_view digits = text;
  bool negative = false;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    negative = digits[0] == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(),
                                     [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  if (negative && std::is_unsigned_v<T>) {
    // "-0" is zero; any other negative number is out of range of an unsigned type.
    bool zero = std::all_of(digits.begin(), digits.end(), [](char c) { return c == '0'; });
    if (zero) return T{0};
    *overflow = true;
    return std::nullopt;
  }
  // from_chars takes '-' but not '+'; parse from the sign for signed types.
  std::string_view parse = negative ? text.substr(text.size() - digits.size() - 1) : digits;
  T value{};
  auto [ptr, ec] = std::from_chars(parse.data(), parse.data() + parse.size(), value);
  if (ec == std::errc::result_out_of_range) {
    *overflow = true;
    return std::nullopt;
  }
  if (ec != std::errc() || ptr != parse.data() + parse.size()) return std::nullopt;
  return value;
}

// A YAML 1.2 core-schema float or integer: 1, -2.5, 1e-3, .5, .nan, .inf, -.inf (and the
// .NaN/.NAN/.Inf/.INF spellings). nullopt when malformed.
std::optional<double> ParseNumber(std::string_view text) {
  std::string_view body = text;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  // [0-9]* ( . [0-9]* )? ( [eE] [-+]? [0-9]+ )?, with at least one mantissa digit.
  size_t i = 0, mantissa_digits = 0;
  while (i < body.size() && body[i] >= '0' && body[i] <= '9') ++i, ++mantissa_digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && body[i] >= '0' && body[i] <= '9') ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < body.size() && body[i] >= '0' && body[i] <= '9') ++i, ++exp_digits;
    if (exp_digits == 0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  std::string copy(body);  // strtod: from_chars<double> does not accept a leading '.' portably
  errno = 0;
  double value = std::strtod(copy.c_str(), nullptr);
  if (errno == ERANGE && std::isinf(value)) return std::nullopt;  // 1e999 is not a number we take
  return negative ? -value : value;
}

// yaml-cpp reports an unclosed '{' or '[' where it gave up looking for the end, often lines
// after it: "; the '{' at line 7, column 10 is not closed" for the last bracket before `end`
// (a byte offset) that nothing closes, skipping quoted text and comments; "" when none is found.
std::string UnclosedBracket(std::string_view text, size_t end) {
  struct Open {
    char c;
    size_t line, column;
  };
  std::vector<Open> open;
  size_t line = 1, column = 1;
  char quote = 0;
  bool comment = false;
  for (size_t i = 0; i < std::min(end, text.size()); ++i) {
    const char c = text[i];
    const bool line_start = i == 0 || text[i - 1] == '\n';
    if (c == '\n') {
      comment = false;
      ++line;
      column = 1;
      continue;
    }
    if (comment) {
    } else if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (line_start || text[i - 1] == ' ' || text[i - 1] == '\t')) {
      comment = true;
    } else if (c == '{' || c == '[') {
      open.push_back({c, line, column});
    } else if ((c == '}' || c == ']') && !open.empty()) {
      open.pop_back();
    }
    ++column;
  }
  if (open.empty()) return "";
  return "; the '" + std::string(1, open.back().c) + "' at line " + std::to_string(open.back().line) + ", column " +
         std::to_string(open.back().column) + " is not closed";
}

// "; line N indents with a tab: YAML indents with spaces only", for the first line whose
// indentation holds a tab (yaml-cpp's message for it names no tab: "illegal map value"); "" if
// none does.
std::string TabIndentation(const std::string& text) {
  size_t line = 1;
  for (size_t start = 0; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const size_t first = text.find_first_not_of(" \t", start);
    if (first != std::string::npos && first > start && first < end &&
        text.find('\t', start) < first) {
      return "; line " + std::to_string(line) + " indents with a tab: YAML indents with spaces only";
    }
    start = end + 1;
  }
  return "";
}

// "; its lines end with CR alone (classic Mac OS): ..." when the text has a CR not followed by
// LF (YAML reads a lone CR as a line break, but yaml-cpp does not); "" if none.
std::string LoneCarriageReturn(const std::string& text) {
  for (size_t i = text.find('\r'); i != std::string::npos; i = text.find('\r', i + 1)) {
    if (i + 1 >= text.size() || text[i + 1] != '\n') {
      return "; the file ends lines with CR alone (classic Mac OS), which yaml-cpp does not read as line ends: "
             "convert them to LF (e.g. tr '\\r' '\\n')";
    }
  }
  return "";
}

// Whether `word` is a key of some section of the config (a feature's name is not: any word).
template <size_t N>
bool In(std::string_view word, const std::string_view (&words)[N]) {
  return std::find(std::begin(words), std::end(words), word) != std::end(words);
}
bool IsConfigKey(std::string_view word) {
  return In(word, kTopKeys) || In(word, kSourceKeys) || In(word, kFeatureKeys) || In(word, kBatchKeys) ||
         In(word, kShuffleKeys) || In(word, kPipelineKeys) || In(word, kShardKeys) || In(word, kRingKeys) ||
         In(word, kConsumersKeys) || In(word, kPermissionsKeys);
}

// For a syntax error on 0-based line `error_line`: that line or the one before it reads
// "key:value" (a config key, a colon, no space: YAML takes it as one word, and the error
// shows up on the next line). "; line N: 'key:value' needs a space after ':'", else "".
std::string MissingSpace(const std::string& text, int error_line) {
  size_t start = 0;
  for (int line = 0; line <= error_line && start <= text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (line + 1 >= error_line) {
      const std::string_view row(text.data() + start, end - start);
      size_t i = row.find_first_not_of(' ');
      if (i != std::string_view::npos && row.substr(i).starts_with("- ")) i = row.find_first_not_of(' ', i + 2);
      const size_t key = i;
      while (i < row.size() && (std::isalnum(static_cast<unsigned char>(row[i])) || row[i] == '_')) ++i;
      if (key != std::string_view::npos && i > key && IsConfigKey(row.substr(key, i - key)) && i + 1 < row.size() &&
          row[i] == ':' && row[i + 1] != ' ' && row[i + 1] != ':' && row[i + 1] != '/') {
        const std::string word(row.substr(key, std::min(row.find(' ', key), row.size()) - key));
        return "; line " + std::to_string(line + 1) + ": " + Quote(word) + " needs a space after ':' (YAML reads " +
               "it as one word)";
      }
    }
    start = end + 1;
  }
  return "";
}

// One key/value pair of a mapping, with the key's dotted path.
struct Entry {
  std::string key;
  std::string path;
  YAML::Node key_node;
  YAML::Node value;
};

class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  JobConfig Load(const std::string& text) {
    text_ = text;  // for columns in characters (Column); Fail is only called from here
    RefuseControlCharacters(text);
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::DeepRecursion& e) {
      // yaml-cpp's own text here is "bad file".
      Fail(e.mark, "", "YAML nested too deep here (yaml-cpp stops at " + std::to_string(e.depth()) +
                           " levels); no job config needs that many");
    } catch (const YAML::ParserException& e) {
      // `{size: ${X}}`: in a flow collection '{' and '}' end plain scalars, so ${VAR} needs quotes.
      const bool flow_variable = text.find("${") != std::string::npos;
      const bool unclosed = e.msg == YAML::ErrorMsg::END_OF_MAP_FLOW || e.msg == YAML::ErrorMsg::END_OF_SEQ_FLOW;
      Fail(e.mark, "", "YAML syntax error: " + e.msg +
                           (unclosed && e.mark.pos >= 0 ? UnclosedBracket(text, static_cast<size_t>(e.mark.pos)) : "") +
                           (flow_variable ? std::string("; inside { } or [ ], quote a ${VAR}: {size: \"${X}\"}") : "") +
                           MissingSpace(text, e.mark.line) + TabIndentation(text) + LoneCarriageReturn(text));
    } catch (const YAML::Exception& e) {
      Fail(e.mark, "", "YAML error: " + e.msg);
    }
    if (docs.empty() || docs[0].IsNull()) {
      Fail(YAML::Mark::null_mark(), "",
           "the config is empty; expected a mapping with at least the keys job, source and "
           "features");
    }
    if (docs.size() > 1) {
      Fail(docs[1].Mark(), "", "a config file holds one YAML document; found a second one");
    }
    JobConfig config;
    config.path = file_;
    ReadTop(docs[0], &config);
    return config;
  }

 private:
  // "file:line:column: key: " (a ConfigError's prefix), to name a value in errors found later.
  std::string Where(const YAML::Mark& mark, const std::string& key) const {
    const int line = mark.line >= 0 ? mark.line + 1 : 0;
    return FormatMessage(file_, line, line > 0 ? Column(mark) : 0, key, "");
  }

  // The 1-based column of `mark` in characters, as editors count it: yaml-cpp counts bytes, so
  // a line with a multi-byte name before the spot ("специя": ...) was off by one per extra byte.
  // 0 for a mark without a column.
  int Column(const YAML::Mark& mark) const {
    if (mark.column < 0) return 0;
    // yaml-cpp's positions start after a byte order mark.
    const size_t bom = text_.starts_with("\xEF\xBB\xBF") ? 3 : 0;
    if (mark.pos < mark.column || static_cast<size_t>(mark.pos) + bom > text_.size()) return mark.column + 1;
    const size_t end = static_cast<size_t>(mark.pos) + bom;
    const size_t start = end - static_cast<size_t>(mark.column);
    const auto continuation = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; };
    return 1 + static_cast<int>(std::count_if(text_.begin() + static_cast<std::ptrdiff_t>(start),
                                              text_.begin() + static_cast<std::ptrdiff_t>(end),
                                              [&](char c) { return !continuation(c); }));
  }

  // YAML allows no control characters but tab, LF and CR in a file (YAML 1.2 §5.1, c-printable);
  // yaml-cpp reads a NUL as the start of UTF-16 or UTF-32 text and reports garbled values.
  // Escaped ones ("\0" in a double-quoted scalar) are fine here and quoted in messages.
  void RefuseControlCharacters(std::string_view text) {
    const size_t at = std::find_if(text.begin(), text.end(),
                                   [](char c) {
                                     const auto byte = static_cast<unsigned char>(c);
                                     return (byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7F;
                                   }) -
                      text.begin();
    if (at == text.size()) return;
    YAML::Mark mark;
    mark.pos = static_cast<int>(at);
    const size_t newline = text.rfind('\n', at);  // text[at] is no newline
    mark.line = static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    mark.column = static_cast<int>(newline == std::string_view::npos ? at : at - newline - 1);
    // UTF-16 or UTF-32 text: a byte-order mark, or ASCII with NULs from the start.
    const bool wide = text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF") || (text[at] == '\0' && at < 2);
    Fail(mark, "",
         "control character " + Escaped(text.substr(at, 1), /*ascii_only=*/false) +
             " in the file: YAML allows none but tab, LF and CR" +
             (wide ? " (the file looks UTF-16 or UTF-32: save it as UTF-8)" : "") +
             "; write one in a double-quoted string as an escape (\"\\t\", \"\\x01\")");
  }

  [[noreturn]] void Fail(const YAML::Mark& mark, const std::string& key,
                         const std::string& problem) const {
    int line = mark.line >= 0 ? mark.line + 1 : 0;
    int column = line > 0 ? Column(mark) : 0;
    // A value made by ${VAR} substitution: the message shows the result, so say what was written
    // (which variable a launcher set wrong), unless the message quotes it already.
    if (const auto it = substituted_.find(mark.pos);
        !mark.is_null() && it != substituted_.end() && problem.find(it->second) == std::string::npos) {
      throw ConfigError(file_, line, column, key,
                        problem + " (the value is " + Quote(it->second) + " with its variables substituted)");
    }
    throw ConfigError(file_, line, column, key, problem);
  }

  // The mark to blame for a value: its own, or its key's when the value is an implicit null
  // (yaml-cpp places those at the start of the next line).
  static YAML::Mark MarkOf(const Entry& e) {
    return e.value.IsNull() ? e.key_node.Mark() : e.value.Mark();
  }

  static std::string NodeKindName(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Scalar:
        // ${VAR} is substituted into scalar values only (config.md, environment variables).
        return "a scalar " + Quote(n.Scalar()) +
               (n.Scalar().find("${") != std::string::npos
                    ? " (a ${...} variable gives text inside a scalar value, never a list or a mapping: write those "
                      "in the file)"
                    : "");
      case YAML::NodeType::Null: return "nothing (null)";
      case YAML::NodeType::Undefined: return "nothing";
    }
    return "?";
  }

  // Checks that `node` is a mapping whose keys are all in `known` and unique; returns its pairs
  // in file order.
  template <size_t N>
  std::vector<Entry> ReadMap(const YAML::Node& node, const YAML::Mark& mark,
                             const std::string& path, const std::string_view (&known)[N]) {
    if (!node.IsMap()) {
      Fail(mark, path, "expected a mapping with keys " + JoinWords(known) + ", got " +
                           NodeKindName(node) + (node.IsScalar() ? MissingSpaceHint(node.Scalar(), known) : ""));
    }
    std::vector<Entry> entries = ReadPairs(node, path);
    std::vector<std::string> present;
    for (const Entry& e : entries) present.push_back(e.key);
    for (const Entry& e : entries) {
      if (std::find(std::begin(known), std::end(known), e.key) == std::end(known)) {
        const std::string space = MissingSpaceHint(e.key, known);
        if (const std::string visible = WithoutInvisible(e.key); visible != e.key) {
          // A no-break space typed for indentation, a zero-width space or a byte order mark
          // pasted in: the key looks right and is not.
          const bool known_key = std::find(std::begin(known), std::end(known), visible) != std::end(known);
          Fail(e.key_node.Mark(), e.path,
               "unknown key " + Quote(e.key) + ": it holds characters that show as nothing or as a space (\\uXXXX "
               "above), which YAML takes as part of the key; " +
                   (known_key ? "retype it as '" + visible + "' with plain spaces around it"
                              : "retype it with plain spaces; known keys: " + JoinWords(known)));
        }
        Fail(e.key_node.Mark(), e.path,
             "unknown key " + Quote(e.key) + "; known keys: " + JoinWords(known) +
                 (e.key == "<<" ? "; YAML merge keys ('<<: *anchor') are not supported (YAML 1.2 has none): write "
                                  "the keys out (an alias of a whole value, key: *anchor, works)"
                  : !space.empty() ? space
                                   : DottedKeyHint(e.key, known) + Suggestion(e.key, known, present)));
      }
    }
    return entries;
  }

  // "key:value" read as one scalar, where `key` is one of `known`: YAML needs a space after the
  // colon. "; YAML needs a space after ':' (write 'key: value')", else "".
  template <size_t N>
  static std::string MissingSpaceHint(const std::string& text, const std::string_view (&known)[N]) {
    const size_t colon = text.find(':');
    if (colon == std::string::npos || colon + 1 >= text.size() || text[colon + 1] == ' ') return "";
    const std::string key = text.substr(0, colon);
    if (std::find(std::begin(known), std::end(known), key) == std::end(known)) return "";
    return "; YAML needs a space after ':' (write " + Quote(key + ": " + text.substr(colon + 1)) + ")";
  }

  // "; nested keys are written as a mapping: batch: {size: 16}" for "batch.size", where the
  // part before the first '.' is one of `known`; else "".
  template <size_t N>
  static std::string DottedKeyHint(const std::string& key, const std::string_view (&known)[N]) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 >= key.size()) return "";
    const std::string head = key.substr(0, dot);
    if (std::find(std::begin(known), std::end(known), head) == std::end(known)) return "";
    return "; nested keys are written as a mapping, not with a dot: " + head + ": {" + key.substr(dot + 1) + ": ...}";
  }

  // The pairs of a mapping with scalar, unique keys (any key names).
  std::vector<Entry> ReadPairs(const YAML::Node& node, const std::string& path) {
    std::vector<Entry> entries;
    for (const auto& pair : node) {  // `pair` lives for the iteration; it->first would dangle
      const YAML::Node key = pair.first;
      const YAML::Node value = pair.second;
      std::string where = path.empty() ? "" : path + ".";
      if (!key.IsScalar()) {
        Fail(key.Mark(), path,
             "keys must be plain names, got " + NodeKindName(key) +
                 (key.IsNull() ? std::string(": YAML reads an empty key, null and ~ as no name; a feature named "
                                             "null or ~ is written quoted (\"null\": ...)")
                               : std::string()));
      }
      std::string name = key.Scalar();
      for (const Entry& prev : entries) {
        if (prev.key == name) {
          Fail(key.Mark(), where + name,
               "duplicate key " + Quote(name) + " (first given at line " +
                   std::to_string(prev.key_node.Mark().line + 1) + ")");
        }
      }
      entries.push_back(Entry{name, where + name, key, value});
    }
    return entries;
  }

  static const Entry* Find(const std::vector<Entry>& entries, std::string_view key) {
    for (const Entry& e : entries) {
      if (e.key == key) return &e;
    }
    return nullptr;
  }

  // The text of a scalar value after ${VAR} substitution. `expected` completes "expected ...".
  std::string ScalarText(const YAML::Node& node, const YAML::Mark& mark, const std::string& path,
                         const std::string& expected) {
    if (!node.IsScalar()) {
      Fail(mark, path, "expected " + expected + ", got " + NodeKindName(node));
    }
    // "?" plain, "!" quoted: no tag written. An explicit one ("!!float 4") would be ignored: the
    // key's own type decides.
    if (node.Tag() != "?" && node.Tag() != "!") {
      Fail(mark, path, "a YAML tag (" + Quote(node.Tag()) + ") is not read: each key has its own type; write the "
                       "value alone");
    }
    return Substitute(node.Scalar(), mark, path);
  }
  std::string ScalarText(const Entry& e, const std::string& expected) {
    return ScalarText(e.value, MarkOf(e), e.path, expected);
  }

  // Replaces every ${NAME} and ${NAME:-default} in `text` from the environment. Like the shell,
  // the default also applies when NAME is set but empty; without a default, unset and empty are
  // both errors naming NAME.
  std::string Substitute(const std::string& text, const YAML::Mark& mark,
                         const std::string& path) {
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t start = text.find("${", pos);
      if (start == std::string::npos) {
        out.append(text, pos, std::string::npos);
        break;
      }
      out.append(text, pos, start - pos);
      size_t end = text.find('}', start + 2);
      if (end == std::string::npos) {
        Fail(mark, path, "unterminated '${' in " + Quote(text) +
                             "; write ${NAME} or ${NAME:-default}");
      }
      std::string_view inner(text.data() + start + 2, end - start - 2);
      std::string_view name = inner;
      std::optional<std::string_view> fallback;
      if (size_t sep = inner.find(":-"); sep != std::string_view::npos) {
        name = inner.substr(0, sep);
        fallback = inner.substr(sep + 2);
      }
      if (name.empty() || !IsVarNameStart(name[0]) ||
          !std::all_of(name.begin(), name.end(), IsVarNameChar)) {
        Fail(mark, path, "invalid variable reference '${" + std::string(inner) + "}' in " +
                             Quote(text) + "; expected ${NAME} or ${NAME:-default} where NAME is a "
                             "letter or '_' followed by letters, digits or '_'");
      }
      std::string name_str(name);
      const char* value = std::getenv(name_str.c_str());
      if (value != nullptr && *value != '\0') {
        out += value;
      } else if (fallback) {
        out += *fallback;
      } else if (value == nullptr && path.starts_with("shard.")) {
        // A default here would make every node whose launcher did not set it read the same
        // shard without a word (docs/config.md, shard): no default is suggested.
        Fail(mark, path,
             "environment variable " + name_str + " is not set (referenced in " + Quote(text) +
                 "); the job script or launcher sets it on each node (the node's rank and the number of "
                 "nodes: NODE_RANK / NNODES, SLURM_NODEID / SLURM_NNODES under Slurm); a default would make "
                 "every node without it read the same shard");
      } else if (value == nullptr) {
        Fail(mark, path, "environment variable " + name_str + " is not set (referenced in " +
                             Quote(text) + "); set it or write ${" + name_str + ":-default}");
      } else {
        // Set but empty: a launcher that exported NODE_RANK= is as wrong as one that did not
        // export it, and "got ''" further on would not name the variable.
        Fail(mark, path, "environment variable " + name_str + " is set but empty (referenced in " +
                             Quote(text) + "); give it a value, or write ${" + name_str +
                             ":-} where empty is meant");
      }
      pos = end + 1;
    }
    if (out != text) substituted_[mark.pos] = text;
    return out;
  }

  static std::string IntRange(int64_t min, int64_t max) {
    if (max == std::numeric_limits<int64_t>::max()) {
      return "an integer from " + std::to_string(min) + " to 2^63 - 1";
    }
    return "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  }

  int64_t ReadInt(const Entry& e, int64_t min, int64_t max) {
    return ReadIntNode(e.value, MarkOf(e), e.path, min, max, "");
  }

  // For an integer spelt in a way YAML readers disagree on or that hides a typo: a leading
  // zero ("010": octal 8 to YAML 1.1 readers such as PyYAML, 10 to YAML 1.2's) or a signed
  // zero ("-0": likely a digit lost; not for a float, where -0 is a value). The reason, else "".
  static std::string IntegerSpellingProblem(std::string_view text, bool refuse_signed_zero = true) {
    std::string_view digits = text;
    if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return "";
    }
    if (digits.size() > 1 && digits[0] == '0') {
      const std::string_view bare = digits.substr(std::min(digits.find_first_not_of('0'), digits.size() - 1));
      return ": a leading 0 means octal to YAML 1.1 readers (PyYAML reads 010 as 8) and decimal here, so it "
             "is refused; write " + std::string(bare) + " (decimal) without the leading zeros";
    }
    if (refuse_signed_zero && text[0] == '-' && digits == "0") {
      return ": -0 is refused (a digit lost?); write 0 if 0 is meant";
    }
    return "";
  }

  int64_t ReadIntNode(const YAML::Node& node, const YAML::Mark& mark, const std::string& path,
                      int64_t min, int64_t max, const std::string& extra_expected) {
    std::string expected = extra_expected + IntRange(min, max);
    std::string text = ScalarText(node, mark, path, expected);
    if (const std::string problem = IntegerSpellingProblem(text); !problem.empty()) {
      Fail(mark, path, "expected " + expected + ", got " + Quote(text) + problem);
    }
    bool overflow = false;
    std::optional<int64_t> v = ParseInteger<int64_t>(text, &overflow);
    if (!v && !overflow) Fail(mark, path, "expected " + expected + ", got " + Quote(text));
    if (overflow || *v < min || *v > max) {
      Fail(mark, path, "value " + text + " is out of range; expected " + expected);
    }
    return *v;
  }

  uint64_t ReadUInt64(const Entry& e) {
    std::string expected = "an integer from 0 to 18446744073709551615";
    std::string text = ScalarText(e, expected);
    if (const std::string problem = IntegerSpellingProblem(text); !problem.empty()) {
      Fail(MarkOf(e), e.path, "expected " + expected + ", got " + Quote(text) + problem);
    }
    bool overflow = false;
    std::optional<uint64_t> v = ParseInteger<uint64_t>(text, &overflow);
    if (overflow) {
      Fail(MarkOf(e), e.path, "value " + text + " is out of range; expected " + expected);
    }
    if (!v) Fail(MarkOf(e), e.path, "expected " + expected + ", got " + Quote(text));
    return *v;
  }

  bool ReadBool(const Entry& e) {
    std::string text = ScalarText(e, "true or false");
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
    // YAML 1.1's other booleans (yaml.org/type/bool.html): y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF.
    constexpr std::string_view kYaml11[] = {"y",  "Y",  "yes", "Yes", "YES", "n",  "N",   "no",
                                            "No", "NO", "on",  "On",  "ON",  "off", "Off", "OFF"};
    const bool yaml11 = std::find(std::begin(kYaml11), std::end(kYaml11), text) != std::end(kYaml11);
    Fail(MarkOf(e), e.path,
         "expected true or false, got " + Quote(text) +
             (yaml11 ? " (YAML 1.1 read it as a boolean; this config takes only true and false, so that a value "
                       "means the same to every YAML reader)"
                     : ""));
  }

  uint64_t ReadSize(const Entry& e, uint64_t min, uint64_t max, const std::string& extra) {
    std::string text = ScalarText(e, extra + "a size such as 256MiB");
    std::optional<uint64_t> v = ParseSize(text);
    if (!v) {
      Fail(MarkOf(e), e.path,
           "invalid size " + Quote(text) + SizeHint(text) + "; expected " + extra + std::string(kSizeHelp));
    }
    if (*v < min || *v > max) {
      Fail(MarkOf(e), e.path,
           "size " + text + " (" + std::to_string(*v) + " bytes) is out of range; expected from " +
               std::to_string(min) + " to " + std::to_string(max) + " bytes");
    }
    return *v;
  }

  template <size_t N>
  size_t ReadWord(const Entry& e, const std::string_view (&words)[N]) {
    std::string expected = "one of " + JoinWords(words);
    std::string text = ScalarText(e, expected);
    for (size_t i = 0; i < N; ++i) {
      if (text == words[i]) return i;
    }
    // Other programs' names of a word here (spdlog's and syslog's log levels).
    constexpr std::pair<std::string_view, std::string_view> kOtherNames[] = {
        {"warning", "warn"}, {"err", "error"},   {"critical", "error"},
        {"fatal", "error"},  {"none", "off"},    {"information", "info"}};
    std::string lower = text;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const auto& [other, ours] : kOtherNames) {
      if (lower == other && std::find(std::begin(words), std::end(words), ours) != std::end(words)) {
        Fail(MarkOf(e), e.path, "unknown value " + Quote(text) + "; allowed values: " + JoinWords(words) +
                                    "; did you mean '" + std::string(ours) + "'?");
      }
    }
    Fail(MarkOf(e), e.path, "unknown value " + Quote(text) + "; allowed values: " +
                                JoinWords(words) + Suggestion(text, words));
  }

  // `auto` -> nullopt, else an integer in [min, max].
  std::optional<int64_t> ReadAutoInt(const Entry& e, int64_t min, int64_t max) {
    std::string text = ScalarText(e, "auto or " + IntRange(min, max));
    if (text == "auto") return std::nullopt;
    return ReadIntNode(e.value, MarkOf(e), e.path, min, max, "auto or ");
  }

  // --- sections ---

  void ReadTop(const YAML::Node& root, JobConfig* config) {
    std::vector<Entry> top = ReadMap(root, root.Mark(), "", kTopKeys);
    const YAML::Mark root_mark = root.Mark();

    const Entry* job = Find(top, "job");
    if (job == nullptr) Fail(root_mark, "job", "missing required key 'job' (the job's name)");
    config->job = ReadJobName(*job);

    const Entry* source = Find(top, "source");
    if (source == nullptr) {
      Fail(root_mark, "source", "missing required key 'source' (with at least source.files)");
    }
    ReadSource(*source, &config->source);

    const Entry* features = Find(top, "features");
    if (features == nullptr) {
      Fail(root_mark, "features",
           "missing required key 'features' (a mapping of feature name -> spec)");
    }
    ReadFeatures(*features, &config->features);
    for (const auto& [name, mark] : feature_marks_) config->feature_lines[name] = mark.line >= 0 ? mark.line + 1 : 0;

    const Entry* batch = Find(top, "batch");
    if (batch != nullptr) ReadBatch(*batch, &config->batch);
    CheckBatchSize(*config);
    if (const Entry* e = Find(top, "shuffle")) ReadShuffle(*e, &config->shuffle);
    if (const Entry* e = Find(top, "epochs")) {
      config->epochs = ReadInt(*e, 0, std::numeric_limits<int64_t>::max());
    }
    if (const Entry* e = Find(top, "pipeline")) ReadPipeline(*e, &config->pipeline);
    if (const Entry* e = Find(top, "deterministic")) config->deterministic = ReadBool(*e);
    if (const Entry* e = Find(top, "shard")) ReadShard(*e, &config->shard);
    if (const Entry* e = Find(top, "ring")) ReadRing(*e, &config->ring);
    if (const Entry* e = Find(top, "consumers")) ReadConsumers(*e, &config->consumers);
    if (const Entry* e = Find(top, "permissions")) ReadPermissions(*e, &config->permissions);
    if (const Entry* e = Find(top, "log_level")) {
      config->log_level = static_cast<LogLevel>(ReadWord(*e, kLogLevelWords));
    }
  }

  // One batch of a FixedLen feature must stay addressable: batch.size x prod(shape) values
  // and bytes both at most 2^40 (the pipeline's memory budget will bound it further).
  // The error points at batch.size's value when the config gives one (and names batch.size),
  // else at the feature's name (and names its shape: batch.size is the default).
  void CheckBatchSize(const JobConfig& config) {
    const bool batch_given = batch_size_mark_.has_value();
    constexpr uint64_t kMaxBatchValues = uint64_t{1} << 40;
    for (const FeatureSpec& f : config.features) {
      if (f.type != FeatureType::kFixedLen) continue;
      const uint64_t n = static_cast<uint64_t>(f.NumElements());
      const uint64_t rows = static_cast<uint64_t>(config.batch.size);
      const uint64_t size = std::max<uint64_t>(DTypeSize(f.dtype), 1);
      if (n != 0 && rows > kMaxBatchValues / n / size) {
        Fail(batch_given ? *batch_size_mark_ : feature_marks_.at(f.name), batch_given ? "batch.size" : "features." + f.name + ".shape",
             "a batch of " + std::to_string(rows) + (batch_given ? "" : " (the default batch.size)") +
                 " rows of feature '" + f.name + "' (" + std::to_string(n) +
                 " values per row) would exceed 2^40 values or bytes; lower batch.size or the shape");
      }
    }
  }

  std::string ReadJobName(const Entry& e) {
    std::string name = ScalarText(e, "a job name");
    const std::string problem = JobNameProblem(name);
    if (!problem.empty()) Fail(MarkOf(e), e.path, problem);
    return name;
  }

  void ReadSource(const Entry& section, SourceConfig* source) {
    std::vector<Entry> entries = ReadMap(section.value, MarkOf(section), "source", kSourceKeys);
    const Entry* files = Find(entries, "files");
    if (files == nullptr) {
      Fail(MarkOf(section), "source.files",
           "missing required key 'files' (a list of file paths or glob patterns)");
    }
    source->files = ReadFiles(*files, &source->file_origins, &source->files_as_written);
    if (const Entry* e = Find(entries, "compression")) {
      std::string_view word = kCompressionWords[ReadWord(*e, kCompressionWords)];
      source->compression = *ParseCompression(word);
    }
    if (const Entry* e = Find(entries, "on_error")) {
      source->on_error = ReadWord(*e, kOnErrorWords) == 0 ? OnError::kFail : OnError::kSkip;
    }
    if (const Entry* e = Find(entries, "max_record_bytes")) {
      source->max_record_bytes = ReadSize(*e, kMinRecordBytes, kMaxRecordBytes, "");
    }
  }

  std::vector<std::string> ReadFiles(const Entry& e, std::vector<std::string>* origins,
                                     std::vector<std::string>* as_written) {
    const std::string expected = "a file path or glob pattern";
    std::vector<std::string> files;
    if (e.value.IsSequence()) {
      if (e.value.size() == 0) {
        Fail(MarkOf(e), e.path, "the list of files is empty; give at least one path or glob");
      }
      for (size_t i = 0; i < e.value.size(); ++i) {
        const YAML::Node item = e.value[i];
        std::string path = e.path + "[" + std::to_string(i) + "]";
        YAML::Mark mark = item.IsNull() ? e.value.Mark() : item.Mark();
        files.push_back(ScalarText(item, mark, path, expected));
        if (files.back().empty()) Fail(mark, path, "empty file pattern");
        origins->push_back(Where(mark, path));
        as_written->push_back(item.Scalar());
      }
    } else {
      files.push_back(ScalarText(e, "a list of file paths or glob patterns"));
      if (files.back().empty()) Fail(MarkOf(e), e.path, "empty file pattern");
      origins->push_back(Where(MarkOf(e), e.path));
      as_written->push_back(e.value.Scalar());
    }
    return files;
  }

  void ReadFeatures(const Entry& section, FeatureSpecs* features) {
    if (!section.value.IsMap() || section.value.size() == 0) {
      Fail(MarkOf(section), section.path,
           "expected a non-empty mapping of feature name -> spec (e.g. label: {dtype: int64}), "
           "got " + (section.value.IsMap() ? std::string("an empty mapping")
                                            : NodeKindName(section.value)));
    }
    if (section.value.size() > kMaxFeatureCount) {
      Fail(MarkOf(section), section.path,
           std::to_string(section.value.size()) + " features; a job has at most " +
               std::to_string(kMaxFeatureCount) + " (the ring's schema holds that many)");
    }
    for (const Entry& e : ReadPairs(section.value, "features")) {
      feature_marks_[e.key] = e.key_node.Mark();
      if (e.key.empty()) Fail(e.key_node.Mark(), e.path, "a feature name must not be empty");
      // The ring stores names NUL-terminated, and status, dump and the Python client show them
      // as text: "a\0x" would become "a", and bytes that are not UTF-8 would not read back.
      if (e.key.find('\0') != std::string::npos) {
        Fail(e.key_node.Mark(), "features." + Printable(e.key),
             "a feature name must not contain a NUL byte (at byte " + std::to_string(e.key.find('\0')) + ")");
      }
      if (const size_t bad = InvalidUtf8At(e.key); bad != std::string::npos) {
        Fail(e.key_node.Mark(), "features." + Printable(e.key),
             "a feature name must be UTF-8 text; byte " + std::to_string(bad) + " is not (the config file's "
             "encoding? YAML escapes such as \\_ or \\N come out as single bytes here: write the character "
             "itself)");
      }
      if (e.key.size() > kMaxFeatureNameBytes) {
        Fail(e.key_node.Mark(), e.path.substr(0, 60) + "...",
             "a feature name has at most " + std::to_string(kMaxFeatureNameBytes) + " bytes (the ring's limit); this one has " +
                 std::to_string(e.key.size()));
      }
      features->push_back(ReadFeature(e));
    }
  }

  FeatureSpec ReadFeature(const Entry& feature) {
    FeatureSpec spec;
    spec.name = feature.key;
    std::vector<Entry> entries = ReadMap(feature.value, MarkOf(feature), feature.path,
                                         kFeatureKeys);
    const Entry* type = Find(entries, "type");
    const Entry* dtype = Find(entries, "dtype");
    const Entry* shape = Find(entries, "shape");
    const Entry* deflt = Find(entries, "default");
    const Entry* decode = Find(entries, "decode");

    if (type != nullptr) {
      spec.type = ReadWord(*type, kFeatureTypeWords) == 0 ? FeatureType::kFixedLen
                                                          : FeatureType::kVarLen;
    }
    const bool varlen = spec.type == FeatureType::kVarLen;
    if (decode != nullptr) {
      ReadWord(*decode, kDecodeWords);
      if (varlen) {
        Fail(decode->key_node.Mark(), decode->path,
             "'decode: raw' is only allowed with type: fixed (the raw bytes decode to a fixed "
             "shape)");
      }
      spec.decode_raw = true;
    }

    if (dtype == nullptr) {
      Fail(MarkOf(feature), feature.path + ".dtype",
           "missing required key 'dtype' (int64, float32 or bytes)");
    }
    std::string dtype_text = ScalarText(*dtype, "a dtype");
    std::optional<DType> parsed = ParseDType(dtype_text);
    if (!parsed) {
      Fail(MarkOf(*dtype), dtype->path,
           "unknown dtype " + Quote(dtype_text) + "; allowed values: int64, float32, bytes "
           "(with decode: raw also uint8, int8, uint16, int16, int32, uint32, float64)" +
               DTypeSuggestion(dtype_text));
    }
    spec.dtype = *parsed;
    if (spec.decode_raw && spec.dtype == DType::kBytes) {
      Fail(MarkOf(*dtype), dtype->path,
           "dtype 'bytes' cannot be the output of 'decode: raw'; give the numeric type the bytes "
           "hold: uint8, int8, uint16, int16, int32, uint32, int64, float32 or float64");
    }
    if (!spec.decode_raw && spec.dtype != DType::kInt64 && spec.dtype != DType::kFloat32 &&
        spec.dtype != DType::kBytes) {
      Fail(MarkOf(*dtype), dtype->path,
           "dtype " + Quote(dtype_text) + " needs 'decode: raw' (a tf.train.Example holds only "
           "int64, float32 or bytes lists)");
    }

    if (shape != nullptr) {
      if (varlen) {
        Fail(shape->key_node.Mark(), shape->path,
             "'shape' is only allowed with type: fixed; a varlen feature is ragged "
             "(values + row_splits)");
      }
      spec.shape = ReadShape(*shape);
    }

    if (deflt != nullptr) {
      if (varlen) {
        Fail(deflt->key_node.Mark(), deflt->path,
             "'default' is only allowed with type: fixed; a missing varlen feature gives an "
             "empty row");
      }
      if (spec.decode_raw) {
        Fail(deflt->key_node.Mark(), deflt->path,
             "'default' cannot be combined with 'decode: raw'");
      }
      ReadDefault(*deflt, &spec);
    }
    return spec;
  }

  std::vector<int64_t> ReadShape(const Entry& e) {
    if (!e.value.IsSequence()) {
      Fail(MarkOf(e), e.path, "expected a list of dimensions such as [28, 28, 1] ([] for a "
                              "scalar), got " + NodeKindName(e.value));
    }
    if (e.value.size() > kMaxShapeRank) {
      Fail(MarkOf(e), e.path,
           "the shape has " + std::to_string(e.value.size()) + " dimensions; at most " +
               std::to_string(kMaxShapeRank) + " (the ring's limit)");
    }
    std::vector<int64_t> shape;
    for (size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      std::string path = e.path + "[" + std::to_string(i) + "]";
      YAML::Mark mark = item.IsNull() ? e.value.Mark() : item.Mark();
      shape.push_back(ReadIntNode(item, mark, path, 0, kMaxFeatureElements, ""));
    }
    // The dimensions other than 0 too: the ring's checks multiply them in order, so a 0 after
    // them does not save a product beyond the limit.
    int64_t elements = 1;
    for (const int64_t dim : shape) {
      if (dim != 0 && elements > kMaxFeatureElements / dim) {
        Fail(MarkOf(e), e.path,
             "the shape's dimensions multiply to more than " + std::to_string(kMaxFeatureElements) +
                 (std::find(shape.begin(), shape.end(), 0) != shape.end() ? " (leaving its 0 out)" : "") +
                 ", the most elements a feature may have");
      }
      if (dim != 0) elements *= dim;
    }
    return shape;
  }

  void ReadDefault(const Entry& e, FeatureSpec* spec) {
    std::vector<std::pair<YAML::Node, YAML::Mark>> items;
    std::vector<std::string> paths;
    std::string shape = "[";
    for (size_t i = 0; i < spec->shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(spec->shape[i]);
    shape += "]";
    if (spec->NumElements() == 0) {
      // TensorFlow takes a default of no elements as none: a record without the feature is an
      // error there. Refused here rather than read differently.
      Fail(MarkOf(e), e.path,
           "shape " + shape + " holds no values, so a default has nothing to fill (TensorFlow treats it as no "
           "default: a record without the feature is an error); remove default");
    }
    if (e.value.IsSequence()) {
      int64_t want = spec->NumElements();
      for (size_t i = 0; i < e.value.size(); ++i) {
        if (e.value[i].IsSequence()) {
          Fail(e.value[i].Mark(), e.path + "[" + std::to_string(i) + "]",
               "default is a nested list; give the " + std::to_string(want) + " values of shape " + shape +
                   " as one flat list in row-major order (or a single scalar to fill the whole shape)");
        }
      }
      if (static_cast<int64_t>(e.value.size()) != want) {
        Fail(MarkOf(e), e.path,
             "default has " + std::to_string(e.value.size()) +
                 (e.value.size() == 1 ? " value" : " values") + " but shape " + shape +
                 " needs " + std::to_string(want) +
                 " (or give a single scalar to fill the whole shape)");
      }
      for (size_t i = 0; i < e.value.size(); ++i) {
        const YAML::Node item = e.value[i];
        items.emplace_back(item, item.IsNull() ? e.value.Mark() : item.Mark());
        paths.push_back(e.path + "[" + std::to_string(i) + "]");
      }
    } else {
      items.emplace_back(e.value, MarkOf(e));
      paths.push_back(e.path);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& [node, mark] = items[i];
      const std::string& path = paths[i];
      switch (spec->dtype) {
        case DType::kInt64:
          spec->default_int64.push_back(ReadIntNode(node, mark, path,
                                                    std::numeric_limits<int64_t>::min(),
                                                    std::numeric_limits<int64_t>::max(), ""));
          break;
        case DType::kFloat32: {
          std::string text = ScalarText(node, mark, path, "a number");
          const std::string problem = IntegerSpellingProblem(text, /*refuse_signed_zero=*/false);
          if (!problem.empty()) Fail(mark, path, "expected a number for dtype float32, got " + Quote(text) + problem);
          std::optional<double> v = ParseNumber(text);
          if (!v) Fail(mark, path, "expected a number for dtype float32, got " + Quote(text));
          // Rounded to double, then to float32, as TensorFlow takes a default (a Python float
          // given to FixedLenFeature's default_value) and NumPy's float32("...") does: text with
          // 18 or more digits near a float32 halfway point rounds differently straight to float32
          // (1.000000059604644775390625000001: 1.0 here and in TF, 1.0000001 by strtof).
          // 3.4028235e38, what dump prints for the largest float32, rounds to it; a finite value
          // that rounds to infinity is out of range (TF would take it as inf). NaN and
          // infinities as they are.
          const float value = static_cast<float>(*v);
          if (std::isfinite(*v) && std::isinf(value)) Fail(mark, path, "value " + text + " is out of range of float32");
          spec->default_float.push_back(value);
          break;
        }
        case DType::kBytes:
          spec->default_bytes.push_back(ScalarText(node, mark, path, "a string"));
          break;
        default:
          break;  // unreachable: decode_raw dtypes take no default (checked above)
      }
    }
    spec->has_default = true;
  }

  void ReadBatch(const Entry& section, BatchConfig* batch) {
    std::vector<Entry> entries = ReadMap(section.value, MarkOf(section), "batch", kBatchKeys);
    if (const Entry* e = Find(entries, "size")) {
      batch->size = ReadInt(*e, 1, kMaxBatchSize);
      batch_size_mark_ = MarkOf(*e);
    }
    if (const Entry* e = Find(entries, "drop_remainder")) batch->drop_remainder = ReadBool(*e);
  }

  void ReadShuffle(const Entry& section, ShuffleConfig* shuffle) {
    std::vector<Entry> entries =
        ReadMap(section.value, MarkOf(section), "shuffle", kShuffleKeys);
    if (const Entry* e = Find(entries, "files")) shuffle->files = ReadBool(*e);
    if (const Entry* e = Find(entries, "buffer")) {
      shuffle->buffer = ReadInt(*e, 0, std::numeric_limits<int64_t>::max());
    }
    if (const Entry* e = Find(entries, "seed")) shuffle->seed = ReadUInt64(*e);
  }

  void ReadPipeline(const Entry& section, PipelineConfig* pipeline) {
    std::vector<Entry> entries =
        ReadMap(section.value, MarkOf(section), "pipeline", kPipelineKeys);
    if (const Entry* e = Find(entries, "cycle_length")) {
      pipeline->cycle_length = ReadInt(*e, 1, kMaxParallelism);
    }
    if (const Entry* e = Find(entries, "readers")) {
      pipeline->readers = ReadAutoInt(*e, 1, kMaxParallelism);
    }
    if (const Entry* e = Find(entries, "read_ahead")) {
      std::string text = ScalarText(*e, "auto or a size such as 4MiB");
      if (text != "auto") pipeline->read_ahead = ReadSize(*e, 64 << 10, uint64_t{1} << 34, "auto or ");
    }
    if (const Entry* e = Find(entries, "reads_per_file")) {
      pipeline->reads_per_file = ReadAutoInt(*e, 1, kMaxReadsPerFile);
    }
    if (const Entry* e = Find(entries, "hedged_reads")) pipeline->hedged_reads = ReadBool(*e);
    if (const Entry* e = Find(entries, "workers")) {
      pipeline->workers = ReadAutoInt(*e, 1, kMaxParallelism);
    }
    if (const Entry* e = Find(entries, "prefetch")) {
      pipeline->prefetch = ReadAutoInt(*e, 1, kMaxParallelism);
    }
    if (const Entry* e = Find(entries, "memory_budget")) {
      std::string text = ScalarText(*e, "auto or a size such as 8GiB");
      if (text != "auto") {
        pipeline->memory_budget =
            ReadSize(*e, 1, std::numeric_limits<uint64_t>::max(), "auto or ");
      }
    }
    if (const Entry* e = Find(entries, "cpu_budget")) {
      const std::string expected = "auto or a number of cores > 0 (e.g. 6 or 2.5)";
      std::string text = ScalarText(*e, expected);
      if (text != "auto") {
        if (const std::string problem = IntegerSpellingProblem(text); !problem.empty()) {
          Fail(MarkOf(*e), e->path, "expected " + expected + ", got " + Quote(text) + problem);
        }
        std::optional<double> v = ParseNumber(text);
        if (!v) Fail(MarkOf(*e), e->path, "expected " + expected + ", got " + Quote(text));
        if (!std::isfinite(*v) || *v <= 0) {
          Fail(MarkOf(*e), e->path, "value " + text + " is out of range; expected " + expected);
        }
        pipeline->cpu_budget = *v;
      }
    }
  }

  // Both keys are required once `shard` is given: a forgotten index would silently make every
  // node read shard 0.
  void ReadShard(const Entry& section, ShardConfig* shard) {
    std::vector<Entry> entries = ReadMap(section.value, MarkOf(section), "shard", kShardKeys);
    const Entry* index = Find(entries, "index");
    const Entry* count = Find(entries, "count");
    if (index == nullptr) {
      Fail(MarkOf(section), "shard.index",
           "missing required key 'index' (this node's shard, 0 to count - 1, e.g. ${NODE_RANK})");
    }
    if (count == nullptr) {
      Fail(MarkOf(section), "shard.count",
           "missing required key 'count' (the number of shards: nodes, e.g. ${NNODES})");
    }
    shard->index = ReadInt(*index, 0, std::numeric_limits<int64_t>::max());
    shard->count = ReadInt(*count, 1, std::numeric_limits<int64_t>::max());
    if (shard->index >= shard->count) {
      Fail(MarkOf(*index), "shard.index",
           "shard.index is " + std::to_string(shard->index) + " but shard.count is " +
               std::to_string(shard->count) + "; expected 0 <= index < count (0 to " +
               std::to_string(shard->count - 1) + ")");
    }
  }

  void ReadRing(const Entry& section, RingConfig* ring) {
    std::vector<Entry> entries = ReadMap(section.value, MarkOf(section), "ring", kRingKeys);
    if (const Entry* e = Find(entries, "slots")) {
      ring->slots = ReadAutoInt(*e, kMinRingSlots, kMaxRingSlots);
    }
    if (const Entry* e = Find(entries, "slot_bytes")) {
      std::string text = ScalarText(*e, "auto or a size such as 64MiB");
      if (text != "auto") ring->slot_bytes = ReadSize(*e, kMinSlotBytes, kMaxSlotBytes, "auto or ");
    }
  }

  void ReadConsumers(const Entry& section, ConsumersConfig* consumers) {
    std::vector<Entry> entries =
        ReadMap(section.value, MarkOf(section), "consumers", kConsumersKeys);
    const Entry* mode = Find(entries, "mode");
    const Entry* count = Find(entries, "count");
    if (mode != nullptr) {
      consumers->mode = static_cast<DeliveryMode>(ReadWord(*mode, kDeliveryModeWords));
    }
    if (consumers->mode == DeliveryMode::kRanks) {
      if (count == nullptr) {
        Fail(MarkOf(section), "consumers.count",
             "missing required key 'count' with mode: ranks (the number of ranks, 1 to " +
                 std::to_string(kMaxRanks) + ", e.g. the trainer's local world size)");
      }
      consumers->count = ReadInt(*count, 1, kMaxRanks);
    } else if (count != nullptr) {
      Fail(count->key_node.Mark(), count->path,
           "'count' is only allowed with mode: ranks; in mode shared any number of consumers "
           "take from one queue (remove count, or set mode: ranks)");
    }
  }

  void ReadPermissions(const Entry& section, PermissionsConfig* permissions) {
    std::vector<Entry> entries =
        ReadMap(section.value, MarkOf(section), "permissions", kPermissionsKeys);
    if (const Entry* e = Find(entries, "group")) {
      std::string name = ScalarText(*e, "a group name");
      if (!IsValidGroupName(name)) {
        Fail(MarkOf(*e), e->path,
             "invalid group name " + Quote(name) + "; expected 1 to 32 characters: a letter or "
             "'_', then letters, digits, '_', '-' or '.' (an optional '$' at the end), as "
             "groupadd accepts");
      }
      permissions->group = std::move(name);
      permissions->group_origin = Where(MarkOf(*e), e->path);
    }
  }

  std::string file_;
  std::string text_;  // the config's text, while Load runs
  std::map<int, std::string> substituted_;  // the values Substitute changed, as written, by mark.pos
  std::optional<YAML::Mark> batch_size_mark_;  // batch.size's value, when given (CheckBatchSize)
  std::map<std::string, YAML::Mark> feature_marks_;  // each feature's name (CheckBatchSize)
};

}  // namespace

std::string_view DeliveryModeName(DeliveryMode mode) {
  return kDeliveryModeWords[static_cast<size_t>(mode)];
}

std::string_view LogLevelName(LogLevel level) {
  return kLogLevelWords[static_cast<size_t>(level)];
}

ConfigError::ConfigError(std::string file, int line, int column, std::string key,
                         const std::string& problem)
    : std::runtime_error(FormatMessage(file, line, column, key, problem)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      key_(std::move(key)) {}

namespace {

ConfigError TooLarge(const std::string& path) {
  return ConfigError(path, 0, 0, "",
                     "config file is larger than " + std::to_string(kMaxConfigBytes >> 10) +
                         " KiB; a job config is a few lines of YAML (is this the right file?)");
}

// A FIFO (`-c <(make_config)`): read until its writer closes it, all within kFifoWaitMs. One
// that nothing writes to, or whose writer never closes it, would otherwise block without a word.
// Non-blocking, so that the wait is on poll with the time left: a writer that has already gone
// leaves its bytes in the pipe, and read returns them, then 0.
std::string ReadFifo(const std::string& path, int fd) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kFifoWaitMs);
  std::string text;
  char buf[4096];  // not 64 KiB: the stack may be small (ulimit -s), and configs are a few KiB
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready == 0) {
      ::close(fd);
      throw ConfigError(path, 0, 0, "",
                        "the config is a FIFO and " +
                            (text.empty() ? std::string("nothing wrote to it")
                                          : "its writer did not close it (" + std::to_string(text.size()) +
                                                " bytes read)") +
                            " within " + std::to_string(kFifoWaitMs / 1000) + " s; give a regular file");
    }
    if (ready < 0 && errno == EINTR) continue;
    const ssize_t n = ready < 0 ? -1 : ::read(fd, buf, sizeof buf);
    if (n == 0) break;  // the writer closed it
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw ConfigError(path, 0, 0, "", std::string("cannot read config file: ") + std::strerror(err));
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      ::close(fd);
      throw TooLarge(path);
    }
  }
  ::close(fd);
  return text;
}

}  // namespace

std::string MissingGroupMessage(const PermissionsConfig& permissions) {
  return (permissions.group_origin.empty() ? "permissions.group: " : permissions.group_origin) + "no group named '" +
         permissions.group + "' on this machine (getent group lists them): create it (groupadd " + permissions.group +
         "; then usermod -aG " + permissions.group + " USER for the daemon's user and each trainer's) or name "
         "an existing one";
}

std::string JobNameProblem(const std::string& name) {
  if (shm::IsValidJobName(name)) return "";  // the rule and its reasons: shm/names.h
  return "invalid job name " + Quote(name) +
         "; expected " + shm::kJobNameRule + " (it names the job's "
         "socket and shared memory, and ringfeedctl takes it as an argument)";
}

JobConfig LoadJobConfig(const std::string& path) {
  std::FILE* f = nullptr;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) return Loader(path).Load(ReadFifo(path, fd));
  } else {
    f = std::fopen(path.c_str(), "rb");
  }
  if (f == nullptr) {
    int err = errno;
    throw ConfigError(path, 0, 0, "", std::string("cannot open config file: ") +
                                          std::strerror(err));
  }
  std::string text;
  char buf[4096];  // not 64 KiB: the stack may be small (ulimit -s), and configs are a few KiB
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
    if (text.size() > kMaxConfigBytes) {  // also ends reading /dev/zero or a pipe that never ends
      std::fclose(f);
      throw TooLarge(path);
    }
  }
  if (std::ferror(f)) {
    int err = errno;
    std::fclose(f);
    throw ConfigError(path, 0, 0, "", std::string("cannot read config file: ") +
                                          std::strerror(err));
  }
  std::fclose(f);
  return Loader(path).Load(text);
}

JobConfig LoadJobConfigFromString(const std::string& yaml, const std::string& name) {
  if (yaml.size() > kMaxConfigBytes) {
    throw ConfigError(name, 0, 0, "",
                      "config text is larger than " + std::to_string(kMaxConfigBytes >> 10) +
                          " KiB; a job config is a few lines of YAML");
  }
  return Loader(name).Load(yaml);
}

std::optional<uint64_t> ParseSize(const std::string& text) {
  struct Unit {
    std::string_view name;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {
      {"B", 1},
      {"KB", 1000ull},         {"MB", 1000ull * 1000},
      {"GB", 1000ull * 1000 * 1000}, {"TB", 1000ull * 1000 * 1000 * 1000},
      {"KiB", 1ull << 10},     {"MiB", 1ull << 20},
      {"GiB", 1ull << 30},     {"TiB", 1ull << 40},
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;  // also rejects signs, fractions like ".5", empty text
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec != std::errc() || ptr != text.data() + digits) return std::nullopt;
  std::string_view rest(text.data() + digits, text.size() - digits);
  if (rest.empty()) return value;
  if (rest[0] == ' ') rest.remove_prefix(1);  // one optional space: "64 MiB"
  for (const Unit& unit : kUnits) {
    if (rest == unit.name) {
      uint64_t bytes;
      if (__builtin_mul_overflow(value, unit.factor, &bytes)) return std::nullopt;
      return bytes;
    }
  }
  return std::nullopt;
}

std::string SizeHint(const std::string& text) {
  // Digits, an optional space and a unit as ParseSize spells it, or none: refused for its size.
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string_view unit(text.data() + digits, text.size() - digits);
  if (!unit.empty() && unit[0] == ' ') unit.remove_prefix(1);
  static constexpr std::string_view kUnitNames[] = {"", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
  const bool spelt = unit.empty() ? digits == text.size()  // "64 " is no size
                                  : std::find(std::begin(kUnitNames), std::end(kUnitNames), unit) != std::end(kUnitNames);
  if (digits > 0 && spelt) {
    return "; that is 2^64 bytes or more";
  }
  return WholeSizeHint(text) + UnitSpellingHint(text);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace ringfeed
