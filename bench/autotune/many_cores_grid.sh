#!/usr/bin/env bash
# Autotune against a few fixed settings on a machine with many cores (written for the 16-core
# GPU machine of session 33; on the 2-core development machine the grid of run_autotune_bench.sh
# is the one to use). Data: the MNIST-shaped sample (make_sample) at 200,000 records in 16 GZIP
# files, batches of 1,024, cycle_length 8 (and 16), page cache warm; consumer: consume_bench (C++,
# reads every byte). Each setting runs alone: the daemon, then the consumer for N seconds, then
# `ringfeedctl status` (whose "last 10 s" throughput is the figure for the autotuned runs, which
# ramp up first). Prints one line per setting; the status of each goes to $OUT (if set).
#
#   bench/autotune/many_cores_grid.sh
#
# Environment (all optional):
#   RINGFEED_BENCH_BUILD   build with ringfeedd, ringfeedctl, consume_bench, make_sample
#                          (default: <repo>/../build-bench)
#   RINGFEED_GRID_DIR      data and runtime directory (default: /tmp/ringfeed-grid)
#   OUT                    where each setting's status is written (default: not kept)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${RINGFEED_BENCH_BUILD:-$REPO/../build-bench}
W=${RINGFEED_GRID_DIR:-/tmp/ringfeed-grid}
mkdir -p "$W/run"
export RINGFEED_RUNTIME_DIR=$W/run
[[ -f $W/data/MANIFEST || -n $(ls "$W"/data/*.gz 2>/dev/null) ]] ||
  "$B/examples/make_sample" --out "$W/data" --records 200000 --shards 16 | tail -1
cat "$W"/data/*.gz > /dev/null  # page cache warm

config() {  # $1 name, $2 cycle_length, $3 readers, $4 workers, $5 prefetch, $6 read_ahead
  cat > "$W/$1.yaml" <<EOF
job: $1
source: {files: ["$W/data/mnist-*.tfrecord.gz"], compression: gzip}
features:
  image: {dtype: uint8, decode: raw, shape: [28, 28, 1]}
  label: {dtype: int64, default: -1}
batch: {size: 1024}
shuffle: {files: true, buffer: 10000, seed: 0}
epochs: 0
pipeline: {cycle_length: $2, readers: $3, workers: $4, prefetch: $5, read_ahead: $6}
log_level: warn
EOF
}
run() {  # $1 name, $2 seconds
  "$B/daemon/ringfeedd" --config "$W/$1.yaml" > "$W/$1.log" 2>&1 &
  local daemon=$! result status
  result=$("$B/bench/consume_bench" --job "$1" --runtime-dir "$W/run" --attach-timeout 10 --seconds "$2" 2>&1 | tail -1)
  status=$("$B/daemon/ringfeedctl" status "$1")
  kill "$daemon"; wait "$daemon"
  [[ -n ${OUT:-} ]] && echo "$status" > "$OUT/status-$1.txt"
  echo "$1 | consumer $(grep -o '"examples_per_s":[0-9.]*' <<<"$result") | $(grep '^throughput' <<<"$status" | cut -c12-60)" \
       "| $(grep '^pipeline' <<<"$status" | cut -c12-) | $(grep -m1 'CPU:' <<<"$status" | sed 's/ *CPU: //' | cut -c1-18)"
}

echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
config auto 8 auto auto auto auto;        run auto 20
config r8w2ra256k 8 8 2 8 256KiB;         run r8w2ra256k 8
config r8w2ra4m 8 8 2 8 4MiB;             run r8w2ra4m 8
config r16w4ra4m 8 16 4 8 4MiB;           run r16w4ra4m 8
config r8w4ra1m 8 8 4 8 1MiB;             run r8w4ra1m 8
config r4w2ra1m 8 4 2 8 1MiB;             run r4w2ra1m 8
config c16r16w4ra1m 16 16 4 8 1MiB;       run c16r16w4ra1m 8
config c16auto 16 auto auto auto auto;    run c16auto 20
