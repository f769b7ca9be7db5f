"""ringfeed.torch: PyTorch glue for ringfeed (this module imports torch; ``import ringfeed`` does not).

    from ringfeed.torch import RingfeedIterable
    loader = torch.utils.data.DataLoader(RingfeedIterable("mnist"), batch_size=None)
    for batch in loader:
        logits = model(batch["image"].float() / 255)     # uint8 (rows, 28, 28, 1)
        loss = F.cross_entropy(logits, batch["label"])

Reference: docs/python.md.
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

try:
    import torch
except ModuleNotFoundError as e:  # say how to get it: ``import ringfeed`` works without torch
    if e.name != "torch":
        raise  # torch is there but something it imports is not: its own message says what
    raise ImportError(
        "ringfeed.torch needs PyTorch: pip install torch (the CPU-only wheel: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu), or pip install 'PATH/TO/ringfeed/python[torch]'; see "
        "docs/python.md"
    ) from e

import ringfeed
from ringfeed import _core

try:
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # pragma: no cover - very old or stripped torch
    _Base = object


def feature_tensors(batch: ringfeed.Batch, name: str):
    """One numeric feature of `batch` as CPU tensors viewing the ring (``torch.from_dlpack``, no copy):
    a tensor ``(rows, *shape)`` for a fixed feature, ``(values, row_splits)`` for a varlen one.
    The tensors hold the batch's slot until they are gone."""
    value = batch[name]
    if isinstance(value, tuple):
        return tuple(torch.from_dlpack(a) for a in value)
    return torch.from_dlpack(value)


_TORCH_DTYPES = {
    "int64": torch.int64, "float32": torch.float32, "float64": torch.float64, "uint8": torch.uint8,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
}


def _torch_dtype(array) -> "torch.dtype":
    try:
        return _TORCH_DTYPES[array.dtype.name]
    except KeyError:  # uint16/uint32: torch has them only in recent versions
        return getattr(torch, array.dtype.name)


def _upload_to_cuda(batch: ringfeed.Batch, names: Sequence[str], device: torch.device,
                    stream: "torch.cuda.Stream", uploader) -> Dict[str, object]:
    """Copies the numeric features `names` of `batch` to `device` with the C++ CUDA uploader
    (``ringfeed._core._CudaUploader``, client/cuda_uploader.h) and returns them as
    ``{name: tensor or (values, row_splits)}``.

    The destination tensors are allocated here on `stream`; the uploader enqueues one
    ``cuMemcpyHtoDAsync`` per column from the ring's registered (page-locked) slots on `stream`,
    with no host copy, records an event, and keeps the batch's slot until that event completed.
    The host does not wait: the slot comes back in a later upload (the uploader polls) and the
    tensors are ready for any work queued on `stream` after this call. `batch` is closed.
    """
    out: Dict[str, object] = {}
    dst = []
    # (device "cpu" only in the tests, which run the uploader against a libcuda stand-in whose
    # "device memory" is host memory.)
    with torch.cuda.stream(stream) if device.type == "cuda" else contextlib.nullcontext():
        for name in names:
            value = batch[name]  # CPU views: only their shapes and dtypes are used
            parts = value if isinstance(value, tuple) else (value,)
            tensors = []
            for part, array in zip(("values", "row_splits"), parts):
                t = torch.empty(array.shape, dtype=_torch_dtype(array), device=device)
                dst.append((name, part, t.data_ptr(), t.numel() * t.element_size()))
                tensors.append(t)
            out[name] = tuple(tensors) if isinstance(value, tuple) else tensors[0]
            del value, parts, array
    uploader.upload(batch, stream.cuda_stream, dst)
    return out


class _InterruptedWait(Exception):
    """A KeyboardInterrupt raised in the client's wait for the next batch (not in the loop's own
    code): RingfeedIterable keeps that client for the next iteration."""


def _batches_of(client: ringfeed.Client):
    """The client's batches until the end of the data, a KeyboardInterrupt in its wait raised as
    _InterruptedWait."""
    while True:
        try:
            batch = client.next()
        except KeyboardInterrupt:
            raise _InterruptedWait() from None
        if batch is None:
            return
        yield batch


class RingfeedIterable(_Base):
    """An ``IterableDataset`` over a ringfeedd job: yields one dict of tensors per batch.

    Use it with ``DataLoader(dataset, batch_size=None)`` (the daemon already batches) or iterate
    it directly.

    Parameters
    ----------
    job : str
        The job's name.
    device : str or torch.device
        ``"cpu"`` (default): tensors view the ring (``torch.from_dlpack``, no copy) and hold the
        batch's slot until they are gone, so copy (``.clone()``) what must outlive the step.
        ``"cuda"``, ``"cuda:N"``: the features are copied to that device straight from the ring
        (registered once as page-locked memory; ``cuMemcpyHtoDAsync`` on `stream`, no host
        copy) and the slot returns once the copy completed (``_upload_to_cuda``); the tensors own
        device memory. Needs the NVIDIA driver (libcuda.so.1); PyTorch's CUDA runtime is used
        only to allocate the tensors. Where PyTorch sees no CUDA device, iterating raises
        ``ringfeed.ClientError`` before attaching.
    features : sequence of str, optional
        Features to yield (default: every numeric feature, plus bytes features when
        `bytes_features` is true). Naming a bytes feature here yields it too.
    rank : int, optional
        ``consumers.mode: ranks``: this process's rank (e.g. ``LOCAL_RANK``).
    timeout : float, optional
        Seconds to wait for each batch before ``ringfeed.Timeout``; None waits forever.
    runtime_dir : str, optional
        The daemon's runtime directory (default: the daemon's default).
    liveness_timeout, attach_timeout : float
        See ``ringfeed.Client``.
    bytes_features : bool
        Also yield bytes features, as lists of Python ``bytes`` (``Batch.strings``: per row a
        list for varlen). Default False: skipped.
    stream : torch.cuda.Stream, optional
        CUDA devices: the stream the copies run on (default: the current stream).
    metadata : bool
        Add ``"_batch": {"epoch", "index", "rows", "end_of_epoch", "end_of_data", "sources"}`` to
        each dict: ints and bools, and ``sources`` = ``(file_index, record_index)``, two int64
        tensors ``(rows,)`` (copies; ``Batch.sources``): where each row came from.

    Yields
    ------
    dict
        ``{name: tensor}`` for fixed numeric features (``(rows, *shape)``, the feature's dtype),
        ``{name: (values, row_splits)}`` for varlen numeric ones (row_splits int64, rows + 1),
        lists of bytes for bytes features when asked.

    Notes
    -----
    Each ``iter()`` attaches a new ``ringfeed.Client`` and detaches when the iteration ends, so
    it works in DataLoader worker processes, each a consumer of its own (in shared mode the
    workers split the batches; batches that workers took ahead and the loop never got, after a
    ``break``, are not delivered again). The exception: an iteration on the CPU that Ctrl-C
    ended in its wait for a batch leaves its client attached, and the next ``iter()`` in the
    same process goes on with it, from the batch that wait had taken. A rank is one consumer:
    with ``rank`` set, a DataLoader with ``num_workers`` above 1 raises ``ValueError``;
    ``num_workers=0`` is the setting ringfeed wants (the daemon reads and parses in parallel
    already, and tensors made in the main process are views of the ring, not copies). End of
    data ends the iteration; daemon errors raise ``ringfeed.ClientError``. In a plain training
    loop at most two slots are held (the batch being used and the one being taken); keeping
    tensors of k batches holds k slots.
    """

    def __init__(self, job: str, device="cpu", features: Optional[Iterable[str]] = None,
                 rank: Optional[int] = None, timeout: Optional[float] = None,
                 runtime_dir: Optional[str] = None, liveness_timeout: float = 10.0,
                 bytes_features: bool = False, stream=None, metadata: bool = False,
                 attach_timeout: float = 0.0):
        super().__init__()
        self.job = job
        self.device = torch.device(device)
        self.features = list(features) if features is not None else None
        self.rank = rank
        self.timeout = timeout
        self.runtime_dir = runtime_dir
        self.liveness_timeout = liveness_timeout
        self.attach_timeout = attach_timeout
        self.bytes_features = bytes_features
        self.stream = stream
        self.metadata = metadata
        self.client: Optional[ringfeed.Client] = None  # the client of the running iteration
        self._files: Optional[List[str]] = None  # the job's file list, as an iteration's client read it
        # The client of an iteration that Ctrl-C ended in its wait, and the process that made it.
        self._interrupted: Optional[ringfeed.Client] = None
        self._interrupted_pid = 0

    @property
    def files(self) -> List[str]:
        """The job's file list, which ``_batch["sources"][0]`` (file indices) indexes: as
        ``ringfeed.Client.files`` read it for an iteration in this process (with ``metadata=True``
        as the iteration starts; else asked now of the running iteration's client), kept after the
        iteration ends. Raises ``ringfeed.ClientError`` where no iteration ran in this process
        (before the first, or in a DataLoader's main process when its workers iterate: there,
        ``ringfeedctl status JOB --files``) or the daemon is gone."""
        if self._files is None:
            if self.client is None or self.client.closed:
                raise ringfeed.ClientError(
                    f"RingfeedIterable({self.job!r}).files: no iteration of this dataset runs in this process "
                    f"(pid {os.getpid()}), and none read the list: ask while one runs, or give metadata=True "
                    f"(the list is then read as an iteration starts and kept), or see ringfeedctl status "
                    f"{self.job} --files")
            self._files = self.client.files
        return list(self._files)

    def _select(self, client: ringfeed.Client):
        schema = {f.name: f for f in client.schema}
        if self.features is not None:
            unknown = [n for n in self.features if n not in schema]
            if unknown:
                raise KeyError(f"job {client.job} has no feature(s) {unknown}; known features: {list(schema)}")
            names = self.features
        else:
            names = [f.name for f in client.schema if f.dtype.kind != "S" or self.bytes_features]
        numeric = [n for n in names if schema[n].dtype.kind != "S"]
        strings = [n for n in names if schema[n].dtype.kind == "S"]
        return numeric, strings, list(names)

    def __iter__(self) -> Iterator[Dict[str, object]]:
        if self.device.type == "cuda" and not torch.cuda.is_available():
            # Before attaching: no batch is taken, and the error is ringfeed's, not a PyTorch
            # RuntimeError from deep inside the first upload.
            raise ringfeed.ClientError(
                f"RingfeedIterable(device={str(self.device)!r}): PyTorch sees no CUDA device "
                f"(torch.cuda.is_available() is False: no GPU, no NVIDIA driver, or a CPU-only torch "
                f"{torch.__version__}); use device='cpu'")
        worker = torch.utils.data.get_worker_info()
        if self.rank is not None and worker is not None and worker.num_workers > 1:
            # Every worker would attach as the same rank, and all but one be refused ("rank R is
            # already attached by pid P"), naming a sibling worker rather than the cause.
            raise ValueError(
                f"RingfeedIterable(rank={self.rank}) in a DataLoader with num_workers={worker.num_workers}: a "
                f"rank is one consumer, and each worker would attach as rank {self.rank}; use num_workers=0 "
                f"(ringfeedd reads and parses in parallel already) or 1")
        client, self._interrupted = self._interrupted, None
        if client is None or client.closed or self._interrupted_pid != os.getpid():
            client = ringfeed.Client(self.job, rank=self.rank, timeout=self.timeout, runtime_dir=self.runtime_dir,
                                     liveness_timeout=self.liveness_timeout, attach_timeout=self.attach_timeout)
        self.client = client
        # The list sources index, of this client's daemon (a restarted one may list other files).
        self._files = client.files if self.metadata else None
        uploader = stream = None  # before the try: the finally needs it when _select raises
        keep = False
        try:
            numeric, strings, order = self._select(client)
            if self.metadata:
                order.append("_batch")
            for batch in _batches_of(client):
                out = {name: batch.strings(name) for name in strings}
                if self.metadata:
                    file_index, record_index = batch.sources
                    out["_batch"] = {"epoch": batch.epoch, "index": batch.index, "rows": batch.rows,
                                     "end_of_epoch": batch.end_of_epoch, "end_of_data": batch.end_of_data,
                                     "sources": (torch.from_numpy(file_index), torch.from_numpy(record_index))}
                if self.device.type == "cpu":
                    for name in numeric:
                        out[name] = feature_tensors(batch, name)
                    batch.close()  # the tensors alone hold the slot now
                else:
                    if uploader is None:
                        uploader, stream = self._cuda_uploader(client)
                    uploaded = _upload_to_cuda(batch, numeric, self.device, stream, uploader)
                    current = torch.cuda.current_stream(self.device)
                    if current != stream:
                        # Work on the consumer's stream sees the copies, and the caching
                        # allocator does not hand the tensors' memory to `stream` again while
                        # that work may still use it.
                        current.wait_stream(stream)
                        for value in uploaded.values():
                            for t in value if isinstance(value, tuple) else (value,):
                                t.record_stream(current)
                    out.update(uploaded)
                del batch
                yield {name: out[name] for name in order}  # the features' order (the job's, or features=)
        except _InterruptedWait:
            # Ctrl-C in the client's wait: the batch the wait had taken waits in the client for
            # its next call (ringfeed.Client.next), so the next iteration of this dataset in this
            # process goes on with this client, from that batch, instead of attaching anew (which
            # would lose it). CPU only: a CUDA uploader registers the client's ring once.
            keep = self.device.type == "cpu"
            raise KeyboardInterrupt from None
        finally:
            if uploader is not None:
                uploader.synchronize()  # every slot back before the client goes
            if keep:
                self._interrupted, self._interrupted_pid = client, os.getpid()
            else:
                client.close()

    def _cuda_uploader(self, client: ringfeed.Client):
        """The uploader for this iteration, created in PyTorch's context for `device` (so the
        ring is registered there), and the stream the copies run on."""
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        with torch.cuda.device(index):
            torch.empty(0, device=self.device)  # makes PyTorch's context for the device current
            stream = self.stream if self.stream is not None else torch.cuda.current_stream(index)
            return _core._CudaUploader(client._core, index), stream
