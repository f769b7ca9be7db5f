"""ringfeed: the Python client of ringfeedd.

Batches from the daemon's shared-memory ring as NumPy arrays that view the ring (no copy); they
export DLPack through NumPy (``torch.from_dlpack(arr)``, ``jax.dlpack.from_dlpack(arr)``).

    import ringfeed
    with ringfeed.Client("mnist", timeout=30) as client:
        for batch in client:
            images = batch["image"]          # uint8 (rows, 28, 28, 1), viewing the ring
            labels = batch["label"]          # int64 (rows,)
            ...

``ringfeed.torch`` (imported separately; it imports torch) has ``RingfeedIterable``.
Reference: docs/python.md.
"""

try:
    from ._core import Batch, ClientError, Timeout
except ModuleNotFoundError as e:
    import os as _os
    _here = _os.path.dirname(_os.path.abspath(__file__))
    # Python started in the repository's python/ folder finds the source, which has no _core.
    if e.name == "ringfeed._core" and _os.path.exists(_os.path.join(_here, "..", "pyproject.toml")):
        raise ModuleNotFoundError(
            f"ringfeed was imported from its source folder {_here}, which has no compiled _core: run "
            f"Python outside the repository's python/ folder, where the package that `pip install ./python` "
            f"installed is found", name=e.name) from None
    raise
from ._client import Client, Feature

ClientError.__module__ = "ringfeed"
ClientError.__doc__ = """An error of the client or of the job (a RuntimeError): the daemon not running, refusing
this consumer, exited, failed, stopped or frozen, an invalid batch, a closed client or released batch, a
parent's client used in a forked child. The message says which, with the daemon's own words where it gave
them. C++: ringfeed::ClientError."""
Timeout.__module__ = "ringfeed"
Timeout.__doc__ = """Nothing arrived within the timeout (a TimeoutError): raised by ``Client.next`` and by
iterating a ``Client``. A status, not a failure: the job goes on, and the message says what may hold it up
(every slot held, a rank without a consumer) where the ring shows it."""
Batch.__module__ = "ringfeed"

__all__ = ["Client", "Batch", "Feature", "ClientError", "Timeout"]
__version__ = "0.1.0"
