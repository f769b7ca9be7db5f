// The CUDA uploader (client/cuda_uploader.h) against tests/cuda_shim (a stand-in for
// libcuda.so.1 that logs every driver call and performs copies into host memory standing in
// for device memory), with a real client attached to a test producer in a forked process (real
// shared memory, real control socket). Checks: the ring is registered exactly once and
// unregistered after the last upload finished; every copy goes on the caller's stream, from the
// registered range, and the bytes equal the batch's columns; a slot comes back only after its
// event completed; errors name the feature, part, bytes or driver call; without libcuda the
// uploader fails clearly and the client still works.
#include <dlfcn.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/cuda_uploader.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "tests/ring_test_producer.h"
#include "tests/test_support.h"

namespace ringfeed {
namespace {

using namespace std::chrono_literals;
using Status = Client::Status;
using testing::ChildProcess;
using testing::ForkProducer;
using testing::ProducerOptions;
using testing::RingTestProducer;
using testing::TempDir;
using nlohmann::json;

// The shim's controls, resolved from the same library the uploader loads (one dlopen handle).
struct Shim {
  Shim() {
    handle = dlopen(RINGFEED_CUDA_SHIM, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(handle != nullptr);
    Resolve(reset, "shim_reset");
    Resolve(calls_json, "shim_calls");
    Resolve(set_init_error, "shim_set_init_error");
    Resolve(set_reject_read_only, "shim_set_reject_read_only");
    Resolve(set_events_complete, "shim_set_events_complete");
    Resolve(fail_next, "shim_fail_next");
    Resolve(make_primary_current, "shim_make_primary_current");
    Resolve(primary_refs, "shim_primary_refs");
    Resolve(registered_ranges, "shim_registered_ranges");
    Resolve(live_events, "shim_live_events");
    Resolve(pending_events, "shim_pending_events");
    reset();
  }
  ~Shim() {
    reset();
    dlclose(handle);
  }
  template <typename F>
  void Resolve(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(handle, name));
    REQUIRE(f != nullptr);
  }
  json calls() const { return json::parse(calls_json()); }
  // The logged calls named `name`.
  std::vector<json> Calls(const std::string& name) const {
    std::vector<json> out;
    for (const json& c : calls()) {
      if (c["call"] == name) out.push_back(c);
    }
    return out;
  }

  void* handle = nullptr;
  void (*reset)() = nullptr;
  const char* (*calls_json)() = nullptr;
  void (*set_init_error)(int) = nullptr;
  void (*set_reject_read_only)(int) = nullptr;
  void (*set_events_complete)(int) = nullptr;
  void (*fail_next)(const char*, int, int) = nullptr;
  void (*make_primary_current)(int) = nullptr;
  int (*primary_refs)() = nullptr;
  int (*registered_ranges)() = nullptr;
  int (*live_events)() = nullptr;
  int (*pending_events)() = nullptr;
};

UploaderOptions ShimOptions() {
  UploaderOptions o;
  o.libcuda_path = RINGFEED_CUDA_SHIM;
  return o;
}

ProducerOptions Producer(const TempDir& dir) {
  ProducerOptions o;
  o.runtime_dir = dir.path().string();
  o.job = "train";
  return o;
}

ClientOptions Attach(const TempDir& dir) {
  ClientOptions o;
  o.job = "train";
  o.runtime_dir = dir.path().string();
  return o;
}

// A producer that publishes `batches` test batches (waiting for free slots), then ends.
ChildProcess ForkFilling(const TempDir& dir, uint64_t batches) {
  return ForkProducer(Producer(dir), [batches](RingTestProducer& p) {
    for (uint64_t n = 0; n < batches; ++n) {
      const bool last = n + 1 == batches;
      REQUIRE(p.PublishBatch(0, n, 0, last ? shm::kBatchEndOfEpoch | shm::kBatchEndOfData : 0, -1, 30s) >= 0);
    }
    p.SetState(shm::DaemonState::kEndOfData);
  });
}

// Host memory standing in for the device: one buffer per uploaded part, sized from the batch.
struct DeviceSide {
  std::vector<std::vector<uint8_t>> memory;
  std::vector<DeviceBuffer> dst;
  std::vector<std::vector<uint8_t>> expected;  // the batch's bytes, copied before the upload

  void Add(const Batch& b, const std::string& feature, BatchPart part) {
    const TensorView v = b.feature(feature);
    const void* src = v.data();
    uint64_t bytes = v.bytes();
    if (part == BatchPart::kRowSplits) {
      src = v.row_splits().data();
      bytes = v.row_splits().size_bytes();
    } else if (part == BatchPart::kValueOffsets) {
      src = v.value_offsets().data();
      bytes = v.value_offsets().size_bytes();
    }
    const auto* p = static_cast<const uint8_t*>(src);
    expected.emplace_back(p, p + bytes);
    memory.emplace_back(bytes + 16, 0xee);  // spare bytes must stay untouched
    dst.push_back({.feature = feature, .part = part,
                   .device_ptr = reinterpret_cast<uintptr_t>(memory.back().data()), .capacity = bytes + 16});
  }
  // Every part of the test schema.
  static DeviceSide All(const Batch& b) {
    DeviceSide d;
    d.Add(b, "label", BatchPart::kValues);
    d.Add(b, "weights", BatchPart::kValues);
    d.Add(b, "weights", BatchPart::kRowSplits);
    d.Add(b, "key", BatchPart::kValues);
    d.Add(b, "key", BatchPart::kValueOffsets);
    d.Add(b, "pixels", BatchPart::kValues);
    return d;
  }
  bool Copied() const {
    for (size_t i = 0; i < memory.size(); ++i) {
      const size_t n = expected[i].size();
      if (std::memcmp(memory[i].data(), expected[i].data(), n) != 0) return false;
      for (size_t k = n; k < memory[i].size(); ++k) {
        if (memory[i][k] != 0xee) return false;
      }
    }
    return true;
  }
  void CheckCopied() const {
    for (size_t i = 0; i < memory.size(); ++i) {
      INFO("part " << i << " (" << dst[i].feature << " " << BatchPartName(dst[i].part) << ")");
      const size_t n = expected[i].size();
      CHECK(std::memcmp(memory[i].data(), expected[i].data(), n) == 0);
      for (size_t k = n; k < memory[i].size(); ++k) REQUIRE(memory[i][k] == 0xee);
    }
  }
};

// The ring's view of slot `slot` from this process (the test producer's segment).
shm::SlotWord SlotWordOf(const Client& client, uint32_t slot) {
  const shm::Segment segment = shm::Segment::Open(client.segment_name());
  const shm::Ring ring = shm::Ring::Of(segment.superblock());
  return shm::SlotWord::Unpack(ring.header(slot)->word.load());
}

bool HeldBy(const Client& client, uint32_t slot) {
  const shm::SlotWord w = SlotWordOf(client, slot);
  return w.state == shm::SlotState::kHeld && w.owner == client.consumer_id();
}

constexpr uintptr_t kStreamA = 0x5a00;
constexpr uintptr_t kStreamB = 0x5b00;

TEST_CASE("cuda uploader: registers once, copies every part on the caller's stream from the ring") {
  Shim shim;
  TempDir dir;
  constexpr uint64_t kBatches = 20;  // through 8 slots: slots are reused, the registration is not
  ChildProcess producer = ForkFilling(dir, kBatches);
  auto client = Client::Attach(Attach(dir));
  const std::span<uint8_t> region = client->slots_region();
  {
    auto uploader = CudaUploader::Create(*client, ShimOptions());
    CHECK(uploader->registered());
    CHECK(uploader->owns_context());  // no context was current: the primary one was retained
    CHECK(uploader->register_flags() == 0x9u);  // portable | read-only
    CHECK(shim.primary_refs() == 1);
    auto reg = shim.Calls("cuMemHostRegister_v2");
    REQUIRE(reg.size() == 1);
    CHECK(reg[0]["src"] == reinterpret_cast<uintptr_t>(region.data()));
    CHECK(reg[0]["bytes"] == region.size());
    CHECK(reg[0]["flags"] == 0x9);
    CHECK(reg[0]["context"] != 0);

    Batch batch;
    uint64_t uploads = 0;
    for (uint64_t n = 0; n < kBatches; ++n) {
      REQUIRE(client->Next(10s, &batch) == Status::kBatch);
      const uint64_t first = batch.index() * 4;
      DeviceSide device = DeviceSide::All(batch);
      uint64_t expected_bytes = 0;
      for (const auto& e : device.expected) expected_bytes += e.size();
      const uintptr_t stream = n % 2 ? kStreamB : kStreamA;
      shim.reset();
      CHECK(uploader->Upload(std::move(batch), stream, device.dst) == expected_bytes);
      CHECK_FALSE(batch.valid());  // the uploader has it now
      ++uploads;
      device.CheckCopied();
      // Real values too, by the producer's formula: label = g, pixels = (g + j) & 0xff.
      int64_t labels[4];
      std::memcpy(labels, device.memory[0].data(), sizeof labels);
      for (int r = 0; r < 4; ++r) CHECK(labels[r] == static_cast<int64_t>(first + r));
      CHECK(device.memory[5][7] == static_cast<uint8_t>(first + 1 + 1));

      // One copy per non-empty part, on the stream, from the registered ring, then the event.
      const json calls = shim.calls();
      std::vector<json> copies;
      for (const json& c : calls) {
        if (c["call"] == "cuMemcpyHtoDAsync_v2") copies.push_back(c);
      }
      size_t nonempty = 0;
      for (const auto& e : device.expected) nonempty += !e.empty();
      REQUIRE(copies.size() == nonempty);
      for (const json& c : copies) {
        CHECK(c["stream"] == stream);
        CHECK(c["src_registered"] == true);
        CHECK(c["result"] == 0);
        CHECK(c["context"] != 0);
        CHECK(c["src"].get<uint64_t>() >= reinterpret_cast<uintptr_t>(region.data()));
        CHECK(c["src"].get<uint64_t>() + c["bytes"].get<uint64_t>() <=
              reinterpret_cast<uintptr_t>(region.data()) + region.size());
      }
      REQUIRE(calls.size() >= 2);
      CHECK(calls[calls.size() - 2]["call"] == "cuEventRecord");
      CHECK(calls[calls.size() - 2]["stream"] == stream);
      CHECK(calls.back()["call"] == "cuCtxPopCurrent_v2");
      CHECK(shim.Calls("cuMemHostRegister_v2").empty());
      CHECK(shim.Calls("cuEventCreate").size() <= 1);  // events are reused
    }
    CHECK(uploads == kBatches);
    CHECK(client->Next(10s, &batch) == Status::kEndOfData);
    CHECK(shim.live_events() <= 2);  // at most two uploads were ever pending at once
    shim.reset();
  }
  // The destructor unregistered the ring once, after the last upload, and released the context.
  auto unreg = shim.Calls("cuMemHostUnregister");
  REQUIRE(unreg.size() == 1);
  CHECK(unreg[0]["src"] == reinterpret_cast<uintptr_t>(region.data()));
  CHECK(unreg[0]["result"] == 0);
  CHECK(shim.registered_ranges() == 0);
  CHECK(shim.live_events() == 0);
  CHECK(shim.primary_refs() == 0);
  CHECK(shim.Calls("cuDevicePrimaryCtxRelease_v2").size() == 1);
}

TEST_CASE("cuda uploader: a slot comes back only after its upload's event completed") {
  Shim shim;
  TempDir dir;
  ChildProcess producer = ForkFilling(dir, 40);
  auto client = Client::Attach(Attach(dir));
  auto uploader = CudaUploader::Create(*client, ShimOptions());
  shim.set_events_complete(0);  // "the GPU is still copying"

  // Fill every slot of the ring with an upload in flight.
  std::vector<uint32_t> slots;
  std::vector<DeviceSide> devices;
  Batch batch;
  for (int i = 0; i < 8; ++i) {
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    slots.push_back(batch.slot());
    devices.push_back(DeviceSide::All(batch));
    uploader->Upload(std::move(batch), kStreamA, devices.back().dst);
  }
  CHECK(uploader->pending() == 8);
  CHECK(shim.pending_events() == 8);
  // Nothing comes back while the events are incomplete: the slots stay held by this consumer,
  // so the producer can publish nothing more.
  CHECK(uploader->Poll() == 0);
  for (uint32_t s : slots) CHECK(HeldBy(*client, s));
  CHECK(client->Next(300ms, &batch) == Status::kTimeout);
  for (uint32_t s : slots) CHECK(HeldBy(*client, s));
  CHECK(uploader->pending() == 8);

  // The GPU finishes: Poll hands all eight back, and the producer fills them again.
  shim.set_events_complete(1);
  CHECK(uploader->Poll() == 8);
  CHECK(uploader->pending() == 0);
  for (uint32_t s : slots) CHECK_FALSE(HeldBy(*client, s));
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);

  // Upload polls by itself: the previous upload's slot comes back with the next Upload.
  DeviceSide d1 = DeviceSide::All(batch);
  const uint32_t first_slot = batch.slot();
  uploader->Upload(std::move(batch), kStreamA, d1.dst);
  CHECK(HeldBy(*client, first_slot));  // completed, but nobody asked yet
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  DeviceSide d2 = DeviceSide::All(batch);
  uploader->Upload(std::move(batch), kStreamA, d2.dst);
  CHECK_FALSE(HeldBy(*client, first_slot));
  CHECK(uploader->pending() == 1);

  // Synchronize waits (cuEventSynchronize) and hands everything back.
  shim.set_events_complete(0);
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  const uint32_t held_slot = batch.slot();
  DeviceSide d3 = DeviceSide::All(batch);
  uploader->Upload(std::move(batch), kStreamB, d3.dst);
  CHECK(HeldBy(*client, held_slot));
  shim.reset();
  shim.set_events_complete(0);
  CHECK(uploader->Synchronize() == 1);  // d2's upload came back in d3's Upload (it polls)
  CHECK(shim.Calls("cuEventSynchronize").size() == 1);
  CHECK_FALSE(HeldBy(*client, held_slot));
  CHECK(uploader->pending() == 0);
}

TEST_CASE("cuda uploader: a batch the caller keeps, held through a shared lease until the event") {
  Shim shim;
  TempDir dir;
  ChildProcess producer = ForkFilling(dir, 10);
  auto client = Client::Attach(Attach(dir));
  auto uploader = CudaUploader::Create(*client, ShimOptions());
  shim.set_events_complete(0);
  // What a language binding does: its batch object and array views share one lease.
  auto lease = std::make_shared<Batch>();
  REQUIRE(client->Next(10s, lease.get()) == Status::kBatch);
  const uint32_t slot = lease->slot();
  DeviceSide d = DeviceSide::All(*lease);
  CHECK_THROWS_WITH(uploader->Upload(*lease, nullptr, kStreamA, d.dst), Catch::Contains("needs a hold"));
  uploader->Upload(*lease, lease, kStreamA, d.dst);
  d.CheckCopied();
  CHECK(lease->valid());  // the caller's batch still works (its views stay readable)
  CHECK(lease.use_count() == 2);
  lease.reset();           // the binding's last view dies: the uploader's hold keeps the slot
  CHECK(HeldBy(*client, slot));
  CHECK(uploader->Poll() == 0);
  CHECK(HeldBy(*client, slot));
  shim.set_events_complete(1);
  CHECK(uploader->Poll() == 1);
  CHECK_FALSE(HeldBy(*client, slot));
}

TEST_CASE("cuda uploader: the destructor waits for pending uploads, then unregisters") {
  Shim shim;
  TempDir dir;
  ChildProcess producer = ForkFilling(dir, 10);
  auto client = Client::Attach(Attach(dir));
  auto uploader = CudaUploader::Create(*client, ShimOptions());
  shim.set_events_complete(0);
  Batch batch;
  std::vector<uint32_t> slots;
  std::vector<DeviceSide> devices;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    slots.push_back(batch.slot());
    devices.push_back(DeviceSide::All(batch));
    uploader->Upload(std::move(batch), kStreamA, devices.back().dst);
  }
  shim.reset();
  shim.set_events_complete(0);
  uploader.reset();
  // Order: wait for every event, then unregister, then release the retained context.
  std::vector<std::string> order;
  for (const json& c : shim.calls()) {
    const std::string name = c["call"];
    if (name == "cuEventSynchronize" || name == "cuMemHostUnregister" || name == "cuDevicePrimaryCtxRelease_v2") {
      order.push_back(name);
    }
  }
  CHECK(order == std::vector<std::string>{"cuEventSynchronize", "cuEventSynchronize", "cuEventSynchronize",
                                          "cuMemHostUnregister", "cuDevicePrimaryCtxRelease_v2"});
  for (uint32_t s : slots) CHECK_FALSE(HeldBy(*client, s));
  CHECK(shim.registered_ranges() == 0);
  CHECK(shim.live_events() == 0);
  CHECK(shim.primary_refs() == 0);
}

TEST_CASE("cuda uploader: errors name the feature, the part, the bytes and the driver call") {
  Shim shim;
  TempDir dir;
  ChildProcess producer = ForkFilling(dir, 10);
  auto client = Client::Attach(Attach(dir));
  auto uploader = CudaUploader::Create(*client, ShimOptions());
  Batch batch;
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  std::vector<uint8_t> memory(4096);
  const auto dptr = reinterpret_cast<uintptr_t>(memory.data());
  shim.reset();

  auto upload_one = [&](DeviceBuffer b) {
    const DeviceBuffer dst[] = {b};
    uploader->Upload(std::move(batch), kStreamA, dst);
  };
  // Checked before anything is enqueued: the batch stays with the caller.
  CHECK_THROWS_WITH(upload_one({.feature = "label", .device_ptr = dptr, .capacity = 31}),
                    Catch::Contains("feature 'label' values needs 32 bytes") &&
                        Catch::Contains("holds 31") && Catch::Contains("allocate at least 32 bytes"));
  CHECK(batch.valid());
  CHECK_THROWS_WITH(upload_one({.feature = "nope", .device_ptr = dptr, .capacity = 4096}),
                    Catch::Contains("has no feature 'nope'; known features: label, weights, key, pixels"));
  CHECK_THROWS_WITH(upload_one({.feature = "", .feature_index = 7, .device_ptr = dptr, .capacity = 4096}),
                    Catch::Contains("feature index 7 out of range"));
  CHECK_THROWS_WITH(upload_one({.feature = "", .device_ptr = dptr, .capacity = 4096}), Catch::Contains("names no feature"));
  CHECK_THROWS_WITH(upload_one({.feature = "label", .part = BatchPart::kRowSplits, .device_ptr = dptr, .capacity = 4096}),
                    Catch::Contains("feature 'label' is FixedLen and has no row_splits"));
  CHECK_THROWS_WITH(upload_one({.feature = "weights", .part = BatchPart::kValueOffsets, .device_ptr = dptr, .capacity = 4096}),
                    Catch::Contains("feature 'weights' has dtype float32 and no value_offsets"));
  CHECK_THROWS_WITH(upload_one({.feature = "key", .part = BatchPart::kValueOffsets, .device_ptr = 0, .capacity = 4096}),
                    Catch::Contains("feature 'key' value_offsets: device_ptr is 0"));
  CHECK(batch.valid());
  CHECK(shim.Calls("cuMemcpyHtoDAsync_v2").empty());
  // By index works too.
  CHECK(uploader->Upload(std::move(batch), kStreamA,
                         std::vector<DeviceBuffer>{{.feature = "", .feature_index = 0, .device_ptr = dptr, .capacity = 32}}) == 32);

  // A driver error on the first copy: nothing was enqueued, the batch stays with the caller.
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  shim.fail_next("cuMemcpyHtoDAsync_v2", 700, 0);
  CHECK_THROWS_WITH(upload_one({.feature = "label", .device_ptr = dptr, .capacity = 4096}),
                    Catch::Contains("cuMemcpyHtoDAsync_v2 failed: CUDA_ERROR_ILLEGAL_ADDRESS (700: an illegal memory "
                                    "access was encountered)") &&
                        Catch::Contains("feature 'label' values, 32 bytes to 0x") && Catch::Contains("on stream 0x5a00"));
  CHECK(batch.valid());

  // A driver error after a copy was enqueued: the uploader keeps the batch until the stream is
  // drained, then hands the slot back.
  const uint32_t slot = batch.slot();
  std::vector<uint8_t> memory2(4096);
  const std::vector<DeviceBuffer> two = {
      {.feature = "label", .device_ptr = dptr, .capacity = 4096},
      {.feature = "pixels", .device_ptr = reinterpret_cast<uintptr_t>(memory2.data()), .capacity = 4096}};
  shim.reset();
  shim.fail_next("cuMemcpyHtoDAsync_v2", 700, 1);
  CHECK_THROWS_WITH(uploader->Upload(std::move(batch), kStreamA, two), Catch::Contains("feature 'pixels' values"));
  CHECK_FALSE(batch.valid());
  CHECK(shim.Calls("cuStreamSynchronize").size() == 1);
  CHECK_FALSE(HeldBy(*client, slot));

  // cuEventRecord failing: the same.
  REQUIRE(client->Next(10s, &batch) == Status::kBatch);
  shim.fail_next("cuEventRecord", 400, 0);
  CHECK_THROWS_WITH(uploader->Upload(std::move(batch), kStreamB, two),
                    Catch::Contains("cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE") &&
                        Catch::Contains("stream 0x5b00"));
  CHECK_FALSE(batch.valid());
  CHECK(uploader->pending() == 0);

  // A released batch.
  CHECK_THROWS_WITH(uploader->Upload(std::move(batch), kStreamA, two), Catch::Contains("holds no slot"));

  // A batch of another client is not inside the registered ring.
  auto other = Client::Attach(Attach(dir));
  REQUIRE(other->Next(10s, &batch) == Status::kBatch);
  CHECK_THROWS_WITH(uploader->Upload(std::move(batch), kStreamA, two),
                    Catch::Contains("lies outside the ring this uploader registered"));
  CHECK(batch.valid());
}

TEST_CASE("cuda uploader: without libcuda or a GPU the error is clear and the client still works") {
  Shim shim;
  TempDir dir;
  ChildProcess producer = ForkFilling(dir, 10);
  auto client = Client::Attach(Attach(dir));

  UploaderOptions missing;
  missing.libcuda_path = "/nonexistent/libcuda.so.1";
  CHECK_THROWS_WITH(CudaUploader::Create(*client, missing),
                    Catch::StartsWith("CUDA driver /nonexistent/libcuda.so.1 not found (dlopen: ") &&
                        Catch::EndsWith("): GPU upload needs an NVIDIA driver; use the CPU views instead"));
  REQUIRE(setenv("RINGFEED_LIBCUDA", "/nonexistent", 1) == 0);
  CHECK_THROWS_WITH(CudaUploader::Create(*client, {}), Catch::Contains("CUDA driver /nonexistent not found"));
  // The environment names the shim: used when the option is empty.
  REQUIRE(setenv("RINGFEED_LIBCUDA", RINGFEED_CUDA_SHIM, 1) == 0);
  CHECK(CudaUploader::Create(*client, {})->registered());
  REQUIRE(unsetenv("RINGFEED_LIBCUDA") == 0);

  shim.set_init_error(100);
  CHECK_THROWS_WITH(CudaUploader::Create(*client, ShimOptions()),
                    Catch::Contains("cuInit failed: CUDA_ERROR_NO_DEVICE (100: no CUDA-capable device is detected)") &&
                        Catch::Contains("no usable NVIDIA GPU here; use the CPU views instead"));
  shim.set_init_error(0);
  UploaderOptions device3 = ShimOptions();
  device3.device = 3;
  CHECK_THROWS_WITH(CudaUploader::Create(*client, device3),
                    Catch::Contains("cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE") && Catch::Contains("for device 3"));
  // Read-only refused, then the plain registration fails too: CUDA_ERROR_OUT_OF_MEMORY (2,
  // which the shim has no name for).
  shim.set_reject_read_only(1);
  shim.fail_next("cuMemHostRegister_v2", 2, 0);
  CHECK_THROWS_WITH(CudaUploader::Create(*client, ShimOptions()),
                    Catch::Contains("cuMemHostRegister_v2 failed: unknown CUresult (2: no description)") &&
                        Catch::Contains("the ring of job train"));
  CHECK(shim.primary_refs() == 0);  // a failed Create gives the context back
  CHECK(shim.registered_ranges() == 0);
  shim.set_reject_read_only(0);

  // The CPU path is untouched.
  Batch batch;
  for (uint64_t n = 0; n < 10; ++n) {
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    const auto label = batch.feature("label").values<int64_t>();
    for (uint32_t r = 0; r < batch.rows(); ++r) CHECK(label[r] == static_cast<int64_t>(batch.index() * 4 + r));
  }
  CHECK(client->Next(10s, &batch) == Status::kEndOfData);
}

TEST_CASE("cuda uploader: the caller's context, read-only fallback, a range registered already") {
  Shim shim;
  TempDir dir;
  ChildProcess producer = ForkFilling(dir, 40);
  auto client = Client::Attach(Attach(dir));
  const auto region = reinterpret_cast<uintptr_t>(client->slots_region().data());

  SECTION("a framework's current context is used, not retained again") {
    shim.make_primary_current(1);
    {
      auto uploader = CudaUploader::Create(*client, ShimOptions());
      CHECK_FALSE(uploader->owns_context());
      CHECK(shim.Calls("cuDevicePrimaryCtxRetain").empty());
      CHECK(shim.Calls("cuCtxPushCurrent_v2").empty());  // already current: nothing pushed
    }
    CHECK(shim.Calls("cuDevicePrimaryCtxRelease_v2").empty());
    CHECK(shim.primary_refs() == 1);  // the framework's reference
    shim.make_primary_current(0);
  }
  SECTION("a driver without read-only registration: registered without it") {
    shim.set_reject_read_only(1);
    auto uploader = CudaUploader::Create(*client, ShimOptions());
    CHECK(uploader->register_flags() == 0x1u);
    auto reg = shim.Calls("cuMemHostRegister_v2");
    REQUIRE(reg.size() == 2);
    CHECK(reg[0]["flags"] == 0x9);
    CHECK(reg[0]["result"] == 801);
    CHECK(reg[1]["flags"] == 0x1);
    CHECK(reg[1]["result"] == 0);
  }
  SECTION("a second uploader over the same ring leaves the registration to the first") {
    auto first = CudaUploader::Create(*client, ShimOptions());
    auto second = CudaUploader::Create(*client, ShimOptions());
    CHECK(first->registered());
    CHECK_FALSE(second->registered());
    Batch batch;
    REQUIRE(client->Next(10s, &batch) == Status::kBatch);
    DeviceSide d = DeviceSide::All(batch);
    second->Upload(std::move(batch), kStreamA, d.dst);
    d.CheckCopied();
    second.reset();
    CHECK(shim.Calls("cuMemHostUnregister").empty());
    CHECK(shim.registered_ranges() == 1);
    first.reset();
    auto unreg = shim.Calls("cuMemHostUnregister");
    REQUIRE(unreg.size() == 1);
    CHECK(unreg[0]["src"] == region);
  }
}

TEST_CASE("cuda uploader: threads with their own streams share one uploader") {
  Shim shim;
  TempDir dir;
  constexpr uint64_t kBatches = 60;
  ChildProcess producer = ForkFilling(dir, kBatches);
  auto client = Client::Attach(Attach(dir));
  auto uploader = CudaUploader::Create(*client, ShimOptions());
  shim.reset();
  // Catch2 v2 assertions are not thread-safe: the workers only record what went wrong.
  std::atomic<uint64_t> uploaded{0};
  std::mutex errors_mutex;
  std::vector<std::string> errors;
  auto worker = [&](uintptr_t stream) {
    try {
      Batch batch;
      for (uint64_t n = 0; n < kBatches / 2; ++n) {  // half each, whatever the scheduling
        if (client->Next(10s, &batch) != Status::kBatch) throw std::runtime_error("no batch");
        DeviceSide d = DeviceSide::All(batch);
        uploader->Upload(std::move(batch), stream, d.dst);
        if (!d.Copied()) throw std::runtime_error("wrong bytes on the device");
        uploaded.fetch_add(1);
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(errors_mutex);
      errors.push_back(e.what());
    }
  };
  std::thread a(worker, kStreamA), b(worker, kStreamB);  // neither thread has a current context
  a.join();
  b.join();
  CHECK(errors.empty());
  uploader->Synchronize();
  CHECK(uploaded.load() == kBatches);
  Batch batch;
  CHECK(client->Next(10s, &batch) == Status::kEndOfData);
  std::set<uint64_t> streams;
  for (const json& c : shim.Calls("cuMemcpyHtoDAsync_v2")) {
    streams.insert(c["stream"].get<uint64_t>());
    CHECK(c["src_registered"] == true);
    CHECK(c["context"] != 0);  // the uploader made its context current on each thread
  }
  CHECK(streams == std::set<uint64_t>{kStreamA, kStreamB});
  CHECK(shim.Calls("cuMemHostRegister_v2").empty());
}

}  // namespace
}  // namespace ringfeed
