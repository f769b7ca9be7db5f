// Tests of config/job_config: a full config, defaults, ${VAR} substitution, sizes, `auto` knobs,
// a table of broken configs (each with the exact line, column and key path of its error), and the
// example configs under config/examples/.
#include <glob.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <atomic>
#include <thread>
#include <vector>

#include "config/job_config.h"

namespace ringfeed {
namespace {

#ifdef RINGFEED_SOURCE_DIR
const std::string kSourceDir = RINGFEED_SOURCE_DIR;
#else
const std::string kSourceDir = ".";
#endif

JobConfig Load(const std::string& yaml) { return LoadJobConfigFromString(yaml, "test.yaml"); }

// Sets an environment variable for the lifetime of the object, restoring the old state after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = std::string(old);
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

const char* const kMinimal = R"(job: t
source:
  files: [a.tfrecord]
features:
  x: {dtype: int64}
)";

TEST_CASE("full config: every key is read", "[config]") {
  const char* yaml = R"(
# every key of the schema, none at its default
job: taxi.train-2_b
source:
  files:
    - /data/a/*.gz
    - /data/b/part-0001.tfrecord
  compression: zlib
  on_error: skip
  max_record_bytes: 4 MiB
features:
  image:
    type: fixed
    dtype: uint16
    shape: [28, 28, 1]
    decode: raw
  label:
    dtype: int64
    default: -7
  weights:
    dtype: float32
    shape: [2, 2]
    default: [1, 2.5, .nan, -.inf]
  tag:
    type: fixed
    dtype: bytes
    shape: [2]
    default: ["a", ""]
  tokens:
    type: varlen
    dtype: bytes
  scores:
    type: varlen
    dtype: float32
batch:
  size: 1024
  drop_remainder: true
shuffle:
  files: true
  buffer: 100000
  seed: 18446744073709551615
epochs: 0
pipeline:
  cycle_length: 16
  readers: 3
  workers: 12
  prefetch: 5
  memory_budget: 2GB
  cpu_budget: 7.5
  hedged_reads: false
deterministic: false
shard: {index: 3, count: 8}
ring:
  slots: 256
  slot_bytes: 64GiB
consumers:
  mode: ranks
  count: 64
permissions:
  group: ml-train_2.x$
log_level: trace
)";
  JobConfig c = Load(yaml);
  CHECK(c.path == "test.yaml");
  CHECK(c.job == "taxi.train-2_b");
  CHECK(c.source.files == std::vector<std::string>{"/data/a/*.gz", "/data/b/part-0001.tfrecord"});
  CHECK(c.source.compression == Compression::kZlib);
  CHECK(c.source.on_error == OnError::kSkip);
  CHECK(c.source.max_record_bytes == 4u << 20);

  REQUIRE(c.features.size() == 6);
  const FeatureSpec& image = c.features[0];
  CHECK(image.name == "image");
  CHECK(image.type == FeatureType::kFixedLen);
  CHECK(image.dtype == DType::kUInt16);
  CHECK(image.shape == std::vector<int64_t>{28, 28, 1});
  CHECK(image.decode_raw);
  CHECK_FALSE(image.has_default);
  CHECK(image.NumElements() == 784);
  CHECK(image.WireKind() == ListKind::kBytes);

  const FeatureSpec& label = c.features[1];
  CHECK(label.name == "label");
  CHECK(label.type == FeatureType::kFixedLen);
  CHECK(label.dtype == DType::kInt64);
  CHECK(label.shape.empty());
  CHECK_FALSE(label.decode_raw);
  CHECK(label.has_default);
  CHECK(label.default_int64 == std::vector<int64_t>{-7});
  CHECK(label.default_float.empty());
  CHECK(label.default_bytes.empty());

  const FeatureSpec& weights = c.features[2];
  CHECK(weights.name == "weights");
  CHECK(weights.dtype == DType::kFloat32);
  CHECK(weights.shape == std::vector<int64_t>{2, 2});
  REQUIRE(weights.default_float.size() == 4);
  CHECK(weights.default_float[0] == 1.0f);
  CHECK(weights.default_float[1] == 2.5f);
  CHECK(std::isnan(weights.default_float[2]));
  CHECK(weights.default_float[3] == -std::numeric_limits<float>::infinity());

  const FeatureSpec& tag = c.features[3];
  CHECK(tag.name == "tag");
  CHECK(tag.dtype == DType::kBytes);
  CHECK(tag.shape == std::vector<int64_t>{2});
  CHECK(tag.default_bytes == std::vector<std::string>{"a", ""});

  const FeatureSpec& tokens = c.features[4];
  CHECK(tokens.name == "tokens");
  CHECK(tokens.type == FeatureType::kVarLen);
  CHECK(tokens.dtype == DType::kBytes);
  CHECK(tokens.shape.empty());
  CHECK_FALSE(tokens.has_default);

  const FeatureSpec& scores = c.features[5];
  CHECK(scores.name == "scores");
  CHECK(scores.type == FeatureType::kVarLen);
  CHECK(scores.dtype == DType::kFloat32);
  CHECK(scores.WireKind() == ListKind::kFloat);

  CHECK(c.batch.size == 1024);
  CHECK(c.batch.drop_remainder);
  CHECK(c.shuffle.files);
  CHECK(c.shuffle.buffer == 100000);
  CHECK(c.shuffle.seed == std::numeric_limits<uint64_t>::max());
  CHECK(c.epochs == 0);
  CHECK(c.pipeline.cycle_length == 16);
  CHECK(c.pipeline.readers == std::optional<int64_t>(3));
  CHECK(c.pipeline.workers == std::optional<int64_t>(12));
  CHECK(c.pipeline.prefetch == std::optional<int64_t>(5));
  CHECK(c.pipeline.memory_budget == std::optional<uint64_t>(2000000000ull));
  CHECK(c.pipeline.cpu_budget == std::optional<double>(7.5));
  CHECK_FALSE(c.pipeline.hedged_reads);
  CHECK_FALSE(c.deterministic);
  CHECK(c.shard.index == 3);
  CHECK(c.shard.count == 8);
  CHECK(c.ring.slots == std::optional<int64_t>(256));
  CHECK(c.ring.slot_bytes == std::optional<uint64_t>(64ull << 30));
  CHECK(c.consumers.mode == DeliveryMode::kRanks);
  CHECK(c.consumers.count == 64);
  CHECK(c.permissions.group == "ml-train_2.x$");
  CHECK(c.log_level == LogLevel::kTrace);
}

TEST_CASE("defaults of every optional key", "[config]") {
  JobConfig c = Load(kMinimal);
  CHECK(c.job == "t");
  CHECK(c.source.files == std::vector<std::string>{"a.tfrecord"});
  CHECK(c.source.compression == Compression::kAuto);
  CHECK(c.source.on_error == OnError::kFail);
  CHECK(c.source.max_record_bytes == 256ull << 20);
  REQUIRE(c.features.size() == 1);
  CHECK(c.features[0].name == "x");
  CHECK(c.features[0].type == FeatureType::kFixedLen);
  CHECK(c.features[0].dtype == DType::kInt64);
  CHECK(c.features[0].shape.empty());
  CHECK_FALSE(c.features[0].has_default);
  CHECK_FALSE(c.features[0].decode_raw);
  CHECK(c.batch.size == 32);
  CHECK_FALSE(c.batch.drop_remainder);
  CHECK_FALSE(c.shuffle.files);
  CHECK(c.shuffle.buffer == 0);
  CHECK(c.shuffle.seed == 0);
  CHECK(c.epochs == 1);
  CHECK(c.pipeline.cycle_length == 4);
  CHECK_FALSE(c.pipeline.readers);
  CHECK_FALSE(c.pipeline.workers);
  CHECK_FALSE(c.pipeline.prefetch);
  CHECK_FALSE(c.pipeline.memory_budget);
  CHECK_FALSE(c.pipeline.cpu_budget);
  CHECK(c.pipeline.hedged_reads);
  CHECK(c.deterministic);
  CHECK(c.shard.index == 0);
  CHECK(c.shard.count == 1);
  CHECK_FALSE(c.ring.slots);
  CHECK_FALSE(c.ring.slot_bytes);
  CHECK(c.consumers.mode == DeliveryMode::kShared);
  CHECK(c.consumers.count == 0);
  CHECK(c.permissions.group.empty());
  CHECK(c.log_level == LogLevel::kInfo);
}

TEST_CASE("daemon keys: shard from the launcher's environment, ring, consumers, log_level",
          "[config][daemon]") {
  auto load = [](const std::string& body) { return Load(std::string(kMinimal) + body); };

  SECTION("shard index and count from ${RANK} / ${WORLD_SIZE}, with defaults") {
    ScopedEnv rank("RINGFEED_TEST_RANK", "5");
    ScopedEnv world("RINGFEED_TEST_WORLD_SIZE", "6");
    ScopedEnv unset("RINGFEED_TEST_SLURM_PROCID", nullptr);
    JobConfig c = load("shard:\n  index: ${RINGFEED_TEST_RANK}\n"
                       "  count: ${RINGFEED_TEST_WORLD_SIZE}\n");
    CHECK(c.shard.index == 5);
    CHECK(c.shard.count == 6);
    c = load("shard: {index: \"${RINGFEED_TEST_SLURM_PROCID:-0}\", count: 1}\n");
    CHECK(c.shard.index == 0);
    CHECK(c.shard.count == 1);

    ScopedEnv too_big("RINGFEED_TEST_RANK", "6");
    try {
      load("shard:\n  index: ${RINGFEED_TEST_RANK}\n  count: ${RINGFEED_TEST_WORLD_SIZE}\n");
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(e.line() == 7);
      CHECK(e.column() == 10);
      CHECK(e.key() == "shard.index");
      CHECK_THAT(e.what(), Catch::Contains("shard.index is 6 but shard.count is 6") &&
                               Catch::Contains("0 to 5") &&
                               Catch::EndsWith(
                                   "(the value is '${RINGFEED_TEST_RANK}' with its variables substituted)"));
    }
    // A value a launcher set wrong names the variable it came from, not only the value.
    ScopedEnv spaced("RINGFEED_TEST_RANK", " 1");
    CHECK_THROWS_WITH(load("shard:\n  index: ${RINGFEED_TEST_RANK}\n  count: 4\n"),
                      "test.yaml:7:10: shard.index: expected an integer from 0 to 2^63 - 1, got ' 1' (the value is "
                      "'${RINGFEED_TEST_RANK}' with its variables substituted)");
    // A message that quotes the written value already says nothing more.
    ScopedEnv empty("RINGFEED_TEST_RANK", "");
    CHECK_THROWS_WITH(load("shard:\n  index: ${RINGFEED_TEST_RANK}\n  count: 4\n"),
                      !Catch::Contains("with its variables substituted"));
  }

  SECTION("ring: auto and numbers, every size unit") {
    RingConfig ring = load("ring: {slots: auto, slot_bytes: auto}\n").ring;
    CHECK_FALSE(ring.slots);
    CHECK_FALSE(ring.slot_bytes);
    ring = load("ring: {slots: 2, slot_bytes: 4KiB}\n").ring;
    CHECK(ring.slots == std::optional<int64_t>(2));
    CHECK(ring.slot_bytes == std::optional<uint64_t>(4096));
    ring = load("ring:\n  slot_bytes: 16 MB\n").ring;
    CHECK_FALSE(ring.slots);
    CHECK(ring.slot_bytes == std::optional<uint64_t>(16000000));
  }

  SECTION("consumers: shared needs no count, ranks from 1 to 64") {
    CHECK(load("consumers: {mode: shared}\n").consumers.mode == DeliveryMode::kShared);
    CHECK(load("consumers: {}\n").consumers.mode == DeliveryMode::kShared);
    ConsumersConfig one = load("consumers: {mode: ranks, count: 1}\n").consumers;
    CHECK(one.mode == DeliveryMode::kRanks);
    CHECK(one.count == 1);
  }

  SECTION("deterministic") {
    CHECK(load("deterministic: true\n").deterministic);
    CHECK_FALSE(load("deterministic: false\n").deterministic);
  }

  SECTION("log levels and names") {
    const std::pair<const char*, LogLevel> levels[] = {
        {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
        {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
    for (const auto& [word, level] : levels) {
      INFO(word);
      CHECK(load(std::string("log_level: ") + word + "\n").log_level == level);
      CHECK(LogLevelName(level) == word);
    }
    CHECK(DeliveryModeName(DeliveryMode::kShared) == "shared");
    CHECK(DeliveryModeName(DeliveryMode::kRanks) == "ranks");
  }

  SECTION("group names") {
    for (const char* name : {"trainers", "_ml", "a", "ml.team-1", "host$",
                             "abcdefghijklmnopqrstuvwxyz012345"}) {
      INFO(name);
      CHECK(load(std::string("permissions: {group: \"") + name + "\"}\n").permissions.group ==
            name);
    }
    for (const char* name : {"", "1000", "-x", "a b", "a:b", "a/b", "$", "a$b", "\xc3\xa9",
                             "abcdefghijklmnopqrstuvwxyz0123456"}) {
      INFO(name);
      CHECK_THROWS_WITH(load(std::string("permissions: {group: \"") + name + "\"}\n"),
                        Catch::Contains("permissions.group: invalid group name"));
    }
  }
}

TEST_CASE("short forms: one file string, broadcast default, feature order", "[config]") {
  JobConfig c = Load(R"(job: t
source: {files: "one/*.gz"}
features:
  zeta: {dtype: float32, shape: [3], default: 0}
  alpha: {dtype: bytes, default: "n/a"}
  mid: {dtype: int64, shape: [0]}
)");
  CHECK(c.source.files == std::vector<std::string>{"one/*.gz"});
  REQUIRE(c.features.size() == 3);
  CHECK(c.features[0].name == "zeta");
  CHECK(c.features[1].name == "alpha");
  CHECK(c.features[2].name == "mid");
  CHECK(c.features[0].default_float == std::vector<float>{0.0f});  // one value: broadcast
  CHECK(c.features[1].default_bytes == std::vector<std::string>{"n/a"});
  CHECK(c.features[2].NumElements() == 0);
}

TEST_CASE("float32 defaults round as TensorFlow takes them (to double, then float32); the largest float32 as dump "
          "prints it is accepted",
          "[config]") {
  // 3.4028235e+38 is the shortest decimal of FLT_MAX (what dump prints). The midpoint between
  // FLT_MAX and 2^128 is 3.4028235677973366e38: below it rounds to FLT_MAX, above it to inf.
  JobConfig c = Load(R"(job: t
source: {files: [a]}
features:
  f:
    dtype: float32
    shape: [6]
    default: [3.4028235e+38, -3.4028235e38, 340282350000000000000000000000000000000, 3.40282356e38, 1e-46, 0.1]
)");
  const float max = std::numeric_limits<float>::max();
  CHECK(c.features[0].default_float == std::vector<float>{max, -max, max, max, 0.0f, 0.1f});
  CHECK_THROWS_WITH(Load("job: t\nsource: {files: [a]}\nfeatures:\n  f: {dtype: float32, default: 3.4028236e38}\n"),
                    Catch::Contains("value 3.4028236e38 is out of range of float32"));
  // A list item 'data:v1.tfrecord' before a syntax error is a valid scalar, not a config key
  // missing its space: no such hint (review).
  CHECK_THROWS_WITH(Load("job: t\nsource:\n  files:\n    - data:v1.tfrecord\n  - b\n"),
                    Catch::Contains("YAML syntax error: end of map not found") && !Catch::Contains("needs a space"));
  // Double rounding, as TensorFlow 2.21 and NumPy do it (FixedLenFeature's default_value
  // np.float32(float(text)), measured): 1.0, where rounding straight to float32 gives the next
  // float up; and just below the FLT_MAX/2^128 midpoint, the double is the midpoint and the
  // float32 infinity (TF's value), out of range here.
  c = Load("job: t\nsource: {files: [a]}\nfeatures:\n"
           "  f: {dtype: float32, default: 1.000000059604644775390625000001}\n");
  CHECK(c.features[0].default_float == std::vector<float>{1.0f});
  CHECK_THROWS_WITH(
      Load("job: t\nsource: {files: [a]}\nfeatures:\n  f: {dtype: float32, default: 3.40282356779733661e38}\n"),
      Catch::Contains("value 3.40282356779733661e38 is out of range of float32"));
}

TEST_CASE("${VAR} substitution", "[config][env]") {
  ScopedEnv root("RINGFEED_TEST_ROOT", "/mnt/data");
  ScopedEnv split("RINGFEED_TEST_SPLIT", nullptr);
  ScopedEnv empty("RINGFEED_TEST_EMPTY", "");
  ScopedEnv batch("RINGFEED_TEST_BATCH", "64");
  ScopedEnv job("RINGFEED_TEST_JOB", "from-env");

  SECTION("set, unset with default, several in one string, numbers and words") {
    JobConfig c = Load(R"(job: ${RINGFEED_TEST_JOB}
source:
  files:
    - ${RINGFEED_TEST_ROOT}/${RINGFEED_TEST_SPLIT:-train}/*.gz
    - "${RINGFEED_TEST_ROOT:-/nope}/x-${RINGFEED_TEST_SPLIT:-eval}-${RINGFEED_TEST_ROOT}"
    - plain$dollar/${RINGFEED_TEST_EMPTY:-fallback}/${RINGFEED_TEST_EMPTY:-}end
  compression: ${RINGFEED_TEST_SPLIT:-gzip}
features:
  x: {dtype: int64}
batch:
  size: ${RINGFEED_TEST_BATCH}
pipeline:
  workers: ${RINGFEED_TEST_SPLIT:-auto}
  readers: ${RINGFEED_TEST_BATCH:-auto}
)");
    CHECK(c.job == "from-env");
    CHECK(c.source.files ==
          std::vector<std::string>{"/mnt/data/train/*.gz", "/mnt/data/x-eval-/mnt/data",
                                   "plain$dollar/fallback/end"});
    CHECK(c.source.compression == Compression::kGzip);
    CHECK(c.batch.size == 64);
    CHECK_FALSE(c.pipeline.workers);
    CHECK(c.pipeline.readers == std::optional<int64_t>(64));
  }

  SECTION("set but empty without a default names the variable") {
    try {
      Load("job: t\nsource: {files: [a]}\nfeatures: {x: {dtype: int64}}\n"
           "shard: {index: \"${RINGFEED_TEST_EMPTY}\", count: 3}\n");
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(e.key() == "shard.index");
      CHECK_THAT(e.what(), Catch::Contains("environment variable RINGFEED_TEST_EMPTY is set but empty") &&
                               Catch::Contains("${RINGFEED_TEST_EMPTY:-}"));
    }
  }

  SECTION("the substituted value is validated like a literal one") {
    ScopedEnv bad("RINGFEED_TEST_BATCH", "-3");
    try {
      Load("job: t\nsource: {files: [a]}\nfeatures: {x: {dtype: int64}}\nbatch:\n"
           "  size: ${RINGFEED_TEST_BATCH}\n");
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(e.line() == 5);
      CHECK(e.column() == 9);
      CHECK(e.key() == "batch.size");
      CHECK_THAT(e.what(), Catch::Contains("-3") && Catch::Contains("out of range"));
    }
  }

  SECTION("unquoted in a flow mapping: YAML's syntax error says to quote it, and quoted it works") {
    const std::string head = "job: t\nsource: {files: [a]}\nfeatures: {x: {dtype: int64}}\n";
    try {
      Load(head + "batch: {size: ${RINGFEED_TEST_BATCH}}\n");
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Contains("YAML syntax error") &&
                               Catch::Contains("inside { } or [ ], quote a ${VAR}: {size: \"${X}\"}"));
    }
    CHECK(Load(head + "batch: {size: \"${RINGFEED_TEST_BATCH}\"}\n").batch.size == 64);
  }

  SECTION("a variable where a list or a mapping goes: the error says variables give scalar text only") {
    ScopedEnv shape("RINGFEED_TEST_SHAPE", "[28, 28]");
    for (const std::string yaml : {"job: t\nsource: {files: [a]}\nfeatures:\n  x:\n    dtype: int64\n    shape: ${RINGFEED_TEST_SHAPE}\n",
                                   "job: t\nsource: {files: [a]}\nfeatures: ${RINGFEED_TEST_SHAPE}\n"}) {
      INFO(yaml);
      CHECK_THROWS_WITH(Load(yaml), Catch::Contains("got a scalar '${RINGFEED_TEST_SHAPE}' (a ${...} variable gives "
                                                    "text inside a scalar value, never a list or a mapping: write "
                                                    "those in the file)"));
    }
    CHECK_THROWS_WITH(Load("job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: int64, shape: 28}\n"),
                      !Catch::Contains("variable"));
  }

  SECTION("keys are not substituted") {
    try {
      Load(std::string(kMinimal) + "${RINGFEED_TEST_JOB}: 1\n");
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(e.key() == "${RINGFEED_TEST_JOB}");
      CHECK_THAT(e.what(), Catch::Contains("unknown key '${RINGFEED_TEST_JOB}'"));
    }
  }
}

TEST_CASE("an unknown key's suggestion never names a key the mapping has already", "[config][errors]") {
  CHECK_THROWS_WITH(Load("job: t\nsource: {files: [a]}\nfeatures:\n  x: {type: varlen, Type: fixed, dtype: int64}\n"),
                    Catch::Contains("unknown key 'Type'") && !Catch::Contains("did you mean"));
  CHECK_THROWS_WITH(Load("job: t\nsource: {files: [a]}\nfeatures:\n  x: {type: varlen, dype: int64}\n"),
                    Catch::Contains("did you mean 'dtype'?"));
}

TEST_CASE("ParseSize", "[config][size]") {
  struct Case {
    const char* text;
    std::optional<uint64_t> bytes;
  };
  const Case cases[] = {
      {"0", 0},
      {"1500", 1500},
      {"16B", 16},
      {"16 B", 16},
      {"10KB", 10000},
      {"10MB", 10000000},
      {"3GB", 3000000000ull},
      {"2TB", 2000000000000ull},
      {"1KiB", 1024},
      {"64MiB", 64ull << 20},
      {"64 MiB", 64ull << 20},
      {"2GiB", 2ull << 30},
      {"1TiB", 1ull << 40},
      {"007MiB", 7ull << 20},
      {"18446744073709551615", std::numeric_limits<uint64_t>::max()},
      {"18446744073709551616", std::nullopt},  // overflow
      {"16777216TiB", std::nullopt},           // 2^64: overflow
      {"16777215TiB", 16777215ull << 40},
      {"", std::nullopt},
      {"MiB", std::nullopt},
      {"-1", std::nullopt},
      {"-1MiB", std::nullopt},
      {"+1", std::nullopt},
      {"1.5GiB", std::nullopt},
      {".5MiB", std::nullopt},
      {"1e6", std::nullopt},
      {"64mib", std::nullopt},
      {"64Mb", std::nullopt},
      {"64M", std::nullopt},
      {"64  MiB", std::nullopt},
      {" 64MiB", std::nullopt},
      {"64MiB ", std::nullopt},
      {"64 ", std::nullopt},
      {"1,000", std::nullopt},
      {"0x10", std::nullopt},
  };
  for (const Case& c : cases) {
    INFO("ParseSize(\"" << c.text << "\")");
    CHECK(ParseSize(c.text) == c.bytes);
  }
}

TEST_CASE("sizes in the config", "[config][size]") {
  auto load_max = [](const std::string& value) {
    return Load("job: t\nsource:\n  files: [a]\n  max_record_bytes: " + value +
                "\nfeatures: {x: {dtype: int64}}\n")
        .source.max_record_bytes;
  };
  CHECK(load_max("16") == 16);
  CHECK(load_max("1KB") == 1000);
  CHECK(load_max("1 GiB") == 1ull << 30);
  CHECK(load_max("1TiB") == 1ull << 40);
  CHECK_THROWS_WITH(load_max("15"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(load_max("1025GiB"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(load_max("1.5MiB"), Catch::Contains("invalid size '1.5MiB'; sizes are whole numbers of their "
                                                          "unit: 1.5MiB is 1536KiB; expected ") &&
                                            Catch::Contains("KiB, MiB, GiB, TiB"));
  CHECK_THROWS_WITH(load_max("0.25 GB"), Catch::Contains("0.25 GB is 250MB;"));
  CHECK_THROWS_WITH(load_max("1.1B"), !Catch::Contains("whole numbers"));  // no unit writes it whole
  CHECK_THROWS_WITH(load_max("1.5.5MiB"), !Catch::Contains("whole numbers"));
  // Units spelt in another case, or by their first letter: which one was meant.
  CHECK_THROWS_WITH(load_max("64mib"), Catch::Contains("invalid size '64mib'; units are case-sensitive: did you mean "
                                                         "64MiB?; expected "));
  CHECK_THROWS_WITH(load_max("64 kb"), Catch::Contains("units are case-sensitive: did you mean 64KB?"));
  CHECK_THROWS_WITH(load_max("64M"), Catch::Contains("invalid size '64M'; did you mean 64MiB (2^20 bytes) or 64MB "
                                                       "(10^6 bytes)?; expected "));
  CHECK_THROWS_WITH(load_max("2g"), Catch::Contains("did you mean 2GiB (2^30 bytes) or 2GB (10^9 bytes)?"));
  CHECK_THROWS_WITH(load_max("64Mi"), Catch::Contains("invalid size '64Mi'; did you mean 64MiB?; expected "));
  CHECK_THROWS_WITH(load_max("64Q"), !Catch::Contains("did you mean"));
  // Well spelt but 2^64 bytes or more: said so, not a unit "did you mean" that repeats it.
  for (const char* huge : {"20000000TB", "16777216TiB", "18446744073709551616", "99999999999999999999 KiB"}) {
    INFO(huge);
    CHECK_THROWS_WITH(load_max(huge), Catch::Contains("invalid size '" + std::string(huge) +
                                                      "'; that is 2^64 bytes or more; expected ") &&
                                          !Catch::Contains("did you mean"));
  }
  CHECK_THROWS_WITH(load_max("\"64 \""), !Catch::Contains("2^64"));
  CHECK_THROWS_WITH(load_max("MiB"), !Catch::Contains("did you mean"));
}

TEST_CASE("auto knobs", "[config][auto]") {
  auto pipeline = [](const std::string& body) {
    return Load(std::string(kMinimal) + "pipeline:\n" + body).pipeline;
  };
  PipelineConfig all_auto = pipeline(
      "  readers: auto\n  workers: auto\n  prefetch: auto\n  memory_budget: auto\n"
      "  cpu_budget: auto\n");
  CHECK_FALSE(all_auto.readers);
  CHECK_FALSE(all_auto.workers);
  CHECK_FALSE(all_auto.prefetch);
  CHECK_FALSE(all_auto.memory_budget);
  CHECK_FALSE(all_auto.cpu_budget);
  CHECK(all_auto.cycle_length == 4);

  PipelineConfig fixed = pipeline(
      "  readers: 1\n  workers: 65536\n  prefetch: 2\n  memory_budget: 8GiB\n  cpu_budget: 3\n");
  CHECK(fixed.readers == std::optional<int64_t>(1));
  CHECK(fixed.workers == std::optional<int64_t>(65536));
  CHECK(fixed.prefetch == std::optional<int64_t>(2));
  CHECK(fixed.memory_budget == std::optional<uint64_t>(8ull << 30));
  CHECK(fixed.cpu_budget == std::optional<double>(3.0));

  CHECK(pipeline("  cpu_budget: 0.25\n").cpu_budget == std::optional<double>(0.25));
  CHECK_THROWS_WITH(pipeline("  workers: 0\n"),
                    Catch::Contains("pipeline.workers") && Catch::Contains("auto or an integer"));
  CHECK_THROWS_WITH(pipeline("  prefetch: Auto\n"), Catch::Contains("expected auto or"));
  CHECK_THROWS_WITH(pipeline("  cycle_length: auto\n"),
                    Catch::Contains("pipeline.cycle_length") &&
                        Catch::Contains("expected an integer from 1 to 65536"));
  CHECK_THROWS_WITH(pipeline("  memory_budget: lots\n"),
                    Catch::Contains("invalid size 'lots'") && Catch::Contains("auto or"));
  CHECK_THROWS_WITH(pipeline("  cpu_budget: .inf\n"), Catch::Contains("out of range"));
  CHECK(pipeline("  hedged_reads: true\n").hedged_reads);
  CHECK_THROWS_WITH(pipeline("  hedged_reads: off\n"),
                    Catch::Contains("pipeline.hedged_reads") && Catch::Contains("expected true or false"));
}

TEST_CASE("booleans are true/false only", "[config]") {
  auto drop = [](const std::string& value) {
    return Load(std::string(kMinimal) + "batch:\n  drop_remainder: " + value + "\n")
        .batch.drop_remainder;
  };
  CHECK(drop("true"));
  CHECK(drop("True"));
  CHECK_FALSE(drop("false"));
  for (const char* word : {"yes", "no", "on", "off", "1", "0", "y"}) {
    INFO(word);
    CHECK_THROWS_WITH(drop(word), Catch::Contains("expected true or false"));
  }
  CHECK_THROWS_WITH(drop("yes"), Catch::Contains("got 'yes' (YAML 1.1 read it as a boolean; this config takes only "
                                                 "true and false"));
  CHECK_THROWS_WITH(drop("1"), !Catch::Contains("YAML 1.1"));
  for (const char* word : {"y", "N", "ON", "OFF", "NO", "Off"}) {  // every YAML 1.1 spelling says why
    INFO(word);
    CHECK_THROWS_WITH(drop(word), Catch::Contains("YAML 1.1 read it as a boolean"));
  }
}

struct BrokenCase {
  const char* name;
  std::string yaml;
  int line;
  int column;
  const char* key;
  std::vector<const char*> fragments;
};

// Prefix shared by most cases: lines 1-5.
const std::string kHead = kMinimal;
// The key path of a 130-byte feature name, as errors shorten it.
const std::string kLongNamePath = "features." + std::string(51, 'n') + "...";
std::string ManyFeatures(int n) {
  std::string yaml;
  for (int i = 0; i < n; ++i) yaml += "  f" + std::to_string(i) + ": {dtype: int64}\n";
  return yaml;
}

TEST_CASE("broken configs name file, line, column and key", "[config][errors]") {
  ScopedEnv unset("RINGFEED_TEST_UNSET_VAR", nullptr);
  const std::vector<BrokenCase> cases = {
      {"typo in a top-level key", kHead + "sufle:\n  buffer: 10\n", 6, 1, "sufle",
       {"unknown key 'sufle'", "known keys: job, source, features, batch, shuffle, epochs, "
        "pipeline, deterministic, shard, ring, consumers, permissions, log_level",
        "did you mean 'shuffle'?"}},
      {"typo in a new top-level key", kHead + "log_levl: debug\n", 6, 1, "log_levl",
       {"unknown key 'log_levl'", "did you mean 'log_level'?"}},
      {"typo in a nested key", kHead + "shuffle:\n  bufer: 10\n", 7, 3, "shuffle.bufer",
       {"unknown key 'bufer'", "known keys: files, buffer, seed", "did you mean 'buffer'?"}},
      {"a typo next to a key it could be taken for: the missing key is suggested",
       "job: t\nsource: {files: [a]}\nfeatures:\n  x: {type: varlen, dype: int64}\n", 4, 21, "features.x.dype",
       {"unknown key 'dype'", "did you mean 'dtype'?"}},
      {"a key in another case beside the one it could be: no suggestion of a key present",
       "job: t\nsource: {files: [a]}\nfeatures:\n  x: {type: varlen, Type: fixed, dtype: int64}\n", 4, 21,
       "features.x.Type", {"unknown key 'Type'; known keys: type, dtype, shape, default, decode"}},
      {"unknown key far from every known key", kHead + "pipeline:\n  turbo: true\n", 7, 3,
       "pipeline.turbo", {"unknown key 'turbo'; known keys: cycle_length, readers"}},
      {"wrong type: scalar for a mapping", kHead + "batch: 32\n", 6, 8, "batch",
       {"expected a mapping with keys size, drop_remainder", "got a scalar '32'"}},
      {"wrong type: list for a scalar", kHead + "batch:\n  size: [32]\n", 7, 9, "batch.size",
       {"expected an integer from 1 to 16777216, got a list"}},
      {"non-integer", kHead + "epochs: 1.5\n", 6, 9, "epochs",
       {"expected an integer from 0 to 2^63 - 1, got '1.5'"}},
      {"negative batch size", kHead + "batch:\n  size: -4\n", 7, 9, "batch.size",
       {"value -4 is out of range", "from 1 to 16777216"}},
      {"a batch too large to address",
       "job: t\nsource:\n  files: [a.tfrecord]\nfeatures:\n  x: {dtype: bytes, shape: [1099511627776], default: \"\"}\n"
       "batch:\n  size: 16777216\n",
       7, 9, "batch.size", {"a batch of 16777216 rows of feature 'x'", "would exceed 2^40"}},
      {"a shape too large for the default batch of 32 rows",
       "job: t\nsource:\n  files: [a.tfrecord]\nfeatures:\n  x: {dtype: int64, shape: [1048576, 1048576], default: 0}\n",
       5, 3, "features.x.shape", {"a batch of 32 (the default batch.size) rows of feature 'x'", "would exceed 2^40"}},
      {"... pointing at that feature, not the first one",
       "job: t\nsource:\n  files: [a.tfrecord]\nfeatures:\n  a: {dtype: int64}\n"
       "  x: {dtype: int64, shape: [1048576, 1048576], default: 0}\n",
       6, 3, "features.x.shape", {"a batch of 32 (the default batch.size) rows of feature 'x'", "would exceed 2^40"}},
      {"boolean spelled yes", kHead + "shuffle:\n  files: yes\n", 7, 10, "shuffle.files",
       {"expected true or false, got 'yes'"}},
      {"bad compression word", "job: t\nsource:\n  files: [a]\n  compression: bzip2\n"
       "features: {x: {dtype: int64}}\n", 4, 16, "source.compression",
       {"unknown value 'bzip2'", "allowed values: auto, none, gzip, zlib"}},
      {"TensorFlow's spelling GZIP: the lowercase word suggested", "job: t\nsource:\n  files: [a]\n  compression: GZIP\n"
       "features: {x: {dtype: int64}}\n", 4, 16, "source.compression",
       {"unknown value 'GZIP'", "allowed values: auto, none, gzip, zlib; did you mean 'gzip'? (lowercase)"}},
      {"a key in another case", kHead + "Batch: {size: 8}\n", 6, 1, "Batch", {"did you mean 'batch'? (lowercase)"}},
      {"bad on_error word with suggestion", "job: t\nsource:\n  files: [a]\n  on_error: skipp\n"
       "features: {x: {dtype: int64}}\n", 4, 13, "source.on_error",
       {"allowed values: fail, skip", "did you mean 'skip'?"}},
      {"a shape of more dimensions than the ring holds",
       "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: int64, shape: [1, 1, 1, 1, 1, 1, 1, 1, 1]}\n", 4, 28,
       "features.x.shape", {"the shape has 9 dimensions; at most 8 (the ring's limit)"}},
      {"a feature name longer than the ring holds",
       "job: t\nsource: {files: [a]}\nfeatures:\n  " + std::string(130, 'n') + ": {dtype: int64}\n", 4, 3,
       kLongNamePath.c_str(), {"a feature name has at most 127 bytes (the ring's limit); this one has 130"}},
      {"a feature name with a NUL byte (the ring would cut it there)",
       "job: t\nsource: {files: [a]}\nfeatures:\n  \"a\\0x\": {dtype: int64}\n", 4, 3, "features.a\\x00x",
       {"a feature name must not contain a NUL byte (at byte 1)"}},
      {"a feature name that is not UTF-8",
       "job: t\nsource: {files: [a]}\nfeatures:\n  k\xff: {dtype: int64}\n", 4, 3, "features.k\\xFF",
       {"a feature name must be UTF-8 text; byte 1 is not"}},
      {"more features than the ring holds", "job: t\nsource: {files: [a]}\nfeatures:\n" + ManyFeatures(257), 4, 3,
       "features", {"257 features; a job has at most 256"}},
      {"shape on varlen", "job: t\nsource: {files: [a]}\nfeatures:\n"
       "  x: {type: varlen, dtype: int64, shape: [3]}\n", 4, 35, "features.x.shape",
       {"'shape' is only allowed with type: fixed"}},
      {"default on varlen", "job: t\nsource: {files: [a]}\nfeatures:\n  x:\n    type: varlen\n"
       "    dtype: bytes\n    default: \"\"\n", 7, 5, "features.x.default",
       {"'default' is only allowed with type: fixed"}},
      {"default count mismatch", "job: t\nsource: {files: [a]}\nfeatures:\n  img:\n"
       "    dtype: float32\n    shape: [2, 2]\n    default: [1, 2, 3]\n", 7, 14,
       "features.img.default", {"default has 3 values but shape [2, 2] needs 4"}},
      {"a YAML tag: not read, so not ignored either", kHead + "batch: {size: !!float 4}\n", 6, 15, "batch.size",
       {"a YAML tag ('tag:yaml.org,2002:float') is not read: each key has its own type; write the value alone"}},
      {"a shape of too many elements", "job: t\nsource: {files: [a]}\nfeatures:\n  z: {dtype: int64, shape: [1099511627776, "
       "2]}\n", 4, 28,
       "features.z.shape", {"the shape's dimensions multiply to more than 1099511627776, the most elements a feature "
                            "may have"}},
      // A 0 after them does not help: the ring's checks multiply in order (breaker helper-86 took
      // "more than ... elements" for a wrong reason here).
      {"a shape of too many elements beside a 0", "job: t\nsource: {files: [a]}\nfeatures:\n  z: {dtype: int64, "
       "shape: [4294967296, 4294967296, 0]}\n", 4, 28, "features.z.shape",
       {"multiply to more than 1099511627776 (leaving its 0 out), the most elements a feature may have"}},
      // TensorFlow 2.21 (measured): FixedLenFeature([2, 0], default_value=zeros([2, 0])) is
      // "required but could not be found" for a record without it.
      {"default for a shape of no elements", "job: t\nsource: {files: [a]}\nfeatures:\n  z:\n"
       "    dtype: int64\n    shape: [2, 0]\n    default: []\n", 7, 14,
       "features.z.default", {"shape [2, 0] holds no values, so a default has nothing to fill (TensorFlow treats "
                              "it as no default"}},
      {"scalar default for shape [0]", "job: t\nsource: {files: [a]}\nfeatures: {z: {dtype: bytes, shape: [0], "
       "default: x}}\n", 3, 51, "features.z.default", {"shape [0] holds no values"}},
      {"default of the wrong type", "job: t\nsource: {files: [a]}\nfeatures:\n  n:\n"
       "    dtype: int64\n    shape: [2]\n    default: [1, two]\n", 7, 18,
       "features.n.default[1]", {"expected an integer", "got 'two'"}},
      {"float32 default out of range", "job: t\nsource: {files: [a]}\nfeatures:\n"
       "  f: {dtype: float32, default: 1e39}\n", 4, 32, "features.f.default",
       {"out of range of float32"}},
      {"decode raw on bytes dtype", "job: t\nsource: {files: [a]}\nfeatures:\n  img:\n"
       "    dtype: bytes\n    decode: raw\n", 5, 12, "features.img.dtype",
       {"dtype 'bytes' cannot be the output of 'decode: raw'"}},
      {"decode raw on varlen", "job: t\nsource: {files: [a]}\nfeatures:\n  img:\n"
       "    type: varlen\n    dtype: uint8\n    decode: raw\n", 7, 5, "features.img.decode",
       {"only allowed with type: fixed"}},
      {"default with decode raw", "job: t\nsource: {files: [a]}\nfeatures:\n  img:\n"
       "    dtype: uint8\n    decode: raw\n    default: 0\n", 7, 5, "features.img.default",
       {"cannot be combined with 'decode: raw'"}},
      {"decode word other than raw", "job: t\nsource: {files: [a]}\nfeatures:\n  img:\n"
       "    dtype: uint8\n    decode: png\n", 6, 13, "features.img.decode",
       {"unknown value 'png'; allowed values: raw"}},
      {"raw-only dtype without decode", "job: t\nsource: {files: [a]}\nfeatures:\n"
       "  img: {dtype: uint8}\n", 4, 16, "features.img.dtype", {"needs 'decode: raw'"}},
      {"unknown dtype", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: int46}\n", 4,
       14, "features.x.dtype", {"unknown dtype 'int46'", "did you mean 'int64'?"}},
      {"TensorFlow's dtype spelling", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: tf.float32}\n", 4,
       14, "features.x.dtype", {"unknown dtype 'tf.float32'", "did you mean 'float32'? (without 'tf.')"}},
      {"TensorFlow's tf.string", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: tf.string}\n", 4,
       14, "features.x.dtype", {"unknown dtype 'tf.string'", "did you mean 'bytes'?"}},
      {"string for bytes", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: string}\n", 4, 14,
       "features.x.dtype", {"unknown dtype 'string'", "did you mean 'bytes'?"}},
      {"missing dtype", "job: t\nsource: {files: [a]}\nfeatures:\n  x:\n    shape: [2]\n", 5,
       5, "features.x.dtype", {"missing required key 'dtype'"}},
      {"feature spec that is not a mapping", "job: t\nsource: {files: [a]}\nfeatures:\n"
       "  x: int64\n", 4, 6, "features.x", {"expected a mapping", "got a scalar 'int64'"}},
      {"negative dimension", "job: t\nsource: {files: [a]}\nfeatures:\n"
       "  x: {dtype: int64, shape: [4, -1]}\n", 4, 32, "features.x.shape[1]",
       {"value -1 is out of range"}},
      {"bad size unit", "job: t\nsource:\n  files: [a]\n  max_record_bytes: 64Mb\n"
       "features: {x: {dtype: int64}}\n", 4, 21, "source.max_record_bytes",
       {"invalid size '64Mb'; units are case-sensitive: did you mean 64MB?", "MB, GB, TB", "MiB"}},
      {"unset environment variable",
       "job: t\nsource:\n  files: [\"${RINGFEED_TEST_UNSET_VAR}/x\"]\n"
       "features: {x: {dtype: int64}}\n",
       3, 11, "source.files[0]",
       {"environment variable RINGFEED_TEST_UNSET_VAR is not set",
        "${RINGFEED_TEST_UNSET_VAR:-default}"}},
      {"unterminated ${", "job: t\nsource:\n  files: [\"${ROOT/x\"]\n"
       "features: {x: {dtype: int64}}\n", 3, 11, "source.files[0]", {"unterminated '${'"}},
      {"missing source.files", "job: t\nsource:\n  compression: gzip\n"
       "features: {x: {dtype: int64}}\n", 3, 3, "source.files",
       {"missing required key 'files'"}},
      {"empty source.files", "job: t\nsource:\n  files: []\nfeatures: {x: {dtype: int64}}\n",
       3, 10, "source.files", {"the list of files is empty"}},
      {"missing features", "job: t\nsource:\n  files: [a]\n", 1, 1, "features",
       {"missing required key 'features'"}},
      {"empty features", "job: t\nsource:\n  files: [a]\nfeatures: {}\n", 4, 11, "features",
       {"non-empty mapping", "got an empty mapping"}},
      {"missing job", "source: {files: [a]}\nfeatures: {x: {dtype: int64}}\n", 1, 1, "job",
       {"missing required key 'job'"}},
      {"bad job name", "job: \"taxi train!\"\nsource: {files: [a]}\n"
       "features: {x: {dtype: int64}}\n", 1, 6, "job",
       {"invalid job name 'taxi train!'", "A-Z a-z 0-9 _ . -"}},
      {"job name '..'", "job: ..\nsource: {files: [a]}\nfeatures: {x: {dtype: int64}}\n", 1, 6, "job",
       {"invalid job name '..'", "not starting with '.' or '-'"}},
      {"job name '-x'", "job: \"-x\"\nsource: {files: [a]}\nfeatures: {x: {dtype: int64}}\n", 1, 6, "job",
       {"invalid job name '-x'", "not starting with '.' or '-'"}},
      {"job name too long", "job: " + std::string(65, 'j') + "\nsource: {files: [a]}\n"
       "features: {x: {dtype: int64}}\n", 1, 6, "job", {"1 to 64 characters"}},
      {"duplicate key", "job: a\njob: b\nsource: {files: [a]}\nfeatures: {x: {dtype: int64}}\n",
       2, 1, "job", {"duplicate key 'job' (first given at line 1)"}},
      {"duplicate feature", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: int64}\n"
       "  x: {dtype: bytes}\n", 5, 3, "features.x", {"duplicate key 'x'"}},
      {"value left empty", kHead + "epochs:\n", 6, 1, "epochs",
       {"expected an integer from 0 to 2^63 - 1, got nothing (null)"}},
      {"seed out of range", kHead + "shuffle:\n  seed: -1\n", 7, 9, "shuffle.seed",
       {"out of range", "18446744073709551615"}},
      {"cpu_budget zero", kHead + "pipeline:\n  cpu_budget: 0\n", 7, 15, "pipeline.cpu_budget",
       {"out of range", "number of cores > 0"}},
      // The daemon's keys.
      {"deterministic spelled yes", kHead + "deterministic: yes\n", 6, 16, "deterministic",
       {"expected true or false, got 'yes'"}},
      {"shard index equal to count", kHead + "shard:\n  index: 4\n  count: 4\n", 7, 10,
       "shard.index", {"shard.index is 4 but shard.count is 4", "0 <= index < count (0 to 3)"}},
      {"shard index far beyond count", kHead + "shard: {index: 17, count: 8}\n", 6, 16,
       "shard.index", {"shard.index is 17 but shard.count is 8"}},
      {"negative shard index", kHead + "shard: {index: -1, count: 8}\n", 6, 16, "shard.index",
       {"value -1 is out of range", "an integer from 0 to 2^63 - 1"}},
      {"shard count zero", kHead + "shard: {index: 0, count: 0}\n", 6, 26, "shard.count",
       {"value 0 is out of range", "an integer from 1 to 2^63 - 1"}},
      {"shard without index", kHead + "shard:\n  count: 4\n", 7, 3, "shard.index",
       {"missing required key 'index'", "${NODE_RANK}"}},
      {"shard without count", kHead + "shard: {index: 0}\n", 6, 8, "shard.count",
       {"missing required key 'count'", "${NNODES}"}},
      {"shard index not a number", kHead + "shard: {index: first, count: 2}\n", 6, 16,
       "shard.index", {"expected an integer from 0 to 2^63 - 1, got 'first'"}},
      {"shard index from an unset variable",
       kHead + "shard: {index: \"${RINGFEED_TEST_UNSET_VAR}\", count: 2}\n",
       6, 16, "shard.index", {"environment variable RINGFEED_TEST_UNSET_VAR is not set",
                              "a default would make every node without it read the same shard"}},
      {"shard typo", kHead + "shard: {index: 0, cuont: 2}\n", 6, 19, "shard.cuont",
       {"unknown key 'cuont'; known keys: index, count", "did you mean 'count'?"}},
      {"ring slots one", kHead + "ring:\n  slots: 1\n", 7, 10, "ring.slots",
       {"value 1 is out of range", "auto or an integer from 2 to 256"}},
      {"ring slots above 256", kHead + "ring:\n  slots: 257\n", 7, 10, "ring.slots",
       {"value 257 is out of range", "from 2 to 256"}},
      {"ring slots word", kHead + "ring:\n  slots: many\n", 7, 10, "ring.slots",
       {"expected auto or an integer from 2 to 256, got 'many'"}},
      {"ring slot_bytes below a page", kHead + "ring:\n  slot_bytes: 4095\n", 7, 15,
       "ring.slot_bytes", {"size 4095 (4095 bytes) is out of range", "from 4096 to 68719476736"}},
      {"ring slot_bytes above 64GiB", kHead + "ring:\n  slot_bytes: 65GiB\n", 7, 15,
       "ring.slot_bytes", {"out of range", "68719476736 bytes"}},
      {"ring slot_bytes bad unit", kHead + "ring:\n  slot_bytes: 64M\n", 7, 15,
       "ring.slot_bytes", {"invalid size '64M'", "expected auto or a byte count"}},
      {"ring typo", kHead + "ring:\n  slot: 8\n", 7, 3, "ring.slot",
       {"unknown key 'slot'; known keys: slots, slot_bytes", "did you mean 'slots'?"}},
      {"consumers mode unknown", kHead + "consumers:\n  mode: rank\n", 7, 9, "consumers.mode",
       {"unknown value 'rank'; allowed values: shared, ranks", "did you mean 'ranks'?"}},
      {"consumers ranks without count", kHead + "consumers:\n  mode: ranks\n", 7, 3,
       "consumers.count", {"missing required key 'count' with mode: ranks", "1 to 64"}},
      {"consumers count with shared", kHead + "consumers:\n  mode: shared\n  count: 4\n", 8, 3,
       "consumers.count", {"'count' is only allowed with mode: ranks"}},
      {"consumers count without mode", kHead + "consumers: {count: 4}\n", 6, 13,
       "consumers.count", {"'count' is only allowed with mode: ranks"}},
      {"consumers ranks count zero", kHead + "consumers: {mode: ranks, count: 0}\n", 6, 33,
       "consumers.count", {"value 0 is out of range", "from 1 to 64"}},
      {"consumers ranks count 65", kHead + "consumers: {mode: ranks, count: 65}\n", 6, 33,
       "consumers.count", {"value 65 is out of range", "from 1 to 64"}},
      {"consumers not a mapping", kHead + "consumers: ranks\n", 6, 12, "consumers",
       {"expected a mapping with keys mode, count", "got a scalar 'ranks'"}},
      {"permissions group with a space", kHead + "permissions:\n  group: \"ml team\"\n", 7, 10,
       "permissions.group", {"invalid group name 'ml team'", "as groupadd accepts"}},
      {"permissions group numeric", kHead + "permissions: {group: 1000}\n", 6, 22,
       "permissions.group", {"invalid group name '1000'", "a letter or '_'"}},
      {"permissions group empty", kHead + "permissions: {group: \"\"}\n", 6, 22,
       "permissions.group", {"invalid group name ''"}},
      {"permissions group left out", kHead + "permissions:\n  group:\n", 7, 3,
       "permissions.group", {"expected a group name, got nothing (null)"}},
      {"permissions typo", kHead + "permissions: {gruop: ml}\n", 6, 15, "permissions.gruop",
       {"unknown key 'gruop'; known keys: group", "did you mean 'group'?"}},
      {"log_level unknown", kHead + "log_level: warning\n", 6, 12, "log_level",
       {"unknown value 'warning'; allowed values: trace, debug, info, warn, error, off; did you mean 'warn'?"}},
      {"a leading zero: octal to YAML 1.1 readers", kHead + "batch: {size: 010}\n", 6, 15, "batch.size",
       {"got '010': a leading 0 means octal to YAML 1.1 readers (PyYAML reads 010 as 8) and decimal here, so it is "
        "refused; write 10 (decimal) without the leading zeros"}},
      {"a leading zero in a default", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: int64, default: -007}\n",
       4, 30, "features.x.default", {"got '-007': a leading 0 means octal", "write 7 (decimal)"}},
      {"a leading zero in the seed", kHead + "shuffle: {seed: 00}\n", 6, 17, "shuffle.seed",
       {"got '00': a leading 0", "write 0 (decimal)"}},
      {"a leading zero in cpu_budget", kHead + "pipeline: {cpu_budget: 010}\n", 6, 24, "pipeline.cpu_budget",
       {"got '010': a leading 0 means octal"}},
      {"a leading zero in a float32 default",
       "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: float32, default: 010}\n", 4, 32,
       "features.x.default", {"expected a number for dtype float32, got '010': a leading 0 means octal"}},
      {"log_level in capitals", kHead + "log_level: WARNING\n", 6, 12, "log_level", {"did you mean 'warn'?"}},
      {"log_level information", kHead + "log_level: information\n", 6, 12, "log_level", {"did you mean 'info'?"}},
      {"a signed zero: epochs -0 would run forever", kHead + "epochs: -0\n", 6, 9, "epochs",
       {"got '-0': -0 is refused (a digit lost?); write 0 if 0 is meant"}},
      {"a feature named null unquoted", "job: t\nsource: {files: [a]}\nfeatures:\n  null: {dtype: int64}\n", 4, 3,
       "features", {"keys must be plain names, got nothing (null): YAML reads an empty key, null and ~ as no name; a "
                    "feature named null or ~ is written quoted (\"null\": ...)"}},
      {"a column after multi-byte characters counts characters, as editors do (yaml-cpp counts bytes)",
       "job: t\nsource: {files: [a]}\nfeatures:\n  \"специя\": {dtype: int46}\n", 4, 21, "features.специя.dtype",
       {"unknown dtype 'int46'"}},
      {"a column on the line of a byte order mark", "\xEF\xBB\xBFjob: a/b\nsource: {files: [a]}\n", 1, 6, "job",
       {"invalid job name 'a/b'"}},
      {"a YAML merge key", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {<<: {dtype: int64}}\n", 4, 7,
       "features.x.<<", {"unknown key '<<'", "YAML merge keys ('<<: *anchor') are not supported"}},
      {"a dotted key", kHead + "batch.size: 16\n", 6, 1, "batch.size",
       {"unknown key 'batch.size'", "; nested keys are written as a mapping, not with a dot: batch: {size: ...}"}},
      {"a nested list as a default", "job: t\nsource: {files: [a]}\nfeatures:\n  x: {dtype: int64, shape: [2, 2], "
       "default: [[1, 2], [3, 4]]}\n", 4, 46, "features.x.default[0]",
       {"default is a nested list; give the 4 values of shape [2, 2] as one flat list in row-major order"}},
      {"lines ended by CR alone", "job: t\rsource: {files: [a]}\rfeatures: {x: {dtype: int64}}\r", 1, 14, "",
       {"YAML syntax error", "; the file ends lines with CR alone (classic Mac OS), which yaml-cpp does not read as "
        "line ends: convert them to LF (e.g. tr '\\r' '\\n')"}},
      {"log_level critical", kHead + "log_level: critical\n", 6, 12, "log_level",
       {"unknown value 'critical'"}},
      {"YAML syntax error", "job: t\nsource:\n  files: [a]\n  - b\n", 4, 3, "",
       {"YAML syntax error: end of map not found"}},
      {"YAML tab indentation: yaml-cpp's message names no tab; the line that has one is named",
       "job: t\n\tsource: x\n", 2, 1, "",
       {"YAML syntax error", "; line 2 indents with a tab: YAML indents with spaces only"}},
      {"a tab indenting a nested key", "job: t\nsource:\n\tfiles: [a]\n", 3, 7, "",
       {"; line 3 indents with a tab"}},
      {"no space after a key's ':': yaml-cpp stops on the next line, the line before is named",
       "job: t\nsource:\n  files: [a]\n  compression:gzip\n  on_error: skip\n", 5, 11, "",
       {"YAML syntax error: illegal map value; line 4: 'compression:gzip' needs a space after ':' (YAML reads it as "
        "one word)"}},
      {"no space after ':' where a mapping should be", kHead + "batch:\n  size:4\n", 7, 3, "batch",
       {"got a scalar 'size:4'; YAML needs a space after ':' (write 'size: 4')"}},
      {"no space after ':' read as a key", kHead + "batch: {size: 4}\nepochs:2\n", 7, 1, "epochs:2",
       {"unknown key 'epochs:2'", "; YAML needs a space after ':' (write 'epochs: 2')"}},
      {"an unclosed '{': yaml-cpp notices lines later, the message names where it opened",
       "job: t\nsource:\n  files: [a]  # a comment with a { in it\nfeatures: {x: {dtype: int64}\n\nbatch: {size: '{'}\n"
       "epochs: 1\n",
       6, 1, "", {"YAML syntax error: end of map flow not found; the '{' at line 4, column 11 is not closed"}},
      {"an unclosed '['", "job: t\nsource:\n  files: [a, \"b]\"\nfeatures: {x: {dtype: int64}}\n", 4, 1, "",
       {"YAML syntax error: end of sequence flow not found; the '[' at line 3, column 10 is not closed"}},
      {"YAML nested 3000 deep", kHead + "batch: " + std::string(3000, '[') + std::string(3000, ']') + "\n", 6, 6008, "",
       {"YAML nested too deep here (yaml-cpp stops at ", "no job config needs that many"}},
      {"a NUL byte in the file: named where it is, not read as garbled text",
       std::string("job: a\0b\n", 9) + "source: {files: [a]}\n", 1, 7, "",
       {"control character \\x00 in the file: YAML allows none but tab, LF and CR"}},
      {"a control character in a line", kHead + "epochs: 1\x01\n", 6, 10, "", {"control character \\x01 in the file"}},
      {"a UTF-16 file", std::string("\xFF\xFEj\0o\0b\0", 8), 1, 4, "",
       {"(the file looks UTF-16 or UTF-32: save it as UTF-8)"}},
      {"an escaped NUL in a value is quoted in the message, which it does not cut short",
       "job: \"a\\0b\"\nsource: {files: [a]}\nfeatures: {x: {dtype: int64}}\n", 1, 6, "job",
       {"invalid job name 'a\\x00b'; expected 1 to 64 characters"}},
      {"two documents", std::string(kMinimal) + "---\njob: u\n", 7, 1, "",
       {"one YAML document"}},
      {"top level is a list", "- job: t\n", 1, 1, "", {"expected a mapping with keys job"}},
      {"empty config", "# nothing here\n", 0, 0, "", {"the config is empty"}},
  };

  for (const BrokenCase& c : cases) {
    DYNAMIC_SECTION(c.name) {
      INFO("config:\n" << c.yaml);
      try {
        JobConfig config = Load(c.yaml);
        FAIL("loaded without error");
      } catch (const ConfigError& e) {
        INFO("message: " << e.what());
        CHECK(e.file() == "test.yaml");
        CHECK(e.line() == c.line);
        CHECK(e.column() == c.column);
        CHECK(e.key() == c.key);
        std::string prefix = "test.yaml:";
        if (c.line > 0) prefix += std::to_string(c.line) + ":" + std::to_string(c.column) + ":";
        prefix += " ";
        if (*c.key != '\0') prefix += std::string(c.key) + ": ";
        if (c.line == 0) prefix = "test.yaml: ";
        CHECK_THAT(e.what(), Catch::StartsWith(prefix));
        for (const char* fragment : c.fragments) CHECK_THAT(e.what(), Catch::Contains(fragment));
      }
    }
  }
  CHECK(cases.size() >= 12);
}

TEST_CASE("signed and leading zeros: -0 is a float32 default, 0 and +16 are integers", "[config]") {
  // The refusals of 010 and an integer -0 (broken configs above) leave these alone.
  const JobConfig c = Load("job: t\nsource: {files: [a]}\nfeatures:\n  f: {dtype: float32, default: -0}\n"
                           "  i: {dtype: int64, default: +16}\n  z: {dtype: int64, default: 0}\n"
                           "  \"010\": {dtype: int64}\nepochs: 0\n");
  REQUIRE(c.features[0].default_float.size() == 1);
  CHECK(c.features[0].default_float[0] == 0.0f);
  CHECK(std::signbit(c.features[0].default_float[0]));
  CHECK(c.features[1].default_int64 == std::vector<int64_t>{16});
  CHECK(c.features[2].default_int64 == std::vector<int64_t>{0});
  CHECK(c.features[3].name == "010");  // a name, not a number
  CHECK(c.epochs == 0);
}

TEST_CASE("characters that show as nothing or as a space are written as escapes and named", "[config][errors]") {
  // A no-break space typed before an indentation's spaces, a zero-width space or a byte order
  // mark pasted into a key: the message showed the key as it looked, right (helper-157).
  const auto message = [](const std::string& yaml) {
    try {
      Load(yaml);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("loaded without error");
  };
  CHECK(message(kHead + "batch:\n  \u200Bsize: 16\n") ==
        "test.yaml:7:3: batch.\\u200Bsize: unknown key '\\u200Bsize': it holds characters that show as nothing or "
        "as a space (\\uXXXX above), which YAML takes as part of the key; retype it as 'size' with plain spaces "
        "around it");
  CHECK(message(kHead + "\uFEFFepochs: 2\n") ==
        "test.yaml:6:1: \\uFEFFepochs: unknown key '\\uFEFFepochs': it holds characters that show as nothing or as "
        "a space (\\uXXXX above), which YAML takes as part of the key; retype it as 'epochs' with plain spaces "
        "around it");
  CHECK(message(kHead + "\u00A0 turbo: 2\n") ==
        "test.yaml:6:1: \\u00A0 turbo: unknown key '\\u00A0 turbo': it holds characters that show as nothing or as "
        "a space (\\uXXXX above), which YAML takes as part of the key; retype it with plain spaces; known keys: job, "
        "source, features, batch, shuffle, epochs, pipeline, deterministic, shard, ring, consumers, permissions, "
        "log_level");
  CHECK_THAT(message(kHead + "batch: {size: \"16\u00A0\"}\n"), Catch::EndsWith("got '16\\u00A0'"));
  // Other UTF-8 is kept as written.
  CHECK_THAT(message(kHead + "batch: {size: \"16é\"}\n"), Catch::EndsWith("got '16é'"));
  CHECK(Escaped("a\u0085b\u00ADc\u3000d") == "a\\u0085b\\u00ADc\\u3000d");
}

TEST_CASE("config files: read errors and positions name the file", "[config][file]") {
  SECTION("missing file") {
    try {
      LoadJobConfig("/nonexistent/ringfeed/job.yaml");
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(e.line() == 0);
      CHECK(e.file() == "/nonexistent/ringfeed/job.yaml");
      CHECK_THAT(e.what(), Catch::StartsWith("/nonexistent/ringfeed/job.yaml: ") &&
                               Catch::Contains("No such file or directory"));
    }
  }
  SECTION("a directory") {
    CHECK_THROWS_WITH(LoadJobConfig("/"), Catch::StartsWith("/: ") &&
                                              Catch::Contains("Is a directory"));
  }
  SECTION("a file larger than 1 MiB, and one that never ends") {
    char path[] = "/tmp/ringfeed_config_test_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    {
      std::ofstream out(path);
      out << kMinimal;
      out << "# " << std::string(kMaxConfigBytes, 'x') << "\n";
    }
    CHECK_THROWS_WITH(LoadJobConfig(path),
                      Catch::StartsWith(std::string(path) + ": ") &&
                          Catch::Contains("config file is larger than 1024 KiB"));
    std::remove(path);
    CHECK_THROWS_WITH(LoadJobConfig("/dev/zero"),
                      Catch::StartsWith("/dev/zero: ") && Catch::Contains("larger than 1024 KiB"));
    CHECK_THROWS_WITH(LoadJobConfigFromString(std::string(kMaxConfigBytes + 1, ' ')),
                      Catch::Contains("config text is larger than 1024 KiB"));
  }
  SECTION("a FIFO: read once written (a writer already gone included); one nothing writes to is an error") {
    char dir[] = "/tmp/ringfeed_config_fifo_XXXXXX";
    REQUIRE(mkdtemp(dir) != nullptr);
    const std::string fifo = std::string(dir) + "/config";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    // A writer that writes the config and closes before the loader reads it, like `-c <(...)`.
    std::thread writer([&] {
      std::ofstream out(fifo);  // blocks until the loader opens the FIFO
      out << kMinimal;
    });
    CHECK(LoadJobConfig(fifo).path == fifo);
    writer.join();
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(LoadJobConfig(fifo), Catch::StartsWith(fifo + ": ") &&
                                               Catch::Contains("the config is a FIFO and nothing wrote to it within 10 s"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
    // A writer that writes and then keeps the FIFO open: the same limit, not a wait for ever.
    std::atomic<bool> loaded{false};
    std::thread holder([&] {
      std::ofstream out(fifo);
      out << kMinimal << std::flush;
      while (!loaded) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
    const auto held = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(LoadJobConfig(fifo),
                      Catch::Contains("the config is a FIFO and its writer did not close it (" +
                                      std::to_string(std::string(kMinimal).size()) + " bytes read) within 10 s"));
    CHECK(std::chrono::steady_clock::now() - held < std::chrono::seconds(20));
    loaded = true;
    holder.join();
    std::remove(fifo.c_str());
    rmdir(dir);
  }
  SECTION("an error inside a real file") {
    char path[] = "/tmp/ringfeed_config_test_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    {
      std::ofstream out(path);
      out << kMinimal << "batch:\n  size: 0\n";
    }
    try {
      LoadJobConfig(path);
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).rfind(std::string(path) + ":7:9: batch.size: ", 0) == 0);
    }
    {
      std::ofstream out(path);
      out << kMinimal;
    }
    CHECK(LoadJobConfig(path).path == path);
    std::remove(path);
  }
}

std::vector<std::string> Glob(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The fenced ```yaml blocks of a Markdown file, in order.
std::vector<std::string> YamlBlocks(const std::string& markdown_path) {
  std::ifstream in(markdown_path);
  std::vector<std::string> blocks;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && line == "```yaml") {
      inside = true;
      blocks.emplace_back();
    } else if (inside && line == "```") {
      inside = false;
    } else if (inside) {
      blocks.back() += line + "\n";
    }
  }
  return blocks;
}

TEST_CASE("the example in docs/config.md loads", "[config][examples]") {
  ScopedEnv rank("NODE_RANK", nullptr);
  ScopedEnv world("NNODES", nullptr);
  std::vector<std::string> blocks = YamlBlocks(kSourceDir + "/docs/config.md");
  REQUIRE(blocks.size() >= 2);
  // A multi-node config without defaults: a node whose launcher did not set the variables fails.
  CHECK_THROWS_WITH(LoadJobConfigFromString(blocks[0], "docs/config.md"),
                    Catch::Contains("shard.index: environment variable NODE_RANK is not set"));
  ScopedEnv node_rank("NODE_RANK", "2");
  ScopedEnv nnodes("NNODES", "4");
  JobConfig c = LoadJobConfigFromString(blocks[0], "docs/config.md");
  CHECK(c.job == "taxi-train");
  CHECK(c.deterministic);
  CHECK(c.shard.index == 2);
  CHECK(c.shard.count == 4);
  CHECK(c.consumers.mode == DeliveryMode::kRanks);
  CHECK(c.consumers.count == 8);
  CHECK(c.permissions.group == "trainers");
  CHECK(c.log_level == LogLevel::kInfo);
  CHECK(c.source.on_error == OnError::kSkip);
  CHECK(c.batch.drop_remainder);
  // "Every key at once": each key of the reference tables ("| `pipeline.read_ahead` |") is in
  // the example (it lacked 9 of them: helper-148).
  std::ifstream doc(kSourceDir + "/docs/config.md");
  std::string row;
  int keys = 0;
  while (std::getline(doc, row)) {
    if (!row.starts_with("| `") || row.find("` |") == std::string::npos) continue;
    const std::string key = row.substr(3, row.find("` |") - 3);
    if (key.find(' ') != std::string::npos || key.find('(') != std::string::npos) continue;  // not a key row
    const std::string leaf = key.substr(key.rfind('.') + 1);
    if (leaf == "NAME") continue;  // features.NAME: the feature names themselves
    INFO(key);
    CHECK_THAT(blocks[0], Catch::Contains(leaf + ":"));
    ++keys;
  }
  CHECK(keys >= 40);
  // The shard snippets, each on top of a minimal job.
  int snippets = 0;
  for (const std::string& block : blocks) {
    if (block.rfind("shard:", 0) != 0) continue;
    std::istringstream lines(block);
    std::string line;
    while (std::getline(lines, line)) {
      INFO(line);
      ScopedEnv node("SLURM_NODEID", "1");
      ScopedEnv nodes("SLURM_NNODES", "2");
      ScopedEnv r("NODE_RANK", "1");
      ScopedEnv w("NNODES", "2");
      JobConfig s = Load(std::string(kMinimal) + line + "\n");
      CHECK(s.shard.index == 1);
      CHECK(s.shard.count == 2);
      ++snippets;
    }
  }
  CHECK(snippets == 2);
}

TEST_CASE("every example config loads", "[config][examples]") {
  ScopedEnv data("RINGFEED_DATA", nullptr);
  ScopedEnv rank("NODE_RANK", nullptr);
  ScopedEnv nodes("NNODES", nullptr);
  std::vector<std::string> files = Glob(kSourceDir + "/config/examples/*.yaml");
  REQUIRE(files.size() >= 3);
  for (const std::string& file : files) {
    INFO(file);
    CHECK_NOTHROW(LoadJobConfig(file));
  }

  JobConfig taxi = LoadJobConfig(kSourceDir + "/config/examples/taxi.yaml");
  CHECK(taxi.job == "taxi-train");
  CHECK(taxi.source.compression == Compression::kGzip);
  REQUIRE(taxi.features.size() == 18);
  int varlen = 0;
  for (const FeatureSpec& f : taxi.features) {
    if (f.type == FeatureType::kVarLen) {
      ++varlen;
    } else {
      CHECK(f.shape.empty());
    }
    if (f.name == "company") CHECK(f.type == FeatureType::kVarLen);
    if (f.name == "payment_type") CHECK(f.dtype == DType::kBytes);
  }
  CHECK(varlen == 7);
  CHECK(taxi.deterministic);
  CHECK(taxi.shard.index == 0);
  CHECK(taxi.shard.count == 1);
  CHECK_FALSE(taxi.ring.slots);
  CHECK_FALSE(taxi.ring.slot_bytes);
  CHECK(taxi.consumers.mode == DeliveryMode::kShared);
  CHECK(taxi.permissions.group.empty());
  CHECK(taxi.log_level == LogLevel::kInfo);

  JobConfig penguin = LoadJobConfig(kSourceDir + "/config/examples/penguin.yaml");
  REQUIRE(penguin.features.size() == 5);
  CHECK(penguin.features.back().name == "species");
  CHECK(penguin.features.back().dtype == DType::kInt64);

  JobConfig mnist = LoadJobConfig(kSourceDir + "/config/examples/mnist.yaml");
  CHECK(mnist.source.files == std::vector<std::string>{"data/sample/mnist-*.tfrecord.gz"});
  REQUIRE(mnist.features.size() == 2);
  CHECK(mnist.features[0].name == "image");
  CHECK(mnist.features[0].decode_raw);
  CHECK(mnist.features[0].dtype == DType::kUInt8);
  CHECK(mnist.features[0].shape == std::vector<int64_t>{28, 28, 1});
  CHECK(mnist.features[1].name == "label");
  CHECK(mnist.features[1].dtype == DType::kInt64);
  {
    ScopedEnv set("RINGFEED_DATA", "/srv/mnist");
    CHECK(LoadJobConfig(kSourceDir + "/config/examples/mnist.yaml").source.files ==
          std::vector<std::string>{"/srv/mnist/mnist-*.tfrecord.gz"});
  }

  // The examples' globs are relative to the repository root (or under $TFX_DATA); where the
  // TFX data is present, they must find its shards.
  const char* tfx_data = std::getenv("TFX_DATA");
  const bool named = tfx_data != nullptr && *tfx_data != '\0';
  if (IsDir(named ? std::string(tfx_data) : kSourceDir + "/../shared/data/tfx")) {
    const auto resolved = [&](const std::string& glob) { return glob.starts_with("/") ? glob : kSourceDir + "/" + glob; };
    CHECK(Glob(resolved(taxi.source.files.at(0))).size() == 12);
    CHECK(Glob(resolved(penguin.source.files.at(0))).size() == 1);
  }
}

}  // namespace
}  // namespace ringfeed
