#include "tests/ring_test_producer.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <thread>

#include "shm/dtype.h"
#include "shm/futex.h"
#include "shm/names.h"
#include "shm/protocol.h"

namespace ringfeed::testing {
namespace {

using nlohmann::json;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

shm::FeatureDesc Feature(const char* name, shm::DType dtype, uint8_t type, std::vector<int64_t> shape) {
  shm::FeatureDesc f{};
  std::snprintf(f.name, sizeof f.name, "%s", name);
  f.dtype = static_cast<uint8_t>(dtype);
  f.type = type;
  f.rank = static_cast<uint8_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) f.shape[i] = shape[i];
  return f;
}

void SendAll(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

std::vector<shm::FeatureDesc> TestSchema() {
  return {Feature("label", shm::DType::kInt64, shm::kFixedLen, {}),
          Feature("weights", shm::DType::kFloat32, shm::kVarLen, {}),
          Feature("key", shm::DType::kBytes, shm::kFixedLen, {2}),
          Feature("pixels", shm::DType::kUInt8, shm::kFixedLen, {2, 3})};
}

RingTestProducer::RingTestProducer(const ProducerOptions& options) : options_(options) {
  const shm::Geometry g = shm::ComputeGeometry(options.slot_count, options.slot_bytes);
  segment_ = shm::Segment::Create(shm::SegmentName(options.runtime_dir, options.job), g.segment_bytes);
  shm::Superblock* sb = segment_.superblock();
  std::memcpy(sb->magic, shm::kMagic, sizeof shm::kMagic);
  sb->layout_version = shm::kLayoutVersion;
  sb->superblock_bytes = sizeof(shm::Superblock);
  sb->layout_hash = shm::kLayoutHash;
  sb->instance_id = std::random_device{}() * 0x100000000ull + std::random_device{}();
  sb->daemon_pid = getpid();
  std::snprintf(sb->job, sizeof sb->job, "%s", options.job.c_str());
  sb->heartbeat_period_ns = options.heartbeat_period_ns;
  sb->segment_bytes = g.segment_bytes;
  sb->slots_offset = g.slots_offset;
  sb->slot_stride = g.slot_stride;
  sb->slot_bytes = options.slot_bytes;
  sb->slot_count = options.slot_count;
  sb->batch_size = options.batch_size;
  sb->mode = static_cast<uint32_t>(options.mode);
  sb->queue_count = options.queue_count;
  const auto features = TestSchema();
  sb->feature_count = static_cast<uint32_t>(features.size());
  std::copy(features.begin(), features.end(), sb->features);
  ring_ = shm::Ring::Of(segment_.data());
  published_.assign(ring_.queue_count, 0);
  shm::Heartbeat(ring_);
  last_heartbeat_ns_ = shm::MonotonicNs();

  socket_path_ = shm::SocketPath(options.runtime_dir, options.job);
  unlink(socket_path_.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path_.c_str());
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd_, 64) != 0) {
    throw std::runtime_error("test producer: cannot listen on " + socket_path_ + ": " + std::strerror(errno));
  }
  sb->state.store(static_cast<uint32_t>(shm::DaemonState::kRunning), std::memory_order_release);
  sb->ready.store(1, std::memory_order_release);
}

RingTestProducer::~RingTestProducer() {
  for (Connection& c : connections_) {
    if (c.fd >= 0) close(c.fd);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  unlink(socket_path_.c_str());
  shm::Segment::Remove(segment_.name());
}

uint32_t RingTestProducer::consumers_attached() const {
  uint32_t n = 0;
  for (const Connection& c : connections_) n += c.fd >= 0 && c.consumer_id != 0;
  return n;
}

void RingTestProducer::Serve(std::chrono::milliseconds duration) {
  const auto deadline = std::chrono::steady_clock::now() + duration;
  do {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    ServeOnce(static_cast<int>(std::clamp<int64_t>(left.count(), 0, 20)));
  } while (std::chrono::steady_clock::now() < deadline);
}

void RingTestProducer::ServeOnce(int timeout_ms) {
  if (shm::MonotonicNs() - last_heartbeat_ns_ >= options_.heartbeat_period_ns) {
    shm::Heartbeat(ring_);
    last_heartbeat_ns_ = shm::MonotonicNs();
  }
  std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
  for (const Connection& c : connections_) fds.push_back({c.fd, POLLIN, 0});
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Connection& c = connections_[i - 1];
    char chunk[4096];
    ssize_t n = recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) {
      Drop(c);
      continue;
    }
    c.buffer.append(chunk, static_cast<size_t>(n));
    for (size_t nl; c.fd >= 0 && (nl = c.buffer.find('\n')) != std::string::npos;) {
      const std::string line = c.buffer.substr(0, nl);
      c.buffer.erase(0, nl + 1);
      HandleLine(c, line);
    }
  }
  std::erase_if(connections_, [](const Connection& c) { return c.fd < 0; });
  if (fds[0].revents & POLLIN) {
    for (int fd; (fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) {
      Connection c;
      c.fd = fd;
      connections_.push_back(std::move(c));
    }
  }
}

void RingTestProducer::HandleLine(Connection& c, const std::string& line) {
  if (c.consumer_id != 0) return;  // after the welcome only "bye" may come
  auto refuse = [&](const std::string& message) {
    SendAll(c.fd, json{{"type", shm::kMessageError}, {"message", message}}.dump() + "\n");
    Drop(c);
  };
  const json hello = json::parse(line, nullptr, false);
  if (!hello.is_object() || hello.value("type", "") != shm::kMessageHello) return refuse("expected a hello");
  if (!options_.reject_with.empty()) return refuse(options_.reject_with);
  if (hello.value("protocol", 0) != shm::kProtocolVersion) {
    return refuse("protocol mismatch: this daemon speaks " + std::to_string(shm::kProtocolVersion));
  }
  int rank = hello.contains("rank") && hello["rank"].is_number_integer() ? hello["rank"].get<int>() : -1;
  if (options_.mode == shm::DeliveryMode::kRanks) {
    if (rank < 0 || static_cast<uint32_t>(rank) >= options_.queue_count) {
      return refuse("rank " + std::to_string(rank) + " out of range 0.." + std::to_string(options_.queue_count - 1));
    }
    for (const Connection& other : connections_) {
      if (&other != &c && other.fd >= 0 && other.consumer_id != 0 && other.rank == rank) {
        return refuse("rank " + std::to_string(rank) + " is taken");
      }
    }
  }
  uint32_t id = 1;
  for (; id <= shm::kMaxConsumers; ++id) {
    bool used = false;
    for (const Connection& other : connections_) used |= other.fd >= 0 && other.consumer_id == id;
    if (!used) break;
  }
  if (id > shm::kMaxConsumers) return refuse("too many consumers");
  c.consumer_id = id;
  c.rank = rank;
  shm::ConsumerEntry& entry = ring_.sb->consumers[id - 1];
  entry.pid = hello.value("pid", 0);
  entry.rank = rank;
  entry.attached.store(1, std::memory_order_release);
  char instance[17];
  std::snprintf(instance, sizeof instance, "%016llx", static_cast<unsigned long long>(ring_.sb->instance_id));
  const json welcome = {{"type", shm::kMessageWelcome}, {"protocol", shm::kProtocolVersion},
                        {"job", options_.job}, {"segment", segment_.name()}, {"instance_id", instance},
                        {"consumer_id", id}, {"daemon_pid", static_cast<int>(getpid())}};
  SendAll(c.fd, welcome.dump() + "\n");
}

void RingTestProducer::Drop(Connection& c) {
  if (c.consumer_id != 0) {
    reclaimed_ += shm::ReclaimConsumer(ring_, c.consumer_id);
    ring_.sb->consumers[c.consumer_id - 1].attached.store(0, std::memory_order_release);
  }
  close(c.fd);
  c.fd = -1;
}

int RingTestProducer::PublishWith(uint32_t queue, const std::function<void(uint8_t*, uint64_t)>& fill,
                                  std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const uint32_t seen = ring_.sb->free_futex.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < ring_.slot_count; ++i) {
      if (shm::IsFree(ring_, i) && shm::BeginFill(ring_, i)) {
        fill(ring_.slot(i), ring_.slot_bytes);
        shm::Publish(ring_, i, queue, published_[queue]++);
        return static_cast<int>(i);
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    ServeOnce(0);
    shm::WaitForFree(ring_, seen, std::chrono::milliseconds(5));
  }
}

int RingTestProducer::PublishBatch(uint32_t queue, uint64_t n, uint64_t epoch, uint32_t flags, int rows,
                                   std::chrono::milliseconds timeout) {
  const uint32_t r = rows < 0 ? options_.batch_size : static_cast<uint32_t>(rows);
  return PublishWith(queue, [&](uint8_t* slot, uint64_t) { WriteBatch(slot, queue, n, epoch, flags, r); }, timeout);
}

void RingTestProducer::WriteBatch(uint8_t* slot, uint32_t queue, uint64_t n, uint64_t epoch, uint32_t flags,
                                  uint32_t rows) const {
  const uint64_t slot_bytes = ring_.slot_bytes;
  const auto features = TestSchema();
  const uint64_t columns_offset = sizeof(shm::SlotHeader);
  const uint64_t sources_offset = columns_offset + features.size() * sizeof(shm::ColumnDesc);
  uint64_t cursor = sources_offset + uint64_t{rows} * sizeof(shm::RowSource);
  auto alloc = [&](uint64_t bytes) {
    const uint64_t offset = AlignUp(cursor, shm::kColumnAlign);
    cursor = offset + bytes;
    if (cursor > slot_bytes) throw std::runtime_error("test producer: batch does not fit in the slot");
    return offset;
  };
  auto at = [&](uint64_t offset) { return slot + offset; };
  const uint64_t first = n * options_.batch_size;
  std::vector<shm::ColumnDesc> columns(features.size());

  // label
  columns[0].values_bytes = uint64_t{rows} * 8;
  columns[0].values_offset = alloc(columns[0].values_bytes);
  for (uint32_t r = 0; r < rows; ++r) {
    const int64_t g = static_cast<int64_t>(first + r);
    std::memcpy(at(columns[0].values_offset + r * 8), &g, 8);
  }
  // weights
  uint64_t values = 0;
  for (uint32_t r = 0; r < rows; ++r) values += (first + r) % 4;
  columns[1].values_bytes = values * 4;
  columns[1].values_offset = alloc(columns[1].values_bytes);
  columns[1].row_splits_count = rows + 1;
  columns[1].row_splits_offset = alloc(columns[1].row_splits_count * 8);
  int64_t split = 0;
  std::memcpy(at(columns[1].row_splits_offset), &split, 8);
  for (uint32_t r = 0; r < rows; ++r) {
    const uint64_t g = first + r;
    for (uint64_t k = 0; k < g % 4; ++k) {
      const float v = static_cast<float>(g) + 0.5f * static_cast<float>(k);
      std::memcpy(at(columns[1].values_offset + static_cast<uint64_t>(split) * 4), &v, 4);
      ++split;
    }
    std::memcpy(at(columns[1].row_splits_offset + (r + 1) * 8), &split, 8);
  }
  // key
  std::string bytes;
  std::vector<int64_t> offsets{0};
  for (uint32_t r = 0; r < rows; ++r) {
    bytes += "k" + std::to_string(first + r) + "a";
    offsets.push_back(static_cast<int64_t>(bytes.size()));
    bytes += "k" + std::to_string(first + r) + "bb";
    offsets.push_back(static_cast<int64_t>(bytes.size()));
  }
  columns[2].values_bytes = bytes.size();
  columns[2].values_offset = alloc(bytes.size());
  std::memcpy(at(columns[2].values_offset), bytes.data(), bytes.size());
  columns[2].value_offsets_count = offsets.size();
  columns[2].value_offsets_offset = alloc(offsets.size() * 8);
  std::memcpy(at(columns[2].value_offsets_offset), offsets.data(), offsets.size() * 8);
  // pixels
  columns[3].values_bytes = uint64_t{rows} * 6;
  columns[3].values_offset = alloc(columns[3].values_bytes);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t j = 0; j < 6; ++j) *at(columns[3].values_offset + r * 6 + j) = static_cast<uint8_t>(first + r + j);
  }

  std::memcpy(at(columns_offset), columns.data(), columns.size() * sizeof(shm::ColumnDesc));
  for (uint32_t r = 0; r < rows; ++r) {
    shm::RowSource s{queue, 0, first + r};
    std::memcpy(at(sources_offset + r * sizeof s), &s, sizeof s);
  }
  auto* h = reinterpret_cast<shm::SlotHeader*>(slot);
  h->epoch = epoch;
  h->batch_index = n;
  h->rows = rows;
  h->flags = flags;
  h->used_bytes = cursor;
  h->columns_offset = columns_offset;
  h->sources_offset = sources_offset;
}

void RingTestProducer::SetState(shm::DaemonState state, const std::string& message) {
  shm::SetState(ring_, state, message);
}

// ---- Child processes ----

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    kill(pid_, SIGCONT);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (!segment_.empty()) shm::Segment::Remove(segment_);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), segment_(std::move(other.segment_)) {
  other.segment_.clear();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    ChildProcess old(std::move(*this));
    pid_ = std::exchange(other.pid_, -1);
    segment_ = std::move(other.segment_);
    other.segment_.clear();
  }
  return *this;
}

void ChildProcess::Kill(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return status;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

ChildProcess ForkChild(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    int code = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", getpid(), e.what());
      code = 1;
    } catch (...) {
      code = 1;
    }
    std::fflush(nullptr);
    _exit(code);
  }
  return ChildProcess(pid);
}

ChildProcess ForkProducer(const ProducerOptions& options, const std::function<void(RingTestProducer&)>& scenario,
                          std::string* segment_name) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  ChildProcess child = ForkChild([&] {
    close(fds[0]);
    RingTestProducer producer(options);
    const std::string ready = producer.segment_name() + "\n";
    if (write(fds[1], ready.data(), ready.size()) < 0) _exit(2);
    close(fds[1]);
    scenario(producer);
    for (;;) producer.Serve(std::chrono::hours(1));
  });
  close(fds[1]);
  std::string name;
  char c;
  pollfd pfd{fds[0], POLLIN, 0};
  while (poll(&pfd, 1, 15000) > 0 && read(fds[0], &c, 1) == 1 && c != '\n') name += c;
  close(fds[0]);
  if (name.empty()) throw std::runtime_error("test producer child did not start (see its stderr)");
  if (segment_name) *segment_name = name;
  return ChildProcess(child.release(), name);
}

}  // namespace ringfeed::testing
