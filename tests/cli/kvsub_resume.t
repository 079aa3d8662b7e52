#!/usr/bin/env bash
# kvsub --resume SNAPSHOT: a `kvsub | kvindex -s` pipeline stopped while the
# engine goes on storing and evicting, then restarted, ends with the index of
# a pipeline that never stopped (kvdump --diff), or, when the missed batches
# cannot be replayed, with the worker cleared and the loss reported. The fake
# engine (tests/tools/fake_engine.py) pauses at fixed batches until the test
# says so; every wait is bounded.
. "$(dirname "$0")/lib.sh"
FE=$ROOT/tests/tools/fake_engine.py

wait_eid() { # wait_eid N FILE...: until every FILE holds an event of eid N
    local i f ok
    for i in $(seq 300); do
        ok=1
        for f in "${@:2}"; do grep -q "\"eid\":$1," "$f" 2>/dev/null || ok=0; done
        [ $ok = 1 ] && return 0
        sleep 0.1
    done
    fail "no event of eid $1 in $*"
    return 1
}

# Worker 1 of another model and of another tenant, far ahead: other engines,
# whose eids the snapshot keeps beside this one's and no resume may take.
others() {
    printf '%s\n' \
        '{"type":"stored","worker":1,"model":"other","bs":16,"eid":1000,"blocks":[{"local":"1","seq":"1"}]}' \
        '{"type":"stored","worker":1,"tenant":"t","bs":16,"eid":1000,"blocks":[{"local":"2","seq":"2"}]}'
}

# first_half: the engine started, a reference kvsub that never stops, and
# `kvsub | kvindex -s snap.kvix` stopped after eid 9 (the other engines'
# eids in the snapshot too); then the engine goes on storing and evicting
# while the pipeline is down, up to eid 14.
# (--replay-timeout 60000: the recovery's deadline is wall-clock time, which a
# sanitizer build on a loaded machine may overrun; no scenario is about it)
first_half() {
    timeout 90 "$PY" "$FE" publish --pub "ipc://$T/pub" --replay "ipc://$T/rep" --batches 20 \
        --subscribers 2 --pause-at 10:p1 --pause-at 15:p2:3 --seed 41 2>engine.err &
    epid=$!
    timeout --foreground 90 kvsub --replay-timeout 60000 -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep" >ref.ev 2>ref.err &
    rpid=$!
    timeout --foreground 90 kvsub --replay-timeout 60000 -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep" >ev1 2>err1 &
    kpid=$!
    wait_eid 9 ev1 ref.ev
    kill -TERM $kpid
    wait $kpid
    { cat ev1; others; } | kvindex --quiet -s snap.kvix || fail "kvindex on the first half"
    touch p1 # the engine stores and evicts while the pipeline is down
    wait_eid 14 ref.ev
}

scenario() { # scenario REPLAY_ARGS...: the restarted kvsub's replay options
    first_half
    timeout --foreground 90 kvsub --replay-timeout 60000 -w "1=ipc://$T/pub" "$@" --resume snap.kvix >ev2 2>err2 &
    kpid=$!
    touch p2 # once it joined, the engine goes on live
    wait_eid 19 ev2 ref.ev
    kill -TERM $kpid $rpid
    wait $kpid $rpid
    kill $epid 2>/dev/null
    wait $epid 2>/dev/null
    kvindex --quiet -s snap.kvix <ev2 2>idx2.err # after a clear, children of lost parents are rejected
    idx2=$?
    { cat ref.ev; others; } | kvindex --quiet -s ref.kvix || fail "kvindex on the reference"
}

begin "kvsub --resume: stopped and restarted, the index equals one that never stopped"
scenario --replay "1=ipc://$T/rep"
assert_eq "$idx2" 0 "kvindex on the second half"
run kvdump --diff snap.kvix ref.kvix
expect_rc 0
assert_eq "$(head -c 200 ev2 | grep -o '"eid":[0-9]*' | head -1)" '"eid":10' "first batch after the restart"
assert_grep '(^| )replays=1 ' err2
assert_grep '(^| )losses=0 ' err2
assert_grep '(^| )cleared_by_kvsub=0 ' err2
end

begin "kvsub --resume: what cannot be replayed clears the worker and is reported"
scenario
assert_grep 'worker 1 dp 0: batches 10\.\.1[4-9] lost \(no replay endpoint\): cleared' err2
assert_grep '^\{"type":"cleared","worker":1,"dp":0,[^}]*"medium":"gpu"\}$' ev2
assert_grep '(^| )losses=1 ' err2
end

begin "kvindex -w: restarted on the snapshot, resumed as kvsub --resume (the other engines' eids left alone)"
first_half
printf '1=ipc://%s/pub replay=ipc://%s/rep\n' "$T" "$T" >workers
timeout --foreground 90 kvindex --listen 127.0.0.1:0 -s snap.kvix --workers-file workers \
    --replay-timeout 60000 </dev/null >kv.out 2>kv.err &
kpid=$!
for i in $(seq 1200); do # up to 60 s, unless kvindex is gone
    URL=$(sed -n 's/^kvindex: listening on \(http:.*\)$/\1/p' kv.err)
    [ -n "$URL" ] && break
    kill -0 $kpid 2>/dev/null || break
    sleep 0.05
done
touch p2 # once it joined, the engine goes on live
wait_eid 19 ref.ev
batches() { curl -s "$URL/metrics" | awk '$1 == "kvix_subscription_batches_total" {print $2}'; }
for i in $(seq 600); do [ "$(batches)" = 10 ] && break; sleep 0.1; done # 10..19
assert_eq "$(batches)" 10 "batches applied after the restart"
curl -s "$URL/metrics" >metrics
kill -TERM $kpid $rpid
wait $kpid
assert_eq "$?" 0 "kvindex exit status"
wait $rpid
kill $epid 2>/dev/null
wait $epid 2>/dev/null
{ cat ref.ev; others; } | kvindex --quiet -s ref.kvix || fail "kvindex on the reference"
run kvdump --diff snap.kvix ref.kvix
expect_rc 0
assert_grep '^kvix_subscription_replays_total 1$' metrics
assert_no_grep ' lost |restarted|: cleared' kv.err
end

begin "kvsub --resume: a snapshot that cannot be read"
run kvsub -w 1=ipc://x --resume nosuch.kvix
expect_rc 3
assert_grep 'nosuch.kvix' err
echo garbage >bad.kvix
run kvsub -w 1=ipc://x --resume bad.kvix
expect_rc 4
end
