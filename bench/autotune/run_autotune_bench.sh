#!/usr/bin/env bash
# The autotuner's benchmark (issue 4, §4): ringfeedd with every knob `auto` against the grid of
# fixed settings readers {1,2,4,8,16} x workers {1,2} x prefetch {2,8} and against tf.data
# (AUTOTUNE, num_parallel_reads=16, the article's pipeline with num_parallel_calls=2), on local
# files and on slowfs mounts with 2 ms and 20 ms per read. Builds what it needs (Release), makes
# the data once, runs bench/autotune/autotune_bench.py (the driver: what is measured and how is
# in its docstring and in bench/README.md), which writes one JSON file and prints markdown
# tables with the targets met or missed. About 30 minutes on the 2-core machine.
#
#   bench/autotune/run_autotune_bench.sh
#   RINGFEED_AUTOTUNE_SCENARIOS=slow20 bench/autotune/run_autotune_bench.sh   # one scenario
#   RINGFEED_BENCH_JSON=/tmp/ringfeed-bench/results/autotune-....json bench/autotune/run_autotune_bench.sh  # tables only
#   then: ../tfvenv/bin/python bench/autotune/plot_autotune.py RESULT.json   (charts into docs/img/)
#
# Environment (all optional):
#   RINGFEED_BENCH_BUILD        build directory               (default: <repo>/../build-bench)
#   RINGFEED_BENCH_DIR          data + results directory      (default: /tmp/ringfeed-bench)
#   RINGFEED_TAXI_DIR           the real taxi TFRecords       (default: <repo>/../shared/data/tfx/csv_example_gen/Split-train)
#   RINGFEED_TFVENV             venv with tensorflow-cpu      (default: <repo>/../tfvenv; missing = no tf.data rows)
#   RINGFEED_AUTOTUNE_CPUS      cores for every contender     (default: all, e.g. 0-1)
#   RINGFEED_AUTOTUNE_SCENARIOS local,slow2,slow20            (default: all three; also slow20tail)
#   RINGFEED_AUTOTUNE_SECONDS   each run, from its first batch (default: 15)
#   RINGFEED_AUTOTUNE_STEADY    the last part called steady    (default: 5)
#   RINGFEED_AUTOTUNE_ARGS      more driver options, e.g. "--readers 1,4,16 --workers 1 --prefetch 2"
#   RINGFEED_BENCH_NICE         e.g. -10: run the contenders at that nice level (negative needs root)
#   RINGFEED_BENCH_JSON         an existing result file: only print its tables (no build, no run)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${RINGFEED_BENCH_BUILD:-$REPO/../build-bench}
DATA=${RINGFEED_BENCH_DIR:-/tmp/ringfeed-bench}
TAXI=${RINGFEED_TAXI_DIR:-$REPO/../shared/data/tfx/csv_example_gen/Split-train}
TFVENV=${RINGFEED_TFVENV:-$REPO/../tfvenv}
CPUS=${RINGFEED_AUTOTUNE_CPUS:-0-$(($(nproc) - 1))}
SCENARIOS=${RINGFEED_AUTOTUNE_SCENARIOS:-local,slow2,slow20}
SECONDS_PER_RUN=${RINGFEED_AUTOTUNE_SECONDS:-15}
STEADY=${RINGFEED_AUTOTUNE_STEADY:-5}
NICE=${RINGFEED_BENCH_NICE:-0}
DRIVER="$REPO/bench/autotune/autotune_bench.py"

if [[ -n "${RINGFEED_BENCH_JSON:-}" ]]; then
  exec python3 "$DRIVER" --json "$RINGFEED_BENCH_JSON"
fi

# ---- build (Release) ----
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGFEED_BENCH=ON
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
if [[ "$build_type" != "Release" ]]; then
  echo "run_autotune_bench: $BUILD is a '$build_type' build; use a Release build dir (RINGFEED_BENCH_BUILD)" >&2
  exit 1
fi
ninja -C "$BUILD" -j2 ringfeedd consume_bench make_bench_data slowfs
if [[ ! -x "$BUILD/bench/slowfs/slowfs" ]]; then
  echo "run_autotune_bench: no slowfs in $BUILD (needs libfuse3-dev and fuse3: scripts/install-deps.sh)" >&2
  exit 1
fi

# ---- data: taxi_plain (make_bench_data), its 8 files hard-linked 4 times ----
# 32 files of 25 MB, so that 16 readers (plus the 4 files of the interleave's cycle) have files
# to read in parallel within one epoch; the links share their page cache, 200 MB in all.
"$BUILD/bench/make_bench_data" --out "$DATA" --taxi "$TAXI"
X4="$DATA/taxi_plain_x4"
if [[ $(find "$X4" -name '*.tfrecord' 2>/dev/null | wc -l) != 32 ]]; then
  mkdir -p "$X4"
  for r in 0 1 2 3; do
    for f in "$DATA"/taxi_plain/part-*.tfrecord; do
      ln -f "$f" "$X4/$(basename "$f" .tfrecord)-r$r.tfrecord"
    done
  done
fi

PY=""
if [[ -x "$TFVENV/bin/python" ]] && "$TFVENV/bin/python" -c 'import tensorflow' 2>/dev/null; then
  PY="$TFVENV/bin/python"
else
  echo "run_autotune_bench: no TensorFlow in $TFVENV (python3 -m venv $TFVENV && $TFVENV/bin/pip install tensorflow-cpu);" \
       "the tf.data rows are left out" >&2
fi

# shellcheck disable=SC2086  # RINGFEED_AUTOTUNE_ARGS is a list of options
exec python3 "$DRIVER" --build "$BUILD" --data "$DATA" --set taxi_plain_x4 --python "$PY" --cpus "$CPUS" \
  --nice "$NICE" --scenarios "$SCENARIOS" --seconds "$SECONDS_PER_RUN" --steady "$STEADY" ${RINGFEED_AUTOTUNE_ARGS:-}
