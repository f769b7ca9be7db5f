#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of ringfeed on a fresh Debian 12 machine.
# Idempotent: re-running it only checks that the packages are present.
# Usage: sudo scripts/install-deps.sh      (root needed for apt-get)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates
  # libraries the project links
  libboost-dev            # Boost.Asio, Boost.Interprocess (header-only parts used)
  libyaml-cpp-dev         # job config
  libspdlog-dev libfmt-dev
  zlib1g-dev              # inflate (fallback path, and FHCRC-free reference)
  libisal-dev             # ISA-L: igzip inflate and crc32_iscsi (CRC-32C)
  liburing-dev            # io_uring: several reads in flight per file on slow storage (format/read_queue.h)
  nlohmann-json3-dev      # JSON output of ringfeedctl
  libcli11-dev            # command-line parsing and --help
  libsystemd-dev systemd  # sd_notify for ringfeedd; systemd-analyze verifies the unit (tests)
  # tests, fuzzing, benchmarks
  catch2                  # Catch2 v2 (single header)
  libprotobuf-dev protobuf-compiler   # independent Example serialiser for differential tests
  libbenchmark-dev        # Google Benchmark
  fuse3 libfuse3-dev      # slowfs: slow-storage emulation for benchmarks and tests (bench/slowfs)
  clang libclang-rt-14-dev  # libFuzzer + sanitizers runtime
  python3 python3-venv    # fixture generation (TensorFlow lives in a venv, not in the repo)
  python3-dev python3-pip # the ringfeed Python package (python/): headers for its extension
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
