// ringfeedd's log lines (daemon/log_format.h): control characters in a message cannot start a
// line that reads as a record of its own.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <string>

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
  logger.error("e");
  logger.critical("c");
  logger.set_level(spdlog::level::trace);
  logger.debug("d");
  logger.trace("t");
  // Under systemd each line starts with its syslog priority, which journald takes for the entry.
  CHECK(out.str() ==
        "<4>[warning] cannot read /data/x\n    [error] forged.tfrecord: gone\n"
        "<6>[info] memory budget 64.0 MiB:\n      ring: 2 slots\n"
        "<3>[error] e\n<2>[critical] c\n<7>[debug] d\n<7>[trace] t\n");

  std::ostringstream timed;
  spdlog::logger with_time("test", std::make_shared<spdlog::sinks::ostream_sink_st>(timed));
  SetLogPattern(with_time, /*journal=*/false);
  with_time.error("x\x1b]0;title\x07y");
  const std::string line = timed.str();
  CHECK(line.size() == 24 + std::string("[error] x\\x1b]0;title\\x07y\n").size());  // "YYYY-MM-DD HH:MM:SS.mmm "
  CHECK(line.substr(24) == "[error] x\\x1b]0;title\\x07y\n");
}

TEST_CASE("log times for a signal handler: FormatLogTime gives glibc's gmtime_r date and time in the zone asked") {
  auto glibc = [](int64_t unix_ns, long offset) {
    const int64_t ms = unix_ns / 1'000'000;
    const time_t seconds = static_cast<time_t>(ms / 1000 + offset);
    tm t{};
    REQUIRE(gmtime_r(&seconds, &t) != nullptr);
    char text[64];
    const size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &t);
    char millis[8];
    std::snprintf(millis, sizeof millis, ".%03d ", static_cast<int>(ms % 1000));
    return std::string(text, n) + millis;
  };
  auto ours = [](int64_t unix_ns, long offset) {
    char text[kLogTimeBytes + 1] = {};
    FormatLogTime(unix_ns, offset, text);
    return std::string(text, kLogTimeBytes);
  };
  CHECK(ours(0, 0) == "1970-01-01 00:00:00.000 ");
  CHECK(ours(951'782'400'123'456'789, 0) == "2000-02-29 00:00:00.123 ");         // a leap day of a year % 400
  CHECK(ours(4'107'542'399'999'000'000, 1) == "2100-03-01 00:00:00.999 ");       // 2100 is no leap year
  CHECK(ours(1'796'559'999'000'000'000, -5 * 3600) == "2026-12-06 07:26:39.000 ");  // a zone west of UTC
  // Many instants up to 2242 in zones from -12:00 to +14:00 (and India's +05:30), each against
  // glibc's own calendar.
  uint64_t x = 0x9e3779b97f4a7c15;
  int checked = 0;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    const int64_t unix_ns = static_cast<int64_t>(x % (int64_t{1} << 33)) * 1'000'000'000 + static_cast<int64_t>(x % 1'000'000'000);
    for (long offset : {-12 * 3600L, -3 * 3600L - 1800, 0L, 5 * 3600L + 1800, 14 * 3600L}) {
      if (unix_ns / 1'000'000'000 + offset < 0) continue;
      const std::string expected = glibc(unix_ns, offset), got = ours(unix_ns, offset);
      if (got != expected) FAIL("FormatLogTime(" << unix_ns << ", " << offset << ") = " << got << ", glibc " << expected);
      ++checked;
    }
  }
  CHECK(checked > 99000);
  // Beside spdlog's line for the same moment (this process's zone): the same second, or the next.
  std::ostringstream timed;
  spdlog::logger with_time("test", std::make_shared<spdlog::sinks::ostream_sink_st>(timed));
  SetLogPattern(with_time, /*journal=*/false);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  with_time.info("now");
  const time_t seconds = now.tv_sec;
  tm local{};
  localtime_r(&seconds, &local);
  const std::string before = ours(int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec, local.tm_gmtoff);
  const std::string after = ours((int64_t{now.tv_sec} + 1) * 1'000'000'000, local.tm_gmtoff);
  const std::string logged = timed.str().substr(0, 19);
  CHECK((logged == before.substr(0, 19) || logged == after.substr(0, 19)));
}
