#!/usr/bin/env bash
# Benchmark part 65: the index at fleet scale (issue 11), beside NVIDIA
# Dynamo's figures measured on this machine kind. Streams from kvreplay
# --mooncake: 256 workers (the whole conversation trace) and 8192 workers
# (the trace copied 32 times with --copies 32: disjoint hash ids and worker
# ranges, the copies of each request back to back), caches of 16384 and 512
# blocks. kvbench replays each with the positional and radix backends, one
# thread, exact rule, answers checked against the reference backend.
#
# Also 1024, 4096 and 16384 workers (--copies 4, 16, 64, cut streams), to
# show how the costs follow the fleet, with two plots (bench/plot.gp): the
# index's bytes against its (worker, block) pairs and unique blocks
# (fleet-index.dat -> fleet-index.svg/png), and a query's latency against its
# scored workers and matched blocks (kvbench --query-cost ->
# fleet-qcost-wN.dat -> fleet-query.svg/png).
#
# Environment: BUILD, ROOT (from bench/run.sh); KVBENCH_RUNS (runs per
# configuration, default 3); FLEET_LIMIT (trace requests of the copied
# streams, default 600); FLEET_WHOLE (default 1: also the whole trace x32,
# 17.3M block-ops, with 16384- and 512-block caches, positional only, one
# run each, answers checked: about 5 minutes each on this 2-core VM under load 9,
# the 512-block one; 0 leaves those rows out).
set -euo pipefail
: "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${BUILD:=$ROOT/build}"
RUNS=${KVBENCH_RUNS:-3}
LIMIT=${FLEET_LIMIT:-600}
WHOLE=${FLEET_WHOLE:-1}
TRACE=$ROOT/tests/fixtures/mooncake/conversation_trace.jsonl.xz
KVBENCH=$BUILD/bench/kvbench
KVREPLAY=$BUILD/bin/kvreplay
RES=$ROOT/bench/results
mkdir -p "$RES"
for b in "$KVBENCH" "$KVREPLAY"; do
    [ -x "$b" ] || { echo "65-fleet: $b not built (make BUILD=$BUILD benches)" >&2; exit 1; }
done
if ! command -v gnuplot >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "65-fleet: installing gnuplot-nox" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gnuplot-nox >&2 || { apt-get update -qq >&2 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            gnuplot-nox >&2; } || true
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Dynamo's figures on the same stream (issue 11), for the rows that have one:
# STREAM BACKEND -> text.
dynamo() {
    case "$1 $2" in
    "w256-c16384 positional") echo "1.40-1.77 M/s, p99 34-46 us" ;;
    "w256-c16384 radix") echo "1.51-1.78 M/s" ;;
    "w8192-c16384-whole positional") echo "1.01-1.38 M/s, p99 44-63 us" ;;
    "w8192-c16384-whole radix") echo "1.38-1.50 M/s" ;;
    "w8192-c512-whole positional") echo "1.00 M/s" ;;
    "w8192-c512-whole radix") echo "1.39 M/s" ;;
    *) echo "-" ;;
    esac
}

lim=()
[ "$LIMIT" != 0 ] && lim=(--limit "$LIMIT")
rows=""
whole_s=""
# W K CAP WHOLE: W x K workers, caches of CAP blocks; WHOLE 1: the whole trace
# (positional, one run), else the copies cut to FLEET_LIMIT requests.
specs=("256 1 16384 0" "256 1 512 0" "256 4 16384 0" "256 16 16384 0" "256 32 16384 0"
    "256 64 16384 0")
[ "$WHOLE" = 1 ] && specs+=("256 32 16384 1" "256 32 512 1")
for s in "${specs[@]}"; do
    read -r w k cap whole <<<"$s"
    name="w$((w * k))-c$cap"
    opts=(--workers "$w" --capacity "$cap")
    bopts=(-n "$RUNS" -b positional,radix)
    label="$((w * k)) workers, $cap-block caches"
    if [ "$whole" = 1 ]; then
        name+=-whole
        opts+=(--copies "$k")
        bopts=(-n 1 --cold -b positional)
        label+=" (x$k, whole trace)"
    elif [ "$k" != 1 ]; then
        opts+=(--copies "$k" "${lim[@]}")
        label+=" (x$k${lim:+, ${LIMIT} requests})"
    fi
    # the query-cost plot's fleets: the first backend's queries, one more replay
    qc=()
    [ "$whole" = 0 ] && [ "$cap" = 16384 ] && qc=(--query-cost "$RES/fleet-qcost-w$((w * k)).dat")
    echo "65-fleet: $name: kvreplay --mooncake ${opts[*]}" >&2
    t0=$(date +%s)
    "$KVREPLAY" -q --mooncake "$TRACE" "${opts[@]}" -f msgpack >"$tmp/$name.mp"
    "$KVBENCH" -q "${bopts[@]}" -t 1x1 --rule exact --no-sweep "${qc[@]}" \
        --json "$RES/fleet-$name.json" "$tmp/$name.mp" >/dev/null
    rm -f "$tmp/$name.mp"
    [ "$whole" = 1 ] && whole_s+="$name $(($(date +%s) - t0)) s; "
    sed -i "s|$tmp/$name.mp|kvreplay --mooncake $(basename "$TRACE") ${opts[*]}|" \
        "$RES/fleet-$name.json"
    for be in $(jq -r '.configs[].backend' "$RES/fleet-$name.json"); do
        rows+=$(jq -r --arg s "$label" --arg be "$be" --arg dyn "$(dynamo "$name" "$be")" '
            .input.block_ops.total as $ops | .configs[] | select(.backend == $be) |
            "| \($s) | \(.backend) | \($ops / 1e6 * 100 | round / 100) M | \(.median.block_ops_per_cpu_s / 1e6 * 100 | round / 100) | \(.median.block_ops_per_s / 1e6 * 100 | round / 100) | \($dyn) | \(.query_latency_ns.p50 / 1000 * 10 | round / 10) | \(.query_latency_ns.p99 / 1000 * 10 | round / 10) | \(.memory.bytes_per_worker_block | round) | \(.memory.index_bytes / 1048576 | round) | \(.memory.peak_rss_growth_kb / 1024 | round) | \(if .checksum_ok then "ok" else "**MISMATCH**" end) |"' \
            "$RES/fleet-$name.json")$'\n'
    done
done

# The index's size per fleet (the c16384 streams; 256 is the whole trace, the
# others cut), one gnuplot block per backend.
{
    first=1
    for be in positional radix; do
        [ $first = 1 ] || printf '\n\n'
        first=0
        echo "\"$be\""
        echo "# workers pairs unique_blocks index_bytes backend_bytes"
        for n in 256 1024 4096 8192 16384; do
            jq -r --arg be "$be" --arg n "$n" '.configs[] | select(.backend == $be) |
                "\($n) \(.memory.blocks) \(.memory.unique_blocks) \(.memory.index_bytes) \(.memory.backend_bytes)"' \
                "$RES/fleet-w$n-c16384.json"
        done
    done
} >"$RES/fleet-index.dat"
plots=""
if command -v gnuplot >/dev/null 2>&1; then
    for fmt in svg png; do
        gnuplot -e "kind='fleet-index'; datafile='$RES/fleet-index.dat'; outfile='$RES/fleet-index.$fmt'; fmt='$fmt'" \
            "$ROOT/bench/plot.gp"
        gnuplot -e "kind='fleet-query'; resdir='$RES'; fleets='256 1024 4096 16384'; outfile='$RES/fleet-query.$fmt'; fmt='$fmt'" \
            "$ROOT/bench/plot.gp"
    done
    plots=yes
else
    echo "65-fleet: gnuplot missing: no plots" >&2
fi

whole_text="The whole trace x32 was left out of this run (\`FLEET_WHOLE=0\`)."
[ "$WHOLE" = 1 ] && whole_text="The whole trace x32 (17.3M block-ops; with 512-block caches, evictions) is played with
the positional backend only, one run each, answers checked; each took, stream generation and
verification included: ${whole_s%; }."

cat <<EOF
## The index at fleet scale: 256 to 16384 workers (bench/parts/65-fleet.sh)

**The streams.** \`kvreplay --mooncake $(basename "$TRACE") --workers 256 --capacity C\`
(per request a query, then the routed worker's removed and stored events; random routing,
LRU of leaf blocks), and the same with \`--copies 32\`: the trace played 32 times side by
side into disjoint hash ids and worker ranges, the 32 copies of each request back to back
(Dynamo's duplicate_hash_space), so 8192 workers; \`--copies\` 4, 16 and 64 give 1024, 4096
and 16384 workers, to see how the costs follow the fleet. Rows marked "${LIMIT} requests" are
cut to the first ${LIMIT} requests of the trace (\`FLEET_LIMIT\`) to keep \`make bench\` short;
so cut, no worker fills a 512-block cache (evictions begin after about 4000 requests), so
they use 16384-block caches only. Rows marked "whole trace" play all of it.
$whole_text

kvbench, one thread (1 writer x 1 reader), exact rule, every answer checked against a
sequential replay on the reference backend; median of $RUNS runs (the whole-trace rows:
one). Block-ops as Dynamo counts them: query blocks + stored blocks (removals count 0).
"per CPU-s" divides by the process's CPU time (the figure least disturbed by this shared
2-core machine's load); "per s" by wall-clock time, as Dynamo's figures are. Bytes per
(worker, block) are \`kvix_index_stats\`'s bytes over its stored (worker, block) pairs.
"Dynamo, same stream": issue 11's figures for that stream (whole trace only; a harness
around Dynamo's own indexer code, one thread, inline, on this machine kind, another sitting).

| stream | backend | block-ops | M block-ops per CPU-s | M block-ops per s | Dynamo, same stream | query p50 us | p99 us | bytes per (worker, block) | index MiB | peak RSS growth MiB | answers |
|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|---|
$rows
**Dynamo, for comparison** (issue 11: the same streams, whole trace, replayed in one sitting
on this machine kind by a harness around Dynamo's own indexer code, one thread, inline;
kvix's figures of that sitting beside them):

| stream | Dynamo positional (Flash Indexer) | Dynamo radix | kvix positional then | kvix radix then |
|---|---|---|---|---|
| 256 workers, 16384-block caches (540k block-ops) | 1.40-1.77 M/s, p99 34-46 us | 1.51-1.78 M/s | 2.21-3.09 M/s, p99 14-23 us | 1.70-2.95 M/s |
| x32: 8192 workers, 16384-block caches (17.3M block-ops) | 1.01-1.38 M/s, p99 44-63 us, whole process 1.7 GB | 1.38-1.50 M/s, process 2.2 GB | 0.88-1.07 M/s, p99 45-72 us, index growth 6.7 GB | 0.72-0.88 M/s, 6.9 GB |
| x32, 512-block caches | 1.00 M/s | 1.39 M/s | about 0.96 M/s | about 0.56 M/s |

Targets of issue 11: at most 48 bytes per (worker, block) at 256 and 8192 workers; one
thread, 256 workers: 9 M block-ops per CPU-s, query p99 5 us; 8192 workers: 7 M per CPU-s,
p99 10 us, index peak RSS below 1 GB; with evictions within 20 % of those.
EOF

if [ -n "$plots" ]; then
    cat <<EOF

**How the costs grow** (\`bench/plot.gp\`; data in \`bench/results/fleet-index.dat\` and
\`fleet-qcost-wN.dat\`). The index's bytes against its stored (worker, block) pairs and its
unique blocks, at 256 (whole trace) and 1024 to 16384 workers (cut streams), and its bytes
per pair against the fleet:

![index size against pairs, unique blocks and fleet size](results/fleet-index.svg)

A query's median latency (positional; one more replay per fleet, \`kvbench --query-cost\`:
each query timed, grouped by powers of two of its scored workers and of its longest match;
groups of fewer than 5 queries left out) against its scored workers and its matched blocks,
one line per fleet size. In these streams a query scores at most the 256 workers of its own
copy, whatever the fleet:

![query latency against scored workers and matched blocks](results/fleet-query.svg)
EOF
fi
