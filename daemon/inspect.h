// `ringfeedctl inspect`: look at TFRecord files of tf.train.Example records without writing a
// job config first. Four modes (see inspect.cc for the output formats, docs/ringfeedctl.md for
// the user's view):
//   records (default)  one JSON line per record with every feature, kind and value;
//   count              records per file and the total;
//   verify             every CRC checked, every corrupt or truncated record listed;
//   schema             feature names, kinds, value counts and presence, then a `features:`
//                      block for the job config that parses every record it was built from.
//
// Errors are reported, never thrown: reading and parse problems go to `err` (naming file,
// record index and byte offset), recoverable ones are skipped, and the exit status says
// whether any occurred. Thread-safety: RunInspect is reentrant; DecodeExample is a pure function.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "daemon/json_values.h"
#include "format/feature_spec.h"
#include "format/tfrecord_reader.h"

namespace ringfeed {

// ringfeedctl's exit statuses (every subcommand uses them).
enum ExitStatus : int {
  kExitOk = 0,            // everything read and parsed
  kExitDataProblems = 1,  // some file, record or Example had a problem (all reported on stderr)
  kExitUsage = 2,         // bad command line
};

enum class InspectMode { kRecords, kCount, kVerify, kSchema };

struct InspectOptions {
  InspectMode mode = InspectMode::kRecords;
  std::vector<std::string> files;  // printed exactly as given
  // count/verify/schema: machine-readable JSON instead of the human-readable report.
  bool json = false;
  // compression (kAuto detects) and max_record_bytes; verify_crc is always on.
  ReaderOptions reader;
  // Read only records 0 .. limit-1 of each file; 0 = all.
  uint64_t limit = 0;
  // records mode: how bytes values are printed (daemon/json_values.h, BytesJson).
  BytesFormat bytes = BytesFormat::kBase64;
};

// Runs one inspect command. The report goes to `out`, problems to `err`.
// Returns kExitOk, or kExitDataProblems when any problem was found.
int RunInspect(const InspectOptions& options, std::ostream& out, std::ostream& err);

// The values of one tf.train.Feature as TensorFlow sees them. Exactly one vector is used, the
// one matching `kind`; `kind` is nullopt when the Feature has no list set (TF: missing).
struct FeatureValues {
  std::optional<ListKind> kind;
  std::vector<int64_t> int64_values;
  std::vector<float> float_values;  // bit-exact (NaN payloads kept)
  std::vector<std::string> bytes_values;

  size_t size() const;  // number of values of `kind` (0 when kind is nullopt)
};

// Feature name -> values, sorted by name.
using ExampleFeatures = std::map<std::string, FeatureValues>;

// `bytes` as JSON-safe text: valid UTF-8 is kept, every other byte becomes the four characters
// \xNN (hex), and a backslash followed by 'x' becomes \x5C, so distinct keys stay distinct in
// the output (one-to-one: \xNN always stands for one byte). format/utf8.h's EscapeNonUtf8.
std::string TextForJson(const std::string& bytes);

// Decodes every feature of a serialized tf.train.Example with the semantics of ExampleParser
// and TensorFlow's parser: a key given twice: the last one wins; repeated `features` fields
// merge; packed and unpacked lists (also mixed) are accepted; when a Feature sets several list
// kinds the last one set wins (protobuf oneof), merging the lists of that kind that follow it;
// a map entry holding two values is malformed (as in TensorFlow). Unlike ExampleParser, which
// never decodes keys outside its spec, every key is decoded, so a malformed Feature under any key
// makes the whole Example malformed here.
// Returns false with *error set ("malformed Example: ...", "key 'x': malformed Feature: ...")
// when the bytes are not a valid Example; *out is then unspecified.
bool DecodeExample(std::span<const uint8_t> example, ExampleFeatures* out, std::string* error);

}  // namespace ringfeed
