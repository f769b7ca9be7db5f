"""README.md's recipe for writing TFRecord files without TensorFlow (the `tfrecord` package,
PyPI): the block runs as written, and ringfeed reads back every value it wrote. The package is
an independent writer (its own Example encoding and CRC-32C), so this also checks the reader
against a second implementation."""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest

from conftest import REPO


def readme_recipe() -> str:
    text = (REPO / "README.md").read_text()
    marker = "<!-- python/tests/test_readme_recipe.py runs this block"
    start = text.index(marker)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, "no python block after the marker in README.md"
    return match.group(1)


def readme_job_config() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("<!-- python/tests/test_readme_recipe.py checks this config")
    match = re.compile(r"```yaml\n(.*?)```", re.S).search(text, start)
    assert match is not None, "no yaml block after the marker in README.md"
    return match.group(1)


def test_readme_tfrecord_recipe_round_trips(daemon_factory, tmp_path, monkeypatch):
    try:
        import tfrecord  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the tfrecord package is missing (scripts/test.sh installs it)")
        pytest.skip("pip install tfrecord (scripts/test.sh installs it)")
    monkeypatch.chdir(tmp_path)
    exec(compile(readme_recipe(), "README.md", "exec"), {})
    data = tmp_path / "data" / "part-0.tfrecord"
    assert data.is_file()

    daemon = daemon_factory(
        f'source: {{files: ["{data}"]}}\n'
        "features:\n"
        "  image: {dtype: uint8, decode: raw, shape: [28, 28]}\n"
        "  label: {dtype: int64}\n"
        "  tokens: {type: varlen, dtype: int64}\n"
        "  weight: {dtype: float32}\n"
        "batch: {size: 64}\n"
        "epochs: 1\n")
    rng = np.random.default_rng(0)  # the recipe's draws, in its order
    images = [rng.integers(0, 256, 28 * 28, dtype=np.uint8) for _ in range(1000)]
    seen = 0
    with daemon.client() as client:
        for batch in client:
            rows = len(batch)
            tokens, splits = batch["tokens"]
            for r in range(rows):
                i = seen + r  # one file, not shuffled: file order
                np.testing.assert_array_equal(batch["image"][r].reshape(-1), images[i])
                assert batch["label"][r] == i % 10
                np.testing.assert_array_equal(tokens[splits[r]:splits[r + 1]], np.arange(i % 5))
                assert batch["weight"][r] == np.float32(i / 1000)
            seen += rows
    assert seen == 1000

    # The README's job config (step 2) over the recipe's file: check --strict passes (every
    # feature it names is in the records, their kinds and dtypes fit) and counts them all.
    (tmp_path / "my-train.yaml").write_text(readme_job_config())
    check = subprocess.run([str(daemon.ctl), "check", "--strict", "my-train.yaml"], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1000 records" in check.stdout, check.stdout
