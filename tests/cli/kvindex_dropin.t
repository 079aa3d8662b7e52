#!/usr/bin/env bash
# kvindex as a drop-in for Dynamo's standalone indexer (dynamo-kv-indexer):
# its flags (--port, --block-size, --workers, --model-name, --tenant-id,
# --peers, --threads) with their meaning, HEAD answered where GET is, and a
# port already served refused instead of shared. Engines are fake ones
# (tests/tools/fake_engine.py) on ipc:// endpoints in the scratch directory;
# every wait is a bounded poll on an event (a line said, a metric reached).
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
FE=$ROOT/tests/tools/fake_engine.py
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$ROOT/tests/tsan.supp"
KPID=""

engine() { # engine ARGS...: a fake engine in the background
    timeout 60 "$PY" "$FE" publish "$@" 2>>engine.err &
    PIDS="$PIDS $!"
}

# start ERRFILE ARGS...: kvindex ARGS in the background (stdin: ./in, kept
# open); URL from what it says on ERRFILE
start() {
    local e=$1
    shift
    : >"$e" # before the job starts: `listening` must not read a previous run's line
    timeout --foreground 90 kvindex "$@" <in >kv.out 2>"$e" &
    KPID=$!
    PIDS="$PIDS $KPID"
    URL=$(listening "$e") && return 0
    fail "kvindex never said where it listens"
    sed 's/^/#     /' "$e" | head -5
    return 1
}

stop() { # SIGTERM; status in $rc
    kill -TERM "$KPID"
    wait "$KPID"
    rc=$?
}

metric() { curl -s "$URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

until_metric() { # until_metric NAME VALUE
    local i v
    for i in $(seq 600); do
        v=$(metric "$1")
        [ "$v" = "$2" ] && return 0
        sleep 0.05
    done
    fail "$1 is '$v', expected $2"
    return 1
}

# req METHOD PATH [BODY]: status in $st, body in ./body, headers in ./head
req() {
    local data=()
    [ $# -ge 3 ] && { printf '%s' "$3" >req.json; data=(--data-binary @req.json); }
    if [ "$1" = HEAD ]; then
        st=$(curl -s -I -o head -w '%{http_code}' "$URL$2")
        : >body
    else
        st=$(curl -s -D head -o body -w '%{http_code}' -X "$1" "${data[@]}" "$URL$2")
    fi
}

begin "kvindex --port --block-size --model-name --tenant-id --workers: serves as Dynamo's indexer"
engine --pub "ipc://$T/a" --dps 0,1 --bs 4 --batches 30 --worker 1 --expect ea.json --seed 31
engine --pub "ipc://$T/b" --dps 1 --bs 4 --batches 30 --worker 2 --expect eb.json --seed 32
# an event on stdin: Dynamo's indexer reads none, nor does kvindex run as it
printf '{"type":"stored","model":"stdin","worker":9,"bs":4,"blocks":[{"local":"1","seq":"1"}]}\n' >in
start kv.err --port 0 --block-size 4 --model-name m --tenant-id t --threads 2 \
    --workers " 1=ipc://$T/a, ,2:1=ipc://$T/b " || true
# every interface, as Dynamo's (0.0.0.0:PORT); the URL says so
assert_grep '^kvindex: listening on http://0\.0\.0\.0:[0-9]+$' kv.err
URL=${URL/0.0.0.0/127.0.0.1}
req GET /workers
assert_eq "$st $(cat body)" "200 [{\"instance_id\":1,\"endpoints\":{\"0\":\"ipc://$T/a\"}},{\"instance_id\":2,\"endpoints\":{\"1\":\"ipc://$T/b\"}}]" "/workers of --workers"
until_metric kvix_subscription_batches_total 90
"$PY" "$FE" queries --model m --tenant t ea.json eb.json >queries.ndjson
[ -s queries.ndjson ] || fail "no queries"
: >http.ans
while IFS= read -r line; do
    printf '%s' "$line" >q.json
    curl -s -X POST --data-binary @q.json "$URL/query" >>http.ans
done <queries.ndjson
"$PY" "$FE" answers http.ans ea.json eb.json >acmp || { fail "answers differ from the engines' state"; head -4 acmp | sed 's/^/#     /'; }
# Dynamo's own query shape, on the partition of --model-name and --tenant-id
req POST /query '{"token_ids":[1,2,3,4],"model_name":"m","tenant_id":"t"}'
assert_eq "$st" 200 "Dynamo's /query on model m tenant t"
assert_grep '^\{"scores":\{' body
req POST /query '{"token_ids":[1,2,3,4],"model_name":"m"}'
assert_eq "$st" 404 "tenant default does not exist: the workers are tenant t's"
# stdin was never read
req POST /query '{"token_ids":[1,2,3,4],"model_name":"stdin"}'
assert_eq "$st" 404 "model of the event on stdin"
# HEAD is answered where GET is: the status and headers of GET, no body
for p in /health /metrics /workers /peers /dump; do
    req HEAD "$p"
    assert_eq "$st" 200 "HEAD $p"
    [ -s body ] && fail "HEAD $p has a body"
done
req HEAD /health
grep -qi '^content-type: application/json' head || fail "HEAD /health: no JSON content type"
req HEAD /query
assert_eq "$st" 405 "HEAD where only POST is"
req GET /health
bad=$(curl -s -X POST "$URL/health")
assert_eq "$bad" '{"error":"method not allowed (use GET or HEAD)"}' "POST /health"
assert_grep '^dynamo_kvindexer_requests_total\{endpoint="/health",method="HEAD"\} 2$' <(curl -s "$URL/metrics")
stop
assert_eq "$rc" 0 "exit status on SIGTERM"
# the exit summary counts the HTTP queries too: the engines' chains, then
# Dynamo's three (two of them 404)
nq=$(wc -l <queries.ndjson)
assert_grep "^kvindex: answered 0 of 0 queries; over HTTP $((nq + 1)) of $((nq + 3))\$" kv.err
end

begin "a port already served is refused: the second kvindex exits with a clear message"
: >in
start kv1.err --listen 127.0.0.1:0 || true
port=${URL##*:}
first=$KPID
run timeout 30 kvindex --listen "127.0.0.1:$port" </dev/null
expect_rc 3
assert_grep "^kvindex: cannot listen on 127\.0\.0\.1 port $port: Address already in use \(another process, perhaps another kvindex, listens there\)$" err
# Dynamo's spelling too, on every interface
run timeout 30 kvindex --port "$port" </dev/null
expect_rc 3
assert_grep "cannot listen on 0\.0\.0\.0 port $port: Address already in use" err
# the first one still serves, alone
req GET /health
assert_eq "$st $(cat body)" '200 {"status":"ok"}' "the first kvindex"
KPID=$first
stop
assert_eq "$rc" 0 "first kvindex on SIGTERM"
end

begin "Dynamo's flags: --workers alone serves at 0.0.0.0:8090, as Dynamo's does, else where --listen says; option errors"
run kvindex --port 80 --listen 127.0.0.1:0 </dev/null
expect_rc 2
assert_grep 'kvindex: --port and --listen both say where to listen: give one' err
run kvindex --port 99999 </dev/null
expect_rc 2
assert_grep "bad port \(--port\): '99999'" err
run kvindex --port 0 -q -s x.kvix </dev/null
expect_rc 2
assert_grep 'not with -q or --nats' err
run kvindex --workers "1=http://x:1" --listen 127.0.0.1:0 </dev/null
expect_rc 2
assert_grep 'http://x:1' err
run kvindex --workers "1=ipc://$T/x,1=ipc://$T/y" --listen 127.0.0.1:0 </dev/null
expect_rc 2
assert_grep 'worker 1 dp 0 already registered' err
# without Dynamo's flags, --model-name is --model: for -w only
run kvindex --model-name m </dev/null
expect_rc 2
assert_grep '--model, --tenant, --block-size and --replay-timeout go with -w' err
# --workers with --listen: where --listen says, workers as Dynamo's; stdin unread
: >in
start kv.err --listen 127.0.0.1:0 --workers "5=ipc://$T/w5" || true
req GET /workers
assert_eq "$(cat body)" "[{\"instance_id\":5,\"endpoints\":{\"0\":\"ipc://$T/w5\"}}]" "/workers"
stop
# alone, Dynamo's default port on every interface (another test or program may
# hold it: then the refusal names it)
timeout --foreground 60 kvindex --workers "5=ipc://$T/w5" </dev/null >kv.out 2>d.err &
KPID=$!
PIDS="$PIDS $KPID"
for i in $(seq 1200); do
    grep -qE 'listening on|cannot listen' d.err && break
    kill -0 "$KPID" 2>/dev/null || break
    sleep 0.05
done
grep -qE '^kvindex: (listening on http://0\.0\.0\.0:8090|cannot listen on 0\.0\.0\.0 port 8090: .*)$' d.err ||
    { fail "--workers alone does not serve at 0.0.0.0:8090"; sed 's/^/#     /' d.err | head -3; }
kill -TERM "$KPID" 2>/dev/null
wait "$KPID"
# the help names the default port
kvindex --help >help
assert_grep 'workers ID\[:DP\]=ENDPOINT,\.\.\. .*default 8090' help
end

begin "kvindex -q --listen: POST /register and /unregister answer 503 and say why"
echo '{"type":"stored","worker":1,"bs":2,"blocks":[{"local":"1","seq":"1"}]}' | kvindex --quiet -s s.kvix
: >in
start kv.err -q -s s.kvix --listen 127.0.0.1:0 || true
req POST /register '{"instance_id":2,"endpoint":"tcp://h:5557","model_name":"m","block_size":2}'
assert_eq "$st $(cat body)" '503 {"error":"this service has no engine subscriptions: kvindex -q answers from its snapshot and applies no event; run kvindex without -q to take registrations"}' "/register with -q"
req POST /unregister '{"instance_id":2,"model_name":"m"}'
assert_eq "$st" 503 "/unregister with -q"
req GET /workers
assert_eq "$st $(cat body)" "200 []" "/workers with -q: none"
stop
end

begin "--peers: a URL without a host says so"
run kvindex --peers http://:8090 </dev/null
expect_rc 2
assert_grep "^kvindex: bad peer 'http://:8090': peer url \"http://:8090\" has no host \(expected http://HOST\[:PORT\]\)$" err
run kvindex --peers https:// </dev/null
expect_rc 2
assert_grep 'peer url "https://" has no host \(expected https://HOST\[:PORT\]\)' err
run kvindex --peers gpu1:8090 </dev/null
expect_rc 2
assert_grep "bad peer 'gpu1:8090': peer url \"gpu1:8090\" is not an http:// or https:// URL" err
end

begin "the README's /query and /query_by_hash answers are a real run's"
# the state the README describes: block size 4, worker 1 the 2 blocks of
# tokens 1..8 and 3 others, worker 2 the first
set -- $(echo 1 2 3 4 5 6 7 8 9 9 9 9 8 8 8 8 7 7 7 7 | kvhash -b 4 --plain local)
{
    echo "{\"type\":\"stored\",\"model\":\"llama\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":\"$1\",\"seq\":\"a1\"},{\"local\":\"$2\",\"seq\":\"a2\"}]}"
    set -- $(echo 9 9 9 9 8 8 8 8 7 7 7 7 | kvhash -b 4 --plain local) "$1"
    echo "{\"type\":\"stored\",\"model\":\"llama\",\"worker\":1,\"bs\":4,\"blocks\":[{\"local\":\"$1\",\"seq\":\"b1\"},{\"local\":\"$2\",\"seq\":\"b2\"},{\"local\":\"$3\",\"seq\":\"b3\"}]}"
    echo "{\"type\":\"stored\",\"model\":\"llama\",\"worker\":2,\"bs\":4,\"blocks\":[{\"local\":\"$4\",\"seq\":\"c1\"}]}"
} >in
start kv.err --listen 127.0.0.1:0 || true
until_metric 'kvix_events_applied_total{type="stored"}' 3
readme_answers() { sed -n 's/^    # \({"scores".*\)$/\1/p' "$ROOT/README.md"; }
[ "$(readme_answers | wc -l)" = 2 ] || fail "the README shows $(readme_answers | wc -l) answers, expected 2"
got=$(curl -s -XPOST "$URL/query" -d '{"token_ids":[1,2,3,4,5,6,7,8],"model_name":"llama","tenant_id":"default"}')
assert_eq "$got" "$(readme_answers | sed -n 1p)" "/query"
got=$(curl -s -XPOST "$URL/query_by_hash" -d '{"block_hashes":[14643705804678351452],"model_name":"llama"}')
assert_eq "$got" "$(readme_answers | sed -n 2p)" "/query_by_hash"
stop
end
