#!/usr/bin/env python3
"""How fast a running ringfeedd job feeds a trainer that takes its batches on a GPU:
RingfeedIterable(job, device=...) iterated for --seconds after --warmup seconds, each batch's
tensors used by a kernel (a sum) on the current stream, as a training step would; prints one
JSON line {"examples_per_s", "gb_per_s", "batches", "seconds", "device"}.

With device="cuda" the copies come straight from the ring (client/cuda_uploader.h); with "cpu"
the tensors view the ring. Needs torch and the ringfeed package, and a running job with
`epochs: 0` (bench/gpu/README.md).
"""

import argparse
import json
import time

import torch

from ringfeed.torch import RingfeedIterable


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds (default 10)")
    ap.add_argument("--warmup", type=float, default=5.0, help="untimed seconds first (default 5)")
    ap.add_argument("--runtime-dir", default=None)
    args = ap.parse_args()
    device = torch.device(args.device)

    rows = nbytes = batches = 0
    start = time.perf_counter()
    t0 = None
    for batch in RingfeedIterable(args.job, device=device, runtime_dir=args.runtime_dir, timeout=60, metadata=True):
        meta = batch.pop("_batch")
        tensors = [t for v in batch.values() for t in (v if isinstance(v, tuple) else (v,))]
        float(sum(t.double().sum() for t in tensors if t.numel()))  # the step: waits for the copies
        now = time.perf_counter()
        if t0 is None:
            if now - start >= args.warmup:
                t0 = now
            continue
        batches += 1
        rows += meta["rows"]
        nbytes += sum(t.numel() * t.element_size() for t in tensors)
        if now - t0 >= args.seconds:
            break
    seconds = time.perf_counter() - t0
    print(json.dumps({"examples_per_s": rows / seconds, "gb_per_s": nbytes / seconds / 1e9, "batches": batches,
                      "seconds": round(seconds, 3), "device": str(device)}))


if __name__ == "__main__":
    main()
