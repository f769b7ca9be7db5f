// Where a job's control socket and shared-memory segment live, computed the same way by
// ringfeedd and by the client library.
//
//   RuntimeDir()        $RINGFEED_RUNTIME_DIR, else $RUNTIME_DIRECTORY (set by systemd's
//                       RuntimeDirectory=; the first of several ':'-separated paths), else
//                       /run/ringfeed for root, else $XDG_RUNTIME_DIR/ringfeed, else
//                       /tmp/ringfeed-<uid>. Empty variables count as unset.
//   IsValidJobName(job) 1 to kMaxJobNameBytes (64) characters from A-Z a-z 0-9 _ . -, not starting
//                       with '.' (".", ".." and ".x" would name hidden or parent files) or '-'
//                       (ringfeedctl would read it as an option): the rule of the config's
//                       job: key, checked again by the client before a path is made of it.
//   SocketPath(d, job)  d + "/" + job + ".sock"
//   SubdirectoriesWithSocket(d, job)
//                       the subdirectories of d (sorted) holding a file at SocketPath(sub, job):
//                       systemd's RuntimeDirectory=ringfeed/%i gives each instance of
//                       ringfeed@.service its own, /run/ringfeed/<instance>. Whether a daemon
//                       listens there is the caller's to check (SocketListener).
//   NobodyListens(path) whether the socket at path is one nobody listens on: a connect is
//                       refused (ECONNREFUSED); false for any other answer (a listener, a
//                       full queue, no permission, no socket).
//   SocketListener(path)
//                       the process listening on the Unix socket at path: its pid as of its
//                       listen() (SO_PEERCRED, unix(7); 0 when it is in a PID namespace this
//                       process cannot see, or when its queue of connections is full, so no
//                       credentials came back: `queue_full`), or nullopt when nothing listens
//                       there (a socket file left by a daemon that was killed answers
//                       ECONNREFUSED) or that cannot be told (no socket there, no permission to
//                       connect). One non-blocking connect, closed at once: the daemon sees a
//                       connection that says no hello.
//   SegmentName(d, job) "/ringfeed." + job + "." + 16 lower-case hex digits of FNV-1a-64 of the
//                       directory's identity: its canonical path (symbolic links and a relative
//                       d resolved), then ":<st_dev>" of its file system when it exists. So two
//                       daemons in different runtime directories never share a segment, even when
//                       the same string names both (`run` from two working directories,
//                       /run/ringfeed in two containers, each with its own /run, that share
//                       /dev/shm). Not the inode: systemd recreates a unit's RuntimeDirectory at
//                       every restart, and a restarted daemon must find (and replace) the segment
//                       a crashed one left. Only ringfeedd computes it (clients get the name from
//                       its hello); the directory should exist by then.
//   FallbackRuntimeDir() "/tmp/ringfeed-<euid>": RuntimeDir()'s last choice.
//   RuntimeDirProblem(d)
//                       for ringfeedd before it puts its lock file and socket in d: why d is not
//                       safe to use, or "" when it is. d must be a directory (links followed)
//                       owned by this user or root, that this user may write in and every user
//                       may not, reached through no symbolic link of another user than root or
//                       this one, and not in this user's FallbackRuntimeDir when another user
//                       made that name (a directory or a link). Otherwise another user could replace the
//                       socket and the lock file: a /tmp/ringfeed-<uid> made by someone else
//                       first (/tmp is everyone's to write in) gave that user the job's trainers.
//   UntrustedDaemon(socket, peer_uid)
//                       for a client that connected to `socket` and got a daemon running as
//                       `peer_uid` (SO_PEERCRED): why it should not trust that daemon, or "" when
//                       it may. Trusted: this user's own or root's; another user's (a systemd
//                       service user with permissions.group) only when the socket is not in
//                       this user's FallbackRuntimeDir made by another user, no symbolic link on
//                       the way belongs to another user than root or this one, and every
//                       directory on the way (links resolved) belongs to root, this user or the
//                       daemon's user, none writable by its group or every user (but sticky ones
//                       above the socket's own directory, as /tmp).
//   DirectoryOf(path)   the directory part of path: "." for a bare name, "/" at the root.
//   RuntimeDirPermissions(d)
//                       for a message about a runtime directory this process may not read or
//                       enter (EACCES): "the directory P above it does not let this user in
//                       (owned by uid U, mode M); <the fix>" when a directory above d denies
//                       search (x), else "owned by uid U, mode 0000; ringfeedd creates it ...;
//                       <the fix>"; "" when d cannot be stat'ed.
//   ModeText(mode)      a file's permission bits (mode & 07777) as four octal digits: "0755".
//   UserName(uid), GroupName(gid)
//                       the user's or group's name ("uid N" / "gid N" when there is none), for
//                       messages. Reentrant (getpwuid_r, getgrgid_r): trainers attach from several
//                       threads.
//   ProcessInGroup(gid) whether this process has gid as its effective or a supplementary group
//                       (what the kernel checks a file's group bits against).
//   AccountInGroup(uid, gid)
//                       whether user uid's account is in group gid: its login group (passwd) or
//                       a group that lists it (the group database, getgrouplist(3)). A process
//                       of that user started before it was added is not (ProcessInGroup): its
//                       groups are fixed when its login session starts. False when uid has no
//                       passwd entry.
//   ProcessState(pid)   the process's state letter from /proc/PID/stat (proc(5): R, S, D, T, t,
//                       Z, ...); '\0' when there is no such process in this process's /proc, or
//                       pid <= 0.
//   StoppedProcess(pid) "stopped (state T: SIGSTOP, Ctrl-Z or a debugger)" (t: traced) when the
//                       process is stopped, else "": for messages about a daemon that does not
//                       answer or write its heartbeat.
//   ProcessExited(pid)  whether process `pid` has exited: no such process (kill(pid, 0) says
//                       ESRCH), or a zombie (exited, not reaped yet by its parent: a launcher that
//                       does not wait keeps it so, with its pid taken) with no thread left. False
//                       for pid <= 0 (not known) and for a live process, also another user's and
//                       one whose main thread ended with pthread_exit while others go on (its
//                       /proc/PID/stat says Z too).
//   ProcessExiting(pid) whether process `pid` is on its way out but has not exited yet: every one
//                       of its threads has a SIGKILL pending or has begun to exit (PF_EXITING in
//                       the flags of /proc/PID/task/TID/stat, proc(5)), as while the kernel frees
//                       a killed trainer's memory (170 ms for 1 GiB), before its sockets close.
//                       False for a live process, also one whose main thread alone ended
//                       (pthread_exit), for pid <= 0 and when /proc does not show its threads.
//
// FNV-1a: http://www.isthe.com/chongo/tech/comp/fnv/ (64-bit offset basis 0xcbf29ce484222325,
// prime 0x100000001b3), over the bytes of the string. Thread-safe (reads the environment).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringfeed::shm {

inline constexpr size_t kMaxJobNameBytes = 64;
// IsValidJobName's rule in words, for messages.
inline constexpr const char* kJobNameRule =
    "1 to 64 characters from A-Z a-z 0-9 _ . -, not starting with '.' or '-'";
bool IsValidJobName(std::string_view job);
std::string RuntimeDir();
std::string SocketPath(std::string_view runtime_dir, std::string_view job);
std::vector<std::string> SubdirectoriesWithSocket(const std::string& runtime_dir, std::string_view job);
struct SocketPeer {
  pid_t pid = 0;
  bool queue_full = false;
};
std::optional<SocketPeer> SocketListener(const std::string& path);
bool NobodyListens(const std::string& path);
std::string SegmentName(std::string_view runtime_dir, std::string_view job);
std::string RuntimeDirPermissions(std::string_view runtime_dir);
std::string FallbackRuntimeDir();
std::string RuntimeDirProblem(const std::string& runtime_dir);
std::string UntrustedDaemon(const std::string& socket_path, uid_t peer_uid);
std::string DirectoryOf(const std::string& path);
std::string ModeText(mode_t mode);
std::string UserName(uid_t uid);
std::string GroupName(gid_t gid);
bool ProcessInGroup(gid_t gid);
bool AccountInGroup(uid_t uid, gid_t gid);
char ProcessState(pid_t pid);
std::string StoppedProcess(pid_t pid);
bool ProcessExited(pid_t pid);
bool ProcessExiting(pid_t pid);

uint64_t Fnv1a64(std::string_view bytes);

}  // namespace ringfeed::shm
