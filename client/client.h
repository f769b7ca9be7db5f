// Client: a trainer process's attachment to ringfeedd — takes the job's batches from the
// shared-memory ring, zero-copy. Reference: docs/client.md.
//
//   auto client = ringfeed::Client::Attach({.job = "train", .rank = rank});
//   ringfeed::Batch batch;
//   while (client->Next(std::chrono::seconds(30), &batch) == ringfeed::Client::Status::kBatch) {
//     auto label = batch.feature("label").values<int64_t>();   // rows() values
//     ...
//   }   // each Next (or batch.Release()) hands the previous slot back to the daemon
//
// Attach connects to the job's control socket (source: shm/names.h, SocketPath), says hello
// (source: shm/protocol.h), maps the segment the welcome names, checks it (magic, layout
// version and hash, geometry, schema; source: shm/superblock_check.h) and that it belongs to
// the daemon that answered (instance id). The connection stays open while the Client or any of its Batches lives: its
// end tells the daemon that this consumer is gone, and the daemon then reclaims its slots.
//
// Next waits on the queue's futex in slices of at most 100 ms, no busy spinning. Between
// slices it checks that the daemon is alive: its end of the control connection (EOF => error
// within a slice of the daemon dying), its state (kFailed/kStopped => error with the daemon's
// message) and its heartbeat (unchanged for longer than liveness_timeout, or twice the
// daemon's heartbeat period if that is longer => "frozen?" error). Batches published before
// the daemon failed, stopped or reached the end are still delivered first. Every batch is
// checked (source: shm/batch_check.h) before it is handed out; a bad one is released and reported.
//
// Errors: ClientError (daemon not running, refused the consumer with its reason, died,
// failed, stopped, froze, wrote an invalid batch, incompatible layout). A timeout is
// Status::kTimeout, the end of the data Status::kEndOfData (then every later Next too).
//
// Thread-safety: Attach may be called from several threads at once (each gets its own Client).
// Every const member, and Next, may be called from several threads of one Client at once (each
// Next claims a different batch). Destroying a Client (the unique_ptr) while another thread is
// in one of its calls is undefined behaviour, as for any C++ object; its Batches may outlive
// it (they keep the mapping and the connection). fork(): a child must not use its parent's Client; attach anew in
// the child (a DataLoader worker, say) after fork. In a forked child the parent's Client's Next
// throws ClientError, and releasing (or destroying) a Batch inherited from the parent does not
// hand the slot back — the parent may still be reading it.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "client/batch.h"
#include "client/client_error.h"
#include "client/schema.h"
#include "client/tensor_view.h"

namespace ringfeed {

// Every member has an initializer (`{}` included), so that a designated initializer that leaves
// some out (`Client::Attach({.job = "train"})`) compiles without -Wmissing-field-initializers.
struct ClientOptions {
  std::string job{};
  // consumers.mode ranks: this trainer's rank (0..ranks-1), whose queue it takes from.
  // Shared mode: -1 (the daemon refuses a rank there).
  int rank = -1;
  std::string runtime_dir{};  // empty = shm::RuntimeDir() (RINGFEED_RUNTIME_DIR, ...)
  // How long the daemon's heartbeat may stand still before Next reports it frozen. The wait
  // for the daemon's answer to the hello is the larger of this and 1 s. 1 ms to ~24.8 days
  // (2^31 - 1 ms); values outside are clamped.
  std::chrono::milliseconds liveness_timeout{10000};
  // How long Attach waits for the daemon when nothing listens at the job's socket yet (a
  // trainer launched together with its daemon), or the daemon there closes the connection
  // before answering (it is stopping: a restart): it tries again every 100 ms until this has
  // passed, then throws DaemonNotRunningError. 0 (the default): one try. Other errors (a
  // refused rank, a protocol mismatch, permissions) are thrown at once. Values outside 0 ms to
  // ~24.8 days are clamped.
  std::chrono::milliseconds attach_timeout{0};
  // Asked about every 100 ms while Attach waits (for the socket under attach_timeout, for the
  // daemon's answer to the hello: up to liveness_timeout) and while files() waits for the
  // daemon; when it returns true the wait ends with ClientInterrupted. Called on the waiting
  // thread. Bindings use it so that Ctrl-C ends a wait on a frozen daemon at once (Python:
  // PyErr_CheckSignals). Empty (the default): the waits run their whole time.
  std::function<bool()> interrupted{};
};

namespace detail {
struct Attachment;
}  // namespace detail

// Counts fork()s of this process (a pthread_atfork child handler, installed on first use): a
// value read before a fork differs in the child. Bindings use it to refuse, in a forked child,
// what belongs to the parent. Thread-safe; one relaxed atomic load.
uint64_t ForkGeneration();

class Client {
 public:
  enum class Status { kBatch, kTimeout, kEndOfData };

  // Throws ClientError (see above).
  static std::unique_ptr<Client> Attach(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Takes the next batch into *out (releasing what *out held first), waiting at most
  // `timeout` (0 or negative = just look; std::chrono::milliseconds::max() = no limit; the C
  // API's rf_next reads a negative timeout as no limit). kTimeout and
  // kEndOfData leave *out empty. A null `out` throws ClientError; so does any error above,
  // with *out left empty (what it held released).
  Status Next(std::chrono::milliseconds timeout, Batch* out);

  // The batch schema from the segment (feature names, dtypes, shapes, batch size). The
  // reference is valid while this Client lives; thread-safe (never changes after Attach).
  const Schema& schema() const;
  // The job's file list (all shards'): Batch::source(row).file_index indexes it. Asked
  // of the daemon on a control connection of its own on the first call (one round trip per
  // ~60 KiB of paths), then kept. Paths as the daemon expanded the config's globs, byte for
  // byte (UTF-8 or not), absolute (a relative entry has the daemon's working directory
  // prefixed), in the job's order (docs/architecture.md, rule 1). Thread-safe. Throws
  // ClientError (the daemon gone or restarted since this client attached). The reference is
  // valid while this Client lives. It asks on a connection of its own, so it works in a forked
  // child too (the Python binding refuses it there, as every use of the parent's client).
  const std::vector<std::string>& files() const;
  // Fixed at Attach; thread-safe. References are valid while this Client lives.
  uint32_t consumer_id() const;  // 1..64, this consumer's entry in the daemon's table
  int rank() const;              // the rank attached as (consumers.mode ranks), else -1
  int daemon_pid() const;        // the daemon's pid as it said in its welcome
  const std::string& job() const;
  // The POSIX shared-memory name of the job's segment, "/ringfeed.JOB.HASH" (HASH: 16
  // lower-case hex digits of FNV-1a-64 of the runtime directory's canonical path and file
  // system; the file /dev/shm/ringfeed.JOB.HASH on Linux).
  const std::string& segment_name() const;
  // The ring's slots as mapped in this process: every batch's data lies inside. Starts on a
  // page boundary (4 KiB) and spans whole pages, as cuMemHostRegister and friends need.
  // Valid while this Client or any of its Batches lives.
  std::span<uint8_t> slots_region() const;
  // Ring slots in all, and how many this consumer holds now (batches taken and not released,
  // here or in a binding's views): when they are equal, Next can only time out. For messages.
  // Thread-safe (reads the segment's words).
  uint32_t slot_count() const;
  uint32_t slots_held() const;
  uint32_t slots_held_by_all() const;  // by any consumer of the job
  // consumers.mode ranks: the ranks (ascending) that no consumer is attached as now, as the
  // daemon's consumer table says; empty in shared mode. A rank without a consumer stalls the
  // job at its prefetch depth (its batches are never taken). For messages.
  std::vector<uint32_t> ranks_without_consumer() const;
  // consumers.mode ranks: per rank, the batches published to its delivery queue and not taken
  // yet (a snapshot of the ring's queue words, at most slot_count()); empty in shared mode. A
  // rank whose trainer is attached but does not take its batches (stopped, stuck, far slower)
  // stalls the job the same way. For messages.
  std::vector<uint64_t> ready_per_rank() const;
  // Why a Next may have timed out, from the ring's words now. Every slot held (any mode): who
  // holds them and what to do ("all 8 slots of the ring are held by its consumers, so ...:
  // consumer 1 (pid 2458) holds 7, this client 1: consumer 1 (pid 2458) keeps 7 batches it has
  // not released ...", shm::AllHeldAdvice; or "this client holds all 8 slots ..."). Else, in
  // consumers.mode ranks, from ranks_without_consumer() and
  // ready_per_rank(), naming the ranks that hold this one up: when this client's rank has
  // nothing ready, the attached ranks with ready batches ("rank 1 has 4 ready batches that its
  // trainer has not taken"), and the ranks nobody attached as ("rank 2 of 3 has no consumer
  // attached"; while an attached rank is behind, only those of them whose batches wait: after a
  // cascade of timeouts the ranks that gave up hold nothing up), with what to do and where to
  // read more. Without a leading ": " or the job's name: a caller says what timed out and for
  // how long, then adds this. "" when nothing applies (a free slot, and shared mode or every rank
  // attached and none behind): look elsewhere (slow data, a daemon that stopped producing).
  // Thread-safe like its neighbours (reads the segment's words only).
  std::string timeout_reason() const;
  // Why the data ended, once Next has returned kEndOfData: "" after an ordinary end (every
  // epoch served), else ringfeedd's reason, e.g. "epoch 0 delivered no batch: all it read was
  // skipped under on_error: skip (10000 errors; ...); the first: FILE: record 0 ...". "" while the data has
  // not ended. At most shm::kErrorBytes bytes, as the daemon wrote them in the segment (UTF-8 from
  // ringfeedd, not checked). Thread-safe (reads the segment's words only).
  std::string end_reason() const;

 private:
  explicit Client(std::shared_ptr<detail::Attachment> attachment);
  // Checks the claimed batch in `slot` and hands it to *out; releases it and throws
  // ClientError when it is invalid.
  void TakeBatch(uint32_t slot, uint64_t seq, Batch* out);
  // Throws ClientError when the daemon's heartbeat has stood still too long.
  void CheckHeartbeat();

  std::shared_ptr<detail::Attachment> attachment_;
};

}  // namespace ringfeed
