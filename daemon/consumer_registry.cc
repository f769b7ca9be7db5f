#include "daemon/consumer_registry.h"

#include <map>

#include <spdlog/spdlog.h>

#include "shm/futex.h"
#include "shm/ring.h"

namespace ringfeed {

std::optional<uint32_t> ConsumerRegistry::Attach(pid_t pid, std::optional<int> rank, std::string* error, bool* retry) {
  std::lock_guard lock(mutex_);
  if (ranks_ == 0 && rank) {
    *error = "this job delivers in consumers.mode: shared; attach without a rank (or set consumers.mode: ranks)";
    return std::nullopt;
  }
  if (ranks_ != 0) {
    if (!rank) {
      *error = "this job delivers in consumers.mode: ranks with " + std::to_string(ranks_) +
               " ranks; attach with a rank in 0.." + std::to_string(ranks_ - 1);
      return std::nullopt;
    }
    if (*rank < 0 || static_cast<uint32_t>(*rank) >= ranks_) {
      *error = "rank " + std::to_string(*rank) + " is out of range: consumers.count is " + std::to_string(ranks_) +
               " (ranks 0.." + std::to_string(ranks_ - 1) + ")";
      return std::nullopt;
    }
    for (uint32_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (e.rank == *rank && e.pid != pid && ProcessGone(e)) {
        // Its trainer has exited, and a child it forked holds the connection (else the
        // connection's end would have detached it): what ReapDead does once a second, now, so
        // that a trainer restarted at once gets its rank (breaker helper-102, session 40).
        spdlog::warn("consumer {} (pid {}, rank {}) has exited but its control connection is still open (a child it "
                     "forked holds it?); detaching it for the new consumer of its rank (pid {})",
                     i + 1, e.pid, *rank, pid);
        DetachLocked(i + 1, e.pid);
        continue;
      }
      if (e.attached && e.rank == *rank) {
        // A pid of 0: the consumer's process is outside this daemon's pid namespace (SO_PEERCRED
        // gives 0), so neither who it is nor whether it is this one can be told.
        *error = "rank " + std::to_string(*rank) + " is already attached by " +
                 (e.pid > 0 ? "pid " + std::to_string(e.pid)
                            : std::string("a process outside ringfeedd's pid namespace (its pid reads as 0 there)"));
        // Exited since the check above counts too: the next try detaches it.
        if (e.pid > 0 && e.pid != pid && (shm::ProcessExiting(e.pid) || shm::ProcessExited(e.pid))) {
          // Killed a moment ago: the kernel frees its memory before its sockets close (a trainer
          // restarted at once by a supervisor was refused, naming the killed pid: helper-164).
          *error += ", which is exiting (killed: its rank is free once its memory is freed and its connection "
                    "closes, in a moment)";
          if (retry != nullptr) *retry = true;
        }
        if (e.pid == pid && pid > 0) {
          // A closed client whose batches (or NumPy views, tensors of them) are still alive keeps
          // its attachment, and so its rank, until the last one is released.
          *error += " (this process: one client per rank; a client of this process attached as rank " +
                    std::to_string(*rank) + " is still open, or was closed while batches it took are still held, "
                    "which keeps the rank until they are released: use that client, or close it and release its "
                    "batches (drop the arrays or tensors made from them) before attaching again)";
        }
        return std::nullopt;
      }
    }
  }
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.attached) continue;
    const auto now = std::chrono::steady_clock::now();
    e = Entry{true, pid, rank.value_or(-1), now, 0, now};
    shm::ConsumerEntry& c = ring_.sb->consumers[i];
    c.pid = pid;
    c.rank = e.rank;
    c.batches_taken.store(0, std::memory_order_relaxed);
    c.wait_ns.store(0, std::memory_order_relaxed);
    c.attached.store(1, std::memory_order_release);
    ++consumers_seen_;
    if (production_ended_.load(std::memory_order_acquire)) MarkToldLocked(e);
    membership_changes_.fetch_add(1, std::memory_order_release);
    // The id is the consumer's entry in the segment, used again once it detaches; the count of
    // attaches tells one consumer from the next in the log.
    spdlog::info("consumer {} attached (pid {}{}; attach {} since start)", i + 1, pid,
                 rank ? ", rank " + std::to_string(*rank) : "", consumers_seen_);
    const uint32_t attached = AttachedLocked();
    const uint32_t slots = ring_.slot_count;
    // In ranks mode every rank will attach: the advice counts them all, as the start-up warning
    // (RingSlotsWarning) does.
    // Once when the count reaches the slots, again at each doubling (not on every attach: 64
    // trainers on a 13-slot ring gave 52 lines); again after it fell below the slots.
    if (attached >= slots && attached >= 2 * crowd_warned_at_) {
      crowd_warned_at_ = attached;
      spdlog::warn("{} consumers attached to a ring of {} slots: consumers that keep their previous batch while "
                   "they wait for the next (a Python `for batch in client:` loop does) can hold every slot, and then "
                   "no batch comes (a Next with a timeout then times out, saying so in Python; one without waits); "
                   "give this job more ring.slots than consumers (ring.slots: {})",
                   attached, slots, shm::RingSlotsForConsumers(std::max(attached, ranks_), slots));
    }
    return i + 1;
  }
  // Whose they are (a launcher that started too many trainers, or one leaking clients).
  std::map<pid_t, int> per_pid;
  for (const Entry& e : entries_) per_pid[e.pid] += e.attached ? 1 : 0;
  std::string holders;
  size_t shown = 0;
  for (const auto& [p, n] : per_pid) {
    if (n == 0) continue;
    if (shown++ == 5) {
      holders += ", ...";
      break;
    }
    holders += (holders.empty() ? "pid " : ", pid ") + std::to_string(p) + (n > 1 ? " (" + std::to_string(n) + ")" : "");
  }
  *error = "too many consumers: " + std::to_string(shm::kMaxConsumers) + " are attached already (" + holders +
           "; ringfeedctl status lists them)";
  return std::nullopt;
}

uint32_t ConsumerRegistry::AttachedLocked() const {
  uint32_t attached = 0;
  for (const Entry& e : entries_) attached += e.attached;
  return attached;
}

void ConsumerRegistry::NoteTakesLocked(std::chrono::steady_clock::time_point now) const {
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.attached) continue;
    const uint64_t taken = ring_.sb->consumers[i].batches_taken.load(std::memory_order_relaxed);
    if (taken != e.seen_taken) {
      e.seen_taken = taken;
      e.taken_at = now;
    }
  }
}

void ConsumerRegistry::ReapDead() {
  std::lock_guard lock(mutex_);
  NoteTakesLocked(std::chrono::steady_clock::now());
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (ProcessGone(e)) {
      spdlog::warn("consumer {} (pid {}) has exited but its control connection is still open (a child it forked "
                   "holds it?); detaching it",
                   i + 1, e.pid);
      DetachLocked(i + 1, e.pid);
    }
  }
}

uint32_t ConsumerRegistry::Detach(uint32_t id, pid_t pid) {
  std::lock_guard lock(mutex_);
  return DetachLocked(id, pid);
}

uint32_t ConsumerRegistry::DetachLocked(uint32_t id, pid_t pid) {
  if (id == 0 || id > entries_.size() || !entries_[id - 1].attached || entries_[id - 1].pid != pid) return 0;
  Entry& e = entries_[id - 1];
  membership_changes_.fetch_add(1, std::memory_order_release);
  shm::Superblock* sb = ring_.sb;
  const shm::Ring& ring = ring_;
  // Its delivery queue held nothing more for it: all epochs produced (the daemon's own record)
  // and no batch of its queue ready (slot words: at worst a consumer's scribble makes this a
  // warning or an info line). A process that ends while arrays or tensors of its last batches
  // are alive (a torch tensor kept by the interpreter until exit) goes away holding them
  // without having crashed; one that crashes after taking everything looks the same.
  bool after_the_data = end_of_data_.load(std::memory_order_acquire);
  const uint32_t queue = e.rank < 0 ? 0 : static_cast<uint32_t>(e.rank);
  for (uint32_t i = 0; after_the_data && i < ring.slot_count; ++i) {
    const shm::SlotWord w = shm::SlotWord::Unpack(ring.header(i)->word.load(std::memory_order_acquire));
    if (w.state == shm::SlotState::kReady && w.queue == queue) after_the_data = false;
  }
  const uint32_t reclaimed = shm::ReclaimConsumer(ring, id);
  sb->consumers[id - 1].attached.store(0, std::memory_order_release);
  if (reclaimed > 0 && after_the_data) {
    spdlog::info("consumer {} (pid {}) detached after the end of the data, with its last {} batch(es) not released "
                 "(still in use when its process ended, as when a trainer exits after its last batch); their slots "
                 "are reclaimed", id, e.pid, reclaimed);
  } else if (reclaimed > 0) {
    batches_reclaimed_ += reclaimed;
    // A warning: records of this epoch that no trainer trained on. Not necessarily a crash: a
    // process that exits with a batch still in use (a PyTorch DataLoader left by `break`, its
    // workers shut down) ends its connection the same way.
    spdlog::warn("consumer {} (pid {}) went away holding {} batch(es) (its process ended without releasing them: "
                 "killed, crashed, or exited with them still in use, e.g. a DataLoader left by break); their slots "
                 "are reclaimed and those batches are not delivered again", id, e.pid, reclaimed);
  } else {
    spdlog::info("consumer {} (pid {}) detached", id, e.pid);
  }
  if (reclaimed > 0) {
    sb->free_futex.fetch_add(1, std::memory_order_release);
    shm::FutexWakeAll(&sb->free_futex);
  }
  if (e.rank >= 0 && static_cast<uint32_t>(e.rank) < ranks_ && !production_ended_.load(std::memory_order_acquire)) {
    RankProgress& p = rank_progress_[static_cast<size_t>(e.rank)];
    const auto now = std::chrono::steady_clock::now();
    if (!p.gone_warned_at || now - *p.gone_warned_at >= kRankGoneWarningEvery) {
      const std::string again =
          p.gone_unwarned == 0
              ? std::string()
              : " (it lost its consumer " + std::to_string(p.gone_unwarned) + " more time(s) since the last such "
                "warning " + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - *p.gone_warned_at)
                                                .count()) + " s ago; this warning comes at most once a minute per rank)";
      spdlog::warn("rank {} has no consumer now: its batches wait in the ring for one to attach as rank {}; the "
                   "other ranks get theirs until rank {}'s take up the prefetch depth (workers + prefetch batches), "
                   "then production waits too{}",
                   e.rank, e.rank, e.rank, again);
      p.gone_warned_at = now;
      p.gone_unwarned = 0;
    } else {
      ++p.gone_unwarned;
      spdlog::debug("rank {} has no consumer now (warned at most once a minute)", e.rank);
    }
  }
  e.attached = false;
  if (AttachedLocked() < ring.slot_count) crowd_warned_at_ = 0;
  return reclaimed;
}

void ConsumerRegistry::SetProductionEnded(bool end_of_data) {
  std::lock_guard lock(mutex_);
  end_of_data_.store(end_of_data, std::memory_order_release);
  production_ended_.store(true, std::memory_order_release);
  for (const Entry& e : entries_) {
    if (e.attached) MarkToldLocked(e);
  }
}

std::vector<int> ConsumerRegistry::NotToldOfEnd() const {
  std::lock_guard lock(mutex_);
  std::vector<int> not_told;
  for (size_t r = 0; r < told_of_end_.size(); ++r) {
    if (!told_of_end_[r]) not_told.push_back(static_cast<int>(r));
  }
  return not_told;
}

std::vector<int> ConsumerRegistry::RanksWithoutConsumer() const {
  std::lock_guard lock(mutex_);
  std::vector<bool> attached(ranks_, false);
  for (const Entry& e : entries_) {
    if (e.attached && e.rank >= 0 && static_cast<uint32_t>(e.rank) < ranks_) attached[static_cast<size_t>(e.rank)] = true;
  }
  std::vector<int> missing;
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (!attached[r]) missing.push_back(static_cast<int>(r));
  }
  return missing;
}

std::vector<const ConsumerRegistry::Entry*> ConsumerRegistry::ConsumerOfRankLocked() const {
  std::vector<const Entry*> consumer_of(ranks_, nullptr);
  for (const Entry& e : entries_) {
    if (e.attached && e.rank >= 0 && static_cast<uint32_t>(e.rank) < ranks_) {
      consumer_of[static_cast<size_t>(e.rank)] = &e;
    }
  }
  return consumer_of;
}

// An attached rank that leaves its ready batches untaken while another attached rank has none
// ready and its trainer waits for one (in Next for at least half of the last watch interval)
// holds up every rank: ranks mode stops producing at the prefetch depth. Ranks that all have
// batches ready are slow together (long steps, an evaluation), not held up by one of them; and
// a rank with nothing ready whose trainer is busy with its own step waits for nobody (trainers
// in lockstep with steps of many seconds). Once production ended nobody is held up: a rank with nothing ready
// gets the end of the data (or the daemon's failure) instead of waiting, whatever the others
// have left untaken.
std::vector<bool> ConsumerRegistry::HoldsUpLocked(const std::vector<const Entry*>& consumer_of,
                                                  const std::vector<uint32_t>& ready_per_rank) const {
  std::vector<bool> holds_up(ranks_, false);
  if (!SomeRankStarvesLocked(consumer_of, ready_per_rank)) return holds_up;
  for (uint32_t r = 0; r < ranks_; ++r) {
    holds_up[r] = consumer_of[r] != nullptr && r < ready_per_rank.size() && ready_per_rank[r] > 0;
  }
  return holds_up;
}

bool ConsumerRegistry::SomeRankStarvesLocked(const std::vector<const Entry*>& consumer_of,
                                             const std::vector<uint32_t>& ready_per_rank) const {
  if (production_ended_.load(std::memory_order_acquire)) return false;
  for (uint32_t r = 0; r < ranks_; ++r) {
    const uint32_t ready = r < ready_per_rank.size() ? ready_per_rank[r] : 0u;
    if (consumer_of[r] != nullptr && ready == 0 && rank_progress_[r].waiting) return true;
  }
  return false;
}

void ConsumerRegistry::WatchRanks(const std::vector<uint32_t>& ready_per_rank) {
  if (ranks_ == 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  const std::vector<const Entry*> consumer_of = ConsumerOfRankLocked();
  // Whose trainer waits now: its consumer's wait (written by the client while it waits in Next,
  // every 100 ms; only compared with its last value here, never trusted) grew by at least half
  // of the time since the last watch.
  const double interval_ns =
      last_watch_ ? std::chrono::duration<double, std::nano>(now - *last_watch_).count() : 0.0;
  last_watch_ = now;
  for (uint32_t r = 0; r < ranks_; ++r) {
    RankProgress& p = rank_progress_[r];
    const Entry* consumer = consumer_of[r];
    const uint64_t wait_ns =
        consumer ? ring_.sb->consumers[consumer - entries_.data()].wait_ns.load(std::memory_order_relaxed) : 0;
    p.waiting = consumer != nullptr && interval_ns > 0 && wait_ns > p.consumer_wait_ns &&
                static_cast<double>(wait_ns - p.consumer_wait_ns) >= 0.5 * interval_ns;
    p.consumer_wait_ns = wait_ns;
  }
  const std::vector<bool> holds_up = HoldsUpLocked(consumer_of, ready_per_rank);
  const bool some_rank_starves = SomeRankStarvesLocked(consumer_of, ready_per_rank);
  const auto ready = [&](uint32_t r) { return r < ready_per_rank.size() ? ready_per_rank[r] : 0u; };
  for (uint32_t r = 0; r < ranks_; ++r) {
    RankProgress& p = rank_progress_[r];
    // `taken` is written by consumers: only compared with its last value here, never trusted.
    const uint64_t taken = ring_.queue(r).taken.load(std::memory_order_relaxed);
    const Entry* consumer = consumer_of[r];
    const bool moved = taken != p.taken;
    p.taken = taken;
    if (moved || ready(r) == 0) {  // not behind: the clock starts again
      if (p.warned) spdlog::info("rank {} takes its batches again", r);
      p.since = now;
      p.warned = false;
    } else if (consumer != nullptr && consumer->since > p.since) {
      p.since = consumer->since;  // a trainer attached as the rank since: count from its attach
    }
    p.seconds_since = std::chrono::duration<double>(now - p.since).count();
    if (!p.warned && holds_up[r] && now - p.since >= kRankStallWarning) {
      p.warned = true;
      spdlog::warn("rank {} (consumer {}, pid {}) has not taken any of its {} ready batches for {:.0f} s while other "
                   "ranks wait: ranks mode gives batch k of an epoch to rank k mod {} and stops producing at the "
                   "prefetch depth, so every rank waits for it; is that trainer stopped, stuck or far slower than its "
                   "peers?",
                   r, static_cast<uint32_t>(consumer - entries_.data()) + 1, consumer->pid, ready(r), p.seconds_since,
                   ranks_);
    } else if (!p.warned && consumer == nullptr && ready(r) > 0 && some_rank_starves &&
               now - p.since >= kRankStallWarning) {
      // A rank no trainer attached as (never, or not since its last one left: that detach was
      // warned about when it happened) holds the others up the same way.
      p.warned = true;
      spdlog::warn("rank {} of {} has no consumer attached and {} ready batches waiting for one (for {:.0f} s) "
                   "while other ranks wait: ranks mode gives batch k of an epoch to rank k mod {} and stops producing "
                   "at the prefetch depth, so every rank waits for it; start that rank's trainer (it attaches as "
                   "rank {}), or set consumers.count to the number of trainers",
                   r, ranks_, ready(r), p.seconds_since, ranks_, r);
    }
  }
}

std::vector<ConsumerRegistry::RankState> ConsumerRegistry::RankStates(const std::vector<uint32_t>& ready_per_rank) const {
  std::lock_guard lock(mutex_);
  const std::vector<bool> holds_up = HoldsUpLocked(ConsumerOfRankLocked(), ready_per_rank);
  std::vector<RankState> out;
  for (uint32_t r = 0; r < ranks_; ++r) out.push_back({rank_progress_[r].seconds_since, holds_up[r]});
  return out;
}

std::vector<ConsumerRegistry::Info> ConsumerRegistry::List() const {
  std::lock_guard lock(mutex_);
  std::vector<Info> out;
  const auto now = std::chrono::steady_clock::now();
  NoteTakesLocked(now);
  const std::vector<uint32_t> held = shm::HeldPerConsumer(ring_);
  for (uint32_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.attached) continue;
    const shm::ConsumerEntry& c = ring_.sb->consumers[i];
    out.push_back({i + 1, e.pid, e.rank, c.batches_taken.load(std::memory_order_relaxed),
                   c.wait_ns.load(std::memory_order_relaxed), std::chrono::duration<double>(now - e.since).count(),
                   held[i + 1], std::chrono::duration<double>(now - e.taken_at).count()});
  }
  return out;
}

}  // namespace ringfeed
