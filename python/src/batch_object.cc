// The only translation unit that uses NumPy's C API (arrays over foreign memory with a base
// object are cheapest made there: PyArray_NewFromDescr + PyArray_SetBaseObject, ~0.2 us each).
#define PY_ARRAY_UNIQUE_SYMBOL ringfeed_numpy_api
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include "python/src/batch_object.h"

#include <numpy/arrayobject.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "client/client_error.h"

namespace ringfeed::python {
namespace {

constexpr const char* kCapsuleName = "ringfeed.slot_view";

void DestroyViewRef(PyObject* capsule) {
  delete static_cast<ViewRef*>(PyCapsule_GetPointer(capsule, kCapsuleName));
}

// A new capsule owning a ViewRef of (lease, feature): the `base` of that feature's arrays.
nb::object MakeViewCapsule(const std::shared_ptr<SlotLease>& lease, uint32_t feature) {
  auto* ref = new ViewRef(lease, feature);
  PyObject* capsule = PyCapsule_New(ref, kCapsuleName, DestroyViewRef);
  if (capsule == nullptr) {
    delete ref;
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

// A 1-D or N-D writable C-contiguous array over `data`, whose base is `capsule`.
nb::object MakeArray(int type, int ndim, const npy_intp* dims, const void* data, nb::handle capsule) {
  PyObject* array = PyArray_NewFromDescr(&PyArray_Type, PyArray_DescrFromType(type), ndim,
                                         const_cast<npy_intp*>(dims), nullptr, const_cast<void*>(data),
                                         NPY_ARRAY_CARRAY, nullptr);
  if (array == nullptr) throw nb::python_error();
  Py_INCREF(capsule.ptr());
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(array), capsule.ptr()) < 0) {
    Py_DECREF(array);
    throw nb::python_error();
  }
  return nb::steal(array);
}

nb::object MakeArray1(int type, uint64_t count, const void* data, nb::handle capsule) {
  const npy_intp dims[1] = {static_cast<npy_intp>(count)};
  return MakeArray(type, 1, dims, data, capsule);
}

std::string_view KeyView(nb::handle name) {
  Py_ssize_t size = 0;
  const char* chars = PyUnicode_Check(name.ptr()) ? PyUnicode_AsUTF8AndSize(name.ptr(), &size) : nullptr;
  if (chars == nullptr) {
    PyErr_Clear();
    throw nb::type_error("feature names are str (encodable as UTF-8)");
  }
  return {chars, static_cast<size_t>(size)};
}

}  // namespace

void InitNumpy() {
  if (_import_array() < 0) throw nb::python_error();
}

int NumpyType(shm::DType dtype) {
  switch (dtype) {
    case shm::DType::kInt64: return NPY_INT64;
    case shm::DType::kFloat32: return NPY_FLOAT32;
    case shm::DType::kBytes: return NPY_UINT8;
    case shm::DType::kUInt8: return NPY_UINT8;
    case shm::DType::kInt8: return NPY_INT8;
    case shm::DType::kUInt16: return NPY_UINT16;
    case shm::DType::kInt16: return NPY_INT16;
    case shm::DType::kInt32: return NPY_INT32;
    case shm::DType::kUInt32: return NPY_UINT32;
    case shm::DType::kFloat64: return NPY_FLOAT64;
  }
  throw ClientError("unknown dtype " + std::to_string(static_cast<int>(dtype)) + " in the ring's schema");
}

BatchObject::BatchObject(std::shared_ptr<SlotLease> lease) : lease_(std::move(lease)), schema_(lease_->schema) {
  const Batch& b = lease_->batch;
  epoch_ = b.epoch();
  index_ = b.index();
  rows_ = b.rows();
  slot_ = b.slot();
  end_of_epoch_ = b.end_of_epoch();
  end_of_data_ = b.end_of_data();
}

const std::shared_ptr<SlotLease>& BatchObject::Lease(const char* what) const {
  if (lease_ != nullptr && lease_->forked()) {
    throw ClientError(std::string("Batch.") + what + ": batch " + std::to_string(index_) + " of epoch " +
                      std::to_string(epoch_) + " was taken by process " + std::to_string(lease_->owner_pid) +
                      " before it forked; this child (pid " + std::to_string(getpid()) +
                      ") must not read it (the parent may release its slot at any time): attach a Client "
                      "of its own after the fork");
  }
  if (lease_ == nullptr) {
    throw ClientError(std::string("Batch.") + what + ": batch " + std::to_string(index_) + " of epoch " +
                      std::to_string(epoch_) +
                      " was released (release() or close() or a with block ended); its slot belongs to the "
                      "daemon again. Copy what must outlive a batch (numpy.array(view), tensor.clone()).");
  }
  return lease_;
}

uint32_t BatchObject::IndexOf(const SlotLease& lease, nb::handle name) const {
  const std::string_view key = KeyView(name);
  const auto& index = lease.schema->index;
  if (auto it = index.find(key); it != index.end()) return it->second;
  std::string known;
  for (const FeatureInfo& f : lease.schema->schema.features) known += (known.empty() ? "" : ", ") + f.name;
  // repr(name), not the raw UTF-8: a NUL in the name must not cut the message short.
  throw nb::key_error(("job " + lease.schema->schema.job + " has no feature " + std::string(nb::repr(name).c_str()) +
                       "; known features: " + known).c_str());
}

nb::object BatchObject::Feature(nb::handle name) const {
  // A reference, not a copy (the hot path): the capsule takes its own hold before anything
  // that could run Python code (and so release() or close()) allocates; `lease` is not used after.
  const std::shared_ptr<SlotLease>& lease = Lease("__getitem__");
  const uint32_t i = IndexOf(*lease, name);
  const TensorView view = lease->batch.feature(i);
  const int type = lease->schema->numpy_type[i];
  nb::object capsule = MakeViewCapsule(lease, i);
  const bool varlen = view.type() == shm::FeatureType::kVarLen;
  if (view.dtype() == shm::DType::kBytes) {
    nb::object data = MakeArray1(NPY_UINT8, view.bytes(), view.data(), capsule);
    nb::object offsets = MakeArray1(NPY_INT64, view.value_offsets().size(), view.value_offsets().data(), capsule);
    if (!varlen) return nb::make_tuple(data, offsets);
    nb::object splits = MakeArray1(NPY_INT64, view.row_splits().size(), view.row_splits().data(), capsule);
    return nb::make_tuple(data, offsets, splits);
  }
  if (varlen) {
    nb::object values = MakeArray1(type, view.size(), view.data(), capsule);
    nb::object splits = MakeArray1(NPY_INT64, view.row_splits().size(), view.row_splits().data(), capsule);
    return nb::make_tuple(values, splits);
  }
  npy_intp dims[shm::kMaxRank + 1];
  const auto shape = view.shape();
  for (size_t d = 0; d < shape.size(); ++d) dims[d] = static_cast<npy_intp>(shape[d]);
  return MakeArray(type, static_cast<int>(shape.size()), dims, view.data(), capsule);
}

nb::list BatchObject::Strings(nb::handle name) const {
  // A hold of our own: the lists below may start a garbage collection that runs Python code
  // (a gc callback, a __del__, another thread), which may close() this batch meanwhile.
  const std::shared_ptr<SlotLease> lease = Lease("strings");
  const uint32_t i = IndexOf(*lease, name);
  const TensorView view = lease->batch.feature(i);
  if (view.dtype() != shm::DType::kBytes) {
    throw nb::type_error(("feature '" + std::string(view.name()) + "' has dtype " +
                          std::string(shm::DTypeName(view.dtype())) + "; strings() is for bytes features")
                             .c_str());
  }
  auto str = [&](uint64_t k) {
    const std::string_view s = view.string(k);
    return nb::steal(PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())));
  };
  nb::list out;
  if (view.type() == shm::FeatureType::kVarLen) {
    const auto splits = view.row_splits();
    for (size_t r = 0; r + 1 < splits.size(); ++r) {
      // Read once and checked again, as TensorView::string checks value_offsets: the slot is
      // writable through the batch's arrays.
      const int64_t begin = splits[r], end = splits[r + 1];
      if (begin < 0 || end < begin || static_cast<uint64_t>(end) > view.size()) {
        throw ClientError("feature '" + std::string(view.name()) + "': row " + std::to_string(r) +
                          " has row_splits [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") outside the column's " + std::to_string(view.size()) +
                          " strings: the batch's row_splits were overwritten after the client checked them "
                          "(through a writable array view of the batch)");
      }
      nb::list row;
      for (int64_t k = begin; k < end; ++k) row.append(str(static_cast<uint64_t>(k)));
      out.append(row);
    }
  } else {
    for (uint64_t k = 0; k < view.size(); ++k) out.append(str(k));
  }
  return out;
}

nb::tuple BatchObject::Sources() const {
  const std::shared_ptr<SlotLease> lease = Lease("sources");  // our own hold, as in Strings
  const npy_intp dims[1] = {static_cast<npy_intp>(rows_)};
  PyObject* files = PyArray_SimpleNew(1, dims, NPY_INT64);
  if (files == nullptr) throw nb::python_error();
  nb::object files_obj = nb::steal(files);
  PyObject* records = PyArray_SimpleNew(1, dims, NPY_INT64);
  if (records == nullptr) throw nb::python_error();
  nb::object records_obj = nb::steal(records);
  auto* f = static_cast<int64_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(files)));
  auto* r = static_cast<int64_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(records)));
  for (uint32_t row = 0; row < rows_; ++row) {
    const shm::RowSource s = lease->batch.source(row);
    f[row] = s.file_index;
    r[row] = static_cast<int64_t>(s.record_index);
  }
  return nb::make_tuple(files_obj, records_obj);
}

nb::list BatchObject::Keys() const {
  nb::list out;
  for (const FeatureInfo& f : schema_->schema.features) out.append(nb::str(f.name.c_str(), f.name.size()));
  return out;
}

bool BatchObject::Contains(nb::handle name) const {
  if (!PyUnicode_Check(name.ptr())) return false;
  Py_ssize_t size = 0;
  const char* chars = PyUnicode_AsUTF8AndSize(name.ptr(), &size);
  if (chars == nullptr) {  // a lone surrogate: no feature has that name
    PyErr_Clear();
    return false;
  }
  return schema_->index.find(std::string_view(chars, static_cast<size_t>(size))) != schema_->index.end();
}

nb::dict BatchObject::LiveViews() const {
  nb::dict out;
  if (lease_ == nullptr) return out;
  for (size_t i = 0; i < lease_->live.size(); ++i) {
    if (lease_->live[i] != 0) out[nb::str(schema_->schema.features[i].name.c_str())] = lease_->live[i];
  }
  return out;
}

void BatchObject::Release() {
  if (lease_ == nullptr) return;
  Lease("release");  // ClientError in a forked child: the slot is the parent's
  if (lease_->live_total != 0) {
    std::string viewed;
    for (size_t i = 0; i < lease_->live.size(); ++i) {
      if (lease_->live[i] == 0) continue;
      viewed += (viewed.empty() ? "'" : ", '") + schema_->schema.features[i].name + "' (" +
                std::to_string(lease_->live[i]) + ")";
    }
    const std::string message =
        "Batch.release(): batch " + std::to_string(index_) + " of epoch " + std::to_string(epoch_) +
        " is still viewed by arrays of " + viewed +
        " (views, or tensors made from them, still alive); del them first, copy what must outlive the "
        "batch, or use close() to return the slot when the last view dies";
    PyErr_SetString(PyExc_BufferError, message.c_str());
    throw nb::python_error();
  }
  lease_->batch.Release();
  lease_.reset();
}

void BatchObject::Close() { lease_.reset(); }

std::string BatchObject::Repr() const {
  std::string s = "<ringfeed.Batch epoch=" + std::to_string(epoch_) + " index=" + std::to_string(index_) +
                  " rows=" + std::to_string(rows_);
  if (end_of_epoch_) s += " end_of_epoch";
  if (end_of_data_) s += " end_of_data";
  return s + (lease_ == nullptr ? " released>" : ">");
}

}  // namespace ringfeed::python
