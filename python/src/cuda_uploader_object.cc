#include "python/src/cuda_uploader_object.h"

#include <nanobind/stl/string.h>

#include <vector>

#include "python/src/gil_release.h"

namespace ringfeed::python {
namespace {

BatchPart PartFromName(const std::string& name) {
  if (name == "values") return BatchPart::kValues;
  if (name == "row_splits") return BatchPart::kRowSplits;
  if (name == "value_offsets") return BatchPart::kValueOffsets;
  throw nb::value_error(("upload: part '" + name + "' is not one of values, row_splits, value_offsets").c_str());
}

}  // namespace

CudaUploaderObject::CudaUploaderObject(const ClientObject& client, int device, const std::string& libcuda_path)
    : client_(client.SharedClient()) {
  UploaderOptions options;
  options.device = device;
  options.libcuda_path = libcuda_path;
  // Create may initialise the driver and register the whole ring: no Python needed meanwhile.
  GilRelease unlocked;
  uploader_ = CudaUploader::Create(*client_, options);
}

uint64_t CudaUploaderObject::Upload(BatchObject& batch, uintptr_t stream, nb::list dst) {
  std::vector<DeviceBuffer> buffers;
  buffers.reserve(nb::len(dst));
  for (nb::handle item : dst) {
    auto bad = [&](const char* what) {
      return nb::type_error(("upload: dst entry " + std::string(nb::repr(item).c_str()) + ": " + what +
                             "; each entry is (feature: str, part: str, device_ptr: int >= 0, capacity: int >= 0)")
                                .c_str());
    };
    if (!PyTuple_Check(item.ptr())) throw bad("not a tuple");
    nb::tuple t = nb::borrow<nb::tuple>(item);
    if (nb::len(t) != 4) throw nb::value_error("upload: each dst entry is (feature, part, device_ptr, capacity)");
    DeviceBuffer buffer;
    // nb::try_cast: a failed cast is a TypeError naming the entry, not std::bad_cast.
    std::string part;
    if (!nb::try_cast(t[0], buffer.feature) || !nb::try_cast(t[1], part)) throw bad("feature and part are str");
    if (!PyLong_Check(t[2].ptr()) || !PyLong_Check(t[3].ptr()) || !nb::try_cast(t[2], buffer.device_ptr) ||
        !nb::try_cast(t[3], buffer.capacity)) {
      throw bad("device_ptr and capacity are ints in 0..2**64-1");
    }
    buffer.part = PartFromName(part);
    buffers.push_back(std::move(buffer));
  }
  std::shared_ptr<SlotLease> lease = batch.SharedLease("upload");
  const Batch& cpp_batch = lease->batch;
  // The lease (plain C++) goes to the uploader, which drops it — returning the slot unless an
  // array still views it — once the copies' event completed, possibly without the GIL.
  const uint64_t bytes = uploader_->Upload(cpp_batch, std::shared_ptr<void>(lease), stream, buffers);
  batch.Close();
  return bytes;
}

size_t CudaUploaderObject::Poll() { return uploader_->Poll(); }

size_t CudaUploaderObject::Synchronize() {
  GilRelease unlocked;
  return uploader_->Synchronize();
}

}  // namespace ringfeed::python
