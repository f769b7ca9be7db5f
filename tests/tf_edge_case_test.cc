// Replays tests/golden/edge_cases.json (written by tests/golden/make_edge_cases.py with
// TensorFlow 2.21): ~45 edge-case serialized Examples x ~20 feature specs. For every pair,
// ExampleParser must give what tf.io.parse_example gave, bit for bit, or fail where TensorFlow
// failed (and succeed where it succeeded). The few pairs where ringfeed deliberately follows
// protobuf instead of TensorFlow's fast parser carry a "ringfeed" result and a "divergence" reason
// in the JSON; those are checked against the ringfeed result and listed in the test output.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "format/example_batch.h"
#include "format/example_parser.h"
#include "format/feature_spec.h"
#include "tests/test_support.h"

using namespace ringfeed;
using nlohmann::json;
using ringfeed::testing::Base64Decode;

namespace {

#ifdef RINGFEED_SOURCE_DIR
const std::string kSourceDir = RINGFEED_SOURCE_DIR;
#else
const std::string kSourceDir = ".";
#endif

const json& Doc() {
  static const json doc = [] {
    std::ifstream in(kSourceDir + "/tests/golden/edge_cases.json");
    if (!in) throw std::runtime_error("cannot open tests/golden/edge_cases.json");
    return json::parse(in);
  }();
  return doc;
}

FeatureSpecs SpecsFromJson(const json& j) {
  FeatureSpecs specs;
  for (const json& f : j) {
    FeatureSpec s;
    s.name = f.at("name").get<std::string>();
    s.type = f.at("type") == "var" ? FeatureType::kVarLen : FeatureType::kFixedLen;
    auto dtype = ParseDType(f.at("dtype").get<std::string>());
    REQUIRE(dtype.has_value());
    s.dtype = *dtype;
    s.shape = f.at("shape").get<std::vector<int64_t>>();
    s.decode_raw = f.value("decode_raw", false);
    if (f.contains("default")) {
      s.has_default = true;
      if (s.dtype == DType::kInt64) {
        s.default_int64 = f.at("default").get<std::vector<int64_t>>();
      } else if (s.dtype == DType::kFloat32) {
        for (uint32_t bits : f.at("default_f32_bits").get<std::vector<uint32_t>>()) {
          float v;
          std::memcpy(&v, &bits, 4);
          s.default_float.push_back(v);
        }
      } else {
        for (const json& b : f.at("default")) s.default_bytes.push_back(Base64Decode(b.get<std::string>()));
      }
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

std::vector<std::string> Strings(const Column& c, size_t begin, size_t end) {
  std::vector<std::string> out;
  for (size_t i = begin; i < end; ++i) {
    out.emplace_back(reinterpret_cast<const char*>(c.values.data()) + c.value_offsets[i],
                     static_cast<size_t>(c.value_offsets[i + 1] - c.value_offsets[i]));
  }
  return out;
}

// Expected content of one feature of one row.
struct Expected {
  std::string data;                  // numeric: the row's values, little-endian
  size_t count = 0;                  // numeric: number of values
  std::vector<std::string> strings;  // bytes
};

Expected ExpectedFeature(const json& j) {
  Expected e;
  if (j.contains("strings")) {
    for (const json& s : j.at("strings")) e.strings.push_back(Base64Decode(s.get<std::string>()));
  } else {
    e.data = Base64Decode(j.at("data").get<std::string>());
    e.count = j.at("count").get<size_t>();
  }
  return e;
}

// Checks row `row` of `batch` against `expected` (feature name -> Expected).
void CheckRow(const ExampleBatch& batch, size_t row, const std::map<std::string, Expected>& expected) {
  for (size_t i = 0; i < batch.specs().size(); ++i) {
    const FeatureSpec& s = batch.specs()[i];
    const Column& c = batch.column(i);
    INFO("feature " << s.name << " row " << row);
    const Expected& e = expected.at(s.name);
    const bool fixed = s.type == FeatureType::kFixedLen;
    if (s.dtype == DType::kBytes) {
      size_t begin, end;
      if (fixed) {
        begin = row * static_cast<size_t>(s.NumElements());
        end = begin + static_cast<size_t>(s.NumElements());
      } else {
        begin = static_cast<size_t>(c.row_splits.at(row));
        end = static_cast<size_t>(c.row_splits.at(row + 1));
      }
      CHECK(Strings(c, begin, end) == e.strings);
    } else {
      const size_t elem = DTypeSize(s.dtype);
      size_t begin, end;
      if (fixed) {
        CHECK(e.count == static_cast<size_t>(s.NumElements()));
        begin = row * static_cast<size_t>(s.NumElements());
        end = begin + static_cast<size_t>(s.NumElements());
      } else {
        begin = static_cast<size_t>(c.row_splits.at(row));
        end = static_cast<size_t>(c.row_splits.at(row + 1));
      }
      CHECK(end - begin == e.count);
      REQUIRE(c.values.size() >= end * elem);
      const std::string got(reinterpret_cast<const char*>(c.values.data()) + begin * elem, (end - begin) * elem);
      CHECK(got == e.data);  // bit-exact
    }
  }
}

std::map<std::string, Expected> ExpectedRow(const json& result) {
  std::map<std::string, Expected> out;
  for (const auto& [name, f] : result.at("features").items()) out[name] = ExpectedFeature(f);
  return out;
}

}  // namespace

TEST_CASE("edge cases: ExampleParser agrees with tf.io.parse_example (TensorFlow 2.21)") {
  const json& doc = Doc();
  INFO("edge_cases.json written with TensorFlow " << doc.at("tensorflow").get<std::string>());
  std::map<std::string, std::string> records;
  for (const json& r : doc.at("records")) records[r.at("name")] = Base64Decode(r.at("data").get<std::string>());
  std::map<std::string, std::unique_ptr<ExampleParser>> parsers;
  for (const auto& [name, spec] : doc.at("specs").items())
    parsers[name] = std::make_unique<ExampleParser>(SpecsFromJson(spec));

  size_t checked = 0, agree_ok = 0, agree_error = 0;
  std::set<std::string> divergent;
  for (const json& res : doc.at("results")) {
    const std::string record = res.at("record"), spec = res.at("spec");
    INFO("record " << record << ", spec " << spec);
    const bool diverges = res.contains("divergence");
    const json& want = diverges ? res.at("ringfeed") : res.at("tf");
    if (diverges) {
      divergent.insert(record);
      INFO("known divergence: " << res.at("divergence").get<std::string>());
    }
    const ExampleParser& parser = *parsers.at(spec);
    ExampleBatch batch(parser.specs(), 1);
    ParseError error;
    const std::string& bytes = records.at(record);
    const bool ok = parser.Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, batch, &error);
    ++checked;
    if (want.at("ok").get<bool>()) {
      INFO("ringfeed error: " << error.message);
      REQUIRE(ok);
      CheckRow(batch, 0, ExpectedRow(want));
      if (!diverges) ++agree_ok;
    } else {
      INFO("expected error: " << want.value("class", "") << ": " << want.value("message", ""));
      CHECK_FALSE(ok);
      CHECK(batch.rows() == 0);
      if (ok) continue;
      CHECK_FALSE(error.message.empty());
      // The key named must be one the documented semantics says is wrong ("" = structural error,
      // which may also be reported against the key whose Feature is malformed).
      const auto keys = res.value("error_keys", std::vector<std::string>{});
      if (!keys.empty() && keys != std::vector<std::string>{""}) {
        INFO("ringfeed error: " << error.message);
        CHECK(std::find(keys.begin(), keys.end(), error.key) != keys.end());
        if (!error.key.empty()) CHECK(error.message.find("'" + error.key + "'") != std::string::npos);
      }
      if (!diverges) ++agree_error;
    }
  }
  CHECK(checked == doc.at("results").size());
  CHECK(checked > 800);
  WARN("edge cases: " << checked << " checked; agree with TF: " << agree_ok << " values, " << agree_error
                      << " errors; known divergences in " << divergent.size() << " records");
}

TEST_CASE("edge cases: all records of a spec parsed into one batch, failures rolled back") {
  const json& doc = Doc();
  std::map<std::string, std::string> records;
  for (const json& r : doc.at("records")) records[r.at("name")] = Base64Decode(r.at("data").get<std::string>());
  std::map<std::string, std::vector<const json*>> by_spec;
  for (const json& res : doc.at("results")) by_spec[res.at("spec")].push_back(&res);
  for (const auto& [spec, results] : by_spec) {
    INFO("spec " << spec);
    ExampleParser parser(SpecsFromJson(doc.at("specs").at(spec)));
    ExampleBatch batch(parser.specs(), results.size());
    std::vector<std::map<std::string, Expected>> rows;
    for (const json* res : results) {
      const json& want = res->contains("divergence") ? res->at("ringfeed") : res->at("tf");
      const std::string& bytes = records.at(res->at("record"));
      ParseError error;
      const bool ok = parser.Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, batch, &error);
      CHECK(ok == want.at("ok").get<bool>());
      if (ok && want.at("ok").get<bool>()) rows.push_back(ExpectedRow(want));
    }
    REQUIRE(batch.rows() == rows.size());
    for (size_t r = 0; r < rows.size(); ++r) CheckRow(batch, r, rows[r]);
  }
}
