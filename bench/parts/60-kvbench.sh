#!/usr/bin/env bash
# Benchmark part 60: kvbench, the index replayed from a Mooncake event+query
# log (kvreplay --mooncake: 256 workers, 16384 blocks per worker, LRU, block
# size 512), every backend side by side, a load sweep per backend, a profile
# of the positional backend. Markdown on stdout, progress on stderr; results
# in bench/results/ (kvbench.json, .dat, .svg, .png).
#
# Environment: BUILD, ROOT (from bench/run.sh); KVBENCH_RUNS (runs per
# configuration, default 5), KVBENCH_TRACE (default: the conversation trace).
set -euo pipefail
: "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${BUILD:=$ROOT/build}"
RUNS=${KVBENCH_RUNS:-5}
TRACE=${KVBENCH_TRACE:-$ROOT/tests/fixtures/mooncake/conversation_trace.jsonl.xz}
KVBENCH=$BUILD/bench/kvbench
KVREPLAY=$BUILD/bin/kvreplay
RES=$ROOT/bench/results
mkdir -p "$RES"
cd "$ROOT"
for b in "$KVBENCH" "$KVREPLAY"; do
    [ -x "$b" ] || { echo "60-kvbench: $b not built (make BUILD=$BUILD benches)" >&2; exit 1; }
done
if ! command -v gnuplot >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "60-kvbench: installing gnuplot-nox" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            gnuplot-nox >&2 || { apt-get update -qq >&2 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                gnuplot-nox >&2; } || true
    fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The event+query log (generated, not timed).
log=$tmp/mooncake.msgpack
t0=$(date +%s.%N)
"$KVREPLAY" --mooncake "$TRACE" --workers 256 --capacity 16384 -f msgpack >"$log"
t1=$(date +%s.%N)
echo "60-kvbench: kvreplay --mooncake wrote $(wc -l <"$log") records in $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s" >&2

# Every backend, one writer x one reader, exact rule; then the three backends
# at their defaults under the timestamp rule, and with 2 writers x 2 readers
# under both rules. Each of those three is swept.
backends=reference,radix,positional,positional:1,positional:2,positional:4,positional:8,positional:16,positional:32,positional:64
backends=$backends,positional:4:scan,positional:16:scan,positional:64:scan
main3=reference,radix,positional
cmd=(bench/kvbench -n "$RUNS" -b "$backends" -t 1x1,2x2 --rule both --other-backends "$main3"
    --sweep-only "$main3" --sweep-from 0.5 --json bench/results/kvbench.json
    --dat bench/results/kvbench.dat)
"$KVBENCH" "${cmd[@]:1}" "$log" >"$tmp/table.md"
# The checked-in JSON names the generated log by how it was made.
sed -i "s|$log|kvreplay --mooncake $(basename "$TRACE")|g" "$RES/kvbench.json" "$tmp/table.md"

if command -v gnuplot >/dev/null 2>&1; then
    for fmt in svg png; do
        gnuplot -e "datafile='$RES/kvbench.dat'; outfile='$RES/kvbench.$fmt'; fmt='$fmt'" \
            "$ROOT/bench/plot.gp"
    done
else
    echo "60-kvbench: gnuplot missing: no plot" >&2
fi

# Profile: the positional backend, exact rule, 1x1, unpaced; perf samples
# only inside the timed replays (kvbench drives perf through a control fifo).
prof=""
if command -v perf >/dev/null 2>&1; then
    mkfifo "$tmp/ctl"
    exec 7<>"$tmp/ctl"
    if perf record -q -D -1 --control fd:7 -e cpu-clock -o "$tmp/perf.data" -- "$KVBENCH" \
        -n 10 --no-sweep --no-fork --no-verify --no-timing --rule exact -b positional -q \
        --perf-ctl 7 "$log" >/dev/null 2>"$tmp/perf.err"; then
        prof=$(perf report -i "$tmp/perf.data" --stdio --no-children --percent-limit 1 \
            --sort dso,symbol 2>/dev/null | grep -v "^#" | grep -v "^$" | sed -E "s/ +- +- *$//" | head -25 || true)
    fi
    exec 7>&-
fi

# Instruction counts (callgrind, independent of the machine's load): one cold
# replay per backend, exact rule, 1x1, creating and freeing the index included.
cgtab=""
cgtop=""
if command -v valgrind >/dev/null 2>&1 && command -v callgrind_annotate >/dev/null 2>&1; then
    ops=$(jq -r '.input.block_ops.total' "$RES/kvbench.json")
    for b in positional radix reference; do
        echo "60-kvbench: callgrind, $b" >&2
        valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$b" --toggle-collect=replay_run \
            "$KVBENCH" -n 1 --cold --no-sweep --no-fork --no-verify --no-timing --rule exact \
            -b "$b" -q "$log" >/dev/null 2>"$tmp/cg.$b.err" || continue
        ir=$(callgrind_annotate "$tmp/cg.$b" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
        # Self cost of the front end's answer assembly: every function of
        # lib/index/index_query.c (hits to scores, the sorts, inlined there) and the
        # front end's inline helpers inlined into it; the backend's search is
        # called through its ops, so it is not counted.
        srt=$(callgrind_annotate --auto=no --threshold=100 "$tmp/cg.$b" |
            awk '/^ *[0-9,]+ .*(index_query\.c:|index_front_int\.h:query_part|sort)/ {gsub(",", "", $1); m += $1}
                 END {print m + 0}')
        cgtab+=$(awk -v b="$b" -v ir="$ir" -v s="$srt" -v ops="$ops" 'BEGIN {
            printf "| %s | %.0f M | %.0f | %.0f%% | %.0f |\n", b, ir / 1e6, ir / ops,
                100 * s / ir, (ir - s) / ops }')$'\n'
    done
    cgtop=$(callgrind_annotate "$tmp/cg.positional" 2>/dev/null | sed -n '/file:function/,$p' |
        sed -n '3,17p' | sed -E 's/ \[[^]]*\]$//')
fi

j=$RES/kvbench.json
q() { jq -r "$1" "$j"; }
pos='.configs[] | select(.label == "positional (default)" and .rule == "exact" and .writers == 1 and .readers == 1)'
pos_ops=$(q "$pos | .median.block_ops_per_s / 1e6 | . * 100 | round / 100")
pos_core=$(q "$pos | .median.block_ops_per_cpu_s / 1e6 | . * 100 | round / 100")
pos_p99=$(q "$pos | .query_latency_ns.p99 | round")
pos_sat=$(q "$pos | (.saturation_block_ops_per_s // 0) / 1e6 | . * 100 | round / 100")

cat <<EOF
## kvbench: the index replaying a Mooncake log (bench/kvbench.c)

**The log.** \`kvreplay --mooncake $(basename "$TRACE") --workers 256 --capacity 16384 -f msgpack\`
(block size 512, LRU of leaf blocks per worker, random routing): per request a query, then
the removed and stored events of the worker it went to. kvbench decodes it into memory
before anything is timed, then replays it into an empty index, in a process of its own
per run; runs are interleaved across backends (so a change of machine load hits all of
them alike) and every figure is the median of $RUNS runs. In each process the log is
replayed twice: the second replay, on a warm heap (the pages of the first index reused,
as in a long-running index whose blocks churn), gives the main figures; the first, in a
fresh process, is the "cold" column (its page faults are a large share of the time on
this VM). Writes go to writer lanes sticky by worker (\`kvix_index_apply\`), queries to
reader lanes (\`kvix_index_query_event\`, each one timed with \`clock_gettime\`); the
dispatching thread is lane 0 of both, so 1x1 is one thread. Block-ops as Dynamo counts
them: one per query block, one per stored block; removals count 0 (this trace evicts
nothing anyway: its workers never fill). "per cpu-s" divides by the CPU time of the whole
process, i.e. per core; it is the figure least disturbed by a loaded machine.

**Causality.** Every answer feeds a checksum (scored (query, worker) pairs, score sum and
an order-independent hash of all answers) that must equal a sequential replay's on the
reference backend; a mismatch fails the benchmark. Rule **exact** keeps log order with a
barrier between each run of writes and the run of queries after it, so every query sees
exactly the writes before it. On this log that is a barrier per request (its query, then
its writes): writes and queries never run in parallel, and extra threads only add
hand-offs (the 2x2 rows). Rule **timestamp** takes a timestamp's records together (the
trace is bucketed at about 3 s): all its writes in parallel, a barrier, all its queries
in parallel. Its queries also see the writes of their own timestamp that come after them
in the log (their own request's stores among them), so its answers differ from the exact
rule's (more matched blocks); they are checked against a sequential replay in that
order.

Command: \`${cmd[*]} LOG\`

$(cat "$tmp/table.md")

**Sweep.** The log's timestamps are divided by a speed-up and each segment is dispatched
at its scaled time; the offered load (block-ops / scaled span) rises by 19% a step from
half the unpaced ceiling until two points fall below 95% of it (if the first point
already does, it falls instead). The saturation point is the last offered load achieved
(">" when the time budget ended the search first). Plot: [kvbench.svg](results/kvbench.svg)
([PNG](results/kvbench.png)); every figure, every run: [kvbench.json](results/kvbench.json).

![achieved vs offered block-ops/s](results/kvbench.svg)

**Targets and NVIDIA Dynamo's Flash Indexer** (170M block-ops/s on a 24-core desktop,
about 7M per core; query p99 2 us). Positional backend, one writer, exact rule, as fast
as possible: **${pos_ops}M block-ops/s** wall, **${pos_core}M per CPU-second** (target: 10M
per core; Dynamo about 7M), query p99 **${pos_p99} ns** (target: under 1000 ns; Dynamo
2000 ns); saturation ${pos_sat}M block-ops/s. An answer on this log scores about 250
workers (block 0 is in every request, so every worker holds it): building and sorting
that answer is most of a query's time, which Dynamo's unsorted per-worker map does not pay.
Dynamo's figure comes from its own harness on 24 cores; ours is one core of this 2-core
VM, every answer checked.

**Instructions** (callgrind: the same count on a loaded or an idle machine), one cold
replay, exact rule, 1x1, creating and freeing the index included. "Answers" is the self
cost of the index front end's answer assembly, \`lib/index/index_query.c\` (turning the
backend's hits into scores and sorting them, the sorts inlined), not the backend's search:

| backend | instructions per replay | per block-op | answers | per block-op without them |
|---|--:|--:|--:|--:|
${cgtab:-| callgrind unavailable | | | | |
}
Where the positional replay's instructions go (self cost, top 15):

\`\`\`
${cgtop:-callgrind unavailable}
\`\`\`

**Profile** of the positional backend (\`perf record -e cpu-clock\`, exact rule, 1x1, 10 x 2
unpaced replays, samples only inside the replays; symbols above 1% of samples):

\`\`\`
${prof:-perf unavailable}
\`\`\`
EOF
