// SlotLease: the Python side's hold on one ring slot, shared by the ringfeed.Batch object and by
// every NumPy array that views the slot. Lifetime model (docs/python.md, "Lifetime"):
//
//   - a Batch object and every view capsule own a std::shared_ptr<SlotLease>; the slot returns
//     to the daemon when the last of them is gone (~SlotLease runs ringfeed::Batch's destructor,
//     which releases the slot);
//   - each array's `base` is a capsule ("ringfeed.slot_view") owning one ViewRef, which counts
//     itself in `live` for its feature while it exists; a NumPy view of that array, or a torch
//     tensor made from it by DLPack, keeps the array and so the capsule alive;
//   - Batch.release() returns the slot at once when live_total == 0 and raises BufferError
//     naming the features in `live` otherwise, so Python never reads a released slot.
//
// fork(): a forked child shares the ring with its parent but not the parent's holds. A lease
// made before the fork is dropped in the child without handing the slot back (the client
// library's Batch leaves a parent's slot alone in a forked child), so a child's `del batch` or
// interpreter exit never frees a slot its parent is still reading. ringfeed::ForkGeneration()
// (client/client.h) tells a lease or client taken before a fork.
//
// Thread-safety: the counts are only touched with the GIL held (array creation, capsule
// destruction, release), which serialises them; the slot release itself is a lock-free CAS.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "client/batch.h"
#include "client/client.h"
#include "client/schema.h"

namespace ringfeed::python {

// Hash for lookups by std::string_view (the UTF-8 of a Python str) without a std::string.
struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// The schema as the bindings need it: features in order, a name -> index map, NumPy type numbers.
struct SchemaInfo {
  Schema schema;
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> index;
  std::vector<int> numpy_type;  // per feature: NPY_* of the values (NPY_UINT8 for bytes)
};

struct SlotLease {
  SlotLease() = default;
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  // True in a process forked after this lease was taken (the client library's fork count; its
  // Batch destructor already leaves a parent's slot alone in a child).
  bool forked() const { return generation != ringfeed::ForkGeneration(); }

  ringfeed::Batch batch;  // holds the slot until released or destroyed
  std::shared_ptr<const SchemaInfo> schema;
  std::vector<uint32_t> live;  // per feature: view capsules alive
  uint32_t live_total = 0;
  uint64_t generation = ringfeed::ForkGeneration();
  int owner_pid = 0;  // the process that took the batch (errors in a forked child)
};

// Owned by one capsule; counts one live view of `feature`.
struct ViewRef {
  ViewRef(std::shared_ptr<SlotLease> l, uint32_t f) : lease(std::move(l)), feature(f) {
    ++lease->live[feature];
    ++lease->live_total;
  }
  ~ViewRef() {
    --lease->live[feature];
    --lease->live_total;
  }
  ViewRef(const ViewRef&) = delete;
  ViewRef& operator=(const ViewRef&) = delete;

  std::shared_ptr<SlotLease> lease;
  uint32_t feature;
};

}  // namespace ringfeed::python
