// ConsumerRegistry: the daemon's record of attached consumers (trainer processes). It hands
// out consumer ids (1..shm::kMaxConsumers, the owner field of held slots), enforces
// consumers.mode (a rank in 0..count-1, each rank attached at most once, in ranks mode; no
// rank in shared mode), fills the superblock's consumer table, and on detach (the consumer's
// control connection closed: it exited or was killed) reclaims the slots it held. The
// connection can outlive the consumer when it forked a child after attaching (a DataLoader
// worker holds the inherited socket), so ReapDead also detaches consumers whose process is gone. Batches a
// dead consumer held are lost to the job (counted as batches_reclaimed): they were handed out
// and may have been used, so they are not delivered again. Batches held by a consumer that goes
// away after the end of the data (all produced, its queue drained: a process that exits with
// arrays or tensors of its last batch alive) are reclaimed without counting or a warning.
// In ranks mode a rank whose consumer went away while production runs gets a warning: its
// batches wait for it.
//
// Thread-safety: every public method may be called from any thread (the control server's
// thread attaches and detaches, the autotuner's thread lists).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shm/names.h"
#include "shm/ring.h"

namespace ringfeed {

class ConsumerRegistry {
 public:
  // ranks = consumers.count in ranks mode, 0 in shared mode.
  // `ring`: the daemon's own geometry (DaemonRing), never read back from the superblock.
  ConsumerRegistry(const shm::Ring& ring, uint32_t ranks) : ring_(ring), ranks_(ranks) {}

  // A consumer of process `pid` asks to attach (with `rank` in ranks mode): its id, or nullopt
  // and *error, the refusal for the client. *retry (when given) is set when the refusal may pass
  // in a moment: the rank's holder is exiting (killed, its memory being freed: its connection
  // closes then), which a client with attach_timeout tries again.
  std::optional<uint32_t> Attach(pid_t pid, std::optional<int> rank, std::string* error, bool* retry = nullptr);
  // Detaches consumer `id` if it is still the one with `pid` (the id may have been given to a
  // new consumer after ReapDead). Returns the number of slots reclaimed.
  uint32_t Detach(uint32_t id, pid_t pid);
  // Detaches every consumer whose process no longer exists or is a zombie (shm::ProcessExited);
  // notes which consumers took batches (Info::seconds_since_take). Called once a second.
  void ReapDead();

  struct Info {
    uint32_t id;
    pid_t pid;
    int rank;  // -1 in shared mode
    uint64_t batches_taken;
    uint64_t wait_ns;
    double attached_seconds;
    uint32_t slots_held;  // slots whose batch it has not released, now (shm::HeldPerConsumer)
    // Seconds since it last took a batch (since it attached, if it has taken none), as seen at
    // the last look (ReapDead, once a second, or List): a trainer that stopped taking batches.
    double seconds_since_take;
  };
  std::vector<Info> List() const;
  // Whether consumer `id` (1..shm::kMaxConsumers) is attached now.
  // Consumer `id`'s rank (-1 in shared mode) while it is attached; nullopt when it is not.
  std::optional<int> RankIfAttached(uint32_t id) const {
    std::lock_guard lock(mutex_);
    if (id < 1 || id > entries_.size() || !entries_[id - 1].attached) return std::nullopt;
    return entries_[id - 1].rank;
  }
  // Ranks mode: the ranks (0..count-1) no consumer is attached as now; empty in shared mode.
  std::vector<int> RanksWithoutConsumer() const;
  // Ranks mode, called once a second (ringfeedd's reap timer) with the ready batches per rank
  // (PipelineStats::ready_per_queue): notes which ranks took a batch since the last call (their
  // delivery queue's `taken` moved) and whose trainers waited in Next for at least half of the
  // time since (their consumer's wait grew), and warns once per stall about a rank that has left
  // its ready batches untaken for kRankStallWarning while another rank has none ready and its
  // trainer waits (ranks mode stops producing at the prefetch depth, so one stopped, stuck or
  // much slower trainer, or a rank no trainer attached as, holds up all of them). Shared mode:
  // does nothing.
  void WatchRanks(const std::vector<uint32_t>& ready_per_rank);
  // Ranks mode, per rank, for `status`'s `ranks` (empty in shared mode):
  //   seconds_since_take: since its queue last advanced (since the daemon started, or the
  //     rank's consumer attached, when it never did), as of the last WatchRanks;
  //   holds_up: with `ready_per_rank` (now), whether this rank holds every rank up: attached,
  //     batches ready, another attached rank with none ready whose trainer waited at the last
  //     WatchRanks, production not ended. The same
  //     decision as WatchRanks's warning; `ringfeedctl status` prints its line from it.
  struct RankState {
    double seconds_since_take = 0;
    bool holds_up = false;
  };
  std::vector<RankState> RankStates(const std::vector<uint32_t>& ready_per_rank) const;
  static constexpr std::chrono::seconds kRankStallWarning{10};
  // Production ended (ringfeedd's Pipeline end): no more "rank R has no consumer" warnings; and
  // when it ended with the end of the data (every epoch produced), consumers that go away from
  // now on holding batches, with nothing of theirs left in the ring, are not counted as dead.
  // ringfeedd calls it from the pipeline's end callback, and before a detach once the pipeline
  // has recorded its end (a consumer may see the end state and leave before the callback).
  // It also marks every consumer attached now as told of the end: NotToldOfEnd.
  void SetProductionEnded(bool end_of_data);
  // After production ended: the ranks (0..count-1) that no consumer was attached as when it
  // ended or has attached as since, so that none of their trainers has read the end (a failure,
  // or why the data gave no batch) from the segment yet; shared mode: {0} when no consumer has,
  // else empty. ringfeedd --exit-when-done waits for it to be empty after a failure or an end
  // with no batch (a trainer starting after the exit would get "cannot connect" instead).
  std::vector<int> NotToldOfEnd() const;
  uint64_t batches_reclaimed() const {
    std::lock_guard lock(mutex_);
    return batches_reclaimed_;
  }
  // Counts attaches and detaches (a reaped consumer too): a poller sees that the consumers
  // changed since it last looked. One atomic load.
  uint64_t membership_changes() const { return membership_changes_.load(std::memory_order_acquire); }

 private:
  struct Entry {
    bool attached = false;
    pid_t pid = 0;
    int rank = -1;
    std::chrono::steady_clock::time_point since;
    // Its batches_taken when last looked at (NoteTakesLocked, also from const List: bookkeeping
    // under mutex_), and since when it has been that.
    mutable uint64_t seen_taken = 0;
    mutable std::chrono::steady_clock::time_point taken_at;
  };
  // Notes which consumers took a batch since the last look (their batches_taken moved).
  void NoteTakesLocked(std::chrono::steady_clock::time_point now) const;
  uint32_t DetachLocked(uint32_t id, pid_t pid);
  // An attached consumer whose process has exited (its connection held open by a child it
  // forked, else the connection's end would have detached it), a zombie its parent has not
  // reaped included (a launcher that does not wait for it). Pid 0 (another pid namespace):
  // not known, false.
  static bool ProcessGone(const Entry& e) { return e.attached && shm::ProcessExited(e.pid); }
  uint32_t AttachedLocked() const;  // consumers attached now
  // Ranks mode: per rank, its attached consumer or nullptr.
  std::vector<const Entry*> ConsumerOfRankLocked() const;
  // Ranks mode: per rank, whether it holds every rank up (RankState::holds_up).
  std::vector<bool> HoldsUpLocked(const std::vector<const Entry*>& consumer_of,
                                  const std::vector<uint32_t>& ready_per_rank) const;
  // Ranks mode: whether an attached rank with nothing ready has a trainer that waits (as of the
  // last WatchRanks), production not ended: then every rank with batches ready holds it up.
  bool SomeRankStarvesLocked(const std::vector<const Entry*>& consumer_of,
                             const std::vector<uint32_t>& ready_per_rank) const;

  const shm::Ring ring_;
  uint32_t ranks_;
  mutable std::mutex mutex_;  // guards everything below
  std::vector<Entry> entries_ = std::vector<Entry>(shm::kMaxConsumers);
  uint64_t batches_reclaimed_ = 0;
  uint64_t consumers_seen_ = 0;
  uint32_t crowd_warned_at_ = 0;  // consumers attached at the last "more consumers than slots" warning
  // Ranks mode: per rank, the queue's `taken` at the last WatchRanks, when it last moved, and
  // whether this stall was warned about.
  struct RankProgress {
    uint64_t taken = 0;
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    double seconds_since = 0;
    bool warned = false;
    uint64_t consumer_wait_ns = 0;  // its consumer's wait_ns at the last WatchRanks
    bool waiting = false;           // its trainer waited in Next for most of the last interval
    // The last "rank R has no consumer now" warning, and the detaches since that were not
    // warned about (a trainer that attaches and leaves over and over: once a minute).
    std::optional<std::chrono::steady_clock::time_point> gone_warned_at;
    uint64_t gone_unwarned = 0;
  };
  static constexpr std::chrono::seconds kRankGoneWarningEvery{60};
  std::optional<std::chrono::steady_clock::time_point> last_watch_;  // the last WatchRanks
  std::vector<RankProgress> rank_progress_ = std::vector<RankProgress>(ranks_);
  std::atomic<uint64_t> membership_changes_{0};
  std::atomic<bool> end_of_data_{false};
  std::atomic<bool> production_ended_{false};
  // Per rank (one entry in shared mode): a consumer was attached as it when production ended,
  // or attached after (NotToldOfEnd).
  std::vector<bool> told_of_end_ = std::vector<bool>(std::max<uint32_t>(ranks_, 1), false);
  void MarkToldLocked(const Entry& e) {
    told_of_end_[e.rank >= 0 && static_cast<uint32_t>(e.rank) < told_of_end_.size() ? static_cast<size_t>(e.rank) : 0] =
        true;
  }
};

}  // namespace ringfeed
