#!/usr/bin/env bash
# The project's test command (README "Quickstart", step 2; CI runs it through .ci/run).
#
#   scripts/test.sh            install deps, then: release-ish build + all tests, a bounded
#                              libFuzzer run, the same tests under AddressSanitizer+UBSan, and
#                              the multi-threaded ones (ring, client, sequencer, daemon end to
#                              end) under ThreadSanitizer
#   scripts/test.sh --quick    only the first build and its tests (C++ and the Python package's)
# A full run takes 20-45 minutes on 2 cores (three builds); --quick about 10 minutes. It ends
# with a summary: what passed, and what was skipped and why.
#
# Environment: JOBS (parallel build jobs, default nproc), FUZZ_SECONDS (default 60),
# CI=true makes tests that need ../shared/data fail instead of skip.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
jobs=${JOBS:-$(nproc)}

scripts/install-deps.sh

step() { printf '\n==== %s ====\n' "$*"; }

# What passed, said again at the end (the steps' own output is long): one line per step.
summary=()
# Runs ctest in build directory $1 (more ctest arguments after it), its output shown as it goes,
# and sets `counted` to "N passed", or "N passed, K skipped" (ctest's "(Skipped)" lines: the
# golden tests without ../shared/data/tfx).
counted=""
run_ctest() {
  local out total skipped
  out=$(mktemp)
  ctest --test-dir "$1" --output-on-failure -j "$jobs" "${@:2}" | tee "$out"
  total=$(sed -n 's/^.*tests passed, [0-9]* tests failed out of \([0-9]*\)$/\1/p' "$out")
  skipped=$(grep -c '(Skipped)$' "$out" || true)
  counted="$((total - skipped)) passed"
  if ((skipped > 0)); then counted+=", $skipped skipped"; fi
  rm -f "$out"
}
finish() {
  step "every step passed"
  printf '  %s\n' "${summary[@]}"
  skips build
}

# What ctest ran but skipped, and why (the RINGFEED_SKIP lines; ctest keeps a passing test's
# output in its log only): e.g. the golden tests without ../shared/data/tfx (set TFX_DATA).
skips() {
  local log="$1/Testing/Temporary/LastTest.log"
  [[ -f $log ]] || return 0
  awk '/^[0-9]+\/[0-9]+ Testing: / { test = $3 }
       /RINGFEED_SKIP:|test case\(s\) skipped here/ { sub(/^.*RINGFEED_SKIP: */, ""); print "  " test ": " $0 }' \
    "$log" | sort -u | sed '1i skipped here, and why:'
}

step "build (RelWithDebInfo, gcc) and test"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
run_ctest build
skips build
summary+=("C++ tests (build/): $counted")

step "python package and tests"
# The ringfeed Python package (python/, docs/python.md) built against this checkout and its
# pytest suite, which drives build/daemon/ringfeedd. Build dependencies go into the venv once and
# the package is built without build isolation, so a re-run rebuilds only what changed
# (python/build/). torch (PyPI's, a few GB) is installed once, for the torch tests and examples;
# jax (CPU) for the JAX DLPack test.
[ -x build/pyvenv/bin/python ] || python3 -m venv build/pyvenv
build/pyvenv/bin/python -m pip install -q --upgrade pip
build/pyvenv/bin/python -m pip install -q scikit-build-core nanobind numpy pytest pytest-timeout jax tfrecord
build/pyvenv/bin/python -c 'import torch' 2>/dev/null || build/pyvenv/bin/python -m pip install -q torch
build/pyvenv/bin/python -m pip install -q --no-build-isolation --force-reinstall --no-deps ./python
# pytest exits 5 when it collects no test: any non-zero status fails this script. A test that
# hangs ends the run after 300 s with every thread's stack (pytest-timeout; its thread method
# also ends a wait inside C++ that never returns to Python), not at the CI's limit.
RINGFEED_BUILD_DIR=build build/pyvenv/bin/python -m pytest python/tests -q -rs --timeout=300 --timeout-method=thread \
  | tee build/pytest-last.log
summary+=("Python tests: $(tail -1 build/pytest-last.log | tr -d '=' | xargs)")

if [ "$quick" = 1 ]; then finish; exit 0; fi

step "fuzz reader+parser for ${FUZZ_SECONDS:-60} s"
scripts/run-fuzz.sh "${FUZZ_SECONDS:-60}"
summary+=("fuzz: ${FUZZ_SECONDS:-60} s of the reader and parser, no findings")

step "build with AddressSanitizer + UndefinedBehaviorSanitizer and test"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRINGFEED_SANITIZE=ON -DRINGFEED_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build-asan
summary+=("C++ tests under AddressSanitizer + UBSan (build-asan/): $counted")

step "build with ThreadSanitizer and run the multi-threaded tests (ring, client, sequencer, daemon)"
tsan_tests="shm_ring_test shm_claim_test client_test cuda_uploader_test sequencer_test daemon_e2e_test daemon_consumers_test daemon_names_test daemon_data_limits_test daemon_control_signals_test daemon_autotune_test"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRINGFEED_BENCH=OFF \
  -DCMAKE_C_FLAGS=-fsanitize=thread "-DCMAKE_CXX_FLAGS=-fsanitize=thread -Wno-tsan" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
# shellcheck disable=SC2086
cmake --build build-tsan -j "$jobs" --target ringfeedd ringfeedctl $tsan_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  run_ctest build-tsan -R "^($(echo "$tsan_tests" | tr ' ' '|'))\$"
summary+=("multi-threaded tests under ThreadSanitizer (build-tsan/): $counted")
finish
