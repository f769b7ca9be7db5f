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

}  // namespace

std::string EscapeLogMessage(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  AppendEscaped(message, out);
  return out;
}

void SetLogPattern(spdlog::logger& logger, bool journal) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').set_pattern(journal ? "[%l] %*" : "%Y-%m-%d %H:%M:%S.%e [%l] %*");
  logger.set_formatter(std::move(formatter));
}

}  // namespace ringfeed
