"""ringfeed with JAX: the NumPy views export DLPack, which jax.numpy.from_dlpack imports
without a copy. Skipped only where jax is not installed (scripts/test.sh installs it).

JAX runs in a subprocess: importing it starts threads, and the fork() tests elsewhere in the
suite must not run in a process that has them (a forked child of a multithreaded process can
deadlock)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import EVENTUALLY
from test_client import id_job

if importlib.util.find_spec("jax") is None:
    pytest.skip("jax is not installed", allow_module_level=True)

CHILD = textwrap.dedent('''
    import json, subprocess, sys
    import numpy as np
    import jax
    import jax.numpy as jnp
    import ringfeed
    sys.path.insert(0, sys.argv[4])
    from test_client import expected_row

    job, runtime_dir, ctl = sys.argv[1:4]

    def held():
        out = subprocess.run([ctl, "status", job, "--json"], capture_output=True, text=True, check=True,
                             env={"RINGFEED_RUNTIME_DIR": runtime_dir})
        return json.loads(out.stdout)["ring"]["held"]

    with ringfeed.Client(job, runtime_dir=runtime_dir, timeout=10) as client:
        batch = client.next()
        ids = batch["id"].tolist()
        vec = batch["vec"]
        x = jnp.from_dlpack(vec)
        assert x.shape == (4, 4) and x.dtype == jnp.float32
        values, splits = (jnp.from_dlpack(a) for a in batch["vals"])
        for r, i in enumerate(ids):
            want = expected_row(i)
            np.testing.assert_array_equal(np.asarray(x[r]), want["vec"])
            np.testing.assert_array_equal(np.asarray(values[int(splits[r]):int(splits[r + 1])]), want["vals"])
        # Zero-copy: the ring's columns are 64-byte aligned, which JAX's CPU backend accepts as
        # is; the jax array then holds the NumPy array (DLPack deleter), and so the slot.
        assert x.unsafe_buffer_pointer() == vec.__array_interface__["data"][0]
        # int64 (ids, row_splits): in 32-bit JAX (its default) from_dlpack narrows them to
        # int32, a copy, silently (docs/python.md); with jax_enable_x64, int64 and zero-copy.
        id_col = batch["id"]
        assert jnp.from_dlpack(id_col).dtype == jnp.int32
        jax.config.update("jax_enable_x64", True)
        x64 = jnp.from_dlpack(id_col)
        assert x64.dtype == jnp.int64 and x64.tolist() == ids
        assert x64.unsafe_buffer_pointer() == id_col.__array_interface__["data"][0]
        del x64, id_col
        del vec, values, splits
        batch.close()
        assert held() == 1
        np.testing.assert_array_equal(np.asarray(x[0]), expected_row(ids[0])["vec"])
        del x
        assert held() == 0
    print("ok")
''')


def test_jax_from_dlpack_views_the_ring_and_holds_the_slot(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=8, batch=4))
    tests_dir = str(Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", CHILD, d.job, str(d.runtime_dir), str(d.ctl), tests_dir],
                         capture_output=True, text=True, timeout=6 * EVENTUALLY)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr
