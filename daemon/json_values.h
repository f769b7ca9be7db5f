// Values in ringfeedctl's JSON (`inspect` records, `dump` batches).
//
//   Float32Json(f)  the shortest decimal that reads back as the same float32 (0.1f prints 0.1,
//                   not 0.10000000149011612: to_chars(float) gives those digits, and nlohmann
//                   prints the double they read as with the same digits); NaN and infinities as
//                   the strings "nan", "inf", "-inf" (JSON has no literal for them).
//   Float64Json(d)  the same for a float64 value.
//   Base64Encode(b) bytes values: standard base64 (RFC 4648 alphabet, '=' padding).
//   BytesJson(v, f) one bytes value as `--bytes` asks: base64 (the default: every value a
//                   string, whatever its bytes) or text (a value that is valid UTF-8 as that
//                   string, any other as {"base64": "..."}, so that no byte is lost or guessed).
//
// Thread-safety: pure functions.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "format/utf8.h"

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

inline std::string Base64Encode(std::span<const uint8_t> bytes) {
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

enum class BytesFormat { kBase64, kText };

inline nlohmann::ordered_json BytesJson(std::string_view v, BytesFormat format) {
  std::string base64 = Base64Encode({reinterpret_cast<const uint8_t*>(v.data()), v.size()});
  if (format == BytesFormat::kBase64) return base64;
  if (IsUtf8(v)) return std::string(v);
  return {{"base64", std::move(base64)}};
}

}  // namespace ringfeed
