#!/usr/bin/env bash
# Runs one command with SOURCE served through slowfs (slow-storage emulation, README.md here).
#
#   bench/slowfs/with_slowfs.sh SOURCE LATENCY_MS BANDWIDTH_MBPS -- COMMAND [ARGS...]
#
# Mounts SOURCE (a directory) read-only at a fresh temporary directory with LATENCY_MS added to
# every read request and the mount's total bandwidth capped at BANDWIDTH_MBPS (MB/s, 1 MB = 1e6
# bytes; 0 = no cap), exports SLOWFS_MOUNT=<that directory>, runs COMMAND, then always unmounts
# (also on failure or Ctrl-C) and exits with COMMAND's status. COMMAND can read the counters at
# any time from "$SLOWFS_MOUNT/.slowfs_stats" (JSON); slowfs prints them on stderr at unmount.
#
# Environment: SLOWFS_BIN, the slowfs binary (default: build/bench/slowfs/slowfs, else slowfs on
# PATH); SLOWFS_OPTIONS, extra slowfs options (e.g. "--threads=128 -o allow_other").
# Exit status: COMMAND's; 2 for usage errors; 3 when the mount fails (slowfs's message shown).
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
if [ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; }; then usage; exit 0; fi
if [ $# -lt 5 ] || [ "$4" != "--" ]; then
  echo "with_slowfs.sh: expected SOURCE LATENCY_MS BANDWIDTH_MBPS -- COMMAND..., got: $*" >&2
  echo "(run with --help for the usage)" >&2
  exit 2
fi
source_dir=$1 latency_ms=$2 bandwidth_mbps=$3
shift 4

repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SLOWFS_BIN:-}
if [ -z "$bin" ]; then
  if [ -x "$repo/build/bench/slowfs/slowfs" ]; then bin="$repo/build/bench/slowfs/slowfs"
  elif command -v slowfs >/dev/null; then bin=$(command -v slowfs)
  else
    echo "with_slowfs.sh: slowfs binary not found at $repo/build/bench/slowfs/slowfs nor on PATH;" \
         "build it (cmake --build build --target slowfs) or set SLOWFS_BIN" >&2
    exit 2
  fi
fi
if [ ! -d "$source_dir" ]; then
  echo "with_slowfs.sh: source directory '$source_dir' does not exist" >&2
  exit 2
fi

mountpoint=$(mktemp -d "${TMPDIR:-/tmp}/slowfs-mnt-XXXXXX")
slowfs_pid=""
# shellcheck disable=SC2317  # reached through the traps
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$slowfs_pid" ]; then
    # A leftover child of the command may still hold a file open: retry for 2 s, then SIGTERM,
    # on which slowfs detaches the mount lazily itself.
    local tries=0
    until fusermount3 -u "$mountpoint" 2>/dev/null || ! kill -0 "$slowfs_pid" 2>/dev/null; do
      tries=$((tries + 1))
      if [ "$tries" -ge 20 ]; then kill -TERM "$slowfs_pid" 2>/dev/null || true; break; fi
      sleep 0.1
    done
    wait "$slowfs_pid" 2>/dev/null || true   # slowfs prints its counters as it exits
    if mountpoint -q "$mountpoint" 2>/dev/null; then fusermount3 -u -z "$mountpoint" 2>/dev/null || true; fi
  fi
  rmdir "$mountpoint" 2>/dev/null || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck disable=SC2086  # SLOWFS_OPTIONS is a list of options
"$bin" "$source_dir" "$mountpoint" --latency-ms="$latency_ms" --bandwidth-mbps="$bandwidth_mbps" \
  --foreground ${SLOWFS_OPTIONS:-} &
slowfs_pid=$!
# Mounted once the virtual stats file answers (the bare directory has none).
for _ in $(seq 1 1000); do
  [ -e "$mountpoint/.slowfs_stats" ] && break
  if ! kill -0 "$slowfs_pid" 2>/dev/null; then
    wait "$slowfs_pid" || true
    slowfs_pid=""
    echo "with_slowfs.sh: slowfs could not mount $source_dir at $mountpoint (its message is above)" >&2
    exit 3
  fi
  sleep 0.01
done
if [ ! -e "$mountpoint/.slowfs_stats" ]; then
  echo "with_slowfs.sh: slowfs did not mount $mountpoint within 10 s" >&2
  exit 3
fi

export SLOWFS_MOUNT=$mountpoint
set +e
"$@"
command_status=$?
set -e
exit "$command_status"
