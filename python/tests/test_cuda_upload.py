"""The Python binding of the CUDA uploader (ringfeed._core._CudaUploader), run against the
libcuda stand-in that the C++ tests use (tests/cuda_shim: "device memory" is host memory, copies
are memcpy, events can be held incomplete). No GPU is needed; what a real driver does is left to
bench/gpu/h2d_bench.py on a machine with one."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

import ringfeed
from ringfeed import _core
from test_client import expected_row, held, id_job

STREAM = 0x5EED  # any non-zero CUstream value: the stand-in only records it


@pytest.fixture
def shim(shim_path):
    """(path, the stand-in loaded with ctypes: the same instance the uploader dlopens)."""
    lib = ctypes.CDLL(str(shim_path))
    lib.shim_calls.restype = ctypes.c_char_p
    lib.shim_reset()
    yield shim_path, lib
    lib.shim_reset()


def calls(lib):
    return json.loads(lib.shim_calls())


def device_buffers(batch):
    """Host arrays standing in for device memory, shaped like each numeric feature's parts."""
    out, dst = {}, []
    for name in ("id", "vec", "vals"):
        value = batch[name]
        parts = value if isinstance(value, tuple) else (value,)
        bufs = [np.full(a.shape, -1, a.dtype) for a in parts]
        for part, buf in zip(("values", "row_splits"), bufs):
            dst.append((name, part, buf.ctypes.data, buf.nbytes))
        out[name] = bufs
        del value, parts
    return out, dst


def test_upload_copies_on_the_stream_and_holds_the_slot_until_the_event(daemon_factory, tmp_path, shim):
    path, lib = shim
    d = daemon_factory(id_job(tmp_path, count=40, batch=4, extra="ring: {slots: 3}\n"))
    with d.client(timeout=10) as client:
        uploader = _core._CudaUploader(client._core, 0, str(path))
        assert uploader.registered
        lib.shim_set_events_complete(0)  # "the GPU is still copying"
        seen = []
        for _ in range(3):
            batch = client.next()
            bufs, dst = device_buffers(batch)
            ids = batch["id"].copy()
            assert uploader.upload(batch, STREAM, dst) == sum(entry[3] for entry in dst)
            assert batch.released  # closed: nothing more can be taken from it
            with pytest.raises(ringfeed.ClientError, match="released"):
                batch["id"]
            for r, i in enumerate(ids.tolist()):
                want = expected_row(i)
                assert bufs["id"][0][r] == i
                np.testing.assert_array_equal(bufs["vec"][0][r], want["vec"])
                values, splits = bufs["vals"]
                np.testing.assert_array_equal(values[splits[r]:splits[r + 1]], want["vals"])
                seen.append(i)
            del batch
        # The three slots stay held while their events are pending: the ring is full.
        assert uploader.pending == 3 and held(d) == 3
        with pytest.raises(ringfeed.Timeout):
            client.next(timeout=0.3)
        lib.shim_set_events_complete(1)
        assert uploader.poll() == 3
        assert uploader.pending == 0 and held(d) == 0
        assert seen == list(range(12))

        log = calls(lib)
        assert [c["call"] for c in log].count("cuMemHostRegister_v2") == 1
        copies = [c for c in log if c["call"] == "cuMemcpyHtoDAsync_v2"]
        assert copies and all(c["stream"] == STREAM and c["src_registered"] for c in copies)
        records = [c for c in log if c["call"] == "cuEventRecord"]
        assert len(records) == 3 and all(c["stream"] == STREAM for c in records)
        address, size = client._slots_region()
        assert all(address <= c["src"] and c["src"] + c["bytes"] <= address + size for c in copies)
        del uploader
        assert [c["call"] for c in calls(lib)].count("cuMemHostUnregister") == 1


def test_a_view_alive_keeps_the_slot_after_the_event(daemon_factory, tmp_path, shim):
    path, lib = shim
    d = daemon_factory(id_job(tmp_path, count=8, batch=4))
    with d.client(timeout=10) as client:
        uploader = _core._CudaUploader(client._core, 0, str(path))
        batch = client.next()
        view = batch["vec"]
        _, dst = device_buffers(batch)
        uploader.upload(batch, STREAM, dst)
        uploader.synchronize()
        assert uploader.pending == 0 and held(d) == 1  # the NumPy view still holds the slot
        assert view[0, 0] == np.float32(0.5)
        del view
        assert held(d) == 0


def test_upload_errors_leave_the_batch_usable(daemon_factory, tmp_path, shim):
    path, _ = shim
    d = daemon_factory(id_job(tmp_path, count=8, batch=4))
    with d.client(timeout=10) as client:
        uploader = _core._CudaUploader(client._core, 0, str(path))
        batch = client.next()
        buf = np.empty(2, np.int64)
        with pytest.raises(ringfeed.ClientError, match="'id'.*32 bytes"):
            uploader.upload(batch, STREAM, [("id", "values", buf.ctypes.data, buf.nbytes)])
        with pytest.raises(ringfeed.ClientError, match="nope"):
            uploader.upload(batch, STREAM, [("nope", "values", buf.ctypes.data, buf.nbytes)])
        with pytest.raises(ValueError, match="part 'offsets'"):
            uploader.upload(batch, STREAM, [("id", "offsets", buf.ctypes.data, buf.nbytes)])
        assert not batch.released and batch["id"].tolist() == [0, 1, 2, 3]
        batch.release()


def test_no_driver_is_a_clear_error_and_the_cpu_path_works(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=8, batch=4))
    with d.client(timeout=10) as client:
        with pytest.raises(ringfeed.ClientError, match="libcuda.so.1 not found"):
            _core._CudaUploader(client._core, 0, str(tmp_path / "no" / "libcuda.so.1"))
        batch = client.next()
        assert batch["id"].tolist() == [0, 1, 2, 3]
