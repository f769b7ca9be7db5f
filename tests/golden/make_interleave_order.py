#!/usr/bin/env python3
"""Record orders of tf.data's interleave (cycle_length N, block_length 1, deterministic), the
order ringfeed's sequencer promises (daemon/sequencer.h, docs/architecture.md "Determinism",
item 5), made by TensorFlow itself:

  tf.data.Dataset.from_tensor_slices(files).interleave(
      tf.data.TFRecordDataset, cycle_length=N, block_length=1, deterministic=True)

- "synthetic": files with uneven record counts, empty ones among them, written here (record j
  of file i holds the bytes "f<i>r<j>", as tests/sequencer_test.cc writes them); each case
  gives the counts, cycle_length and TensorFlow's order as file indices (a file's records come
  in their file order, so the indices say which record it is).
- "taxi": the 12 real GZIP files of csv_example_gen/Split-train (sorted) under the data root,
  cycle_length 4 and 5, the same way (tests/daemon_golden_test.cc checks ringfeedd's batches
  against it).

Run: /work/tfvenv/bin/python tests/golden/make_interleave_order.py \\
         --data ../shared/data/tfx > tests/golden/interleave_order.json
"""
import argparse
import glob
import json
import os
import tempfile

import tensorflow as tf

SYNTHETIC = [
    ([7, 5, 0, 2], [1, 2, 3]),
    ([3, 0, 1, 4, 2, 0, 5, 1], [1, 2, 3, 4, 8]),
    ([0, 0, 3, 1], [2]),
    ([50, 7, 0, 33, 1, 120, 9, 64], [3, 5]),
    ([1, 1, 1, 1, 1], [2, 4]),
]


def interleave(files, cycle_length, compression):
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression).map(lambda r: (f, r)),
        cycle_length=cycle_length,
        block_length=1,
        deterministic=True,
    )
    index = {f: i for i, f in enumerate(files)}
    return [index[f.decode()] for f, _ in ds.as_numpy_iterator()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="the data root (shared/data/tfx)")
    args = ap.parse_args()

    out = {"tensorflow": tf.__version__, "synthetic": [], "taxi": []}
    with tempfile.TemporaryDirectory() as tmp:
        for counts, cycles in SYNTHETIC:
            files = []
            for i, n in enumerate(counts):
                path = os.path.join(tmp, f"{len(out['synthetic'])}-part-{i:03d}.tfrecord")
                with tf.io.TFRecordWriter(path) as w:
                    for j in range(n):
                        w.write(f"f{i}r{j}".encode())
                files.append(path)
            for cycle in cycles:
                order = interleave(files, cycle, "")
                assert len(order) == sum(counts)
                out["synthetic"].append({"counts": counts, "cycle_length": cycle, "order": order})

    pattern = "csv_example_gen/Split-train/*"
    taxi = sorted(glob.glob(os.path.join(args.data, pattern)))
    assert len(taxi) == 12, taxi
    for cycle in (4, 5):
        order = interleave(taxi, cycle, "GZIP")
        out["taxi"].append({"files": pattern, "cycle_length": cycle, "order": order})
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
