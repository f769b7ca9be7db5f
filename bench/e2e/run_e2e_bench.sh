#!/usr/bin/env bash
# End-to-end benchmark of ringfeedd (issue 3): daemon + a C++ consumer reading every byte,
# against (a) the same files read and parsed in one process and (b) tf.data from
# tensorflow-cpu, on the same files and cores; memory against the configured budget; and the
# client's Next + Release cost on a full ring. Builds what it needs (Release), generates the data
# once, prints ready-to-paste markdown tables and writes every run to one JSON file. It took
# about 6 minutes in session 17 on the 2-core machine (load average 2-2.7).
#
#   bench/e2e/run_e2e_bench.sh
#
# ringfeedd runs three ways: 1 reader + 1 worker and 2 + 2 (against the same work on 1 and 2
# threads in one process: the ring cost at equal parallelism), and with readers and workers
# auto (as users run it; against the faster of the two).
#
# Every contender runs RINGFEED_E2E_REPS times, the contenders interleaved within each
# repetition (so a busy spell spreads over all of them); the tables give medians. The page cache
# is warmed (every file read once) before every run. All runs are pinned with taskset to
# RINGFEED_E2E_CPUS; TensorFlow's and ringfeedd's own threads are allowed.
#
# Environment (all optional):
#   RINGFEED_BENCH_BUILD   build directory            (default: <repo>/../build-bench)
#   RINGFEED_BENCH_DIR     data + results directory   (default: /tmp/ringfeed-bench)
#   RINGFEED_TAXI_DIR      the real taxi TFRecords    (default: <repo>/../shared/data/tfx/csv_example_gen/Split-train)
#   RINGFEED_TFVENV        venv with tensorflow-cpu   (default: <repo>/../tfvenv; missing = no tf.data rows)
#   RINGFEED_E2E_CPUS      cores for every contender  (default: all, e.g. 0,1)
#   RINGFEED_E2E_REPS      repetitions                (default: 3)
#   RINGFEED_E2E_SETS      data sets                  (default: taxi_plain taxi_gzip bytes100k_plain text100k_gzip)
#   RINGFEED_E2E_ARTICLE_MAX  examples the article's tf.data pipeline runs for (default: 100000; it is slow)
#   RINGFEED_E2E_OVERHEAD_ROUNDS  full rings drained by client_overhead_bench (default: 20, x 256 slots)
#   RINGFEED_E2E_OVERHEAD_BATCHES batch sizes (taxi rows) it runs at (default: 1 32 256)
#   RINGFEED_BENCH_NICE    e.g. -10: run the contenders at that nice level (negative needs root)
#   RINGFEED_BENCH_JSON    an existing result file: only print its tables (no build, no run)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${RINGFEED_BENCH_BUILD:-$REPO/../build-bench}
DATA=${RINGFEED_BENCH_DIR:-/tmp/ringfeed-bench}
TAXI=${RINGFEED_TAXI_DIR:-$REPO/../shared/data/tfx/csv_example_gen/Split-train}
TFVENV=${RINGFEED_TFVENV:-$REPO/../tfvenv}
CPUS=${RINGFEED_E2E_CPUS:-0-$(($(nproc) - 1))}
REPS=${RINGFEED_E2E_REPS:-3}
SETS=${RINGFEED_E2E_SETS:-taxi_plain taxi_gzip bytes100k_plain text100k_gzip}
ARTICLE_MAX=${RINGFEED_E2E_ARTICLE_MAX:-100000}
OVERHEAD_ROUNDS=${RINGFEED_E2E_OVERHEAD_ROUNDS:-20}
OVERHEAD_BATCHES=${RINGFEED_E2E_OVERHEAD_BATCHES:-1 32 256}
NICE=${RINGFEED_BENCH_NICE:-}
JSON=${RINGFEED_BENCH_JSON:-}
BUDGET=256MiB  # pipeline.memory_budget of every job

if [[ -z "$JSON" ]]; then
  # ---- build (Release) ----
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGFEED_BENCH=ON
  fi
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
  if [[ "$build_type" != "Release" ]]; then
    echo "run_e2e_bench: $BUILD is a '$build_type' build; use a Release build dir (RINGFEED_BENCH_BUILD)" >&2
    exit 1
  fi
  ninja -C "$BUILD" -j2 ringfeedd consume_bench client_overhead_bench parse_alone_bench wake_cost_bench make_bench_data
  "$BUILD/bench/make_bench_data" --out "$DATA" --taxi "$TAXI"

  PY=""
  if [[ -x "$TFVENV/bin/python" ]] && "$TFVENV/bin/python" -c 'import tensorflow' 2>/dev/null; then
    PY="$TFVENV/bin/python"
  else
    echo "run_e2e_bench: no TensorFlow in $TFVENV (python3 -m venv $TFVENV && $TFVENV/bin/pip install tensorflow-cpu);" \
         "the tf.data rows are left out" >&2
  fi

  WORK=$(mktemp -d /tmp/ringfeed-e2e.XXXXXX)
  DAEMON_PID=""
  cleanup() {
    if [[ -n "$DAEMON_PID" ]]; then kill "$DAEMON_PID" 2>/dev/null || true; wait "$DAEMON_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
  }
  trap cleanup EXIT
  RUNTIME="$WORK/run"
  mkdir -p "$RUNTIME" "$DATA/results"
  STAMP=$(date +%Y%m%d-%H%M%S)
  JSON="$DATA/results/e2e_bench-$STAMP.json"
  RUNS="$WORK/runs.jsonl"
  : > "$RUNS"
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  PIN=(taskset -c "$CPUS")
  [[ -n "$NICE" ]] && PIN=(nice -n "$NICE" "${PIN[@]}")

  # ---- per data set: files, compression, features, batch, epochs ----
  # Epochs: about 2 s per run of the 1-thread and 1-worker contenders on this machine (until
  # session 16 they ran 0.1-0.5 s, where start-up and the ring's head start weighed in); the
  # autotuned daemon runs 4x as long, so that its tuner (trials of 1 s) has time to act.
  declare -A GLOB COMP TFCOMP BATCH EPOCHS AUTO_EPOCHS
  for s in taxi_plain taxi_gzip; do BATCH[$s]=256; EPOCHS[$s]=16; done
  for s in bytes100k_plain text100k_gzip; do BATCH[$s]=32; done
  EPOCHS[bytes100k_plain]=48; EPOCHS[text100k_gzip]=12
  for s in taxi_plain taxi_gzip bytes100k_plain text100k_gzip; do AUTO_EPOCHS[$s]=$((4 * EPOCHS[$s])); done
  for s in taxi_plain bytes100k_plain; do GLOB[$s]="$DATA/$s/*.tfrecord"; COMP[$s]=none; TFCOMP[$s]=""; done
  for s in taxi_gzip text100k_gzip; do GLOB[$s]="$DATA/$s/*.tfrecord.gz"; COMP[$s]=gzip; TFCOMP[$s]=GZIP; done

  features_yaml() {  # $1 = set
    if [[ $1 == taxi_* ]]; then
      while read -r name kind dtype; do
        if [[ $kind == fixed ]]; then echo "  $name: {dtype: $dtype}"; else echo "  $name: {type: varlen, dtype: $dtype}"; fi
      done < "$DATA/taxi.schema"
    else
      echo "  data: {dtype: bytes}"
    fi
  }
  write_config() {  # $1 = set, $2 = job, $3 = workers, $4 = readers, $5 = epochs, $6 = batch, $7 = extra yaml,
                    # $8 = extra pipeline keys (", key: value")
    cat > "$WORK/$2.yaml" <<EOF
job: $2
source: {files: ["${GLOB[$1]}"], compression: ${COMP[$1]}}
features:
$(features_yaml "$1")
batch: {size: $6}
epochs: $5
pipeline: {workers: $3, readers: $4, memory_budget: $BUDGET${8:-}}
log_level: warn
$7
EOF
  }
  for s in $SETS; do
    write_config "$s" "e2e-$s-w1" 1 1 "${EPOCHS[$s]}" "${BATCH[$s]}" ""
    write_config "$s" "e2e-$s-w2" 2 2 "${EPOCHS[$s]}" "${BATCH[$s]}" ""
    write_config "$s" "e2e-$s-wauto" auto auto "${AUTO_EPOCHS[$s]}" "${BATCH[$s]}" ""  # as users run it
  done
  # prefetch 256: the ring must fill (prefetch: auto stops at 8 ready batches).
  for b in $OVERHEAD_BATCHES; do
    write_config taxi_plain "e2e-overhead-b$b" 1 1 0 "$b" "ring: {slots: 256}" ", prefetch: 256"
  done

  warm() { cat "$DATA/$1"/part-* > /dev/null; }
  expected() { echo $(( $(sed -n 's/^records=//p' "$DATA/$1/MANIFEST") * $2 )); }
  record() {  # $1 set, $2 contender, $3 rep, $4 JSON line or "" (failed), $5 error text
    if [[ -n "$4" ]]; then
      echo "{\"set\":\"$1\",\"contender\":\"$2\",\"rep\":$3,\"result\":$4}" >> "$RUNS"
      echo "  $1 $2: $(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(format(r["examples_per_s"], ",.0f"), "examples/s")' "$4")"
    else
      echo "{\"set\":\"$1\",\"contender\":\"$2\",\"rep\":$3,\"error\":$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$5")}" >> "$RUNS"
      echo "  $1 $2: FAILED: $5" >&2
    fi
  }
  run_alone() {  # $1 set, $2 threads, $3 rep, $4 "touch" (also read every parsed byte) or ""
    warm "$1"
    local out name="alone_t$2${4:+_$4}"
    if out=$("${PIN[@]}" "$BUILD/bench/parse_alone_bench" --config "$WORK/e2e-$1-w1.yaml" --threads "$2" \
               ${4:+--$4} 2>"$WORK/err"); then
      record "$1" "$name" "$3" "$out"
    else
      record "$1" "$name" "$3" "" "$(tail -3 "$WORK/err")"
    fi
  }
  run_ringfeed() {  # $1 set, $2 workers (1, 2 or auto), $3 rep
    local job="e2e-$1-w$2" out rc=0 epochs=${EPOCHS[$1]}
    [[ $2 == auto ]] && epochs=${AUTO_EPOCHS[$1]}
    warm "$1"
    "${PIN[@]}" "$BUILD/daemon/ringfeedd" --config "$WORK/$job.yaml" --runtime-dir "$RUNTIME" --exit-when-done \
      > "$WORK/daemon.log" 2>&1 &
    DAEMON_PID=$!
    out=$("${PIN[@]}" "$BUILD/bench/consume_bench" --job "$job" --runtime-dir "$RUNTIME" \
            --expect-examples "$(expected "$1" "$epochs")" 2>"$WORK/err") || rc=$?
    wait "$DAEMON_PID" || rc=$?
    DAEMON_PID=""
    if [[ $rc == 0 ]]; then
      record "$1" "ringfeed_w$2" "$3" "$out"
    else
      record "$1" "ringfeed_w$2" "$3" "" "$(tail -3 "$WORK/err" "$WORK/daemon.log")"
    fi
  }
  run_tfdata() {  # $1 set, $2 pipeline, $3 rep
    local out args=(--files "${GLOB[$1]}" --compression "${TFCOMP[$1]}" --pipeline "$2" --batch "${BATCH[$1]}")
    if [[ $1 == taxi_* ]]; then args+=(--schema "$DATA/taxi.schema"); else args+=(--bytes-feature data); fi
    [[ $2 == article ]] && args+=(--max-examples "$ARTICLE_MAX")
    warm "$1"
    if out=$(TF_CPP_MIN_LOG_LEVEL=2 "${PIN[@]}" "$PY" "$REPO/bench/e2e/tfdata_bench.py" "${args[@]}" 2>"$WORK/err"); then
      record "$1" "tfdata_$2" "$3" "$(tail -1 <<<"$out")"
    else
      record "$1" "tfdata_$2" "$3" "" "$(tail -3 "$WORK/err")"
    fi
  }

  # ---- what a wake-up costs here: the price of each hand-off that finds the other side asleep ----
  # (wake_cost_bench; session 26's virtual machine: 8x across cores what it costs on one core)
  read -r -a CORES <<<"$(taskset -c "$CPUS" python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
  for pair in "${CORES[0]},${CORES[1]:-${CORES[0]}}" "${CORES[0]},${CORES[0]}"; do
    if out=$("${PIN[@]}" "$BUILD/bench/wake_cost_bench" --cores "$pair" 2>"$WORK/err"); then
      echo "{\"set\":\"machine\",\"contender\":\"wake_cost_$pair\",\"rep\":1,\"result\":$out}" >> "$RUNS"
      echo "  futex wake, cores $pair: $out"
    else
      echo "  wake_cost_bench --cores $pair: FAILED: $(tail -3 "$WORK/err")" >&2
    fi
  done

  echo
  echo "cores $CPUS${NICE:+, nice $NICE}, $REPS repetitions; load $LOAD_START"
  for rep in $(seq 1 "$REPS"); do
    echo "repetition $rep of $REPS"
    for s in $SETS; do
      run_alone "$s" 1 "$rep"
      run_alone "$s" 1 "$rep" touch
      run_ringfeed "$s" 1 "$rep"
      run_alone "$s" 2 "$rep"
      run_alone "$s" 2 "$rep" touch
      run_ringfeed "$s" 2 "$rep"
      run_ringfeed "$s" auto "$rep"
      if [[ -n "$PY" ]]; then
        run_tfdata "$s" article "$rep"
        run_tfdata "$s" tuned "$rep"
      fi
    done
  done

  # ---- client overhead: Next + Release on a full ring of 256 slots ----
  for b in $OVERHEAD_BATCHES; do
    echo "client overhead, batches of $b taxi rows ($OVERHEAD_ROUNDS rounds of 256 batches)"
    "${PIN[@]}" "$BUILD/daemon/ringfeedd" --config "$WORK/e2e-overhead-b$b.yaml" --runtime-dir "$RUNTIME" \
      > "$WORK/daemon.log" 2>&1 &
    DAEMON_PID=$!
    if out=$("${PIN[@]}" "$BUILD/bench/client_overhead_bench" --job "e2e-overhead-b$b" --runtime-dir "$RUNTIME" \
               --rounds "$OVERHEAD_ROUNDS" 2>"$WORK/err"); then
      echo "{\"set\":\"taxi_plain\",\"contender\":\"client_overhead_b$b\",\"rep\":1,\"batch\":$b,\"result\":$out}" >> "$RUNS"
    else
      echo "  client overhead: FAILED: $(tail -3 "$WORK/err" "$WORK/daemon.log")" >&2
    fi
    kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=""
  done

  # ---- one result file ----
  TF_VERSION=""
  [[ -n "$PY" ]] && TF_VERSION=$("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null | tail -1)
  python3 - "$RUNS" "$JSON" <<PY
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
doc = {
  "date": "$(date -u '+%Y-%m-%d %H:%M UTC')",
  "commit": "$(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- . 2>/dev/null || echo ' + uncommitted changes')",
  "machine": "$(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), kernel $(uname -r)",
  "compiler": "$(${CXX:-c++} --version | head -1)",
  "tf_version": "$TF_VERSION",
  "cpus": "$CPUS", "nice": "$NICE", "reps": $REPS, "article_max_examples": $ARTICLE_MAX,
  "budget": "$BUDGET",
  "load_start": "$LOAD_START", "load_end": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "sets": {s: {"batch": b, "epochs": e} for s, b, e in [$(for s in $SETS; do printf '("%s", %s, %s),' "$s" "${BATCH[$s]}" "${EPOCHS[$s]}"; done)]},
  "runs": runs,
}
json.dump(doc, open(sys.argv[2], "w"), indent=1)
PY
  echo
  echo "results: $JSON"
fi

# ---- tables ----
python3 - "$JSON" <<'PY'
import json, os, statistics, sys

doc = json.load(open(sys.argv[1]))
by = {}
errors = []
for r in doc["runs"]:
    if "error" in r:
        errors.append(r)
        continue
    by.setdefault((r["set"], r["contender"]), []).append(r["result"])

def med(s, c, key="examples_per_s"):
    v = [x[key] for x in by.get((s, c), []) if x.get(key) is not None]
    return statistics.median(v) if v else None

def per_cpu(s, c):
    """Examples per CPU-second: the daemon's and the consumer's CPU time together for ringfeed."""
    v = []
    for x in by.get((s, c), []):
        cpu = x.get("cpu_seconds", 0) + x.get("daemon_cpu_seconds", 0)
        if cpu > 0:
            v.append(x["examples"] / cpu)
    return statistics.median(v) if v else None

def k(v):  # three significant digits
    if v is None:
        return "n/a"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e5:
        return f"{v / 1e3:.0f}k"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v / 1e3:.2f}k" if v >= 1e3 else f"{v:.0f}"

def fx(v):
    return "n/a" if v is None else f"{v:.1f}x"

def pct(v):
    return "n/a" if v is None else f"{100 * v:.0f}%"

def ratio(a, b):
    return None if a is None or not b else a / b

def fr(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}"

def mib(v):
    return "n/a" if v is None else f"{v / 2**20:.1f} MiB" if v < 10 * 2**20 else f"{v / 2**20:.0f} MiB"

sets = list(doc["sets"])
print()
print(f"## End-to-end ({doc['date']}, {os.path.basename(sys.argv[1])})")
print()
print(f"Commit {doc['commit']}; {doc['machine']}; TensorFlow {doc['tf_version'] or 'n/a'}; every contender pinned to"
      f" cores {doc['cpus']}{', nice ' + doc['nice'] if doc['nice'] else ''}; medians of {doc['reps']} repetitions;"
      f" load average {doc['load_start']} at the start, {doc['load_end']} at the end.")
wake = {c.split("_", 2)[2]: xs[0] for (s, c), xs in by.items() if c.startswith("wake_cost_")}
if wake:
    print()
    print("Waking a thread asleep on a futex (`wake_cost_bench`, the price of a hand-off in the daemon that finds"
          " the other side asleep: a consumer waiting for a batch, a worker for work, a thread on a contended mutex;"
          " across cores with the other core idle, the worst case): " +
          "; ".join(f"cores {pair}: the waker's call {w['waker_call_us']:.1f} us, the sleeper's CPU {w['sleeper_cpu_per_wake_us']:.1f} us"
                    f" ({w['sleeper_returns']} returns from its wait for {w['wakes']} wakes)"
                    for pair, w in sorted(wake.items(), key=lambda i: i[0].split(",")[0] == i[0].split(",")[1])) +
          ".")
print()
print("### Throughput (examples/s; in brackets examples per CPU-second, all threads and processes of the contender)")
print()
print("Ring cost = 1 - ringfeedd / alone. The ratios to tf.data use the faster of the two ringfeedd columns.")
print()
print("| data set | batch, epochs | alone, 1 thread | ringfeedd 1 worker + consumer | ring cost | alone, 2 threads"
      " | ringfeedd 2 workers + consumer | ring cost | tf.data article | tf.data tuned | ringfeedd / article | ringfeedd / tuned |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
verdicts = []
for s in sets:
    a1, r1, a2, r2 = (med(s, c) for c in ("alone_t1", "ringfeed_w1", "alone_t2", "ringfeed_w2"))
    art, tun = med(s, "tfdata_article"), med(s, "tfdata_tuned")
    cost1 = None if ratio(r1, a1) is None else 1 - ratio(r1, a1)
    cost2 = None if ratio(r2, a2) is None else 1 - ratio(r2, a2)
    cell = lambda c: f"{k(med(s, c))} ({k(per_cpu(s, c))})"
    best = max(v for v in (r1, r2, 0) if v is not None) or None
    print(f"| {s} | {doc['sets'][s]['batch']}, {doc['sets'][s]['epochs']} | {cell('alone_t1')} | {cell('ringfeed_w1')} |"
          f" {pct(cost1)} | {cell('alone_t2')} | {cell('ringfeed_w2')} |"
          f" {pct(cost2)} | {cell('tfdata_article')} | {cell('tfdata_tuned')} |"
          f" {fx(ratio(best, art))} | {fx(ratio(best, tun))} |")
    best_cpu = max(v for v in (per_cpu(s, "ringfeed_w1"), per_cpu(s, "ringfeed_w2"), 0) if v is not None) or None
    cpu_cost = lambda r, a: None if ratio(per_cpu(s, r), per_cpu(s, a)) is None else 1 - ratio(per_cpu(s, r), per_cpu(s, a))
    verdicts.append((s, (cost1, cpu_cost("ringfeed_w1", "alone_t1")), (cost2, cpu_cost("ringfeed_w2", "alone_t2")), ratio(best, art), ratio(best, tun),
                     ratio(best_cpu, per_cpu(s, "tfdata_article")), ratio(best_cpu, per_cpu(s, "tfdata_tuned"))))

print()
print("### Like for like: the ring's cost against alone that also reads every byte it parsed")
print()
print("The strict figure above compares daemon + consumer with reader + parser alone, which never"
      " reads its batches; here the alone process reads every byte of every batch after parsing it"
      " (`parse_alone_bench --touch`, the consumer's loop), as a trainer that loads in-process would,"
      " so the difference left is the ring (hand-off, cross-core copies, the daemon's other threads)."
      " Reported beside the target, not instead of it.")
print()
print("| data set | alone + touch, 1 thread | ring cost, 1 worker | alone + touch, 2 threads | ring cost, 2 workers |")
print("| --- | --- | --- | --- | --- |")
for s in sets:
    t1, r1, t2, r2 = (med(s, c) for c in ("alone_t1_touch", "ringfeed_w1", "alone_t2_touch", "ringfeed_w2"))
    c1 = None if ratio(r1, t1) is None else 1 - ratio(r1, t1)
    c2 = None if ratio(r2, t2) is None else 1 - ratio(r2, t2)
    print(f"| {s} | {k(t1)} ({k(per_cpu(s, 'alone_t1_touch'))}) | {pct(c1)} | {k(t2)} ({k(per_cpu(s, 'alone_t2_touch'))}) | {pct(c2)} |")

print()
print("### ringfeedd autotuned (readers and workers auto, as users run it) against the faster alone")
print()
print("| data set | alone, faster of 1 and 2 threads | ringfeedd autotuned + consumer (4x the epochs) | ring cost |")
print("| --- | --- | --- | --- |")
for s in sets:
    a1, a2, ra = med(s, "alone_t1"), med(s, "alone_t2"), med(s, "ringfeed_wauto")
    best_alone = max(v for v in (a1, a2, 0) if v is not None) or None
    which = "1 thread" if best_alone is not None and best_alone == a1 else "2 threads"
    cost = None if ratio(ra, best_alone) is None else 1 - ratio(ra, best_alone)
    print(f"| {s} | {k(best_alone)} ({which}) | {k(ra)} ({k(per_cpu(s, 'ringfeed_wauto'))}) | {pct(cost)} |")

print()
print("### Targets")
print()
print("| target | data set | figure | met? |")
print("| --- | --- | --- | --- |")
def yes(ok):
    return "n/a" if ok is None else ("met" if ok else "**MISSED**")
for s, cost1, cost2, vs_art, vs_tun, cpu_art, cpu_tun in verdicts:
    for label, (cost, cpu) in (("1 worker vs 1 thread", cost1), ("2 workers vs 2 threads", cost2)):
        print(f"| ring cost < 10% ({label}) | {s} | {pct(cost)} (per CPU-second {pct(cpu)}) |"
              f" {yes(None if cost is None else cost < 0.10)} |")
    if s.startswith("taxi"):
        print(f"| >= 10x tf.data article | {s} | {fx(vs_art)} (per CPU-second {fx(cpu_art)}) |"
              f" {yes(None if vs_art is None else vs_art >= 10)} |")
        print(f"| >= 2x tf.data tuned | {s} | {fx(vs_tun)} (per CPU-second {fx(cpu_tun)}) |"
              f" {yes(None if vs_tun is None else vs_tun >= 2)} |")
    else:
        print(f"| (report) vs tf.data article / tuned | {s} | {fx(vs_art)} / {fx(vs_tun)}"
              f" (per CPU-second {fx(cpu_art)} / {fx(cpu_tun)}) | |")

print()
print(f"### Memory (peaks; pipeline.memory_budget {doc['budget']})")
print()
print("| data set | ringfeedd private RSS (RssAnon, 1 worker / 2 workers) | segment (1 / 2 workers) | private + segment, 2 workers"
      " | of the budget | tf.data article: RSS increase over `import tensorflow` | tf.data tuned |")
print("| --- | --- | --- | --- | --- | --- | --- |")
budget = None
for s in sets:
    def mx(c, key):
        v = [x.get(key) for x in by.get((s, c), []) if x.get(key) is not None]
        return max(v) if v else None
    p1, p2 = mx("ringfeed_w1", "daemon_rss_anon_peak_bytes"), mx("ringfeed_w2", "daemon_rss_anon_peak_bytes")
    g1, g2 = mx("ringfeed_w1", "segment_bytes"), mx("ringfeed_w2", "segment_bytes")
    b = mx("ringfeed_w2", "budget_bytes") or mx("ringfeed_w1", "budget_bytes")
    tot = None if p2 is None or g2 is None else p2 + g2
    tf_cell = lambda c: (f"{mib(mx(c, 'rss_peak_increase_bytes'))} (anon {mib(mx(c, 'rss_anon_peak_increase_bytes'))})"
                         if (s, c) in by else "n/a")
    print(f"| {s} | {mib(p1)} / {mib(p2)} | {mib(g1)} / {mib(g2)} | {mib(tot)} | {pct(None if not b or tot is None else tot / b)} |"
          f" {tf_cell('tfdata_article')} | {tf_cell('tfdata_tuned')} |")
base = [x["rss_baseline_bytes"] for (s, c), xs in by.items() if c.startswith("tfdata") for x in xs]
if base:
    print()
    print(f"The bare `import tensorflow` itself: {mib(statistics.median(base))} RSS (not counted above).")

overhead = sorted(((int(c.rsplit("_b", 1)[1]), xs[0]) for (s, c), xs in by.items() if c.startswith("client_overhead_b")))
if overhead:
    o = overhead[0][1]
    print()
    print(f"### Client overhead (Next + Release on a full ring of {o['slots']} slots, taxi batches, {o['features']} features;"
          f" {o['samples']} batches per row)")
    print()
    print("| rows per batch | Next + Release median | p90 | p99 | Next median | Release median | target median <= 2,000 ns |"
          " first feature() of every feature, median | Next + features + Release, median |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rows, o in overhead:
        q = o["next_release_ns"]
        print(f"| {rows} | **{q['median']:,.0f} ns** | {q['p90']:,.0f} | {q['p99']:,.0f} | {o['next_ns']['median']:,.0f} |"
              f" {o['release_ns']['median']:,.0f} | {'met' if q['median'] <= 2000 else '**MISSED**'} |"
              f" {o['features_ns']['median']:,.0f} | {o['all_ns']['median']:,.0f} |")
    print()
    print(f"Each timed interval includes one steady_clock pair ({o['clock_ns']:.0f} ns). The first feature() of a"
          " column checks its row_splits / value_offsets entries. Batches not yet published when asked"
          f" (timeouts): {sum(o['timeouts'] for _, o in overhead)}.")

if errors:
    print()
    print("Failed runs:")
    for r in errors:
        print(f"- {r['set']} {r['contender']} repetition {r['rep']}: {r['error']}")
PY
