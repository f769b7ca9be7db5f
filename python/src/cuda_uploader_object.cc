#include "python/src/cuda_uploader_object.h"

#include <nanobind/stl/string.h>

#include <vector>

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
  nb::gil_scoped_release unlocked;
  uploader_ = CudaUploader::Create(*client_, options);
}

uint64_t CudaUploaderObject::Upload(BatchObject& batch, uintptr_t stream, nb::list dst) {
  std::vector<DeviceBuffer> buffers;
  buffers.reserve(nb::len(dst));
  for (nb::handle item : dst) {
    nb::tuple t = nb::cast<nb::tuple>(item);
    if (nb::len(t) != 4) throw nb::value_error("upload: each dst entry is (feature, part, device_ptr, capacity)");
    buffers.push_back(DeviceBuffer{.feature = nb::cast<std::string>(t[0]),
                                   .part = PartFromName(nb::cast<std::string>(t[1])),
                                   .device_ptr = nb::cast<uint64_t>(t[2]),
                                   .capacity = nb::cast<uint64_t>(t[3])});
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
  nb::gil_scoped_release unlocked;
  return uploader_->Synchronize();
}

}  // namespace ringfeed::python
