#!/usr/bin/env python3
"""Host-to-device GB/s for ringfeed batches on a machine with an NVIDIA GPU, five ways:

  ring_held  the uploader: cuMemcpyHtoDAsync from the ring's registered (page-locked) slots
             straight into device tensors (client/cuda_uploader.h through the Python binding),
             for batches taken from the ring before the clock starts
  ring_live  next() + upload() batch after batch: the slower of the daemon and the copies
  pageable   the same batches copied out of the ring into ordinary (pageable) torch tensors,
             then tensor.to(device) — what a loader without pinned memory does
  dataloader torch.utils.data.DataLoader(pin_memory=True) over those pageable tensors, then
             .to(device, non_blocking=True) — PyTorch's usual pinned path (a host copy into
             pinned memory by the pin thread, then the DMA)
  pinned     those tensors in PyTorch's pinned memory already, then .to(device, non_blocking=True)

and checks that what arrived on the device equals the batch (ring) / the source (others).
First run on a GPU: session 33, NVIDIA H200 (bench/gpu/README.md, docs/benchmarks.md).

The uploader's Python binding (python/src/cuda_uploader_object.h):

    up = ringfeed._core._CudaUploader(client._core, device)   # registers the ring once
    up.upload(batch, stream, dst) -> int                       # bytes enqueued
        batch   a ringfeed.Batch (closed by the call; its slot is held until the copy completed)
        stream  int, a CUstream (torch.cuda.current_stream().cuda_stream)
        dst     list of (feature name, part, device address, capacity in bytes); part is
                "values", "row_splits" or "value_offsets"
    up.poll() -> int; up.synchronize() -> int; up.pending -> int; up.registered -> bool

Needs: an NVIDIA driver, torch with CUDA (pip install torch), the ringfeed package
(pip install ./python), and a running ringfeedd for the job with enough data (epochs: 0 runs
forever) and a prefetch of at least --hold. See bench/gpu/README.md.
"""

import argparse
import sys
import time

import numpy as np
import torch

import ringfeed


def make_uploader(client, device):
    from ringfeed import _core
    return _core._CudaUploader(client._core, device)


def parts(batch, schema):
    """(feature, part, ndarray) for every array of the batch, viewing the ring."""
    out = []
    for f in schema:
        value = batch[f.name]
        if f.dtype == np.dtype(np.bytes_):
            data, offsets = value[0], value[1]
            out += [(f.name, "values", data), (f.name, "value_offsets", offsets)]
            if f.type == "varlen":
                out.append((f.name, "row_splits", value[2]))
        elif f.type == "varlen":
            out += [(f.name, "values", value[0]), (f.name, "row_splits", value[1])]
        else:
            out.append((f.name, "values", value))
    return out


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9 if seconds > 0 else float("nan")


def bench_ring(client, schema, device, batches, check, depth, hold):
    """The uploader, two ways, on one stream with `depth` device buffer sets used in turn:
    held: rounds of `hold` batches taken from the ring first (untimed: the daemon's production
    rate does not count), then uploaded (timed: each upload call and the copies, until the
    stream is idle) — the host-to-device rate from the registered ring;
    live: next() + upload() for `batches` batches in a row — bounded by whichever is slower,
    the daemon's production or the copies."""
    up = make_uploader(client, device.index or 0)
    stream = torch.cuda.Stream(device)
    # Device buffers sized for a full batch, reused round-robin: with one stream, copy i+depth
    # into set k is ordered after copy i, so reuse is safe.
    first = client.next()
    sizes = {(name, part): arr.nbytes for name, part, arr in parts(first, schema)}
    first.close()
    slack = 2  # varlen/bytes parts vary per batch: room for twice the first batch's size
    sets = [{key: torch.empty(max(1, n * slack), dtype=torch.uint8, device=device) for key, n in sizes.items()}
            for _ in range(depth)]

    dsts = [[(name, part, buf.data_ptr(), buf.numel()) for (name, part), buf in bufs.items()] for bufs in sets]

    # Untimed: the values on the device equal the batch's, byte for byte.
    for i in range(check):
        batch = client.next()
        items = parts(batch, schema)  # views of the ring: they keep the slot while we compare
        up.upload(batch, stream.cuda_stream, dsts[i % depth])
        stream.synchronize()
        bufs = sets[i % depth]
        for name, part, arr in items:
            got = bufs[(name, part)][: arr.nbytes].cpu().numpy()
            if not np.array_equal(got, np.ascontiguousarray(arr).view(np.uint8).reshape(-1)):
                sys.exit(f"h2d_bench: ring: batch {i} feature {name} {part}: device bytes differ from the batch")
        del items
        batch.close()
    up.synchronize()

    held_bytes = 0
    held_s = 0.0
    done = 0
    while done < batches:
        taken = [client.next() for _ in range(min(hold, batches - done))]  # waits for the daemon
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for i, batch in enumerate(taken):
            held_bytes += up.upload(batch, stream.cuda_stream, dsts[(done + i) % depth])
        up.synchronize()
        held_s += time.perf_counter() - t0
        done += len(taken)
        del taken

    live_bytes = 0
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for i in range(batches):
        batch = client.next()
        live_bytes += up.upload(batch, stream.cuda_stream, dsts[i % depth])  # the uploader checks the sizes
        batch.close()  # the uploader's hold keeps the slot until the copy completed
    up.synchronize()
    torch.cuda.synchronize(device)
    live_s = time.perf_counter() - t0
    return (held_bytes, held_s), (live_bytes, live_s), check, up.registered


def collect_pageable(client, schema, batches):
    """Copies of `batches` batches in ordinary (pageable) host memory, as lists of torch tensors."""
    out = []
    for _ in range(batches):
        batch = client.next()
        out.append([torch.from_numpy(arr.copy()) for _, _, arr in parts(batch, schema)])
        batch.close()
    return out


def time_copies(name, host_batches, batches, device, non_blocking):
    """Seconds to copy every tensor of `batches` (an iterable yielding the lists of
    `host_batches`, or their pinned copies) to `device` with .to(); the last batch is then
    compared with its source. Returns (bytes, seconds)."""
    total = sum(t.numel() * t.element_size() for b in host_batches for t in b)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    last = None
    for b in batches:
        last = [t.to(device, non_blocking=non_blocking) for t in b]
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    for src, dev in zip(host_batches[-1], last):
        if not torch.equal(src, dev.cpu()):
            sys.exit(f"h2d_bench: {name}: device tensor differs from the source")
    return total, seconds


def bench_pageable(host_batches, device):
    return time_copies("pageable", host_batches, host_batches, device, non_blocking=False)


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def bench_pinned(host_batches, device):
    """The same arrays copied into page-locked host memory first (untimed), then
    .to(device, non_blocking=True): the host-to-device limit through PyTorch's own pinned memory."""
    pinned = [[t.pin_memory() for t in b] for b in host_batches]
    return time_copies("pinned", pinned, pinned, device, non_blocking=True)


def bench_dataloader(host_batches, device):
    loader = torch.utils.data.DataLoader(_ListDataset(host_batches), batch_size=None, shuffle=False,
                                         num_workers=0, pin_memory=True)
    return time_copies("dataloader", host_batches, loader, device, non_blocking=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True, help="the running ringfeedd's job")
    ap.add_argument("--runtime-dir", default=None, help="the daemon's runtime directory (default as ringfeedd)")
    ap.add_argument("--batches", type=int, default=500, help="batches per method (default 500)")
    ap.add_argument("--check", type=int, default=20, help="ring: first compare N batches on the device, untimed (default 20)")
    ap.add_argument("--depth", type=int, default=4, help="ring: device buffer sets in flight (default 4)")
    ap.add_argument("--hold", type=int, default=8,
                    help="ring (held): batches taken before each timed round; at most the job's prefetch (default 8)")
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("h2d_bench: torch sees no CUDA device; this benchmark needs an NVIDIA GPU")
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    torch.zeros(1, device=device)  # create the primary context, current on this thread

    kwargs = {"timeout": 60}
    if args.runtime_dir:
        kwargs["runtime_dir"] = args.runtime_dir
    with ringfeed.Client(args.job, **kwargs) as client:
        schema = client.schema
        held, live, checked, registered = bench_ring(client, schema, device, args.batches, args.check, args.depth,
                                                     args.hold)
        host = collect_pageable(client, schema, args.batches)
    page_bytes, page_s = bench_pageable(host, device)
    dl_bytes, dl_s = bench_dataloader(host, device)
    pin_bytes, pin_s = bench_pinned(host, device)

    print(f"job {args.job}, {args.batches} batches per method, device {torch.cuda.get_device_name(device)}, "
          f"ring {'registered by the uploader' if registered else 'registered before (not by the uploader)'}")
    print(f"{'method':<12} {'MB/batch':>9} {'seconds':>8} {'GB/s':>7}")
    for name, (nbytes, seconds) in (("ring_held", held), ("ring_live", live), ("pageable", (page_bytes, page_s)),
                                    ("dataloader", (dl_bytes, dl_s)), ("pinned", (pin_bytes, pin_s))):
        print(f"{name:<12} {nbytes / args.batches / 1e6:>9.3f} {seconds:>8.3f} {gbps(nbytes, seconds):>7.2f}")
    print(f"values checked on the device: ring {checked} batches, pageable and dataloader the last batch: equal")


if __name__ == "__main__":
    main()
