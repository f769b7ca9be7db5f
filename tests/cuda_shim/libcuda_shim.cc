// libcuda_shim: a stand-in for the NVIDIA driver library (libcuda.so.1) for the CUDA uploader's
// tests (tests/cuda_uploader_test.cc). Built as <build>/tests/cuda_shim/libcuda.so.1 and loaded
// only through RINGFEED_LIBCUDA / UploaderOptions::libcuda_path — never installed.
//
// Exports the driver entry points client/cuda_uploader.cc resolves, with the driver's C
// signatures (CUDA Driver API reference). There is one fake device (ordinal 0) whose primary
// context is a fixed pointer; "device memory" is host memory the test allocates (a CUdeviceptr
// is its address), and copies are performed (memcpy) when enqueued, so values can be checked.
// Every call is logged in order — name, stream, src, dst, bytes, flags, result, whether the
// source lay inside a registered range, and the thread's current context — for the test to
// read through the extra shim_* functions below.
//
// Events: cuEventRecord marks an event pending; it completes at once while
// shim_set_events_complete(1) (the default), otherwise it stays pending ("the GPU is still
// copying") until shim_set_events_complete(1) or until someone waits on it with
// cuEventSynchronize/cuStreamSynchronize (the wait is what completes it).
//
// Thread-safety: one mutex around all state; the current-context stack is per thread, as in
// the driver.
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kNotInitialized = 3;
constexpr CUresult kNoDevice = 100;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kInvalidHandle = 400;
constexpr CUresult kNotReady = 600;
constexpr CUresult kAlreadyRegistered = 712;
constexpr CUresult kNotRegistered = 713;
constexpr CUresult kNotSupported = 801;
constexpr unsigned kReadOnly = 0x08;

struct Call {
  std::string name;
  uint64_t stream = 0, src = 0, dst = 0, bytes = 0, flags = 0, event = 0, context = 0;
  int result = 0;
  bool src_registered = false;
};

struct Event {
  bool recorded = false;
  bool complete = true;
  uint64_t stream = 0;
};

char primary_context_storage;  // its address is the device's primary context
CUcontext PrimaryContext() { return &primary_context_storage; }

std::mutex mu;
bool initialized = false;
int init_error = 0;              // shim_set_init_error
bool reject_read_only = false;   // shim_set_reject_read_only
bool events_complete = true;     // shim_set_events_complete
struct Failure {
  int error;
  int after;  // calls of that name that succeed first
};
std::map<std::string, Failure> fail_next;  // shim_fail_next
int primary_refs = 0;
std::map<uintptr_t, uint64_t> registered;  // base -> bytes
std::map<CUevent, Event> events;
uintptr_t next_event = 0x1000;
std::vector<Call> calls;
thread_local std::vector<CUcontext> context_stack;

CUcontext Current() { return context_stack.empty() ? nullptr : context_stack.back(); }

// Logs a call (mu held) and returns its result: the injected failure, if any, else `r`.
CUresult Log(Call c, CUresult r) {
  if (auto it = fail_next.find(c.name); it != fail_next.end() && r == kSuccess) {
    if (it->second.after-- == 0) {
      r = it->second.error;
      fail_next.erase(it);
    }
  }
  c.result = r;
  c.context = reinterpret_cast<uintptr_t>(Current());
  calls.push_back(std::move(c));
  return r;
}

bool InsideRegistered(uintptr_t p, uint64_t n) {
  auto it = registered.upper_bound(p);
  if (it == registered.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

const char* ErrorName(CUresult r) {
  switch (r) {
    case kSuccess: return "CUDA_SUCCESS";
    case kInvalidValue: return "CUDA_ERROR_INVALID_VALUE";
    case kNotInitialized: return "CUDA_ERROR_NOT_INITIALIZED";
    case kNoDevice: return "CUDA_ERROR_NO_DEVICE";
    case kInvalidDevice: return "CUDA_ERROR_INVALID_DEVICE";
    case kInvalidContext: return "CUDA_ERROR_INVALID_CONTEXT";
    case kInvalidHandle: return "CUDA_ERROR_INVALID_HANDLE";
    case kNotReady: return "CUDA_ERROR_NOT_READY";
    case kAlreadyRegistered: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    case kNotRegistered: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
    case kNotSupported: return "CUDA_ERROR_NOT_SUPPORTED";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    default: return nullptr;
  }
}

const char* ErrorString(CUresult r) {
  switch (r) {
    case kSuccess: return "no error";
    case kInvalidValue: return "invalid argument";
    case kNotInitialized: return "initialization error";
    case kNoDevice: return "no CUDA-capable device is detected";
    case kInvalidDevice: return "invalid device ordinal";
    case kInvalidContext: return "invalid device context";
    case kInvalidHandle: return "invalid resource handle";
    case kNotReady: return "device not ready";
    case kAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case kNotRegistered: return "pointer does not correspond to a registered memory region";
    case kNotSupported: return "operation not supported";
    case 700: return "an illegal memory access was encountered";
    default: return nullptr;
  }
}

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

extern "C" {

// ---- Driver API (signatures as in cuda.h) ----

CUresult cuInit(unsigned flags) {
  std::lock_guard lock(mu);
  Call c{.name = "cuInit"};
  c.flags = flags;
  if (init_error != 0) return Log(c, init_error);
  initialized = true;
  return Log(c, kSuccess);
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  std::lock_guard lock(mu);
  if (!initialized) return Log({.name = "cuDeviceGet"}, kNotInitialized);
  if (ordinal != 0) return Log({.name = "cuDeviceGet"}, kInvalidDevice);
  *device = 0;
  return Log({.name = "cuDeviceGet"}, kSuccess);
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  std::lock_guard lock(mu);
  if (!initialized) return Log({.name = "cuCtxGetCurrent"}, kNotInitialized);
  *ctx = Current();
  return Log({.name = "cuCtxGetCurrent"}, kSuccess);
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  std::lock_guard lock(mu);
  if (ctx == nullptr) return Log({.name = "cuCtxPushCurrent_v2"}, kInvalidContext);
  context_stack.push_back(ctx);
  return Log({.name = "cuCtxPushCurrent_v2"}, kSuccess);
}

CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  std::lock_guard lock(mu);
  if (context_stack.empty()) return Log({.name = "cuCtxPopCurrent_v2"}, kInvalidContext);
  if (ctx != nullptr) *ctx = context_stack.back();
  const CUresult r = Log({.name = "cuCtxPopCurrent_v2"}, kSuccess);
  context_stack.pop_back();
  return r;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  std::lock_guard lock(mu);
  if (device != 0) return Log({.name = "cuDevicePrimaryCtxRetain"}, kInvalidDevice);
  *ctx = PrimaryContext();
  ++primary_refs;
  return Log({.name = "cuDevicePrimaryCtxRetain"}, kSuccess);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  std::lock_guard lock(mu);
  if (device != 0 || primary_refs == 0) return Log({.name = "cuDevicePrimaryCtxRelease_v2"}, kInvalidDevice);
  --primary_refs;
  return Log({.name = "cuDevicePrimaryCtxRelease_v2"}, kSuccess);
}

CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned flags) {
  std::lock_guard lock(mu);
  Call c{.name = "cuMemHostRegister_v2"};
  c.src = reinterpret_cast<uintptr_t>(p);
  c.bytes = bytes;
  c.flags = flags;
  if (Current() == nullptr) return Log(c, kInvalidContext);
  if (p == nullptr || bytes == 0) return Log(c, kInvalidValue);
  if ((flags & kReadOnly) && reject_read_only) return Log(c, kNotSupported);
  const auto base = reinterpret_cast<uintptr_t>(p);
  for (const auto& [b, n] : registered) {
    if (base < b + n && b < base + bytes) return Log(c, kAlreadyRegistered);
  }
  const CUresult r = Log(c, kSuccess);
  if (r == kSuccess) registered[base] = bytes;
  return r;
}

CUresult cuMemHostUnregister(void* p) {
  std::lock_guard lock(mu);
  Call c{.name = "cuMemHostUnregister"};
  c.src = reinterpret_cast<uintptr_t>(p);
  if (Current() == nullptr) return Log(c, kInvalidContext);
  auto it = registered.find(reinterpret_cast<uintptr_t>(p));
  if (it == registered.end()) return Log(c, kNotRegistered);
  c.bytes = it->second;
  const CUresult r = Log(c, kSuccess);
  if (r == kSuccess) registered.erase(it);
  return r;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  std::lock_guard lock(mu);
  Call c{.name = "cuMemcpyHtoDAsync_v2"};
  c.stream = reinterpret_cast<uintptr_t>(stream);
  c.src = reinterpret_cast<uintptr_t>(src);
  c.dst = dst;
  c.bytes = bytes;
  c.src_registered = InsideRegistered(c.src, bytes);
  if (Current() == nullptr) return Log(c, kInvalidContext);
  if (dst == 0 || src == nullptr) return Log(c, kInvalidValue);
  const CUresult r = Log(c, kSuccess);
  if (r == kSuccess) std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return r;
}

CUresult cuEventCreate(CUevent* event, unsigned flags) {
  std::lock_guard lock(mu);
  Call c{.name = "cuEventCreate"};
  c.flags = flags;
  if (Current() == nullptr) return Log(c, kInvalidContext);
  *event = reinterpret_cast<CUevent>(next_event += 0x10);
  c.event = reinterpret_cast<uintptr_t>(*event);
  const CUresult r = Log(c, kSuccess);
  if (r == kSuccess) events[*event] = Event{};
  return r;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  std::lock_guard lock(mu);
  Call c{.name = "cuEventRecord"};
  c.event = reinterpret_cast<uintptr_t>(event);
  c.stream = reinterpret_cast<uintptr_t>(stream);
  auto it = events.find(event);
  if (it == events.end()) return Log(c, kInvalidHandle);
  const CUresult r = Log(c, kSuccess);
  if (r == kSuccess) it->second = Event{.recorded = true, .complete = events_complete, .stream = c.stream};
  return r;
}

CUresult cuEventQuery(CUevent event) {
  std::lock_guard lock(mu);
  Call c{.name = "cuEventQuery"};
  c.event = reinterpret_cast<uintptr_t>(event);
  auto it = events.find(event);
  if (it == events.end()) return Log(c, kInvalidHandle);
  return Log(c, it->second.complete ? kSuccess : kNotReady);
}

CUresult cuEventSynchronize(CUevent event) {
  std::lock_guard lock(mu);
  Call c{.name = "cuEventSynchronize"};
  c.event = reinterpret_cast<uintptr_t>(event);
  auto it = events.find(event);
  if (it == events.end()) return Log(c, kInvalidHandle);
  it->second.complete = true;  // waiting is what lets the "GPU" finish
  return Log(c, kSuccess);
}

CUresult cuEventDestroy_v2(CUevent event) {
  std::lock_guard lock(mu);
  Call c{.name = "cuEventDestroy_v2"};
  c.event = reinterpret_cast<uintptr_t>(event);
  if (events.erase(event) == 0) return Log(c, kInvalidHandle);
  return Log(c, kSuccess);
}

CUresult cuStreamSynchronize(CUstream stream) {
  std::lock_guard lock(mu);
  Call c{.name = "cuStreamSynchronize"};
  c.stream = reinterpret_cast<uintptr_t>(stream);
  for (auto& [e, state] : events) {
    if (state.stream == c.stream) state.complete = true;
  }
  return Log(c, kSuccess);
}

CUresult cuGetErrorName(CUresult error, const char** name) {
  *name = ErrorName(error);
  return *name ? kSuccess : kInvalidValue;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  *text = ErrorString(error);
  return *text ? kSuccess : kInvalidValue;
}

// ---- Test controls ----

// Forgets the log and every setting (registrations, events and contexts stay: they belong
// to whoever made them).
void shim_reset() {
  std::lock_guard lock(mu);
  calls.clear();
  init_error = 0;
  reject_read_only = false;
  events_complete = true;
  fail_next.clear();
}

// The log as a JSON array of {"call", "stream", "src", "dst", "bytes", "flags", "event",
// "context", "result", "src_registered"}; valid until the next shim_calls call.
const char* shim_calls() {
  static std::string out;
  std::lock_guard lock(mu);
  out = "[";
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    out += (i ? ",\n" : "") + std::string("{\"call\":") + Json(c.name) + ",\"stream\":" + std::to_string(c.stream) +
           ",\"src\":" + std::to_string(c.src) + ",\"dst\":" + std::to_string(c.dst) +
           ",\"bytes\":" + std::to_string(c.bytes) + ",\"flags\":" + std::to_string(c.flags) +
           ",\"event\":" + std::to_string(c.event) + ",\"context\":" + std::to_string(c.context) +
           ",\"result\":" + std::to_string(c.result) +
           ",\"src_registered\":" + (c.src_registered ? "true" : "false") + "}";
  }
  out += "]";
  return out.c_str();
}

// cuInit returns `error` (e.g. 100, CUDA_ERROR_NO_DEVICE) while non-zero.
void shim_set_init_error(int error) {
  std::lock_guard lock(mu);
  init_error = error;
  if (error != 0) initialized = false;
}

// cuMemHostRegister refuses CU_MEMHOSTREGISTER_READ_ONLY (CUDA_ERROR_NOT_SUPPORTED) while set.
void shim_set_reject_read_only(int reject) {
  std::lock_guard lock(mu);
  reject_read_only = reject != 0;
}

// Whether recorded events complete at once; setting 1 completes every pending one.
void shim_set_events_complete(int complete) {
  std::lock_guard lock(mu);
  events_complete = complete != 0;
  if (events_complete) {
    for (auto& [e, state] : events) state.complete = true;
  }
}

// After `after` more successful calls of the entry point `name` (e.g. "cuMemcpyHtoDAsync_v2"),
// the next one fails with `error` and does nothing.
void shim_fail_next(const char* name, int error, int after) {
  std::lock_guard lock(mu);
  fail_next[name] = Failure{error, after};
}

// Simulates a framework (PyTorch, JAX) that made the primary context current on this thread:
// pushes it (retained) when `current`, pops it otherwise.
void shim_make_primary_current(int current) {
  std::lock_guard lock(mu);
  if (current) {
    ++primary_refs;
    context_stack.push_back(PrimaryContext());
  } else if (!context_stack.empty()) {
    --primary_refs;
    context_stack.pop_back();
  }
}

// State for the test's checks.
int shim_primary_refs() { std::lock_guard lock(mu); return primary_refs; }
int shim_registered_ranges() { std::lock_guard lock(mu); return static_cast<int>(registered.size()); }
int shim_live_events() { std::lock_guard lock(mu); return static_cast<int>(events.size()); }
int shim_pending_events() {
  std::lock_guard lock(mu);
  int n = 0;
  for (const auto& [e, state] : events) n += state.recorded && !state.complete;
  return n;
}

}  // extern "C"
