#!/usr/bin/env bash
# Side-by-side A/B of ringfeedd builds or settings on one job: runs the arms in turn, round
# after round (so that a busy spell of a shared machine hits every arm alike), each as
# ringfeedd --exit-when-done + consume_bench (every byte read), and prints each run and the
# medians: examples/s, the daemon's CPU ns per example, the consumer's.
#
#   bench/e2e/ab_daemons.sh --config JOB.yaml [--rounds 3] [--cpus 0-1] ARM [ARM...]
#   ARM = LABEL=RINGFEEDD_BINARY[,VAR=VALUE...]   (VARs: the environment of that arm's daemon)
#
# Example: bench/e2e/ab_daemons.sh --config /tmp/t1.yaml old=/tmp/ringfeedd-old new=../build-bench/daemon/ringfeedd
# The job should run a second or more (epochs) with finite epochs; a first run of the first arm,
# not counted, reads its files into the page cache. Needs consume_bench from a Release build ($RINGFEED_BENCH_BUILD,
# default ../build-bench). RINGFEED_BENCH_NICE=-10 (root) runs both processes at that nice level.
set -euo pipefail

config="" rounds=3 cpus=0-1
arms=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) config="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --cpus) cpus="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *=*) arms+=("$1"); shift ;;
    *) echo "ab_daemons.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$config" && -f "$config" ]] || { echo "ab_daemons.sh: --config JOB.yaml is required (a file)" >&2; exit 2; }
[[ ${#arms[@]} -ge 1 ]] || { echo "ab_daemons.sh: give at least one ARM (LABEL=BINARY[,VAR=VALUE...])" >&2; exit 2; }

repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="${RINGFEED_BENCH_BUILD:-$repo/../build-bench}"
consume="$build/bench/consume_bench"
[[ -x "$consume" ]] || { echo "ab_daemons.sh: $consume not built (ninja -C $build consume_bench)" >&2; exit 2; }
job="$(sed -n 's/^job:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$config" | head -1)"
[[ -n "$job" ]] || { echo "ab_daemons.sh: no 'job:' line in $config" >&2; exit 2; }
nice_level="${RINGFEED_BENCH_NICE:-0}"
work="$(mktemp -d /tmp/ringfeed-ab.XXXXXX)"
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"

# Round 0 (the first arm once, not counted) reads the job's files into the page cache.
for ((round = 0; round <= rounds; round++)); do
  for arm in "${arms[@]}"; do
    [[ $round -eq 0 && "$arm" != "${arms[0]}" ]] && continue
    label="${arm%%=*}"
    rest="${arm#*=}"
    IFS=',' read -r -a parts <<< "$rest"
    binary="${parts[0]}"
    [[ -x "$binary" ]] || { echo "ab_daemons.sh: arm '$label': $binary is not an executable" >&2; exit 2; }
    env "${parts[@]:1}" nice -n "$nice_level" taskset -c "$cpus" "$binary" --config "$config" \
      --runtime-dir "$work/run" --exit-when-done 2>"$work/daemon.log" &
    daemon=$!
    if ! out="$(nice -n "$nice_level" taskset -c "$cpus" "$consume" --job "$job" --runtime-dir "$work/run")"; then
      kill "$daemon" 2>/dev/null || true
      echo "ab_daemons.sh: arm '$label' failed; the daemon's log:" >&2
      tail -20 "$work/daemon.log" >&2
      exit 1
    fi
    wait "$daemon" || true
    [[ $round -eq 0 ]] && continue
    python3 - "$label" "$round" "$out" >>"$results" <<'EOF'
import json, sys
label, rnd, r = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
n = r["examples"]
print(json.dumps({"arm": label, "round": rnd, "examples_per_s": r["examples_per_s"],
                  "daemon_ns_per_example": r["daemon_cpu_seconds"] * 1e9 / n,
                  "consumer_ns_per_example": r["cpu_seconds"] * 1e9 / n}))
EOF
    tail -1 "$results" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("round %d %12s: %7.3f M examples/s, daemon %5.0f ns/example, consumer %4.0f" % (
    r["round"], r["arm"], r["examples_per_s"] / 1e6, r["daemon_ns_per_example"], r["consumer_ns_per_example"]))'
  done
done

python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
arms = list(dict.fromkeys(r["arm"] for r in rows))
first = None
print(f"\nmedians of {len(rows) // len(arms)} rounds:")
for a in arms:
    mine = [r for r in rows if r["arm"] == a]
    eps = statistics.median(r["examples_per_s"] for r in mine)
    ns = statistics.median(r["daemon_ns_per_example"] for r in mine)
    first = first or eps
    spread = f"{min(r['examples_per_s'] for r in mine)/1e6:.3f}-{max(r['examples_per_s'] for r in mine)/1e6:.3f} M"
    print(f"  {a:>12}: {eps/1e6:7.3f} M examples/s ({spread}; {eps/first:5.1%} of {arms[0]}), daemon {ns:5.0f} ns/example")
EOF
