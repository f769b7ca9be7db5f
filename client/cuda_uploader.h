// CudaUploader: copies batches from the ring straight to GPU memory the caller owns (a torch
// tensor's storage, say), with no extra host copy. Reference: docs/client.md, "GPU upload".
//
//   auto uploader = ringfeed::CudaUploader::Create(*client, {});
//   ringfeed::Batch batch;
//   while (client->Next(30s, &batch) == ringfeed::Client::Status::kBatch) {
//     auto label = batch.feature("label");
//     // ... allocate label.bytes() bytes on the GPU at `dptr`, get the trainer's `stream` ...
//     ringfeed::DeviceBuffer dst[] = {{.feature = "label", .device_ptr = dptr, .capacity = cap}};
//     uploader->Upload(std::move(batch), stream, dst);   // enqueues; returns at once
//   }
//
// How: loads the CUDA *driver* API (libcuda.so.1) with dlopen on Create — nothing links
// against CUDA, so a trainer without a GPU never loads it and the uploader coexists with any
// CUDA runtime PyTorch or JAX bring. Create registers Client::slots_region() once with
// cuMemHostRegister (page-locked, so copies are DMA from the ring itself). Upload issues one
// cuMemcpyHtoDAsync per DeviceBuffer on the caller's stream, then records an event on that
// stream and keeps the Batch — and with it the ring slot — until the event has completed, so
// the daemon never overwrites a slot the GPU is still reading. Completed uploads hand their
// slots back in Poll() (called by every Upload too), Synchronize() or the destructor.
// Driver entry points and their C signatures: CUDA Driver API reference,
// https://docs.nvidia.com/cuda/cuda-driver-api/ (sections Initialization, Device, Primary
// Context, Context, Memory, Event, Error Handling); the types are declared in ringfeed's source
// (source: client/cuda_uploader.cc), not in a CUDA header.
//
// Context: Create uses the calling thread's current context (cuCtxGetCurrent; PyTorch and JAX
// make their device's primary context current) or, when there is none, retains the primary
// context of UploaderOptions::device. Every later call makes that context current for its
// duration (and restores the caller's), so any thread may call. `stream` must belong to that
// context; 0 is the legacy default stream.
//
// Units: bytes; device addresses are CUdeviceptr values (uint64_t), streams CUstream handles
// cast to uintptr_t (torch.cuda.Stream.cuda_stream, cupy's Stream.ptr).
//
// Errors: ClientError, naming what failed and the fix — libcuda missing ("CUDA driver
// libcuda.so.1 not found ..."), a driver call failing (the call, cuGetErrorName and
// cuGetErrorString), a feature unknown, a part the feature lacks, a capacity too small (the
// feature, the part, the bytes needed). Upload checks every DeviceBuffer before enqueuing
// anything: when it throws for one of those, `batch` is left as it was (still holding its
// slot). When the driver fails after copies were enqueued, the uploader waits for the stream
// (cuStreamSynchronize) and then hands the slot back (`batch` is released) before it throws.
//
// Lifetime: the Client must outlive its uploader (the registration covers the Client's
// mapping); the destructor waits for every pending upload, hands the slots back, then
// unregisters. libcuda, once loaded, stays loaded for the life of the process (never
// dlclosed: other users of the driver may share the handle).
//
// Thread-safety: every method may be called from any thread, also concurrently (a mutex
// guards the pending uploads; Synchronize holds it while it waits). The usual pattern is one
// uploader per Client, used by the thread that calls Next, with that thread's stream.
// Several uploaders over one Client work too (the range is registered by the first; the
// others see it registered and leave it alone), but one is enough. Not usable across fork().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "client/batch.h"
#include "client/client.h"

namespace ringfeed {

// Which array of a feature to copy (client/tensor_view.h has the layout).
enum class BatchPart : int {
  kValues = 0,        // TensorView::data(), bytes() bytes (every feature)
  kRowSplits = 1,     // int64[rows + 1] (VarLen features only)
  kValueOffsets = 2,  // int64[strings + 1] (bytes features only)
};

// "values", "row_splits", "value_offsets".
const char* BatchPartName(BatchPart part);

// One destination of an upload: a part of one feature, copied to device memory at device_ptr.
struct DeviceBuffer {
  std::string feature;      // the feature's name; when empty, feature_index names it
  int64_t feature_index = -1;  // schema order (used when `feature` is empty)
  BatchPart part = BatchPart::kValues;
  uint64_t device_ptr = 0;  // CUdeviceptr: where the bytes go
  uint64_t capacity = 0;    // bytes available at device_ptr (must be >= the part's bytes)
};

struct UploaderOptions {
  // The device whose primary context is retained when the calling thread has no current
  // context (ordinal, as cuDeviceGet counts; CUDA_VISIBLE_DEVICES applies).
  int device = 0;
  // The driver library; empty = $RINGFEED_LIBCUDA if set, else "libcuda.so.1". (For tests,
  // which point it at a shim.)
  std::string libcuda_path{};  // `{}`: designated initializers may leave it out (-Wextra)
  // Ask cuMemHostRegister for a read-only registration (CU_MEMHOSTREGISTER_READ_ONLY, the GPU
  // only reads the ring); when the driver refuses it, register without.
  bool read_only = true;
};

class CudaUploader {
 public:
  // Loads the driver, picks the context, registers client.slots_region(). Throws ClientError.
  static std::unique_ptr<CudaUploader> Create(Client& client, const UploaderOptions& options = {});
  ~CudaUploader();  // waits for pending uploads, releases their slots, unregisters
  CudaUploader(const CudaUploader&) = delete;
  CudaUploader& operator=(const CudaUploader&) = delete;

  // Enqueues one cuMemcpyHtoDAsync per entry of `dst` on `stream` (a CUstream as an integer),
  // then an event; takes the batch (its slot comes back once the event completed). Parts of 0
  // bytes copy nothing. Returns the bytes enqueued. Polls first, so slots of finished uploads
  // come back without another call. Throws ClientError (see above).
  uint64_t Upload(Batch&& batch, uintptr_t stream, std::span<const DeviceBuffer> dst);
  // The same for a batch the caller keeps owning (a language binding whose batch object and
  // array views share the slot): copies from `batch` and keeps `hold` — which must keep
  // `batch` alive and holding its slot, e.g. the binding's shared lease on it — until the
  // event completed, then drops it. The caller must not release `batch` itself meanwhile.
  // Throws ClientError also when `hold` is null.
  uint64_t Upload(const Batch& batch, std::shared_ptr<void> hold, uintptr_t stream,
                  std::span<const DeviceBuffer> dst);

  // Hands back the slots of uploads whose event has completed (cuEventQuery; never waits).
  // Returns how many. Throws ClientError when the driver reports an error.
  size_t Poll();
  // Waits for every pending upload (cuEventSynchronize) and hands the slots back. Returns
  // how many. Throws ClientError when the driver reports an error (the slots whose upload
  // failed come back too: the context is then unusable and nothing reads them any more).
  size_t Synchronize();

  // Uploads enqueued whose slot has not come back yet.
  size_t pending() const;
  // Whether Create registered the range itself (false: it was registered already, e.g. by
  // another uploader or by the trainer, and is left to whoever did).
  bool registered() const;
  // The registration flags used (CU_MEMHOSTREGISTER_*: 0x1 portable, 0x8 read-only).
  unsigned register_flags() const;
  // Whether the context was retained by Create (no context was current) — released again in
  // the destructor.
  bool owns_context() const;

  struct Impl;

 private:
  explicit CudaUploader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringfeed
