// ringfeed._core: the extension module behind the `ringfeed` package (python/ringfeed/).
// Binds BatchObject as ringfeed.Batch and ClientObject as _Client (wrapped by the Python class
// ringfeed.Client), and maps the client library's errors onto Python exceptions:
//   ringfeed::ClientError -> ringfeed.ClientError (RuntimeError), message unchanged
//   TimeoutReached        -> ringfeed.Timeout (TimeoutError)
// Reference: docs/python.md.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>


#include "client/client_error.h"
#include "python/src/batch_object.h"
#include "python/src/client_object.h"
#include "python/src/cuda_uploader_object.h"

namespace nb = nanobind;
using ringfeed::python::BatchObject;
using ringfeed::python::ClientObject;
using ringfeed::python::CudaUploaderObject;

NB_MODULE(_core, m) {
  m.doc() = "ringfeed's extension module; use the ringfeed package (docs/python.md).";
  ringfeed::python::InitNumpy();

  nb::exception<ringfeed::ClientError>(m, "ClientError", PyExc_RuntimeError);
  nb::exception<ringfeed::python::TimeoutReached>(m, "Timeout", PyExc_TimeoutError);

  nb::class_<BatchObject>(m, "Batch", R"doc(One batch of the job, viewing a slot of the shared-memory ring (no copy).

Obtained from ``Client.next()`` or by iterating a ``Client``; not constructible.

Features (``batch["name"]``), ``rows = len(batch)``:

- fixed numeric: ``ndarray`` of shape ``(rows, *shape)`` and the feature's dtype;
- varlen numeric: ``(values, row_splits)``: values ``(n,)``, row_splits ``(rows + 1,)`` int64;
  row ``r`` is ``values[row_splits[r]:row_splits[r + 1]]``;
- fixed bytes: ``(data, offsets)``: data ``(nbytes,)`` uint8, offsets ``(strings + 1,)`` int64,
  string ``i`` is ``data[offsets[i]:offsets[i + 1]]``, strings = rows * prod(shape);
- varlen bytes: ``(data, offsets, row_splits)``, row_splits counting strings per row.

Every call returns new arrays whose ``base`` holds the batch's slot: the slot returns to the
daemon when this object and all arrays (and tensors made from them with DLPack) are gone, at
``release()`` (BufferError while views live) or at ``close()`` / the end of a ``with`` block
(then as soon as no view is left). A released slot is never read: views keep it held.

Raises ``KeyError`` for an unknown feature, ``ringfeed.ClientError`` after release/close.
Thread-safety: like any Python object (the GIL serialises calls).)doc")
      .def("__getitem__", &BatchObject::Feature, nb::arg("name"),
           "The feature's arrays viewing the slot (see the class docstring for the shapes).")
      .def("strings", &BatchObject::Strings, nb::arg("name"),
           "A bytes feature as Python ``bytes`` (copies): fixed -> list of ``rows * prod(shape)`` bytes; "
           "varlen -> a list per row. TypeError for numeric features.")
      .def("keys", &BatchObject::Keys, "Feature names in schema order.")
      .def("__contains__", &BatchObject::Contains, nb::arg("name").none())
      .def("__iter__", [](const BatchObject& b) { return nb::iter(b.Keys()); },
           "Iterates the feature names in schema order, as ``keys()``.")
      .def("__len__", &BatchObject::rows, "Rows (records) in the batch.")
      .def_prop_ro("sources", &BatchObject::Sources,
                   "(file_index, record_index): two int64 arrays of shape (rows,) (copies): where each row came "
                   "from (index into the job's sorted file list, record index in that file).")
      .def_prop_ro("epoch", &BatchObject::epoch, "0-based epoch.")
      .def_prop_ro("index", &BatchObject::index, "0-based batch index within the epoch (across all ranks).")
      .def_prop_ro("rows", &BatchObject::rows, "Rows in the batch (<= Client.batch_size).")
      .def_prop_ro("end_of_epoch", &BatchObject::end_of_epoch, "True for the last batch of its epoch (this queue).")
      .def_prop_ro("end_of_data", &BatchObject::end_of_data, "True for the last batch of the run (this queue).")
      .def_prop_ro("slot", &BatchObject::slot, "Ring slot (diagnostics).")
      .def_prop_ro("released", &BatchObject::released, "True after release() or close().")
      .def("live_views", &BatchObject::LiveViews, "{feature: live view count}: what keeps the slot held.")
      .def("release", &BatchObject::Release,
           "Return the slot to the daemon now. Raises BufferError naming the features whose arrays are still "
           "alive (nothing is released then). Idempotent.")
      .def("close", &BatchObject::Close,
           "Give up this object's hold on the slot: it returns now if no array views it, else when the last "
           "view dies. The batch's features can no longer be taken. Idempotent.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](BatchObject& b, nb::args) { b.Close(); })
      .def("__repr__", &BatchObject::Repr);

  nb::class_<ClientObject>(m, "_Client")
      .def(nb::init<const std::string&, int, const std::string&, double, double>(), nb::arg("job"), nb::arg("rank"),
           nb::arg("runtime_dir"), nb::arg("liveness_timeout"), nb::arg("attach_timeout"))
      .def("next", &ClientObject::Next, nb::arg("timeout"))
      .def("close", &ClientObject::Close)
      .def_prop_ro("closed", &ClientObject::closed)
      .def_prop_ro("job", &ClientObject::job)
      .def_prop_ro("rank", &ClientObject::rank)
      .def_prop_ro("consumer_id", &ClientObject::consumer_id)
      .def_prop_ro("daemon_pid", &ClientObject::daemon_pid)
      .def_prop_ro("batch_size", &ClientObject::batch_size)
      .def_prop_ro("mode", &ClientObject::mode)
      .def_prop_ro("queue_count", &ClientObject::queue_count)
      .def_prop_ro("segment_name", &ClientObject::segment_name)
      .def("features", &ClientObject::Features)
      .def("files", &ClientObject::Files)
      .def("end_reason", &ClientObject::EndReason)
      .def("slots_region", &ClientObject::SlotsRegion);

  nb::class_<CudaUploaderObject>(m, "_CudaUploader", R"doc(Batches from the ring straight to GPU memory (client/cuda_uploader.h).

``_CudaUploader(client, device=0, libcuda_path="")``: loads the CUDA driver (libcuda.so.1, or
``libcuda_path``, or ``$RINGFEED_LIBCUDA``) and registers the ring's slots once, in the calling
thread's current CUDA context (PyTorch's, once it has touched the device) or device ``device``'s
primary context. ringfeed.torch uses it for CUDA devices; see docs/python.md.

``upload(batch, stream, dst)``: ``dst`` is a list of ``(feature, part, device_ptr, capacity)``
with part ``"values"``, ``"row_splits"`` or ``"value_offsets"``, device_ptr an int (a tensor's
``data_ptr()``) and capacity in bytes; ``stream`` a CUstream as an int
(``torch.cuda.Stream.cuda_stream``). Enqueues the copies and an event and returns the bytes
enqueued; the batch is closed and its slot held until the event completed. ``poll()`` returns
finished slots (never waits), ``synchronize()`` waits for all. Errors: ringfeed.ClientError (a released
batch, another Client's batch, a capacity too small, the driver's errors); TypeError/ValueError for
a malformed ``dst`` entry.)doc")
      .def(nb::init<const ClientObject&, int, const std::string&>(), nb::arg("client"), nb::arg("device") = 0,
           nb::arg("libcuda_path") = "")
      .def("upload", &CudaUploaderObject::Upload, nb::arg("batch"), nb::arg("stream"), nb::arg("dst"))
      .def("poll", &CudaUploaderObject::Poll)
      .def("synchronize", &CudaUploaderObject::Synchronize)
      .def_prop_ro("pending", &CudaUploaderObject::pending)
      .def_prop_ro("registered", &CudaUploaderObject::registered);
}
