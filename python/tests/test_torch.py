"""ringfeed with PyTorch: DLPack views share the ring's memory; ringfeed.torch.RingfeedIterable.
Skipped only where torch is not installed (scripts/test.sh installs it)."""

from __future__ import annotations

import os
import signal
import threading
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ringfeed  # noqa: E402
from ringfeed.torch import RingfeedIterable  # noqa: E402
from ringfeed import _core  # noqa: E402
from test_client import expected_row, held, id_job  # noqa: E402
from test_cuda_upload import STREAM, shim  # noqa: E402,F401 (shim: the fixture)


def test_from_dlpack_shares_memory_and_holds_the_slot(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, extra="ring: {slots: 3}\n"))
    with d.client() as client:
        batch = client.next()
        vec = batch["vec"]
        tensor = torch.from_dlpack(vec)
        assert tensor.data_ptr() == vec.__array_interface__["data"][0]
        assert tensor.dtype == torch.float32 and tuple(tensor.shape) == vec.shape
        np.testing.assert_array_equal(tensor.numpy(), vec)
        vec[0, 0] = 123.0  # one memory: a write through NumPy is seen by the tensor
        assert tensor[0, 0].item() == 123.0
        values, splits = (torch.from_dlpack(a) for a in batch["vals"])
        assert splits.dtype == torch.int64 and splits.shape[0] == len(batch) + 1
        del vec, values, splits
        with pytest.raises(BufferError, match="'vec'"):  # the tensor alone keeps the slot
            batch.release()
        del tensor
        batch.release()
        assert held(d) == 0


def test_iterable_yields_tensors_equal_to_the_data(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=42, batch=4), args=("--exit-when-done",))
    dataset = RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), timeout=10, bytes_features=True)
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    seen = []
    for out in dataset:
        assert list(out) == ["id", "vec", "vals", "tag", "name"]  # the job's feature order
        address, size = dataset.client._slots_region()
        assert address <= out["vec"].data_ptr() < address + size  # zero-copy on the CPU
        values, splits = out["vals"]
        for r, i in enumerate(out["id"].tolist()):
            want = expected_row(i)
            assert torch.equal(out["vec"][r], torch.from_numpy(want["vec"]))
            assert torch.equal(values[splits[r]:splits[r + 1]], torch.from_numpy(want["vals"]))
            assert out["tag"][r] == want["tag"] and out["name"][r] == want["name"]
            seen.append(i)
    assert sorted(seen) == list(range(42))


def test_iterable_in_a_dataloader(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, batch=8, extra="ring: {slots: 2}\n"), args=("--exit-when-done",))
    dataset = RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), timeout=10, features=["id", "vec"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
    ids = []
    for out in loader:
        assert set(out) == {"id", "vec"} and out["vec"].shape == (8, 4)
        assert torch.equal(out["vec"][:, 0], out["id"].float() + 0.5)
        ids += out["id"].tolist()
    assert sorted(ids) == list(range(40))  # a 2-slot ring: the loop never held more than two


def test_iterable_metadata_says_each_batch_and_where_each_row_came_from(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=10, batch=4, epochs=2), args=("--exit-when-done",))
    dataset = RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), timeout=10, features=["id"], metadata=True)
    seen = []
    for out in torch.utils.data.DataLoader(dataset, batch_size=None):
        assert list(out) == ["id", "_batch"]
        meta = out["_batch"]
        file_index, record_index = meta["sources"]
        assert file_index.dtype == torch.int64 and file_index.tolist() == [0] * meta["rows"]
        assert record_index.tolist() == out["id"].tolist()  # one file of ids 0..9 in order
        seen.append((meta["epoch"], meta["index"], meta["rows"], meta["end_of_epoch"], meta["end_of_data"]))
    assert seen == [(0, 0, 4, False, False), (0, 1, 4, False, False), (0, 2, 2, True, False),
                    (1, 0, 4, False, False), (1, 1, 4, False, False), (1, 2, 2, True, True)]
    # The paths the file indices name, kept after the iteration (and the daemon) ended: before,
    # that took a second client (helper-148).
    assert dataset.files == [str(tmp_path / "data.tfrecord")]


def test_iterable_files_before_any_iteration_says_how_to_get_them(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=10, batch=4))
    dataset = RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), features=["id"])
    with pytest.raises(ringfeed.ClientError, match=r"no iteration of this dataset runs in this process .* none read "
                                                   r"the list: .* metadata=True .* ringfeedctl status .* --files"):
        dataset.files
    batches = iter(dataset)
    next(batches)
    assert dataset.files == [str(tmp_path / "data.tfrecord")]  # without metadata: asked of the running client


def test_iterable_interrupted_in_its_wait_goes_on_from_the_batch_it_took(daemon_factory, tmp_path, sigint_after):
    # Ctrl-C as a batch arrives: the client keeps the batch its wait took; the next iteration of
    # the same dataset goes on with that client, from that batch (a new client would lose it:
    # helper-142, session 54, 38 of 2,500 batches lost to 38 interrupts).
    d = daemon_factory(id_job(tmp_path, count=400, epochs=0, extra="ring: {slots: 2}\n"))
    dataset = RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), features=["id"], metadata=True)
    batches = iter(dataset)
    kept = [next(batches), next(batches)]  # their tensors hold both slots
    last = kept[1]["_batch"]["index"]
    client = dataset.client

    def interrupt_then_free():
        os.kill(os.getpid(), signal.SIGINT)
        kept.pop()

    with sigint_after(3600):  # (the fixture's KeyboardInterrupt handler; its own timer never fires)
        timer = threading.Timer(0.3, interrupt_then_free)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                next(batches)
        finally:
            timer.join()
    out = next(iter(dataset))
    assert dataset.client is client  # the same consumer, not a new attach
    assert out["_batch"]["index"] == last + 1
    del kept, out


def test_iterable_in_dataloader_workers(daemon_factory, tmp_path):
    # Shared mode: two worker processes, each a consumer of its own, split the batches.
    (tmp_path / "s").mkdir()
    (tmp_path / "r").mkdir()
    d = daemon_factory(id_job(tmp_path / "s", count=40, batch=4), args=("--exit-when-done",))
    dataset = RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), timeout=10, features=["id"])
    ids = []
    for out in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2):
        ids += out["id"].tolist()
    assert sorted(ids) == list(range(40))
    # Ranks mode: a rank is one consumer; two workers would both attach as it.
    r = daemon_factory(id_job(tmp_path / "r", count=40, batch=4, extra="consumers: {mode: ranks, count: 2}\n"))
    ranked = RingfeedIterable(r.job, rank=0, runtime_dir=str(r.runtime_dir), timeout=10)
    with pytest.raises(ValueError, match=r"RingfeedIterable\(rank=0\) in a DataLoader with num_workers=2: a rank "
                                         r"is one consumer, and each worker would attach as rank 0; use "
                                         r"num_workers=0"):
        next(iter(torch.utils.data.DataLoader(ranked, batch_size=None, num_workers=2)))


def test_upload_to_cuda_goes_through_the_uploader(daemon_factory, tmp_path, shim):
    """_upload_to_cuda with the C++ uploader over the libcuda stand-in ("device memory" is host
    memory, so the tensors are allocated on the CPU here): values arrive in the destination
    tensors, the batch is closed, the slot comes back once the copies' event completed."""
    from ringfeed.torch import _upload_to_cuda
    path, lib = shim
    d = daemon_factory(id_job(tmp_path, count=40, extra="ring: {slots: 3}\n"))
    with d.client(timeout=10) as client:
        uploader = _core._CudaUploader(client._core, 0, str(path))
        lib.shim_set_events_complete(0)
        batch = client.next()
        stream = types.SimpleNamespace(cuda_stream=STREAM)
        out = _upload_to_cuda(batch, ["id", "vec", "vals"], torch.device("cpu"), stream, uploader)
        assert batch.released and held(d) == 1  # the event is still pending
        assert out["id"].tolist() == [0, 1, 2, 3]
        values, splits = out["vals"]
        for r in range(4):
            want = expected_row(r)
            assert torch.equal(out["vec"][r], torch.from_numpy(want["vec"]))
            assert torch.equal(values[splits[r]:splits[r + 1]], torch.from_numpy(want["vals"]))
        lib.shim_set_events_complete(1)
        assert uploader.poll() == 1 and held(d) == 0
