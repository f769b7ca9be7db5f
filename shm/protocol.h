// The control protocol between ringfeedd and its consumers (the client library): constants
// both sides compile against.
//
// Transport: a Unix stream socket at SocketPath(runtime_dir, job) (shm/names.h). Messages are
// JSON objects, one per line ('\n'-terminated, UTF-8, at most kMaxMessageBytes each).
//   consumer -> daemon  {"type":"hello","protocol":1,"role":"consumer","pid":<pid>,"rank":<int|null>}
//   daemon -> consumer  {"type":"welcome","protocol":1,"job":"<job>","segment":"<shm name>",
//                        "instance_id":"<16 hex digits>","consumer_id":<1..64>,"daemon_pid":<pid>}
//                   or  {"type":"error","message":"<why, with the fix>"} and the daemon closes;
//                       with "retry":true when the refusal is for now (all its control
//                       connections taken: sent at once, before the hello; or the rank asked
//                       for is held by a process that is exiting), which the client tries
//                       again until ClientOptions::attach_timeout.
// After the welcome the consumer keeps the connection open for its lifetime and sends nothing
// more (optionally {"type":"bye"} just before closing). The daemon takes the connection's end
// (EOF/HUP) as the consumer's death and reclaims the slots it held (shm/ring.h:
// ReclaimConsumer); the consumer takes the daemon closing it as the daemon's exit.
// instance_id is Superblock::instance_id in hex, so a consumer can tell that the segment it
// mapped belongs to the daemon that welcomed it.
// The paths of a "files" reply are text (JSON strings are UTF-8, paths are bytes): every byte
// that is not part of valid UTF-8 as the four characters \xNN (upper-case hex), and a backslash
// that starts "\x" as \x5C (format/utf8.h, EscapeNonUtf8; as ringfeedctl inspect writes names),
// so that every "\x" in one starts an escape. FileNameFromWire gives the path's bytes back.
#pragma once

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace ringfeed::shm {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxMessageBytes = 64 * 1024;

inline constexpr char kMessageHello[] = "hello";
inline constexpr char kMessageWelcome[] = "welcome";
inline constexpr char kMessageError[] = "error";
inline constexpr char kMessageBye[] = "bye";
inline constexpr char kRoleConsumer[] = "consumer";
inline constexpr char kRoleControl[] = "control";

// Superblock::instance_id as the welcome and the status reply carry it: 16 lower-case hex digits.
inline std::string InstanceIdText(uint64_t id) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, id);
  return text;
}

inline std::string FileNameFromWire(std::string_view text) {
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  std::string bytes;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() && text[i + 1] == 'x' && hex(text[i + 2]) >= 0 &&
        hex(text[i + 3]) >= 0) {
      bytes += static_cast<char>(hex(text[i + 2]) * 16 + hex(text[i + 3]));
      i += 3;
    } else {
      bytes += text[i];
    }
  }
  return bytes;
}

}  // namespace ringfeed::shm
