#include "client/cuda_uploader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "client/client_error.h"

namespace ringfeed {
namespace {

// ---- The few CUDA driver API types and constants used here, declared by hand so that no CUDA
// header or toolkit is needed to build. Source: CUDA Driver API reference (cuda.h), "Data
// types used by CUDA driver": CUresult is an enum (int-sized), CUdevice an int, CUdeviceptr an
// unsigned long long (64-bit builds), CUcontext/CUstream/CUevent opaque pointers.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;

constexpr CUresult kCudaSuccess = 0;                           // CUDA_SUCCESS
constexpr CUresult kCudaErrorNotReady = 600;                   // CUDA_ERROR_NOT_READY
constexpr CUresult kCudaErrorHostMemoryAlreadyRegistered = 712;  // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
constexpr unsigned kMemHostRegisterPortable = 0x01;            // CU_MEMHOSTREGISTER_PORTABLE
constexpr unsigned kMemHostRegisterReadOnly = 0x08;            // CU_MEMHOSTREGISTER_READ_ONLY (CUDA 11.1+)
constexpr unsigned kEventDisableTiming = 0x02;                 // CU_EVENT_DISABLE_TIMING

// The entry points, resolved with dlsym. The _v2 names are the ones the driver's ABI uses for
// these calls since CUDA 3.2/4.0 (cuda.h #defines the plain names to them); where a _v2 name
// is newer than some drivers (cuDevicePrimaryCtxRelease_v2: CUDA 11) the plain one is the
// fallback.
struct Driver {
  std::string path;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;       // cuCtxPushCurrent_v2
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;       // cuCtxPopCurrent_v2
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;  // _v2, else plain
  CUresult (*cuMemHostRegister)(void*, size_t, unsigned) = nullptr;  // _v2
  CUresult (*cuMemHostUnregister)(void*) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;  // _v2
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;           // _v2, else plain
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;

  // "cuMemcpyHtoDAsync_v2 failed: CUDA_ERROR_INVALID_VALUE (invalid argument)"
  std::string Describe(const char* call, CUresult r) const {
    const char* name = nullptr;
    const char* text = nullptr;
    if (cuGetErrorName(r, &name) != kCudaSuccess || name == nullptr) name = "unknown CUresult";
    if (cuGetErrorString(r, &text) != kCudaSuccess || text == nullptr) text = "no description";
    return std::string(call) + " failed: " + name + " (" + std::to_string(r) + ": " + text + ")";
  }
  void Check(CUresult r, const char* call, const std::string& what = "") const {
    if (r == kCudaSuccess) return;
    throw ClientError("GPU upload: " + Describe(call, r) + (what.empty() ? "" : " (" + what + ")"));
  }
};

const char* DefaultLibcuda() { return "libcuda.so.1"; }

// Loads the driver at `path` once per process; never unloaded (see cuda_uploader.h).
const Driver& LoadDriver(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Driver>> loaded;
  std::lock_guard lock(mutex);
  if (auto it = loaded.find(path); it != loaded.end()) return *it->second;

  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw ClientError("CUDA driver " + path + " not found (dlopen: " + (why ? why : "unknown error") +
                      "): GPU upload needs an NVIDIA driver; use the CPU views instead");
  }
  auto d = std::make_unique<Driver>();
  d->path = path;
  auto resolve = [&](auto& fn, const char* name, const char* fallback = nullptr) {
    void* sym = dlsym(handle, name);
    if (sym == nullptr && fallback != nullptr) sym = dlsym(handle, fallback);
    if (sym == nullptr) {
      dlclose(handle);
      throw ClientError("CUDA driver " + path + " has no entry point " + name +
                        " (a driver older than CUDA 11?): update the NVIDIA driver, or use the CPU views");
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  resolve(d->cuInit, "cuInit");
  resolve(d->cuDeviceGet, "cuDeviceGet");
  resolve(d->cuCtxGetCurrent, "cuCtxGetCurrent");
  resolve(d->cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  resolve(d->cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  resolve(d->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolve(d->cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
  resolve(d->cuMemHostRegister, "cuMemHostRegister_v2");
  resolve(d->cuMemHostUnregister, "cuMemHostUnregister");
  resolve(d->cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  resolve(d->cuEventCreate, "cuEventCreate");
  resolve(d->cuEventRecord, "cuEventRecord");
  resolve(d->cuEventQuery, "cuEventQuery");
  resolve(d->cuEventSynchronize, "cuEventSynchronize");
  resolve(d->cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
  resolve(d->cuStreamSynchronize, "cuStreamSynchronize");
  resolve(d->cuGetErrorName, "cuGetErrorName");
  resolve(d->cuGetErrorString, "cuGetErrorString");
  return *loaded.emplace(path, std::move(d)).first->second;
}

// Makes `ctx` current on this thread for the scope (only when it is not already), restoring
// the caller's context after.
class ContextScope {
 public:
  ContextScope(const Driver& d, CUcontext ctx) : d_(d) {
    CUcontext current = nullptr;
    if (d.cuCtxGetCurrent(&current) == kCudaSuccess && current == ctx) return;
    d.Check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent_v2");
    pushed_ = true;
  }
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (pushed_) d_.cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Driver& d_;
  bool pushed_ = false;
};

std::string Hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

}  // namespace

const char* BatchPartName(BatchPart part) {
  switch (part) {
    case BatchPart::kValues: return "values";
    case BatchPart::kRowSplits: return "row_splits";
    case BatchPart::kValueOffsets: return "value_offsets";
  }
  return "unknown part";
}

struct CudaUploader::Impl {
  struct Pending {
    Batch batch;                // Upload(Batch&&): the batch itself
    std::shared_ptr<void> hold;  // Upload(const Batch&, hold): what keeps the caller's batch
    CUevent event = nullptr;
  };
  // One resolved DeviceBuffer.
  struct Copy {
    const void* src;
    uint64_t bytes;
    uint64_t dst;
    std::string_view feature;
    BatchPart part;
  };

  const Driver* d = nullptr;
  CUcontext ctx = nullptr;
  CUdevice device = 0;
  bool owns_context = false;
  uint8_t* region = nullptr;
  uint64_t region_bytes = 0;
  bool registered = false;
  unsigned flags = 0;

  mutable std::mutex mutex;
  // Heap-allocated so that finishing one out of order moves no 12 KiB Batch; finished ones
  // go to `spare` with their event, ready for the next upload (no allocation, no cuEventCreate).
  std::vector<std::unique_ptr<Pending>> pending;
  std::vector<std::unique_ptr<Pending>> spare;
  std::vector<Copy> copies;  // scratch for Upload

  // Releases pending[i]'s slot and moves it to `spare`.
  void Finish(size_t i) {
    pending[i]->batch.Release();
    pending[i]->hold.reset();
    spare.push_back(std::move(pending[i]));
    pending[i] = std::move(pending.back());
    pending.pop_back();
  }

  size_t PollLocked() {
    size_t done = 0;
    for (size_t i = 0; i < pending.size();) {
      const CUresult r = d->cuEventQuery(pending[i]->event);
      if (r == kCudaErrorNotReady) {
        ++i;
        continue;
      }
      d->Check(r, "cuEventQuery", "an earlier upload failed on the GPU");
      Finish(i);
      ++done;
    }
    return done;
  }

  size_t SynchronizeLocked() {
    size_t done = 0;
    std::string first_error;
    while (!pending.empty()) {
      const CUresult r = d->cuEventSynchronize(pending.back()->event);
      if (r != kCudaSuccess && first_error.empty()) first_error = d->Describe("cuEventSynchronize", r);
      // Even on an error: the context is then broken and the GPU reads the slot no more.
      Finish(pending.size() - 1);
      ++done;
    }
    if (!first_error.empty()) throw ClientError("GPU upload: " + first_error);
    return done;
  }

  // Resolves dst[i] against the batch; throws ClientError naming what is wrong.
  Copy Resolve(const Batch& batch, const DeviceBuffer& b) const {
    TensorView v;
    if (!b.feature.empty()) {
      v = batch.feature(b.feature);  // throws naming the known features
    } else if (b.feature_index >= 0) {
      v = batch.feature(static_cast<size_t>(b.feature_index));  // throws when out of range
    } else {
      throw ClientError("GPU upload: a DeviceBuffer names no feature (set feature to a name or feature_index >= 0)");
    }
    Copy c{nullptr, 0, b.device_ptr, v.name(), b.part};
    auto what = [&] { return "feature '" + std::string(v.name()) + "' " + BatchPartName(b.part); };
    switch (b.part) {
      case BatchPart::kValues:
        c.src = v.data();
        c.bytes = v.bytes();
        break;
      case BatchPart::kRowSplits:
        if (v.type() != shm::FeatureType::kVarLen) {
          throw ClientError("GPU upload: feature '" + std::string(v.name()) +
                            "' is FixedLen and has no row_splits (only VarLen features have them)");
        }
        c.src = v.row_splits().data();
        c.bytes = v.row_splits().size_bytes();
        break;
      case BatchPart::kValueOffsets:
        if (v.dtype() != shm::DType::kBytes) {
          throw ClientError("GPU upload: feature '" + std::string(v.name()) + "' has dtype " +
                            std::string(shm::DTypeName(v.dtype())) +
                            " and no value_offsets (only bytes features have them)");
        }
        c.src = v.value_offsets().data();
        c.bytes = v.value_offsets().size_bytes();
        break;
      default:
        throw ClientError("GPU upload: feature '" + std::string(v.name()) + "': unknown BatchPart " +
                          std::to_string(static_cast<int>(b.part)) + " (values, row_splits or value_offsets)");
    }
    if (c.bytes > b.capacity) {
      throw ClientError("GPU upload: " + what() + " needs " + std::to_string(c.bytes) +
                        " bytes, but the device buffer at " + Hex(b.device_ptr) + " holds " +
                        std::to_string(b.capacity) + ": allocate at least " + std::to_string(c.bytes) +
                        " bytes (TensorView::bytes(), or 8 * (entries) for offsets)");
    }
    if (c.bytes > 0 && b.device_ptr == 0) {
      throw ClientError("GPU upload: " + what() + ": device_ptr is 0 (no device memory given)");
    }
    const auto* src = static_cast<const uint8_t*>(c.src);
    if (c.bytes > 0 && (src < region || src + c.bytes > region + region_bytes)) {
      throw ClientError("GPU upload: " + what() +
                        " lies outside the ring this uploader registered: the batch comes from another Client "
                        "(create one uploader per Client)");
    }
    return c;
  }

  // Checks `dst` against `batch`, enqueues the copies and the event on `stream`, and returns
  // the Pending entry to fill with what keeps the slot (not yet in `pending`) and the bytes.
  // When it throws after copies were enqueued, it has drained the stream first and *enqueued
  // says so (the caller may then hand the slot back); otherwise nothing was enqueued. mutex held.
  std::unique_ptr<Pending> Enqueue(const Batch& batch, uintptr_t stream_handle, std::span<const DeviceBuffer> dst,
                                   uint64_t* total, bool* enqueued);
  // Copies were enqueued reading from the slot and a later step failed: wait for the stream
  // before the slot goes back. Best effort: after a failure the context may be gone.
  void DrainAfterFailure(uintptr_t stream_handle) { d->cuStreamSynchronize(reinterpret_cast<CUstream>(stream_handle)); }
};

std::unique_ptr<CudaUploader::Impl::Pending> CudaUploader::Impl::Enqueue(const Batch& batch, uintptr_t stream_handle,
                                                                         std::span<const DeviceBuffer> dst,
                                                                         uint64_t* total, bool* enqueued) {
  *total = 0;
  *enqueued = false;
  if (!batch.valid()) {
    throw ClientError("GPU upload: the batch holds no slot (released, moved from, or never filled by Next)");
  }
  // Everything is checked before anything is enqueued, so a bad request changes nothing.
  copies.clear();
  for (const DeviceBuffer& b : dst) copies.push_back(Resolve(batch, b));

  const auto stream = reinterpret_cast<CUstream>(stream_handle);
  ContextScope scope(*d, ctx);
  PollLocked();
  std::unique_ptr<Pending> p;
  if (!spare.empty()) {
    p = std::move(spare.back());
    spare.pop_back();
  } else {
    p = std::make_unique<Pending>();
    d->Check(d->cuEventCreate(&p->event, kEventDisableTiming), "cuEventCreate");
  }
  try {
    for (const Copy& c : copies) {
      if (c.bytes == 0) continue;
      const CUresult r = d->cuMemcpyHtoDAsync(c.dst, c.src, c.bytes, stream);
      if (r != kCudaSuccess) {
        d->Check(r, "cuMemcpyHtoDAsync_v2",
                 "feature '" + std::string(c.feature) + "' " + BatchPartName(c.part) + ", " +
                     std::to_string(c.bytes) + " bytes to " + Hex(c.dst) + " on stream " + Hex(stream_handle));
      }
      *enqueued = true;
      *total += c.bytes;
    }
    const CUresult r = d->cuEventRecord(p->event, stream);
    if (r != kCudaSuccess) d->Check(r, "cuEventRecord", "stream " + Hex(stream_handle));
  } catch (...) {
    spare.push_back(std::move(p));
    if (*enqueued) DrainAfterFailure(stream_handle);
    throw;
  }
  return p;
}

CudaUploader::CudaUploader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<CudaUploader> CudaUploader::Create(Client& client, const UploaderOptions& options) {
  std::string path = options.libcuda_path;
  if (path.empty()) {
    const char* env = std::getenv("RINGFEED_LIBCUDA");
    path = env != nullptr && *env != '\0' ? env : DefaultLibcuda();
  }
  auto impl = std::make_unique<Impl>();
  const Driver& d = LoadDriver(path);
  impl->d = &d;

  const CUresult init = d.cuInit(0);
  if (init != kCudaSuccess) {
    throw ClientError("GPU upload: " + d.Describe("cuInit", init) + " (driver " + path +
                      "): no usable NVIDIA GPU here; use the CPU views instead");
  }
  d.Check(d.cuCtxGetCurrent(&impl->ctx), "cuCtxGetCurrent");
  if (impl->ctx == nullptr) {
    const CUresult r = d.cuDeviceGet(&impl->device, options.device);
    if (r != kCudaSuccess) {
      throw ClientError("GPU upload: " + d.Describe("cuDeviceGet", r) + " for device " +
                        std::to_string(options.device) +
                        ": pick a device that exists (UploaderOptions::device; CUDA_VISIBLE_DEVICES applies)");
    }
    d.Check(d.cuDevicePrimaryCtxRetain(&impl->ctx, impl->device), "cuDevicePrimaryCtxRetain",
            "device " + std::to_string(options.device));
    impl->owns_context = true;
  }

  const std::span<uint8_t> region = client.slots_region();
  impl->region = region.data();
  impl->region_bytes = region.size();
  try {
    ContextScope scope(d, impl->ctx);
    const std::string what = "the ring of job " + client.job() + ", " + std::to_string(region.size()) +
                             " bytes at " + Hex(reinterpret_cast<uintptr_t>(region.data()));
    unsigned flags = kMemHostRegisterPortable | (options.read_only ? kMemHostRegisterReadOnly : 0u);
    CUresult r = d.cuMemHostRegister(region.data(), region.size(), flags);
    if (r != kCudaSuccess && r != kCudaErrorHostMemoryAlreadyRegistered && options.read_only) {
      flags = kMemHostRegisterPortable;  // drivers/platforms without read-only registration
      r = d.cuMemHostRegister(region.data(), region.size(), flags);
    }
    if (r == kCudaErrorHostMemoryAlreadyRegistered) {
      impl->registered = false;  // someone else's registration; theirs to undo
    } else {
      d.Check(r, "cuMemHostRegister_v2", what);
      impl->registered = true;
      impl->flags = flags;
    }
  } catch (...) {
    if (impl->owns_context) d.cuDevicePrimaryCtxRelease(impl->device);
    throw;
  }
  return std::unique_ptr<CudaUploader>(new CudaUploader(std::move(impl)));
}

CudaUploader::~CudaUploader() {
  Impl& m = *impl_;
  const Driver& d = *m.d;
  std::lock_guard lock(m.mutex);
  try {
    ContextScope scope(d, m.ctx);
    try {
      m.SynchronizeLocked();
    } catch (const ClientError& e) {
      std::fprintf(stderr, "ringfeed: CudaUploader: %s\n", e.what());
    }
    if (m.registered) {
      const CUresult r = d.cuMemHostUnregister(m.region);
      if (r != kCudaSuccess) std::fprintf(stderr, "ringfeed: CudaUploader: %s\n", d.Describe("cuMemHostUnregister", r).c_str());
    }
    for (auto& p : m.spare) d.cuEventDestroy(p->event);
    m.spare.clear();
  } catch (const ClientError& e) {  // the context could not be made current
    std::fprintf(stderr, "ringfeed: CudaUploader: %s\n", e.what());
    for (auto& p : m.pending) p->batch.Release();
    m.pending.clear();
  }
  if (m.owns_context) d.cuDevicePrimaryCtxRelease(m.device);
}

uint64_t CudaUploader::Upload(Batch&& batch, uintptr_t stream, std::span<const DeviceBuffer> dst) {
  std::lock_guard lock(impl_->mutex);
  uint64_t total = 0;
  bool enqueued = false;
  std::unique_ptr<Impl::Pending> p;
  try {
    p = impl_->Enqueue(batch, stream, dst, &total, &enqueued);
  } catch (...) {
    // Copies were enqueued and the stream has drained since: the slot goes back. Otherwise
    // nothing happened and the batch stays with the caller.
    if (enqueued) batch.Release();
    throw;
  }
  p->batch = std::move(batch);
  impl_->pending.push_back(std::move(p));
  return total;
}

uint64_t CudaUploader::Upload(const Batch& batch, std::shared_ptr<void> hold, uintptr_t stream,
                              std::span<const DeviceBuffer> dst) {
  if (hold == nullptr) {
    throw ClientError("GPU upload: Upload(batch, hold, ...) needs a hold that keeps the batch's slot (got null)");
  }
  std::lock_guard lock(impl_->mutex);
  uint64_t total = 0;
  bool enqueued = false;
  // On an error after enqueued copies the stream has drained: dropping `hold` (ours) is safe.
  std::unique_ptr<Impl::Pending> p = impl_->Enqueue(batch, stream, dst, &total, &enqueued);
  p->hold = std::move(hold);
  impl_->pending.push_back(std::move(p));
  return total;
}

size_t CudaUploader::Poll() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->pending.empty()) return 0;
  ContextScope scope(*impl_->d, impl_->ctx);
  return impl_->PollLocked();
}

size_t CudaUploader::Synchronize() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->pending.empty()) return 0;
  ContextScope scope(*impl_->d, impl_->ctx);
  return impl_->SynchronizeLocked();
}

size_t CudaUploader::pending() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->pending.size();
}

bool CudaUploader::registered() const { return impl_->registered; }
unsigned CudaUploader::register_flags() const { return impl_->flags; }
bool CudaUploader::owns_context() const { return impl_->owns_context; }

}  // namespace ringfeed
