#!/usr/bin/env python3
"""python_overhead_bench: what the Python client costs a trainer per batch, beside the C++ client.

Per batch: ``client.next(0)`` on a batch already in the ring, building the NumPy views of all
18 taxi features (``batch[name]`` for each: 11 fixed arrays, 7 varlen ``(values, row_splits)``
pairs; 2 of them bytes features), dropping the views and ``batch.release()``, timed with
``time.perf_counter_ns`` against a full ring. Method as bench/e2e/client_overhead_bench.cc (which
it runs in the same invocation for the C++ figure): a ringfeedd job on the real taxi files
(../shared/data/tfx, endless epochs, ``ring.slots: 256``); each round waits, off the clock, until
``ringfeedctl status`` says every slot is ready, then takes the slots' batches one by one.
Releases let the daemon refill during the round, as with a real trainer.

    build/pyvenv/bin/python bench/python/python_overhead_bench.py \\
        [--build ../build-bench] [--rounds 20] [--batches 1 32 256]

--build: a Release build with daemon/ringfeedd, daemon/ringfeedctl and bench/client_overhead_bench
(bench/e2e/run_e2e_bench.sh's RINGFEED_BENCH_BUILD; built there with
``ninja -C DIR ringfeedd ringfeedctl client_overhead_bench``). Prints a Markdown table and one
JSON line per batch size. Target: median <= 20 us for the taxi schema.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ringfeed

REPO = Path(__file__).resolve().parents[2]
TFX = (REPO / ".." / "shared" / "data" / "tfx").resolve()
# Taxi features: fixed where every record has one value, varlen where some have none
# (tests/golden/README.md).
VARLEN = {"company", "dropoff_census_tract", "dropoff_community_area", "dropoff_latitude",
          "dropoff_longitude", "pickup_census_tract", "trip_seconds"}
FEATURES = {
    "company": "bytes", "dropoff_census_tract": "int64", "dropoff_community_area": "int64",
    "dropoff_latitude": "float32", "dropoff_longitude": "float32", "fare": "float32",
    "payment_type": "bytes", "pickup_census_tract": "int64", "pickup_community_area": "int64",
    "pickup_latitude": "float32", "pickup_longitude": "float32", "tips": "float32",
    "trip_miles": "float32", "trip_seconds": "int64", "trip_start_day": "int64",
    "trip_start_hour": "int64", "trip_start_month": "int64", "trip_start_timestamp": "int64",
}


def config(job: str, batch: int) -> str:
    features = "".join(f"  {n}: {{type: {'varlen' if n in VARLEN else 'fixed'}, dtype: {d}}}\n"
                       for n, d in FEATURES.items())
    return (f"job: {job}\nsource:\n  files: [\"{TFX}/csv_example_gen/Split-train/*.gz\"]\nfeatures:\n{features}"
            f"batch: {{size: {batch}}}\nepochs: 0\npipeline: {{workers: 1, prefetch: 256, memory_budget: 256MiB}}\n"
            "ring: {slots: 256}\nlog_level: warn\n")


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(ns):
    return {"median": quantile(ns, 0.5), "p90": quantile(ns, 0.9), "p99": quantile(ns, 0.99), "max": max(ns)}


class Job:
    def __init__(self, build: Path, work: Path, batch: int):
        self.job = f"py-overhead-b{batch}"
        self.runtime = work / "run"
        self.runtime.mkdir(exist_ok=True)
        self.env = {**os.environ, "RINGFEED_RUNTIME_DIR": str(self.runtime)}
        path = work / f"{self.job}.yaml"
        path.write_text(config(self.job, batch))
        self.ctl = build / "daemon" / "ringfeedctl"
        self.log = open(work / f"{self.job}.log", "wb")
        self.proc = subprocess.Popen([str(build / "daemon" / "ringfeedd"), "--config", str(path)], env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (self.runtime / f"{self.job}.sock").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"ringfeedd for {self.job} did not start; see {work / (self.job + '.log')}")
            time.sleep(0.02)

    def wait_full(self, timeout=60.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run([str(self.ctl), "status", self.job, "--json"], env=self.env, capture_output=True,
                                 text=True)
            if out.returncode == 0:
                ring = json.loads(out.stdout)["ring"]
                if ring["ready"] == ring["slots"]:
                    return ring["slots"]
            if time.monotonic() > deadline:
                sys.exit(f"the ring of {self.job} did not fill: {out.stdout or out.stderr}")
            time.sleep(0.005)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        self.log.close()


def python_overhead(job: Job, rounds: int) -> dict:
    client = ringfeed.Client(job.job, runtime_dir=str(job.runtime))
    names = [f.name for f in client.schema]
    total, nxt, views_ns, release, timeouts = [], [], [], [], 0
    clock = time.perf_counter_ns
    for _ in range(rounds):
        slots = job.wait_full()
        for _ in range(slots):
            t0 = clock()
            try:
                batch = client.next(0)
            except ringfeed.Timeout:
                timeouts += 1
                continue
            t1 = clock()
            views = [batch[name] for name in names]
            t2 = clock()
            del views
            batch.release()
            t3 = clock()
            del batch
            total.append(t3 - t0)
            nxt.append(t1 - t0)
            views_ns.append(t2 - t1)
            release.append(t3 - t2)
    client.close()
    return {"samples": len(total), "rounds": rounds, "features": len(names), "total_ns": summary(total),
            "next_ns": summary(nxt), "views_ns": summary(views_ns), "release_ns": summary(release),
            "timeouts": timeouts}


def cxx_overhead(build: Path, job: Job, rounds: int) -> dict:
    out = subprocess.run([str(build / "bench" / "client_overhead_bench"), "--job", job.job, "--runtime-dir",
                          str(job.runtime), "--rounds", str(rounds)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"client_overhead_bench failed: {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path,
                        default=Path(os.environ.get("RINGFEED_BENCH_BUILD", REPO / ".." / "build-bench")))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    args = parser.parse_args()
    if not TFX.is_dir():
        sys.exit(f"{TFX} not found (the real taxi files)")
    for binary in ("daemon/ringfeedd", "daemon/ringfeedctl", "bench/client_overhead_bench"):
        if not os.access(args.build / binary, os.X_OK):
            sys.exit(f"{args.build / binary} missing: ninja -C {args.build} ringfeedd ringfeedctl client_overhead_bench")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ringfeed-pybench.") as tmp:
        for batch in args.batches:
            work = Path(tmp) / f"b{batch}"
            work.mkdir()
            job = Job(args.build, work, batch)
            try:
                cxx = cxx_overhead(args.build, job, args.rounds)
                py = python_overhead(job, args.rounds)
            finally:
                job.stop()
            result = {"batch": batch, "python": py, "cxx": cxx}
            print(json.dumps(result), flush=True)
            rows.append(result)
    print("\n| rows per batch | Python next + 18 views + release: median | p90 | p99 | next | views | release "
          "| C++ Next + Release median | p90 | ratio (medians) | target median <= 20 us |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        py, cxx = r["python"], r["cxx"]
        med = py["total_ns"]["median"]
        print(f"| {r['batch']} | **{med / 1000:.1f} us** | {py['total_ns']['p90'] / 1000:.1f} | "
              f"{py['total_ns']['p99'] / 1000:.1f} | {py['next_ns']['median'] / 1000:.1f} | "
              f"{py['views_ns']['median'] / 1000:.1f} | {py['release_ns']['median'] / 1000:.1f} | "
              f"{cxx['next_release_ns']['median'] / 1000:.2f} us | {cxx['next_release_ns']['p90'] / 1000:.2f} | "
              f"{med / cxx['next_release_ns']['median']:.1f}x | {'met' if med <= 20000 else '**MISSED**'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
