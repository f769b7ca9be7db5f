"""ringfeed used as a hostile or careless user would (issue 5, §1): a released slot is never read,
the daemon's errors arrive as exceptions with its message, the end of the data ends iteration, and
nothing crashes, hangs or returns garbage. Real daemons (conftest.py); child processes where the
misuse would take the test process down."""

from __future__ import annotations

import copy
import gc
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import ringfeed
from ringfeed import _core
from conftest import EVENTUALLY, REPO, build_dir
from test_client import check_batch_values, expected_row, held, id_job


def run_python(code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout)


# ---- use after release / close ---------------------------------------------------------------

def test_every_access_after_release_raises_and_metadata_stays(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, extra="ring: {slots: 3}\n"))
    with d.client() as client:
        batch = client.next()
        batch.release()
        batch.release()  # double release
        batch.close()
        for access in (lambda: batch["id"], lambda: batch["nope"], lambda: batch.strings("tag"),
                       lambda: batch.sources):
            with pytest.raises(ringfeed.ClientError, match="was released"):
                access()
        assert batch.keys() == ["id", "vec", "vals", "tag", "name"] and list(batch) == batch.keys()
        assert "id" in batch and 3 not in batch and len(batch) == 4 and batch.live_views() == {}
        assert "released" in repr(batch)
        assert held(d) == 0
        live = client.next()
        for key in (0, None, b"id", ("id",)):
            with pytest.raises(TypeError):
                live[key]
            assert key not in live
        with pytest.raises(KeyError) as raised:
            live["id\0"]  # the name as repr() shows it, not cut at the NUL
        assert raised.value.args[0] == f"job {d.job} has no feature 'id\\x00'; known features: id, vec, vals, tag, name"
        assert "\ud800" not in live
        with pytest.raises(TypeError):
            live.strings("id")
        del live


def test_views_of_views_buffers_and_dlpack_keep_the_slot(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, extra="ring: {slots: 3}\n"))
    with d.client() as client:
        batch = client.next()
        want = batch["vec"].copy()
        vec = batch["vec"]
        holders = [vec[1:][::-1].reshape(-1)[2:], memoryview(vec), np.asarray(vec), vec.view(np.int32),
                   np.from_dlpack(vec), np.frombuffer(memoryview(vec), np.uint8)]
        del vec
        batch.close()
        assert held(d) == 1
        for h in holders:
            with pytest.raises(ringfeed.ClientError):
                batch["vec"]
            del h
        np.testing.assert_array_equal(np.asarray(holders[1]), want)
        np.testing.assert_array_equal(holders[4], want)
        assert held(d) == 1
        del holders
        assert held(d) == 0


def test_pickle_and_copy(daemon_factory, tmp_path):
    """An array pickles as a copy of its values; a Batch (a hold on shared memory) does not pickle
    or copy, and nothing half-made comes out."""
    d = daemon_factory(id_job(tmp_path, count=40))
    with d.client() as client:
        batch = client.next()
        ids = batch["id"]
        restored = pickle.loads(pickle.dumps(ids))
        np.testing.assert_array_equal(restored, ids)
        assert restored.ctypes.data != ids.ctypes.data  # a copy, not a view of the ring
        np.testing.assert_array_equal(copy.deepcopy(ids), ids)
        for attempt in (lambda: pickle.dumps(batch), lambda: copy.copy(batch), lambda: copy.deepcopy(batch),
                        lambda: pickle.dumps(client)):
            with pytest.raises(TypeError):
                attempt()
        del ids
        batch.release()


def test_uninitialised_batch_object_raises(daemon_factory):
    with pytest.raises(TypeError):
        ringfeed.Batch()
    with pytest.raises(TypeError), pytest.warns(RuntimeWarning, match="uninitialized"):
        ringfeed.Batch.__new__(ringfeed.Batch)["id"]


def test_gc_callback_closing_the_batch_during_strings_reads_no_released_slot(daemon_factory, tmp_path):
    """A garbage collection that runs Python (a gc callback, a __del__) in the middle of
    strings() and closes the batch there: the slot must stay held until strings() is done."""
    # 128 rows: more lists than CPython's list free list holds, so strings() allocates (and
    # collects) for real.
    d = daemon_factory(id_job(tmp_path, count=1000, batch=128, epochs=0, extra="ring: {slots: 2}\n"))
    with d.client() as client:
        batch = client.next()
        ids = batch["id"].tolist()
        armed = []

        def close_and_churn(phase, info):
            if phase != "start" or not armed:
                return
            armed.clear()
            batch.close()
            # Take and drop batches: the daemon refills every slot that is free.
            for _ in range(6):
                client.next(timeout=EVENTUALLY).release()

        threshold = gc.get_threshold()
        gc.callbacks.append(close_and_churn)
        try:
            gc.set_threshold(1)
            armed.append(True)
            tags = batch.strings("tag")
        finally:
            gc.set_threshold(*threshold)
            gc.callbacks.remove(close_and_churn)
        assert not armed, "the gc callback never ran"
        assert tags == [expected_row(i)["tag"] for i in ids]
        assert batch.released and held(d) == 0


# ---- client lifetime, threads ------------------------------------------------------------------

def test_closed_client(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40))
    client = d.client()
    client.close()
    client.close()
    for attempt in (client.next, lambda: next(iter(client)), lambda: [b for b in client]):
        with pytest.raises(ringfeed.ClientError, match="closed"):
            attempt()
    assert "closed" in repr(client) and client.closed and client.batch_size == 4


def test_close_wakes_a_thread_waiting_in_next(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0, extra="ring: {slots: 2}\n"))
    client = d.client(timeout=None)
    held_batches = [client.next(), client.next()]  # next() must wait
    outcome = []

    def wait():
        try:
            outcome.append(client.next())
        except Exception as e:  # noqa: BLE001 - recorded and checked below
            outcome.append(e)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    time.sleep(0.3)
    client.close()
    thread.join(EVENTUALLY)
    assert not thread.is_alive(), "next() kept waiting on a closed client"
    assert isinstance(outcome[0], ringfeed.ClientError) and "closed" in str(outcome[0])
    del held_batches


def test_many_threads_share_one_client(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=400, batch=4), args=("--exit-when-done",))
    with d.client() as client:
        seen, errors = [], []

        def take():
            try:
                for batch in client:
                    seen.extend(check_batch_values(batch))
                    del batch
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=take) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == [] and sorted(seen) == list(range(400))


def test_keyboard_interrupt_leaves_the_client_usable(daemon_factory, tmp_path, sigint_after):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0, extra="ring: {slots: 2}\n"))
    with d.client(timeout=None) as client:
        held_batches = [client.next(), client.next()]
        with sigint_after(0.2), pytest.raises(KeyboardInterrupt):
            client.next()
        assert held(d) == 2
        held_batches.pop().release()
        assert client.next(timeout=EVENTUALLY) is not None
        del held_batches


def test_release_from_another_thread_while_views_are_made(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0, extra="ring: {slots: 3}\n"))
    with d.client() as client:
        batch = client.next()
        want = batch["vec"].copy()
        stop = threading.Event()
        outcomes = {"views": 0, "refused": 0}

        def make_views():
            while not stop.is_set():
                try:
                    vec = batch["vec"]
                except ringfeed.ClientError:
                    return  # released: from now on nothing can be taken
                assert np.array_equal(vec, want)  # a view is never of a released slot
                outcomes["views"] += 1
                del vec

        thread = threading.Thread(target=make_views)
        thread.start()
        deadline = time.monotonic() + EVENTUALLY
        while time.monotonic() < deadline:
            try:
                batch.release()
                break
            except BufferError:
                outcomes["refused"] += 1
                time.sleep(0.001)
        stop.set()
        thread.join(EVENTUALLY)
        assert batch.released and outcomes["views"] > 0 and held(d) == 0


def test_client_dropped_before_its_arrays(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0))
    client = d.client()
    batch = client.next()
    ids, tags = batch["id"], batch["tag"]
    want = ids.copy()
    del client, batch
    gc.collect()
    assert held(d) == 1 and np.array_equal(ids, want)
    assert len(tags[2]) == len(want) + 1
    del ids, tags
    deadline = time.monotonic() + EVENTUALLY
    while d.status()["consumers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert d.status()["consumers"] == [] and held(d) == 0


# ---- timeouts and arguments --------------------------------------------------------------------

@pytest.mark.parametrize("timeout", [1e10, 1e300, float("inf"), None])
def test_huge_timeouts_wait(daemon_factory, tmp_path, timeout):
    """Timeouts past what a deadline can hold wait forever (liveness_timeout: capped)."""
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0, extra="ring: {slots: 2}\n"))
    with d.client(timeout=timeout, liveness_timeout=timeout or 1e300) as client:
        held_batches = [client.next(), client.next()]  # the next batch needs one of them back
        timer = threading.Timer(0.3, held_batches.pop().release)
        timer.start()
        check_batch_values(client.next())
        timer.join()
        held_batches.pop().release()
        check_batch_values(client.next(timeout=timeout))


@pytest.mark.parametrize("bad, error", [(float("nan"), ValueError), (-1, ValueError), (-1e-9, ValueError),
                                        ("soon", TypeError), (True, TypeError), ([1], TypeError), (1j, TypeError)])
def test_bad_timeouts(daemon_factory, tmp_path, bad, error):
    d = daemon_factory(id_job(tmp_path, count=40))
    with d.client() as client:
        with pytest.raises(error):
            client.next(timeout=bad)
        with pytest.raises(error):
            d.client(timeout=bad)
        with pytest.raises((ValueError, TypeError)):
            d.client(liveness_timeout=bad)
        assert client.next(timeout=EVENTUALLY) is not None
    for not_positive in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="liveness_timeout must be > 0 seconds"):
            ringfeed.Client(d.job, runtime_dir=str(d.runtime_dir), liveness_timeout=not_positive)


@pytest.mark.parametrize("rank", [-1, 2**31, 2**64, 1.0, "0", True])
def test_bad_ranks(daemon_factory, tmp_path, rank):
    d = daemon_factory(id_job(tmp_path, count=40, extra="consumers: {mode: ranks, count: 2}\n"))
    with pytest.raises((ValueError, TypeError), match="rank"):
        d.client(rank=rank)


def test_rank_out_of_range_or_wrong_mode(daemon_factory, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "s").mkdir()
    ranks = daemon_factory(id_job(tmp_path / "r", count=40, extra="consumers: {mode: ranks, count: 2}\n"))
    with pytest.raises(ringfeed.ClientError, match="rank"):
        ranks.client(rank=2)
    with pytest.raises(ringfeed.ClientError, match="rank"):
        ranks.client()  # ranks mode needs a rank
    shared = daemon_factory(id_job(tmp_path / "s", count=40))
    with pytest.raises(ringfeed.ClientError, match="consumers.mode: shared; attach without a rank"):
        shared.client(rank=0)


def test_a_timeout_names_the_rank_without_a_consumer(daemon_factory, tmp_path):
    # Rank 1 never attaches: once rank 1's batches fill the prefetch depth the daemon stops
    # producing, and rank 0's timeout says why rather than "produced nothing new".
    d = daemon_factory(id_job(tmp_path, count=400, batch=4, extra="consumers: {mode: ranks, count: 2}\n"))
    with d.client(rank=0) as client:
        got = 0
        with pytest.raises(ringfeed.Timeout, match=r"within 1 s: rank 1 of 2 has no consumer attached; ranks mode "
                                                   r"gives batch k of an epoch to rank k mod 2"):
            while True:
                batch = client.next(timeout=1)
                assert batch is not None
                batch.release()
                got += 1
                assert got < 50, "the daemon did not stop at its prefetch depth"
        assert got > 0


def test_a_wait_without_timeout_held_up_by_a_rank_never_attached_warns_after_10s(daemon_factory, tmp_path):
    # timeout=None would wait forever for rank 1's trainer: after 10 s the wait says why, and a
    # "error" warning filter ends it there.
    d = daemon_factory(id_job(tmp_path, count=400, batch=4, extra="consumers: {mode: ranks, count: 2}\n"))
    with d.client(rank=0) as client:
        for _ in range(3):
            client.next(timeout=EVENTUALLY).release()
        started = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(RuntimeWarning, match=r"waiting 10 s \(timeout=None\) for a batch of job .*: rank 1 "
                                                     r"of 2 has no consumer attached; ranks mode gives batch k"):
                while True:
                    batch = client.next(timeout=None)
                    assert batch is not None
                    batch.release()
        assert 10 <= time.monotonic() - started < 10 + EVENTUALLY


def test_a_timeout_names_the_rank_whose_trainer_does_not_take_its_batches(daemon_factory, tmp_path):
    # Rank 1 attaches but never takes a batch (a stopped or stuck trainer): same stall, and
    # rank 0's timeout names rank 1's untaken batches.
    d = daemon_factory(id_job(tmp_path, count=400, batch=4, extra="consumers: {mode: ranks, count: 2}\n"))
    with d.client(rank=1), d.client(rank=0) as client:
        got = 0
        with pytest.raises(ringfeed.Timeout, match=r"within 1 s: rank 1 has \d+ ready batch(es)? that its trainer has "
                                                   r"not taken; ranks mode gives batch k of an epoch to rank k mod 2"):
            while True:
                batch = client.next(timeout=1)
                assert batch is not None
                batch.release()
                got += 1
                assert got < 50, "the daemon did not stop at its prefetch depth"
        assert got > 0


@pytest.mark.parametrize("job", ["", "a/b", "../../etc/passwd", "x" * 300, "a\0b", "日本", "-", " "])
def test_odd_job_names(tmp_path, job):
    with pytest.raises((ringfeed.ClientError, ValueError)):
        ringfeed.Client(job, runtime_dir=str(tmp_path), liveness_timeout=1)


def test_bad_runtime_dirs(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    for runtime_dir in (tmp_path / "missing", a_file, "x" * 5000):
        with pytest.raises(ringfeed.ClientError, match="job"):
            ringfeed.Client("job", runtime_dir=str(runtime_dir), liveness_timeout=1)
    with pytest.raises(ValueError):
        ringfeed.Client("job", runtime_dir="a\0b")


# ---- the daemon misbehaves -----------------------------------------------------------------------

def test_daemon_stopped_with_sigstop_is_reported_not_a_hang(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0, extra="ring: {slots: 2}\n"))
    with d.client(timeout=None, liveness_timeout=0.5) as client:
        held_batches = [client.next(), client.next()]
        os.kill(d.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(ringfeed.ClientError, match="froze|frozen|heartbeat"):
                client.next()
            assert time.monotonic() - start < EVENTUALLY
        finally:
            os.kill(d.pid, signal.SIGCONT)
        del held_batches


def test_daemon_restarted_under_a_live_client(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0))
    client = d.client()
    batch = client.next()
    ids = batch["id"].tolist()
    d.stop()
    d.start()
    with pytest.raises(ringfeed.ClientError, match=str(d.job)):
        for _ in range(1000):  # batches published before the stop come first
            client.next()
    assert batch["id"].tolist() == ids  # the old mapping stays readable
    del batch
    client.close()
    with d.client() as again:
        assert again.daemon_pid == d.pid
        check_batch_values(again.next())


def test_attach_to_a_stopped_daemon_or_a_stale_socket_is_an_error(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40))
    os.kill(d.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(ringfeed.ClientError, match="did not answer the hello"):
            d.client(liveness_timeout=0.2)  # the hello waits at least 1 s
        assert time.monotonic() - start < EVENTUALLY
    finally:
        os.kill(d.pid, signal.SIGCONT)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "gone.sock").write_text("")  # a socket's name without a listener
    with pytest.raises(ringfeed.ClientError, match="gone"):
        ringfeed.Client("gone", runtime_dir=str(stale))


def test_attach_timeout_waits_for_a_daemon_that_starts_later(daemon_factory, tmp_path, sigint_after):
    d = daemon_factory(id_job(tmp_path, count=40), start=False)
    # Nothing listens: one try fails at once and says how to wait; a wait says how long it tried.
    with pytest.raises(ringfeed.ClientError, match="To wait for a daemon that is starting, set attach_timeout"):
        d.client()
    start = time.monotonic()
    with pytest.raises(ringfeed.ClientError, match=r"\(tried for 0\.3 s: attach_timeout\)"):
        d.client(attach_timeout=0.3)
    assert 0.29 <= time.monotonic() - start < EVENTUALLY
    for bad, error in ((-1, ValueError), (float("nan"), ValueError), ("5", TypeError)):
        with pytest.raises(error, match="attach_timeout"):
            d.client(attach_timeout=bad)
    # Ctrl-C ends a long wait promptly.
    start = time.monotonic()
    with sigint_after(0.3), pytest.raises(KeyboardInterrupt):
        d.client(attach_timeout=60)
    assert time.monotonic() - start < 5
    # The daemon starts 0.5 s after the trainer began to wait: attached, batches flow.
    starter = threading.Timer(0.5, d.start)
    starter.start()
    try:
        start = time.monotonic()
        with d.client(attach_timeout=EVENTUALLY) as client:
            assert time.monotonic() - start >= 0.45
            check_batch_values(client.next())
    finally:
        starter.join()


def test_segment_unlinked_under_a_live_client_keeps_working(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0))
    with d.client() as client:
        check_batch_values(client.next())
        os.unlink("/dev/shm/" + client._core.segment_name.lstrip("/"))
        for _ in range(20):
            check_batch_values(client.next())


@pytest.mark.xfail(strict=True, reason="C++ client/shm: the mapping of a truncated segment raises SIGBUS (docs/python.md, Known limits)")
def test_segment_truncated_under_a_live_client(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0))
    code = """
        import os, sys, ringfeed
        client = ringfeed.Client(sys.argv[1], runtime_dir=sys.argv[2], timeout=5, liveness_timeout=1)
        client.next().release()
        os.truncate("/dev/shm/" + client._core.segment_name.lstrip("/"), 0)
        try:
            for _ in range(100):
                client.next().release()
        except ringfeed.ClientError as e:
            print("error:", e)
    """
    out = run_python(code, d.job, str(d.runtime_dir))
    assert out.returncode == 0 and "error:" in out.stdout, out.stderr


# ---- processes -----------------------------------------------------------------------------------

def _in_child(body) -> int:
    """Runs body() in a forked child; its exit status (0: passed, 1: assertion failed)."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            body()
            code = 0
        except AssertionError:
            code = 1
        except BaseException:  # noqa: BLE001
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_fork_child_cannot_use_or_release_the_parents_batches(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=400, batch=4, epochs=0, extra="ring: {slots: 3}\n"))
    with d.client() as client:
        batch = client.next()
        ids = batch["id"].tolist()

        def child():
            for attempt in (client.next, lambda: batch["id"], lambda: batch.strings("tag"), batch.release,
                            lambda: [b for b in client]):
                try:
                    attempt()
                except ringfeed.ClientError as e:
                    assert "fork" in str(e), e
                else:
                    raise AssertionError("a forked child used its parent's client or batch")
            batch.close()  # the child's last hold: dropping it must not hand the parent's slot back
            gc.collect()

        assert _in_child(child) == 0
        assert held(d) == 1
        assert batch["id"].tolist() == ids

        def attach_anew():
            with d.client() as own:
                check_batch_values(own.next())

        assert _in_child(attach_anew) == 0
        batch.release()
        assert held(d) == 0
        check_batch_values(client.next())


def test_exec_with_a_live_client_lets_the_daemon_see_it_leave(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0))
    code = """
        import os, sys, ringfeed
        client = ringfeed.Client(sys.argv[1], runtime_dir=sys.argv[2], timeout=5)
        batch = client.next()
        print(client.consumer_id, flush=True)
        os.execv("/bin/sleep", ["sleep", "20"])
    """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), d.job, str(d.runtime_dir)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert int(proc.stdout.readline()) > 0  # attached, holding a batch; now it execs
        deadline = time.monotonic() + EVENTUALLY
        while d.status()["consumers"] and time.monotonic() < deadline:
            time.sleep(0.05)
        status = d.status()
        assert proc.poll() is None  # `sleep` runs on in the process, without the connection
        assert status["consumers"] == [] and status["ring"]["held"] == 0
    finally:
        proc.kill()
        proc.wait()


def test_interpreter_exit_with_live_batches_and_views(daemon_factory, tmp_path):
    d = daemon_factory(id_job(tmp_path, count=40, epochs=0, extra="ring: {slots: 4}\n"))
    code = """
        import sys, ringfeed
        client = ringfeed.Client(sys.argv[1], runtime_dir=sys.argv[2], timeout=5)
        batches = [client.next() for _ in range(2)]
        views = [client.next()["vec"], batches[0]["vals"]]
        closed = client.next()
        closed.close()
        del client
        cycle = [batches]
        cycle.append(cycle)
        print("ok")
    """
    out = run_python(code, d.job, str(d.runtime_dir))
    assert out.returncode == 0 and out.stdout == "ok\n" and out.stderr == "", out.stderr
    deadline = time.monotonic() + EVENTUALLY
    while held(d) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held(d) == 0


# ---- the CUDA binding ----------------------------------------------------------------------------

def test_cuda_upload_bad_destinations(daemon_factory, tmp_path, shim_path):
    d = daemon_factory(id_job(tmp_path, count=40, extra="ring: {slots: 3}\n"))
    with d.client() as client:
        uploader = _core._CudaUploader(client._core, 0, str(shim_path))
        buf = np.zeros(64, np.int64)
        good = ("id", "values", buf.ctypes.data, buf.nbytes)
        batch = client.next()
        for dst, error in ([[("id", "values", buf.ctypes.data)], ValueError],
                           [[("id", "values", buf.ctypes.data, buf.nbytes, 0)], ValueError],
                           [[["id", "values", buf.ctypes.data, buf.nbytes]], TypeError],
                           [["id"], TypeError],
                           [[None], TypeError],
                           [[("id", "values", buf.ctypes.data, -1)], (TypeError, ValueError)],
                           [[("id", "values", buf.ctypes.data, 2**64)], (TypeError, ValueError)],
                           [[("id", "values", float(buf.ctypes.data), buf.nbytes)], TypeError],
                           [[("id", "values", "0x1000", buf.nbytes)], TypeError],
                           [[("id", "values", -4096, buf.nbytes)], (TypeError, ValueError)],
                           [[(b"id", "values", buf.ctypes.data, buf.nbytes)], TypeError],
                           [[("id", "nope", buf.ctypes.data, buf.nbytes)], ValueError],
                           [[("nope", "values", buf.ctypes.data, buf.nbytes)], ringfeed.ClientError],
                           [[("id", "row_splits", buf.ctypes.data, buf.nbytes)], ringfeed.ClientError],
                           [[("id", "values", buf.ctypes.data, 1)], ringfeed.ClientError]):
            with pytest.raises(error):
                uploader.upload(batch, 1, dst)
            assert not batch.released and uploader.pending == 0
        for stream in (-1, 2**64, 1.5, None):
            with pytest.raises(TypeError):
                uploader.upload(batch, stream, [good])
        ids = batch["id"].copy()
        assert uploader.upload(batch, 1, [good]) == ids.nbytes
        uploader.synchronize()
        np.testing.assert_array_equal(buf[:len(ids)], ids)
        with pytest.raises(ringfeed.ClientError, match="released"):
            uploader.upload(batch, 1, [good])  # the uploaded batch is closed
        released = client.next()
        released.release()
        with pytest.raises(ringfeed.ClientError, match="released"):
            uploader.upload(released, 1, [good])
        for bad in (None, 1, client):
            with pytest.raises(TypeError):
                uploader.upload(bad, 1, [good])


def test_cuda_uploader_rejects_another_clients_batch_and_outlives_its_client(daemon_factory, tmp_path, shim_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    d = daemon_factory(id_job(tmp_path / "a", count=40))
    other = daemon_factory(id_job(tmp_path / "b", count=40))
    client = d.client()
    uploader = _core._CudaUploader(client._core, 0, str(shim_path))
    buf = np.zeros(64, np.int64)
    good = [("id", "values", buf.ctypes.data, buf.nbytes)]
    with other.client() as stranger:
        batch = stranger.next()
        with pytest.raises(ringfeed.ClientError, match="another Client"):
            uploader.upload(batch, 1, good)
        assert not batch.released
        del batch
    batch = client.next()
    ids = batch["id"].copy()
    client.close()  # the uploader keeps the mapping it registered
    assert uploader.upload(batch, 1, good) == ids.nbytes
    assert uploader.synchronize() == 1
    np.testing.assert_array_equal(buf[:len(ids)], ids)
    with pytest.raises(ringfeed.ClientError, match="closed"):
        _core._CudaUploader(client._core, 0, str(shim_path))
    del uploader
    assert held(d) == 0


# ---- ringfeed.torch --------------------------------------------------------------------------------

def test_torch_tensors_after_release_and_bad_iterables(daemon_factory, tmp_path):
    torch = pytest.importorskip("torch")
    from ringfeed.torch import RingfeedIterable

    d = daemon_factory(id_job(tmp_path, count=400, epochs=0, extra="ring: {slots: 3}\n"))
    with d.client() as client:
        batch = client.next()
        want = batch["vec"].copy()
        tensor = torch.from_dlpack(batch["vec"])
        view = tensor[1:].t()
        batch.close()
        del tensor
        assert held(d) == 1 and np.array_equal(view.t().numpy(), want[1:])
        del view
        assert held(d) == 0
    with pytest.raises(KeyError, match="nope"):
        next(iter(RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), features=["nope"], timeout=10)))
    with pytest.raises(ringfeed.ClientError, match="no-such-job"):
        next(iter(RingfeedIterable("no-such-job", runtime_dir=str(d.runtime_dir))))
    if not torch.cuda.is_available():
        with pytest.raises(ringfeed.ClientError, match="PyTorch sees no CUDA device"):
            next(iter(RingfeedIterable(d.job, device="cuda", runtime_dir=str(d.runtime_dir), timeout=10)))
        assert held(d) == 0
    # Leaving an iteration early (break, an exception) detaches and frees every slot.
    dataset = RingfeedIterable(d.job, runtime_dir=str(d.runtime_dir), timeout=10)
    for k, out in enumerate(dataset):
        if k == 3:
            break
    del out
    assert dataset.client.closed and held(d) == 0


def test_ringfeed_torch_without_torch_says_how_to_install_it():
    # sys.modules["torch"] = None makes `import torch` fail as it does where torch is not installed.
    result = run_python("""
        import sys
        sys.modules["torch"] = None
        import ringfeed
        try:
            import ringfeed.torch
        except ImportError as e:
            print(e)
    """)
    assert result.returncode == 0, result.stderr
    assert "ringfeed.torch needs PyTorch: pip install torch (the CPU-only wheel: pip install torch --index-url " \
        "https://download.pytorch.org/whl/cpu)" in result.stdout


def test_ringfeed_torch_with_a_broken_torch_shows_torchs_own_error(tmp_path):
    # torch is installed but cannot load (a missing CUDA library): its error, not "install torch".
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        'raise ImportError("libcudart.so.12: cannot open shared object file")\n')
    result = run_python("""
        import sys
        sys.path.insert(0, sys.argv[1])
        try:
            import ringfeed.torch
        except ImportError as e:
            print(e)
    """, str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "libcudart.so.12: cannot open shared object file" in result.stdout
    assert "needs PyTorch" not in result.stdout


def test_import_from_the_source_folder_says_where_to_run():
    """Python started in python/ finds the source package, which has no compiled _core."""
    r = subprocess.run([sys.executable, "-c", "import ringfeed"], cwd=REPO / "python", capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.rstrip().splitlines()[-1] == (
        f"ModuleNotFoundError: ringfeed was imported from its source folder {REPO / 'python' / 'ringfeed'}, which "
        f"has no compiled _core: run Python outside the repository's python/ folder, where the package that `pip "
        f"install ./python` installed is found")
