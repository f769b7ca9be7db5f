"""Fixtures for the ringfeed Python tests: a real ringfeedd per test, in its own runtime dir.

The daemon binary comes from $RINGFEED_BUILD_DIR (default: build/ in the repository, as
scripts/test.sh builds it; a relative path is taken from the repository root):
<build>/daemon/ringfeedd and <build>/daemon/ringfeedctl. Missing binaries fail the tests (they
are not skipped). Each daemon is SIGTERMed at the end of its test, SIGKILLed after 5 s; a killed
daemon's /dev/shm segment is removed.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EVENTUALLY = 10.0  # seconds: generous, so a loaded machine never fails a test


def build_dir() -> Path:
    path = Path(os.environ.get("RINGFEED_BUILD_DIR", "build"))
    return path if path.is_absolute() else REPO / path


def tfx_dir() -> Path | None:
    """../shared/data/tfx from the repository root; None (skip) where absent, unless CI=true."""
    path = (REPO / ".." / "shared" / "data" / "tfx").resolve()
    if path.is_dir():
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the real TFRecord files are missing at {path}")
    return None


class Daemon:
    """One ringfeedd serving `job` from `config` (YAML text), runtime dir <tmp>/run."""

    def __init__(self, tmp: Path, job: str, config: str):
        self.job = job
        self.dir = tmp
        self.runtime_dir = tmp / "run"
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = tmp / f"{job}.yaml"
        self.config_path.write_text(config)
        self.log_path = tmp / f"{job}.log"
        self.proc: subprocess.Popen | None = None
        binary = build_dir() / "daemon" / "ringfeedd"
        if not os.access(binary, os.X_OK):
            pytest.fail(f"{binary} not found: build it (cmake --build build --target ringfeedd ringfeedctl) "
                        f"or point RINGFEED_BUILD_DIR at a build directory")
        self.binary = binary
        self.ctl = build_dir() / "daemon" / "ringfeedctl"

    @property
    def env(self) -> dict:
        return {**os.environ, "RINGFEED_RUNTIME_DIR": str(self.runtime_dir)}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, *args: str) -> "Daemon":
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(self.binary), "--config", str(self.config_path), *args],
                                     stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)
        log.close()
        sock_path = str(self.runtime_dir / f"{self.job}.sock")
        deadline = time.monotonic() + EVENTUALLY
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"ringfeedd exited with {self.proc.returncode} at start:\n{self.stderr()}")
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(sock_path)
                return self
            except OSError:
                time.sleep(0.01)
        pytest.fail(f"ringfeedd did not open {sock_path} within {EVENTUALLY} s:\n{self.stderr()}")

    def stderr(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def status(self) -> dict:
        out = subprocess.run([str(self.ctl), "status", self.job, "--json"], env=self.env, capture_output=True,
                             text=True, timeout=EVENTUALLY)
        if out.returncode != 0:
            raise RuntimeError(f"ringfeedctl status {self.job} --json failed: {out.stderr}")
        return json.loads(out.stdout)

    def client(self, **kwargs):
        import ringfeed
        kwargs.setdefault("timeout", EVENTUALLY)
        return ringfeed.Client(self.job, runtime_dir=str(self.runtime_dir), **kwargs)

    def wait(self, timeout: float = EVENTUALLY) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.returncode in (-signal.SIGKILL, -signal.SIGTERM):
            for seg in glob.glob(f"/dev/shm/ringfeed.{self.job}.*"):
                try:
                    os.unlink(seg)
                except OSError:
                    pass


@pytest.fixture
def sigint_after():
    """`with sigint_after(seconds):` sends this process SIGINT after `seconds` (a timer thread;
    cancelled at the end of the block if it has not fired), and SIGINT raises
    KeyboardInterrupt for the test's duration, as in an interactive Python.

    Python installs no SIGINT handler when it starts with SIGINT ignored, as a job started in
    the background (`cmd &`) of a non-interactive shell does: the SIGINT would be dropped and
    the wait it should interrupt would last forever (it did, in a CI run started that way)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextlib.contextmanager
    def after(seconds):
        timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            yield
        finally:
            timer.cancel()  # a wait that returned must not leave the SIGINT to come
            timer.join()

    try:
        yield after
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


@pytest.fixture
def daemon_factory(tmp_path):
    """make(config_body, job=None, args=()) -> a started Daemon; `config_body` is the YAML after
    the `job:` line. Job names are unique per call, so tests never meet each other's daemons."""
    daemons = []

    def make(config_body: str, job: str | None = None, args=(), start=True) -> Daemon:
        job = job or f"py-{uuid.uuid4().hex[:10]}"
        d = Daemon(tmp_path / job, job, f"job: {job}\n{config_body}")
        daemons.append(d)
        return d.start(*args) if start else d

    yield make
    for d in daemons:
        d.stop()


@pytest.fixture
def shim_path() -> Path:
    """The libcuda stand-in built with the C++ tests (tests/cuda_shim): skipped where missing,
    a failure under CI=true."""
    path = build_dir() / "tests" / "cuda_shim" / "libcuda.so.1"
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the libcuda stand-in is missing at {path} (build the C++ tests first)")
        pytest.skip(f"no libcuda stand-in at {path}")
    return path
