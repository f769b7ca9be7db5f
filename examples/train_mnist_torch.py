#!/usr/bin/env python3
"""Train the MNIST model of the well-known tf.data article in PyTorch, fed by ringfeedd.

Model: Flatten -> Linear(784, 128) + ReLU -> Linear(128, 10) (softmax inside the loss), Adam,
cross-entropy, as in the article's Keras model. The batches come from the job `mnist`
(config/examples/mnist.yaml, the quickstart's bundled MNIST-shaped sample under data/sample)
through ringfeed.torch.RingfeedIterable and a DataLoader with batch_size=None: the images are
uint8 tensors viewing the daemon's shared-memory ring (no copy) until they are scaled to float.

    scripts/quickstart.sh                         # once: builds, writes data/sample
    export RINGFEED_RUNTIME_DIR=$PWD/build/run
    build/daemon/ringfeedd --config config/examples/mnist.yaml &
    build/pyvenv/bin/python examples/train_mnist_torch.py
    (or: build/pyvenv/bin/python examples/train_mnist_torch.py --start-daemon)

Prints loss, accuracy and examples/s per epoch, then `ringfeedctl status mnist`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ringfeed

REPO = Path(__file__).resolve().parents[1]


def start_daemon(build: Path, config: Path, job: str) -> subprocess.Popen:
    runtime = Path(os.environ.setdefault("RINGFEED_RUNTIME_DIR", str(REPO / "build" / "run")))
    runtime.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([str(build / "daemon" / "ringfeedd"), "--config", str(config)], cwd=REPO)
    deadline = time.monotonic() + 10
    while not (runtime / f"{job}.sock").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"ringfeedd --config {config} did not start (exit {proc.poll()})")
        time.sleep(0.05)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", default="mnist")
    parser.add_argument("--build", type=Path, default=REPO / "build", help="build dir with daemon/ringfeedctl")
    parser.add_argument("--start-daemon", action="store_true",
                        help="start ringfeedd --config config/examples/mnist.yaml first (and stop it at the end)")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "examples" / "mnist.yaml")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for a batch")
    args = parser.parse_args()
    try:  # after the arguments, so that --help works without PyTorch
        import torch
        from torch import nn

        from ringfeed.torch import RingfeedIterable
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        sys.exit("train_mnist_torch.py needs PyTorch: pip install './python[torch]' (PyPI's torch is a few GB; "
                 "the CPU-only wheel: pip install torch --index-url https://download.pytorch.org/whl/cpu), "
                 "or run it with build/pyvenv/bin/python, which scripts/test.sh sets up with torch")

    daemon = start_daemon(args.build, args.config, args.job) if args.start_daemon else None
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = nn.CrossEntropyLoss()
        dataset = RingfeedIterable(args.job, features=["image", "label"], timeout=args.timeout, metadata=True)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)

        epoch_start, examples, correct, loss_sum, total = time.perf_counter(), 0, 0, 0.0, 0
        for batch in loader:
            images = batch["image"].float().div_(255)  # (rows, 28, 28, 1); the uint8 view is dropped next step
            labels = batch["label"]
            logits = model(images)
            loss = loss_fn(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rows = labels.shape[0]
            examples += rows
            total += rows
            loss_sum += loss.item() * rows
            correct += (logits.argmax(1) == labels).sum().item()
            if batch["_batch"]["end_of_epoch"]:
                seconds = time.perf_counter() - epoch_start
                print(f"epoch {batch['_batch']['epoch']}: loss {loss_sum / examples:.4f}, "
                      f"accuracy {correct / examples:.3f}, {examples} examples in {seconds:.2f} s = "
                      f"{examples / seconds:,.0f} examples/s", flush=True)
                epoch_start, examples, correct, loss_sum = time.perf_counter(), 0, 0, 0.0
        print(f"trained on {total} examples", flush=True)

        ctl = args.build / "daemon" / "ringfeedctl"
        print(f"\n$ ringfeedctl status {args.job}", flush=True)
        status = subprocess.run([str(ctl), "status", args.job])
        if status.returncode != 0:
            print(f"(ringfeedctl status exited {status.returncode}; the daemon may have ended with the data)")
        return 0 if total > 0 else 1
    except ringfeed.ClientError as e:
        print(f"train_mnist_torch: {e}", file=sys.stderr)
        return 1
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(10)


if __name__ == "__main__":
    sys.exit(main())
