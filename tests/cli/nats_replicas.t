#!/usr/bin/env bash
# Scale-out on NATS JetStream, against a real nats-server (JetStream on, its
# store in the scratch directory, loopback, a free port): a fake engine feeds
# kvsub --nats, three kvindex --nats replicas consume the stream; replicas and
# the server are killed -9 and restarted at points while the engine runs. At
# the end every replica's snapshot equals the one that never stopped and the
# index of kvsub's own printed log, at the same stream sequence. Every wait
# is a bounded poll; nothing asserts on time.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
FE=$ROOT/tests/tools/fake_engine.py
. "$(dirname "$0")/nats.sh"

replica() { # replica NAME ARGS...: kvindex --nats in the background, pid in P_NAME
    local name=$1
    shift
    # no timeout(1) in between: kill -9 must reach kvindex itself (the
    # cleanup trap bounds its life)
    kvindex --nats "$URL" -s "$T/$name.kvix" "$@" >>"$T/$name.out" 2>>"$T/$name.err" &
    eval "P_$name=$!"
}

wait_seq() { # wait_seq NAME N: NAME's snapshot reflects at least N messages
    local i
    for i in $(seq 600); do
        [ "$(seq_of "$T/$1.kvix")" -ge "$2" ] && return 0
        sleep 0.1
    done
    fail "$1 never saved sequence $2 (it has $(seq_of "$T/$1.kvix"))"
    sed 's/^/#     '"$1"': /' "$T/$1.err" | tail -5
    return 1
}

kill9() { # kill9 PID: gone, and reaped
    kill -9 "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

# at exit, the replicas too (procs.sh's cleanup: every process below them as
# well, asserted gone)
cleanup_all() {
    PIDS="$PIDS ${P_a:-} ${P_b:-} ${P_c:-}"
    cleanup
}
trap cleanup_all EXIT

begin "kvindex --nats: replicas and the server killed -9 mid-stream stay exactly in step"
nats_start
URL=$NURL
timeout 300 "$PY" "$FE" publish --pub "ipc://$T/pub" --dps 0,1 --batches 1500 --expect exp.json \
    --seed 21 --linger 1 2>engine.err &
EPID=$!
timeout --foreground 300 kvsub -w "1=ipc://$T/pub" --nats "$URL" --stream KVT \
    --subject kvt >events.ndjson 2>kvsub.err &
KPID=$!
PIDS="$PIDS $EPID $KPID"
replica a --stream KVT --save-every-events 200
replica b --stream KVT --save-every-events 7
replica c --stream KVT --save-every-events 13 --threads 2
# b killed mid-batch-run and restarted
wait_seq b 300
kill9 "$P_b"
replica b --stream KVT --save-every-events 7
# c and the server killed together; the server comes back on the same store
wait_seq c 600
kill9 "$P_c"
kill9 "$SPID"
nats_restart
replica c --stream KVT --save-every-events 13 --threads 2
# b again, after the server's restart
wait_seq b 900
kill9 "$P_b"
replica b --stream KVT --save-every-events 7
# the engine's last batches printed by kvsub, then kvsub stopped
for i in $(seq 600); do
    "$PY" "$FE" final events.ndjson exp.json 2>/dev/null && break
    sleep 0.1
done
"$PY" "$FE" final events.ndjson exp.json || fail "kvsub did not print the engine's last batches"
kill -TERM "$KPID"
wait "$KPID"
assert_eq "$?" 0 "kvsub's exit status"
assert_grep '^kvsub: nats published=[1-9]' kvsub.err
# batches in flight when the server died are settled before any goes out on
# the new connection: none is stored after a later one
assert_grep '^kvsub: nats pending=0 resent=[0-9]+ reordered=0$' kvsub.err
wait "$EPID" 2>/dev/null
"$PY" "$FE" compare events.ndjson exp.json >cmp || fail "kvsub's log is not the engine's state"
# every replica stopped, then brought to the end of the stream
for r in a b c; do
    eval "p=\$P_$r"
    kill -TERM "$p"
    wait "$p"
    timeout --foreground 120 kvindex --nats "$URL" --stream KVT -s "$T/$r.kvix" \
        --until-caught-up --quiet 2>>"$T/$r.err"
    assert_eq "$?" 0 "replica $r catching up"
done
last=$(seq_of a.kvix)
[ "$last" -gt 900 ] || fail "the stream holds only $last batches"
assert_eq "$(seq_of b.kvix)" "$last" "b's stream sequence"
assert_eq "$(seq_of c.kvix)" "$last" "c's stream sequence"
kvindex -s ref.kvix --quiet <events.ndjson || fail "kvindex of kvsub's log"
for r in b c ref; do
    kvdump --diff a.kvix "$r.kvix" >diff.out 2>&1 || {
        fail "replica a and $r differ"
        cut -c1-200 diff.out | sed 's/^/#     /' | tail -3
    }
done
assert_grep "exactly|equal" diff.out
grep -h "gone\|cannot" a.err b.err c.err | sed 's/^/#     /' | head -5
kill9 "$SPID"
end

begin "kvindex --nats: a position the stream no longer holds exits 7, or --reset-on-gap starts empty"
nats_start
URL=$NURL
stored_eids 1 2 3 >ev.ndjson
# a stream of 200 bytes holds one of these messages: publishing three drops
# the first two
timeout 30 kvsub -w "1=ipc://$T/none" --nats "$URL" --stream GAP --subject g \
    --stream-max-bytes 200 >/dev/null 2>sub.err &
spid=$!
for i in $(seq 300); do grep -q "created stream GAP" sub.err && break; sleep 0.1; done
grep -q "created stream GAP" sub.err || fail "kvsub did not create stream GAP"
kill -TERM "$spid"
wait "$spid"
nats_pub g.m.1 <ev.ndjson || fail "publishing three batches"
run timeout 30 kvindex --nats "$URL" --stream GAP -s gap.kvix --until-caught-up
expect_rc 7
assert_grep "stream GAP: messages 1\.\.[12] are gone" err
assert_grep "reset-on-gap" err
run timeout 30 kvindex --nats "$URL" --stream GAP -s gap.kvix --until-caught-up --reset-on-gap
expect_rc 0
assert_grep "WARNING: the index is dropped and starts empty" err
assert_grep "stream GAP: applied up to sequence 3; lag from stored to applied: p50 [0-9.]+ ms, p99 [0-9.]+ ms, max [0-9.]+ ms over 1 messages" err
assert_eq "$(seq_of gap.kvix)" 3 "position after the reset"
kvdump gap.kvix >dump
assert_grep '"seq":"0000000000000003"' dump
# a snapshot not made from a stream is refused with --nats
kvindex -s plain.kvix --quiet <ev.ndjson
run timeout 30 kvindex --nats "$URL" --stream GAP -s plain.kvix --until-caught-up
expect_rc 2
assert_grep "records no stream position" err
kill9 "$SPID"
end

# publish_log LOG OUT STREAM: kvreplay plays LOG's engines on the wire, kvsub
# --nats subscribed to them until it printed every event of LOG
publish_log() {
    local want
    want=$(grep -vc '"type":"query"' "$1")
    rm -f workers
    kvreplay --fast --pub-wait 30 --map-file workers --pub "ipc://$T/e%w" "$1" >/dev/null 2>pub.err &
    local pub=$!
    for i in $(seq 200); do [ -s workers ] && break; sleep 0.1; done
    kvsub --workers-file workers --nats "$URL" --stream "$3" >"$2" 2>>sub.err &
    local sub=$!
    wait "$pub"
    for i in $(seq 300); do [ "$(wc -l <"$2")" -ge "$want" ] && break; sleep 0.1; done
    assert_eq "$(wc -l <"$2")" "$want" "events printed by kvsub"
    kill -TERM "$sub"
    wait "$sub"
}

begin "kvsub --nats: batches published again are dropped by the server, a restarted engine's kept"
nats_start
URL=$NURL
kvreplay -q --mooncake "$FIXTURES/mooncake/conversation_trace.jsonl.xz" --workers 2 \
    --capacity 100 --limit 60 --seed 3 --tokens >log.ndjson
publish_log log.ndjson first.ndjson DUP
publish_log log.ndjson second.ndjson DUP
n=$(sed -n 's/^kvsub: nats published=\([0-9]*\) duplicates=0$/\1/p' sub.err | head -n 1)
[ "${n:-0}" -gt 10 ] || fail "first run: $(grep nats sub.err | head -n 1)"
assert_grep "^kvsub: nats published=$n duplicates=$n\$" sub.err
run timeout 60 kvindex --nats "$URL" --stream DUP -s dup.kvix --until-caught-up --quiet
expect_rc 0
assert_eq "$(seq_of dup.kvix)" "$n" "messages in the stream"
kvindex --quiet -s direct.kvix <first.ndjson
kvdump --diff dup.kvix direct.kvix >/dev/null || fail "the stream's index differs from kvsub's log"
# an engine that restarts (batch numbers from 0 again) within the window
: >sub.err
timeout 60 "$PY" "$FE" publish --pub "ipc://$T/pub" --replay "ipc://$T/rep" --restart-after 15 \
    --expect exp.json --seed 17 --linger 1 2>engine.err &
epid=$!
kvsub -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep" --nats "$URL" --stream RST --subject rst >events.ndjson 2>sub.err &
kpid=$!
for i in $(seq 300); do "$PY" "$FE" final events.ndjson exp.json 2>/dev/null && break; sleep 0.1; done
kill -TERM "$kpid"
wait "$kpid"
wait "$epid"
"$PY" "$FE" compare events.ndjson exp.json >cmp || fail "kvsub's log is not the engine's state"
assert_grep "^kvsub: nats published=[1-9][0-9]* duplicates=0\$" sub.err
run timeout 60 kvindex --nats "$URL" --stream RST -s rst.kvix --until-caught-up --quiet
expect_rc 0
kvindex --quiet -s direct2.kvix <events.ndjson
kvdump --diff rst.kvix direct2.kvix >/dev/null || fail "a restarted engine's batches were dropped"
kill9 "$SPID"
end

begin "kvsub --nats: batches the frozen server never acknowledged are sent again, each stored once, in order"
nats_start
URL=$NURL
# the engine holds its batches after the first round until the server is
# frozen: on a loaded machine it could otherwise publish them all, and kvsub
# have them acknowledged, before the freeze (nothing would be resent)
timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --dps 0,1 --batches 60 --expect exp.json \
    --seed 9 --linger 1 --pause-at "1:$T/frozen" 2>engine.err &
epid=$!
timeout --foreground 120 kvsub -w "1=ipc://$T/pub" --nats "$URL" --stream FRZ --subject frz \
    --nats-window 8 >events.ndjson 2>sub.err &
kpid=$!
PIDS="$PIDS $epid $kpid"
for i in $(seq 300); do grep -q "created stream FRZ" sub.err && break; sleep 0.1; done
grep -q "created stream FRZ" sub.err || fail "kvsub did not create stream FRZ"
# the server frozen (it takes the bytes, answers nothing) while batches are
# published; kvsub's acknowledgements time out after 5 s (the default), then
# the batch it sends again goes unanswered too: its warning names the
# batch's subject, and that batch is sent again once the server is back
kill -STOP "$SPID"
touch "$T/frozen"
for i in $(seq 600); do
    grep -q '^kvsub: nats: frz\.[^:]*: .*: waiting for the server$' sub.err && break
    sleep 0.1
done
assert_grep '^kvsub: nats: frz\.[^:]*: .*: waiting for the server$' sub.err
kill -CONT "$SPID"
for i in $(seq 600); do "$PY" "$FE" final events.ndjson exp.json 2>/dev/null && break; sleep 0.1; done
kill -TERM "$kpid"
wait "$kpid"
assert_eq "$?" 0 "kvsub's exit status (every batch acknowledged)"
wait "$epid"
assert_grep '^kvsub: nats: publishing again$' sub.err
assert_grep '^kvsub: nats pending=0 resent=[1-9][0-9]* reordered=0$' sub.err
"$PY" "$FE" compare events.ndjson exp.json >cmp || fail "kvsub's log is not the engine's state"
batches=$(sed -n 's/^kvsub: batches=\([0-9]*\) .*/\1/p' sub.err)
run timeout 60 kvindex --nats "$URL" --stream FRZ -s frz.kvix --until-caught-up --quiet
expect_rc 0
assert_eq "$(seq_of frz.kvix)" "$batches" "messages in the stream (each batch once)"
kvindex --quiet -s direct.kvix <events.ndjson
kvdump --diff frz.kvix direct.kvix >/dev/null || fail "the stream's index differs from kvsub's log"
kill9 "$SPID"
end
