#!/usr/bin/env bash
# Builds format_bench (Release) if needed, generates the benchmark data once, runs the benchmark
# pinned to one core and prints the figures beside the ceilings measured in the same run, with
# the ratios and targets. Takes about 2-3 minutes (plus about 10 s the first time, for the data).
#
#   bench/run_format_bench.sh [extra Google Benchmark flags, e.g. --benchmark_filter=taxi]
#
# Environment (all optional):
#   RINGFEED_BENCH_BUILD  build directory           (default: <repo>/../build-bench)
#   RINGFEED_BENCH_DIR    data + results directory  (default: /tmp/ringfeed-bench), outside the repo
#   RINGFEED_TAXI_DIR     the real taxi TFRecords   (default: <repo>/../shared/data/tfx/csv_example_gen/Split-train)
#   RINGFEED_BENCH_CPU    the core to pin to        (default: 1)
#   RINGFEED_BENCH_REPS   repetitions; the median is reported (default: 5)
#   RINGFEED_BENCH_MIN_TIME  seconds per repetition (default: 0.5)
#   RINGFEED_BENCH_BATCH  rows per ExampleBatch     (default: 1024)
#   RINGFEED_BENCH_NICE   e.g. -10: run format_bench at that nice level, so that other work on a
#                         shared machine is scheduled on the other core(s) (negative needs root)
#   RINGFEED_BENCH_JSON   an existing result file: only print its table (no build, no run)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${RINGFEED_BENCH_BUILD:-$REPO/../build-bench}
DATA=${RINGFEED_BENCH_DIR:-/tmp/ringfeed-bench}
TAXI=${RINGFEED_TAXI_DIR:-$REPO/../shared/data/tfx/csv_example_gen/Split-train}
CPU=${RINGFEED_BENCH_CPU:-1}
REPS=${RINGFEED_BENCH_REPS:-5}
MIN_TIME=${RINGFEED_BENCH_MIN_TIME:-0.5}
BATCH=${RINGFEED_BENCH_BATCH:-1024}
JSON=${RINGFEED_BENCH_JSON:-}
NICE=${RINGFEED_BENCH_NICE:-}

if [[ -z "$JSON" ]]; then
  # ---- build (Release) ----
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGFEED_BENCH=ON
  fi
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
  if [[ "$build_type" != "Release" ]]; then
    echo "run_format_bench: $BUILD is a '$build_type' build; use a Release build dir (RINGFEED_BENCH_BUILD)" >&2
    exit 1
  fi
  ninja -C "$BUILD" format_bench make_bench_data

  # ---- data (generated once, reused) ----
  "$BUILD/bench/make_bench_data" --out "$DATA" --taxi "$TAXI"

  # ---- machine ----
  echo
  echo "pinned to core $CPU${NICE:+, nice $NICE}, $REPS repetitions of >= ${MIN_TIME} s, batch $BATCH rows"
  echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
       "$(${CXX:-c++} --version | head -1)," \
       "ISA-L $(pkg-config --modversion libisal 2>/dev/null || echo '?')," \
       "zlib $(pkg-config --modversion zlib 2>/dev/null || echo '?')," \
       "kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"

  # ---- run ----
  mkdir -p "$DATA/results"
  JSON="$DATA/results/format_bench-$(date +%Y%m%d-%H%M%S).json"
  # Repetitions of all benchmarks run in random order, so that a busy spell on a shared machine
  # spreads over all of them instead of skewing one ratio. The console shows the medians only;
  # every repetition is in the JSON file.
  ${NICE:+nice -n "$NICE"} taskset -c "$CPU" "$BUILD/bench/format_bench" --data_dir="$DATA" --batch="$BATCH" \
    --benchmark_repetitions="$REPS" --benchmark_min_time="$MIN_TIME" --benchmark_min_warmup_time=0.1 \
    --benchmark_display_aggregates_only=true --benchmark_enable_random_interleaving=true \
    --benchmark_out="$JSON" --benchmark_out_format=json "$@" 2>&1 |
    awk '!/_(mean|stddev|cv) /'
  echo
  echo "results: $JSON"
fi

# ---- table ----
python3 - "$JSON" "$DATA" <<'PY'
import json, os, sys

path, data_dir = sys.argv[1], sys.argv[2]
doc = json.load(open(path))
runs = {}
for b in doc["benchmarks"]:
    if b.get("run_type") == "aggregate":
        if b.get("aggregate_name") == "median":
            runs[b["run_name"]] = b
    elif b["run_name"] not in runs:  # a single repetition has no aggregates
        runs[b["run_name"]] = b
spread = []  # (real - cpu) / cpu per benchmark: other load on the pinned core shows up here
for b in doc["benchmarks"]:
    if b.get("run_type") == "iteration" and b.get("cpu_time"):
        spread.append((b["real_time"] - b["cpu_time"]) / b["cpu_time"])

def get(name, key):
    b = runs.get(name)
    return None if b is None or b.get("error_occurred") else b.get(key)

def rate(name, key="bytes_per_second"):
    return get(name, key)

def fmt(v, unit, scale, digits=2):
    return "n/a" if v is None else f"{v / scale:.{digits}f} {unit}"

def ratio(a, b):
    return None if a is None or not b else a / b

def verdict(r, target):
    if r is None:
        return "n/a"
    return f"{'met' if r >= target else 'MISSED'} (>= {target:.2f})"

def manifest(name):
    kv = {}
    try:
        for line in open(os.path.join(data_dir, name, "MANIFEST")):
            k, _, v = line.strip().partition("=")
            kv[k] = v
    except OSError:
        pass
    return kv

rows = []
def row(what, figure, vs="", r=None, r2=None, target=None):
    rows.append((what, figure, vs, "" if r is None else f"{r:.2f}", "" if r2 is None else f"{r2:.2f}",
                 "" if target is None else verdict(r, target)))

GB, M = 1e9, 1e6
print()
print(f"## format_bench ({doc['context'].get('date', '')}, {os.path.basename(path)})")
print()
print("Medians of the repetitions, CPU time of the one pinned core. `ceiling (ring)`: the copy lands in a"
      " 256 MiB ring (DRAM); `ceiling (cached)`: in one 1 MiB buffer (the stricter ceiling).")
print()
print("### Ceilings (same run)")
print()
print("| ceiling | throughput | records/s over the same files |")
print("| --- | --- | --- |")
print(f"| memcpy 256 MiB | {fmt(rate('ceiling/memcpy_256MiB'), 'GB/s', GB)} | |")
for ds in ("taxi_plain", "bytes100k_plain"):
    for kind, label in (("read_crc_copy", "ring"), ("read_crc_copy_cached", "cached")):
        n = f"ceiling/{kind}/{ds}"
        print(f"| read 1 MiB + CRC-32C + memcpy ({label}), {ds} | {fmt(rate(n), 'GB/s', GB)} |"
              f" {fmt(rate(n, 'items_per_second'), 'M/s', M, 3)} |")
for ds in ("text100k_gzip", "taxi_gzip"):
    for lib in ("isal", "zlib"):
        n = f"ceiling/inflate_raw/{ds}/{lib}"
        print(f"| raw inflate {lib}, {ds} (GB/s of output) | {fmt(rate(n), 'GB/s', GB)} |"
              f" {fmt(rate(n, 'items_per_second'), 'M/s', M, 3)} |")

print()
print("### Workloads")
print()
print("| workload | figure | compared with | ratio | ratio (stricter ceiling) | target |")
print("| --- | --- | --- | --- | --- | --- |")

# a) taxi plain: records/s vs read+CRC+copy in records/s (ceiling bytes/s / mean record size).
taxi = manifest("taxi_plain")
mean_rec = int(taxi["stream_bytes"]) / int(taxi["records"]) if taxi else None
rec = rate("reader_parse/taxi_plain", "items_per_second")
ceil_ring = rate("ceiling/read_crc_copy/taxi_plain")
ceil_cached = rate("ceiling/read_crc_copy_cached/taxi_plain")
c_ring = ceil_ring / mean_rec if ceil_ring and mean_rec else None
c_cached = ceil_cached / mean_rec if ceil_cached and mean_rec else None
row(f"a) taxi plain, reader + parse (18 features, {mean_rec:.0f} B/record framed)" if mean_rec else "a) taxi plain",
    fmt(rec, "M records/s", M, 3),
    f"read+CRC+copy {fmt(c_ring, 'M rec/s', M)} (ring) / {fmt(c_cached, 'M rec/s', M)} (cached)",
    ratio(rec, c_ring), ratio(rec, c_cached), 0.20)
row("a) taxi, parse only (records in memory)", fmt(rate("parse_only/taxi", "items_per_second"), "M records/s", M, 3),
    "", ratio(rate("parse_only/taxi", "items_per_second"), c_ring),
    ratio(rate("parse_only/taxi", "items_per_second"), c_cached))
row("a) taxi plain, reader only (framing + CRC)", fmt(rate("reader/taxi_plain", "items_per_second"), "M records/s", M, 3),
    "", ratio(rate("reader/taxi_plain", "items_per_second"), c_ring),
    ratio(rate("reader/taxi_plain", "items_per_second"), c_cached))

# b) 100 KiB random bytes: payload GB/s vs read+CRC+copy.
pay = rate("reader_parse/bytes100k_plain", "payload_per_second")
b_ring, b_cached = rate("ceiling/read_crc_copy/bytes100k_plain"), rate("ceiling/read_crc_copy_cached/bytes100k_plain")
row("b) 100 KiB random bytes, plain, reader + parse (payload)", fmt(pay, "GB/s", GB),
    f"read+CRC+copy {fmt(b_ring, 'GB/s', GB)} (ring) / {fmt(b_cached, 'GB/s', GB)} (cached)",
    ratio(pay, b_ring), ratio(pay, b_cached), 0.60)

# c) 100 KiB text, GZIP: uncompressed stream GB/s vs raw inflate of the same files.
text = manifest("text100k_gzip")
cr = int(text["stream_bytes"]) / int(text["file_bytes"]) if text else None
for lib in ("isal", "zlib"):
    got = rate(f"reader_parse/text100k_gzip/{lib}")
    raw = rate(f"ceiling/inflate_raw/text100k_gzip/{lib}")
    row(f"c) 100 KiB text, GZIP (ratio {cr:.2f}x), {lib}, reader + parse" if cr else f"c) text GZIP {lib}",
        fmt(got, "GB/s", GB), f"raw inflate {lib} {fmt(raw, 'GB/s', GB)}", ratio(got, raw), None, 0.80)

# d) taxi GZIP: records/s and where the time goes.
taxi_gz = manifest("taxi_gzip")
tcr = int(taxi_gz["stream_bytes"]) / int(taxi_gz["file_bytes"]) if taxi_gz else None
for lib in ("isal", "zlib"):
    got = rate(f"reader_parse/taxi_gzip/{lib}", "items_per_second")
    raw = rate(f"ceiling/inflate_raw/taxi_gzip/{lib}", "items_per_second")
    row(f"d) taxi GZIP (ratio {tcr:.1f}x), {lib}, reader + parse" if tcr else f"d) taxi GZIP {lib}",
        fmt(got, "M records/s", M, 3), f"raw inflate {lib} {fmt(raw, 'M rec/s', M)}", ratio(got, raw))

for r in rows:
    print("| " + " | ".join(r) + " |")

print()
print("### Where the time goes (ns per record, CPU time)")
print()
print("| stage | taxi plain | taxi GZIP isal | taxi GZIP zlib |")
print("| --- | --- | --- | --- |")
def ns(name):
    v = rate(name, "items_per_second")
    return None if not v else 1e9 / v
def cell(v, total):
    return "n/a" if v is None else (f"{v:.0f}" + (f" ({100 * v / total:.0f}%)" if total else ""))
cols = []
for lib in (None, "isal", "zlib"):
    if lib is None:
        inflate_raw = stream = None
        reader, full = ns("reader/taxi_plain"), ns("reader_parse/taxi_plain")
    else:
        inflate_raw = ns(f"ceiling/inflate_raw/taxi_gzip/{lib}")
        stream = ns(f"inflate_stream/taxi_gzip/{lib}")
        reader, full = ns(f"reader/taxi_gzip/{lib}"), ns(f"reader_parse/taxi_gzip/{lib}")
    def diff(a, b):
        return None if a is None or b is None else a - b
    cols.append({
        "raw inflate (library alone)": inflate_raw,
        "InflateStream wrapper (over raw inflate)": diff(stream, inflate_raw),
        "read() + framing + CRC-32C (reader over inflate)": reader if lib is None else diff(reader, stream),
        "parse into the batch (reader+parse over reader)": diff(full, reader),
        "total (reader + parse)": full,
    })
for stage in cols[0]:
    print(f"| {stage} | " + " | ".join(cell(c[stage], c['total (reader + parse)'] if stage != 'total (reader + parse)' else None)
                                        for c in cols) + " |")
if spread:
    spread.sort()
    print()
    print(f"Real time vs CPU time over all repetitions: median {100 * spread[len(spread) // 2]:+.1f}%,"
          f" max {100 * spread[-1]:+.1f}% (large values: other load on the pinned core).")
    if spread[len(spread) // 2] > 0.10:
        print()
        print("WARNING: the pinned core was shared with other work for much of this run (real time"
              " > 1.1x CPU time); the figures, the ratios especially, are unreliable. Rerun on a quiet"
              " machine, or pin another core (RINGFEED_BENCH_CPU).")
PY
