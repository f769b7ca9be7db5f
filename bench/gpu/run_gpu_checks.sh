#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one run: ringfeed.torch's CUDA path delivers the same
# bytes as its CPU path (cuda_equal_check.py: the taxi job's fixed and varlen features, the MNIST
# job's decode: raw images; on the current stream and on a side stream), then host-to-device
# GB/s of the uploader against pageable and DataLoader(pin_memory=True) copies (h2d_bench.py)
# for 100 KB and 3.2 MB batches. Every step prints its result; the script stops at the first
# failure with the step's output.
#
#   bench/gpu/run_gpu_checks.sh
#
# Environment (all optional):
#   RINGFEED_BUILD_DIR  build with ringfeedd and make_sample (default: <repo>/build)
#   PYTHON              a python with torch (CUDA) and the ringfeed package (default: python3)
#   TFX_DATA            TFX's testdata folder (default: <repo>/../shared/data/tfx)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${RINGFEED_BUILD_DIR:-$REPO/build}
PY=${PYTHON:-python3}
export TFX_DATA=${TFX_DATA:-$REPO/../shared/data/tfx}
WORK=$(mktemp -d /tmp/ringfeed-gpu.XXXXXX)
export RINGFEED_RUNTIME_DIR=$WORK/run RINGFEED_DATA=$WORK/mnist
mkdir -p "$RINGFEED_RUNTIME_DIR"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BUILD/examples/make_sample" --out "$RINGFEED_DATA" --records 10000 --shards 4 > /dev/null

# $1 job name, $2 example config, $3 epochs, $4 batch size ("" = the example's), $5 prefetch ("" = the example's)
write_config() {
  sed -e "s/^job: .*/job: $1/" -e "s/^epochs: .*/epochs: $3/" -e "s/^log_level: .*/log_level: warn/" \
      ${4:+-e "s/^  size: .*/  size: $4/"} ${5:+-e "s/^  prefetch: .*/  prefetch: $5/"} \
      "$REPO/config/examples/$2.yaml" > "$WORK/$1.yaml"
}
start() {  # $1 job
  "$BUILD/daemon/ringfeedd" --config "$WORK/$1.yaml" --exit-when-done > "$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    [[ -S "$RINGFEED_RUNTIME_DIR/$1.sock" ]] && return 0
    sleep 0.1
  done
  echo "run_gpu_checks: ringfeedd for $1 did not start:" >&2
  cat "$WORK/$1.log" >&2
  exit 1
}
step() {  # $1 title, rest: command
  echo "== $1"
  "${@:2}"
}

for job in taxi-a taxi-b; do write_config "$job" taxi 2 ""; done
for job in mnist-a mnist-b; do write_config "$job" mnist 1 ""; done
# prefetch 16: h2d_bench holds 8 batches before each timed round of uploads
write_config mnist-forever mnist 0 "" 16
write_config mnist-big mnist 0 4096 16  # 4096 x 792 bytes: 3.2 MB batches

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c 'import torch, ringfeed; print("torch", torch.__version__, "cuda", torch.version.cuda, "ringfeed", ringfeed.__file__)'

for side in "" --side-stream; do
  start taxi-a; start taxi-b
  step "taxi: cuda == cpu ${side:-(current stream)}" \
    "$PY" "$REPO/bench/gpu/cuda_equal_check.py" --job-cuda taxi-a --job-cpu taxi-b $side
  start mnist-a; start mnist-b
  step "mnist: cuda == cpu ${side:-(current stream)}" \
    "$PY" "$REPO/bench/gpu/cuda_equal_check.py" --job-cuda mnist-a --job-cpu mnist-b $side
  wait  # the four daemons exit once every batch was released
  PIDS=()
done

start mnist-forever
step "h2d: MNIST batches of 128 (0.1 MB)" "$PY" "$REPO/bench/gpu/h2d_bench.py" --job mnist-forever --batches 500
start mnist-big
step "h2d: MNIST batches of 4096 (3.2 MB)" "$PY" "$REPO/bench/gpu/h2d_bench.py" --job mnist-big --batches 200
echo "run_gpu_checks: all checks passed"
