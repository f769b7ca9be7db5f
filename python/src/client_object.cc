#include "python/src/client_object.h"

#include <Python.h>
#include <nanobind/stl/string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "python/src/batch_object.h"
#include "python/src/gil_release.h"

namespace ringfeed::python {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kSlice{100};  // longest wait between signal checks
// Longer timeouts than this wait forever: a deadline this far out would overflow
// steady_clock's nanoseconds (292 years) once added to now.
constexpr double kForeverSeconds = 1e9;
// The longest liveness_timeout the client library takes: poll() waits an int of milliseconds.
constexpr double kMaxLivenessSeconds = 2147483.0;
// A wait without a timeout that has seen every slot of the ring held for this long gets a
// RuntimeWarning (the daemon logs the same after 10 s): nothing moves until a batch is released.
// So does one in ranks mode that another rank holds up (not attached, or not taking its batches).
constexpr std::chrono::seconds kStuckWarning{10};

// Seconds (finite, 0..kForeverSeconds) as whole milliseconds, rounded up.
std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

}  // namespace

ClientObject::ClientObject(const std::string& job, int rank, const std::string& runtime_dir,
                           double liveness_timeout_s, double attach_timeout_s) {
  if (!(liveness_timeout_s > 0)) throw nb::value_error("liveness_timeout must be > 0 seconds");
  if (!(attach_timeout_s >= 0)) throw nb::value_error("attach_timeout must be >= 0 seconds");
  ClientOptions options{.job = job, .rank = rank, .runtime_dir = runtime_dir,
                        .liveness_timeout = Millis(std::min(liveness_timeout_s, kMaxLivenessSeconds))};
  // Ctrl-C ends the waits inside Attach and files() (a frozen daemon's hello: up to
  // liveness_timeout): the signal's exception (KeyboardInterrupt) is left set for the
  // ClientInterrupted handlers below to raise.
  options.interrupted = [] {
    nb::gil_scoped_acquire gil;
    return PyErr_CheckSignals() != 0;
  };
  // Attach waits up to attach_timeout for a daemon that is starting (its "(tried for N s)"
  // message), asking options.interrupted every 100 ms.
  options.attach_timeout = Millis(std::min(attach_timeout_s, kMaxLivenessSeconds));
  try {
    GilRelease unlocked;  // the hello may take up to liveness_timeout
    client_ = Client::Attach(options);
  } catch (const ClientInterrupted&) {
    throw nb::python_error();  // what PyErr_CheckSignals set
  }
  auto info = std::make_shared<SchemaInfo>();
  info->schema = client_->schema();
  for (size_t i = 0; i < info->schema.features.size(); ++i) {
    info->index.emplace(info->schema.features[i].name, static_cast<uint32_t>(i));
    info->numpy_type.push_back(NumpyType(info->schema.features[i].dtype));
  }
  schema_ = std::move(info);
  owner_pid_ = getpid();
  generation_ = ringfeed::ForkGeneration();
  rank_ = client_->rank();
  daemon_pid_ = client_->daemon_pid();
  consumer_id_ = client_->consumer_id();
  segment_name_ = client_->segment_name();
  const auto region = client_->slots_region();
  slots_region_ = {reinterpret_cast<uintptr_t>(region.data()), region.size()};
}

std::shared_ptr<Client> ClientObject::Get() const {
  if (client_ == nullptr) throw ClientError("ringfeed.Client for job " + job() + " is closed");
  if (generation_ != ringfeed::ForkGeneration()) {
    // Its batches would be claimed under the parent's consumer and its releases would free the
    // parent's slots.
    throw ClientError("ringfeed.Client for job " + job() + " was attached by process " +
                      std::to_string(owner_pid_) + " before it forked; this child (pid " + std::to_string(getpid()) +
                      ") must attach a Client of its own");
  }
  return client_;
}

nb::object ClientObject::Next(double timeout_s) {
  std::shared_ptr<Client> client = Get();
  auto lease = std::make_shared<SlotLease>();
  lease->schema = schema_;
  lease->live.assign(schema_->schema.features.size(), 0);
  lease->owner_pid = owner_pid_;
  if (std::isnan(timeout_s)) throw nb::value_error("timeout must be None (wait forever) or >= 0 seconds, got nan");
  if (pending_) return nb::cast(BatchObject(std::exchange(pending_, nullptr)));  // the interrupted call's
  const bool forever = timeout_s < 0 || timeout_s > kForeverSeconds;
  const auto deadline = forever ? Clock::time_point::max() : Clock::now() + Millis(timeout_s);
  // First look without giving up the GIL: the common case when the daemon keeps ahead.
  Client::Status status = client->Next(std::chrono::milliseconds(0), &lease->batch);
  std::optional<Clock::time_point> all_held_since;  // every slot held, without a break, since
  const auto wait_began = Clock::now();
  bool warned = false;
  while (status == Client::Status::kTimeout) {
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    // close() from another thread ends this wait too, not only the next call.
    if (client_ == nullptr) throw ClientError("ringfeed.Client for job " + job() + " was closed while waiting");
    const auto now = Clock::now();
    if (forever && !warned) {
      const uint32_t held = client->slots_held(), slots = client->slot_count();
      if (client->slots_held_by_all() < slots) {
        all_held_since.reset();
      } else if (!all_held_since) {
        all_held_since = now;
      }
      std::string why;
      if (!all_held_since || now - *all_held_since < kStuckWarning) {
        // not (yet) stuck
      } else if (held == slots) {
        why = "this client holds all " + std::to_string(slots) +
              " slots of the ring (batches or arrays viewing them still alive): the wait ends only when "
              "another thread of this process releases one";
      } else {
        // Who holds them and what to do (unless a slot was released meanwhile: then no warning yet).
        const std::string reason = client->timeout_reason();
        if (reason.starts_with("all ")) why = reason + "; the wait ends only when one of them releases a batch";
      }
      // Ranks mode: a rank nobody attached as, or whose trainer leaves its batches untaken, holds
      // this one up (the daemon logs the same).
      if (why.empty() && schema_->schema.mode == shm::DeliveryMode::kRanks && now - wait_began >= kStuckWarning) {
        if (const std::string reason = client->timeout_reason(); !reason.empty() && !reason.starts_with("all ")) {
          why = reason;
        }
      }
      if (!why.empty()) {
        warned = true;  // once per wait
        const std::string message = "ringfeed: waiting " + std::to_string(kStuckWarning.count()) +
                                    " s (timeout=None) for a batch of job " + job() + ": " + why;
        if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) != 0) throw nb::python_error();
      }
    }
    if (now >= deadline) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
      const uint32_t held = client->slots_held(), slots = client->slot_count();
      if (held == slots) {
        throw TimeoutReached("no batch of job " + job() + " within " + seconds + " s: this client holds all " +
                             std::to_string(slots) +
                             " slots of the ring (batches or arrays viewing them still alive), so the daemon "
                             "has nowhere to put the next batch; release them (batch.release(), del the arrays, "
                             "copy what must outlive a batch)");
      }
      // Every slot held by consumers (who holds them, what to do), or in ranks mode a rank
      // without a consumer or one whose trainer does not take its batches.
      const std::string reason = client->timeout_reason();
      if (!reason.empty()) {
        throw TimeoutReached("no batch of job " + job() + " within " + seconds + " s: " + reason);
      }
      throw TimeoutReached("no batch of job " + job() + " within " + seconds +
                           " s (the daemon is running but has produced nothing new; see ringfeedctl status " +
                           job() + ")");
    }
    const auto left = forever ? kSlice : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                                             std::chrono::milliseconds(1);
    GilRelease unlocked;
    status = client->Next(std::min(left, kSlice), &lease->batch);
  }
  if (status == Client::Status::kEndOfData) return nb::none();
  // A signal that came while the batch was being taken (Ctrl-C during the wait, the GIL
  // released): its handler runs now, not as this call returns, where an exception would drop
  // the batch with the return value. If it raises, the next call returns the batch.
  if (PyErr_CheckSignals() != 0) {
    pending_ = std::move(lease);
    throw nb::python_error();
  }
  return nb::cast(BatchObject(std::move(lease)));
}

void ClientObject::Close() {
  pending_.reset();
  client_.reset();
}

std::string ClientObject::mode() const {
  return schema_->schema.mode == shm::DeliveryMode::kShared ? "shared" : "ranks";
}

nb::list ClientObject::Features() const {
  nb::list out;
  for (const FeatureInfo& f : schema_->schema.features) {
    nb::list shape;
    for (int64_t d : f.shape) shape.append(d);
    out.append(nb::make_tuple(f.name, std::string(shm::DTypeName(f.dtype)), std::string(shm::FeatureTypeName(f.type)),
                              nb::tuple(nb::steal(PySequence_Tuple(shape.ptr())))));
  }
  return out;
}

std::pair<uintptr_t, uint64_t> ClientObject::SlotsRegion() const { return slots_region_; }

nb::bytes ClientObject::EndReason() const {
  const std::string reason = Get()->end_reason();
  return nb::bytes(reason.data(), reason.size());
}

nb::list ClientObject::Files() const {
  std::vector<std::string> files;
  try {
    const std::shared_ptr<Client> client = Get();
    GilRelease unlocked;
    files = client->files();
  } catch (const ClientInterrupted&) {
    throw nb::python_error();  // what PyErr_CheckSignals set
  }
  nb::list out;
  for (const std::string& f : files) out.append(nb::bytes(f.data(), f.size()));
  return out;
}

}  // namespace ringfeed::python
