#!/usr/bin/env bash
# kvindex --listen under load, on loopback: wrk posts POST /query_by_hash
# (the prompts of the 256-worker Mooncake log, `kvreplay --mooncake`, one
# partition) while the same log's events are fed to kvindex's stdin without
# a pause, over and over. Three phases of D seconds on one kvindex:
#   ingest only   events applied per second (from /metrics, start to end)
#   both          requests/s with p50/p99/max latency (wrk --latency), and
#                 the ingest rate over the same window
#   queries only  the feed stopped: requests/s and latency alone
#   /health only  GET /health: what a request costs before any work (the floor)
# then, on a second kvindex with --http-nice NICE, ingest only and both again
# (the HTTP threads at a lower priority: the CPU share ingest keeps); then
# queries while the events arrive paced at PACE a second (kvreplay --rate: a
# live fleet's rate, not ingest's ceiling), and queries only and GET /health
# only at other connection counts (-c: p99 against throughput). Then at
# 8192 workers (the trace copied 32 times side by side, `--copies 32 --limit
# 600`, its events applied once): POST /query_by_hash and POST /query (token
# ids of the stored prompts) alone. Each run starts fresh kvindexes; medians
# of RUNS runs. Markdown on stdout, progress on stderr.
set -euo pipefail
BUILD=${BUILD:?BUILD must name the build directory}
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
B=$BUILD/bin
RUNS=${KVIX_BENCH_RUNS:-3}
D=${KVIX_BENCH_HTTP_SECONDS:-5}
CONNS=${KVIX_BENCH_HTTP_CONNS:-32}
WRK_THREADS=${KVIX_BENCH_WRK_THREADS:-1}
HTTP_THREADS=${KVIX_BENCH_HTTP_THREADS:-2}
NICE=${KVIX_BENCH_HTTP_NICE:-10}
PACE=${KVIX_BENCH_HTTP_PACE:-10000}
SWEEP=${KVIX_BENCH_HTTP_SWEEP:-8 16 64 128}
PY=/usr/bin/python3
command -v wrk >/dev/null || { echo "80-http: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
for f in "$B/kvindex" "$B/kvreplay"; do
    [ -x "$f" ] || { echo "80-http: $f is missing (make)" >&2; exit 1; }
done
. "$(dirname "$0")/../lib.sh"

# bodies LOG OUT: the log's prompts as Dynamo /query_by_hash bodies, one a line
bodies() {
    "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        if '"type":"query"' not in line:
            continue
        q = json.loads(line)
        out.write(json.dumps({"block_hashes": [int(h, 16) for h in q["local"]],
                              "model_name": q["model"]}, separators=(",", ":")) + "\n")
PYEOF
}

echo "80-http: the Mooncake log" >&2
"$B/kvreplay" -q --mooncake "$ROOT/tests/fixtures/mooncake/conversation_trace.jsonl.xz" >"$tmp/log"
grep -v '"type":"query"' "$tmp/log" >"$tmp/events"
NEV=$(wc -l <"$tmp/events")
NBLK=$(grep -o '"local"' "$tmp/events" | wc -l)
bodies "$tmp/log" "$tmp/bodies"
NQ=$(wc -l <"$tmp/bodies")
echo "80-http: the log at 8192 workers" >&2
MC=(--mooncake "$ROOT/tests/fixtures/mooncake/conversation_trace.jsonl.xz" --copies 32 --limit 600)
"$B/kvreplay" -q "${MC[@]}" >"$tmp/log8k"
grep -v '"type":"query"' "$tmp/log8k" >"$tmp/events8k"
NEV8=$(wc -l <"$tmp/events8k")
bodies "$tmp/log8k" "$tmp/bodies8k"
# /query: the token ids of prompts stored from the root (the same trace with
# --tokens), the first 200 (tens of KB of JSON each)
"$B/kvreplay" -q --tokens "${MC[@]}" | "$PY" -c '
import json, sys
n = 0
with open(sys.argv[1], "w") as out:
    for line in sys.stdin:
        if n == 200 or "\"parent\":null" not in line or "\"stored\"" not in line:
            continue
        e = json.loads(line)
        out.write(json.dumps({"token_ids": [t for b in e["tokens"] for t in b],
                              "model_name": e["model"]}, separators=(",", ":")) + "\n")
        n += 1
' "$tmp/tokens8k"
NQ8=$(wc -l <"$tmp/bodies8k")
NT8=$(wc -l <"$tmp/tokens8k")
TOKAVG=$(awk '{ n += gsub(/,/, ",") } END { printf "%.0f", n / NR }' "$tmp/tokens8k")
# every request formatted once, in init: wrk shares the 2 cores, and a
# wrk.format per request cost it a third more CPU per request
cat >"$tmp/post.lua" <<'LUAEOF'
local reqs = {}
local i = 0
init = function(args)
    for line in io.lines(os.getenv("KVIX_BODIES")) do
        reqs[#reqs + 1] = wrk.format("POST", os.getenv("KVIX_PATH"),
                                     {["Content-Type"] = "application/json"}, line)
    end
    i = math.random(#reqs)
end
request = function()
    i = i % #reqs + 1
    return reqs[i]
end
LUAEOF
export KVIX_BODIES=$tmp/bodies KVIX_PATH=/query_by_hash

applied() { # events taken so far (applied + rejected), from /metrics
    curl -s "$URL/metrics" | awk '/^kvix_events_(applied|rejected)_total/ { s += $2 } END { print s + 0 }'
}

cpu_ticks() { # CPU time of a process so far (user + system), in clock ticks
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# wrk_run OUT [PATH [CONNS]]: D seconds of queries (or GET PATH; "" for the
# queries); "rps p50_ms p99_ms max_ms kvindex_us wrk_us" into OUT, the last
# two the CPU time per request of kvindex and of wrk
wrk_run() {
    local c0 c1 script=(-s "$tmp/post.lua") url=$URL
    [ -n "${2:-}" ] && script=() url=$URL$2
    c0=$(cpu_ticks "$kpid")
    /usr/bin/time -f "%U %S" -o "$tmp/wrk.time" \
        wrk -t"$WRK_THREADS" -c"${3:-$CONNS}" -d"${D}s" --latency "${script[@]}" "$url" \
        >"$tmp/wrk.out" 2>&1
    c1=$(cpu_ticks "$kpid")
    awk -v tick="$(getconf CLK_TCK)" -v kv=$((c1 - c0)) -v wt="$(awk '{ print $1 + $2 }' "$tmp/wrk.time")" '
        function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0;
                         if (v ~ /m$/) return v * 60000; return v * 1000 }
        /^ +Latency/ && !max { max = ms($4) }
        /^ +50%/ { p50 = ms($2) }
        /^ +99%/ { p99 = ms($2) }
        /^Requests\/sec:/ { rps = $2 }
        /requests in/ { n = $1 }
        /Non-2xx/ { bad = $NF }
        END { if (bad) { print "80-http: " bad " answers were not 2xx" > "/dev/stderr"; exit 1 }
              printf "%.0f %.3f %.3f %.3f %.1f %.1f\n", rps, p50, p99, max,
                     kv / tick * 1e6 / n, wt * 1e6 / n }' "$tmp/wrk.out" >"$1"
}

# start_kv EVENTS NEV LOOP [ARGS...]: a fresh kvindex --listen ARGS fed EVENTS
# (over and over when LOOP is 1), once it applied a pass (NEV events); sets
# kpid, fpid, URL
start_kv() {
    local events=$1 nev=$2 loop=$3 i
    shift 3
    rm -f "$tmp/feed"
    mkfifo "$tmp/feed"
    "$B/kvindex" --listen 127.0.0.1:0 --http-threads "$HTTP_THREADS" "$@" <"$tmp/feed" \
        2>"$tmp/kv.err" &
    kpid=$!
    pids+=("$kpid")
    if [ "$loop" = 1 ]; then
        (while :; do cat "$events" || exit 0; done) >"$tmp/feed" &
    elif [ "$loop" = 2 ]; then # paced: PACE records a second, over and over
        (while :; do cat "$events" || exit 0; done | "$B/kvreplay" -q -r "$PACE") >"$tmp/feed" &
    else
        (cat "$events"; exec sleep 3600) >"$tmp/feed" &
    fi
    fpid=$!
    pids+=("$fpid")
    URL=""
    for i in $(seq 200); do
        [ -n "$URL" ] && break
        sleep 0.05
        URL=$(sed -n 's/^kvindex: listening on \(http:.*\)$/\1/p' "$tmp/kv.err")
    done
    [ -n "$URL" ] || { echo "80-http: kvindex did not listen" >&2; cat "$tmp/kv.err" >&2; exit 1; }
    [ "$loop" = 2 ] && return 0 # paced: measured from where it is
    for i in $(seq 1200); do [ "$(applied)" -ge "$nev" ] && break; sleep 0.1; done
}

stop_kv() {
    kill "$fpid" 2>/dev/null || true
    wait "$fpid" 2>/dev/null || true
    kill -TERM "$kpid"
    wait "$kpid" || true
}

# ingest_rate OUT [wrk_run ARGS...]: events/s over D seconds (or the wrk run)
ingest_rate() {
    local out=$1 a0 a1 t0 t1
    shift
    a0=$(applied) t0=$EPOCHREALTIME
    if [ $# -gt 0 ]; then "$@"; else sleep "$D"; fi
    a1=$(applied) t1=$EPOCHREALTIME
    echo "$a0 $a1 $t0 $t1" | awk '{ printf "%.0f\n", ($2 - $1) / ($4 - $3) }' >>"$out"
}

for run in $(seq "$RUNS"); do
    echo "80-http: run $run of $RUNS" >&2
    export KVIX_BODIES=$tmp/bodies KVIX_PATH=/query_by_hash
    start_kv "$tmp/events" "$NEV" 1
    ingest_rate "$tmp/ingest_alone"
    ingest_rate "$tmp/ingest_loaded" wrk_run "$tmp/both.$run"
    kill "$fpid" 2>/dev/null || true
    wait "$fpid" 2>/dev/null || true
    sleep 0.5 # the pipe drained
    wrk_run "$tmp/alone.$run"
    wrk_run "$tmp/health.$run" /health
    for c in $SWEEP; do
        wrk_run "$tmp/alone_c$c.$run" "" "$c"
        wrk_run "$tmp/health_c$c.$run" /health "$c"
    done
    stop_kv
    start_kv "$tmp/events" "$NEV" 2
    sleep 1
    ingest_rate "$tmp/paced_alone"
    ingest_rate "$tmp/paced_loaded" wrk_run "$tmp/paced.$run"
    stop_kv
    start_kv "$tmp/events" "$NEV" 1 --http-nice "$NICE"
    ingest_rate "$tmp/nice_alone"
    ingest_rate "$tmp/nice_loaded" wrk_run "$tmp/nice.$run"
    stop_kv
    start_kv "$tmp/events8k" "$NEV8" 0
    wrk_run "$tmp/hash8k.$run"
    export KVIX_BODIES=$tmp/tokens8k KVIX_PATH=/query
    wrk_run "$tmp/query8k.$run"
    stop_kv
done

col() { # col N FILES...: the median of column N
    local n=$1
    shift
    cat "$@" | awk -v n="$n" '{ print $n }' | median
}
ia=$(median <"$tmp/ingest_alone")
il=$(median <"$tmp/ingest_loaded")
bpe=$(awk -v b="$NBLK" -v e="$NEV" 'BEGIN { printf "%.1f", b / e }')
slow=$(awk -v a="$ia" -v l="$il" 'BEGIN { printf "%.0f", (1 - l / a) * 100 }')
pa=$(median <"$tmp/paced_alone")
pl=$(median <"$tmp/paced_loaded")
na=$(median <"$tmp/nice_alone")
nl=$(median <"$tmp/nice_loaded")
nslow=$(awk -v a="$na" -v l="$nl" 'BEGIN { printf "%.0f", (1 - l / a) * 100 }')
row() { # row LABEL FILE-PREFIX INGEST: a table row of medians
    echo "| $1 | $(col 1 "$2".*) | $(col 2 "$2".*) ms | $(col 3 "$2".*) ms | $(col 4 "$2".*) ms | $3 | $(col 5 "$2".*) us | $(col 6 "$2".*) us |"
}

cat <<EOF
## kvindex --listen under load: wrk on loopback (bench/parts/80-http.sh)

The 256-worker Mooncake log (\`kvreplay --mooncake\` of conversation_trace, one partition,
$NEV events of $bpe blocks on average) fed to \`kvindex --listen\` (--http-threads $HTTP_THREADS)
without a pause, over and over, while \`wrk -t$WRK_THREADS -c$CONNS\` posts the log's $NQ prompts as
\`POST /query_by_hash\` on loopback for $D s. wrk, kvindex's HTTP threads and its ingest
thread share the machine's $(nproc) cores. Medians of $RUNS runs, each on a fresh kvindex.

| phase | requests/s | p50 | p99 | max | events/s ingested | kvindex CPU/request | wrk CPU/request |
|---|---:|---:|---:|---:|---:|---:|---:|
| ingest only | - | - | - | - | $ia | - | - |
$(row "queries while ingesting" "$tmp/both" "$il")
$(row "queries only" "$tmp/alone" -)
$(row "GET /health only (the floor: libmicrohttpd, the kernel)" "$tmp/health" -)
| --http-nice $NICE: ingest only | - | - | - | - | $na | - | - |
$(row "--http-nice $NICE: queries while ingesting" "$tmp/nice" "$nl")
| events paced at $PACE/s (kvreplay --rate): ingest only | - | - | - | - | $pa | - | - |
$(row "events paced at $PACE/s: queries while ingesting" "$tmp/paced" "$pl")
$(row "8192 workers: POST /query_by_hash only" "$tmp/hash8k" -)
$(row "8192 workers: POST /query only ($TOKAVG token ids a body)" "$tmp/query8k" -)

Other connection counts, on the same kvindex after its feed stopped (queries only and
\`GET /health\` only, medians of $RUNS runs; the table above is -c$CONNS):

| wrk -c | /query_by_hash requests/s | p50 | p99 | max | kvindex CPU/request | wrk CPU/request | GET /health requests/s | p50 | p99 | kvindex CPU/request | wrk CPU/request |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
$(for c in $SWEEP $CONNS; do
    if [ "$c" = "$CONNS" ]; then a="$tmp/alone" h="$tmp/health"; else a="$tmp/alone_c$c" h="$tmp/health_c$c"; fi
    echo "| $c | $(col 1 "$a".*) | $(col 2 "$a".*) ms | $(col 3 "$a".*) ms | $(col 4 "$a".*) ms | $(col 5 "$a".*) us | $(col 6 "$a".*) us | $(col 1 "$h".*) | $(col 2 "$h".*) ms | $(col 3 "$h".*) ms | $(col 5 "$h".*) us | $(col 6 "$h".*) us |"
done | sort -t'|' -k2 -n)

Ingest slowed by $slow % under the query load, by $nslow % with the HTTP threads at nice
$NICE (target: < 30 %; queries: >= 50 000/s with p99 <= 1 ms on 2 cores); events paced at
$PACE/s (\`kvreplay --rate\`, a live fleet's rate rather than ingest's ceiling) were taken at
$pl/s under the query load ($pa/s without it). 8192 workers:
\`kvreplay --mooncake ... --copies 32 --limit 600\` ($NEV8 events applied once, then
queries only): $NQ8 prompts as /query_by_hash, $NT8 prompts stored from the root as
/query token ids. CPU per request: kvindex's (all its threads, ingest included
while it ingests) and wrk's, user + system, over the wrk run. The machine's ceiling for
a request is 2 cores over their sum: wrk's part alone is what a router's own client would
pay elsewhere.
EOF
