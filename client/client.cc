#include "client/client.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <thread>
#include <nlohmann/json.hpp>

#include "client/attachment.h"
#include "shm/names.h"
#include "shm/protocol.h"
#include "shm/ring.h"
#include "shm/shm_error.h"

namespace ringfeed {
namespace {
std::atomic<uint64_t> fork_generation{0};
void CountFork() { fork_generation.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

uint64_t ForkGeneration() {
  static const bool installed = [] { return pthread_atfork(nullptr, nullptr, CountFork) == 0; }();
  (void)installed;
  return fork_generation.load(std::memory_order_relaxed);
}

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The longest futex sleep: how often a waiting Next looks at the socket, state and heartbeat.
constexpr std::chrono::milliseconds kWaitSlice{100};
constexpr std::chrono::milliseconds kAttachRetry{100};  // ClientOptions::attach_timeout's retry period
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365 * 100);
// How long a corrupt delivery queue is waited out: the daemon repairs once a second.
constexpr std::chrono::seconds kCorruptQueueGrace{3};
// A daemon's heartbeat period is trusted up to this (a garbage value must not disable the check).
constexpr uint64_t kMaxHeartbeatPeriodNs = 60'000'000'000ull;

bool ParseHex64(const std::string& text, uint64_t* value) {
  if (text.empty() || text.size() > 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return false;
    v = v << 4 | static_cast<uint64_t>(digit);
  }
  *value = v;
  return true;
}

std::string HelloLine(int rank) {
  json hello = {{"type", shm::kMessageHello}, {"protocol", shm::kProtocolVersion},
                {"role", shm::kRoleConsumer}, {"pid", static_cast<int64_t>(getpid())}};
  hello["rank"] = rank >= 0 ? json(rank) : json(nullptr);
  return hello.dump();
}

// Fields of the daemon's answer, checked for type; `what` names the message for errors.
struct Answer {
  const json& message;
  const std::string& socket;

  [[noreturn]] void Bad(const std::string& field, const std::string& why) const {
    throw ClientError("ringfeedd's answer on " + socket + " has " + why + " \"" + field + "\": " +
                      message.dump().substr(0, 300) + "; the daemon and this client speak different "
                      "protocols: use the same ringfeed version for both");
  }
  std::string String(const std::string& field) const {
    auto it = message.find(field);
    if (it == message.end() || !it->is_string()) Bad(field, "no string field");
    return it->get<std::string>();
  }
  int64_t Int(const std::string& field) const {
    auto it = message.find(field);
    if (it == message.end() || !it->is_number_integer()) Bad(field, "no integer field");
    return it->get<int64_t>();
  }
};

// The superblock as it was at attach time, in private memory: everything the client trusts
// (geometry, schema, ids) is checked and read from this copy, so a later write to the shared
// superblock can't slip past the check.
struct SuperblockCopy {
  SuperblockCopy() : bytes(static_cast<uint8_t*>(::operator new(sizeof(shm::Superblock), std::align_val_t(shm::kPageBytes)))) {}
  ~SuperblockCopy() { ::operator delete(bytes, std::align_val_t(shm::kPageBytes)); }
  SuperblockCopy(const SuperblockCopy&) = delete;
  SuperblockCopy& operator=(const SuperblockCopy&) = delete;
  const shm::Superblock& sb() const { return *reinterpret_cast<const shm::Superblock*>(bytes); }
  uint8_t* bytes;
};

}  // namespace

Client::Client(std::shared_ptr<detail::Attachment> attachment) : attachment_(std::move(attachment)) {}
Client::~Client() = default;

std::unique_ptr<Client> Client::Attach(const ClientOptions& options) {
  if (options.job.empty()) {
    throw ClientError("ClientOptions::job is empty: set it to the job's name (the job: key of its config)");
  }
  if (!shm::IsValidJobName(options.job)) {  // it becomes a path: "../x" must not leave the runtime directory
    throw ClientError("ClientOptions::job '" + options.job + "' is not a job name: " + shm::kJobNameRule +
                      " (the job: key of its config)");
  }
  if (options.rank < -1) {
    throw ClientError("ClientOptions::rank " + std::to_string(options.rank) +
                      ": a rank is 0 or more (consumers.mode: ranks), or -1 for shared mode");
  }
  auto a = std::make_shared<detail::Attachment>();
  a->fork_generation = ForkGeneration();
  a->job = options.job;
  a->rank = options.rank;
  // At most ~24.8 days (poll()'s int milliseconds; deadlines then never overflow).
  a->liveness_timeout = std::clamp(options.liveness_timeout, std::chrono::milliseconds(1),
                                   std::chrono::milliseconds(std::numeric_limits<int>::max()));
  const std::string runtime_dir = options.runtime_dir.empty() ? shm::RuntimeDir() : options.runtime_dir;
  a->socket_path = shm::SocketPath(runtime_dir, options.job);

  const auto attach_timeout = std::clamp(options.attach_timeout, std::chrono::milliseconds(0),
                                         std::chrono::milliseconds(std::numeric_limits<int>::max()));
  const auto attach_deadline = Clock::now() + attach_timeout;
  a->interrupted = options.interrupted;
  a->connection.SetInterrupted(options.interrupted);
  // Until attach_timeout: nothing listens at the socket yet, or a daemon took the connection and
  // stopped before answering (one being restarted: it resets the connections queued at its
  // socket as it closes it), and the next one may be starting.
  // A daemon that refused the attach for now (its control connections all taken: `retry` in
  // its error) is tried again too, and its refusal is the error once attach_timeout is over.
  auto wait_or_throw = [&](const std::string& reason, bool refused = false) {
    const auto now = Clock::now();
    if (attach_timeout.count() == 0) {
      if (refused) throw ClientError(reason + ". To try again for a while, set attach_timeout (ClientOptions; "
                                              "attach_timeout= in Python)");
      throw DaemonNotRunningError(reason +
                                      ". To wait for a daemon that is starting, set attach_timeout (ClientOptions; "
                                      "attach_timeout= in Python)",
                                  reason);
    }
    if (now >= attach_deadline) {
      const double seconds = std::chrono::duration<double>(attach_timeout).count();
      char waited[32];
      std::snprintf(waited, sizeof waited, seconds >= 100 ? "%.0f" : "%.3g", seconds);  // 0.05, 1.5, 600
      const std::string tried = std::string(" (tried for ") + waited + " s: attach_timeout)";
      if (refused) throw ClientError(reason + tried);
      throw DaemonNotRunningError(reason + tried, reason);
    }
    if (options.interrupted && options.interrupted()) {
      throw ClientInterrupted("attaching to ringfeedd for job " + a->job + " was interrupted");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(kAttachRetry, attach_deadline - now));
  };
  // The reason an error answer gives.
  const auto reason_in = [](const json& answer) {
    return answer.contains("message") && answer["message"].is_string() ? answer["message"].get<std::string>()
                                                                       : answer.dump();
  };
  std::string line;
  json message;  // the answer to the hello
  for (;;) {
    try {
      a->connection.Connect(a->socket_path, a->job);
      a->connection.SendLine(HelloLine(options.rank));
      line = a->connection.ReadLine(std::max(a->liveness_timeout, std::chrono::milliseconds(1000)));
      message = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!message.is_object() || !message.contains("retry") || message["retry"] != true) break;
      a->connection.Close();
      wait_or_throw("ringfeedd for job " + a->job + " refused this consumer: " + reason_in(message),
                    /*refused=*/true);
    } catch (const DaemonNotRunningError& e) {
      wait_or_throw(e.reason());
    } catch (const detail::ConnectionClosedError& e) {
      a->connection.Close();
      if (attach_timeout.count() == 0) throw;  // as it came: the daemon was there
      wait_or_throw(e.what());
    }
  }
  if (message.is_discarded() || !message.is_object()) {
    throw ClientError("ringfeedd's answer on " + a->socket_path + " is not a JSON object: " + line.substr(0, 300));
  }
  const Answer answer{message, a->socket_path};
  const std::string type = answer.String("type");
  if (type == shm::kMessageError) {
    throw ClientError("ringfeedd for job " + a->job + " refused this consumer: " + reason_in(message));
  }
  if (type != shm::kMessageWelcome) answer.Bad("type", "an unexpected value in");
  if (answer.Int("protocol") != shm::kProtocolVersion) {
    throw ClientError("ringfeedd for job " + a->job + " speaks control protocol " +
                      std::to_string(answer.Int("protocol")) + ", this client " +
                      std::to_string(shm::kProtocolVersion) + ": use the same ringfeed version for both");
  }
  if (answer.String("job") != a->job) {
    throw ClientError("the daemon at " + a->socket_path + " serves job " + answer.String("job") + ", not " + a->job);
  }
  const std::string segment_name = answer.String("segment");
  const int64_t consumer_id = answer.Int("consumer_id");
  const int64_t daemon_pid = answer.Int("daemon_pid");
  uint64_t instance_id = 0;
  if (!ParseHex64(answer.String("instance_id"), &instance_id)) answer.Bad("instance_id", "a non-hex");
  if (consumer_id < 1 || consumer_id > shm::kMaxConsumers) answer.Bad("consumer_id", "an out-of-range");
  if (daemon_pid <= 0 || daemon_pid > INT32_MAX) answer.Bad("daemon_pid", "an invalid");
  if (segment_name.size() < 2 || segment_name[0] != '/' || segment_name.find('/', 1) != std::string::npos) {
    answer.Bad("segment", "an invalid");
  }
  a->consumer_id = static_cast<uint32_t>(consumer_id);
  a->daemon_pid = static_cast<int>(daemon_pid);
  a->instance_id = instance_id;

  try {
    a->segment = shm::Segment::Open(segment_name);
  } catch (const shm::SegmentMissingError&) {
    // The daemon just answered, so it runs: its segment was removed under it.
    throw ClientError("ringfeedd (pid " + std::to_string(a->daemon_pid) + ") for job " + a->job + " answered on " +
                      a->socket_path + ", but its shared-memory segment " + shm::Segment::Path(segment_name) +
                      " is gone: something removed it while the daemon runs (a cleanup of /dev/shm, or "
                      "systemd-logind's RemoveIPC=yes for the daemon's user). Trainers attached before go on; "
                      "new ones cannot attach until the job is restarted (docs/operations.md)");
  } catch (const shm::ShmError& e) {
    throw ClientError(e.what());
  }
  SuperblockCopy copy;
  if (a->segment.size() < sizeof(shm::Superblock)) {
    throw ClientError("ringfeed segment " + segment_name + " for job " + a->job + ": " +
                      shm::CheckSuperblock(a->segment.data(), a->segment.size()));
  }
  std::memcpy(copy.bytes, a->segment.data(), sizeof(shm::Superblock));
  if (std::string error = shm::CheckSuperblock(copy.bytes, a->segment.size()); !error.empty()) {
    throw ClientError("ringfeed segment " + segment_name + " for job " + a->job + ": " + error);
  }
  const shm::Superblock& sb = copy.sb();
  if (sb.instance_id != instance_id) {
    throw ClientError("ringfeed segment " + segment_name + " belongs to another ringfeedd instance (" +
                      shm::InstanceIdText(sb.instance_id) + ") than the one that answered (" + shm::InstanceIdText(instance_id) +
                      "): ringfeedd for job " + a->job + " restarted while this trainer attached; attach again");
  }
  a->ring = shm::Ring::Of(copy.bytes);
  a->ring.sb = a->segment.superblock();
  a->features.assign(sb.features, sb.features + sb.feature_count);
  a->batch_size = sb.batch_size;
  a->heartbeat_period_ns = std::min(sb.heartbeat_period_ns, kMaxHeartbeatPeriodNs);

  Schema& schema = a->schema;
  schema.job = a->job;
  schema.batch_size = sb.batch_size;
  schema.mode = static_cast<shm::DeliveryMode>(sb.mode);
  schema.queue_count = sb.queue_count;
  for (const shm::FeatureDesc& f : a->features) {
    FeatureInfo info;
    info.name = std::string(f.name, strnlen(f.name, shm::kMaxNameBytes));
    info.dtype = static_cast<shm::DType>(f.dtype);
    info.type = static_cast<shm::FeatureType>(f.type);
    if (f.type == shm::kFixedLen) info.shape.assign(f.shape, f.shape + f.rank);
    schema.features.push_back(std::move(info));
  }
  if (schema.mode == shm::DeliveryMode::kRanks) {
    if (options.rank < 0 || static_cast<uint32_t>(options.rank) >= sb.queue_count) {
      throw ClientError("job " + a->job + " delivers per rank (consumers.mode: ranks, " +
                        std::to_string(sb.queue_count) + " ranks): attach with a rank in 0.." +
                        std::to_string(sb.queue_count - 1) + ", not " + std::to_string(options.rank));
    }
    a->queue = static_cast<uint32_t>(options.rank);
  }
  a->last_heartbeat = a->ring.sb->heartbeat_ns.load(std::memory_order_acquire);
  a->last_heartbeat_change_ns = shm::MonotonicNs();
  return std::unique_ptr<Client>(new Client(std::move(a)));
}

const Schema& Client::schema() const { return attachment_->schema; }

const std::vector<std::string>& Client::files() const {
  detail::Attachment& a = *attachment_;
  std::lock_guard lock(a.files_mutex);
  if (a.have_files) return a.files;
  const auto timeout = std::max(a.liveness_timeout, std::chrono::milliseconds(1000));
  auto fail = [&](const std::string& why) -> ClientError {
    return ClientError("the file list of " + a.DaemonName() + " (" + a.socket_path + "): " + why);
  };
  detail::ControlConnection connection;
  connection.SetInterrupted(a.interrupted);
  connection.Connect(a.socket_path, a.job);
  connection.SendLine(json{{"type", shm::kMessageHello}, {"protocol", shm::kProtocolVersion},
                           {"role", shm::kRoleControl}, {"pid", static_cast<int64_t>(getpid())}}
                          .dump());
  const json welcome = json::parse(connection.ReadLine(timeout), nullptr, false);
  uint64_t instance_id = 0;
  if (!welcome.is_object() || welcome.value("type", "") != shm::kMessageWelcome ||
      !ParseHex64(welcome.value("instance_id", ""), &instance_id)) {
    throw fail("unexpected answer to hello: " + welcome.dump().substr(0, 300));
  }
  if (instance_id != a.instance_id) throw fail("ringfeedd restarted since this client attached; attach again");
  std::vector<std::string> files;
  for (;;) {
    connection.SendLine(json{{"type", "files"}, {"first", files.size()}}.dump());
    const json page = json::parse(connection.ReadLine(timeout), nullptr, false);
    if (!page.is_object() || page.value("type", "") != "files" || !page.contains("total") ||
        !page["total"].is_number_unsigned() || !page.contains("files") || !page["files"].is_array()) {
      throw fail("unexpected answer: " + page.dump().substr(0, 300));
    }
    const uint64_t total = page["total"].get<uint64_t>();
    for (const json& f : page["files"]) {
      if (!f.is_string()) throw fail("a path that is not a string: " + f.dump().substr(0, 300));
      files.push_back(shm::FileNameFromWire(f.get<std::string>()));  // bytes that are not UTF-8 came as \xNN
    }
    if (files.size() > total || (page["files"].empty() && files.size() < total)) {
      throw fail("the pages do not add up to " + std::to_string(total) + " files");
    }
    if (files.size() == total) break;
  }
  connection.Close();
  a.files = std::move(files);
  a.have_files = true;
  return a.files;
}
uint32_t Client::consumer_id() const { return attachment_->consumer_id; }
int Client::rank() const { return attachment_->rank; }
int Client::daemon_pid() const { return attachment_->daemon_pid; }
const std::string& Client::job() const { return attachment_->job; }
const std::string& Client::segment_name() const { return attachment_->segment.name(); }

uint32_t Client::slot_count() const { return attachment_->ring.slot_count; }

uint32_t Client::slots_held_by_all() const {
  const detail::Attachment& a = *attachment_;
  uint32_t held = 0;
  for (uint32_t i = 0; i < a.ring.slot_count; ++i) {
    held += shm::SlotWord::Unpack(a.ring.header(i)->word.load(std::memory_order_relaxed)).state == shm::SlotState::kHeld;
  }
  return held;
}

std::vector<uint32_t> Client::ranks_without_consumer() const {
  const detail::Attachment& a = *attachment_;
  std::vector<uint32_t> missing;
  if (a.schema.mode != shm::DeliveryMode::kRanks) return missing;
  std::vector<bool> seen(a.schema.queue_count, false);
  for (const shm::ConsumerEntry& c : a.ring.sb->consumers) {
    if (c.attached.load(std::memory_order_relaxed) == 1 && c.rank >= 0 &&
        static_cast<uint32_t>(c.rank) < a.schema.queue_count) {
      seen[static_cast<size_t>(c.rank)] = true;
    }
  }
  for (uint32_t r = 0; r < a.schema.queue_count; ++r) {
    if (!seen[r]) missing.push_back(r);
  }
  return missing;
}

std::vector<uint64_t> Client::ready_per_rank() const {
  const detail::Attachment& a = *attachment_;
  std::vector<uint64_t> ready;
  if (a.schema.mode != shm::DeliveryMode::kRanks) return ready;
  for (uint32_t q = 0; q < a.ring.queue_count; ++q) {
    const shm::QueueHeader& h = a.ring.queue(q);
    const uint64_t taken = h.taken.load(std::memory_order_acquire);
    const uint64_t published = h.published.load(std::memory_order_acquire);
    ready.push_back(published > taken ? std::min<uint64_t>(published - taken, a.ring.slot_count) : 0);
  }
  return ready;
}

std::string Client::end_reason() const {
  const shm::Ring& ring = attachment_->ring;
  // SetState writes the message before the state (release): an end read here has its message.
  if (static_cast<shm::DaemonState>(ring.sb->state.load(std::memory_order_acquire)) != shm::DaemonState::kEndOfData) {
    return "";
  }
  return std::string(ring.sb->error, strnlen(ring.sb->error, shm::kErrorBytes));
}

std::string Client::timeout_reason() const {
  // Every slot held: the daemon has nowhere to put a batch, whatever the mode.
  const shm::Ring& ring = attachment_->ring;
  const std::vector<uint32_t> held = shm::HeldPerConsumer(ring);  // one snapshot for the test and the text
  uint32_t held_by_all = 0;
  for (uint32_t h : held) held_by_all += h;
  if (ring.slot_count > 0 && held_by_all >= ring.slot_count) {
    const std::string slots = std::to_string(ring.slot_count);
    const uint32_t self = consumer_id();
    if (self < held.size() && held[self] >= ring.slot_count) {
      return "this client holds all " + slots + " slots of the ring (batches it has not released), so the daemon "
             "has nowhere to put the next batch: release the batches it is done with (C++: Batch::Release or let "
             "the Batch go; C: rf_batch_release; copy what must outlive a batch)";
    }
    uint32_t consumers = 0;  // attached, as the consumer table says; in ranks mode every rank counts
    for (const shm::ConsumerEntry& c : ring.sb->consumers) consumers += c.attached.load(std::memory_order_relaxed) == 1;
    if (attachment_->schema.mode == shm::DeliveryMode::kRanks) consumers = std::max(consumers, ring.queue_count);
    const auto name = [&](uint32_t id) {
      return id == self ? std::string("this client") : shm::ConsumerTableName(ring, id);
    };
    return "all " + slots + " slots of the ring are held by its consumers, so the daemon has nowhere to put the "
           "next batch: " + shm::AllHeldAdvice(held, name, consumers, ring.slot_count) + " (ringfeedctl status " +
           attachment_->job + ")";
  }
  const std::vector<uint64_t> ready = ready_per_rank();
  if (ready.empty()) return "";  // shared mode
  const std::vector<uint32_t> missing = ranks_without_consumer();
  const std::string n = std::to_string(attachment_->schema.queue_count);
  const std::string status = "ringfeedctl status " + attachment_->job;
  // Attached ranks whose trainers leave their batches untaken hold this one up only while this
  // one has nothing ready.
  const size_t own = static_cast<size_t>(rank());
  std::string behind;
  size_t behind_count = 0;
  if (own < ready.size() && ready[own] == 0) {
    for (size_t r = 0; r < ready.size(); ++r) {
      if (ready[r] == 0 || std::find(missing.begin(), missing.end(), r) != missing.end()) continue;
      ++behind_count;
      behind += (behind.empty() ? "rank " : ", rank ") + std::to_string(r) + " has " + std::to_string(ready[r]) +
                (ready[r] == 1 ? " ready batch" : " ready batches");
    }
  }
  // Ranks nobody attached as: all of them, unless an attached rank is behind; then only those
  // whose batches wait (after a cascade of timeouts the ranks that gave up hold nothing, and
  // naming them would hide the rank that does).
  std::vector<uint32_t> named;
  for (uint32_t r : missing) {
    if (behind_count == 0 || (r < ready.size() && ready[r] > 0)) named.push_back(r);
  }
  std::string without;
  for (uint32_t r : named) without += (without.empty() ? "" : ", ") + std::to_string(r);
  if (!without.empty()) {
    without = (named.size() == 1 ? "rank " : "ranks ") + without + " of " + n +
              (named.size() == 1 ? " has" : " have") + " no consumer attached";
  }
  if (!behind.empty()) {
    behind += behind_count == 1 ? " that its trainer has not taken" : " that their trainers have not taken";
  }
  // A ring too small for the ranks (each keeps a batch while it waits for the next, and one is
  // being filled) stalls them too; a rank that timed out on that and left is then the one
  // named above, so say both (new-user helper-103, session 40).
  const uint32_t ranks = attachment_->schema.queue_count;
  const std::string few =
      ring.slot_count < 2 * ranks
          ? "; besides, the ring's " + std::to_string(ring.slot_count) + " slots are too few for " + n +
                " ranks that each keep a batch while waiting for the next (give the job ring.slots: " +
                std::to_string(shm::RingSlotsForConsumers(ranks, ring.slot_count)) + " or more)"
          : std::string();
  if (!without.empty() && behind.empty()) {
    return without + few + "; ranks mode gives batch k of an epoch to rank k mod " + n +
           ", so the daemon stops producing at its prefetch depth while a rank does not take its batches: start "
           "every rank (docs/config.md, consumers; " + status + ")";
  }
  if (without.empty() && !behind.empty()) {
    return behind + few + "; ranks mode gives batch k of an epoch to rank k mod " + n +
           " and stops producing at its prefetch depth, so every rank waits for a trainer that is stopped, stuck or "
           "far slower than its peers (docs/operations.md, Status and troubleshooting; " + status + ")";
  }
  if (!without.empty()) {
    return without + "; " + behind + few + "; ranks mode gives batch k of an epoch to rank k mod " + n +
           " and stops producing at its prefetch depth while a rank does not take its batches: start every rank, "
           "and look for a trainer that is stopped, stuck or far slower than its peers (docs/config.md, consumers; "
           "docs/operations.md, Status and troubleshooting; " + status + ")";
  }
  return "";
}

uint32_t Client::slots_held() const {
  const detail::Attachment& a = *attachment_;
  uint32_t held = 0;
  for (uint32_t i = 0; i < a.ring.slot_count; ++i) {
    const shm::SlotWord w = shm::SlotWord::Unpack(a.ring.header(i)->word.load(std::memory_order_relaxed));
    held += w.state == shm::SlotState::kHeld && w.owner == a.consumer_id;
  }
  return held;
}

std::span<uint8_t> Client::slots_region() const {
  const detail::Attachment& a = *attachment_;
  // CheckSuperblock has checked slots_offset + slot_count * slot_stride <= the mapping's size.
  return {a.segment.data() + a.ring.slots_offset, uint64_t{a.ring.slot_count} * a.ring.slot_stride};
}

void Client::TakeBatch(uint32_t slot, uint64_t seq, Batch* out) {
  detail::Attachment& a = *attachment_;
  uint8_t* base = a.ring.slot(slot);
  std::string error;  // empty: no allocation unless the batch is bad
  // Checked straight into *out (which Next released): no copy of the column table. The offset
  // arrays' contents are checked per column on first use (Batch::feature).
  if (!shm::ReadBatch(base, a.ring.slot_bytes, a.batch_size, a.features, &out->checked_, &error)) {
    shm::Release(a.ring, slot, a.consumer_id, seq);
    throw ClientError(a.InvalidBatch(slot, seq, error) +
                      ". The batch was dropped. A process that maps the job's segment wrote into it (a trainer writing "
                      "past its batch), or this is a bug in ringfeedd: please report it");
  }
  a.consumer_entry().batches_taken.fetch_add(1, std::memory_order_relaxed);
  out->attachment_ = attachment_;
  out->slot_ = slot;
  out->seq_ = seq;
  out->base_ = base;
  out->ClearOffsetChecks();
}

void Client::CheckHeartbeat() {
  detail::Attachment& a = *attachment_;
  // Both read under the lock: another thread's Next may record a later change meanwhile, and
  // an age from an earlier `now` would wrap around (18446744073.7 s).
  std::lock_guard lock(a.liveness_mutex);
  const uint64_t heartbeat = a.ring.sb->heartbeat_ns.load(std::memory_order_acquire);
  const uint64_t now = shm::MonotonicNs();
  if (heartbeat != a.last_heartbeat) {
    a.last_heartbeat = heartbeat;
    a.last_heartbeat_change_ns = now;
    return;
  }
  const uint64_t limit = std::max<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(a.liveness_timeout).count(), 2 * a.heartbeat_period_ns);
  const uint64_t age = now - a.last_heartbeat_change_ns;
  if (age > limit) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", static_cast<double>(age) / 1e9);
    const std::string pid = std::to_string(a.daemon_pid);
    if (const std::string stopped = shm::StoppedProcess(a.daemon_pid); !stopped.empty()) {  // the fix is one command
      throw ClientError(a.DaemonName() + " has not written its heartbeat for " + seconds + " s: it is " + stopped +
                        "; continue it (kill -CONT " + pid + "), then attach again");
    }
    throw ClientError(a.DaemonName() + " has not written its heartbeat for " + seconds +
                      " s (stopped or frozen?); check it (ps -o stat= -p " + pid +
                      "; under systemd: systemctl status 'ringfeed@*') or restart it, then attach again");
  }
}

Client::Status Client::Next(std::chrono::milliseconds timeout, Batch* out) {
  detail::Attachment& a = *attachment_;
  if (out == nullptr) throw ClientError("Client::Next of job " + a.job + ": the batch to fill (out) is null");
  out->Release();
  if (a.Forked()) {
    throw ClientError("this Client of job " + a.job + " was attached by the parent of this forked process (pid " +
                      std::to_string(getpid()) + "): attach a new Client in the child (after fork)");
  }
  shm::QueueHeader& queue = a.ring.queue(a.queue);
  // The clock starts when the first look finds nothing: a batch that is already there (the
  // common case for a trainer that keeps up) costs no clock read and no wait accounting.
  // The wait is added to the consumer's wait_ns slice by slice (at most kWaitSlice late), not
  // only when Next returns: a trainer blocked in one long Next shows as waiting in `status` and
  // to the autotuner while it waits.
  Clock::time_point accounted{};  // the wait up to here is in wait_ns
  Clock::time_point deadline{};
  bool waiting = false;
  auto account_wait = [&] {
    if (!waiting) return;
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(now - accounted).count();
    a.consumer_entry().wait_ns.fetch_add(static_cast<uint64_t>(waited), std::memory_order_relaxed);
    accounted = now;
  };
  auto daemon_error = [&](shm::DaemonState state) {
    const char* error = a.ring.sb->error;
    const std::string text(error, strnlen(error, shm::kErrorBytes));
    return ClientError(a.DaemonName() + (state == shm::DaemonState::kFailed ? " failed: " : " stopped: ") +
                       (text.empty() ? std::string("(no message)") : text));
  };
  auto load_state = [&] { return static_cast<shm::DaemonState>(a.ring.sb->state.load(std::memory_order_acquire)); };

  bool daemon_closed = false;
  Clock::time_point corrupt_since{};
  for (;;) {
    const uint32_t futex = queue.publish_futex.load(std::memory_order_acquire);
    // Read before claiming: whatever was published before this state is visible to TryClaim.
    shm::DaemonState state = load_state();
    uint32_t slot = 0;
    uint64_t seq = 0;
    const shm::ClaimResult claim = shm::TryClaim(a.ring, a.queue, a.consumer_id, &slot, &seq);
    if (claim == shm::ClaimResult::kClaimed) {
      account_wait();
      TakeBatch(slot, seq, out);
      return Status::kBatch;
    }
    // A queue a process scribbled on: the daemon puts its cursors and slot entries back once a
    // second (Pipeline::RepairRing), so wait as for an empty queue; one that stays corrupt
    // (kCorruptQueueGrace) is an error.
    const bool corrupt = claim == shm::ClaimResult::kInvalid;
    if (!corrupt) {
      corrupt_since = {};
    } else if (corrupt_since == Clock::time_point{}) {
      corrupt_since = Clock::now();
    } else if (Clock::now() - corrupt_since > kCorruptQueueGrace) {
      throw ClientError(a.DaemonName() + ": delivery queue " + std::to_string(a.queue) +
                        " names a slot outside the ring's " + std::to_string(a.ring.slot_count) +
                        " slots or has cursors more than " + std::to_string(shm::kMaxSlots + shm::kMaxConsumers) +
                        " batches apart, for more than 3 s (corrupt segment " + a.segment.name() +
                        ": a process that maps it wrote there, and the daemon did not put it back)");
    }
    if (claim == shm::ClaimResult::kClosed) state = load_state();  // SetState closes after the state
    if (state == shm::DaemonState::kFailed || state == shm::DaemonState::kStopped) throw daemon_error(state);
    // Nothing left to claim (kEmpty with the state read before the claim, or kClosed). A queue
    // closed while the state still says running ends only with the state, which says how:
    // end of data, failure or stop. Until then, wait like for an empty queue.
    if (state == shm::DaemonState::kEndOfData && !corrupt) {
      account_wait();
      return Status::kEndOfData;
    }
    if (daemon_closed) {
      throw ClientError(a.DaemonName() + " exited (its control connection " + a.socket_path +
                        " closed); see its log (its stderr; under systemd: journalctl -u 'ringfeed@*'), restart it "
                        "and attach again");
    }
    if (a.connection.DaemonClosed()) {
      daemon_closed = true;  // one more look: it may have published or failed just before exiting
      continue;
    }
    CheckHeartbeat();
    const auto now = Clock::now();
    if (!waiting) {
      waiting = true;
      accounted = now;
      // milliseconds::max() (or anything past a century) means "no limit" without overflowing.
      deadline = now + std::clamp(timeout, std::chrono::milliseconds(0), kForever);
    }
    account_wait();
    if (now >= deadline) return Status::kTimeout;
    shm::WaitForPublish(a.ring, a.queue, futex, std::min<Clock::duration>(kWaitSlice, deadline - now));
  }
}

}  // namespace ringfeed
