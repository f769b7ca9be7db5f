// FileId: which file a path named when a process created it (st_dev, st_ino), so that the
// process removes that name later only while it still names the same file. ringfeedd's control
// socket, lock file and segment can be removed under it (`rm -rf` of the runtime directory, a
// cleanup of /dev/shm) and re-created by another daemon for the same job; removing them by name
// at the stop would take that daemon's files.
//
// Header only. StateOf and UnlinkIfSame make only async-signal-safe calls (lstat, unlink), so a
// signal handler may use them (daemon/segment_guard.h); they change errno. Thread-safe.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ringfeed::shm {

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool valid() const { return ino != 0; }  // {} : not recorded (no file of ours there)
  bool operator==(const FileId&) const = default;
  static FileId Of(const struct stat& st) { return {st.st_dev, st.st_ino}; }
};

// What a path names now, compared with the file a process created there.
enum class PathState {
  kSame,      // still that file
  kGone,      // no such name (or its directory is gone)
  kReplaced,  // another file
  kUnknown,   // lstat failed otherwise (EACCES, ...): can't tell
};

// `now`, when given, gets the file the path names (kSame, kReplaced) or {}. Links are not
// followed: the name itself is what gets removed.
inline PathState StateOf(const char* path, FileId id, FileId* now = nullptr) {
  struct stat st {};
  if (now != nullptr) *now = {};
  if (::lstat(path, &st) != 0) return errno == ENOENT || errno == ENOTDIR ? PathState::kGone : PathState::kUnknown;
  if (now != nullptr) *now = FileId::Of(st);
  return FileId::Of(st) == id ? PathState::kSame : PathState::kReplaced;
}

// Removes `path` only if it still names `id`; true if it did. The check and the unlink are two
// system calls: a file put at the path between them (microseconds) is removed all the same.
// That race is accepted; what this prevents is removing a file that replaced ours while the
// process ran (seconds to days).
inline bool UnlinkIfSame(const char* path, FileId id) {
  if (!id.valid() || StateOf(path, id) != PathState::kSame) return false;
  return ::unlink(path) == 0;
}

}  // namespace ringfeed::shm
