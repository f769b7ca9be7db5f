#!/usr/bin/env bash
# Quickstart, step 1: install dependencies, build, write the bundled MNIST-shaped sample dataset
# (GZIP TFRecord shards under data/sample/, written by ringfeed's own TFRecord writer), then run
# the default job end to end:
#   - ringfeedd serves config/examples/mnist.yaml (2 epochs) from a shared-memory ring,
#   - examples/example_trainer (C++, linked with the client library only) takes every batch,
#     touching every byte, and prints examples/s per epoch,
#   - `ringfeedctl status mnist` prints the daemon's status table, then the daemon is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "${JOBS:-$(nproc)}" --target ringfeedd ringfeedctl make_sample example_trainer

# RINGFEED_DATA=DIR: MNIST-shaped shards from elsewhere (config/examples/mnist.yaml reads
# ${RINGFEED_DATA:-data/sample}/mnist-*.tfrecord.gz); the bundled sample is written otherwise.
data="${RINGFEED_DATA:-data/sample}"
if [ -z "${RINGFEED_DATA:-}" ] && [ ! -d data/sample ]; then
  build/examples/make_sample --out data/sample --records 10000 --shards 4
fi

# A private runtime directory, so the quickstart never meets another ringfeedd of the same job.
export RINGFEED_RUNTIME_DIR="$PWD/build/run"
mkdir -p "$RINGFEED_RUNTIME_DIR"

echo; echo "\$ ringfeedctl inspect --schema $data/mnist-*.tfrecord.gz"
build/daemon/ringfeedctl inspect --schema "$data"/mnist-*.tfrecord.gz

echo
echo "# config/examples/mnist.yaml takes that block, with 'image' read as 784 uint8 pixels"
echo "# (dtype: uint8, shape: [28, 28, 1], decode: raw) instead of one bytes string: docs/config.md"
echo "\$ ringfeedd --config config/examples/mnist.yaml &"
build/daemon/ringfeedd --config config/examples/mnist.yaml &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do  # wait for the control socket (at most 10 s)
  [ -S "$RINGFEED_RUNTIME_DIR/mnist.sock" ] && break
  kill -0 $daemon 2>/dev/null || { echo "ringfeedd did not start" >&2; exit 1; }
  sleep 0.1
done

echo; echo "\$ example_trainer --job mnist"
build/examples/example_trainer --job mnist

echo; echo "\$ ringfeedctl status mnist"
build/daemon/ringfeedctl status mnist

echo; echo "\$ kill -TERM ringfeedd"
kill -TERM $daemon
wait $daemon
trap - EXIT
echo
echo "# Next: your own data (README.md, \"Using it on your data\"); a longer run for a steadier"
echo "# rate: RINGFEED_EPOCHS=50 scripts/quickstart.sh"

