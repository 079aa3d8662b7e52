#!/usr/bin/env bash
# kvsub against fake engines (tests/tools/fake_engine.py) on loopback ipc://
# endpoints in the scratch directory: every scenario ends by reducing kvsub's
# events to per-(worker, dp) block sets and comparing them with what the
# engines know a correct subscriber must hold. Each scenario is bounded: the
# processes run under timeout(1) (--foreground for kvsub: without it timeout
# sends SIGCONT to the process group, which hangs LeakSanitizer's exit check)
# and waits poll a bounded number of times.
. "$(dirname "$0")/lib.sh"
FE=$ROOT/tests/tools/fake_engine.py
EPIDS=""
KPID=""

engine() { # engine ARGS...: a fake engine in the background
    timeout 60 "$PY" "$FE" publish "$@" 2>>engine.err &
    EPIDS="$EPIDS $!"
}

# The recovery's deadline (--replay-timeout) is wall-clock time: a sanitizer
# build on a loaded machine may take longer than the 5 s default to read a
# replay, and a replay given up is another loss than the one a scenario means.
# None here is about that deadline (kvsub_hostile.t's are).
sub() { # sub ARGS...: kvsub in the background, output in ./out, ./err
    timeout --foreground 60 kvsub --replay-timeout 60000 "$@" >out 2>err &
    KPID=$!
}

# Wait until kvsub printed the last batch of every engine whose expectation
# file is named (the engines make their last batch always store something).
wait_final() {
    local i
    for i in $(seq 300); do
        "$PY" "$FE" final out "$@" && return 0
        sleep 0.1
    done
    fail "kvsub did not deliver the engines' last batches"
    sed 's/^/#     kvsub: /' err | tail -5
    return 1
}

stop() { # stop kvsub (status in $rc) and the engines
    if [ -n "$KPID" ]; then
        kill -TERM "$KPID" 2>/dev/null
        wait "$KPID"
        rc=$?
        KPID=""
    fi
    local p
    for p in $EPIDS; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    EPIDS=""
}

same() { # same EXPECT...: kvsub's events reduce to what the engines expect,
    # and kvindex fed with them answers a query per cached chain as it should
    "$PY" "$FE" compare out "$@" >cmp || {
        fail "events reduce to another state than the engines'"
        sed 's/^/#     /' cmp | head -12
    }
    local m t mp=""
    m=$(sed -n 's/.*"model":"\([^"]*\)".*/\1/p' out | head -n 1)
    t=$(sed -n 's/.*"tenant":"\([^"]*\)".*/\1/p' out | head -n 1)
    [ "$(head -c 1 out)" = "{" ] || mp=--msgpack # kvindex reads one format per stream
    "$PY" "$FE" queries $mp --model "${m:-default}" --tenant "${t:-default}" "$@" >queries.ndjson
    cat out queries.ndjson | kvindex --quiet >answers 2>index.err
    "$PY" "$FE" answers answers "$@" >acmp || {
        fail "kvindex's answers differ from the engines' state"
        sed 's/^/#     /' acmp | head -8
        sed 's/^/#     kvindex: /' index.err | head -3
    }
    assert_grep '^same: [1-9][0-9]* answers checked' acmp
}

stat_is() { assert_grep "(^| )$1=$2( |$)" err; }

begin "kvsub: normal flow, vLLM map events"
engine --pub "ipc://$T/pub" --expect exp.json --seed 11
sub -w "1=ipc://$T/pub"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is batches 40
stat_is losses 0
stat_is gaps 0
assert_grep '"type":"stored","worker":1,"dp":0,"model":"default"'
end

for style in array array6 sglang bin; do
    begin "kvsub: normal flow, $style events"
    engine --pub "ipc://$T/pub" --style $style --expect exp.json --seed 12
    sub -w "1=ipc://$T/pub" -m llama -t acme
    wait_final exp.json
    stop
    expect_rc 0
    same exp.json
    stat_is losses 0
    assert_grep '"model":"llama","tenant":"acme"'
    end
done

# A hybrid model (sliding-window and Mamba groups beside full attention)
# stores each span once per group with the same hashes; the sliding-window
# and Mamba groups evict blocks the full-attention group still holds. The
# events keep their group and kind, and kvindex's answers are what the full
# group holds (same: a query per chain). Before the groups' rule, those
# prompts scored less, and a Mamba store alone scored.
for style in map array; do
    begin "kvsub: a hybrid model ($style events): the prompt scores what the full-attention group holds"
    engine --pub "ipc://$T/pub" --hybrid --style $style --batches 60 --expect exp.json --seed 31
    sub -w "1=ipc://$T/pub"
    wait_final exp.json
    stop
    expect_rc 0
    same exp.json
    stat_is other_kinds '[1-9][0-9]*'
    assert_grep '"group":0,"kind":"sliding_window",.*"hashes":\['
    assert_grep '"group":2,"kind":"mamba",'
    assert_grep '"type":"removed",.*"group":0,'
    # the scenario means something: the other groups evicted blocks the full
    # group holds at the end
    "$PY" - out exp.json <<'EOF' || fail "no eviction of another group hit a block the full group holds"
import json, sys
held = {b[2] for b in json.load(open(sys.argv[2]))["blocks"]}
hit = sum(1 for l in open(sys.argv[1]) for e in [json.loads(l)]
          if e["type"] == "removed" and e.get("group") in (0, 2) and set(e["hashes"]) & held)
sys.exit(0 if hit else 1)
EOF
    end
done

begin "kvsub: -f msgpack --tokens (tokens hash to the locals given)"
engine --pub "ipc://$T/pub" --expect exp.json --seed 24
sub -w "1=ipc://$T/pub" -f msgpack --tokens
wait_final exp.json
stop
expect_rc 0
same exp.json
[ "$(head -c 1 out | od -An -tx1 | tr -d ' ')" != 7b ] || fail "output is not msgpack"
end

begin "kvsub: dropped batches recovered by replay"
engine --pub "ipc://$T/pub" --replay "ipc://$T/rep" --drop 5,6,20 --expect exp.json --seed 13
sub -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is gaps 2
stat_is replays 2
stat_is losses 0
stat_is cleared_by_kvsub 0
end

begin "kvsub: dropped batches, older replay format"
engine --pub "ipc://$T/pub" --replay "ipc://$T/rep" --old-replay --style array --drop 3 \
    --expect exp.json --seed 14
sub -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is losses 0
stat_is replays 1
end

begin "kvsub: dropped batches without a replay endpoint clear the worker"
engine --pub "ipc://$T/pub" --drop 5,6,20 --expect exp.json --seed 15
sub -w "1=ipc://$T/pub"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is losses 2
stat_is cleared_by_kvsub 2
assert_grep 'batches 5\.\.6 lost \(no replay endpoint\)' err
assert_grep '^\{"type":"cleared","worker":1,"dp":0'
end

begin "kvsub: a replay buffer that no longer holds the gap"
engine --pub "ipc://$T/pub" --replay "ipc://$T/rep" --forget 7 --drop 8 --expect exp.json \
    --seed 16
sub -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is losses 1
stat_is replays 1
assert_grep 'replay buffer starts later' err
end

begin "kvsub: engine restart (sockets closed and bound again, seq from 0)"
engine --pub "ipc://$T/pub" --replay "ipc://$T/rep" --restart-after 15 --expect exp.json --seed 17
sub -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is restarts 1
stat_is losses 0
assert_grep 'engine restarted' err
end

# Seeds whose last batch first came out without a stored event: the fake
# engine made that batch again, and the discarded batch's removals stayed in
# its expected state though never published (kvsub held "extra" blocks).
begin "kvsub: engine restart late in a longer run (--batches 60 --restart-after 20)"
engine --pub "ipc://$T/pub" --replay "ipc://$T/rep" --batches 60 --restart-after 20 \
    --expect exp.json --seed 7
sub -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is restarts 1
stat_is losses 0
end

begin "kvsub: engine restart late in a longer run, array events, no replay endpoint"
engine --pub "ipc://$T/pub" --batches 60 --restart-after 20 --style array --expect exp.json --seed 5
sub -w "1=ipc://$T/pub"
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is restarts 1
end

begin "kvsub: a restart told only by SGLang's topic epoch (the new run's seqs are higher)"
engine --pub "ipc://$T/pub" --replay "ipc://$T/rep" --epoch --restart-after 10 \
    --restart-skip 25 --style sglang --expect exp.json --seed 25
sub -w "1=ipc://$T/pub" --replay "1=ipc://$T/rep" --topic kv
wait_final exp.json
stop
expect_rc 0
same exp.json
stat_is restarts 1
stat_is losses 0
assert_grep 'new epoch in the topic at seq 25' err
end

# A seq counter is the publisher socket's: one port carrying ranks 0, 1 and 2
# in turn has no gap but the ones replay fills, so nothing is cleared.
begin "kvsub: one endpoint, three dp ranks, one seq counter: gaps only replay fills"
engine --pub "ipc://$T/a" --dps 0,1,2 --replay "ipc://$T/ra" --drop 4,9,10,31 \
    --expect a.json --seed 18
engine --pub "ipc://$T/b" --worker 2 --style sglang --drop 6 --expect b.json --seed 19
sub -w "1=ipc://$T/a" --replay "1=ipc://$T/ra" -w "2=ipc://$T/b"
wait_final a.json b.json
stop
expect_rc 0
same a.json b.json
stat_is replays '[1-9][0-9]*' # one per gap seen, adjacent ones may share
stat_is losses 1
stat_is restarts 0
stat_is cleared_by_kvsub 1 # worker 2's loss (no replay endpoint), nothing of worker 1
assert_no_grep '"type":"cleared","worker":1,[^}]*"medium":"gpu"\}$' out # kvsub's own: no eid
for dp in 0 1 2; do assert_grep "\"worker\":1,\"dp\":$dp,"; done
end

# A loss on a port carrying several ranks clears every rank seen on it.
begin "kvsub: a loss on a multi-rank endpoint clears every rank seen on it"
engine --pub "ipc://$T/a" --dps 0,1,2 --drop 7 --expect a.json --seed 28
sub -w "1=ipc://$T/a"
wait_final a.json
stop
expect_rc 0
same a.json
stat_is losses 1
stat_is cleared_by_kvsub 3
for dp in 0 1 2; do assert_grep "^\\{\"type\":\"cleared\",\"worker\":1,\"dp\":$dp,"; done
end

begin "kvsub: --bind, the engine connects (oldest vLLM batches without a rank)"
sub --bind -w "3:2=ipc://$T/bound"
engine --pub "ipc://$T/bound" --connect --worker 3 --dps 2 --style array6 --expect exp.json \
    --seed 20
wait_final exp.json
stop
expect_rc 0
same exp.json
assert_grep '"worker":3,"dp":2,'
end

begin "kvsub: --workers-file, re-read on SIGHUP"
echo "# engines" >workers
echo "1=ipc://$T/a" >>workers
engine --pub "ipc://$T/a" --expect a.json --seed 21 --batches 10
sub --workers-file workers
wait_final a.json
printf '2=ipc://%s/b replay=ipc://%s/rb\n' "$T" "$T" >workers
kill -HUP "$KPID"
engine --pub "ipc://$T/b" --replay "ipc://$T/rb" --worker 2 --drop 2 --expect b.json --seed 22
wait_final b.json
stop
expect_rc 0
same b.json
assert_grep '^\{"type":"cleared","worker":1,' out
assert_grep 'reloaded workers: 1 workers, 1 added, 1 removed' err
stat_is losses 0
stat_is replays 1
end

begin "kvsub: hostile frames and payloads are counted, the rest goes on"
sub -w "7=ipc://$T/h" -w "8=ipc://$T/h2" -b 16
timeout 30 "$PY" - "ipc://$T/h" "ipc://$T/h2" <<'EOF'
import sys, time, msgpack, zmq
ctx = zmq.Context()
s, s2 = ctx.socket(zmq.XPUB), ctx.socket(zmq.XPUB)
s.bind(sys.argv[1])
s2.bind(sys.argv[2])
s.recv()  # subscribers joined
s2.recv()
time.sleep(0.1)
seq = lambda n: n.to_bytes(8, "big")
good = lambda n: msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [n + 1],
                                       "parent_block_hash": None, "token_ids": list(range(16)),
                                       "block_size": 16}], None])
s.send_multipart([b"", seq(0), good(0)])
s2.send_multipart([b"", seq(0), good(100)])
s.send_multipart([b"", seq(1)])                       # 2 frames
s.send_multipart([b"", seq(1), good(1), b"extra"])    # 4 frames
s.send_multipart([b"", b"\x01\x02", good(1)])          # a 2-byte seq
s.send_multipart([b"", seq(1), b"\xdd\xff\xff\xff\xff"])  # a huge declared array
s.send_multipart([b"", seq(2), good(2)[:-3]])         # truncated
s.send_multipart([b"", seq(3), b"\xc1garbage"])
# Ranks are untrusted: one endpoint's batches follow at most 1024 ranks (dp 0,
# the registered one, and 1..1023); the other endpoint is not starved.
for dp in range(1, 1101):
    s.send_multipart([b"", seq(3 + dp), msgpack.packb(
        [1.0, [{"type": "BlockRemoved", "block_hashes": [5]}], dp])])
    if dp % 200 == 0:
        time.sleep(0.05)
s.send_multipart([b"", seq(1104), good(1104)])
s2.send_multipart([b"", seq(1), good(101)])
time.sleep(0.5)
EOF
for i in $(seq 100); do grep -q '"eid":1104' out && grep -q '"worker":8,.*"eid":1,' out && break; sleep 0.1; done
stop
expect_rc 1
stat_is bad_frames 3
stat_is decode_errors 3
stat_is losses 3 # each undecodable batch: its events are unknown
stat_is batches 1027
stat_is dropped 77
assert_grep 'message from ipc://.*/h dropped: seq frame of 2 bytes \(expected at least 8\)' err
assert_grep 'message of 2 frames from ipc://.*/h dropped' err
assert_grep 'more than 1024 ranks' err
assert_grep '"eid":0,'
assert_grep '"eid":1104,'
assert_grep '"worker":8,"dp":0,.*"eid":1,'
end

begin "kvsub: a reader that goes away (EPIPE) is a clean stop"
engine --pub "ipc://$T/pub" --batches 400 --seed 23
timeout --foreground 60 kvsub -w "1=ipc://$T/pub" 2>err | head -n 1 >out
krc=${PIPESTATUS[0]}
stop
assert_eq "$krc" 0 "kvsub exit status"
assert_grep '"type":"stored"'
assert_grep 'batches=' err
end
