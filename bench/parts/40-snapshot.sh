#!/usr/bin/env bash
# Snapshot save, verify and load of fleet-shaped indexes (bench_snapshot: the
# Mooncake conversation trace played as copies side by side, as kvreplay
# --mooncake --copies does), each beside its baseline in the same process:
# format version 1, a save that holds every writer, a load through
# kvix_index_load. File sizes at 256 and 8,192 workers; save, stall, verify
# and load at 10 million entries (8,192 workers of 1,000-odd blocks) and at
# 100 million (6,400-odd workers of 16,384-block caches); then kvdump on the
# 10-million-entry file. Prints a markdown section; progress on stderr.
# Needs $BUILD (bench/bench_snapshot, bin/kvdump). The 100-million-entry run
# holds about 5 GB of index at a time (one index at a time, freed before the
# next): KVIX_BENCH_SNAPSHOT_BIG=0 leaves it out.
set -euo pipefail
BUILD=${BUILD:?BUILD must name the build directory}
: "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
BENCH=$BUILD/bench/bench_snapshot
KVDUMP=$BUILD/bin/kvdump
RUNS=${KVIX_BENCH_RUNS:-3}
BIG_RUNS=${KVIX_BENCH_SNAPSHOT_BIG_RUNS:-1}
BIG=${KVIX_BENCH_SNAPSHOT_BIG:-1}
TRACE=$ROOT/tests/fixtures/mooncake/conversation_trace.jsonl.xz
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
echo "Fleet-shaped indexes: the Mooncake conversation trace played as copies of itself side by"
echo "side (disjoint hash ids and workers, as \`kvreplay --mooncake --copies\` does), random"
echo "routing, their events applied as they come, until the index holds the entries asked for."
echo "Each operation is timed beside its baseline in the same process on the same index: the"
echo "baseline is what kvix did before format version 3 (a version 1 file, a save that holds"
echo "every writer, a load that hands each record to \`kvix_index_load\`). The machine is a"
echo "2-core VM shared with other jobs: CPU seconds are the steadier figures."
echo
echo "### File size"
echo
for spec in "256 1 16384 256-workers" "256 32 16384 8192-workers"; do
    read -r w k cap name <<<"$spec"
    echo "$w workers a copy, $k copies ($name):"
    echo
    "$BENCH" -t "$TRACE" -S -w "$w" -c "$cap" -K "$k" -d "$tmp"
    echo
done
echo "### 10 million entries"
echo
echo "\`bench_snapshot -n 10000000 -w 256 -r $RUNS\`:"
echo
"$BENCH" -t "$TRACE" -n 10000000 -w 256 -r "$RUNS" -d "$tmp" -k "$tmp/s.kvix"
echo
if [ "$BIG" = 1 ]; then
    echo "### 100 million entries"
    echo
    echo "\`bench_snapshot -n 100000000 -w 16 -r $BIG_RUNS\`:"
    echo
    "$BENCH" -t "$TRACE" -n 100000000 -w 16 -r "$BIG_RUNS" -d "$tmp"
    echo
fi
entries=$("$KVDUMP" --check "$tmp/s.kvix" | sed 's/.*, \([0-9]*\) blocks.*/\1/')
echo "40-snapshot: timing kvdump ($RUNS runs each)" >&2
echo "### kvdump on the 10-million-entry snapshot"
echo
echo "| kvdump | seconds | M entries/s |"
echo "|---|---|---|"
for mode in --check --stats ""; do
    # shellcheck disable=SC2086
    s=$(time_median "$KVDUMP" $mode "$tmp/s.kvix")
    awk -v m="${mode:-(dump as events)}" -v s="$s" -v n="$entries" \
        'BEGIN { printf "| kvdump %s | %.3f | %.2f |\n", m, s, n / s / 1e6 }'
done
