#!/usr/bin/env bash
# kvsub against engines and replay services that misbehave: each scenario is
# the regression test of a defect found by feeding kvsub hostile engines. The
# engines are Python scripts on loopback ipc:// in the scratch directory; every
# wait is bounded and polls, no assertion depends on timing.
. "$(dirname "$0")/lib.sh"
KPID=""

sub() { # sub ARGS...: kvsub in the background, output in ./out, ./err
    timeout --foreground 60 kvsub "$@" >out 2>err &
    KPID=$!
}

stop() { # stop kvsub (status in $rc)
    kill -TERM "$KPID" 2>/dev/null
    wait "$KPID"
    rc=$?
}

wait_for() { # wait_for RE [FILE]: until FILE (default out) matches RE, or about 20 s
    local i
    for i in $(seq 200); do grep -qE -- "$1" "${2:-out}" 2>/dev/null && return 0; sleep 0.1; done
    fail "timed out waiting for /$1/ in ${2:-out}"
    return 1
}

stat_is() { assert_grep "(^| )$1=$2( |$)" err; }

# A Python engine: a bound XPUB (and ROUTER when given), helpers to send
# batches; the scenario comes on stdin after this preamble.
ENGINE_PRE='
import sys, time, msgpack, zmq
ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.bind(sys.argv[1])
rep = None
if len(sys.argv) > 2:
    rep = ctx.socket(zmq.ROUTER)
    rep.bind(sys.argv[2])
pub.recv()  # a subscriber joined
time.sleep(0.1)
s8 = lambda n: n.to_bytes(8, "big")
def batch(n, pad=0):
    return msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [n + 1],
                                 "parent_block_hash": None, "token_ids": list(range(4)),
                                 "block_size": 4, "x_pad": "x" * pad}], 0])
def live(n, pad=0):
    pub.send_multipart([b"", s8(n), batch(n, pad)])
def request():  # the next replay request: (identity, start seq)
    f = rep.recv_multipart()
    return f[0], int.from_bytes(f[-1], "big")
'

engine() { # engine SCRIPT EP [REPLAY_EP]
    local script=$1
    shift
    printf '%s\n%s\n' "$ENGINE_PRE" "$script" >engine.py
    timeout 60 "$PY" engine.py "$@" 2>>engine.err &
    EPID=$!
}

begin "kvsub: a message over --max-message is a loss, reported and counted; kvsub goes on"
sub -w "1=ipc://$T/p" --max-message 4096
engine '
live(0)
live(1, pad=10000)  # over 4096 bytes: ZMQ drops the connection
n = 2
while True:  # until killed: the subscriber comes back when it comes back
    live(n)
    n += 1
    time.sleep(0.02)
' "ipc://$T/p"
wait_for 'zmq closed the connection' err # counted, cleared and reopened at once
wait_for '"eid":([2-9]|[1-9][0-9]+),' # and kvsub goes on
stop
kill $EPID 2>/dev/null
wait $EPID
expect_rc 0
assert_grep 'zmq closed the connection to ipc://.*/p \(a message over 4096 bytes\?\): batches lost, cleared' err
stat_is disconnects 1
stat_is losses 1
assert_grep '^\{"type":"cleared","worker":1,"dp":0,[^}]*"medium":"gpu"\}$'
assert_grep '"eid":0,'
assert_no_grep '"eid":1,'
end

begin "kvsub: a bad endpoint is refused before anything is subscribed"
run kvsub -w 1=tcp://127.0.0.1:99999
expect_rc 2
assert_grep "bad endpoint 'tcp://127.0.0.1:99999': port '99999' not in 1..65535" err
run kvsub -w "1=ipc:///$(printf 'a%.0s' $(seq 120))"
expect_rc 2
assert_grep 'ipc path of 121 bytes \(limit 107\)' err
run kvsub -w 1=tcp://127.0.0.1:5557 -w 1=tcp://127.0.0.1:5558
expect_rc 2
assert_grep 'worker 1 dp 0 already registered' err
end

begin "kvsub: a SIGHUP reload with one bad line changes nothing, and says why"
echo "1=ipc://$T/a" >workers
sub --bind --workers-file workers --reload 0 # SIGHUP only: each bad file is read once
for i in $(seq 100); do [ -S a ] && break; sleep 0.1; done # bound: its handlers are in place
for bad in "2=tcp://127.0.0.1:99999" "2=ipc:///$(printf 'a%.0s' $(seq 120))" \
           "2=ipc://$T/b colour=blue" "1=ipc://$T/b"; do
    printf '1=ipc://%s/a\n%s\n' "$T" "$bad" >workers
    n=$(grep -c 'keeping the workers' err)
    kill -HUP "$KPID"
    for i in $(seq 100); do [ "$(grep -c 'keeping the workers' err)" -gt "$n" ] && break; sleep 0.1; done
    kill -0 "$KPID" 2>/dev/null || fail "kvsub exited on a bad reload ($bad)"
done
assert_eq "$(grep -c 'keeping the workers of workers as they were' err)" 4 "reloads refused"
assert_grep "workers:2: bad endpoint 'tcp://127.0.0.1:99999'" err
assert_grep 'workers:2: .*ipc path of 121 bytes' err
assert_grep "workers:2: unknown setting 'colour=blue'" err
assert_grep 'workers:2: worker 1 dp 0 listed twice' err
# a FIFO in its place: the reload neither blocks in open nor reads it as empty
rm workers && mkfifo workers
kill -HUP "$KPID"
for i in $(seq 100); do [ "$(grep -c 'keeping the workers' err)" -gt 4 ] && break; sleep 0.1; done
assert_grep 'cannot read workers: not a regular file' err
rm workers
printf '2=ipc://%s/b\n' "$T" >workers # a good one is applied
kill -HUP "$KPID"
wait_for 'reloaded workers: 1 workers, 1 added, 1 removed' err
stop
expect_rc 0
assert_grep 'batches=0 ' err
end

begin "kvsub: replay answers outside the range asked are refused and counted"
sub -w "1=ipc://$T/p" --replay "1=ipc://$T/r"
engine '
live(0); live(1); live(3)          # 2 is missing
ident, start = request()
assert start == 2, start
for bogus in (2**63, 1):           # past the newest live seq, below the start
    rep.send_multipart([ident, b"", b"", s8(bogus), batch(bogus)])
rep.send_multipart([ident, b"", b"", s8(2), batch(2)])
rep.send_multipart([ident, b"", b"", b"\xff" * 8, b""])
time.sleep(0.2)
live(4); live(5)
time.sleep(0.5)
' "ipc://$T/p" "ipc://$T/r"
wait_for '"eid":5,'
stop
wait $EPID
expect_rc 0
stat_is refused 2
stat_is losses 0
assert_grep 'replay answer with seq 9223372036854775808 refused' err
assert_grep 'replay answer with seq 1 refused' err
got=$(jq -r '.eid' out | tr '\n' ' ')
assert_eq "$got" "0 1 2 3 4 5 " "every batch once, in order"
end

# The wire's seq is a u64; an eid is 0..2^63-1 (KVIX_EID_MAX): the batches
# past it give events without an eid, which the index applies (an eid past
# the range would be refused, and every event of the engine lost with it).
begin "kvsub: seqs past 2^63-1 give events without an eid, which kvindex applies"
sub -w "1=ipc://$T/p"
engine '
for n in range(2**63 - 2, 2**63 + 2):
    live(n)
time.sleep(0.5)
' "ipc://$T/p"
wait_for '"seq":"8000000000000002"'
stop
wait $EPID
expect_rc 0
stat_is batches 4
stat_is losses 0
mv out events.ndjson
# (jq would round the 19-digit eids: the lines are read as text)
assert_eq "$(grep -c '"type":"stored"' events.ndjson)" 4 "stored events"
assert_grep '^\{"type":"stored",.*"eid":9223372036854775806,.*"seq":"7fffffffffffffff"' events.ndjson
assert_grep '^\{"type":"stored",.*"eid":9223372036854775807,.*"seq":"8000000000000000"' events.ndjson
assert_eq "$(grep -c '"eid"' events.ndjson)" 2 "events with an eid"
run kvindex events.ndjson
expect_rc 0
assert_grep 'applied 4 events: 4 stored' err
assert_grep 'rejected 0 records' err
end

begin "kvsub: a replay service resending an old batch cannot hold batches past --replay-timeout"
# (3 s: long enough for a sanitizer build on a loaded machine to take the
# one honest answer before it; the resending alone must not push it back)
sub -w "1=ipc://$T/p" --replay "1=ipc://$T/r" --replay-timeout 3000
engine '
live(0); live(1); live(3)
ident, start = request()
rep.send_multipart([ident, b"", b"", s8(2), batch(2)])
i = 0
while True:                        # then batch 2 again and again, never the end, until killed
    rep.send_multipart([ident, b"", b"", s8(2), batch(2)])
    if i == 4:
        live(4)
    i += 1
    time.sleep(0.05)
' "ipc://$T/p" "ipc://$T/r"
wait_for '"eid":4,'                # while the resending goes on
stop
kill $EPID 2>/dev/null
wait $EPID
expect_rc 0
assert_grep 'batches from 3 lost \(replay timed out\): cleared' err
stat_is losses 1
got=$(jq -r 'if .type == "cleared" and (has("eid") | not) then "c" else (.eid | tostring) end' out | tr '\n' ' ')
assert_eq "$got" "0 1 2 c 3 4 " "held batches fed on after the timeout"
end

begin "kvsub: batches held during a replay are capped by bytes too"
sub -w "1=ipc://$T/p" --replay "1=ipc://$T/r" --replay-timeout 600000 \
    --replay-buffer-bytes 8192
engine '
live(0); live(2)                   # 1 missing: a replay that never answers
for n in range(3, 40):             # 3000-byte batches: past 8192 bytes held
    live(n, pad=3000)
time.sleep(0.5)
' "ipc://$T/p" "ipc://$T/r"
wait_for '"eid":39,'
stop
wait $EPID
expect_rc 0
assert_grep 'batches from 1 lost \(too much held while replaying\): cleared' err
stat_is losses 1
end
