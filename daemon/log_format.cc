#include "daemon/log_format.h"

#include <spdlog/pattern_formatter.h>

#include <memory>

namespace ringfeed {

namespace {

bool Escaped(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return (byte < 0x20 && c != '\t') || byte == 0x7f;
}

// Appends `message` escaped to `out` (a std::string or spdlog's memory buffer).
template <typename Out>
void AppendEscaped(std::string_view message, Out& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  // A message's last newline ends the line spdlog ends anyway: no empty, indented line after it.
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  for (const char c : message) {
    if (c == '\n') {
      static constexpr std::string_view kNewline = "\n    ";
      out.append(kNewline.data(), kNewline.data() + kNewline.size());
    } else if (Escaped(c)) {
      const auto byte = static_cast<unsigned char>(c);
      const char hex[4] = {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
      out.append(hex, hex + 4);
    } else {
      out.push_back(c);
    }
  }
}

// %* in the pattern: the message, escaped (EscapeLogMessage).
class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    AppendEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

// %J in the pattern: "<P>", the journal's priority prefix (JournalPriority).
class JournalPrefix : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const char prefix[3] = {'<', static_cast<char>('0' + JournalPriority(msg.level)), '>'};
    dest.append(prefix, prefix + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JournalPrefix>(); }
};

}  // namespace

int JournalPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return 2;  // LOG_CRIT
    case spdlog::level::err: return 3;       // LOG_ERR
    case spdlog::level::warn: return 4;      // LOG_WARNING
    case spdlog::level::info: return 6;      // LOG_INFO
    default: return 7;                       // LOG_DEBUG: debug, trace
  }
}

std::string EscapeLogMessage(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  AppendEscaped(message, out);
  return out;
}

void SetLogPattern(spdlog::logger& logger, bool journal) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').add_flag<JournalPrefix>('J').set_pattern(
      journal ? "%J[%l] %*" : "%Y-%m-%d %H:%M:%S.%e [%l] %*");
  logger.set_formatter(std::move(formatter));
}

void FormatLogTime(int64_t unix_ns, long utc_offset_seconds, char* out) {
  const int64_t local_ms = unix_ns / 1'000'000 + int64_t{utc_offset_seconds} * 1000;
  const int64_t ms_of_day = ((local_ms % 86'400'000) + 86'400'000) % 86'400'000;
  const int64_t days = (local_ms - ms_of_day) / 86'400'000;
  // civil_from_days: eras of 400 years (146097 days) from 0000-03-01.
  const int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;                                  // [0, 146096]
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // [0, 399]
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);          // [0, 365]
  const int64_t mp = (5 * doy + 2) / 153;                                // [0, 11], from March
  const int64_t day = doy - (153 * mp + 2) / 5 + 1;
  const int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  auto put = [&out](int64_t value, int digits) {
    for (int i = digits - 1; i >= 0; --i, value /= 10) out[i] = static_cast<char>('0' + value % 10);
    out += digits;
  };
  put(year, 4);
  *out++ = '-';
  put(month, 2);
  *out++ = '-';
  put(day, 2);
  *out++ = ' ';
  put(ms_of_day / 3'600'000, 2);
  *out++ = ':';
  put(ms_of_day / 60'000 % 60, 2);
  *out++ = ':';
  put(ms_of_day / 1000 % 60, 2);
  *out++ = '.';
  put(ms_of_day % 1000, 3);
  *out = ' ';
}

}  // namespace ringfeed
