#!/usr/bin/env python3
"""Produce golden parse results from TensorFlow for the real TFRecord test data.

What it does
------------
Reads the GZIP-compressed TFRecord files under the data root (a copy of
tensorflow/tfx `tfx/components/testdata/`, see shared/data/tfx/README.md) with
TensorFlow itself and writes what TF returns, so that ringfeed's C++ reader and
tf.train.Example parser can be compared against it:

* ``taxi.jsonl.gz``    -- all 12 shards of ``csv_example_gen/Split-train/``
                          (sorted file names), parsed with tf.io.parse_example.
* ``penguin.jsonl.gz`` -- ``penguin/data/Split-train/`` then
                          ``penguin/data/Split-eval/`` files, same treatment.
* ``counts.json``      -- record counts (tf.data.TFRecordDataset,
                          compression_type="GZIP") for EVERY TFRecord file under
                          the data root (including the SequenceExample files in
                          ``tfrecord_sequence/``), keyed by path relative to the
                          data root, plus ``"total"`` per top-level folder.

Feature discovery: every record of a dataset is decoded with
``tf.train.Example.FromString``; every feature name seen anywhere becomes a
``tf.io.VarLenFeature`` of the dtype of its value list (a feature whose Feature
message has no value list set in some records still appears; a feature that
never has a value list in any record of the dataset is an error; a feature with
conflicting kinds is an error). Each file is then parsed in ONE batch with
``tf.io.parse_example(serialized_batch, spec)``; the SparseTensor of each
feature is split row by row. The script also cross-checks every parsed value
against the proto it came from.

Output format (gzip, mtime=0, JSON Lines, ``sort_keys=True``,
``separators=(",", ":")``):

* line 1, header: ``{"features": {name: "int64"|"float"|"bytes"},
  "files": [paths relative to the data root], "tensorflow": tf.__version__}``
* then one line per record, in file order:
  ``{"features": {name: [values...]}, "file": <index into files>,
  "index": <record index within file>}``. Every header feature is in every
  line (``[]`` when absent/empty). int64 -> JSON integer; float -> the float32
  value widened exactly to double, written by json (Python repr, shortest
  round-trip of the double); NaN/inf -> the strings "nan", "inf", "-inf";
  bytes -> standard base64 with padding.

Re-running with the same TF version gives byte-identical outputs.

Committed outputs were produced by TensorFlow 2.21.0 (tensorflow-cpu from PyPI,
Python 3.11.7).

How to re-run (from the repo root /work/main)::

    python3 -m venv /work/tfvenv && /work/tfvenv/bin/pip install tensorflow-cpu
    /work/tfvenv/bin/python tests/golden/make_golden.py \\
        --data ../shared/data/tfx --out tests/golden
"""

import argparse
import base64
import gzip
import io
import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DATASETS = {
    "taxi": ["csv_example_gen/Split-train"],
    "penguin": ["penguin/data/Split-train", "penguin/data/Split-eval"],
}

KIND_TO_NAME = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes"}
NAME_TO_DTYPE = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string}


def read_records(path):
    ds = tf.data.TFRecordDataset(path, compression_type="GZIP")
    return [r.numpy() for r in ds]


def list_files(data_root, folder):
    d = os.path.join(data_root, folder)
    return [os.path.join(folder, n) for n in sorted(os.listdir(d))
            if os.path.isfile(os.path.join(d, n))]


def discover(records_per_file):
    """Feature name -> dtype name, from the protos of all records."""
    kinds = {}
    for records in records_per_file:
        for rec in records:
            ex = tf.train.Example.FromString(rec)
            for name, feat in ex.features.feature.items():
                kind = feat.WhichOneof("kind")
                if kind is None:
                    kinds.setdefault(name, None)
                    continue
                prev = kinds.get(name)
                if prev is not None and prev != kind:
                    raise SystemExit(f"feature {name!r}: conflicting kinds {prev} / {kind}")
                kinds[name] = kind
    never = [n for n, k in kinds.items() if k is None]
    if never:
        raise SystemExit(f"features never carrying a value list (dtype unknown): {never}")
    return {n: KIND_TO_NAME[k] for n, k in sorted(kinds.items())}


def json_value(dtype, v):
    if dtype == "int64":
        return int(v)
    if dtype == "float":
        f = float(np.float32(v))
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return base64.b64encode(bytes(v)).decode("ascii")


def proto_values(feat, dtype):
    kind = feat.WhichOneof("kind")
    if kind is None:
        return []
    assert KIND_TO_NAME[kind] == dtype
    return list(getattr(feat, kind).value)


def parse_file(records, features):
    """Batched tf.io.parse_example; returns list of {name: [json values]}."""
    n = len(records)
    rows = [{name: [] for name in features} for _ in range(n)]
    if n == 0:
        return rows
    spec = {name: tf.io.VarLenFeature(NAME_TO_DTYPE[dt]) for name, dt in features.items()}
    parsed = tf.io.parse_example(tf.constant(records, dtype=tf.string), spec)
    for name, dt in features.items():
        sp = parsed[name]
        idx = sp.indices.numpy()
        vals = sp.values.numpy()
        assert int(sp.dense_shape.numpy()[0]) == n
        for (row, col), v in zip(idx, vals):
            lst = rows[row][name]
            assert col == len(lst), "SparseTensor indices not row-major"
            lst.append(json_value(dt, v))
    # Cross-check against the protos.
    for i, rec in enumerate(records):
        ex = tf.train.Example.FromString(rec)
        for name, dt in features.items():
            feat = ex.features.feature.get(name)
            want = [] if feat is None else [json_value(dt, v) for v in proto_values(feat, dt)]
            if want != rows[i][name]:
                raise SystemExit(f"record {i} feature {name}: parse_example {rows[i][name]} != proto {want}")
    return rows


def write_gz(path, text):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(text.encode("utf-8"))
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def dumps(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def make_dataset(data_root, out_dir, name, folders):
    files = [p for folder in folders for p in list_files(data_root, folder)]
    records_per_file = [read_records(os.path.join(data_root, p)) for p in files]
    features = discover(records_per_file)
    lines = [dumps({"tensorflow": tf.__version__, "files": files, "features": features})]
    empty = {n: 0 for n in features}
    total = 0
    for fi, records in enumerate(records_per_file):
        for ri, row in enumerate(parse_file(records, features)):
            for n, v in row.items():
                if not v:
                    empty[n] += 1
            lines.append(dumps({"file": fi, "index": ri, "features": row}))
            total += 1
    out = os.path.join(out_dir, f"{name}.jsonl.gz")
    write_gz(out, "\n".join(lines) + "\n")
    print(f"{name}: {len(files)} files, {total} records -> {out} ({os.path.getsize(out)} bytes)")
    for n, dt in features.items():
        print(f"  {n:24s} {dt:6s} empty in {empty[n]} records")
    return total


def make_counts(data_root, out_dir):
    counts = {}
    totals = {}
    for dirpath, dirnames, filenames in os.walk(data_root):
        dirnames.sort()
        for fn in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, fn), data_root)
            if os.sep not in rel:  # README.md etc. at the root
                continue
            n = sum(1 for _ in tf.data.TFRecordDataset(os.path.join(data_root, rel),
                                                       compression_type="GZIP"))
            counts[rel] = n
            top = rel.split(os.sep)[0]
            totals[top] = totals.get(top, 0) + n
    result = dict(counts)
    result["total"] = totals
    out = os.path.join(out_dir, "counts.json")
    with open(out, "w") as f:
        f.write(json.dumps(result, sort_keys=True, indent=1) + "\n")
    print(f"counts: {totals} -> {out}")
    return totals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="data root (shared/data/tfx)")
    ap.add_argument("--out", required=True, help="output directory (tests/golden)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"tensorflow {tf.__version__}")
    for name, folders in DATASETS.items():
        make_dataset(args.data, args.out, name, folders)
    make_counts(args.data, args.out)


if __name__ == "__main__":
    sys.exit(main())
