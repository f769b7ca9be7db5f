#!/usr/bin/env python3
"""autotune_bench: ringfeedd's autotuner against a grid of fixed settings and tf.data (issue 4, §4).

For each scenario (local files in the page cache; the same files through slowfs with 2 ms and
20 ms per read), runs on the same cores, one after the other:
  - ringfeedd with every knob `auto` (twice: first and last of the scenario, so a busy spell on
    the shared machine shows as a difference between the two), consumed by consume_bench;
  - ringfeedd with fixed readers x workers x prefetch (the grid), `read_ahead: auto` and
    `reads_per_file: auto` (tuned as for autotune: the read-ahead from the budget, deeper and
    queued reads where reads are slow), which keeps the autotuner's status (runnable and
    blocked-I/O threads, measured the same way) available;
  - tf.data (tensorflow-cpu from the venv) on the same files: AUTOTUNE (interleave + batch +
    map(parse_example), every knob AUTOTUNE), num_parallel_reads=16 (TFRecordDataset(files,
    num_parallel_reads=16) + batch + map(parse_example, AUTOTUNE)), and the article's pipeline
    (interleave + map(parse_single_example) + batch) with num_parallel_calls=2 fixed; all with
    TFRecordDataset(buffer_size=1 MiB), one read per MiB as ringfeed reads;
  - ringfeedd with every knob `auto` once more, its consumer paced to the examples/s that tf.data
    AUTOTUNE just gave on the same mount (consume_bench --rate): memory at equal throughput;
  - confirmation (--confirm rounds, default 3): autotune and the grid's two best fixed settings
    again, interleaved; the ">= 90% of the best fixed" target is also judged on the medians of
    these runs alone (a single run moves by 20-30% on the shared machine, and the best of the
    grid's 20 single runs is biased upwards).
Every run also records the machine's steal time (/proc/stat). Every job runs `epochs: 0` and is stopped --seconds after its first batch. From the examples
taken per 100 ms it computes the steady throughput (the last --steady seconds) and the time to
reach 90% of it (the end of the first 0.5 s window at that rate); from ringfeedd's status
(sampled every 0.5 s by consume_bench) the runnable and blocked-I/O threads and the knobs; from
/proc the threads (tasks) and memory. Writes everything to one JSON file and prints markdown
tables and the issue's targets (met / missed).

  bench/autotune/autotune_bench.py --build ../build-bench        # run everything (~30 min)
  bench/autotune/autotune_bench.py --json RESULTS.json           # tables only

Normally started by bench/autotune/run_autotune_bench.sh, which builds and makes the data.
Standard library only (python3); tf.data runs in the venv's python.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_SECONDS = 0.1
WINDOW_BINS = 5  # 0.5 s windows for "time to reach"

SCENARIOS = {  # name: (slowfs options, or None for local files; title)
    "local": (None, "local files (page cache)"),
    "slow2": (["--latency-ms=2"], "slowfs, 2 ms per read"),
    "slow20": (["--latency-ms=20"], "slowfs, 20 ms per read"),
    # Not in the default run: network storage's stragglers (a p99 of 200 ms), for --deterministic.
    "slow20tail": (["--latency-ms=20", "--tail-latency-ms=180", "--tail-fraction=0.01"],
                   "slowfs, 20 ms per read, 1% of reads 200 ms"),
    # Not in the default run: a saturated link (reads late by the queue ahead of them, not
    # stragglers: hedged reads do not win there).
    "slow2cap100": (["--latency-ms=2", "--bandwidth-mbps=100"], "slowfs, 2 ms per read, 100 MB/s"),
}
TFDATA = {  # contender: (pipeline, extra tfdata_bench.py arguments, title)
    "tfdata_autotune": ("tuned", [], "tf.data AUTOTUNE"),
    "tfdata_reads16": ("tuned", ["--num-parallel-reads", "16"], "tf.data num_parallel_reads=16"),
    "tfdata_article_npc2": ("article", ["--num-parallel-calls", "2"], "tf.data article, num_parallel_calls=2"),
}
PACED = "paced_autotune"  # autotune, consumer paced to tf.data AUTOTUNE's rate in the same scenario


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_times():
    """The machine's CPU times (/proc/stat "cpu": user nice system idle iowait irq softirq steal)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def steal_text(rec):
    return f"{100 * rec['steal_fraction']:.0f}%" if "steal_fraction" in rec else "n/a"


def steal_fraction(before, after):
    """Share of the machine's CPU time the hypervisor gave to others between two cpu_times()."""
    total = sum(after) - sum(before)
    return (after[7] - before[7]) / total if total > 0 else 0.0


# ---------------------------------------------------------------------------------------------
# Measuring


def rates(bins, window=WINDOW_BINS):
    """(end time, examples/s) of each sliding window of `window` bins."""
    out = []
    for i in range(window, len(bins) + 1):
        out.append((i * BIN_SECONDS, sum(bins[i - window:i]) / (window * BIN_SECONDS)))
    return out


def steady_rate(bins, run_seconds, steady_seconds):
    """Examples/s over the last `steady_seconds` of a run of `run_seconds` (whole bins)."""
    end = min(len(bins), int(round(run_seconds / BIN_SECONDS)))
    start = max(0, end - int(round(steady_seconds / BIN_SECONDS)))
    if end <= start:
        return None
    return sum(bins[start:end]) / ((end - start) * BIN_SECONDS)


def time_to(bins, target):
    """The end of the first 0.5 s window whose rate reaches `target`; None if none does."""
    if not target:
        return None
    for t, r in rates(bins):
        if r >= target:
            return round(t, 2)
    return None


def ringfeed_metrics(result, timeline, steady_seconds):
    bins = timeline["examples_per_bin"]
    run = result["seconds"]
    steady = steady_rate(bins, run, steady_seconds)
    samples = [s for s in timeline["samples"] if "status_error" not in s]
    in_steady = [s for s in samples if s["t"] >= run - steady_seconds] or samples[-1:]

    def values(ss, path):
        out = []
        for s in ss:
            v = s
            for k in path:
                v = v.get(k) if isinstance(v, dict) else None
            if v is not None:
                out.append(v)
        return out

    def mx(ss, path):
        v = values(ss, path)
        return max(v) if v else None

    final = timeline.get("final_status") or {}
    autotune = final.get("autotune") or {}
    readers_seen = values(samples, ("pipeline", "readers")) + [c["to"] for c in autotune.get("changes", [])
                                                                  if c["knob"] == "readers"]
    rss = result["daemon_rss_anon_peak_bytes"]
    seg = result["segment_bytes"]
    return {
        "steady_examples_per_s": steady,
        "t90_seconds": time_to(bins, 0.9 * steady if steady else None),
        "run_seconds": run,
        "examples": result["examples"],
        "runnable_threads_max": mx(samples, ("autotune", "runnable_threads")),
        "cpu_cores_max": round(mx(samples, ("autotune", "measured", "cpu_cores")) or 0, 2) or None,
        "runnable_threads_steady": mx(in_steady, ("autotune", "runnable_threads")),
        "cpu_budget_cores": (autotune.get("limits") or {}).get("cpu_budget_cores"),
        "cpu_cores_steady": mx(in_steady, ("autotune", "measured", "cpu_cores")),
        "blocked_io_threads_max": mx(samples, ("autotune", "blocked_io_threads")),
        "blocked_io_threads_steady": mx(in_steady, ("autotune", "blocked_io_threads")),
        "tasks_max": mx(samples, ("tasks",)),
        "tasks_steady": mx(in_steady, ("tasks",)),
        "readers_max": max(readers_seen) if readers_seen else None,
        "knobs_final": final.get("pipeline"),
        "rss_anon_peak_bytes": rss,
        "segment_bytes": seg,
        "private_plus_segment_peak_bytes": rss + seg,
        "budget_bytes": result.get("budget_bytes"),
        "daemon_cores": result["daemon_cpu_seconds"] / result["seconds_from_attach"]
        if result.get("seconds_from_attach") else None,
        "changes": autotune.get("changes", []),
    }


def tfdata_metrics(result, timeline, steady_seconds):
    bins = timeline["examples_per_bin"]
    run = result["seconds"]
    steady = steady_rate(bins, run, steady_seconds)
    samples = [s for s in timeline["samples"] if s["t"] >= 0]
    return {
        "steady_examples_per_s": steady,
        "t90_seconds": time_to(bins, 0.9 * steady if steady else None),
        "run_seconds": run,
        "examples": result["examples"],
        "tasks_max": result.get("tasks_max"),
        "tasks_steady": max((s["tasks"] for s in samples if s["t"] >= run - steady_seconds), default=None),
        "rss_peak_increase_bytes": result.get("rss_peak_increase_bytes"),
        "rss_anon_peak_increase_bytes": result.get("rss_anon_peak_increase_bytes"),
        "rss_baseline_bytes": result.get("rss_baseline_bytes"),
        "first_batch_seconds": result.get("first_batch_seconds"),
    }


# ---------------------------------------------------------------------------------------------
# Running


class SlowMount:
    """slowfs SOURCE at a fresh directory, in the foreground as a child (bench/slowfs/README.md)."""

    def __init__(self, binary, source, options):
        self.dir = tempfile.mkdtemp(prefix="slowfs-autotune-")
        self.proc = subprocess.Popen([binary, source, self.dir, "--foreground"] + options,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(1000):
            if os.path.exists(os.path.join(self.dir, ".slowfs_stats")):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"slowfs could not mount {source} at {self.dir}: {self.proc.stderr.read()}")
            time.sleep(0.01)
        raise RuntimeError(f"slowfs did not mount {self.dir} within 10 s")

    def reset(self):
        os.kill(self.proc.pid, signal.SIGUSR1)
        time.sleep(0.05)

    def stats(self):
        with open(os.path.join(self.dir, ".slowfs_stats")) as f:
            return json.load(f)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # slowfs detaches the mount and exits
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                subprocess.run(["fusermount3", "-u", "-z", self.dir], check=False)
                self.proc.kill()
                self.proc.wait()
        try:
            os.rmdir(self.dir)
        except OSError:
            pass


class Bench:
    def __init__(self, args):
        self.a = args
        self.work = tempfile.mkdtemp(prefix="ringfeed-autotune-")
        self.runtime = os.path.join(self.work, "run")
        os.makedirs(self.runtime)
        self.pin = (["nice", "-n", str(args.nice)] if args.nice else []) + ["taskset", "-c", args.cpus]
        self.features = []
        for line in open(os.path.join(args.data, "taxi.schema")):
            if line.strip():
                name, kind, dtype = line.split()
                self.features.append(f"  {name}: {{dtype: {dtype}}}" if kind == "fixed"
                                     else f"  {name}: {{type: varlen, dtype: {dtype}}}")

    def warm(self, source):
        # Hard links share their pages: reading each inode once keeps the whole set cached.
        seen = set()
        for p in sorted(glob.glob(os.path.join(source, "*.tfrecord"))):
            ino = os.stat(p).st_ino
            if ino not in seen:
                seen.add(ino)
                with open(p, "rb") as f:
                    while f.read(1 << 20):
                        pass

    def write_config(self, job, files_glob, knobs):
        pipeline = ", ".join(f"{k}: {v}" for k, v in {**self.a.pipeline, **knobs}.items())
        path = os.path.join(self.work, job + ".yaml")
        with open(path, "w") as f:
            f.write(f"job: {job}\n")
            f.write(f'source: {{files: ["{files_glob}"], compression: {self.a.compression}}}\n')
            f.write("features:\n" + "\n".join(self.features) + "\n")
            f.write(f"batch: {{size: {self.a.batch}}}\nepochs: 0\ndeterministic: {self.a.deterministic}\n")
            f.write(f"pipeline: {{{pipeline}{', ' if pipeline else ''}memory_budget: {self.a.budget}}}\n")
        return path

    def run_ringfeed(self, scenario, name, files_glob, knobs, rate=0):
        job = f"at-{scenario}-{name}".replace("_", "-")
        config = self.write_config(job, files_glob, knobs)
        timeline_path = os.path.join(self.work, job + ".timeline.json")
        daemon_log = os.path.join(self.work, job + ".log")
        with open(daemon_log, "w") as logf:
            daemon = subprocess.Popen(self.pin + [os.path.join(self.a.build, "daemon/ringfeedd"), "--config", config,
                                                  "--runtime-dir", self.runtime, "--log-level", "debug"],
                                      stdout=logf, stderr=subprocess.STDOUT)
        try:
            out = subprocess.run(self.pin + [os.path.join(self.a.build, "bench/consume_bench"), "--job", job,
                                             "--runtime-dir", self.runtime, "--seconds", str(self.a.seconds),
                                             "--timeline", timeline_path, "--rate", str(rate)],
                                 capture_output=True, text=True, timeout=self.a.seconds + 120)
        finally:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        lines = open(daemon_log).read().splitlines()
        if out.returncode != 0:
            raise RuntimeError(f"consume_bench failed: {out.stderr.strip()[-500:]}; daemon: {' | '.join(lines[-3:])}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        timeline = json.load(open(timeline_path))
        # The decisions with their reasons, and the tuner's per-interval view (kept for the
        # autotuned runs only: the fixed ones have nothing to decide).
        decisions = [l for l in lines if "autotune:" in l]
        if knobs:
            decisions = [l for l in decisions if " -> " in l]
        return result, timeline, decisions

    def run_tfdata(self, name, files_glob):
        pipeline, extra, _ = TFDATA[name]
        timeline_path = os.path.join(self.work, name + ".timeline.json")
        cmd = self.pin + [self.a.python, os.path.join(REPO, "bench/e2e/tfdata_bench.py"), "--files", files_glob,
                          "--schema", os.path.join(self.a.data, "taxi.schema"), "--pipeline", pipeline,
                          "--batch", str(self.a.batch), "--epochs", "0", "--seconds", str(self.a.seconds),
                          "--timeline", timeline_path, "--buffer-size", str(1 << 20),
                          "--deterministic", self.a.deterministic] + extra
        if self.a.compression in ("gzip", "zlib"):
            cmd += ["--compression", self.a.compression.upper()]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=self.a.seconds + 300,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        if out.returncode != 0:
            raise RuntimeError(f"tfdata_bench failed: {out.stderr.strip()[-800:]}")
        return json.loads(out.stdout.strip().splitlines()[-1]), json.load(open(timeline_path))

    def contenders(self):
        grid = [(r, w, p) for r in self.a.readers for w in self.a.workers for p in self.a.prefetch]
        out = [("autotune", {})]
        out += [(f"fixed_r{r}_w{w}_p{p}", {"readers": r, "workers": w, "prefetch": p}) for r, w, p in grid]
        if self.a.reads_per_file:  # the same grid with reads_per_file fixed too (e.g. GZIP files, where auto is 1)
            out += [(f"fixed_r{r}_w{w}_p{p}_q{self.a.reads_per_file}",
                     {"readers": r, "workers": w, "prefetch": p, "reads_per_file": self.a.reads_per_file})
                    for r, w, p in grid]
        if self.a.python and not self.a.no_tfdata:
            out += [(n, None) for n in TFDATA]
        if self.a.autotune_runs >= 2:
            out.append(("autotune_2", {}))
        return out

    def run_one(self, scenario, name, knobs, files_glob, mount, source, rate=0):
        """One contender's run (knobs None: tf.data; rate > 0: ringfeed's consumer paced to that
        many examples/s), as a result record."""
        self.warm(source)
        if mount:
            mount.reset()
        rec = {"scenario": scenario, "contender": name, "load_start": loadavg(),
               "started": time.strftime("%H:%M:%S")}
        times_start = cpu_times()
        try:
            if knobs is None:
                result, timeline = self.run_tfdata(name, files_glob)
                rec.update(kind="tfdata", result=result, metrics=tfdata_metrics(result, timeline, self.a.steady))
            else:
                result, timeline, decisions = self.run_ringfeed(scenario, name, files_glob, knobs, rate)
                rec.update(kind="ringfeed", knobs=knobs, consumer_rate=rate, result=result, decisions=decisions,
                           metrics=ringfeed_metrics(result, timeline, self.a.steady))
                timeline.pop("final_status", None)
            rec["timeline"] = timeline
            if mount:
                rec["slowfs"] = mount.stats()
            # A VM's steal time: CPU the run was due and did not get (noisy neighbours).
            rec["steal_fraction"] = steal_fraction(times_start, cpu_times())
            m = rec["metrics"]
            log(f"  {name}: {m['steady_examples_per_s'] or 0:,.0f} examples/s steady, t90 {m['t90_seconds']} s"
                + (f", readers max {m['readers_max']}" if "readers_max" in m else "")
                + (f", reads in flight max {rec['slowfs']['in_flight_max']}" if mount else "")
                + f" (load {rec['load_start']}, steal {100 * rec['steal_fraction']:.0f}%)")
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
            rec["error"] = str(e)
            log(f"  {name}: FAILED: {e}")
        return rec

    def run(self):
        source = os.path.join(self.a.data, self.a.set)
        runs = []
        for scenario in self.a.scenarios:
            slowfs_options, title = SCENARIOS[scenario]
            mount = (SlowMount(os.path.join(self.a.build, "bench/slowfs/slowfs"), source, slowfs_options)
                     if slowfs_options else None)
            files_glob = os.path.join(mount.dir if mount else source, "*.tfrecord")
            log(f"== {title}: {files_glob}")
            try:
                for name, knobs in self.contenders():
                    runs.append(self.run_one(scenario, name, knobs, files_glob, mount, source))
                # Memory at equal throughput: autotune with its consumer paced to what tf.data
                # AUTOTUNE gave on this mount (a trainer that needs no more): the bytes a loader
                # must keep in flight grow with its throughput (Little's law), so the full-speed
                # runs compare memory at 20x tf.data's throughput or more.
                tf_auto = next((r for r in runs if r["scenario"] == scenario and r["contender"] == "tfdata_autotune"
                                and "error" not in r and r["metrics"]["steady_examples_per_s"]), None)
                if tf_auto:
                    runs.append(self.run_one(scenario, PACED, {}, files_glob, mount, source,
                                             rate=round(tf_auto["metrics"]["steady_examples_per_s"])))
                # Confirmation: autotune and the grid's two best fixed settings again, interleaved,
                # so that the target compares medians of runs spread over the same spell of the
                # shared machine, not one run each (the grid's best of 20 single runs is biased up).
                fixed = [r for r in runs if r["scenario"] == scenario and r["contender"].startswith("fixed_")
                         and "error" not in r and r["metrics"]["steady_examples_per_s"]]
                top = sorted(fixed, key=lambda r: r["metrics"]["steady_examples_per_s"], reverse=True)[:2]
                for rep in range(1, self.a.confirm + 1):
                    for name, knobs in [("autotune", {})] + [(r["contender"], r["knobs"]) for r in top]:
                        rec = self.run_one(scenario, f"confirm{rep}_{name}", knobs, files_glob, mount, source)
                        rec["confirm_of"] = name
                        runs.append(rec)
            finally:
                if mount:
                    mount.close()
        return runs


# ---------------------------------------------------------------------------------------------
# Tables


def k(v):
    if v is None:
        return "n/a"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e5:
        return f"{v / 1e3:.0f}k"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v / 1e3:.2f}k" if v >= 1e3 else f"{v:.0f}"


def mib(v):
    return "n/a" if v is None else f"{v / 2**20:.1f} MiB" if v < 10 * 2**20 else f"{v / 2**20:.0f} MiB"


def sec(v):
    return "never" if v is None else f"{v:.1f} s"


def within_cpu(m):
    """ringfeedd's CPU use over the run (CPU-seconds per second, the driver's own measure)
    within its CPU budget, with the tuner's tolerance (daemon/tuner.h: kCpuTolerance)."""
    return (m.get("daemon_cores") is not None and m.get("cpu_budget_cores") is not None
            and m["daemon_cores"] <= 1.05 * m["cpu_budget_cores"])


def na(v):
    return "n/a" if v is None else str(v)


def knobs_text(run):
    kn = run["metrics"].get("knobs_final") or {}
    if not kn:
        return ""
    ra = kn.get("read_ahead_per_file_bytes")
    return (f"{kn.get('readers')} / {kn.get('workers')} / {kn.get('prefetch')}"
            + (f" ({ra >> 20} MiB)" if ra and ra % (1 << 20) == 0 else f" ({mib(ra)})" if ra else ""))


def report(doc):
    runs = [r for r in doc["runs"] if "error" not in r]
    errors = [r for r in doc["runs"] if "error" in r]
    print()
    print(f"## Autotuning ({doc['date']}, {doc.get('json_name', '')})")
    print()
    print(f"Commit {doc['commit']}; {doc['machine']}; TensorFlow {doc.get('tf_version') or 'n/a'}; every contender"
          f" pinned to cores {doc['cpus']}{', nice ' + str(doc['nice']) if doc.get('nice') else ''};"
          f" {doc['set']} ({doc['files']} files, batch {doc['batch']}), `epochs: 0`, each run stopped"
          f" {doc['seconds']:g} s after its first batch, steady = the last {doc['steady']:g} s;"
          f" memory_budget {doc['budget']};"
          f"{' deterministic: false (tf.data too);' if doc.get('deterministic') == 'false' else ''} load average {doc['load_start']} at the start,"
          f" {doc['load_end']} at the end (per run: {doc.get('load_range', 'n/a')}).")
    verdicts = []
    for scenario in doc["scenarios"]:
        title = SCENARIOS[scenario][1]
        sr = [r for r in runs if r["scenario"] == scenario]
        if not sr:
            continue
        by = {r["contender"]: r for r in sr}
        autos = [r for r in sr if r["contender"].startswith("autotune")]
        fixed = [r for r in sr if r["contender"].startswith("fixed_") and r["metrics"]["steady_examples_per_s"]]
        best = max(fixed, key=lambda r: r["metrics"]["steady_examples_per_s"]) if fixed else None
        in_budget = [r for r in fixed if within_cpu(r["metrics"])]
        best_in = max(in_budget, key=lambda r: r["metrics"]["steady_examples_per_s"]) if in_budget else None
        worst = min(fixed, key=lambda r: r["metrics"]["steady_examples_per_s"]) if fixed else None
        floor = by.get("fixed_r1_w1_p8")  # ringfeedd starts at 1 reader, 1 worker, prefetch at its most (8)
        best_rate = best["metrics"]["steady_examples_per_s"] if best else None

        print()
        print(f"### {title}")
        print()
        print("Knobs are readers / workers / prefetch (read-ahead per open file); for autotune, what it ended with."
              " CPU: ringfeedd's CPU-seconds (its whole life, /proc) per second of the run, the driver's own measure;"
              " threads: runnable (the tuner's measured cores, rounded, steady part) and readers blocked in I/O,"
              " tasks = all threads of the process. Memory: ringfeedd's peak private RSS (RssAnon) + its segment; tf.data's"
              " peak RSS increase over `import tensorflow` (in brackets its private part, RssAnon). Steal: the"
              " machine's CPU time the hypervisor gave to other guests during the run (/proc/stat); runs with"
              " much of it had less CPU than the others.")
        print()
        print("| contender | knobs | steady examples/s | of the best fixed | time to 90% of own steady |"
              " CPU cores | runnable / blocked-I/O threads | tasks | memory | reads in flight (max) | steal |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        rows = [(r["contender"].replace("_", " "), r) for r in autos]
        fixed_rows = {}  # contender -> labels: one row per setting, however many titles it has
        for label, r in (("best fixed", best), ("best fixed within the CPU budget", best_in),
                         ("autotune's start", floor), ("worst fixed", worst)):
            if r is not None:
                fixed_rows.setdefault(r["contender"], (r, []))[1].append(label)
        rows += [(f"{' = '.join(labels)}: {r['contender'][6:].replace('_', ' ')}", r) for r, labels in fixed_rows.values()]
        rows += [(TFDATA[n][2], by[n]) for n in TFDATA if n in by]
        paced = by.get(PACED)
        if paced:
            rows.append((f"autotune, consumer paced to {k(paced.get('consumer_rate'))} examples/s", paced))
        for label, r in rows:
            m = r["metrics"]
            rate = m["steady_examples_per_s"]
            of_best = f"{100 * rate / best_rate:.0f}%" if rate and best_rate else "n/a"
            if r["kind"] == "ringfeed":
                threads = f"{na(m['runnable_threads_steady'])} / {na(m['blocked_io_threads_steady'])}"
                memory = mib(m["private_plus_segment_peak_bytes"])
                cores = f"{m['daemon_cores']:.2f}" if m.get("daemon_cores") is not None else "n/a"
            else:
                threads = "n/a"
                cores = "n/a"
                memory = f"{mib(m['rss_peak_increase_bytes'])} ({mib(m['rss_anon_peak_increase_bytes'])})"
            inflight = na((r.get("slowfs") or {}).get("in_flight_max")) if r.get("slowfs") else "-"
            print(f"| {label} | {knobs_text(r)} | {k(rate)} | {of_best} | {sec(m['t90_seconds'])} | {cores} | {threads} |"
                  f" {na(m['tasks_steady'])} | {memory} | {inflight} | {steal_text(r)} |")

        # The grid, as a matrix.
        ws = sorted({r["knobs"]["workers"] for r in fixed})
        ps = sorted({r["knobs"]["prefetch"] for r in fixed})
        rs = sorted({r["knobs"]["readers"] for r in fixed})
        cols = [(w, p) for w in ws for p in ps]
        print()
        budget = fixed[0]["metrics"].get("cpu_budget_cores") if fixed else None
        print(f"Grid, steady examples/s (readers down, workers / prefetch across; ringfeedd's CPU cores and"
              f" the steal time in brackets; the CPU budget is {na(budget)} cores):")
        print()
        print("| readers | " + " | ".join(f"w{w} p{p}" for w, p in cols) + " |")
        print("| --- | " + " | ".join("---" for _ in cols) + " |")
        for rd in rs:
            cells = []
            for w, p in cols:
                r = by.get(f"fixed_r{rd}_w{w}_p{p}")
                if r is None:
                    cells.append("failed")
                    continue
                m = r["metrics"]
                cores = f"{m['daemon_cores']:.2f}" if m.get("daemon_cores") is not None else "n/a"
                cell = f"{k(m['steady_examples_per_s'])} ({cores}, {steal_text(r)})"
                cells.append(f"**{cell}**" if r is best else cell)
            print(f"| {rd} | " + " | ".join(cells) + " |")

        # Confirmation: medians of the re-runs only (the grid run that picked a setting is biased up).
        confirms = [r for r in sr if r.get("confirm_of")]
        if confirms:
            groups = {}
            for r in confirms:
                groups.setdefault(r["confirm_of"], []).append(r)
            print()
            print(f"Confirmation: autotune and the grid's two best settings run again, interleaved,"
                  f" {max(len(g) for g in groups.values())} times each; medians of those runs only:")
            print()
            print("| contender | runs | median steady examples/s | range | steal (median) |")
            print("| --- | --- | --- | --- | --- |")
            medians = {}
            for name, group in groups.items():
                rates_ = sorted(r["metrics"]["steady_examples_per_s"] or 0 for r in group)
                medians[name] = statistics.median(rates_)
                steal = statistics.median(r.get("steal_fraction", 0) for r in group)
                print(f"| {name.replace('_', ' ')} | {len(group)} | {k(medians[name])} | {k(rates_[0])} - {k(rates_[-1])}"
                      f" | {100 * steal:.0f}% |")
            fixed_medians = {n: v for n, v in medians.items() if n != "autotune"}
            if "autotune" in medians and fixed_medians:
                best_name = max(fixed_medians, key=fixed_medians.get)
                best_med = fixed_medians[best_name]
                auto_med = medians["autotune"]
                verdicts.append((scenario, "medians", ">= 90% of the best fixed (medians of the confirmation runs)",
                                 f"{100 * auto_med / best_med:.0f}% ({k(auto_med)} vs {k(best_med)},"
                                 f" {best_name[6:].replace('_', ' ')})" if best_med else "n/a",
                                 bool(best_med and auto_med >= 0.9 * best_med)))

        # Targets for this scenario.
        for a in autos:
            m = a["metrics"]
            rate = m["steady_examples_per_s"]
            t_best = time_to(a["timeline"]["examples_per_bin"], 0.9 * best_rate) if best_rate else None
            ok = rate is not None and best_rate and rate >= 0.9 * best_rate and t_best is not None and t_best <= 10
            verdicts.append((scenario, a["contender"], ">= 90% of the best fixed within 10 s",
                             f"{100 * rate / best_rate:.0f}%, 90% reached at {sec(t_best)}"
                             + (f" ({100 * rate / best_in['metrics']['steady_examples_per_s']:.0f}% of the best"
                                f" within the budget)" if best_in and best_in is not best else ""), ok))
            within = (within_cpu(m) and m["budget_bytes"]
                      and m["private_plus_segment_peak_bytes"] <= m["budget_bytes"])
            cores = f"{m['daemon_cores']:.2f}" if m.get("daemon_cores") is not None else "n/a"
            verdicts.append((scenario, a["contender"], "never exceeds its budgets",
                             f"CPU {cores} of {na(m.get('cpu_budget_cores'))} cores (tuner's highest interval:"
                             f" {na(m.get('cpu_cores_max'))}),"
                             f" {mib(m['private_plus_segment_peak_bytes'])} of {mib(m['budget_bytes'])}",
                             bool(within)))
            bm = best["metrics"] if best else {}
            ok3 = (m["runnable_threads_steady"] is not None and bm.get("runnable_threads_steady") is not None
                   and m["runnable_threads_steady"] <= bm["runnable_threads_steady"] + 1)
            verdicts.append((scenario, a["contender"], "runnable threads <= best fixed's + 1",
                             f"{na(m['runnable_threads_steady'])} vs {na(bm.get('runnable_threads_steady'))}",
                             bool(ok3)))
            if scenario == "local":
                verdicts.append((scenario, a["contender"], "reads <= 2 files in parallel on local files",
                                 f"readers at most {na(m['readers_max'])}",
                                 m["readers_max"] is not None and m["readers_max"] <= 2))
            for n in ("tfdata_autotune", "tfdata_reads16"):
                t = by.get(n)
                if t is None:
                    continue
                tm = t["metrics"]
                verdicts.append((scenario, a["contender"], f"beats {TFDATA[n][2]} on throughput",
                                 f"{rate / tm['steady_examples_per_s']:.1f}x" if rate and tm["steady_examples_per_s"]
                                 else "n/a", bool(rate and tm["steady_examples_per_s"]
                                                  and rate > tm["steady_examples_per_s"])))
                verdicts.append((scenario, a["contender"], f"beats {TFDATA[n][2]} on memory",
                                 f"{mib(m['private_plus_segment_peak_bytes'])} vs {mib(tm['rss_peak_increase_bytes'])}",
                                 bool(tm["rss_peak_increase_bytes"]
                                      and m["private_plus_segment_peak_bytes"] < tm["rss_peak_increase_bytes"])))

        # Not a target of the issue: memory at tf.data AUTOTUNE's own throughput.
        tf_auto = by.get("tfdata_autotune")
        if paced and tf_auto:
            pm, tm = paced["metrics"], tf_auto["metrics"]
            ok = bool(pm["steady_examples_per_s"] and pm["steady_examples_per_s"] >= 0.95 * paced["consumer_rate"]
                      and tm["rss_peak_increase_bytes"]
                      and pm["private_plus_segment_peak_bytes"] < tm["rss_peak_increase_bytes"])
            verdicts.append((scenario, PACED, "(not a target) less memory than tf.data AUTOTUNE at its throughput",
                             f"{mib(pm['private_plus_segment_peak_bytes'])} vs {mib(tm['rss_peak_increase_bytes'])}"
                             f" at {k(pm['steady_examples_per_s'])} vs {k(tm['steady_examples_per_s'])} examples/s",
                             ok))

    # One row per scenario and target, the autotuned runs' figures side by side.
    grouped = {}
    for scenario, run, target, figure, ok in verdicts:
        grouped.setdefault((scenario, target), []).append((run, figure, ok))
    print()
    print("### Targets")
    print()
    print("| scenario | target | figure (autotune run 1; run 2) | met? |")
    print("| --- | --- | --- | --- |")
    for (scenario, target), items in grouped.items():
        met = sum(1 for _, _, ok in items if ok)
        verdict = "met" if met == len(items) else "**MISSED**" if met == 0 else f"met in {met} of {len(items)} runs"
        print(f"| {SCENARIOS[scenario][1]} | {target} | {'; '.join(f for _, f, _ in items)} | {verdict} |")

    autos = [r for r in runs if (r["contender"].startswith("autotune") or r["contender"] == PACED)
             and r.get("decisions")]
    if autos:
        print()
        print("### The autotuner's changes (from `--log-level debug`)")
        for a in autos:
            changes = a["metrics"]["changes"]
            print()
            print(f"{SCENARIOS[a['scenario']][1]}, {a['contender'].replace('_', ' ')}: {len(changes)} changes"
                  f" (status keeps the last 20)")
            print()
            for c in changes[:12]:
                print(f"- {c['at_seconds']:.2f} s: {c['knob']} {c['from']} -> {c['to']}: {c['reason']}")
            if len(changes) > 12:
                print(f"- ... {len(changes) - 12} more")
    if errors:
        print()
        print("Failed runs:")
        for r in errors:
            print(f"- {r['scenario']} {r['contender']}: {r['error']}")


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="an existing result file: print its tables only")
    ap.add_argument("--build", default=os.path.join(REPO, "..", "build-bench"), help="Release build directory")
    ap.add_argument("--data", default=os.environ.get("RINGFEED_BENCH_DIR", "/tmp/ringfeed-bench"))
    ap.add_argument("--set", default="taxi_plain_x4", help="data set directory under --data (*.tfrecord)")
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"],
                    help="the set's compression (ringfeed's source.compression, tf.data's compression_type); "
                         "default none (the plain sets run_autotune_bench.sh makes)")
    ap.add_argument("--python", default="", help="python with tensorflow (empty: no tf.data runs)")
    ap.add_argument("--no-tfdata", action="store_true")
    ap.add_argument("--cpus", default=f"0-{os.cpu_count() - 1}")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--scenarios", default="local,slow2,slow20")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--steady", type=float, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--budget", default="256MiB")
    ap.add_argument("--deterministic", default="true", choices=["true", "false"],
                    help="ringfeed's `deterministic` and tf.data's Options().deterministic, for every run")
    ap.add_argument("--readers", default="1,2,4,8,16")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--prefetch", default="2,8")
    ap.add_argument("--reads-per-file", type=int, default=0,
                    help="also run the fixed grid with pipeline.reads_per_file fixed at this (0: no such runs)")
    ap.add_argument("--pipeline", default="",
                    help="more pipeline keys for every ringfeed run, KEY=VALUE[,KEY=VALUE...] "
                         "(e.g. read_ahead=64KiB); the grid's own knobs take precedence")
    ap.add_argument("--autotune-runs", type=int, default=2, choices=[1, 2])
    ap.add_argument("--confirm", type=int, default=3,
                    help="rounds of autotune + the grid's two best fixed settings run again, interleaved (0: none)")
    ap.add_argument("--out", help="result file (default: DATA/results/autotune-<time>.json)")
    a = ap.parse_args()

    if a.json:
        doc = json.load(open(a.json))
        doc["json_name"] = os.path.basename(a.json)
        report(doc)
        return 0

    a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    for s in a.scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario '{s}'; known: {', '.join(SCENARIOS)}")
    a.readers = [int(x) for x in a.readers.split(",")]
    a.workers = [int(x) for x in a.workers.split(",")]
    a.prefetch = [int(x) for x in a.prefetch.split(",")]
    try:
        a.pipeline = dict(kv.split("=", 1) for kv in a.pipeline.split(",") if kv.strip())
    except ValueError:
        ap.error(f"--pipeline: expected KEY=VALUE[,KEY=VALUE...], got '{a.pipeline}'")
    files = glob.glob(os.path.join(a.data, a.set, "*.tfrecord"))
    if not files:
        ap.error(f"no *.tfrecord files in {os.path.join(a.data, a.set)} (run_autotune_bench.sh makes them)")

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = a.out or os.path.join(a.data, "results", f"autotune-{stamp}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    load_start = loadavg()
    bench = Bench(a)
    try:
        runs = bench.run()
    finally:
        shutil.rmtree(bench.work, ignore_errors=True)  # configs, logs, timelines: all in the JSON

    def sh(cmd):
        r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
        return r.stdout.strip()

    loads = [float(r["load_start"].split()[0]) for r in runs]
    dirty = subprocess.run(["git", "-C", REPO, "diff", "--quiet", "HEAD", "--", "."]).returncode != 0
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": sh(f"git -C {REPO} rev-parse --short HEAD") + (" + uncommitted changes" if dirty else ""),
        "machine": f"{os.cpu_count()} cores, {cpu_model()}, kernel {os.uname().release}",
        "tf_version": next((r["result"].get("tf_version") for r in runs if r.get("kind") == "tfdata" and "result" in r), ""),
        "cpus": a.cpus, "nice": a.nice, "seconds": a.seconds, "steady": a.steady, "batch": a.batch,
        "budget": a.budget, "deterministic": a.deterministic, "set": a.set, "files": len(files), "scenarios": a.scenarios,
        "pipeline": a.pipeline, "load_start": load_start, "load_end": loadavg(),
        "load_range": f"1-min load {min(loads):.1f}-{max(loads):.1f}" if loads else "n/a",
        "runs": runs,
    }
    with open(out, "w") as f:
        json.dump(doc, f)
    log(f"results: {out}")
    doc["json_name"] = os.path.basename(out)
    report(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
