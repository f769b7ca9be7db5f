"""ringfeed.Client: a trainer's attachment to one ringfeedd job (wraps ringfeed._core._Client)."""

from __future__ import annotations

import math
import numbers
import os
import warnings
from typing import Iterator, List, NamedTuple, Optional, Tuple

import numpy as np

from . import _core

_NUMPY_DTYPES = {
    "int64": np.dtype(np.int64), "float32": np.dtype(np.float32), "float64": np.dtype(np.float64),
    "uint8": np.dtype(np.uint8), "int8": np.dtype(np.int8), "uint16": np.dtype(np.uint16),
    "int16": np.dtype(np.int16), "int32": np.dtype(np.int32), "uint32": np.dtype(np.uint32),
    "bytes": np.dtype(np.bytes_),
}

class _ClientTimeout:
    """The default of ``Client.next(timeout=...)``: the client's own timeout (``Client.timeout``)."""

    def __repr__(self) -> str:
        return "<the client's timeout>"


_DEFAULT = _ClientTimeout()


class Feature(NamedTuple):
    """One feature of the job's schema.

    Attributes
    ----------
    name : str
    dtype : numpy.dtype
        Element type; ``numpy.dtype('S')`` (``np.bytes_``) for bytes features, whose arrays are
        the strings' bytes as uint8 plus int64 offsets.
    type : str
        ``"fixed"`` (``tf.io.FixedLenFeature``) or ``"varlen"`` (``tf.io.VarLenFeature``).
    shape : tuple of int
        Per-row shape of a fixed feature (``()`` for a scalar); ``()`` for varlen.
    """

    name: str
    dtype: np.dtype
    type: str
    shape: Tuple[int, ...]


def _number(value, what: str, none: str = "", positive: bool = False) -> float:
    """A number of seconds (int, float, NumPy scalar, Fraction...) as a float: not a str ("5")
    or a bool (True would be 1 s); >= 0, or > 0 when `positive`. `none` says what None means,
    where it is allowed."""
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be {none}a number of seconds, got {value!r}")
    value = float(value)
    if math.isnan(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{what} must be {none}{'> 0' if positive else '>= 0'} seconds, got {value}")
    return value


_FOREVER_SECONDS = 1e9  # longer waits are forever (the extension's kForeverSeconds)


def _seconds(value: Optional[float], what: str) -> float:
    """Seconds as the extension takes them: -1.0 for None, inf and above 1e9 (no limit)."""
    if value is None:
        return -1.0
    seconds = _number(value, what, none="None (wait forever) or ")
    return -1.0 if seconds > _FOREVER_SECONDS else seconds


class Client:
    """A trainer's attachment to the ringfeedd serving ``job``.

    Parameters
    ----------
    job : str
        The job's name (the ``job:`` key of its config).
    rank : int or None
        ``consumers.mode: ranks``: this trainer's rank, ``0..count-1``; it gets only that rank's
        batches. None for shared mode.
    timeout : float or None
        Seconds iteration waits for each batch; when it passes, ``ringfeed.Timeout`` (a
        ``TimeoutError``) is raised. None (default), ``inf`` and anything above 1e9 wait
        forever. Also the default of ``next``.
    runtime_dir : str, os.PathLike or None
        The daemon's runtime directory; None uses the daemon's default (``$RINGFEED_RUNTIME_DIR``,
        ``$RUNTIME_DIRECTORY``, ``/run/ringfeed`` for root, ``$XDG_RUNTIME_DIR/ringfeed``,
        ``/tmp/ringfeed-<uid>``).
    liveness_timeout : float
        Seconds the daemon's heartbeat may stand still before a wait reports it frozen; also
        the longest wait for the daemon's answer when attaching. > 0; values above 2147483
        (about 24.8 days, ``inf`` included) count as that.
    attach_timeout : float
        Seconds to wait for the daemon when nothing listens at the job's socket yet (a trainer
        launched together with its daemon), or the daemon there closes the connection before
        answering (it is stopping: re-attaching while it restarts): attaching is tried again
        every 100 ms until then.
        0 (default): one try. >= 0; Ctrl-C interrupts the wait. Other refusals are raised at once.

    Raises
    ------
    ValueError, TypeError
        A bad argument: a negative or NaN timeout, a rank that is not an int >= 0, a NUL in
        ``job`` or ``runtime_dir``.
    ringfeed.ClientError
        The daemon is not running, refused the consumer (its reason), or its segment does not
        match this library. Later, from ``next``/iteration: the daemon exited, failed
        (``on_error: fail``, with its message naming file and record), stopped or froze.

    Notes
    -----
    Iterating yields ``ringfeed.Batch`` objects until the end of the data. Each batch holds one
    ring slot until it and every array viewing it are gone (see ``ringfeed.Batch``); in a plain
    ``for batch in client:`` loop the previous batch is freed when the loop variable is rebound,
    so at most two slots are held. Keeping views of ``k`` batches holds ``k`` slots: the ring
    has a fixed number, and the daemon waits for free ones.

    Waiting releases the GIL (other Python threads run) and checks for signals every 100 ms,
    so Ctrl-C raises ``KeyboardInterrupt`` promptly.

    Thread-safety: ``next`` may be called from several threads at once (each gets a different
    batch). ``close()`` while another thread waits in ``next`` makes that wait raise
    ``ClientError`` within about 100 ms. After ``fork()`` a child must attach anew (e.g. in a
    DataLoader worker): in the child its parent's Client and batches raise ``ClientError``,
    and dropping them there leaves the parent's slots held (arrays made before the fork still
    read the parent's slots: copy them first).
    """

    def __init__(self, job: str, rank: Optional[int] = None, timeout: Optional[float] = None,
                 runtime_dir: Optional[str] = None, liveness_timeout: float = 10.0,
                 attach_timeout: float = 0.0):
        self._timeout = _seconds(timeout, "timeout")
        liveness_timeout = _number(liveness_timeout, "liveness_timeout", positive=True)
        attach_timeout = _number(attach_timeout, "attach_timeout")
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 2**31):
            raise ValueError(f"rank must be None (shared mode) or an int in 0..2**31-1, got {rank!r}")
        runtime_dir = os.fspath(runtime_dir) if runtime_dir is not None else ""
        for what, text in (("job", job), ("runtime_dir", runtime_dir)):
            # The library builds C paths from them: a NUL would silently cut the path short.
            if not isinstance(text, str):
                raise TypeError(f"{what} must be a str, got {type(text).__name__}")
            if "\0" in text:
                raise ValueError(f"{what} {text!r} contains a NUL character")
        self._core = _core._Client(job, -1 if rank is None else rank, runtime_dir, float(liveness_timeout),
                                   attach_timeout)
        self._files: Optional[List[str]] = None
        self._schema = [Feature(name, _NUMPY_DTYPES[dtype], kind, tuple(shape))
                        for name, dtype, kind, shape in self._core.features()]
        self._taken = 0  # batches this client took (the end-of-data warnings say so)
        self._end_reason_at_close: Optional[str] = None  # end_reason as close() found it
        self._end_warned = False  # the end of the data is warned about once per client

    # -- batches ---------------------------------------------------------------------------
    def next(self, timeout=_DEFAULT) -> Optional[_core.Batch]:
        """The next batch, or None at the end of the data (and on every later call).

        Parameters
        ----------
        timeout : float or None, optional
            Seconds to wait; 0 just looks; None waits forever. Default: the client's timeout.

        Raises
        ------
        ringfeed.Timeout
            Nothing arrived within ``timeout``.
        ringfeed.ClientError
            The daemon exited, failed, stopped or froze (its message), or the client is closed.
        KeyboardInterrupt
            A signal handler raised while waiting.
        """
        seconds = self._timeout if timeout is _DEFAULT else _seconds(timeout, "timeout")
        return self._take(seconds)

    def __iter__(self) -> Iterator[_core.Batch]:
        """Iterates the batches until the end of the data, each ``next()`` with the client's
        timeout (``ringfeed.Timeout`` when it passes)."""
        return self

    def __next__(self) -> _core.Batch:
        batch = self._take(self._timeout)
        if batch is None:
            raise StopIteration
        return batch

    def _take(self, seconds) -> Optional[_core.Batch]:
        batch = self._core.next(seconds)
        if batch is not None:
            self._taken += 1
            return batch
        if self._end_warned:
            return batch
        self._end_warned = True
        reason = self.end_reason
        if reason:
            # The daemon ended the data early (an epoch that delivered no batch: files emptied
            # or rewritten in place, every record skipped, ...): a `for batch in client:` loop
            # would otherwise finish as if training were done, even on an endless job.
            taken = ("before this client took any batch" if self._taken == 0 else
                     f"early, after this client took {self._taken} batch{'' if self._taken == 1 else 'es'}")
            warnings.warn(f"job {self.job}: the data ended {taken}: {reason} (ringfeedd pid {self.daemon_pid}; "
                          f"its log has the details; client.end_reason says it too)", RuntimeWarning, stacklevel=3)
        elif self._taken == 0:
            # An ordinary end (the daemon gives no reason): the batches went to other consumers.
            warnings.warn(
                f"job {self.job}: the data ended before this client took any batch: the daemon "
                f"(pid {self.daemon_pid}) has already served all its epochs to earlier consumers (restart "
                f"it, or set epochs: 0 to run until stopped, to train again; `ringfeedctl status "
                f"{self.job}` shows the batches it produced).", RuntimeWarning, stacklevel=3)
        return batch

    # -- the job ---------------------------------------------------------------------------
    @property
    def schema(self) -> List[Feature]:
        """The job's features in schema order (list of ``Feature``)."""
        return list(self._schema)

    @property
    def files(self) -> List[str]:
        """The job's file list, which ``batch.sources[0]`` (file indices) indexes: asked of
        the daemon the first time, then kept. Raises ringfeed.ClientError if the daemon is gone or
        restarted since this client attached, or if it is closed and the list was not read before.
        Paths decoded as ``os.fsdecode`` does: one that is not UTF-8 keeps its bytes as
        surrogates, and ``open()`` or ``os.fsencode`` gets them back."""
        if self._files is None:
            self._files = [os.fsdecode(path) for path in self._core.files()]
        return list(self._files)

    @property
    def end_reason(self) -> str:
        """Why the data ended, once iteration has stopped (``next`` returned None): ``""`` after an
        ordinary end (every epoch served) and while the data has not ended, else the daemon's
        reason, e.g. ``"epoch 3 delivered no batch: its 4 files held no record; ..."`` (then a
        ``RuntimeWarning`` said it too). Still readable after ``close()`` (as it was then), so
        after a ``with`` block too. C++: ``Client::end_reason``."""
        if self._end_reason_at_close is not None:
            return self._end_reason_at_close
        return self._core.end_reason().decode("utf-8", errors="replace")

    @property
    def batch_size(self) -> int:
        """Rows of a full batch (the last of an epoch may hold fewer)."""
        return self._core.batch_size

    @property
    def daemon_pid(self) -> int:
        """The pid of the ringfeedd this client attached to (from its welcome)."""
        return self._core.daemon_pid

    @property
    def job(self) -> str:
        """The job's name, as given to the constructor."""
        return self._core.job

    @property
    def rank(self) -> Optional[int]:
        """The rank attached as (``consumers.mode: ranks``); None in shared mode."""
        rank = self._core.rank
        return None if rank < 0 else rank

    @property
    def consumer_id(self) -> int:
        """This consumer's entry in the daemon's table (1..64), as ``ringfeedctl status`` shows."""
        return self._core.consumer_id

    @property
    def mode(self) -> str:
        """``"shared"`` or ``"ranks"`` (``consumers.mode``)."""
        return self._core.mode

    @property
    def timeout(self) -> Optional[float]:
        """Seconds iteration waits for a batch; None: forever (also for ``inf`` and above 1e9)."""
        return None if self._timeout < 0 else self._timeout

    def _slots_region(self) -> Tuple[int, int]:
        """(address, bytes) of the mapped slot area: every batch's arrays lie inside (tests, GPU
        registration)."""
        return self._core.slots_region()

    # -- lifetime --------------------------------------------------------------------------
    def close(self) -> None:
        """Detach. Batches still held stay valid; the daemon reclaims their slots when the last
        is gone. Idempotent. Afterwards ``next()``, and ``files`` when it was not read before,
        raise ``ringfeed.ClientError``; ``end_reason`` keeps what it said at the close, and the
        attributes fixed at attach (``job``, ``rank``, ``mode``, ``schema``, ``batch_size``,
        ``consumer_id``, ``daemon_pid``, ``timeout``) still answer."""
        if self._end_reason_at_close is None and not self._core.closed:
            try:
                self._end_reason_at_close = self._core.end_reason().decode("utf-8", errors="replace")
            except _core.ClientError:
                pass  # a forked child's copy of the parent's client: nothing to keep
        self._core.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (or the ``with`` block ended)."""
        return self._core.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"daemon pid {self.daemon_pid}"
        return f"<ringfeed.Client job={self.job!r} rank={self.rank} {state}>"
