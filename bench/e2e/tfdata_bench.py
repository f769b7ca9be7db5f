#!/usr/bin/env python3
"""tfdata_bench: tf.data (tensorflow-cpu) reading and parsing the same TFRecord files as ringfeedd.

Two input pipelines, both with every knob on AUTOTUNE:
  article  list_files -> interleave(TFRecordDataset) -> map(parse_single_example) -> batch -> prefetch
           (the pipeline of the tf.data performance guide, "Better performance with the tf.data API")
  tuned    list_files -> interleave(TFRecordDataset) -> batch -> map(parse_example) -> prefetch
           (vectorized parsing: one parse_example call per batch)

The features are those of the ringfeed job: FixedLen scalars become tf.io.FixedLenFeature([]),
VarLen ones tf.io.VarLenFeature (SparseTensor per batch).

The consumer counts each batch's rows and does not read the values (TensorFlow has materialized
them already; converting them to NumPy would charge Python's cost to tf.data):
  --consumer graph   (default) Dataset.reduce: the whole iteration runs inside TensorFlow's
                     runtime, as in Keras' fit loop; the clock runs from the call to its return
                     (so it includes the pipeline's start, a few ms)
  --consumer python  a Python `for batch in dataset` loop (eager); the clock starts at the first
                     batch

Prints one JSON object:
  {"pipeline", "consumer", "examples", "batches", "seconds" (see --consumer), "examples_per_s",
   "seconds_from_start" (dataset built to end of data), "cpu_seconds" (process, from building the dataset on: not the import),
   "rss_baseline_bytes" (VmRSS after `import tensorflow`), "rss_peak_increase_bytes"
   (VmHWM over that baseline), "rss_anon_peak_increase_bytes" (sampled RssAnon over its baseline),
   "tf_version"}

Options for the autotuner's benchmark (bench/autotune/):
  --epochs 0               repeat the files forever (stop with --seconds)
  --seconds N              stop N seconds after the iteration starts (a tf.timestamp() deadline in
                           the pipeline, checked before each batch; the JSON's "seconds" then run
                           from the first batch to the last)
  --timeline FILE          write a JSON document: examples per 100 ms from the first batch
                           ("bin_seconds", "examples_per_bin"), and every 0.5 s "samples" of this
                           process: "t" (from the first batch, -1 before it), "tasks" (threads,
                           /proc/self/task), "rss_anon_bytes"; the batch times come from
                           tf.timestamp() inside the pipeline, so the graph consumer keeps running
                           inside TensorFlow's runtime
  --buffer-size BYTES      TFRecordDataset(buffer_size=...): bytes per read (TensorFlow's default,
                           256 KiB, when not given). 1 MiB matches ringfeed's reads on slowfs
  --num-parallel-reads N   TFRecordDataset(files, num_parallel_reads=N) instead of
                           list_files + interleave(num_parallel_calls=AUTOTUNE)
  --num-parallel-calls N   every num_parallel_calls (interleave, map) fixed at N instead of AUTOTUNE
                           (prefetch stays AUTOTUNE)
The JSON then also has "tasks_max" and "tasks_last" (this process's threads), "stopped_by_time",
"first_batch_seconds" (iteration start to the first batch) and the options used.

Run it pinned to the cores the loader gets (taskset); TensorFlow sizes its thread pools from the
CPUs it may run on. The caller warms the page cache.

  taskset -c 0,1 python3 tfdata_bench.py --files '/tmp/ringfeed-bench/taxi_plain/*.tfrecord' \
      --schema /tmp/ringfeed-bench/taxi.schema --pipeline tuned --batch 256
"""
import argparse
import json
import os
import resource
import sys
import threading
import time


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def task_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", required=True, help="glob of TFRecord files")
    ap.add_argument("--compression", default="", choices=["", "GZIP", "ZLIB"],
                    help="TFRecordDataset compression_type ('' = none)")
    ap.add_argument("--schema", help="'NAME fixed|var DTYPE' per line (bench/make_bench_data's taxi.schema)")
    ap.add_argument("--bytes-feature", help="instead of --schema: one FixedLen bytes feature of this name")
    ap.add_argument("--pipeline", required=True, choices=["article", "tuned"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1, help="0 = repeat forever (use --seconds)")
    ap.add_argument("--max-examples", type=int, default=0,
                    help="stop after the batch that reaches this many examples (0 = all); for the slow pipeline")
    ap.add_argument("--consumer", default="graph", choices=["graph", "python"])
    ap.add_argument("--seconds", type=float, default=0, help="stop this many seconds after the iteration starts")
    ap.add_argument("--timeline", help="write examples per 100 ms and thread/memory samples to this JSON file")
    ap.add_argument("--buffer-size", type=int, default=0, help="TFRecordDataset buffer_size in bytes (0: TF's default)")
    ap.add_argument("--num-parallel-reads", type=int, default=0,
                    help="TFRecordDataset(files, num_parallel_reads=N) instead of interleave")
    ap.add_argument("--deterministic", default="true", choices=["true", "false"],
                    help="tf.data.Options().deterministic (false: parallel stages hand out what is ready first)")
    ap.add_argument("--num-parallel-calls", type=int, default=0,
                    help="fixed num_parallel_calls for interleave and map (0: AUTOTUNE)")
    args = ap.parse_args()
    if args.epochs == 0 and not args.seconds and not args.max_examples:
        ap.error("--epochs 0 repeats forever: give --seconds or --max-examples")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # noqa: E402  (after the log level is set)

    # The runtime's own size does not count against tf.data: baseline after the import, and
    # the high-water mark reset (clear_refs 5, Linux >= 4.0) so VmHWM covers the pipeline only.
    rss_baseline = status_kib("VmRSS") * 1024
    anon_baseline = status_kib("RssAnon") * 1024
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    anon_peak = [anon_baseline]
    stop = threading.Event()
    tasks = {"max": task_count(), "last": 0}
    samples = []
    first_wall = [None]  # time.time() of the first batch, when the timeline knows it

    def sample():
        ticks = 0
        while not stop.wait(0.05):
            anon = status_kib("RssAnon") * 1024
            anon_peak[0] = max(anon_peak[0], anon)
            n = task_count()
            tasks["max"] = max(tasks["max"], n)
            tasks["last"] = n
            ticks += 1
            if ticks % 10 == 0:
                samples.append({"wall": time.time(), "tasks": n, "rss_anon_bytes": anon})
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    dtypes = {"int64": tf.int64, "float32": tf.float32, "bytes": tf.string}
    spec = {}
    if args.bytes_feature:
        spec[args.bytes_feature] = tf.io.FixedLenFeature([], tf.string)
    else:
        for line in open(args.schema):
            if not line.strip():
                continue
            name, kind, dtype = line.split()
            spec[name] = (tf.io.FixedLenFeature([], dtypes[dtype]) if kind == "fixed"
                          else tf.io.VarLenFeature(dtypes[dtype]))
    # A FixedLen feature tells the batch's rows; VarLen ones are SparseTensors.
    row_key = next((k for k, v in spec.items() if isinstance(v, tf.io.FixedLenFeature)), None)

    autotune = tf.data.AUTOTUNE
    calls = args.num_parallel_calls or autotune
    buffer_size = args.buffer_size or None
    started = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_started = usage.ru_utime + usage.ru_stime
    if args.num_parallel_reads:
        names = sorted(tf.io.gfile.glob(args.files))
        ds = tf.data.TFRecordDataset(names, compression_type=args.compression, buffer_size=buffer_size,
                                     num_parallel_reads=args.num_parallel_reads)
    else:
        files = tf.data.Dataset.list_files(args.files, shuffle=False)
        ds = files.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=args.compression,
                                                                buffer_size=buffer_size),
                              num_parallel_calls=calls)
    if args.pipeline == "article":
        ds = ds.map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=calls)
        ds = ds.batch(args.batch)
    else:
        ds = ds.batch(args.batch)
        ds = ds.map(lambda r: tf.io.parse_example(r, spec), num_parallel_calls=calls)
    ds = ds.prefetch(autotune)
    if args.deterministic == "false":
        options = tf.data.Options()
        options.deterministic = False
        ds = ds.with_options(options)
    if args.epochs == 0:
        ds = ds.repeat()
    elif args.epochs > 1:
        ds = ds.repeat(args.epochs)

    if args.max_examples:
        ds = ds.take((args.max_examples + args.batch - 1) // args.batch)

    def rows(batch):
        if row_key is None:
            return tf.constant(args.batch, tf.int64)
        return tf.shape(batch[row_key], out_type=tf.int64)[0]

    # The deadline is a variable so that it can be set when the iteration starts (the functions
    # below are traced when the pipeline is built).
    deadline = tf.Variable(float("inf"), dtype=tf.float64, trainable=False)
    if args.seconds:
        ds = ds.take_while(lambda batch: tf.timestamp() < deadline)

    examples = batches = 0
    first = None
    times = None  # (wall time, rows) per batch, for the timeline
    stopped_by_time = False
    iteration_wall = time.time()
    if args.consumer == "graph" and args.timeline:
        # Each batch's rows and arrival time, gathered into one tensor at the end: the loop stays
        # inside TensorFlow, and tf.timestamp() is taken as the batch leaves the prefetch buffer.
        stamped = ds.map(lambda batch: tf.stack([tf.cast(rows(batch), tf.float64), tf.timestamp()]))
        iteration_wall = time.time()
        start = time.perf_counter()
        deadline.assign(iteration_wall + args.seconds if args.seconds else float("inf"))
        got = stamped.batch(1 << 30).get_single_element().numpy()
        end = time.perf_counter()
        times = [(float(t), float(n)) for n, t in got]
        examples, batches = int(sum(n for _, n in times)), len(times)
        if times:
            first = start + (times[0][0] - iteration_wall)
            end_wall = times[-1][0]
            end = start + (end_wall - iteration_wall) if args.seconds else end
    elif args.consumer == "graph":
        iteration_wall = time.time()
        first = time.perf_counter()
        deadline.assign(iteration_wall + args.seconds if args.seconds else float("inf"))
        counts = ds.reduce((tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
                           lambda acc, batch: (acc[0] + rows(batch), acc[1] + 1))
        examples, batches = int(counts[0]), int(counts[1])
        end = time.perf_counter()
    else:
        times = []
        iteration_wall = time.time()
        start = time.perf_counter()
        deadline.assign(iteration_wall + args.seconds if args.seconds else float("inf"))
        for batch in ds:
            if first is None:
                first = time.perf_counter()
            n = int(rows(batch))
            examples += n
            batches += 1
            times.append((time.time(), n))
        end = time.perf_counter()
    if args.seconds:
        stopped_by_time = time.time() >= iteration_wall + args.seconds
    stop.set()
    sampler.join()
    anon_peak[0] = max(anon_peak[0], status_kib("RssAnon") * 1024)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    seconds = end - first if first is not None else 0.0
    if args.timeline:
        bin_seconds = 0.1
        bins = []
        t0 = times[0][0] if times else iteration_wall
        for t, n in times or []:
            b = int((t - t0) / bin_seconds)
            if b >= len(bins):
                bins.extend([0] * (b + 1 - len(bins)))
            bins[b] += int(n)
        with open(args.timeline, "w") as f:
            json.dump({"bin_seconds": bin_seconds, "examples_per_bin": bins,
                       "samples": [{"t": s["wall"] - t0 if times else -1, "tasks": s["tasks"],
                                    "rss_anon_bytes": s["rss_anon_bytes"]} for s in samples]}, f)
            f.write("\n")
    print(json.dumps({
        "pipeline": args.pipeline,
        "consumer": args.consumer,
        "examples": examples,
        "batches": batches,
        "seconds": seconds,
        "examples_per_s": examples / seconds if seconds > 0 else 0.0,
        "seconds_from_start": end - started,
        "cpu_seconds": usage.ru_utime + usage.ru_stime - cpu_started,
        "rss_baseline_bytes": rss_baseline,
        "rss_peak_increase_bytes": status_kib("VmHWM") * 1024 - rss_baseline,
        "rss_anon_peak_increase_bytes": anon_peak[0] - anon_baseline,
        "tasks_max": tasks["max"],
        "tasks_last": tasks["last"],
        "stopped_by_time": stopped_by_time,
        "first_batch_seconds": (times[0][0] - iteration_wall) if times else None,
        "buffer_size": buffer_size,
        "num_parallel_reads": args.num_parallel_reads or None,
        "num_parallel_calls": args.num_parallel_calls or "AUTOTUNE",
        "tf_version": tf.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
