// CudaUploaderObject: ringfeed._core._CudaUploader, the binding of ringfeed::CudaUploader
// (client/cuda_uploader.h; docs/client.md, "GPU upload") that ringfeed.torch uses for CUDA
// devices. Copies a batch's columns from the registered ring straight into device memory the
// caller allocated (torch tensors' data_ptr()), on the caller's stream.
//
//   upload(batch, stream, dst)  dst: [(feature, part, device_ptr, capacity_bytes)], part one of
//                               "values", "row_splits", "value_offsets"; stream: a CUstream as
//                               an int (torch.cuda.Stream.cuda_stream). Enqueues the copies and
//                               returns at once. The Python Batch is closed (its features can no
//                               longer be taken); its slot stays held — by the uploader, and by
//                               any array still viewing it — until the copies' event completed,
//                               then returns to the daemon (in a later upload, poll() or
//                               synchronize()). Returns the bytes enqueued.
//   poll()                      hands back the slots of completed uploads; never waits.
//   synchronize()               waits for every pending upload (GIL released meanwhile).
//
// Lifetime: holds the C++ Client, so the mapping it registered outlives it; the destructor
// waits for pending uploads and unregisters. Errors: ringfeed.ClientError with the uploader's
// message (no libcuda, a driver call failing, a capacity too small, an unknown feature or part,
// a batch of another Client: outside the registered ring); TypeError/ValueError for a malformed dst.
// Thread-safety: calls are serialised by the GIL, and CudaUploader is thread-safe itself.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <string>

#include "client/cuda_uploader.h"
#include "python/src/batch_object.h"
#include "python/src/client_object.h"

namespace ringfeed::python {

namespace nb = nanobind;

class CudaUploaderObject {
 public:
  CudaUploaderObject(const ClientObject& client, int device, const std::string& libcuda_path);

  uint64_t Upload(BatchObject& batch, uintptr_t stream, nb::list dst);
  size_t Poll();
  size_t Synchronize();
  size_t pending() const { return uploader_->pending(); }
  bool registered() const { return uploader_->registered(); }

 private:
  std::shared_ptr<Client> client_;          // declared first: destroyed after the uploader
  std::unique_ptr<CudaUploader> uploader_;
};

}  // namespace ringfeed::python
