// The order-defining algorithms (daemon/shuffle.h) against published reference values and
// against tests/golden/shuffle_order.json, which an independent Python implementation wrote
// from the documentation alone (tests/golden/make_shuffle_order.py).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon/shuffle.h"
#include "tests/test_support.h"

using namespace ringfeed;

TEST_CASE("SplitMix64 matches the reference implementation") {
  // splitmix64.c started at 0: the first outputs published with it.
  SplitMix64 sm(0);
  CHECK(sm.Next() == 0xe220a8397b1dcdafull);
  CHECK(sm.Next() == 0x6e789e6aa1b965f4ull);
  CHECK(sm.Next() == 0x06c45d188009454full);
}

TEST_CASE("xoshiro256** matches the reference implementation") {
  // xoshiro256starstar.c with state {1, 2, 3, 4} (the test vector other ports use too).
  const uint64_t state[4] = {1, 2, 3, 4};
  Xoshiro256StarStar rng(state);
  CHECK(rng.Next() == 11520u);
  CHECK(rng.Next() == 0u);
  CHECK(rng.Next() == 1509978240u);
  CHECK(rng.Next() == 1215971899390074240ull);
}

TEST_CASE("UniformBelow stays in range and covers it") {
  Xoshiro256StarStar rng(7, RngStream::kRecordShuffle, 0);
  for (uint64_t n : {1ull, 2ull, 3ull, 10ull, 1000ull, (1ull << 63) + 5}) {
    for (int i = 0; i < 1000; ++i) REQUIRE(rng.UniformBelow(n) < n);
  }
  std::vector<int> seen(6, 0);
  for (int i = 0; i < 6000; ++i) ++seen[rng.UniformBelow(6)];
  for (int count : seen) CHECK(count > 800);  // ~1000 each
}

TEST_CASE("orders match the independent implementation of the documented algorithms") {
  std::ifstream in(std::string(RINGFEED_SOURCE_DIR) + "/tests/golden/shuffle_order.json");
  REQUIRE(in);
  const nlohmann::json golden = nlohmann::json::parse(in);

  for (const auto& c : golden["raw"]) {
    Xoshiro256StarStar rng(c["seed"].get<uint64_t>(), static_cast<RngStream>(c["stream"].get<uint64_t>()),
                           c["epoch"].get<uint64_t>());
    for (const auto& v : c["first"]) CHECK(rng.Next() == std::stoull(v.get<std::string>()));
  }
  REQUIRE(golden["file_order"].size() == 36);
  for (const auto& c : golden["file_order"]) {
    std::vector<int> v(c["n"].get<size_t>());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i);
    Xoshiro256StarStar rng(c["seed"].get<uint64_t>(), RngStream::kFileOrder, c["epoch"].get<uint64_t>());
    FisherYatesShuffle(v, rng);
    CHECK(v == c["order"].get<std::vector<int>>());
  }
  REQUIRE(golden["shuffle_buffer"].size() == 80);
  for (const auto& c : golden["shuffle_buffer"]) {
    ShuffleBuffer<int> buffer(c["capacity"].get<size_t>(),
                              Xoshiro256StarStar(c["seed"].get<uint64_t>(), RngStream::kRecordShuffle,
                                                 c["epoch"].get<uint64_t>()));
    std::vector<int> out;
    for (int i = 0; i < c["n"].get<int>(); ++i) {
      if (!buffer.full()) buffer.Add(i);
      else out.push_back(buffer.Exchange(i));
    }
    while (!buffer.empty()) out.push_back(buffer.Drain());
    INFO("seed " << c["seed"] << " epoch " << c["epoch"] << " n " << c["n"] << " capacity " << c["capacity"]);
    CHECK(out == c["order"].get<std::vector<int>>());
  }
}

TEST_CASE("a capacity of 0 or 1 keeps the input order") {
  for (size_t capacity : {size_t{0}, size_t{1}}) {
    ShuffleBuffer<int> buffer(capacity, Xoshiro256StarStar(1, RngStream::kRecordShuffle, 0));
    std::vector<int> out;
    for (int i = 0; i < 5; ++i) {
      if (!buffer.full()) buffer.Add(i);
      else out.push_back(buffer.Exchange(i));
    }
    while (!buffer.empty()) out.push_back(buffer.Drain());
    CHECK(out == std::vector<int>{0, 1, 2, 3, 4});
  }
}
