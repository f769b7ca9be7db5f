// The control protocol between ringfeedd and its consumers (the client library): constants
// both sides compile against.
//
// Transport: a Unix stream socket at SocketPath(runtime_dir, job) (shm/names.h). Messages are
// JSON objects, one per line ('\n'-terminated, UTF-8, at most kMaxMessageBytes each).
//   consumer -> daemon  {"type":"hello","protocol":1,"role":"consumer","pid":<pid>,"rank":<int|null>}
//   daemon -> consumer  {"type":"welcome","protocol":1,"job":"<job>","segment":"<shm name>",
//                        "instance_id":"<16 hex digits>","consumer_id":<1..64>,"daemon_pid":<pid>}
//                   or  {"type":"error","message":"<why, with the fix>"} and the daemon closes.
// After the welcome the consumer keeps the connection open for its lifetime and sends nothing
// more (optionally {"type":"bye"} just before closing). The daemon takes the connection's end
// (EOF/HUP) as the consumer's death and reclaims the slots it held (shm/ring.h:
// ReclaimConsumer); the consumer takes the daemon closing it as the daemon's exit.
// instance_id is Superblock::instance_id in hex, so a consumer can tell that the segment it
// mapped belongs to the daemon that welcomed it.
#pragma once

#include <cstddef>

namespace ringfeed::shm {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxMessageBytes = 64 * 1024;

inline constexpr char kMessageHello[] = "hello";
inline constexpr char kMessageWelcome[] = "welcome";
inline constexpr char kMessageError[] = "error";
inline constexpr char kMessageBye[] = "bye";
inline constexpr char kRoleConsumer[] = "consumer";
inline constexpr char kRoleControl[] = "control";

}  // namespace ringfeed::shm
