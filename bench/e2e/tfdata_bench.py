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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", required=True, help="glob of TFRecord files")
    ap.add_argument("--compression", default="", choices=["", "GZIP", "ZLIB"],
                    help="TFRecordDataset compression_type ('' = none)")
    ap.add_argument("--schema", help="'NAME fixed|var DTYPE' per line (bench/make_bench_data's taxi.schema)")
    ap.add_argument("--bytes-feature", help="instead of --schema: one FixedLen bytes feature of this name")
    ap.add_argument("--pipeline", required=True, choices=["article", "tuned"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-examples", type=int, default=0,
                    help="stop after the batch that reaches this many examples (0 = all); for the slow pipeline")
    ap.add_argument("--consumer", default="graph", choices=["graph", "python"])
    args = ap.parse_args()

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

    def sample():
        while not stop.wait(0.05):
            anon_peak[0] = max(anon_peak[0], status_kib("RssAnon") * 1024)
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
    started = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_started = usage.ru_utime + usage.ru_stime
    files = tf.data.Dataset.list_files(args.files, shuffle=False)
    ds = files.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=args.compression),
                          num_parallel_calls=autotune)
    if args.pipeline == "article":
        ds = ds.map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=autotune)
        ds = ds.batch(args.batch)
    else:
        ds = ds.batch(args.batch)
        ds = ds.map(lambda r: tf.io.parse_example(r, spec), num_parallel_calls=autotune)
    ds = ds.prefetch(autotune)
    if args.epochs > 1:
        ds = ds.repeat(args.epochs)

    if args.max_examples:
        ds = ds.take((args.max_examples + args.batch - 1) // args.batch)

    def rows(batch):
        if row_key is None:
            return tf.constant(args.batch, tf.int64)
        return tf.shape(batch[row_key], out_type=tf.int64)[0]

    examples = batches = 0
    first = None
    if args.consumer == "graph":
        first = time.perf_counter()
        counts = ds.reduce((tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
                           lambda acc, batch: (acc[0] + rows(batch), acc[1] + 1))
        examples, batches = int(counts[0]), int(counts[1])
    else:
        for batch in ds:
            if first is None:
                first = time.perf_counter()
            examples += int(rows(batch))
            batches += 1
    end = time.perf_counter()
    stop.set()
    sampler.join()
    anon_peak[0] = max(anon_peak[0], status_kib("RssAnon") * 1024)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    seconds = end - first if first is not None else 0.0
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
        "tf_version": tf.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
