// Float values in ringfeedctl's JSON (`inspect` records, `dump` batches).
//
//   Float32Json(f)  the shortest decimal that reads back as the same float32 (0.1f prints 0.1,
//                   not 0.10000000149011612: to_chars(float) gives those digits, and nlohmann
//                   prints the double they read as with the same digits); NaN and infinities as
//                   the strings "nan", "inf", "-inf" (JSON has no literal for them).
//   Float64Json(d)  the same for a float64 value.
//
// Thread-safety: pure functions.
#pragma once

#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

namespace ringfeed {

inline nlohmann::ordered_json Float64Json(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return d;
}

inline nlohmann::ordered_json Float32Json(float f) {
  if (!std::isfinite(f)) return Float64Json(f);
  char text[64];
  const auto written = std::to_chars(text, text + sizeof text, f);
  double d = 0;
  std::from_chars(text, written.ptr, d);
  return d;
}

}  // namespace ringfeed
