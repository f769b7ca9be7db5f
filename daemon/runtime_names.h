// RuntimeNames: the names ringfeedd creates for its job (the control socket and lock file in
// the runtime directory, the segment's file in /dev/shm), watched while it runs. Any of them can
// be removed under the daemon (`rm -rf` of the runtime directory by a tmp cleaner, a cleanup of
// /dev/shm, logind's RemoveIPC) and re-created by another process, e.g. a second ringfeedd for
// the job, which starts once the lock file is gone. Trainers attached go on either way, but new
// ones cannot connect, or reach the other daemon: Check logs each removal or replacement once,
// as an error saying what it means and what to do. A removed socket, and a lock file removed or
// replaced by one no process holds, are made again (the Remake functions) as long as this
// daemon still holds the job's lock (tried again at every check until it works): then a
// warning says so and nothing stays wrong. A removed segment cannot be named again (its file
// has no name left to link). Removal (the stop) names what is still this daemon's to remove
// (shm/file_id.h: the stop removes only those).
//
// Thread-safety: one thread (ringfeedd's io thread: its 1 s timer and the stop).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shm/file_id.h"

namespace ringfeed {

class RuntimeNames {
 public:
  struct Name {
    std::string path;
    shm::FileId id;  // the file it named when the daemon created it
  };
  // Makes a name again: the new file's id, or an invalid one with `*why` set (a sentence).
  using Remake = std::function<shm::FileId(std::string* why)>;
  // `remake_lock`: called at each check while the lock file is gone or replaced (it fails while
  // another process holds the new one); `remake_socket`: while the socket is gone or replaced
  // (it fails unless the path is free, or a socket nobody listens on), after the lock file's
  // check (so the lock is this daemon's again first). Null: not made again.
  RuntimeNames(std::string job, std::string runtime_dir, Name segment_file, Name socket, Name lock_file,
               Remake remake_socket = nullptr, Remake remake_lock = nullptr);

  // Logs (spdlog::error) every name removed or replaced since the last call, once per change;
  // `remake`: makes them again where the Remake functions can (false at the stop).
  void Check(bool remake = true);
  // What the last Check found removed or replaced and not back: per name, the message it
  // logged (what it means, what to do); empty when every name is still this daemon's.
  std::vector<std::string> Problems() const;
  // For the stop's log line: "removed SOCKET and SEGMENT", or which were already gone, replaced
  // by another file (left), or could not be checked (left).
  std::string Removal() const;

 private:
  // A name and what it was at the last Check.
  struct Watched {
    Name name;
    shm::PathState state = shm::PathState::kSame;
    shm::FileId seen;
    std::string problem;  // what the state means, when not kSame (the message logged)
    std::string why;      // why the last remake failed, when it said
    // The new state when it changed since the last call; nullopt when unchanged or when it
    // can't be told (lstat failed otherwise than with ENOENT).
    std::optional<shm::PathState> Changed();
    // After Changed said `now` and `problem` was set for it: logs it, or clears it for kSame.
    void Report(shm::PathState now);
    // `remake` made the name again as `id`: it is this daemon's again, no problem.
    void Remade(shm::FileId id);
    // For a name the daemon can make again (the lock file, the socket): Changed, then, while it
    // is not this daemon's own and `remake`, `remake_name` at every check (one that failed,
    // a cleaner racing it or something in the way for a while, succeeds once the way is
    // clear): `log_remade(state)` once it worked; else `problem_for(state)` (state kGone or
    // kReplaced) logged when the state changed or the failure says something new. At the stop
    // (`remake` false) a name that is gone is left to the stop's line.
    void Recheck(bool remake, const Remake& remake_name, const std::function<void(shm::PathState)>& log_remade,
                 const std::function<std::string(shm::PathState)>& problem_for);
  };
  std::string job_, runtime_dir_;
  Remake remake_socket_, remake_lock_;
  Watched segment_file_, socket_, lock_file_;
};

}  // namespace ringfeed
