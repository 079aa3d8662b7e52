#!/usr/bin/env bash
# An engine endpoint with nobody there is not silence forever: kvsub (and
# kvindex -w) say so on stderr after a few seconds without a connection, and
# again once it connects. Waits are bounded polls on the lines said.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
FE=$ROOT/tests/tools/fake_engine.py
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$ROOT/tests/tsan.supp"

# said FILE RE: wait (up to 60 s) until FILE has a line matching RE
said() {
    local i
    for i in $(seq 1200); do
        grep -qE -- "$2" "$1" && return 0
        sleep 0.05
    done
    fail "never said /$2/"
    sed 's/^/#     /' "$1" | head -5
    return 1
}

for tool in kvsub kvindex; do
    begin "$tool -w with no engine there: said after a few seconds, and again once it connects"
    # an ipc:// path of the test's own: no other test can take it meanwhile,
    # as it could a free tcp port
    ep="ipc://$T/engine"
    if [ $tool = kvsub ]; then
        timeout --foreground 90 kvsub -w "3:1=$ep" >sub.out 2>t.err &
    else
        timeout --foreground 90 kvindex -w "3:1=$ep" </dev/null >sub.out 2>t.err &
    fi
    TPID=$!
    PIDS="$PIDS $TPID"
    said t.err "^$tool: worker 3 dp 1: no connection to $ep for [0-9]+ s; still trying \(is the engine up and publishing there\?\)$"
    assert_eq "$(grep -c 'no connection' t.err)" 1 "said once while nothing changes"
    # an engine comes up on that port
    timeout 60 "$PY" "$FE" publish --pub "$ep" --worker 3 --batches 5 --linger 30 2>engine.err &
    PIDS="$PIDS $!"
    said t.err "^$tool: worker 3 dp 1: connected to $ep$"
    kill -TERM "$TPID"
    wait "$TPID"
    rc=$?
    assert_eq "$rc" 0 "$tool exit status on SIGTERM"
    end
done

begin "kvsub -w with the engine there: no word about connections"
ep="ipc://$T/engine"
timeout 60 "$PY" "$FE" publish --pub "$ep" --worker 1 --batches 5 --expect exp.json --linger 30 2>engine.err &
PIDS="$PIDS $!"
# bound before kvsub starts (a connection made at once is not remarked on)
for i in $(seq 1200); do
    [ -S "$T/engine" ] && break
    sleep 0.05
done
timeout --foreground 90 kvsub -w "1=$ep" >sub.out 2>t.err &
TPID=$!
PIDS="$PIDS $TPID"
for i in $(seq 600); do
    "$PY" "$FE" final sub.out exp.json 2>/dev/null && break
    sleep 0.1
done
"$PY" "$FE" final sub.out exp.json || fail "kvsub did not get the engine's batches"
kill -TERM "$TPID"
wait "$TPID"
assert_no_grep 'connection|connected' t.err
end
