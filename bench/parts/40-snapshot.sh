#!/usr/bin/env bash
# Snapshot save and load at 10 million (worker, block) entries (bench_snapshot:
# save, open+verify, load, and rebuilding by event replay as the baseline),
# then kvdump on that snapshot. Prints a markdown section; progress on stderr.
# Needs $BUILD (bench/bench_snapshot, bin/kvdump).
set -euo pipefail
BUILD=${BUILD:?BUILD must name the build directory}
BENCH=$BUILD/bench/bench_snapshot
KVDUMP=$BUILD/bin/kvdump
RUNS=${KVIX_BENCH_RUNS:-3}
ENTRIES=${KVIX_BENCH_SNAPSHOT_ENTRIES:-10000000}
for f in "$BENCH" "$KVDUMP"; do
    [ -x "$f" ] || { echo "40-snapshot: $f is missing (make benches)" >&2; exit 1; }
done
# on the disk the repository is on (fsync is part of a save), not a tmpfs
tmp=$(mktemp -d "${KVIX_BENCH_DIR:-$ROOT}/.bench-snapshot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

time_median() {
    local i t0 t1
    for ((i = 0; i < RUNS; i++)); do
        t0=$EPOCHREALTIME
        "$@" >/dev/null
        t1=$EPOCHREALTIME
        echo "$t0 $t1"
    done | awk '{ print $2 - $1 }' | sort -g | awk '{ v[NR] = $1 } END {
        print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

echo "## Snapshot save and load"
echo
echo "\`bench_snapshot -n $ENTRIES -r $RUNS\`: an index of $ENTRIES (worker, block) entries (20 workers"
echo "sharing 4 prompt forests, mixed tiers, some orphans), saved to and loaded from a file on the"
echo "repository's disk. Load runs on one thread (the default), then on one thread per core; the"
echo "baseline rebuilds the same state by applying its events (no parsing) on one thread."
echo
"$BENCH" -n "$ENTRIES" -r "$RUNS" -d "$tmp" -k "$tmp/s.kvix"
echo
entries=$("$KVDUMP" --check "$tmp/s.kvix" | sed 's/.*, \([0-9]*\) blocks.*/\1/')
echo "40-snapshot: timing kvdump ($RUNS runs each)" >&2
echo "| kvdump on that snapshot | seconds | M entries/s |"
echo "|---|---|---|"
for mode in --check --stats ""; do
    # shellcheck disable=SC2086
    s=$(time_median "$KVDUMP" $mode "$tmp/s.kvix")
    awk -v m="${mode:-(dump as events)}" -v s="$s" -v n="$entries" \
        'BEGIN { printf "| kvdump %s | %.3f | %.2f |\n", m, s, n / s / 1e6 }'
done
