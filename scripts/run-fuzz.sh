#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/reader_parser_fuzz with clang (ASan + UBSan) in
# build-fuzz/ and runs it for SECONDS (default 60) on a scratch copy of the seed corpus.
# Exits 0 when nothing was found; non-zero on a crash, sanitizer report, leak, timeout, OOM or
# build failure, printing the reproducer path and the command that replays it.
#
# Usage: scripts/run-fuzz.sh [SECONDS]
# Environment:
#   RINGFEED_FUZZ_BUILD_DIR   build folder (default build-fuzz)
#   RINGFEED_FUZZ_JOBS        parallel compile jobs (default: number of CPUs)
#   RINGFEED_FUZZ_ARGS        extra libFuzzer flags, e.g. "-seed=1 -max_len=8192"
# The working corpus lives in $BUILD/fuzz-corpus (kept between runs, so coverage accumulates;
# delete it to start from the seeds); findings go to $BUILD/fuzz-artifacts/. The committed seeds
# in tests/fuzz/corpus/ are only read.
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: $0 [SECONDS]   (whole seconds, >= 1)" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${RINGFEED_FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${RINGFEED_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"

for tool in clang clang++ cmake ninja; do
  command -v "$tool" >/dev/null || { echo "run-fuzz: '$tool' not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
done

echo "run-fuzz: configuring $build (clang, RINGFEED_FUZZ=ON)"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DRINGFEED_FUZZ=ON -DRINGFEED_TESTS=OFF \
  -DRINGFEED_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "run-fuzz: building reader_parser_fuzz (-j$jobs)"
cmake --build "$build" --target reader_parser_fuzz -j "$jobs"

fuzzer="$build/tests/fuzz/reader_parser_fuzz"
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$corpus" "$artifacts"
cp -f tests/fuzz/corpus/* "$corpus/"
# Findings of an earlier run are not this run's.
find "$artifacts" -maxdepth 1 -type f -name '*-*' -delete

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
echo "run-fuzz: fuzzing for ${seconds}s, corpus $corpus ($(ls "$corpus" | wc -l) inputs)"
set +e
# shellcheck disable=SC2086  # RINGFEED_FUZZ_ARGS is a list of flags
"$fuzzer" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" ${RINGFEED_FUZZ_ARGS:-} > "$build/fuzz.log" 2>&1
rc=$?
set -e
# libFuzzer's progress (thousands of lines) stays in the log; its summary comes here, the
# whole end of the log on a finding.
grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$build/fuzz.log" || true

mapfile -t found < <(find "$artifacts" -maxdepth 1 -type f \
  \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
if [ "$rc" -ne 0 ] || [ "${#found[@]}" -gt 0 ]; then
  tail -n 60 "$build/fuzz.log" >&2
  echo "run-fuzz: FAILED (libFuzzer exit status $rc); log: $build/fuzz.log" >&2
  for f in "${found[@]}"; do
    f="$(realpath "$f")"
    echo "run-fuzz: reproducer: $f" >&2
    echo "run-fuzz:   replay:   $(realpath "$fuzzer") $f   (RINGFEED_FUZZ_VERBOSE=1 explains it)" >&2
  done
  [ "$rc" -ne 0 ] || rc=1
  exit "$rc"
fi
echo "run-fuzz: OK, no findings in ${seconds}s"
