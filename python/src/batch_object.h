// BatchObject: ringfeed.Batch, one batch taken from the ring, as Python sees it. Features come
// out as NumPy arrays that view the slot (no copy); their lifetime rules are in slot_lease.h.
//
//   batch["name"]   fixed numeric: ndarray (rows, *shape); varlen numeric: (values, row_splits);
//                   fixed bytes: (data uint8, offsets int64); varlen bytes: (data, offsets,
//                   row_splits). A new set of arrays on every call (no cache: a cache would keep
//                   views alive and make release() impossible).
//   strings(name)   bytes features as Python bytes (copies): a list per batch (fixed, flattened
//                   over the per-row shape) or a list of lists (varlen, one per row).
//   release()       returns the slot now; BufferError naming the viewed features if any view
//                   of the batch is still alive.
//   close()         gives up this object's own hold: the slot returns now if nothing views it,
//                   else when the last view dies. What `with` does on exit.
// Errors: KeyError for an unknown feature (naming the known ones); ringfeed.ClientError for any
// access after release()/close(). Thread-safety: called with the GIL held, like any Python object.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>

#include "python/src/slot_lease.h"

namespace ringfeed::python {

namespace nb = nanobind;

// Imports NumPy's C API; call once from the module's init. Throws nb::python_error.
void InitNumpy();
// NumPy's type number for the values of `dtype` (NPY_UINT8 for bytes: the strings' bytes).
int NumpyType(shm::DType dtype);

class BatchObject {
 public:
  explicit BatchObject(std::shared_ptr<SlotLease> lease);

  nb::object Feature(nb::handle name) const;
  nb::list Strings(nb::handle name) const;
  nb::tuple Sources() const;
  nb::list Keys() const;
  bool Contains(nb::handle name) const;
  nb::dict LiveViews() const;  // feature -> live view count (diagnostics, tests)

  void Release();
  void Close();
  // For an upload (CudaUploaderObject): the lease, which the uploader keeps until its copies
  // completed; `what` names the caller in the error when the batch was released.
  std::shared_ptr<SlotLease> SharedLease(const char* what) const { return Lease(what); }
  bool released() const { return lease_ == nullptr; }

  uint64_t epoch() const { return epoch_; }
  uint64_t index() const { return index_; }
  uint32_t rows() const { return rows_; }
  bool end_of_epoch() const { return end_of_epoch_; }
  bool end_of_data() const { return end_of_data_; }
  uint32_t slot() const { return slot_; }
  std::string Repr() const;

 private:
  // The lease, or ClientError when released/closed.
  const std::shared_ptr<SlotLease>& Lease(const char* what) const;
  // Feature index for a str key, or KeyError naming the known features.
  uint32_t IndexOf(const SlotLease& lease, nb::handle name) const;

  std::shared_ptr<SlotLease> lease_;
  std::shared_ptr<const SchemaInfo> schema_;  // kept after release for keys()
  uint64_t epoch_ = 0, index_ = 0;
  uint32_t rows_ = 0, slot_ = 0;
  bool end_of_epoch_ = false, end_of_data_ = false;
};

}  // namespace ringfeed::python
