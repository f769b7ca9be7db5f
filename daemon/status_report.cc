#include "daemon/status_report.h"

#include <unistd.h>

#include <spdlog/fmt/fmt.h>

#include "format/utf8.h"
#include "shm/protocol.h"

namespace ringfeed {
namespace {

// Ranks mode's per-rank part of `status`: ready batches, seconds since the rank last took one,
// and whether it holds every rank up (ConsumerRegistry::RankStates).
nlohmann::json RanksJson(const std::vector<uint32_t>& ready, const std::vector<ConsumerRegistry::RankState>& states) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t r = 0; r < ready.size(); ++r) {
    const ConsumerRegistry::RankState state = r < states.size() ? states[r] : ConsumerRegistry::RankState{};
    out.push_back({{"rank", r},
                   {"ready", ready[r]},
                   {"seconds_since_take", state.seconds_since_take},
                   {"holds_up", state.holds_up}});
  }
  return out;
}

}  // namespace

void RateWindow::Add(Clock::time_point t, uint64_t records, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  samples_.push_back({t, records, bytes});
  while (samples_.size() > 11) samples_.pop_front();
}

std::pair<double, double> RateWindow::Rates(Clock::time_point now, uint64_t records, uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  // From the oldest sample at most 10.5 s old (one a second: about 10 s back). After a pause of
  // the sampler (the daemon stopped with SIGSTOP, then continued) the samples before it are far
  // older, and a rate from them would count what was done before the pause: then from the
  // first sample after it, or from the newest (the start while the daemon is younger than 10 s).
  const Sample* from = &samples_.back();
  for (const Sample& sample : samples_) {
    if (now - sample.t <= std::chrono::milliseconds(10'500)) {
      from = &sample;
      break;
    }
  }
  const Sample& a = *from;
  const double dt = std::chrono::duration<double>(now - a.t).count();
  if (dt <= 0) return {0, 0};
  return {static_cast<double>(records - a.records) / dt, static_cast<double>(bytes - a.bytes) / dt};
}

std::string_view EndName(PipelineEnd end) {
  switch (end) {
    case PipelineEnd::kRunning: return "running";
    case PipelineEnd::kEndOfData: return "end_of_data";
    case PipelineEnd::kFailed: return "failed";
    case PipelineEnd::kStopped: return "stopped";
  }
  return "?";
}

nlohmann::json StatusJson(const JobStatusFacts& f, const JobStatusNow& now) {
  const PipelineStats& s = now.stats;
  const double uptime = std::chrono::duration<double>(now.at - f.started).count();
  const auto [rate_records, rate_bytes] = now.window.Rates(now.at, s.records, s.record_bytes);
  // The overall rates stop at production's end: they are then the whole run's. (From the
  // pipeline's end time, stored before its end state, which consumers see first: not from
  // on_end, which runs after.)
  const double produced_for =
      s.end == PipelineEnd::kRunning ? -1 : std::chrono::duration<double>(now.ended_at - f.started).count();
  const double overall_seconds = produced_for >= 0 ? produced_for : uptime;
  nlohmann::json consumers_json = nlohmann::json::array();
  for (const auto& c : now.consumers.List()) {
    consumers_json.push_back({{"id", c.id},
                              {"pid", c.pid},
                              {"rank", c.rank < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.rank)},
                              {"batches_taken", c.batches_taken},
                              {"slots_held", c.slots_held},
                              {"wait_seconds", static_cast<double>(c.wait_ns) / 1e9},
                              {"attached_seconds", c.attached_seconds},
                              {"seconds_since_take", c.seconds_since_take}});
  }
  const uint64_t private_rss = now.private_rss_bytes;
  return nlohmann::json{
      {"type", "status"},
      {"job", f.job},
      {"state", EndName(s.end)},
      // What keeps new trainers (or ringfeedctl) from this daemon, or a second daemon
      // out: its segment, socket or lock file removed or replaced under it.
      {"problems", now.problems},
      {"pid", ::getpid()},
      {"config", f.config_path},
      {"socket", f.socket_path},
      // ringfeedd's version, for monitoring that reads these fields: new fields are added, and
      // a field's meaning changes only with the version (docs/operations.md).
      {"version", RINGFEED_VERSION},
      {"instance_id", shm::InstanceIdText(f.instance_id)},
      {"uptime_seconds", uptime},
      {"deterministic", f.deterministic},
      {"settings",
       {{"batch.size", f.batch_size},
        {"batch.drop_remainder", f.drop_remainder},
        {"shuffle.buffer", f.shuffle_buffer},
        {"shuffle.files", f.shuffle_files},
        {"shuffle.seed", f.shuffle_seed},
        {"pipeline.cycle_length", f.cycle_length},
        {"source.on_error", f.on_error},
        {"source.compression", f.compression}}},
      {"epoch", s.epoch},
      {"batches_in_epoch", s.batches_in_epoch},
      {"epochs", f.epochs},
      {"start_epoch", f.start_epoch},
      {"start_batch", f.start_batch},
      {"files", {{"total", f.files_total}, {"in_shard", f.files_in_shard}, {"done_in_epoch", s.files_done_in_epoch}}},
      {"shard", {{"index", f.shard.index}, {"count", f.shard.count}, {"by", f.shard.by_record ? "record" : "file"}}},
      {"records", s.records},
      {"batches", s.batches},
      {"record_bytes", s.record_bytes},
      {"throughput",
       {{"records_per_second",
         {{"last_10s", rate_records}, {"overall", overall_seconds > 0 ? s.records / overall_seconds : 0.0}}},
        {"mb_per_second",
         {{"last_10s", rate_bytes / 1e6},
          {"overall", overall_seconds > 0 ? s.record_bytes / overall_seconds / 1e6 : 0.0}}},
        {"production_seconds", produced_for >= 0 ? nlohmann::json(produced_for) : nlohmann::json(nullptr)}}},
      {"ring",
       {{"slots", f.slot_count},
        {"slot_bytes", f.slot_bytes},
        {"free", s.slots_free},
        {"filling", s.slots_filling},
        {"ready", s.slots_ready},
        {"held", s.slots_held},
        // Every slot held while production runs: who holds them and what to do.
        {"all_held", s.slots_held >= f.slot_count && s.end == PipelineEnd::kRunning
                         ? nlohmann::json(now.all_held_advice())
                         : nlohmann::json(nullptr)}}},
      {"consumers", consumers_json},
      {"ranks_without_consumer", f.ranks ? nlohmann::json(now.consumers.RanksWithoutConsumer()) : nlohmann::json(nullptr)},
      {"ranks", f.ranks ? RanksJson(s.ready_per_queue, now.consumers.RankStates(s.ready_per_queue)) : nlohmann::json(nullptr)},
      {"batches_reclaimed", now.consumers.batches_reclaimed()},
      {"ring_repairs", s.ring_repairs},
      {"pipeline",
       {{"cycle_length", f.cycle_length},
        {"readers", s.readers},
        {"read_ahead_per_file_bytes", s.stream_buffer_bytes},
        {"reads_per_file", s.reads_per_file},
        {"workers", s.workers},
        {"prefetch", s.prefetch},
        {"open_files", s.open_files},
        {"files_without_queued_reads", s.files_without_queued_reads},
        {"hedged_reads", s.hedged_reads},
        {"hedged_reads_won", s.hedged_reads_won},
        {"hedged_reads_state", !f.hedging                ? "off"
                               : s.hedged_reads_paused ? "paused"
                                                       : "on"},
        {"queued_read_round_trip_seconds", static_cast<double>(s.read_round_trip_ns) / 1e9},
        {"read_ahead_bytes", s.read_ahead_bytes},
        {"io_waiting", now.io_waiting}}},
      {"autotune", now.autotune()},
      {"memory",
       {{"segment_bytes", f.segment_bytes},
        {"private_rss_bytes", private_rss},
        {"budget_bytes", f.memory_budget_bytes},
        {"budget_source", f.memory_budget_source},
        {"shuffle_buffer", f.shuffle_buffer},
        {"shuffle_buffer_records", s.shuffle_records},
        {"shuffle_buffer_bytes", s.shuffle_bytes},
        {"shuffle_buffer_planned_bytes", f.memory.shuffle_bytes},
        {"over_budget", OverBudgetNow(f, s, private_rss)}}},
      {"errors",
       {{"read_errors_skipped", s.read_errors_skipped},
        {"parse_errors_skipped", s.parse_errors_skipped},
        {"files_ended_early", s.files_ended_early},
        {"batches_dropped", s.batches_dropped},
        {"last_error", s.last_error}}}};
}

std::string OverBudgetNow(const JobStatusFacts& f, const PipelineStats& s, uint64_t private_rss) {
  if (s.end == PipelineEnd::kFailed) return "";
  return OverBudgetWarning(f.memory, {private_rss, f.segment_bytes, s.shuffle_records, s.shuffle_bytes},
                           f.shuffle_buffer);
}

std::string ProgressLogText(const JobStatusFacts& f, const PipelineStats& s) {
  std::string text = fmt::format("epoch {} of {} (0-based {}), {} of its batches formed; {} records in {} batches in all",
                                 s.epoch + 1, f.epochs == 0 ? std::string("unlimited") : std::to_string(f.epochs),
                                 s.epoch, s.batches_in_epoch, s.records, s.batches);
  if (s.read_errors_skipped + s.parse_errors_skipped > 0) {
    text += fmt::format("; {} read and {} parse errors skipped", s.read_errors_skipped, s.parse_errors_skipped);
    if (s.files_ended_early > 0) text += fmt::format(" ({} of them ended a file early)", s.files_ended_early);
  }
  return text;
}

std::string SystemdStatusLine(const JobStatusFacts& f, const PipelineStats& s,
                              std::chrono::steady_clock::time_point ended_at, std::pair<double, double> rates_10s) {
  // `systemctl status` shows why a job failed: the unit stays active (trainers that attach get
  // the same error) until it is stopped, so the reason belongs in its status line.
  if (s.end == PipelineEnd::kFailed) return "failed: " + s.last_error;
  // The rates as the table and `list` give them: the last 10 s would fall towards 0 once
  // production has ended.
  const bool running = s.end == PipelineEnd::kRunning;
  const double produced_for = std::chrono::duration<double>(ended_at - f.started).count();
  const double records_rate = running || produced_for <= 0 ? rates_10s.first : s.records / produced_for;
  const double mb_rate = (running || produced_for <= 0 ? rates_10s.second : s.record_bytes / produced_for) / 1e6;
  return fmt::format("{}: epoch {} of {} (0-based {}), {} batches, {:.0f} records/s, {:.1f} MB/s{}", EndName(s.end),
                     s.epoch + 1, f.epochs == 0 ? std::string("unlimited") : std::to_string(f.epochs), s.epoch,
                     s.batches, records_rate, mb_rate, running ? "" : " over the run");
}

nlohmann::json FilesPage(const std::vector<std::string>& files, const nlohmann::json& request) {
  uint64_t first = 0;
  if (request.contains("first")) {
    const nlohmann::json& f = request["first"];
    if (!f.is_number_unsigned() && !(f.is_number_integer() && f.get<int64_t>() >= 0)) {
      return {{"type", "error"}, {"message", "\"first\" must be an integer from 0 to " + std::to_string(files.size())}};
    }
    first = f.get<uint64_t>();
    if (first > files.size()) {
      return {{"type", "error"}, {"message", "\"first\" " + std::to_string(first) + " is past the " +
                                             std::to_string(files.size()) + " files"}};
    }
  }
  // Paths as they will be written: as text, then JSON-escaped (a comma after each).
  constexpr size_t kPageBytes = shm::kMaxMessageBytes - 1024;
  nlohmann::json page = nlohmann::json::array();
  size_t bytes = 0;
  for (size_t i = first; i < files.size(); ++i) {
    std::string text = EscapeNonUtf8(files[i]);
    const size_t size = nlohmann::json(text).dump().size() + 1;
    if (!page.empty() && bytes + size > kPageBytes) break;
    bytes += size;
    page.push_back(std::move(text));
  }
  return {{"type", "files"}, {"total", files.size()}, {"first", first}, {"files", std::move(page)}};
}

}  // namespace ringfeed
