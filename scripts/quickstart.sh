#!/usr/bin/env bash
# Quickstart, step 1: install dependencies, build, write the bundled MNIST-shaped sample dataset
# (GZIP TFRecord shards under data/sample/) and run the default job over it:
#   - `ringfeedctl inspect --count` and `--schema` on the sample files,
#   - `ringfeedctl check config/examples/mnist.yaml`: one epoch read, CRC-checked and parsed into
#     batches exactly as the daemon will, with throughput.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "${JOBS:-$(nproc)}" --target ringfeedctl make_sample

if [ ! -d data/sample ]; then
  build/examples/make_sample --out data/sample --records 10000 --shards 4
fi

echo; echo "\$ ringfeedctl inspect --count data/sample/*.tfrecord.gz"
build/daemon/ringfeedctl inspect --count data/sample/*.tfrecord.gz
echo; echo "\$ ringfeedctl inspect --schema data/sample/*.tfrecord.gz"
build/daemon/ringfeedctl inspect --schema data/sample/*.tfrecord.gz
echo; echo "\$ ringfeedctl check config/examples/mnist.yaml"
build/daemon/ringfeedctl check config/examples/mnist.yaml
