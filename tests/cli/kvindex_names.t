#!/usr/bin/env bash
# A model name with ':' and the HTTP API: /dump's keys are "model:tenant",
# split at the first ':' by every reader (Dynamo's too), so kvindex --listen
# refuses such a model from every source (stdin events, --model, a workers
# file, a snapshot), as POST /register does. Without --listen it is a name
# like any other.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"

ev() { # ev MODEL WORKER: a one-block stored event
    printf '{"type":"stored","worker":%s,"dp":0,"model":"%s","bs":4,"blocks":[{"local":"00000000000000aa","seq":"%016x"}]}\n' \
        "$2" "$1" "$2"
}

begin "kvindex --listen: stdin events of a model with ':' are refused, the rest applied"
{ ev 'llama3:8b' 1; ev good 2; ev 'a:b:c' 3; } >in
mkfifo feed
timeout --foreground 60 kvindex --listen 127.0.0.1:0 -s snap.kvix <feed >out 2>err &
kp=$!
PIDS="$PIDS $kp"
exec 3>feed
URL=$(listening err) || fail "kvindex never said where it listens"
cat in >&3
for i in $(seq 200); do
    curl -s "$URL/metrics" | grep -q '^kvix_events_rejected_total{reason="bad_value"} 2' && break
    sleep 0.05
done
curl -s "$URL/dump" >dump
assert_eq "$(jq -c 'keys' dump)" '["good:default"]' "/dump holds only the model without ':'"
curl -s "$URL/metrics" >metrics
assert_grep '^kvix_events_rejected_total\{reason="bad_value"\} 2$' metrics
assert_grep "bad event at <stdin>:1: model name \"llama3:8b\" contains ':', which the HTTP API's /dump keys \(model:tenant, split at the first ':'\) cannot carry" err
assert_grep 'bad event at <stdin>:3: model name "a:b:c" contains' err
exec 3>&-
kill -TERM "$kp"
wait "$kp"
assert_eq "$?" 0 "kvindex --listen exits 0 on SIGTERM (rejections are counted, not fatal)"
end

begin "kvindex --listen: --model or a workers file with ':' is a usage error"
run timeout --foreground 30 kvindex --listen 127.0.0.1:0 --model 'llama3:8b' -w 1=tcp://127.0.0.1:9 </dev/null
expect_rc 2
assert_grep "bad model name 'llama3:8b' for --listen: the HTTP API's /dump keys are model:tenant" err
printf '1=tcp://127.0.0.1:9 model=good\n2=tcp://127.0.0.1:10 model=qwen:7b\n' >workers
run timeout --foreground 30 kvindex --listen 127.0.0.1:0 --workers-file workers </dev/null
expect_rc 2
assert_grep "workers: model name \"qwen:7b\" contains ':'" err
end

begin "without --listen a model with ':' is a name like any other; --listen refuses its snapshot"
ev 'llama3:8b' 1 >in
run kvindex -s snap.kvix <in
expect_rc 0
run kvdump --stats snap.kvix
assert_grep 'llama3:8b' out
run timeout --foreground 30 kvindex --listen 127.0.0.1:0 -s snap.kvix </dev/null
expect_rc 3
assert_grep "cannot load snap.kvix: model name \"llama3:8b\" contains ':'" err
end
