#!/usr/bin/env bash
# kvindex --nats with the service and writer threads, against a real
# nats-server (JetStream, its store in the scratch directory, loopback, a
# free port): kvsub --nats publishes a fake engine's batches through its
# window of acknowledgements while Python publishes the HTTP client's events
# (tests/tools/http_client.py gen) with the NATS text protocol; one
# kvindex --nats --listen --threads 2 consumes the stream live and answers
# queries over HTTP meanwhile. Once it has applied everything, its HTTP
# answers equal kvindex -q on its own saved snapshot and on the index of
# the published logs. Concurrent (nats.c's threads, the HTTP threads, the
# writer threads): also run under ThreadSanitizer. Every wait is a bounded
# poll; nothing asserts on time.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
FE=$ROOT/tests/tools/fake_engine.py
HC=$ROOT/tests/tools/http_client.py
# under ThreadSanitizer: the uninstrumented libraries' own internals only
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$ROOT/tests/tsan.supp"
. "$(dirname "$0")/procs.sh"
. "$(dirname "$0")/nats.sh"

# metric NAME: the sum of a metric's samples on the live replica
metric() {
    curl -s "$URL/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { print s + 0 }'
}

begin "kvindex --nats --listen --threads: HTTP answers while consuming equal kvindex -q"
nats_start
"$PY" "$HC" gen 7 ev.ndjson model.json q.json || fail "gen"
"$PY" "$HC" kvix-queries q.json >q.ndjson
# the engine's batches through kvsub's publishing window
timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --dps 0,1 --batches 150 --expect exp.json \
    --seed 5 --linger 1 2>engine.err &
EPID=$!
timeout --foreground 120 kvsub -w "1=ipc://$T/pub" --nats "$NURL" --stream SVC --subject svc \
    --nats-window 16 >events.ndjson 2>kvsub.err &
SUBPID=$!
PIDS="$PIDS $EPID $SUBPID"
for i in $(seq 300); do grep -q "created stream SVC" kvsub.err && break; sleep 0.1; done
assert_grep "created stream SVC" kvsub.err
timeout --foreground 120 kvindex --nats "$NURL" --stream SVC -s live.kvix --threads 2 \
    --listen 127.0.0.1:0 >kv.out 2>kv.err &
KPID=$!
PIDS="$PIDS $KPID"
URL=$(listening kv.err) || fail "kvindex never said where it listens"
# the HTTP client's events, one message each, on the stream's subjects
nats_pub svc.llama.http <ev.ndjson || fail "publishing ev.ndjson"
# queries on the HTTP threads while the stream is consumed: model llama is
# unknown (404, rightly) until its first event is consumed, so the queries
# start at the first 200; from then on every one must be answered
llama() {
    curl -s -o /dev/null -w '%{http_code}\n' -X POST --data-binary \
        '{"model_name":"llama","token_ids":[1,2,3,4,5,6,7,8]}' "$URL/query"
}
for i in $(seq 600); do [ "$(llama)" = 200 ] && break; sleep 0.1; done
for i in $(seq 20); do llama >>during; done
assert_eq "$(sort -u during)" "200" "queries while consuming"
for i in $(seq 600); do
    "$PY" "$FE" final events.ndjson exp.json 2>/dev/null && break
    sleep 0.1
done
kill -TERM "$SUBPID"
wait "$SUBPID"
assert_eq "$?" 0 "kvsub's exit status (every batch acknowledged)"
assert_grep '^kvsub: nats published=[1-9][0-9]* duplicates=0$' kvsub.err
wait "$EPID"
# everything published, applied by the live replica
want=$(($(wc -l <events.ndjson) + $(wc -l <ev.ndjson)))
n=0
for i in $(seq 1200); do
    n=$(metric kvix_events_applied_total)
    [ "$n" -ge "$want" ] && break
    sleep 0.05
done
assert_eq "$n" "$want" "events applied by the live replica"
# its state saved (SIGHUP) while it goes on consuming, then asked both ways
saves=$(metric kvix_snapshot_saves_total)
kill -HUP "$KPID"
for i in $(seq 600); do
    [ "$(metric kvix_snapshot_saves_total)" -gt "$saves" ] && break
    sleep 0.05
done
assert_eq "$(($(metric kvix_snapshot_saves_total) > saves))" 1 "saved on SIGHUP"
kvindex --quiet -q -s live.kvix <q.ndjson >ans.ndjson || fail "kvindex -q on the live snapshot"
"$PY" "$HC" check "$URL" model.json q.json ans.ndjson >check.out 2>&1 ||
    { fail "HTTP answers differ from kvindex -q"; sed 's/^/#     /' check.out | head -5; }
kill -TERM "$KPID"
wait "$KPID"
assert_eq "$?" 0 "kvindex's exit status"
# the replica's final state is the published logs' index
cat events.ndjson ev.ndjson | kvindex --quiet -s ref.kvix || fail "kvindex of the logs"
kvdump --diff live.kvix ref.kvix >diff.out 2>&1 ||
    { fail "the live replica differs from the logs' index"; head -3 diff.out | sed 's/^/#     /'; }
kvindex --quiet -q -s ref.kvix <q.ndjson >ref.ans
cmp -s ans.ndjson ref.ans || fail "answers of the live snapshot and of the logs' index differ"
"$PY" "$FE" compare events.ndjson exp.json >cmp || fail "kvsub's log is not the engine's state"
end
