#!/usr/bin/env bash
# Benchmark part 30: kvindex ingest through a pipe, in events/s and blocks/s,
# for NDJSON and for msgpack, against the cost of decoding alone
# (bench_ingest: kvix_reader, no index) and of moving the bytes (cat); then
# the query rate of kvindex -q against a snapshot.
#
# Workload: kvreplay --mooncake on the conversation trace (256 workers, 16384
# blocks each, block size 512), its events repeated under KVIX_BENCH_COPIES
# model names (independent partitions, same work each). Markdown on stdout,
# progress on stderr. Environment: BUILD, ROOT (bench/run.sh);
# KVIX_BENCH_RUNS (default 5), KVIX_BENCH_COPIES (default 4).
set -euo pipefail
: "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${BUILD:=$ROOT/build}"
RUNS=${KVIX_BENCH_RUNS:-5}
COPIES=${KVIX_BENCH_COPIES:-4}
TRACE=${KVIX_BENCH_TRACE:-$ROOT/tests/fixtures/mooncake/conversation_trace.jsonl.xz}
KVINDEX=$BUILD/bin/kvindex
KVREPLAY=$BUILD/bin/kvreplay
INGEST=$BUILD/bench/bench_ingest
for b in "$KVINDEX" "$KVREPLAY" "$INGEST"; do
    [ -x "$b" ] || { echo "30-kvindex: $b not built (make BUILD=$BUILD benches)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "30-kvindex: generating the workload" >&2
"$KVREPLAY" -q --mooncake "$TRACE" --workers 256 --capacity 16384 >"$tmp/log.ndjson"
grep -v '"type":"query"' "$tmp/log.ndjson" >"$tmp/one.ndjson"
for ((c = 0; c < COPIES; c++)); do
    sed "s/\"model\":\"default\"/\"model\":\"m$c\"/" "$tmp/one.ndjson"
done >"$tmp/ev.ndjson"
grep '"type":"query"' "$tmp/log.ndjson" | sed 's/"model":"default"/"model":"m0"/' >"$tmp/q.ndjson"
"$KVREPLAY" -q --fast -f msgpack "$tmp/ev.ndjson" >"$tmp/ev.msgpack"
"$KVREPLAY" -q --fast -f msgpack "$tmp/q.ndjson" >"$tmp/q.msgpack"
read -r _ events blocks _ _ _ _ < <("$INGEST" "$tmp/ev.ndjson")
read -r queries _ _ _ _ _ _ < <("$INGEST" "$tmp/q.ndjson")
"$KVINDEX" --quiet -s "$tmp/snap.kvix" "$tmp/ev.msgpack"

# median of $RUNS runs: "wall cpu" seconds of a pipeline whose last stage is
# timed by /usr/bin/time (cpu = its user + system time)
median2() {
    local all w c
    all=$(cat)
    med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
    w=$(cut -d' ' -f1 <<<"$all" | med)
    c=$(cut -d' ' -f2 <<<"$all" | med)
    echo "$w $c"
}
run_timed() { # run_timed INPUT CMD... : cat INPUT | CMD, RUNS times
    local i t0 t1 f=$1
    shift
    for ((i = 0; i < RUNS; i++)); do
        t0=$EPOCHREALTIME
        cat "$f" | /usr/bin/time -f "%U %S" -o "$tmp/time" "$@" >/dev/null 2>"$tmp/stderr" ||
            { echo "30-kvindex: $* failed: $(head -3 "$tmp/stderr")" >&2; exit 1; }
        t1=$EPOCHREALTIME
        awk -v a="$t0" -v b="$t1" '{ printf "%.4f %.4f\n", b - a, $1 + $2 }' "$tmp/time"
    done | median2
}

row() { # row LABEL FILE "WALL CPU" COUNT [BLOCKS]: rates per wall second and per CPU second
    local size
    size=$(stat -c %s "$2")
    read -r w c <<<"$3"
    awk -v l="$1" -v w="$w" -v c="$c" -v n="$4" -v b="${5:-0}" -v s="$size" 'BEGIN {
        if (c < 0.001) c = 0.001
        printf "| %s | %.3f | %.3f | %.0f | %.0f | %s | %.0f |\n", l, w, c, n / w, n / c,
            (b > 0 ? sprintf("%.2f M", b / c / 1e6) : "-"), s / c / 1e6 }'
}

qrow() { # qrow LABEL "WALL CPU" LOAD_CPU
    read -r w c <<<"$2"
    awk -v l="$1" -v w="$w" -v c="$c" -v z="$3" -v n="$queries" 'BEGIN {
        d = c - z; if (d < 0.001) d = 0.001
        printf "| %s | %.3f | %.3f | %.0f | %.0f |\n", l, w, c, n / w, n / d }'
}

echo "30-kvindex: timing ($RUNS runs each)" >&2
nd_cat=$(run_timed "$tmp/ev.ndjson" cat)
nd_dec=$(run_timed "$tmp/ev.ndjson" "$INGEST")
nd_idx=$(run_timed "$tmp/ev.ndjson" "$KVINDEX" --quiet)
nd_thr=$(run_timed "$tmp/ev.ndjson" "$KVINDEX" --quiet --threads 2)
mp_cat=$(run_timed "$tmp/ev.msgpack" cat)
mp_dec=$(run_timed "$tmp/ev.msgpack" "$INGEST")
mp_idx=$(run_timed "$tmp/ev.msgpack" "$KVINDEX" --quiet)
mp_thr=$(run_timed "$tmp/ev.msgpack" "$KVINDEX" --quiet --threads 2)
q_dec=$(run_timed "$tmp/q.ndjson" "$INGEST")
q_idx=$(run_timed "$tmp/q.ndjson" "$KVINDEX" --quiet -q -s "$tmp/snap.kvix")
qm_idx=$(run_timed "$tmp/q.msgpack" "$KVINDEX" --quiet -q -s "$tmp/snap.kvix")
load=$(run_timed /dev/null "$KVINDEX" --quiet -q -s "$tmp/snap.kvix")

cat <<EOF
## kvindex: ingest and query rates

Workload: \`kvreplay --mooncake\` on the conversation trace (256 workers, 16384 blocks per
worker, block size 512), its $(($(wc -l <"$tmp/one.ndjson"))) events repeated under $COPIES model
names: $events events, $blocks blocks, $(awk -v s="$(stat -c %s "$tmp/ev.ndjson")" 'BEGIN{printf "%.1f", s/1e6}') MB of NDJSON,
$(awk -v s="$(stat -c %s "$tmp/ev.msgpack")" 'BEGIN{printf "%.1f", s/1e6}') MB of msgpack, piped in by \`cat\`. Wall time is the whole pipeline; CPU is
the timed command's user + system time (the machine is shared: CPU is the steadier
figure). Median of $RUNS runs. "decode only" is \`bench_ingest\`: kvix_reader into
events, no index.

| run | wall s | CPU s | events/s (wall) | events/s (CPU) | blocks/s (CPU) | MB/s (CPU) |
|---|---|---|---|---|---|---|
$(row "NDJSON: cat (moving the bytes)" "$tmp/ev.ndjson" "$nd_cat" "$events" "$blocks")
$(row "NDJSON: decode only" "$tmp/ev.ndjson" "$nd_dec" "$events" "$blocks")
$(row "NDJSON: kvindex" "$tmp/ev.ndjson" "$nd_idx" "$events" "$blocks")
$(row "NDJSON: kvindex --threads 2" "$tmp/ev.ndjson" "$nd_thr" "$events" "$blocks")
$(row "msgpack: cat" "$tmp/ev.msgpack" "$mp_cat" "$events" "$blocks")
$(row "msgpack: decode only" "$tmp/ev.msgpack" "$mp_dec" "$events" "$blocks")
$(row "msgpack: kvindex" "$tmp/ev.msgpack" "$mp_idx" "$events" "$blocks")
$(row "msgpack: kvindex --threads 2" "$tmp/ev.msgpack" "$mp_thr" "$events" "$blocks")

Queries: the trace's $queries prefix queries (local hashes, one partition), answered by
\`kvindex -q\` from the snapshot of the whole workload. Loading the snapshot alone takes
$(cut -d' ' -f2 <<<"$load") s of CPU; the last column is the query rate once that is taken off.

| run | wall s | CPU s | queries/s (wall) | queries/s (CPU, without the load) |
|---|---|---|---|---|
$(qrow "NDJSON queries: decode only" "$q_dec" 0)
$(qrow "NDJSON queries: kvindex -q" "$q_idx" "$(cut -d' ' -f2 <<<"$load")")
$(qrow "msgpack queries: kvindex -q" "$qm_idx" "$(cut -d' ' -f2 <<<"$load")")
EOF
