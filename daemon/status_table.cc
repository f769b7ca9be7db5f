#include "daemon/status_table.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace ringfeed {

std::string SecondsText(double s) {
  char buf[32];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  return buf;
}

std::string FineSecondsText(double s) {
  if (s >= 10) return SecondsText(s);
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 0.01 ? "%.3f s" : "%.2f s", s);
  return buf;
}

std::string BytesText(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

// When production waited for the trainers most of the tuner's last interval (the ring full, or
// no trainer attached yet), a status's rates are the trainers' pace, not the loader's speed:
// how to say why, or empty when they are the loader's.
std::string TrainersPace(const ReplyFields& s) {
  const ReplyFields measured = s.Object("autotune").Object("measured");
  if (measured.Number("interval_seconds") <= 0 ||
      measured.Number("sequencer_slot_wait_fraction") < 0.5 || measured.Number("consumer_wait_fraction") >= 0.5) {
    return "";
  }
  if (measured.Integer("consumers") > 0) return "ring full or prefetch depth reached";
  // After production ended, a trainer of its last stretch may have come and gone within it.
  if (s.String("state") != "running") return "no trainer attached at its end, or none for much of it";
  // The interval is the tuner's last one: a trainer may have attached since.
  return s.Objects("consumers").empty() ? "no trainer attached" : "no trainer attached during that interval";
}

namespace {

// The autotuner's part of `status`: what it may use, what it uses, why it changed.
// `running`: production goes on; otherwise the measurements are those of the tuner's last
// interval before it ended (the tuner stops with production).
void PrintAutotune(const ReplyFields& a, bool running, std::ostream& out) {
  const ReplyFields limits = a.Object("limits");
  const ReplyFields knobs = a.Object("knobs");
  char buf[1024];
  std::string fixed;
  for (const std::string& f : a.Strings("fixed")) fixed += (fixed.empty() ? "" : ", ") + f;
  const ReplyFields m = a.Object("measured");
  const bool measured = m.Number("interval_seconds") > 0;
  const int64_t readers = knobs.Integer("readers"), workers = knobs.Integer("workers");
  const int64_t reads_per_file = knobs.Integer("reads_per_file", 1);
  // Per file: the reads in flight (one read() into the reader's window, or a queue of blocks,
  // which then hold what is read ahead) and the records buffered beside them for the interleave.
  const std::string reads =
      reads_per_file == 1 ? std::string("1 read at a time")
                          : std::to_string(reads_per_file) + " queued reads of " +
                                BytesText(limits.Number("read_block_bytes")) + " in flight";
  std::snprintf(buf, sizeof buf,
                "autotune   readers %lld, per file %s and %s of records read ahead, workers %lld, prefetch %lld%s\n",
                static_cast<long long>(readers), reads.c_str(), BytesText(knobs.Number("read_ahead_bytes")).c_str(),
                static_cast<long long>(workers), static_cast<long long>(knobs.Integer("prefetch")),
                fixed.empty() ? "" : (" (fixed by the config: " + fixed + ")").c_str());
  out << buf;
  // The CPU the daemon used over the tuner's last interval; none before its first one ends.
  if (measured) {
    std::snprintf(buf, sizeof buf,
                  "           CPU%s: %.2f of %g cores (cpu_budget: %s); %s %.2f cores of that, waiting the rest "
                  "of %s time (for storage or for room to read ahead)\n",
                  running ? "" : (" (the last " + FineSecondsText(m.Number("interval_seconds")) + " of production)").c_str(),
                  a.Number("cpu_cores"),
                  limits.Number("cpu_budget_cores"), limits.String("cpu_budget_source").c_str(),
                  readers == 1 ? "the reader uses" : ("the " + std::to_string(readers) + " readers use").c_str(),
                  m.Number("read_cpu_cores"),
                  readers == 1 ? "its" : "their");
  } else {
    std::snprintf(buf, sizeof buf, "           CPU: not measured %s; cpu_budget %g cores (%s)\n",
                  running ? "yet (the tuner's first interval has not ended)"
                          : "(production ended before it made a record)",
                  limits.Number("cpu_budget_cores"), limits.String("cpu_budget_source").c_str());
  }
  out << buf;
  std::snprintf(buf, sizeof buf, "           memory_budget %s (%s): read-ahead may hold %s of records\n",
                BytesText(limits.Number("memory_budget_bytes")).c_str(), limits.String("memory_budget_source").c_str(),
                BytesText(limits.Number("read_ahead_budget_bytes")).c_str());
  out << buf;
  if (a.Number("cpu_cores") > 1.05 * limits.Number("cpu_budget_cores")) {
    if (fixed.find("workers") != std::string::npos || fixed.find("readers") != std::string::npos) {
      out << "           (over the CPU budget because the config fixes " << fixed
          << "; the tuner never changes fixed knobs)\n";
    } else if (readers <= 1 && workers <= 1) {
      out << "           (over the CPU budget at the floor: one reader, one worker and the sequencer always run.\n"
             "            Not an error; give the job more CPU or accept it.)\n";
    }
  }
  if (measured) {
    std::snprintf(buf, sizeof buf,
                  "           %s%s: %.0f records/s, consumers waited %.0f%%, readers %.0f%% busy (%.0f%% of it CPU), "
                  "sequencer %.0f%% CPU, waited %.0f%% for records and %.0f%% for a slot (%.0f%% at the prefetch depth, "
                  "%.0f%% with the ring full), workers %.0f%% busy, %.1f batches ready\n",
                  running ? "last " : "the last ", (FineSecondsText(m.Number("interval_seconds")) + (running ? "" : " of production")).c_str(),
                  m.Number("records_per_second"), 100 * m.Number("consumer_wait_fraction"),
                  100 * m.Number("read_busy_fraction"), 100 * m.Number("read_cpu_fraction"),
                  100 * m.Number("sequencer_cpu_fraction"), 100 * m.Number("sequencer_read_wait_fraction"),
                  100 * m.Number("sequencer_slot_wait_fraction"),
                  100 * m.Number("sequencer_prefetch_wait_fraction"),
                  100 * std::max(0.0, m.Number("sequencer_slot_wait_fraction") -
                                          m.Number("sequencer_prefetch_wait_fraction")),
                  100 * m.Number("parse_busy_fraction"), m.Number("ready_batches_mean"));
    out << buf;
  }
  if (running && a.Has("holding")) out << "           no raise: " << a.String("holding") << "\n";
  const std::vector<ReplyFields> changes = a.Objects("changes");
  if (changes.empty()) {
    out << (running ? "           no changes yet\n" : "           no changes: the job ran on the start values\n");
    return;
  }
  out << "           last changes:\n";
  for (const ReplyFields& c : changes) {
    std::snprintf(buf, sizeof buf, "             at %7.1f s  %s %lld -> %lld: %s\n", c.Number("at_seconds"),
                  c.String("knob").c_str(), static_cast<long long>(c.Integer("from")),
                  static_cast<long long>(c.Integer("to")), c.String("reason").c_str());
    out << buf;
  }
}

// The status object as a table; throws BadReplyField at the first field of another type.
}  // namespace

void PrintStatusTable(const ReplyFields& s, std::ostream& out) {
  const ReplyFields files = s.Object("files");
  const ReplyFields tp = s.Object("throughput");
  const ReplyFields ring = s.Object("ring");
  const ReplyFields pipeline = s.Object("pipeline");
  const ReplyFields memory = s.Object("memory");
  const ReplyFields errors = s.Object("errors");
  const std::string state = s.String("state");
  const int64_t epochs = s.Integer("epochs");
  char buf[512];
  out << "job        " << s.String("job") << "   (pid " << s.Integer("pid") << ", config " << s.String("config")
      << ")\n";
  // Which daemon answered: with the job in several runtime directories, `status JOB` asks the
  // one in the directory itself first (a daemon before `socket` has none).
  if (const std::string socket = s.String("socket"); !socket.empty()) out << "socket     " << socket << "\n";
  // The config as the daemon loaded it at start (an older ringfeedd does not send it).
  if (s.Has("settings")) {
    const ReplyFields set = s.Object("settings");
    const auto flag = [&](const char* key) { return set.Bool(key) ? "true" : "false"; };
    out << "settings   batch.size " << set.Integer("batch.size") << " (drop_remainder " << flag("batch.drop_remainder")
        << "), shuffle.buffer " << set.Integer("shuffle.buffer") << ", shuffle.files " << flag("shuffle.files")
        << " (seed " << set.Count("shuffle.seed") << "), cycle_length " << set.Integer("pipeline.cycle_length")
        << ", on_error " << set.String("source.on_error") << ", compression " << set.String("source.compression")
        << " (as loaded at start: an edited config takes effect at a restart)\n";
  }
  out << "state      " << state << ", up " << SecondsText(s.Number("uptime_seconds"));
  if (state == "end_of_data") {
    // Production's end, not the trainers': batches may still wait in the ring.
    const int64_t ready = ring.Integer("ready"), in_hand = ring.Integer("held");
    if (s.Count("batches") == 0) {
      out << " (no batch was made)";
    } else if (ready > 0 || in_hand > 0) {
      out << " (every batch is made; " << ready << " ready for trainers to take, " << in_hand << " held by them)";
    } else {
      out << " (every batch is made and was taken)";
    }
  }
  out << "\n";
  for (const std::string& problem : s.Strings("problems")) out << "problem    " << problem << "\n";
  const int64_t start_epoch = s.Integer("start_epoch");
  const uint64_t start_batch = s.Count("start_batch");
  std::string started_at;
  if (start_epoch > 0) started_at += "; started at --start-epoch " + std::to_string(start_epoch);
  if (start_batch > 0) {
    started_at += (start_epoch > 0 ? " --start-batch " : "; started at --start-batch ") + std::to_string(start_batch);
  }
  // Batches formed, ahead of those taken (an older ringfeedd does not send the field).
  const std::string batches_made =
      s.Has("batches_in_epoch") ? ", " + std::to_string(s.Count("batches_in_epoch")) + " of its batches formed" : "";
  // Counted from 1 for people, with the batches' 0-based epoch beside it: that is the number
  // --start-epoch and checkpoints use.
  std::snprintf(buf, sizeof buf,
                "progress   epoch %lld of %s (0-based %lld, as in batches and --start-epoch%s), %llu of %llu "
                "files of this epoch done%s\n",
                static_cast<long long>(s.Integer("epoch")) + 1,
                epochs == 0 ? "unlimited" : std::to_string(epochs).c_str(), static_cast<long long>(s.Integer("epoch")),
                started_at.c_str(),
                static_cast<unsigned long long>(files.Count("done_in_epoch")),
                static_cast<unsigned long long>(files.Count("in_shard")), batches_made.c_str());
  out << buf;
  const ReplyFields shard = s.Object("shard");
  if (shard.Count("count", 1) > 1) {
    const bool by_record = shard.String("by") == "record";
    std::snprintf(buf, sizeof buf, "shard      %llu of %llu, by %s\n",
                  static_cast<unsigned long long>(shard.Count("index")),
                  static_cast<unsigned long long>(shard.Count("count", 1)),
                  by_record ? "record (fewer files than shards: every node reads every file)" : "file");
    out << buf;
  }
  const uint64_t records = s.Count("records"), batches = s.Count("batches");
  std::snprintf(buf, sizeof buf, "produced   %llu record%s in %llu batch%s, %s\n",
                static_cast<unsigned long long>(records), records == 1 ? "" : "s",
                static_cast<unsigned long long>(batches), batches == 1 ? "" : "es",
                BytesText(s.Number("record_bytes")).c_str());
  out << buf;
  // Nothing produced yet while the shuffle buffer fills: the first batch waits for it (minutes
  // on slow storage with a large buffer), which the rates below do not explain.
  if (const uint64_t in_buffer = memory.Count("shuffle_buffer_records"), buffer = memory.Count("shuffle_buffer");
      state == "running" && batches == 0 && in_buffer > 0 && buffer > 1) {
    std::snprintf(buf, sizeof buf,
                  "           filling the shuffle buffer before the first batch: %llu of %llu records (shuffle.buffer)\n",
                  static_cast<unsigned long long>(in_buffer), static_cast<unsigned long long>(buffer));
    out << buf;
  }
  const ReplyFields records_per_second = tp.Object("records_per_second"), mb_per_second = tp.Object("mb_per_second");
  if (tp.Has("production_seconds")) {
    // Production has ended: the whole run's rates (a window over the time since would only fall).
    const double produced_for = tp.Number("production_seconds");
    std::snprintf(buf, sizeof buf, "throughput %.0f records/s, %.1f MB/s over the %s from start to %s (%s ago)\n",
                  records_per_second.Number("overall"), mb_per_second.Number("overall"), FineSecondsText(produced_for).c_str(),
                  state == "end_of_data" ? "the end of data" : state == "failed" ? "the failure" : "the stop",
                  SecondsText(std::max(0.0, s.Number("uptime_seconds") - produced_for)).c_str());
  } else {
    // The window is the last 10 s, or the whole uptime while that is shorter.
    const std::string window = SecondsText(std::min(10.0, s.Number("uptime_seconds")));
    std::snprintf(buf, sizeof buf, "throughput %.0f records/s, %.1f MB/s (last %s); %.0f records/s, %.1f MB/s overall\n",
                  records_per_second.Number("last_10s"), mb_per_second.Number("last_10s"), window.c_str(),
                  records_per_second.Number("overall"), mb_per_second.Number("overall"));
  }
  out << buf;
  // A ring the trainers do not empty (or none attached yet) caps these rates: say so, so that
  // they are not read as the loader's speed.
  const ReplyFields measured = s.Object("autotune").Object("measured");
  if (const std::string pace = TrainersPace(s); !pace.empty()) {
    const std::string stretch =
        "the last " + FineSecondsText(measured.Number("interval_seconds")) + (state == "running" ? "" : " of production");
    std::snprintf(buf, sizeof buf,
                  "           production waited %.0f%% of %s for the trainers to take batches (%s): these rates do "
                  "not show the loader's speed\n",
                  100 * measured.Number("sequencer_slot_wait_fraction"), stretch.c_str(), pace.c_str());
    out << buf;
  }
  const int64_t slots = ring.Integer("slots"), held = ring.Integer("held");
  std::snprintf(buf, sizeof buf, "ring       %lld slots x %s: %lld free, %lld filling, %lld ready, %lld held\n",
                static_cast<long long>(slots), BytesText(ring.Number("slot_bytes")).c_str(),
                static_cast<long long>(ring.Integer("free")), static_cast<long long>(ring.Integer("filling")),
                static_cast<long long>(ring.Integer("ready")), static_cast<long long>(held));
  out << buf;
  if (slots > 0 && held == slots && state == "running") {
    out << "           every slot is held by a consumer: no batch can be made until one is released";
    if (const std::string who = ring.String("all_held"); !who.empty()) out << "; " << who;  // and what to do
    out << "\n";
  }
  // A cycle_length above the files to read interleaves them all: say so rather than show a
  // figure no epoch reaches.
  const int64_t cycle_length = pipeline.Integer("cycle_length");
  const int64_t in_shard = s.Object("files").Integer("in_shard");
  const std::string cycle =
      std::to_string(cycle_length) +
      (in_shard == 1 && cycle_length > 1 ? " (its one file)"
       : in_shard > 0 && in_shard < cycle_length ? " (all " + std::to_string(in_shard) + " files at once)"
                                                 : "");
  // Readers serve the files being read in turns: one reader may keep several going.
  const int64_t open_files = pipeline.Integer("open_files");
  const std::string being_read = open_files == 0   ? std::string("no file being read now")
                                 : open_files == 1 ? std::string("taking turns on 1 file being read")
                                                   : "taking turns on " + std::to_string(open_files) + " files being read";
  std::snprintf(buf, sizeof buf,
                "pipeline   cycle_length %s, readers %lld (%s; read-ahead %s per file, %s buffered), workers %lld, "
                "prefetch %lld\n",
                cycle.c_str(), static_cast<long long>(pipeline.Integer("readers")), being_read.c_str(),
                BytesText(pipeline.Number("read_ahead_per_file_bytes")).c_str(),
                BytesText(pipeline.Number("read_ahead_bytes")).c_str(), static_cast<long long>(pipeline.Integer("workers")),
                static_cast<long long>(pipeline.Integer("prefetch")));
  out << buf;
  // Queued reads (slow storage): the reads sent again once late by 2x their mean round trip.
  if (const uint64_t hedged = pipeline.Count("hedged_reads"); hedged > 0) {
    const bool paused = pipeline.String("hedged_reads_state") == "paused";
    std::snprintf(buf, sizeof buf,
                  "           %llu late %s sent again (mean round trip %s), %llu answered first%s\n",
                  static_cast<unsigned long long>(hedged), hedged == 1 ? "read" : "reads",
                  FineSecondsText(pipeline.Number("queued_read_round_trip_seconds")).c_str(),
                  static_cast<unsigned long long>(pipeline.Count("hedged_reads_won")),
                  paused ? "; paused: they ran out of tokens, too few answering first (a saturated link, or most "
                           "reads slow), one tried every 10 s until one wins"
                         : "");
    out << buf;
  }
  // Storage that does not answer: the busy figures below count a read only once it returns.
  const std::vector<std::string> waiting = pipeline.Strings("io_waiting");  // none from an older ringfeedd
  for (size_t i = 0; i < waiting.size(); ++i) {
    out << (i == 0 ? "storage    waiting for " : "           and ") << waiting[i] << "\n";
  }
  const std::string budget =
      memory.Has("budget_bytes") ? "budget " + BytesText(memory.Number("budget_bytes")) : "no budget set";
  std::snprintf(buf, sizeof buf, "memory     segment %s + private RSS %s (%s)\n", BytesText(memory.Number("segment_bytes")).c_str(),
                BytesText(memory.Number("private_rss_bytes")).c_str(), budget.c_str());
  out << buf;
  if (!memory.String("over_budget").empty()) out << "           " << memory.String("over_budget") << "\n";
  if (s.Has("autotune")) PrintAutotune(s.Object("autotune"), state == "running", out);
  const std::vector<ReplyFields> consumers = s.Objects("consumers");
  out << "consumers  " << consumers.size() << " attached";
  if (s.Count("batches_reclaimed") > 0) {
    out << ", " << s.Count("batches_reclaimed") << (s.Count("batches_reclaimed") == 1 ? " batch" : " batches")
        << " reclaimed from consumers that went away holding them";
  }
  if (s.Count("ring_repairs") > 0) {
    out << ", " << s.Count("ring_repairs") << " ring words repaired (written by a process that maps the segment)";
  }
  out << "\n";
  // Ranks mode: each rank's batches ready in the ring, beside its consumer (who is behind).
  std::map<int64_t, uint64_t> ready_of_rank;
  for (const ReplyFields& r : s.Objects("ranks")) ready_of_rank[r.Integer("rank")] = r.Count("ready");
  for (const ReplyFields& c : consumers) {
    const uint64_t taken = c.Count("batches_taken");
    std::string rank;
    if (c.Has("rank")) {
      rank = " rank " + std::to_string(c.Integer("rank"));
      if (const auto it = ready_of_rank.find(c.Integer("rank")); it != ready_of_rank.end()) {
        rank += " (" + std::to_string(it->second) + " ready)";
      }
    }
    std::string holds;  // (a daemon before slots_held has none)
    if (c.Has("slots_held")) {
      const uint64_t held = c.Count("slots_held");
      holds = ", holds " + std::to_string(held) + (held == 1 ? " slot" : " slots");
    }
    // A trainer that has taken nothing for a while (stopped, stuck, or slow by design): said
    // while the job runs, from 5 s on (a daemon before seconds_since_take has none).
    std::string last;
    if (const double since = c.Number("seconds_since_take", -1); since >= 5 && state == "running") {
      last = taken == 0 ? " (none in " + SecondsText(since) + ")" : " (the last " + SecondsText(since) + " ago)";
    }
    std::snprintf(buf, sizeof buf, "           id %lld pid %lld%s: %llu %s taken%s%s, waited %.1f s, attached %s\n",
                  static_cast<long long>(c.Integer("id")), static_cast<long long>(c.Integer("pid")), rank.c_str(),
                  static_cast<unsigned long long>(taken), taken == 1 ? "batch" : "batches", last.c_str(),
                  holds.c_str(), c.Number("wait_seconds"), SecondsText(c.Number("attached_seconds")).c_str());
    out << buf;
  }
  const std::vector<int64_t> missing = s.Integers("ranks_without_consumer");
  if (!missing.empty() && state == "running") {
    std::string list;
    for (int64_t r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    out << "           no consumer for rank" << (missing.size() > 1 ? "s " : " ") << list
        << (missing.size() > 1 ? ": their batches wait in the ring; once they take up the prefetch depth "
                                 "(workers + prefetch), production waits for consumers of those ranks\n"
                               : ": its batches wait in the ring; once they take up the prefetch depth (workers + "
                                 "prefetch), production waits for a consumer of that rank\n");
  }
  // Ranks mode: the daemon says which rank holds every rank up (`holds_up`: attached, batches
  // ready while another attached rank has none, production not ended); named once it has
  // taken nothing for 5 s (the log warns after 10 s). Once production ended no rank holds
  // others up: a rank with nothing ready gets the end of the data instead of waiting, so a
  // rank that leaves its last batches untaken then gets no line here.
  for (const ReplyFields& r : s.Objects("ranks")) {
    const int64_t rank = r.Integer("rank");
    const double since = r.Number("seconds_since_take");
    if (!r.Bool("holds_up") || since < 5) continue;
    std::string trainer;
    for (const ReplyFields& c : consumers) {
      if (c.Has("rank") && c.Integer("rank") == rank) {
        trainer = " (consumer " + std::to_string(c.Integer("id")) + ", pid " + std::to_string(c.Integer("pid")) + ")";
      }
    }
    std::snprintf(buf, sizeof buf,
                  "           rank %lld%s has not taken any of its %llu ready batches for %.0f s while another rank "
                  "waits: production stops at the prefetch depth, so every rank waits for it; is that trainer "
                  "stopped, stuck or far slower than its peers?\n",
                  static_cast<long long>(rank), trainer.c_str(), static_cast<unsigned long long>(r.Count("ready")),
                  since);
    out << buf;
  }
  // files_ended_early: only from daemons that send it, and only when some file did.
  const uint64_t ended_early = errors.Count("files_ended_early");
  const std::string ended_early_text =
      ended_early == 0 ? ""
                       : " (" + std::to_string(ended_early) + " of the read errors ended a file early: the records " +
                             "after them not read)";
  std::snprintf(buf, sizeof buf, "errors     %llu read and %llu parse errors skipped%s, %llu batches dropped (ranks remainder)\n",
                static_cast<unsigned long long>(errors.Count("read_errors_skipped")),
                static_cast<unsigned long long>(errors.Count("parse_errors_skipped")), ended_early_text.c_str(),
                static_cast<unsigned long long>(errors.Count("batches_dropped")));
  out << buf;
  const std::string last = errors.String("last_error");
  if (!last.empty()) out << "last error " << last << "\n";
}

}  // namespace ringfeed
