// ClientObject: ringfeed._core._Client, the binding of ringfeed::Client that the Python class
// ringfeed.Client (python/ringfeed/_client.py) wraps.
//
// Next(timeout_s) waits for the next batch with the GIL released (other Python threads run),
// in slices of at most 100 ms; between slices it takes the GIL and runs PyErr_CheckSignals, so
// Ctrl-C raises KeyboardInterrupt within ~100 ms. It first looks once without releasing the GIL
// (a batch already in the ring costs no GIL round trip). Returns a BatchObject, or None at the
// end of the data; raises ringfeed.Timeout (a TimeoutError) when `timeout_s` (>= 0) passed,
// ringfeed.ClientError with the client library's message otherwise.
//
// Timeouts above 1e9 s (inf included) wait forever; liveness_timeout is capped at 2147483 s
// (the client library's poll() takes an int of milliseconds).
//
// Thread-safety: Next may run on several threads at once (each gets a different batch); Close
// may race with them: an in-flight Next keeps the C++ Client alive (shared_ptr) and raises
// ClientError("closed while waiting") within a slice (100 ms), like every later call.
// fork(): in a child every call raises ClientError (the attachment is the parent's consumer;
// attach anew), and the parent's batches are never released by the child (slot_lease.h).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "python/src/slot_lease.h"

namespace ringfeed::python {

namespace nb = nanobind;

// What ringfeed.Timeout is raised from.
struct TimeoutReached : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ClientObject {
 public:
  ClientObject(const std::string& job, int rank, const std::string& runtime_dir, double liveness_timeout_s,
               double attach_timeout_s);

  nb::object Next(double timeout_s);
  void Close();
  bool closed() const { return client_ == nullptr; }

  const std::string& job() const { return schema_->schema.job; }
  int rank() const { return rank_; }
  uint32_t consumer_id() const { return consumer_id_; }
  int daemon_pid() const { return daemon_pid_; }
  uint32_t batch_size() const { return schema_->schema.batch_size; }
  std::string mode() const;
  uint32_t queue_count() const { return schema_->schema.queue_count; }
  const std::string& segment_name() const { return segment_name_; }
  // [(name, dtype name, "fixed"/"varlen", shape tuple)] in schema order.
  nb::list Features() const;
  // Client::files as bytes objects, the paths' bytes (a round trip to the daemon the first time;
  // the GIL is released for it). A str would fail on a path that is not UTF-8: ringfeed.Client
  // decodes them as os.fsdecode does.
  nb::list Files() const;
  // Client::end_reason as bytes (not checked as UTF-8: the Python side decodes with
  // errors="replace").
  nb::bytes EndReason() const;
  // (address, bytes) of the mapped slot area; every batch's data lies inside.
  std::pair<uintptr_t, uint64_t> SlotsRegion() const;
  // The C++ client (for the CUDA uploader); ClientError when closed.
  std::shared_ptr<Client> SharedClient() const { return Get(); }

 private:
  std::shared_ptr<Client> Get() const;

  std::shared_ptr<Client> client_;
  std::shared_ptr<const SchemaInfo> schema_;
  int rank_ = -1, daemon_pid_ = 0;
  int owner_pid_ = 0;        // the attaching process
  uint64_t generation_ = 0;  // ringfeed::ForkGeneration() at attach: differs in a forked child
  uint32_t consumer_id_ = 0;
  std::string segment_name_;
  std::pair<uintptr_t, uint64_t> slots_region_{0, 0};
  // A batch that a next() had taken when a signal handler's exception (Ctrl-C's
  // KeyboardInterrupt) ended that call: the next call returns it, so an interrupted wait loses
  // no batch. Released by close().
  std::shared_ptr<SlotLease> pending_;
};

}  // namespace ringfeed::python
