#!/usr/bin/env python3
"""Checks ringfeed.torch's CUDA path on a real GPU: every batch that RingfeedIterable(device="cuda")
delivers equals, byte for byte, the batch that RingfeedIterable(device="cpu") delivers.

Two ringfeedd jobs run the same config and seed under two job names (the determinism contract
makes their batches identical); this script iterates one on the GPU and the other on the CPU side
by side and compares every numeric feature (fixed: the tensor; varlen: values and row_splits),
bit for bit (floats as their bytes, so NaNs compare too), plus the batch metadata. With
--side-stream the copies run on a stream of their own (the iterable then makes the current
stream wait for it and records the tensors on it); a small kernel (a sum) uses every tensor on
the current stream before it is compared, as a training step would.

Needs an NVIDIA GPU, torch with CUDA and the ringfeed package; see bench/gpu/README.md
(run_gpu_checks.sh starts the two daemons and runs this). Exits non-zero naming the batch,
feature and part that differ.
"""

import argparse
import sys

import torch

from ringfeed.torch import RingfeedIterable


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def parts(value):
    return (("values", value[0]), ("row_splits", value[1])) if isinstance(value, tuple) else (("values", value),)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job-cuda", required=True, help="job iterated with device='cuda'")
    ap.add_argument("--job-cpu", required=True, help="job with the same config and seed, iterated with device='cpu'")
    ap.add_argument("--runtime-dir", default=None)
    ap.add_argument("--device", default="cuda:0", help="default cuda:0; cpu: a dry run of this script itself")
    ap.add_argument("--side-stream", action="store_true", help="copies on a stream of their own")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("cuda_equal_check: torch sees no CUDA device")
    stream = torch.cuda.Stream(device) if args.side_stream else None

    gpu = RingfeedIterable(args.job_cuda, device=device, runtime_dir=args.runtime_dir, metadata=True,
                           stream=stream, timeout=60)
    cpu = RingfeedIterable(args.job_cpu, device="cpu", runtime_dir=args.runtime_dir, metadata=True, timeout=60)
    batches = rows = nbytes = 0
    gpu_iter, cpu_iter = iter(gpu), iter(cpu)
    for g in gpu_iter:
        try:
            c = next(cpu_iter)
        except StopIteration:
            sys.exit(f"cuda_equal_check: the cuda job delivered more batches than the cpu job ({batches} + 1)")
        where = f"batch {batches} (epoch {c['_batch']['epoch']}, index {c['_batch']['index']})"
        if g["_batch"] != c["_batch"]:
            sys.exit(f"cuda_equal_check: {where}: metadata differs: cuda {g['_batch']} cpu {c['_batch']}")
        names = sorted(k for k in c if k != "_batch" and not isinstance(c[k], list))
        if sorted(k for k in g if k != "_batch" and not isinstance(g[k], list)) != names:
            sys.exit(f"cuda_equal_check: {where}: features differ: cuda {sorted(g)} cpu {sorted(c)}")
        # Use every tensor on the current stream first, as a training step would.
        checksum = sum(t.double().sum() for name in names for _, t in parts(g[name]) if t.numel())
        for name in names:
            if isinstance(g[name], tuple) != isinstance(c[name], tuple):
                sys.exit(f"cuda_equal_check: {where}: feature {name}: cuda {type(g[name])} cpu {type(c[name])}")
            for (part, gt), (_, ct) in zip(parts(g[name]), parts(c[name])):
                if gt.device.type != device.type:
                    sys.exit(f"cuda_equal_check: {where}: feature {name} {part} is on {gt.device}, not {device}")
                if gt.dtype != ct.dtype or tuple(gt.shape) != tuple(ct.shape):
                    sys.exit(f"cuda_equal_check: {where}: feature {name} {part}: cuda {gt.dtype} {tuple(gt.shape)}"
                             f" cpu {ct.dtype} {tuple(ct.shape)}")
                if not torch.equal(as_bytes(gt).cpu(), as_bytes(ct)):
                    sys.exit(f"cuda_equal_check: {where}: feature {name} {part}: device bytes differ from the cpu batch")
                nbytes += ct.numel() * ct.element_size()
        float(checksum)  # waits for the sums: the tensors were usable on the current stream
        batches += 1
        rows += c["_batch"]["rows"]
        del g, c
    if next(cpu_iter, None) is not None:
        sys.exit(f"cuda_equal_check: the cpu job delivered more batches than the cuda job ({batches})")
    if batches == 0:
        sys.exit("cuda_equal_check: no batches")
    print(f"cuda_equal_check: {batches} batches, {rows} rows, {nbytes} bytes of numeric features equal on "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}{' (side stream)' if args.side_stream else ''}")


if __name__ == "__main__":
    main()
