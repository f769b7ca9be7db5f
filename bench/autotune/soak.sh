#!/usr/bin/env bash
# Soak test of ringfeedd's memory under the autotuner (issue 4, §4): one job, every knob `auto`,
# `epochs: 0`, local files (page cache), taken by consume_bench (every byte read) for 5 minutes.
# Every second consume_bench samples the daemon's private RSS (RssAnon) and its status (segment
# size, knobs). Asserts:
#   - flat RSS: the least-squares slope of RssAnon while the knobs stay the same is below
#     RINGFEED_SOAK_MAX_SLOPE KiB per minute (default 50, i.e. < 200 KiB over 4 minutes). It is
#     fitted within the stretches between the tuner's changes of a knob that moves memory
#     (readers, read-ahead, reads_per_file, workers, prefetch), each stretch with a level of its
#     own, leaving out the first minute (the warm-up: read-ahead buffers, malloc arenas, the
#     tuner settling) and 60 s after each change (its step: a new thread's malloc arena, more
#     open files, settles within that); a leak grows within the stretches too. At least 40% of
#     the run (120 s of 300) in such stretches is needed (else FAIL, "not judged"). The slope
#     over everything after the first minute, steps included, is printed too (the assertion
#     before session 11: a worker added at 166 s of a 5-minute soak made it +99 KiB/min, with
#     RssAnon flat before the change and from 60 s after it);
#   - under the budget: RssAnon + segment <= pipeline.memory_budget in every sample and at the
#     peak (RssAnon sampled every 20 ms by consume_bench).
# Prints the figures and PASS or FAIL; exit status 0 on PASS, 1 on FAIL, 2 when it cannot run.
# Also printed, not asserted: the slope's standard error (RssAnon follows the read-ahead's fill,
# +-10 MiB from second to second, so 5 minutes resolve a slope only to a few hundred KiB/min:
# "inconclusive" when twice the standard error exceeds the limit) and the slope after the
# tuner's last change of a knob (each moves memory: readers and read-ahead the buffered bytes,
# workers and prefetch the batches in flight), when that leaves >= 1 minute.
#
#   bench/autotune/soak.sh
#   RINGFEED_SOAK_SECONDS=60 bench/autotune/soak.sh     # a short look (slope over the last 4/5)
#
# Environment (all optional): RINGFEED_BENCH_BUILD (Release build dir, default <repo>/../build-bench;
# built if missing), RINGFEED_BENCH_DIR (data, default /tmp/ringfeed-bench; the taxi_plain_x4 set
# of run_autotune_bench.sh, made if missing), RINGFEED_SOAK_SECONDS (300), RINGFEED_SOAK_MAX_SLOPE
# (50 KiB/min), RINGFEED_SOAK_BUDGET (memory_budget, 256MiB), RINGFEED_AUTOTUNE_CPUS (cores,
# default all), RINGFEED_BENCH_NICE (e.g. -10), RINGFEED_SOAK_FILES (a glob of other TFRecord files
# to soak on instead of taxi_plain_x4, compression detected, e.g. the TFX taxi GZIP files,
# "$REPO/../shared/data/tfx/csv_example_gen/Split-train/*.gz": 12 files of 34 KB, ~2,400 file
# opens a second). Writes the samples to
# $RINGFEED_BENCH_DIR/results/soak-<time>.json.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${RINGFEED_BENCH_BUILD:-$REPO/../build-bench}
DATA=${RINGFEED_BENCH_DIR:-/tmp/ringfeed-bench}
RUN_SECONDS=${RINGFEED_SOAK_SECONDS:-300}
MAX_SLOPE=${RINGFEED_SOAK_MAX_SLOPE:-50}
BUDGET=${RINGFEED_SOAK_BUDGET:-256MiB}
CPUS=${RINGFEED_AUTOTUNE_CPUS:-0-$(($(nproc) - 1))}
NICE=${RINGFEED_BENCH_NICE:-}
X4="$DATA/taxi_plain_x4"
PIN=(taskset -c "$CPUS")
[[ -n "$NICE" ]] && PIN=(nice -n "$NICE" "${PIN[@]}")

if [[ ! -x "$BUILD/daemon/ringfeedd" || ! -x "$BUILD/bench/consume_bench" ]]; then
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGFEED_BENCH=ON
  fi
  ninja -C "$BUILD" -j2 ringfeedd consume_bench make_bench_data
fi
if [[ $(find "$X4" -name '*.tfrecord' 2>/dev/null | wc -l) != 32 ]]; then
  "$BUILD/bench/make_bench_data" --out "$DATA" --taxi "${RINGFEED_TAXI_DIR:-$REPO/../shared/data/tfx/csv_example_gen/Split-train}"
  mkdir -p "$X4"
  for r in 0 1 2 3; do
    for f in "$DATA"/taxi_plain/part-*.tfrecord; do ln -f "$f" "$X4/$(basename "$f" .tfrecord)-r$r.tfrecord"; done
  done
fi

WORK=$(mktemp -d /tmp/ringfeed-soak.XXXXXX)
DAEMON_PID=""
cleanup() {
  if [[ -n "$DAEMON_PID" ]]; then kill "$DAEMON_PID" 2>/dev/null || true; wait "$DAEMON_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/run" "$DATA/results"
OUT="$DATA/results/soak-$(date +%Y%m%d-%H%M%S).json"

{
  echo "job: soak"
  if [[ -n "${RINGFEED_SOAK_FILES:-}" ]]; then
    echo "source: {files: [\"$RINGFEED_SOAK_FILES\"], compression: auto}"
  else
    echo "source: {files: [\"$X4/*.tfrecord\"], compression: none}"
  fi
  echo "features:"
  while read -r name kind dtype; do
    if [[ $kind == fixed ]]; then echo "  $name: {dtype: $dtype}"; else echo "  $name: {type: varlen, dtype: $dtype}"; fi
  done < "$DATA/taxi.schema"
  echo "batch: {size: 256}"
  echo "epochs: 0"
  echo "pipeline: {memory_budget: $BUDGET}"
} > "$WORK/soak.yaml"

cat "$DATA"/taxi_plain/part-*.tfrecord > /dev/null  # page cache
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "soak: ${RUN_SECONDS} s, autotune, local files, memory_budget $BUDGET, cores $CPUS${NICE:+, nice $NICE};" \
     "load $LOAD_START" >&2
"${PIN[@]}" "$BUILD/daemon/ringfeedd" --config "$WORK/soak.yaml" --runtime-dir "$WORK/run" \
  --log-level debug > "$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
if ! "${PIN[@]}" "$BUILD/bench/consume_bench" --job soak --runtime-dir "$WORK/run" --seconds "$RUN_SECONDS" \
       --timeline "$WORK/timeline.json" --status-every 1 > "$WORK/result.json" 2> "$WORK/err"; then
  echo "soak: consume_bench failed: $(tail -3 "$WORK/err") / daemon: $(tail -3 "$WORK/daemon.log")" >&2
  exit 2
fi
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=""

python3 - "$WORK/timeline.json" "$WORK/result.json" "$OUT" "$MAX_SLOPE" "$LOAD_START" "$WORK/daemon.log" <<'PY'
import json, math, sys
timeline, result = json.load(open(sys.argv[1])), json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
out, max_slope, load_start = sys.argv[3], float(sys.argv[4]), sys.argv[5]
changes = [l.split("autotune: ", 1)[1].strip() for l in open(sys.argv[6]) if "autotune:" in l and " -> " in l]
samples = [s for s in timeline["samples"] if "status_error" not in s and s.get("memory")]
run = result["seconds"]
warmup = run / 5  # the first minute of five


def fit(ss):
    """Least-squares slope of RssAnon in KiB/min, its standard error, min and max in MiB."""
    b, se = fit_within([ss])
    ys = [s["rss_anon_bytes"] / 2**20 for s in ss]
    return b, se, min(ys), max(ys)


def fit_within(stretches):
    """The slope common to several stretches, each with a level of its own (least squares on the
    values centred within each stretch): what RssAnon does while the knobs stay the same, with
    the step a change of knobs makes left out. KiB/min and its standard error."""
    centred = []
    for ss in stretches:
        xs = [s["t"] / 60 for s in ss]
        ys = [s["rss_anon_bytes"] / 1024 for s in ss]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        centred += [(x - mx, y - my) for x, y in zip(xs, ys)]
    sxx = sum(x * x for x, _ in centred)
    b = sum(x * y for x, y in centred) / sxx
    resid = sum((y - b * x) ** 2 for x, y in centred)
    return b, math.sqrt(resid / max(1, len(centred) - len(stretches) - 1) / sxx)


tail = [s for s in samples if s["t"] >= warmup]
slope_all, se_all, lo, hi = fit(tail)
# Every knob moves memory: readers (open files), read-ahead per file, workers and prefetch
# (batches in flight). A change is a step (a new thread's malloc arena, more open files), which
# settles within SETTLE seconds; the slope asserted is the one within the stretches between
# changes, after the warm-up and each change's settling (a leak grows there too).
SETTLE = 60
memory_knobs = lambda s: tuple(s["pipeline"].get(k) for k in ("readers", "read_ahead_per_file_bytes", "reads_per_file",
                                                               "workers", "prefetch"))
change_times = [s["t"] for a, s in zip(samples, samples[1:]) if memory_knobs(a) != memory_knobs(s)]
last_change = max(change_times, default=0.0)
settled = [s for s in samples if s["t"] >= last_change]
stretches = []
edges = [0.0] + change_times + [float("inf")]
for a, b in zip(edges, edges[1:]):  # between two changes (or the start and the end)
    start = max(warmup, a + SETTLE if a > 0 else 0.0)
    ss = [s for s in samples if start <= s["t"] < b]
    if len(ss) >= 10 and ss[-1]["t"] - ss[0]["t"] >= 20:
        stretches.append(ss)
covered = sum(ss[-1]["t"] - ss[0]["t"] for ss in stretches)
MIN_COVERED = 0.4 * run  # seconds of settled stretches needed to judge a slope at all (120 of 300)
slope, se = fit_within(stretches) if stretches else (slope_all, se_all)
budget = result["budget_bytes"]
seg = result["segment_bytes"]
worst_sample = max(s["rss_anon_bytes"] + s["memory"]["segment_bytes"] for s in samples)
peak = result["daemon_rss_anon_peak_bytes"] + seg
flat = slope < max_slope and covered >= MIN_COVERED
under = budget is not None and worst_sample <= budget and peak <= budget
knobs = samples[-1]["pipeline"]
print(f"soak: {run:.0f} s, {result['examples']:,} examples ({result['examples_per_s']:,.0f}/s), "
      f"{len(samples)} samples, load {load_start} -> {open('/proc/loadavg').read().split()[0]}")
print(f"  RssAnon: {tail[0]['rss_anon_bytes'] / 2**20:.1f} MiB at {tail[0]['t']:.0f} s, "
      f"{tail[-1]['rss_anon_bytes'] / 2**20:.1f} MiB at the end, {lo:.1f}-{hi:.1f} MiB after the first {warmup:.0f} s")
print(f"  slope while the knobs stay the same (least squares within {len(stretches)} stretches, {covered:.0f} s "
      f"after the first {warmup:.0f} s and {SETTLE} s after each change): {slope:+.0f} KiB/min, standard error"
      f" {se:.0f} (limit {max_slope:g}): "
      + ("flat" if flat else "GROWING" if covered >= MIN_COVERED else f"not judged: under {MIN_COVERED:.0f} s settled")
      + ("; inconclusive at this limit (2 x standard error > limit)" if 2 * se > max_slope else ""))
print(f"  slope over everything after the first {warmup:.0f} s, changes' steps included: {slope_all:+.0f} KiB/min, "
      f"standard error {se_all:.0f}")
if last_change > warmup and run - last_change >= 60:
    s2, se2, lo2, hi2 = fit(settled)
    print(f"  after the tuner's last change ({last_change:.0f} s): {s2:+.0f} KiB/min, standard error"
          f" {se2:.0f}, RssAnon {lo2:.1f}-{hi2:.1f} MiB")
print(f"  RssAnon + segment: peak {peak / 2**20:.1f} MiB (20 ms sampling), worst 1 s sample "
      f"{worst_sample / 2**20:.1f} MiB, budget {budget / 2**20:.0f} MiB: {'under' if under else 'OVER'}")
print(f"  knobs at the end: readers {knobs['readers']}, workers {knobs['workers']}, prefetch {knobs['prefetch']}, "
      f"read-ahead {knobs['read_ahead_per_file_bytes'] >> 10} KiB per file; {len(changes)} tuner changes, the last"
      f" at {last_change:.0f} s")
json.dump({"result": result, "slope_kib_per_min": slope, "slope_standard_error": se, "max_slope_kib_per_min": max_slope,
           "slope_all_kib_per_min": slope_all, "slope_all_standard_error": se_all, "stretch_seconds": covered,
           "settle_seconds": SETTLE,
           "warmup_seconds": warmup, "last_memory_knob_change_seconds": last_change, "peak_bytes": peak,
           "worst_sample_bytes": worst_sample, "budget_bytes": budget, "load_start": load_start, "changes": changes,
           "samples": [{"t": s["t"], "rss_anon_bytes": s["rss_anon_bytes"], "segment_bytes": s["memory"]["segment_bytes"],
                        "tasks": s["tasks"], "pipeline": s["pipeline"]} for s in samples]}, open(out, "w"))
print(f"  samples: {out}")
print("PASS" if flat and under else "FAIL")
sys.exit(0 if flat and under else 1)
PY
