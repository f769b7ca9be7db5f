// ringfeedd's log lines (daemon/log_format.h): control characters in a message cannot start a
// line that reads as a record of its own.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <sstream>

#include "daemon/log_format.h"

using namespace ringfeed;

TEST_CASE("log messages: a newline is followed by an indent, other control characters are escaped") {
  CHECK(EscapeLogMessage("plain text, tab\there, UTF-8 \xc3\xa9") == "plain text, tab\there, UTF-8 \xc3\xa9");
  CHECK(EscapeLogMessage("line 1\nline 2") == "line 1\n    line 2");
  CHECK(EscapeLogMessage("plan:\n  ring: 2 slots\n") == "plan:\n      ring: 2 slots");  // no empty line after it
  CHECK(EscapeLogMessage("\n\n") == "\n    ");
  CHECK(EscapeLogMessage(std::string("a\rb\x1b[31mc\x7f\0d", 12)) == "a\\x0db\\x1b[31mc\\x7f\\x00d");

  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  spdlog::logger logger("test", sink);
  SetLogPattern(logger, /*journal=*/true);
  // A file named to forge a record: its newline no longer starts a line with "[error]".
  logger.warn("cannot read {}: gone", "/data/x\n[error] forged.tfrecord");
  logger.info("memory budget 64.0 MiB:\n  ring: 2 slots");
  CHECK(out.str() ==
        "[warning] cannot read /data/x\n    [error] forged.tfrecord: gone\n"
        "[info] memory budget 64.0 MiB:\n      ring: 2 slots\n");

  std::ostringstream timed;
  spdlog::logger with_time("test", std::make_shared<spdlog::sinks::ostream_sink_st>(timed));
  SetLogPattern(with_time, /*journal=*/false);
  with_time.error("x\x1b]0;title\x07y");
  const std::string line = timed.str();
  CHECK(line.size() == 24 + std::string("[error] x\\x1b]0;title\\x07y\n").size());  // "YYYY-MM-DD HH:MM:SS.mmm "
  CHECK(line.substr(24) == "[error] x\\x1b]0;title\\x07y\n");
}
