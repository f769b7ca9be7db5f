// ringfeedd's log lines: "<time> [<level>] <message>", one log record per line as far as a
// reader can tell. Under systemd (JOURNAL_STREAM set) "<P>[<level>] <message>": no time (the
// journal adds its own) and the level as a syslog priority P that journald takes from the line's
// start (sd-daemon(3)'s SD_ERR etc.: critical 2, error 3, warning 4, info 6, debug and trace 7),
// so `journalctl -p warning` shows the warnings and errors.
//
// A message may carry text from outside: file names from a glob over a data directory, a
// config's values. A file named "x\n2026-12-05 10:00:00.000 [error] ..." must not print a
// line that looks like a record of its own, nor a name with terminal escapes colour or move the
// operator's terminal. So the message's control characters are written escaped: a newline
// stays a newline followed by four spaces (multi-line messages, such as the memory plan at debug
// level, stay readable and their continuation lines are indented; a message's last newline is
// left out, spdlog ending the line), a tab stays, and every other byte below 0x20 and DEL becomes
// \xNN. Bytes from 0x80 on are written as they are.
//
// Thread-safety: SetLogPattern before logging starts (spdlog formatters are not changed
// concurrently with logging); the formatter itself is called under the sink's lock.
#pragma once

#include <spdlog/logger.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ringfeed {

// The escaped form of `message`, as the log line shows it.
std::string EscapeLogMessage(std::string_view message);

// Sets `logger`'s pattern: with the time, or (journal: under systemd, JOURNAL_STREAM set) with
// the priority prefix instead; either way the message escaped as above.
void SetLogPattern(spdlog::logger& logger, bool journal);

// The syslog priority of `level` for the journal's "<P>" prefix (sd-daemon(3)).
int JournalPriority(spdlog::level::level_enum level);

// The time at the start of a log line with the time, "YYYY-MM-DD HH:MM:SS.mmm " (SetLogPattern's
// "%Y-%m-%d %H:%M:%S.%e "), for `unix_ns` (nanoseconds since the epoch, CLOCK_REALTIME, from
// 1970 on) in a zone `utc_offset_seconds` east of UTC (localtime_r's tm_gmtoff). Writes
// kLogTimeBytes bytes to `out`, no NUL. Async-signal-safe, arithmetic only, for a signal handler
// (which may not call localtime_r): the date from the day count by H. Hinnant's
// civil_from_days ("chrono-Compatible Low-Level Date Algorithms").
inline constexpr size_t kLogTimeBytes = 24;
void FormatLogTime(int64_t unix_ns, long utc_offset_seconds, char* out);

}  // namespace ringfeed
