// UTF-8 validity (RFC 3629): no overlong forms, no UTF-16 surrogates (U+D800..U+DFFF), nothing
// past U+10FFFF. One definition for every place that must tell text from bytes: config feature
// names, ringfeedctl's JSON output.
//
//   Utf8SequenceLength(s, i)  the length (1-4) of the valid UTF-8 sequence at s[i], or 0 when
//                             the bytes there are not one (i < s.size()).
//   InvalidUtf8At(s)          the offset of the first byte that is not valid UTF-8, or npos.
//   IsUtf8(s)                 InvalidUtf8At(s) == npos.
//   Utf8Prefix(s, max)        the length of the longest prefix of s of at most max bytes that ends
//                             at a character boundary (a byte that is not valid UTF-8 counts as
//                             one character): where to cut text so that no character is split.
//   EscapeNonUtf8(bytes)      `bytes` as text: valid UTF-8 is kept, every other byte becomes the
//                             four characters \xNN (upper-case hex), and a backslash followed by
//                             'x' becomes \x5C, so the mapping is one-to-one (\xNN always stands
//                             for one byte; shm::FileNameFromWire inverts it). How names that may
//                             not be text go into JSON: ringfeedctl inspect's, ringfeedd's file list.
//   InvisibleAt(s, i, &len)   the code point of the UTF-8 character at s[i] when it shows as nothing
//                             or as a plain space (C1 controls U+0080-U+009F, U+00A0 no-break space,
//                             U+00AD, U+2000-U+200F spaces and zero-width characters, U+2028-U+202F,
//                             U+205F-U+2064, U+3000, U+FEFF byte order mark), its length in *len;
//                             else 0.
//   EscapeForMessage(s, ascii_only)
//                             `s` for an error message: C0 controls and DEL as \xHH (so that a tab or
//                             NUL never garbles or cuts a message), InvisibleAt's characters as
//                             \uXXXX (a key that looks right and is not can be seen), other UTF-8 as
//                             written; with ascii_only every byte above 0x7E as \xHH.
//   QuotedName(s)             "'" + EscapeForMessage(s) + "'": a feature or key name in messages.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace ringfeed {

inline size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  const size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  }
  // Overlong 3/4-byte forms, UTF-16 surrogates and code points past U+10FFFF.
  if ((c == 0xe0 && b(i + 1) < 0xa0) || (c == 0xed && b(i + 1) >= 0xa0) || (c == 0xf0 && b(i + 1) < 0x90) ||
      (c == 0xf4 && b(i + 1) >= 0x90)) {
    return 0;
  }
  return n;
}

inline size_t InvalidUtf8At(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

inline bool IsUtf8(std::string_view s) { return InvalidUtf8At(s) == std::string_view::npos; }

inline std::string EscapeNonUtf8(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8SequenceLength(bytes, i);
    // A backslash that starts "\x" is escaped too, so that the text of a byte (0xFF: \xFF) and
    // the same four characters in a name (\x5CxFF) differ.
    const bool starts_escape = bytes[i] == '\\' && i + 1 < bytes.size() && bytes[i + 1] == 'x';
    if (n == 0 || starts_escape) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", static_cast<unsigned char>(bytes[i]));
      out += escaped;
      ++i;
    } else {
      out.append(bytes, i, n);
      i += n;
    }
  }
  return out;
}

inline char32_t InvisibleAt(std::string_view s, size_t i, size_t* length) {
  const auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  if (at(0) == 0xC2 && ((at(1) >= 0x80 && at(1) <= 0xA0) || at(1) == 0xAD)) {
    *length = 2;
    return at(1);  // U+0080-U+00A0, U+00AD
  }
  if (at(0) < 0xE0 || at(0) > 0xEF || (at(1) & 0xC0) != 0x80 || (at(2) & 0xC0) != 0x80) return 0;
  const char32_t cp = ((at(0) & 0x0Fu) << 12) | ((at(1) & 0x3Fu) << 6) | (at(2) & 0x3Fu);
  const bool invisible = (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
                         (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF;
  if (!invisible) return 0;
  *length = 3;
  return cp;
}

inline std::string EscapeForMessage(std::string_view s, bool ascii_only = false) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto byte = static_cast<unsigned char>(s[i]);
    size_t length = 0;
    if (!ascii_only && byte > 0x7F) {
      if (const char32_t cp = InvisibleAt(s, i, &length)) {
        char text[16];  // "\\u" and 4 to 8 hex digits: GCC's -Wformat-truncation counts 8
        std::snprintf(text, sizeof text, "\\u%04X", static_cast<unsigned>(cp));
        out += text;
        i += length - 1;
        continue;
      }
    }
    if (byte < 0x20 || byte == 0x7F || (ascii_only && byte > 0x7F)) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", byte);
      out += hex;
    } else {
      out += s[i];
    }
  }
  return out;
}

inline std::string QuotedName(std::string_view s) { return "'" + EscapeForMessage(s) + "'"; }

inline size_t Utf8Prefix(std::string_view s, size_t max) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = Utf8SequenceLength(s, i);
    const size_t step = n == 0 ? 1 : n;
    if (i + step > max) break;
    i += step;
  }
  return i;
}

}  // namespace ringfeed
