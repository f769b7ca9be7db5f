"""ringfeed with JAX: the NumPy views export DLPack, which jax.numpy.from_dlpack imports
without a copy.
Skipped only where jax is not installed (scripts/test.sh installs it)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from test_client import expected_row, held, id_job  # noqa: E402


def test_jax_from_dlpack_gets_the_batch_values(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=8, batch=4))
    with d.client(timeout=10) as client:
        batch = client.next()
        vec = batch["vec"]
        x = jnp.from_dlpack(vec)
        assert x.shape == (4, 4) and x.dtype == jnp.float32
        ids = jnp.from_dlpack(batch["id"])
        assert ids.dtype == jnp.int64 or ids.dtype == jnp.int32  # int32 unless jax_enable_x64
        values, splits = (jnp.from_dlpack(a) for a in batch["vals"])
        batch_first_id = batch["id"][0]
        for r, i in enumerate(batch["id"].tolist()):
            want = expected_row(i)
            np.testing.assert_array_equal(np.asarray(x[r]), want["vec"])
            np.testing.assert_array_equal(np.asarray(values[int(splits[r]):int(splits[r + 1])]), want["vals"])
        # Zero-copy: the ring's columns are 64-byte aligned, which JAX's CPU backend accepts as
        # is; the jax array then holds the NumPy array (DLPack deleter), and so the slot.
        assert x.unsafe_buffer_pointer() == batch["vec"].__array_interface__["data"][0]
        del vec, values, splits, ids
        batch.close()
        assert held(d) == 1
        np.testing.assert_array_equal(np.asarray(x[0]), expected_row(int(batch_first_id))["vec"])
        del x
        assert held(d) == 0
