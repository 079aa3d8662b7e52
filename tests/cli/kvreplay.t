# kvreplay: the Mooncake generator against an independent simulation, log
# replay (formats, compression, filters, timing modes), errors and exit codes.
# The ZMQ publisher is tested in kvreplay_pub.t.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

CONV=$FIXTURES/mooncake/conversation_trace.jsonl.xz
SYN=$FIXTURES/mooncake/synthetic_trace.jsonl.xz
SIM=$ROOT/tests/tools/mooncake_sim.py

begin "mooncake: counters of a fixed seed are stable (golden)"
run kvreplay --mooncake "$CONV" --workers 8 --capacity 300 --seed 7 --limit 2000
expect_rc 0
golden kvreplay_mooncake_counts err
assert_eq "$(grep -c '"type":"query"' out)" 2000 "one query per request"
cp out first
run kvreplay --mooncake "$CONV" --workers 8 --capacity 300 --seed 7 --limit 2000
cmp -s out first || fail "a second run with the same seed differs"
run kvreplay --mooncake "$CONV" --workers 8 --capacity 300 --seed 8 --limit 2000
cmp -s out first && fail "another seed gives the same log"
end

# The final caches equal what tests/tools/mooncake_sim.py (written from the
# documented rules, not from the C code) computes, and the emitted events,
# applied in order, lead to that same state.
check_sim() { # trace, kvreplay options...
    local trace=$1
    shift
    run kvreplay -q --mooncake "$trace" "$@" --final-state fs
    expect_rc 0
    mv out events
    "$PY" "$SIM" sim "$trace" "$@" >sim 2>sim.err || fail "mooncake_sim.py sim failed"
    "$PY" "$SIM" apply events >applied 2>apply.err || fail "events do not apply: $(head -3 apply.err)"
    [ -s fs ] || fail "empty final state"
    cmp -s fs sim || fail "final state differs from the python simulation ($*)"
    cut -d' ' -f1,2 fs | cmp -s - applied || fail "events do not replay to the final state ($*)"
}

begin "mooncake: random routing matches the independent simulation"
check_sim "$CONV" --workers 8 --capacity 300 --route random --seed 7 --limit 3000
check_sim "$SYN" --workers 3 --capacity 500 --route random --seed 1 --limit 1500
end

begin "mooncake: best-prefix routing matches the independent simulation"
check_sim "$CONV" --workers 5 --capacity 150 --route best --seed 3 --limit 1500
check_sim "$SYN" --workers 6 --capacity 400 --route best --seed 11 --limit 1500
end

begin "mooncake: kvindex fed the log holds the generator's final caches"
run kvreplay -q --mooncake "$CONV" --workers 6 --capacity 250 --seed 4 --limit 1500 --final-state fs
expect_rc 0
kvindex --quiet -s s.kvix out >answers || fail "kvindex failed"
kvdump s.kvix | jq -r '.worker as $w | .blocks[] | "\($w) \(.seq) \(.local)"' | sort >dumped
cut -d' ' -f1-3 fs | sort >want
[ -s want ] || fail "empty final state"
cmp -s dumped want || fail "kvdump of the index differs from --final-state"
assert_eq "$(wc -l <answers)" 1500 "answers"
# with --route best, kvindex's answer to each query names the worker the
# request went to among the best, and the blocks it had to store are the rest
run kvreplay -q --mooncake "$CONV" --workers 6 --capacity 250 --seed 4 --limit 800 --route best
kvindex --quiet out >answers
cat >check.py <<'PYEOF'
import json, sys
log = [json.loads(l) for l in open("out")]
ans = {a["id"]: a for a in map(json.loads, open("answers"))}
bad = checked = 0
for i, r in enumerate(log):
    if r["type"] != "query":
        continue
    a = ans[r["id"]]
    best = max([s["blocks"] for s in a["scores"]], default=0)
    top = {s["worker"] for s in a["scores"] if s["blocks"] == best}
    want = min(len(r["local"]), 250) - best
    stored = None
    for e in log[i + 1:]:
        if e["type"] == "query":
            break
        if e["type"] == "stored":
            stored = e
    got = len(stored["blocks"]) if stored else 0
    if got != max(want, 0) or (stored and best and stored["worker"] not in top):
        bad += 1
    checked += 1
print(checked, bad)
PYEOF
assert_eq "$("$PY" check.py)" "800 0" "queries checked, disagreements"
end

begin "mooncake: records as the contract says"
run kvreplay -q --mooncake "$SYN" --workers 4 --capacity 64 --limit 50 --model llama --tokens
expect_rc 0
jq -c 'select(.type=="stored")' out | head -1 >stored
assert_eq "$(jq -r '.bs' stored)" 512 "block size"
assert_eq "$(jq -r '.model' stored)" llama "model"
assert_eq "$(jq -r '[.tokens[] | length] | unique | .[0]' stored)" 512 "tokens per block"
assert_eq "$(jq -r '.blocks | length' stored)" "$(jq -r '.tokens | length' stored)" "a token list per block"
# a block's local hash is kvhash's of its 512 tokens
jq -c '.tokens[0]' stored | kvhash -b 512 -p local >kvh
assert_eq "$(cat kvh)" "$(jq -r '.blocks[0].local' stored)" "local hash of the first block"
# queries: local hashes and the line number as id; eids count per worker from 0
assert_eq "$(jq -r 'select(.type=="query") | .id' out | head -3 | tr '\n' ' ')" "0 1 2 " "query ids"
jq -r 'select(.eid != null) | "\(.worker) \(.eid)"' out >eids
awk '{ if ($2 != n[$1]++) bad = 1 } END { exit bad }' eids || fail "eids do not count from 0 per worker"
# a removed event comes right before the stored event that needed the room
jq -r 'select(.type!="query") | .type' out | uniq -c | awk '$2=="removed" && $1>1 { bad=1 } END { exit bad }' ||
    fail "two removed events in a row"
end

begin "mooncake: partial blocks are skipped"
printf '%s\n' '{"timestamp": 5, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}' \
    '{"timestamp": 6, "input_length": 100, "output_length": 1, "hash_ids": [3]}' >trace.jsonl
run kvreplay --mooncake trace.jsonl --workers 1
expect_rc 0
assert_eq "$(wc -l <out)" 2 "a query and a stored event for the one whole block"
assert_eq "$(jq -r 'select(.type=="stored") | .blocks | length' out)" 1 "whole blocks stored"
assert_eq "$(jq -r 'select(.type=="stored") | .ts' out)" 0.005 "ts in seconds"
assert_grep "1 skipped" err
assert_grep "2 partial" err
end

# --copies K: copy k of the log is, record for record, the log of the trace
# with hash id x written x+k*floor(2^32/K), played alone with seed+k, its workers moved
# up by k*N and its query ids written id*K+k; the K copies of each request
# come back to back.
begin "mooncake: --copies K plays K disjoint copies of the trace, back to back"
run kvreplay -q --mooncake "$CONV" --workers 5 --capacity 120 --seed 3 --limit 400
expect_rc 0
mv out one
run kvreplay -q --mooncake "$CONV" --workers 5 --capacity 120 --seed 3 --limit 400 --copies 1
cmp -s out one || fail "--copies 1 differs from the trace played alone"
run kvreplay --mooncake "$CONV" --workers 5 --capacity 120 --seed 3 --limit 400 --copies 3
expect_rc 0
mv out three
assert_grep "mooncake: 1200 requests" err
for k in 0 1 2; do
    xz -dc "$CONV" | head -n 400 |
        jq -c --argjson k "$k" '.hash_ids |= map(. + $k * 1431655765)' >"trace$k.jsonl"
    run kvreplay -q --mooncake "trace$k.jsonl" --workers 5 --capacity 120 --seed $((3 + k))
    expect_rc 0
    jq -c --argjson k "$k" 'if .type == "query" then .id = .id * 3 + $k
        else .worker = .worker + 5 * $k end' out >"want$k"
    jq -c --argjson k "$k" 'select((.type == "query" and .id % 3 == $k)
        or (.type != "query" and (.worker / 5 | floor) == $k))' three >"got$k"
    [ -s "want$k" ] || fail "empty copy $k"
    cmp -s "got$k" "want$k" || fail "copy $k differs from its trace played alone"
done
jq -c 'if .type == "query" then .id = .id * 3 else . end' one | cmp -s got0 - ||
    fail "copy 0 differs from the trace itself (but for query ids)"
# back to back: request r's records (copy 0, then 1, then 2) come before r+1's
jq -r 'select(.type == "query") | .id' three >ids
seq 0 1199 | cmp -s - ids || fail "queries not in request order, copies back to back"
jq -r 'if .type == "query" then "q \(.id % 3)" else "e \(.worker / 5 | floor)" end' three |
    awk '$1 == "q" { c = $2 } $1 == "e" && $2 != c { bad = 1 } END { exit bad }' ||
    fail "an event is not with its copy's query"
# the copies' hash ids are disjoint
jq -r 'select(.type == "stored") | .blocks[].local' got0 | sort -u >l0
jq -r 'select(.type == "stored") | .blocks[].local' got1 | sort -u >l1
[ -s l0 ] || fail "no stored blocks"
assert_eq "$(comm -12 l0 l1 | wc -l)" 0 "blocks shared by two copies"
run kvreplay --mooncake "$CONV" --workers 40000 --copies 2 --limit 1
expect_rc 2
assert_grep "at most" err
printf '%s\n' '{"timestamp": 5, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}' \
    '{"timestamp": 6, "input_length": 512, "output_length": 1, "hash_ids": [2147483648]}' \
    '{"timestamp": 7, "input_length": 512, "output_length": 1, "hash_ids": [3]}' >big.jsonl
run kvreplay --mooncake big.jsonl --workers 1 --copies 2
expect_rc 1
assert_grep "bad request at big.jsonl:2: hash id 2147483648 too large for 2 copies" err
assert_eq "$(grep -c '"type":"query"' out)" 4 "the other requests' copies"
run kvreplay --mooncake big.jsonl --workers 1 --copies 2 --strict
expect_rc 5
end

# --worker-ids random: the same log with each worker renamed to a distinct id
# below 2^63 fixed by the seed; kvindex answers it as it answers the dense
# log, renamed, and orders each answer's scores by the new ids.
begin "mooncake: --worker-ids random renames the workers of the dense log"
run kvreplay -q --mooncake "$CONV" --workers 6 --capacity 150 --seed 9 --limit 600 --copies 2
expect_rc 0
mv out dense
run kvreplay -q --mooncake "$CONV" --workers 6 --capacity 150 --seed 9 --limit 600 --copies 2 \
    --worker-ids random --final-state fs
expect_rc 0
mv out rand
run kvreplay -q --mooncake "$CONV" --workers 6 --capacity 150 --seed 9 --limit 600 --copies 2 \
    --worker-ids random
cmp -s out rand || fail "a second run with the same seed differs"
run kvreplay -q --mooncake "$CONV" --workers 6 --capacity 150 --seed 10 --limit 100 --copies 2 \
    --worker-ids random
mv out rand10
run kvreplay -q --mooncake "$CONV" --workers 6 --capacity 150 --seed 9 --limit 600 --copies 2 \
    --worker-ids dense
cmp -s out dense || fail "--worker-ids dense differs from the default"
kvindex --quiet dense >ans_dense 2>kvindex.err || fail "kvindex failed on the dense log"
kvindex --quiet rand >ans_rand 2>>kvindex.err || fail "kvindex failed on the random-id log"
cat >ids.py <<'PYEOF'
import json, sys
dense = [json.loads(l) for l in open("dense")]
rand = [json.loads(l) for l in open("rand")]
assert len(dense) == len(rand) and len(dense) > 600, "record counts"
name = {}
for d, r in zip(dense, rand):
    if d["type"] != "query":
        assert name.setdefault(d["worker"], r["worker"]) == r["worker"], "one name per worker"
        r = dict(r, worker=d["worker"])
    assert d == r, "records differ beyond the worker: %r %r" % (d, r)
ids = sorted(name.values())
assert sorted(name) == list(range(12)), "every worker of both copies seen"
assert len(set(ids)) == 12, "names distinct"
assert all(0 <= i < 2**63 for i in ids), "names below 2^63"
assert ids[-1] >= 2**32, "names spread over 64 bits"
other = {r["worker"] for r in map(json.loads, open("rand10")) if r["type"] != "query"}
assert other and not other & set(ids), "another seed, other names"
# the final state lists the new names, ascending
fs = [int(l.split()[0]) for l in open("fs")]
assert fs and fs == sorted(fs) and set(fs) <= set(ids), "final state names"
# answers: the dense answers renamed, sorted by blocks then the new names
nscores = 0
for a, b in zip(map(json.loads, open("ans_dense")), map(json.loads, open("ans_rand"))):
    assert a["id"] == b["id"]
    want = sorted((dict(s, worker=name[s["worker"]]) for s in a["scores"]),
                  key=lambda s: (-s["blocks"], s["worker"], s["dp"]))
    assert b["scores"] == want, "answer %s" % a["id"]
    nscores += len(want)
assert nscores > 1000, "scores compared"
print(len(ids))
PYEOF
"$PY" ids.py >ids.out 2>ids.err || fail "random ids: $(tail -1 ids.err)"
assert_eq "$(cat ids.out)" 12 "workers renamed"
run kvreplay --mooncake "$CONV" --worker-ids sparse --limit 1
expect_rc 2
assert_grep "bad --worker-ids: 'sparse' \\(dense or random\\)" err
end

# A small log for the replay tests.
kvreplay -q --mooncake "$CONV" --workers 4 --capacity 100 --limit 200 --seed 5 >"${TMPDIR:-/tmp}/kvreplay-log.$$"
LOG=${TMPDIR:-/tmp}/kvreplay-log.$$
trap 'rm -f "$LOG"' EXIT

begin "replay: plain, xz, gzip, zstd and msgpack logs give the same records"
run kvreplay --fast "$LOG"
expect_rc 0
cmp -s out "$LOG" || fail "plain replay differs from the log"
assert_grep "records read, [0-9]+ written" err
xz -c "$LOG" >log.xz
gzip -c "$LOG" >log.gz
zstd -q -c "$LOG" >log.zst
for f in log.xz log.gz log.zst; do
    run kvreplay --fast "$f"
    expect_rc 0
    cmp -s out "$LOG" || fail "$f replays differently"
done
run kvreplay --fast - <log.xz
cmp -s out "$LOG" || fail "xz on standard input replays differently"
run kvreplay --fast -f msgpack "$LOG"
expect_rc 0
mv out log.mp
run kvreplay --fast log.mp
cmp -s out "$LOG" || fail "msgpack round trip differs"
# two logs are concatenated
run kvreplay --fast log.gz log.xz
assert_eq "$(wc -l <out)" "$((2 * $(wc -l <"$LOG")))" "two logs"
end

begin "replay: timing modes change when, not what"
run kvreplay -x 100000 "$LOG"
cmp -s out "$LOG" || fail "--speed changed the records"
run kvreplay -r 100000 "$LOG"
cmp -s out "$LOG" || fail "--rate changed the records"
head -5 "$LOG" >five
run kvreplay five
expect_rc 0
cmp -s out five || fail "recorded speed changed the records"
end

begin "replay: filters"
total=$(wc -l <"$LOG")
run kvreplay --fast --no-queries "$LOG"
assert_eq "$(wc -l <out)" "$(grep -vc '"query"' "$LOG")" "--no-queries"
run kvreplay --fast -w 2 "$LOG"
assert_eq "$(jq -r 'select(.type!="query") | .worker' out | sort -u | tr '\n' ' ')" "2 " "--worker"
assert_eq "$(grep -c '"query"' out)" "$(grep -c '"query"' "$LOG")" "queries kept by --worker"
run kvreplay --fast -w 1:0 -w 3 --no-queries "$LOG"
assert_eq "$(jq -r .worker out | sort -u | tr '\n' ' ')" "1 3 " "two --worker filters"
run kvreplay --fast -w 1:1 --no-queries "$LOG"
assert_eq "$(wc -l <out)" 0 "--worker with another dp"
run kvreplay --fast --since-eid 5 --until-eid 9 --no-queries "$LOG"
assert_eq "$(jq -r .eid out | sort -un | tr '\n' ' ')" "5 6 7 8 9 " "eid range"
first=$(jq -r 'select(.ts != null) | .ts' "$LOG" | head -1)
# records in [lo, hi]; one without ts (a query) has the ts of the record before it
in_window() {
    jq -r '.ts' "$LOG" | awk -v lo="$1" -v hi="$2" \
        '$1 != "null" { last = $1; seen = 1 } !seen || (last >= lo && last <= hi) { n++ } END { print n }'
}
run kvreplay --fast --until +60 "$LOG"
assert_eq "$(wc -l <out)" "$(in_window -1 "$(awk -v f="$first" 'BEGIN { print f + 60 }')")" "--until +60"
assert_eq "$(jq -r 'select(.type == "query") | .id' out | tail -1)" \
    "$(jq -r 'select(.type == "query") | .id' "$LOG" | head -n "$(grep -c '"query"' out)" | tail -1)" \
    "queries up to the cut, in order"
run kvreplay --fast --since 30 --until 90 "$LOG"
assert_eq "$(jq -r 'select(.ts != null) | .ts' out | awk '$1 < 30 || $1 > 90' | wc -l)" 0 "--since/--until absolute"
want=$(in_window 30 90)
[ "$want" -lt "$total" ] || fail "the window keeps everything"
assert_eq "$(wc -l <out)" "$want" "records in [30, 90]"
run kvreplay --fast --since 1970-01-01T00:00:30Z --until 1970-01-01T00:01:30Z "$LOG"
assert_eq "$(wc -l <out)" "$want" "iso 8601 bounds"
run kvreplay --fast -n 7 "$LOG"
assert_eq "$(wc -l <out)" 7 "--limit"
assert_grep " filtered" err
[ "$total" -gt 100 ] || fail "log too small"
end

begin "replay: bad records, missing and damaged files, --strict"
head -5 "$LOG" >five
{ head -3 "$LOG"; echo '{"type":"stored","worker":1}'; echo 'nonsense'; sed -n 4,6p "$LOG"; } >bad.ndjson
run kvreplay --fast bad.ndjson
expect_rc 1
assert_eq "$(wc -l <out)" 6 "good records written"
assert_grep "^kvreplay: bad record at bad.ndjson:4: " err
assert_grep "^kvreplay: bad record at bad.ndjson:5: " err
assert_grep "2 rejected" err
run kvreplay --fast --strict bad.ndjson
expect_rc 5
assert_eq "$(wc -l <out)" 3 "records before the stop"
run kvreplay --fast missing.ndjson five
expect_rc 3
assert_grep "cannot open missing.ndjson" err
assert_eq "$(wc -l <out)" 5 "the other log is still read"
xz -c "$LOG" | head -c 20000 >trunc.xz
run kvreplay --fast trunc.xz
expect_rc 3
assert_grep "trunc.xz: truncated xz data" err
# unchecked data of a truncated block is held back like damaged data (kvreplay_damage.t)
[ -s out ] && fail "records of an unchecked block were written"
printf '\x1f\x8b\x08\x00garbage-garbage' >bad.gz
run kvreplay --fast bad.gz
expect_rc 3
assert_grep "bad.gz: corrupt gzip data" err
run kvreplay --fast -q bad.ndjson
expect_rc 1
[ -s err ] || fail "-q hides rejections"
assert_no_grep "records read" err
end

begin "usage errors exit 2"
head -5 "$LOG" >five
for args in "--workers 4 five" "--mooncake x.jsonl five" "--map-file m five" "--pub tcp://127.0.0.1:* -" \
    "-f yaml five" "--route best" "--since yesterday five" "-w x five" "-x 0 five" \
    "--pub udp://x five" "--pub tcp://127.0.0.1:* -f msgpack five"; do
    # shellcheck disable=SC2086
    run kvreplay $args
    [ "$rc" = 2 ] || fail "kvreplay $args: exit $rc, expected 2"
done
run kvreplay --mooncake missing.jsonl
expect_rc 3
end

begin "kvreplay --mooncake says first how much a large run will write"
# 20 copies with their token ids: about 29 GB (the output is cut after a few
# bytes: the estimate comes before any is written)
kvreplay --mooncake "$FIXTURES/mooncake/conversation_trace.jsonl.xz" --tokens --copies 20 2>err | head -c 10 >/dev/null
assert_eq "$(head -n 1 err)" "kvreplay: mooncake: up to about 30.3 GB to write (12031 requests, 276491 whole blocks, 20 copies, token ids included); --limit or fewer --copies write less" "the estimate, first"
# --limit counts in it; a small run says nothing of the kind
kvreplay --mooncake "$FIXTURES/mooncake/conversation_trace.jsonl.xz" --tokens --copies 20 --limit 6000 -f msgpack 2>err | head -c 10 >/dev/null
assert_grep '^kvreplay: mooncake: up to about [0-9.]+ GB to write \(6000 requests, [0-9]+ whole blocks, 20 copies, token ids included\)' err
run kvreplay --mooncake "$FIXTURES/mooncake/conversation_trace.jsonl.xz" --tokens --limit 100
expect_rc 0
assert_no_grep 'to write' err
end
