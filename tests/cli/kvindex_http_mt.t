#!/usr/bin/env bash
# kvindex --listen against curl and a Python client (tests/tools/http_client.py):
# every endpoint, every error path, answers equal to kvindex -q on the same
# state, /dump rebuilding an equal index through --peers, exact u64 both ways,
# SIGTERM finishing a request in flight. Queries run while events ingest
# (also under ThreadSanitizer). Every wait is a bounded poll.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
HC=$ROOT/tests/tools/http_client.py
KPID=""

# serve ARGS...: kvindex --listen 127.0.0.1:0 ARGS in the background, stdin
# from ./in; sets URL once it says where it listens. A test that fails before
# stopping it leaves it to the exit trap (procs.sh), timeout(1) and all.
serve() {
    : >kv.err # before the job starts: `listening` must not read a previous run's line
    timeout --foreground 120 kvindex --listen 127.0.0.1:0 "$@" <in >kv.out 2>kv.err 3>&- &
    KPID=$!
    PIDS="$PIDS $KPID"
    URL=$(listening kv.err) && return 0
    fail "kvindex never said where it listens"
    sed 's/^/#     /' kv.err | head -5
    return 1
}

# applied N: wait until /metrics counts N applied events.
applied() {
    local i n
    for i in $(seq 600); do
        n=$(curl -s "$URL/metrics" | awk '/^kvix_events_applied_total/ {s += $2} END {print s + 0}')
        [ "$n" = "$1" ] && return 0
        sleep 0.05
    done
    fail "kvindex applied $n events, expected $1"
    return 1
}

# saved: wait until the save at end of input is done.
saved() {
    local i
    for i in $(seq 600); do
        curl -s "$URL/metrics" | grep -q '^kvix_snapshot_saves_total [1-9]' && return 0
        sleep 0.05
    done
    fail "kvindex never saved"
    return 1
}

stop() { # SIGTERM; status in $rc
    kill -TERM "$KPID"
    wait "$KPID"
    rc=$?
    KPID=""
}

# req METHOD PATH [BODY-FILE]: status in $st, body in ./body
req() {
    if [ $# -ge 3 ]; then
        st=$(curl -s -o body -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' \
            --data-binary "@$3" "$URL$2")
    else
        st=$(curl -s -o body -w '%{http_code}' -X "$1" "$URL$2")
    fi
}

# bad STATUS MESSAGE-RE METHOD PATH BODY: an error answer with a JSON error
bad() {
    printf '%s' "$5" >req.json
    req "$3" "$4" req.json
    [ "$st" = "$1" ] || fail "$3 $4 '$5': status $st, expected $1 ($(cat body))"
    jq -e --arg re "$2" '.error | test($re)' body >/dev/null 2>&1 ||
        fail "$3 $4 '$5': error body $(cat body) does not match /$2/"
}

noise() { # 20000 events in their own partition: ingest while queries run
    "$PY" -c '
import random
r = random.Random(5)
for i in range(20000):
    print("{\"type\":\"stored\",\"worker\":%d,\"model\":\"noise\",\"bs\":4,\"blocks\":[{\"local\":\"%016x\",\"seq\":\"%016x\"}]}" % (r.randrange(64), r.getrandbits(64), r.getrandbits(64)))
'
}

begin "kvindex --listen: every endpoint, answers equal kvindex -q, /dump and /snapshot rebuild it"
"$PY" "$HC" gen 7 ev.ndjson model.json q.json || fail "gen"
noise >noise.ndjson
kvindex --quiet -s ref.kvix <ev.ndjson || fail "reference ingest"
"$PY" "$HC" kvix-queries q.json >q.ndjson
kvindex --quiet -q -s ref.kvix <q.ndjson >ans.ndjson || fail "kvindex -q"
mkfifo in
exec 3<>in # read-write: opening it blocks neither the shell nor kvindex
serve -s live.kvix -t 2
timeout 60 cat noise.ndjson >&3 & # bounded: a dead kvindex must not hang the test
CATPID=$!
# queries on the server's threads while the noise ingests (answers checked
# below); model noise is unknown (404, rightly) until its first event is
# applied, so they start at the first 200
noiseq() {
    curl -s -o /dev/null -w '%{http_code}\n' -X POST --data-binary \
        '{"model_name":"noise","token_ids":[1,2,3,4,5,6,7,8]}' "$URL/query"
}
for i in $(seq 600); do [ "$(noiseq)" = 200 ] && break; sleep 0.1; done
for i in $(seq 20); do noiseq >>during; done
wait "$CATPID"
timeout 60 cat ev.ndjson >&3
exec 3>&-
applied 20400
saved
assert_eq "$(sort -u during)" "200" "queries during ingest"
req GET /health
assert_eq "$st $(cat body)" '200 {"status":"ok"}' "/health"
"$PY" "$HC" check "$URL" model.json q.json ans.ndjson >check.out 2>&1 ||
    { fail "answers differ"; sed 's/^/#     /' check.out | head -5; }
req GET /metrics
cp body metrics
for m in dynamo_kvindexer_request_duration_seconds_bucket dynamo_kvindexer_requests_total \
    dynamo_kvindexer_errors_total dynamo_kvindexer_models dynamo_kvindexer_workers \
    kvix_events_applied_total kvix_events_rejected_total kvix_index_blocks \
    kvix_index_unique_blocks kvix_index_workers kvix_index_partitions kvix_index_bytes \
    kvix_query_duration_seconds_bucket kvix_snapshot_save_duration_seconds \
    kvix_snapshot_age_seconds kvix_http_requests_in_flight; do
    assert_grep "^$m[{ ]" metrics
done
assert_grep '^dynamo_kvindexer_models 3$' metrics
assert_grep '^kvix_events_applied_total\{type="cleared"\} [1-9]' metrics
assert_grep '^dynamo_kvindexer_requests_total\{endpoint="/query_by_hash",method="POST"\} 26$' metrics
# the file saved at end of input, GET /snapshot and the reference are one state
req GET /snapshot
assert_eq "$st" 200 "/snapshot status"
cp body http.kvix
kvdump --diff http.kvix live.kvix >/dev/null || fail "GET /snapshot differs from the saved file"
req GET /dump
cp body dump.json
jq -e '.["llama:default"].block_size == 4 and (.["llama:t2"].events | length > 0)' dump.json \
    >/dev/null || fail "/dump shape"
jq -e '[.["llama:default","llama:t2"].events[] | keys_unsorted == ["worker_id","storage_tier","event"]] | all' dump.json \
    >/dev/null || fail "RouterEvent keys"
# /dump fed to a second kvindex (through --peers) rebuilds an equal index
: >empty
kvindex -s peer.kvix --peers "$URL" <empty >/dev/null 2>peer.err || fail "kvindex --peers"
assert_grep "recovered from $URL" peer.err
kvdump --diff http.kvix peer.kvix >diff.out || { fail "--peers rebuilt another index"; head -3 diff.out; }
stop
assert_eq "$rc" 0 "exit status on SIGTERM"
kvdump --diff http.kvix live.kvix >/dev/null || fail "the snapshot saved on SIGTERM differs"
end

begin "kvindex --listen: bad requests answer their status and a JSON error, the index unchanged"
"$PY" "$HC" gen 3 in model.json q.json
serve -s s.kvix
applied 400
curl -s "$URL/dump" >before.json
bad 400 "malformed json" POST /query '{"model_name":"llama","token_ids":[1,2'
bad 400 "malformed json" POST /query_by_hash 'nope'
bad 400 '"model_name" is not a string' POST /query '{"model_name":5,"token_ids":[1]}'
bad 400 '"token_ids" is not an array' POST /query '{"model_name":"llama","token_ids":"1 2"}'
bad 400 'token_ids\[1\] is not an unsigned integer' POST /query '{"model_name":"llama","token_ids":[1,2.5]}'
bad 400 'above 2\^32-1' POST /query '{"model_name":"llama","token_ids":[4294967296]}'
bad 400 'negative number' POST /query '{"model_name":"llama","token_ids":[1,-2]}'
bad 400 'above 2\^64-1' POST /query_by_hash '{"model_name":"llama","block_hashes":[18446744073709551616]}'
bad 400 'missing "block_hashes"' POST /query_by_hash '{"model_name":"llama"}'
bad 400 'missing "model_name"' POST /query_by_hash '{"block_hashes":[1]}'
bad 400 'not a JSON object' POST /query_by_hash '[1,2]'
bad 404 'unknown model "gpt" \(tenant "default"\)' POST /query '{"model_name":"gpt","token_ids":[1,2,3,4]}'
bad 404 'unknown model "llama" \(tenant "nobody"\)' POST /query_by_hash '{"model_name":"llama","tenant_id":"nobody","block_hashes":[1]}'
bad 409 'block size' POST /query '{"model":"llama","bs":8,"tokens":[1,2,3,4,5,6,7,8]}'
bad 400 'not a query' POST /query '{"type":"stored","worker":1,"bs":4,"blocks":[]}'
bad 400 '"tokens"\[0\] out of range' POST /query '{"model":"llama","tokens":[-1]}'
bad 405 'method not allowed \(use POST\)' GET /query ''
bad 405 'method not allowed \(use GET or HEAD\)' POST /dump '{}'
bad 404 'no such endpoint' GET /nope ''
head -c $((8 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >big.json
req POST /query big.json
assert_eq "$st" 413 "a body over 8 MiB"
assert_grep 'over the limit of 8388608 bytes' body
# an unknown model in the kvix shape is an answer, as on stdin
printf '{"model":"gpt","tokens":[1,2,3,4]}' >k.json
req POST /query k.json
assert_eq "$st $(cat body)" '200 {"blocks":0,"scores":[],"unknown":"model"}' "kvix query of an unknown model"
curl -s "$URL/dump" >after.json
cmp -s before.json after.json || fail "the index changed"
req GET /metrics
assert_grep '^dynamo_kvindexer_errors_total\{endpoint="/query",status_class="4xx"\} 1[0-9]$' body
assert_grep '^dynamo_kvindexer_errors_total\{endpoint="other",status_class="4xx"\} 1$' body
stop
assert_eq "$rc" 0 "exit status on SIGTERM"
end

# Hashes span the whole u64 range; worker ids and eids stop at 2^63-1 (the index's range).
begin "kvindex --listen: hashes near 2^64 and ids at 2^63-1 both ways (a dump from a peer, then /dump and /query_by_hash)"
cat >peer.json <<'EOF'
{"m:default":{"block_size":2,"events":[
{"worker_id":1,"storage_tier":"host_pinned","event":{"event_id":0,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":1,"tokens_hash":18446744073709551612,"mm_extra_info":null}]}},"dp_rank":0},"kvix_no_eid":true},
{"worker_id":9223372036854775807,"storage_tier":"device","event":{"event_id":9223372036854775807,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":18446744073709551613,"tokens_hash":18446744073709551612,"mm_extra_info":null},{"block_hash":9223372036854775808,"tokens_hash":9223372036854775807,"mm_extra_info":null}]}},"dp_rank":4294967295}}]}}
EOF
tr -d '\n' <peer.json >peer.min.json
"$PY" "$HC" serve-dump peer.min.json port &
FAKE=$!
for i in $(seq 200); do [ -s port ] && break; sleep 0.05; done
: >in
serve --peers "http://127.0.0.1:$(cat port)"
wait "$FAKE"
req GET /dump
cmp -s body peer.min.json || { fail "/dump is not the dump recovered"; diff <(jq . body) <(jq . peer.min.json) | head -10 | sed 's/^/#     /'; }
printf '{"model_name":"m","block_hashes":[18446744073709551612,9223372036854775807]}' >q.json
req POST /query_by_hash q.json
assert_eq "$(cat body)" '{"scores":{"1":{"0":2},"9223372036854775807":{"4294967295":4}},"frequencies":[],"tree_sizes":{"1":{"0":1},"9223372036854775807":{"4294967295":2}}}' "u64 answer"
stop
end

begin "kvindex --peers: no peer answers, start from the snapshot; option errors"
printf '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"01","seq":"02"}]}\n' | kvindex -q -s s.kvix 2>/dev/null
printf '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"01","seq":"02"}]}\n' | kvindex --quiet -s s.kvix
# a port nobody listens on: bind one, close it
P=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
run kvindex -s s.kvix --peers "http://127.0.0.1:$P" </dev/null
expect_rc 0
assert_grep "no peer answered .*: starting from the snapshot" err
run kvindex -s s.kvix --peers ftp://x </dev/null
expect_rc 2
assert_grep "bad peer 'ftp://x'" err
run kvindex --listen 1.2.3.4.5:80 </dev/null
expect_rc 2
assert_grep "bad listen address" err
run kvindex --listen 127.0.0.1:70000 </dev/null
expect_rc 2
run kvindex -q -s s.kvix --peers http://x </dev/null
expect_rc 2
end

begin "kvindex --http-nice: the HTTP thread runs at the lower priority, the ingest thread as before; a body over the connection's 8 KiB buffer, headers past it"
printf '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"01","seq":"02"}]}\n' >in
# --http-nice adds to the nice value kvindex starts with (this shell's,
# which a test run may itself have raised): 7 more, or up to 19
base=$(nice)
by=$((base + 7 <= 19 ? 7 : 19 - base))
[ "$by" -gt 0 ] || fail "this test needs a nice value below 19 to lower a thread's priority (it runs at $base)"
serve --http-threads 1 --http-nice "$by"
req GET /health
assert_eq "$st" 200 "/health status"
# ~40 KB: the body arrives in pieces of the connection's buffer
"$PY" -c 'import json; print(json.dumps({"model_name": "default", "block_hashes": [1] + [2**64 - 1] * 1999}))' >long.json
req POST /query_by_hash long.json
assert_eq "$st $(cat body)" '200 {"scores":{"1":{"0":4}},"frequencies":[],"tree_sizes":{"1":{"0":1}}}' "a 40 KB body"
st=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Pad: $(head -c 6000 /dev/zero | tr '\0' a)" "$URL/health")
assert_eq "$st" 200 "6000 bytes of headers"
st=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Pad: $(head -c 9000 /dev/zero | tr '\0' a)" "$URL/health")
assert_eq "$st" 431 "9000 bytes of headers"
kp=$(tr -d " " </proc/"$KPID"/task/"$KPID"/children) # kvindex, under timeout
# field 19 of /proc/PID/task/TID/stat: the thread's nice value
nices=$(for t in /proc/"$kp"/task/*; do awk -v t="${t##*/}" '{ print t, $19 }' "$t/stat"; done)
assert_eq "$(awk -v p="$kp" '$1 == p { print $2 }' <<<"$nices")" "$base" "main (ingest) thread nice"
assert_eq "$(awk -v n=$((base + by)) '$2 == n' <<<"$nices" | wc -l)" 1 "threads at nice $((base + by)) (the one HTTP thread)"
stop
assert_eq "$rc" 0 "exit status"
run kvindex --listen 127.0.0.1:0 --http-nice 20 </dev/null
expect_rc 2
assert_grep "nice value" err
end

begin "kvindex --listen: 128 and 256 connections ready at once on one server thread are all answered"
# libmicrohttpd's own loop (0.9.75) stalled up to the connection timeout when
# one of its epoll waits returned exactly 128 ready connections
: >in
serve --http-threads 1
for n in 128 256; do
    "$PY" "$HC" burst "$URL" "$n" 20 >burst.out 2>&1 || { fail "$n connections"; sed 's/^/#     /' burst.out; }
done
req GET /metrics
assert_grep '^dynamo_kvindexer_requests_total{endpoint="/health",method="GET"} 7680$' body
stop
assert_eq "$rc" 0 "exit status"
end

begin "kvindex --listen: SIGTERM stops accepting, finishes the request in flight, saves, exits 0"
"$PY" "$HC" gen 11 ev.ndjson model.json q.json
mkfifo in
exec 3<>in
serve -s s.kvix
timeout 60 cat ev.ndjson >&3
applied 400
"$PY" "$HC" inflight "$URL" "$KPID" >inflight.out 2>&1 || { fail "request in flight"; sed 's/^/#     /' inflight.out; }
assert_grep '^\{"blocks":1,"scores":\[' inflight.out
exec 3>&-
wait "$KPID"
rc=$?
assert_eq "$rc" 0 "exit status"
kvindex --quiet -s ref.kvix <ev.ndjson
kvdump --diff ref.kvix s.kvix >/dev/null || fail "the snapshot saved on SIGTERM is not the state"
end
