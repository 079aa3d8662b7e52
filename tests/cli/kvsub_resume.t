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

# (--replay-timeout 60000: the recovery's deadline is wall-clock time, which a
# sanitizer build on a loaded machine may overrun; no scenario is about it)
scenario() { # scenario REPLAY_ARGS...: the restarted kvsub's replay options
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
    kvindex --quiet -s snap.kvix <ev1 || fail "kvindex on the first half"
    touch p1 # the engine stores and evicts while the pipeline is down
    wait_eid 14 ref.ev
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
    kvindex --quiet -s ref.kvix <ref.ev || fail "kvindex on the reference"
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

begin "kvsub --resume: a snapshot that cannot be read"
run kvsub -w 1=ipc://x --resume nosuch.kvix
expect_rc 3
assert_grep 'nosuch.kvix' err
echo garbage >bad.kvix
run kvsub -w 1=ipc://x --resume bad.kvix
expect_rc 4
end
