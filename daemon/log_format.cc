#include "daemon/log_format.h"

#include <spdlog/pattern_formatter.h>

#include <memory>

namespace ringfeed {

std::string EscapeLogMessage(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\n    ";
    } else if ((byte < 0x20 && c != '\t') || byte == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// %* in the pattern: the message, escaped (EscapeLogMessage).
class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    // Most messages have nothing to escape: copied as they are.
    bool plain = true;
    for (const char c : payload) {
      const auto byte = static_cast<unsigned char>(c);
      if ((byte < 0x20 && c != '\t') || byte == 0x7f) {
        plain = false;
        break;
      }
    }
    const std::string escaped = plain ? std::string() : EscapeLogMessage(payload);
    const std::string_view text = plain ? payload : std::string_view(escaped);
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

}  // namespace

void SetLogPattern(spdlog::logger& logger, bool journal) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').set_pattern(journal ? "[%l] %*" : "%Y-%m-%d %H:%M:%S.%e [%l] %*");
  logger.set_formatter(std::move(formatter));
}

}  // namespace ringfeed
