#!/usr/bin/env bash
# kvsub: the engine wire's cost. First the library alone (bench_wire decode:
# kvix_wire_decode, then decode + NDJSON encoding, in one process), then kvsub
# end to end: a C publisher (bench_wire pub, XPUB that blocks at the high-water
# mark instead of dropping) sends vLLM map-style batches over ipc:// to kvsub,
# whose output goes to /dev/null; batches/s from the first send to kvsub's
# last applied batch, and kvsub's CPU time (utime + stime) per block. Medians
# of several runs; markdown on stdout, progress on stderr.
set -euo pipefail
BUILD=${BUILD:?BUILD must name the build directory}
KVSUB=$BUILD/bin/kvsub
BENCH=$BUILD/bench/bench_wire
RUNS=${KVIX_BENCH_RUNS:-5}
N=${KVIX_BENCH_KVSUB_BATCHES:-40000}
EVENTS=4 BLOCKS=4 BS=16 # a batch: 4 stored events of 4 blocks of 16 tokens
for f in "$KVSUB" "$BENCH"; do
    [ -x "$f" ] || { echo "50-kvsub: $f is missing (make benches)" >&2; exit 1; }
done
tmp=$(mktemp -d)
kpid="" ppid=""
cleanup() {
    [ -n "$kpid" ] && kill "$kpid" 2>/dev/null
    [ -n "$ppid" ] && kill "$ppid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
tck=$(getconf CLK_TCK)

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "50-kvsub: library decode" >&2
: >"$tmp/lib"
for ((r = 0; r < RUNS; r++)); do
    "$BENCH" decode -n 20000 -e $EVENTS -k $BLOCKS -b $BS >>"$tmp/lib"
done
lib() { # lib MODE FIELD: median of a field over the runs
    awk -v m="$1" -v f="$2" '$1 == m { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) print kv[2] } }' \
        "$tmp/lib" | median
}

run_once() { # one end-to-end run: prints "seconds cpu_seconds"
    local sock=$tmp/pub.$1
    "$BENCH" pub "ipc://$sock" -n "$N" -e $EVENTS -k $BLOCKS -b $BS >"$tmp/pub.out" &
    ppid=$!
    for i in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
    "$KVSUB" -w "1=ipc://$sock" -b $BS >/dev/null 2>"$tmp/err" &
    kpid=$!
    local t1="" i
    # the publisher starts once kvsub subscribed, by then its signal handlers are set
    for i in $(seq 200); do grep -q '^start=' "$tmp/pub.out" && break; sleep 0.05; done
    for i in $(seq 1200); do # at most 60 s
        sleep 0.05
        kill -USR1 "$kpid"
        if tail -n 1 "$tmp/err" | grep -q "^kvsub: batches=$N "; then
            t1=$EPOCHREALTIME
            break
        fi
    done
    local cpu
    cpu=$(awk -v t="$tck" '{ print ($14 + $15) / t }' "/proc/$kpid/stat")
    kill "$kpid"
    wait "$kpid" || true
    wait "$ppid" || true
    kpid="" ppid=""
    [ -n "$t1" ] || { echo "50-kvsub: kvsub did not get all $N batches" >&2; tail -n 2 "$tmp/err" >&2; exit 1; }
    grep -q 'losses=0 ' "$tmp/err" || { echo "50-kvsub: losses in the run" >&2; exit 1; }
    local t0
    t0=$(sed -n 's/^start=//p' "$tmp/pub.out")
    echo "$t0 $t1 $cpu" | awk '{ printf "%.6f %.3f\n", $2 - $1, $3 }'
}

echo "50-kvsub: kvsub end to end, $RUNS runs of $N batches" >&2
: >"$tmp/e2e"
for ((r = 0; r < RUNS; r++)); do
    run_once "$r" >>"$tmp/e2e"
done
blocks_per_batch=$((EVENTS * BLOCKS))
secs=$(awk '{ print $1 }' "$tmp/e2e" | median)
cpu=$(awk '{ print $2 }' "$tmp/e2e" | median)
payload=$(awk -v n="$N" '$1 == "decode" { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "mb_per_s") mb = kv[2]; if (kv[1] == "ns_per_batch") ns = kv[2] } } END { printf "%.0f", mb * ns / 1000 }' "$tmp/lib" | head -1)

cat <<EOF
## kvsub: engine wire to kvix events

Batches of $EVENTS vLLM map-style BlockStored events of $BLOCKS blocks of $BS tokens
($blocks_per_batch blocks, about $payload bytes of msgpack each). Medians of $RUNS runs.

| measure | per batch | per block | rate |
|---|---|---|---|
| \`kvix_wire_decode\` (library; CPU time) | $(lib decode ns_per_batch) ns | $(lib decode ns_per_block) ns | $(lib decode mb_per_s) MB/s |
| decode + NDJSON encoding (what kvsub does; CPU time) | $(lib decode+json ns_per_batch) ns | $(lib decode+json ns_per_block) ns | $(lib decode+json mb_per_s) MB/s |
| kvsub end to end over ipc://, output to /dev/null | $(awk -v c="$cpu" -v n="$N" 'BEGIN { printf "%.1f", c / n * 1e6 }') µs CPU | $(awk -v c="$cpu" -v n="$N" -v b="$blocks_per_batch" 'BEGIN { printf "%.2f", c / n / b * 1e6 }') µs CPU | $(awk -v s="$secs" -v n="$N" 'BEGIN { printf "%.0f", n / s }') batches/s, $(awk -v s="$secs" -v n="$N" -v b="$blocks_per_batch" 'BEGIN { printf "%.0f", n * b / s }') blocks/s |

End to end is bounded by whichever of the publisher and kvsub is slower (each has one of
the machine's cores); kvsub's CPU time per block is its own cost, including ZMQ receive
and writing the output.
EOF
