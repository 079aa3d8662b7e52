#!/usr/bin/env bash
# kvindex --peers against the fake engine: two replicas fed by the same
# engine through kvsub, one stopped mid-run and restarted with --peers (the
# first down, the second a live kvindex): it takes the peer's GET /snapshot,
# then drains its held input, and ends equal to the replica that never
# stopped; and a replica subscribing in-process (-w) with --peers, its
# subscriptions held while it loads the peer's snapshot, ends equal too.
# Not a *_mt test: kvsub's libzmq is not instrumented, so
# ThreadSanitizer reports its buffers handed between threads (the HTTP side
# runs under it in kvindex_peers_mt.t and kvindex_http_mt.t).
# Every wait is a bounded poll; nothing asserts on time.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
FE=$ROOT/tests/tools/fake_engine.py
. "$(dirname "$0")/procs.sh"

begin "kvindex --peers: a replica restarted mid-run takes a peer's snapshot, then its held input"
timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --dps 0,1 --batches 120 --subscribers 2 \
    --pause-at 40:go:3 --expect exp.json --seed 5 --linger 1 2>engine.err &
PIDS="$PIDS $!"
EPID=$!
# replica NAME KVINDEX-ARGS...: kvsub | tee NAME.ev | kvindex, the pids in
# NAME.sub and NAME.idx
replica() {
    local n=$1
    shift
    rm -f "$n.sub" "$n.idx"
    (sh -c 'echo $$ >"$0"; exec kvsub -w "$1"' "$n.sub" "1=ipc://$T/pub" 2>>"$n.suberr" |
        tee -a "$n.ev" | sh -c 'echo $$ >"$0"; exec kvindex "$@"' "$n.idx" \
            -s "$n.kvix" "$@" 2>"$n.err") &
    for i in $(seq 300); do [ -s "$n.sub" ] && [ -s "$n.idx" ] && break; sleep 0.05; done
    PIDS="$PIDS $(cat "$n.sub") $(cat "$n.idx")"
}

gone() { # gone PID: wait until it exited
    local i
    for i in $(seq 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    fail "process $1 did not stop"
}
replica a --listen 127.0.0.1:0
replica b
URL=$(listening a.err) || fail "replica a never said where it listens"
# b stopped once the engine paused: its state so far saved, then started again
for i in $(seq 600); do grep -q '"eid":39,' b.ev 2>/dev/null && break; sleep 0.1; done
grep -q '"eid":39,' b.ev || fail "b never saw batch 39"
kill -TERM "$(cat b.sub)"
gone "$(cat b.idx)"
[ -s b.kvix ] || fail "b saved nothing"
replica b --peers "http://127.0.0.1:1,$URL"
touch go # the engine goes on once the new kvsub joined
for r in a b; do
    for i in $(seq 600); do "$PY" "$FE" final "$r.ev" exp.json 2>/dev/null && break; sleep 0.1; done
    "$PY" "$FE" final "$r.ev" exp.json || fail "replica $r never got the engine's last batches"
done
kill -TERM "$(cat b.sub)"
gone "$(cat b.idx)"
kill -TERM "$(cat a.sub)"
for i in $(seq 300); do curl -s "$URL/metrics" | grep -q '^kvix_snapshot_saves_total [1-9]' && break; sleep 0.1; done
kill -TERM "$(cat a.idx)"
gone "$(cat a.idx)"
# the first peer is down: the second answers with its snapshot
assert_grep "recovered from $URL/snapshot: [0-9]+ blocks" b.err
kvdump --diff a.kvix b.kvix >diff.out 2>&1 || { fail "a and b differ"; head -5 diff.out | sed 's/^/#     /'; }
"$PY" "$FE" compare a.ev exp.json >cmp || fail "a's events are not the engine's state"
wait "$EPID" 2>/dev/null
end

begin "kvindex -w --peers: in-process subscriptions held while a peer's snapshot loads"
timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --dps 0,1 --batches 120 \
    --pause-at 40:go:2 --expect exp.json --seed 6 --linger 1 2>engine.err &
EPID=$!
PIDS="$PIDS $EPID"
(sh -c 'echo $$ >"$0"; exec kvsub -w "$1"' a.sub "1=ipc://$T/pub" 2>a.suberr | tee -a a.ev |
    sh -c 'echo $$ >"$0"; exec kvindex --listen 127.0.0.1:0' a.idx 2>a.err) &
A=$(listening a.err) || fail "replica a never said where it listens"
for i in $(seq 300); do [ -s a.sub ] && [ -s a.idx ] && break; sleep 0.05; done
PIDS="$PIDS $(cat a.sub) $(cat a.idx)"
for i in $(seq 600); do grep -q '"eid":39,' a.ev 2>/dev/null && break; sleep 0.1; done
# b subscribes itself, is held while it takes a's snapshot, then drains
kvindex -w "1=ipc://$T/pub" --listen 127.0.0.1:0 --peers "$A" </dev/null 2>b.err &
BPID=$!
PIDS="$PIDS $BPID"
B=$(listening b.err) || fail "replica b never said where it listens"
touch go
for i in $(seq 600); do "$PY" "$FE" final a.ev exp.json 2>/dev/null && break; sleep 0.1; done
"$PY" "$FE" final a.ev exp.json || fail "replica a never got the engine's last batches"
same=0
for i in $(seq 300); do
    curl -s -o a.kvix "$A/snapshot" && curl -s -o b.kvix "$B/snapshot" &&
        kvdump --diff a.kvix b.kvix >diff.out 2>&1 && { same=1; break; }
    sleep 0.1
done
[ $same = 1 ] || { fail "b never equalled a"; head -5 diff.out | sed 's/^/#     /'; }
assert_grep "recovered from $A/snapshot: [0-9]+ blocks" b.err
kill -TERM "$BPID"
wait "$BPID"
assert_eq "$?" 0 "b's exit status"
kill -TERM "$(cat a.sub)" "$(cat a.idx)"
gone "$(cat a.idx)"
wait "$EPID" 2>/dev/null
end
