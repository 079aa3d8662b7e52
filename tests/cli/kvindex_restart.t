#!/usr/bin/env bash
# Workers registered over HTTP survive a restart with the snapshot: kvindex
# keeps POST /register's subscriptions in it (kvix-snapshot(5), extension
# record 65) and resubscribes them at start, each (worker, rank) resuming
# after the last eid the snapshot holds (what the engine published while
# kvindex was down is replayed), as -w and --resume do. An unregistered
# worker stays gone; -w wins a conflict. Fake engines on ipc:// endpoints in
# the scratch directory; every wait is a bounded poll on an event.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
FE=$ROOT/tests/tools/fake_engine.py
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$ROOT/tests/tsan.supp"
KPID=""

engine() { # engine ARGS...: a fake engine in the background
    timeout 300 "$PY" "$FE" publish "$@" 2>>engine.err &
    PIDS="$PIDS $!"
}

start() { # start ERRFILE ARGS...: kvindex --listen ARGS, stdin empty; URL
    local e=$1
    shift
    : >"$e" # before the job starts: `listening` must not read a previous run's line
    timeout --foreground 240 kvindex --listen 127.0.0.1:0 "$@" </dev/null >kv.out 2>"$e" &
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

until_metric_ge() { # until_metric_ge NAME MIN
    local i v
    for i in $(seq 1200); do
        v=$(metric "$1")
        [ -n "$v" ] && [ "$v" -ge "$2" ] && return 0
        sleep 0.05
    done
    fail "$1 is '$v', expected at least $2"
    return 1
}

# req METHOD PATH [BODY]: status in $st, body in ./body
req() {
    if [ $# -ge 3 ]; then
        printf '%s' "$3" >req.json
        st=$(curl -s -o body -w '%{http_code}' -X "$1" --data-binary @req.json "$URL$2")
    else
        st=$(curl -s -o body -w '%{http_code}' -X "$1" "$URL$2")
    fi
}

# answers_match EXPECT: /query answers every chain of the engine's final
# state as a correct subscriber would (polled: the last batches may still be
# on their way)
answers_match() {
    local i
    for i in $(seq 300); do
        if [ -s "$1" ]; then
            "$PY" "$FE" queries --model m "$1" >queries.ndjson
            : >http.ans
            while IFS= read -r line; do
                printf '%s' "$line" >q.json
                curl -s -X POST --data-binary @q.json "$URL/query" >>http.ans
            done <queries.ndjson
            "$PY" "$FE" answers http.ans "$1" >acmp && return 0
        fi
        sleep 0.2
    done
    fail "the index does not hold the engine's state"
    head -4 acmp | sed 's/^/#     /'
    return 1
}

begin "a registered worker survives a restart with the snapshot, resumed after its last eid (the batches missed replayed)"
# the engine stops after 20 rounds until ./down, publishes rounds 20..39
# while kvindex is down, then waits for ./up and a second subscription
engine --pub "ipc://$T/pub" --replay "ipc://$T/rep" --bs 4 --batches 60 --worker 7 \
    --expect exp.json --seed 41 --pause-at "20:$T/down" --pause-at "40:$T/up:2" --linger 120
start kv1.err -s s.kvix || true
req POST /register "{\"instance_id\":7,\"endpoint\":\"ipc://$T/pub\",\"model_name\":\"m\",\"block_size\":4,\"replay_endpoint\":\"ipc://$T/rep\"}"
assert_eq "$st" 201 "register"
until_metric_ge kvix_subscription_batches_total 20
stop
assert_eq "$rc" 0 "first kvindex on SIGTERM"
kvdump --stats --json s.kvix >stats1 || fail "no snapshot saved"
assert_grep '"scope":"worker".*"worker":7' stats1
touch "$T/down"
# the engine's rounds 20..39 go out to nobody (kept in its replay buffer)
for i in $(seq 1200); do [ -e "$T/up.waiting" ] && break; sleep 0.05; done
[ -e "$T/up.waiting" ] || fail "the engine never reached its second pause"
touch "$T/up"
start kv2.err -s s.kvix || true
assert_grep '^kvindex: s\.kvix: resubscribed 1 of 1 registration \(POST /register\)$' kv2.err
req GET /workers
assert_eq "$st $(cat body)" "200 [{\"instance_id\":7,\"endpoints\":{\"0\":\"ipc://$T/pub\"}}]" "/workers after the restart"
answers_match exp.json
# what was missed came back from the engine's replay endpoint
until_metric_ge kvix_subscription_replayed_total 1
assert_eq "$(metric kvix_subscription_losses_total)" 0 "no loss"
stop
assert_eq "$rc" 0 "second kvindex on SIGTERM"
# unregistered, it stays gone after the next restart
start kv3.err -s s.kvix || true
req POST /unregister '{"instance_id":7,"model_name":"m"}'
assert_eq "$st" 200 "unregister"
for i in $(seq 600); do [ "$(metric kvix_index_workers)" = 0 ] && break; sleep 0.05; done
stop
start kv4.err -s s.kvix || true
assert_no_grep 'resubscribed' kv4.err
req GET /workers
assert_eq "$st $(cat body)" "200 []" "/workers after unregister and restart"
assert_eq "$(metric kvix_index_workers)" 0 "no worker's blocks"
stop
end

begin "a registration the snapshot keeps loses to -w for the same worker and rank, and is said"
engine --pub "ipc://$T/e1" --bs 4 --batches 5 --worker 3 --linger 60
start kv1.err -s s.kvix || true
req POST /register "{\"instance_id\":3,\"endpoint\":\"ipc://$T/e1\",\"model_name\":\"m\",\"block_size\":4}"
assert_eq "$st" 201 "register"
stop
# restarted with -w for worker 3 dp 0 elsewhere: the command line wins
start kv2.err -s s.kvix -w "3=ipc://$T/e2" || true
assert_grep "^kvindex: s\.kvix: registration of worker 3 dp 0 \(ipc://$T/e1\) not resubscribed: .*already" kv2.err
assert_grep '^kvindex: s\.kvix: resubscribed 0 of 1 registration' kv2.err
req GET /workers
assert_eq "$(cat body)" "[{\"instance_id\":3,\"endpoints\":{\"0\":\"ipc://$T/e2\"}}]" "/workers: -w's"
stop
# kvindex -q answers from the snapshot and subscribes to nothing
echo '{"local":["1"]}' >q
run kvindex -q -s s.kvix q
expect_rc 0
assert_no_grep 'resubscribed|registration' err
end

begin "a registration alone is a change: --save-every-seconds keeps it, even if kvindex is killed before its exit save"
start kv1.err -v -s s.kvix --save-every-seconds 1 || true
# an engine that publishes nothing (not there yet): no event changes the index
req POST /register "{\"instance_id\":9,\"endpoint\":\"ipc://$T/quiet\",\"model_name\":\"m\",\"block_size\":4}"
assert_eq "$st" 201 "register"
for i in $(seq 1200); do grep -q '^kvindex: saved s\.kvix (timer)' kv1.err && break; sleep 0.05; done
assert_grep '^kvindex: saved s\.kvix \(timer\)' kv1.err
# kvindex itself killed (timeout then ends with it): no exit save
kill -9 "$(pgrep -P "$KPID" -x kvindex)"
wait "$KPID" 2>/dev/null
start kv2.err -s s.kvix || true
assert_grep '^kvindex: s\.kvix: resubscribed 1 of 1 registration' kv2.err
req GET /workers
assert_eq "$(cat body)" "[{\"instance_id\":9,\"endpoints\":{\"0\":\"ipc://$T/quiet\"}}]" "/workers"
stop
end
