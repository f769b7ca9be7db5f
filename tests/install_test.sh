#!/usr/bin/env bash
# install_test: installs the build into a temporary prefix and builds a trainer against the
# installed client library the ways docs/client.md gives — pkg-config (C++ and C) and CMake's
# find_package(ringfeed) — then runs each; with no daemon running, each must get ringfeed's own
# "not running" error from the installed libringfeed_client.so (found through its rpath).
#   install_test.sh BUILD_DIR CMAKE CXX CC
set -euo pipefail
build=$1 cmake=$2 cxx=$3 cc=$4
command -v pkg-config > /dev/null || { echo "install_test: pkg-config is not installed (apt-get install pkg-config)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
# Only the client component (library, headers, pkg-config and CMake files; stripped, as the
# README installs it), and never into a DESTDIR from the environment: the rest may name
# absolute destinations (the systemd unit).
env -u DESTDIR "$cmake" --install "$build" --prefix "$prefix" --component client --strip > "$tmp/install.log"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig

cat > "$tmp/trainer.cc" <<'CC'
#include <cstdio>
#include "client/client.h"
int main() {
  // The installed headers' types link: a Batch's checked copy is copied by inline code alone
  // (it called shm functions the library does not export).
  ringfeed::shm::CheckedBatch checked;
  const ringfeed::shm::CheckedBatch copy(checked);
  if (copy.column_count != 0) return 1;
  ringfeed::ClientOptions options;
  options.job = "install-test-no-such-job";
  options.runtime_dir = "/nonexistent/ringfeed-install-test";
  try {
    ringfeed::Client::Attach(options);
  } catch (const ringfeed::ClientError& e) {
    std::printf("error: %s\n", e.what());
    return 0;
  }
  return 1;
}
CC
cat > "$tmp/trainer.c" <<'C'
#include <stdio.h>
#include "client/ringfeed.h"
int main(void) {
  rf_attach_options opts = {.struct_size = sizeof opts, .job = "install-test-no-such-job",
                            .rank = -1, .runtime_dir = "/nonexistent/ringfeed-install-test"};
  rf_client* client = NULL;
  char err[512];
  if (rf_attach(&opts, &client, err, sizeof err) == RF_OK) return 1;
  printf("error: %s\n", err);
  return 0;
}
C
check() {  # $1 label, $2 program
  local out
  out=$("$2")
  echo "$1: $out"
  [[ $out == *"install-test-no-such-job"* ]] || { echo "install_test: $1 did not name the job" >&2; exit 1; }
}

# The installed headers name only files a user has: installed ones, or ringfeed's source, said
# so ("source: shm/ring.h").
missing=$(grep -rnoE "(source: )?\b(shm|format|client|daemon)/[a-z_]+\.(h|cc)\b" "$prefix/include/ringfeed" |
          grep -v ":source: " | while IFS=: read -r file line ref; do
            [[ -e $prefix/include/ringfeed/$ref ]] || echo "$file:$line: $ref"
          done)
if [[ -n $missing ]]; then
  printf 'install_test: installed headers name files not installed:\n%s\n' "$missing" >&2
  exit 1
fi

# shellcheck disable=SC2046
"$cxx" -std=c++20 "$tmp/trainer.cc" -o "$tmp/trainer_pc" $(pkg-config --cflags --libs ringfeed)
check "pkg-config, C++" "$tmp/trainer_pc"
# shellcheck disable=SC2046
"$cc" -std=c11 "$tmp/trainer.c" -o "$tmp/trainer_c" $(pkg-config --cflags --libs ringfeed)
check "pkg-config, C" "$tmp/trainer_c"

# README.md's trainer, as printed there: it compiles without a warning, and with no daemon it says so
# and exits 1.
readme=$(dirname "$0")/../README.md
awk '/tests\/install_test.sh compiles this program/ {found = 1; next}
     found && /^```cpp$/ {inside = 1; next}
     inside && /^```$/ {exit}
     inside {print}' "$readme" > "$tmp/readme_trainer.cc"
[[ -s $tmp/readme_trainer.cc ]] || { echo "install_test: no C++ program after the marker in README.md" >&2; exit 1; }
# shellcheck disable=SC2046
"$cxx" -std=c++20 -Wall -Wextra -Werror "$tmp/readme_trainer.cc" -o "$tmp/readme_trainer" $(pkg-config --cflags --libs ringfeed)
rc=0
out=$(RINGFEED_RUNTIME_DIR=/nonexistent/ringfeed-install-test "$tmp/readme_trainer" 2>&1) || rc=$?
echo "README's trainer: $out (exit $rc)"
[[ $rc == 1 && $out == "trainer: "*"my-train"* ]] || { echo "install_test: README's trainer did not fail as it says" >&2; exit 1; }

mkdir "$tmp/proj"
cp "$tmp/trainer.cc" "$tmp/proj/"
cat > "$tmp/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(trainer LANGUAGES CXX)
find_package(ringfeed 0.1 REQUIRED)
add_executable(trainer trainer.cc)
target_link_libraries(trainer PRIVATE ringfeed::client)
install(TARGETS trainer)
CM
"$cmake" -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" > "$tmp/cmake.log"
"$cmake" --build "$tmp/proj/build" > "$tmp/build.log"
check "find_package(ringfeed)" "$tmp/proj/build/trainer"
# Installed (CMake drops its build-tree RPATH there): the package's RUNPATH still finds the library.
env -u DESTDIR "$cmake" --install "$tmp/proj/build" --prefix "$tmp/trainer-prefix" > "$tmp/install-trainer.log"
check "find_package(ringfeed), installed trainer" "$tmp/trainer-prefix/bin/trainer"

# A trainer built with the pre-C++11 libstdc++ string ABI cannot use the C++ API (it linked and
# then crashed in Attach): the header stops the build, naming the fix. The C ABI works there.
# shellcheck disable=SC2046
if "$cxx" -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=0 -c "$tmp/trainer.cc" -o "$tmp/old_abi.o" \
    $(pkg-config --cflags ringfeed) 2> "$tmp/old_abi.log"; then
  echo "install_test: the C++ API compiled with _GLIBCXX_USE_CXX11_ABI=0" >&2
  exit 1
fi
grep -q "C++ API needs _GLIBCXX_USE_CXX11_ABI=1" "$tmp/old_abi.log" || { cat "$tmp/old_abi.log" >&2; exit 1; }
# shellcheck disable=SC2046
"$cc" -std=c11 -D_GLIBCXX_USE_CXX11_ABI=0 "$tmp/trainer.c" -o "$tmp/trainer_c_old" $(pkg-config --cflags --libs ringfeed)
check "pkg-config, C, old-ABI flags" "$tmp/trainer_c_old"
echo "install_test: OK"
