#!/usr/bin/env bash
# kvsub without engines: the command line, exit codes, signals, the replay
# timeout, and the fixtures of tests/fixtures/vllm published once each.
. "$(dirname "$0")/lib.sh"

begin "kvsub: usage errors exit 2"
run kvsub
expect_rc 2
assert_grep 'no worker' err
run kvsub -w 1
expect_rc 2
assert_grep "bad worker '1'" err
run kvsub -w x=tcp://127.0.0.1:1
expect_rc 2
run kvsub -w 1:=tcp://127.0.0.1:1
expect_rc 2
run kvsub -w 1=tcp://127.0.0.1:1 -f yaml
expect_rc 2
run kvsub -w 1=tcp://127.0.0.1:1 -b 0
expect_rc 2
run kvsub -w 1=nosuch://x
expect_rc 2
assert_grep "bad endpoint 'nosuch://x'" err
run kvsub -w 1=tcp://127.0.0.1:1 -w 2=tcp://127.0.0.1:1
expect_rc 2
run kvsub -w 1=tcp://127.0.0.1:1 extra
expect_rc 2
end

begin "kvsub: --max-subscriptions refuses past it, and says when the open-file limit cannot hold it"
run kvsub --max-subscriptions 2 -w 1=tcp://127.0.0.1:1 -w 2=tcp://127.0.0.1:2 -w 3=tcp://127.0.0.1:3
expect_rc 2
assert_grep '3 subscriptions: the limit is 2 \(--max-subscriptions\)' err
printf '1=ipc://%s/x\n2=ipc://%s/y\n' "$T" "$T" >workers2
run kvsub --max-subscriptions 1 --workers-file workers2
expect_rc 2
assert_grep 'the limit is 1' err
run kvsub --max-subscriptions 0 -w 1=tcp://127.0.0.1:1
expect_rc 2
run bash -c 'ulimit -n 100 && ulimit -Hn 100 && exec "$0" --max-subscriptions 100 -w 1=tcp://127.0.0.1:1' "$KVIX_BIN/kvsub"
expect_rc 2
assert_grep 'max-subscriptions 100 needs [0-9]* open files; the limit is 100' err
end

begin "kvsub: workers file problems (as kvindex: 3 when it cannot be read, 2 for what it says)"
run kvsub --workers-file missing
expect_rc 3
assert_grep 'cannot open missing' err
printf '1=ipc://%s/x\nbogus line\n' "$T" >workers
run kvsub --workers-file workers
expect_rc 2
assert_grep "workers:2: bad worker 'bogus' \\(expected ID\\[:DP\\]=ENDPOINT\\)" err
printf '1=ipc://%s/x colour=blue\n' "$T" >workers
run kvsub --workers-file workers
expect_rc 2
assert_grep "unknown setting 'colour=blue'" err
end

begin "kvsub: SIGTERM and SIGINT stop it cleanly, SIGUSR1 prints the counters"
for sig in TERM INT; do
    rm -f quiet
    kvsub --bind -w "1=ipc://$T/quiet" >out 2>err & # not under timeout(1): it dies of SIGUSR1
    pid=$!
    # bound means its signal handlers are in place
    for i in $(seq 100); do [ -S quiet ] && break; sleep 0.1; done
    kill -USR1 $pid
    sleep 0.2
    kill -$sig $pid
    for i in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -KILL $pid 2>/dev/null
    wait $pid
    rc=$?
    expect_rc 0
    assert_eq "$(grep -c '^kvsub: batches=0 ' err)" 2 "counter lines after SIGUSR1 and $sig"
done
end

begin "kvsub: --bind on an endpoint already bound exits 6"
timeout --foreground 20 kvsub --bind -w "1=ipc://$T/b" >/dev/null 2>&1 &
pid=$!
sleep 0.3
run kvsub --bind -w "1=tcp://127.0.0.1:0" -w "2=tcp://127.0.0.1:0"
kill $pid
wait $pid
# two ephemeral ports are fine; now a real conflict:
timeout 20 "$PY" -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(3)' >port &
ppid=$!
for i in $(seq 50); do [ -s port ] && break; sleep 0.1; done
run timeout --foreground 10 kvsub --bind -w "1=tcp://127.0.0.1:$(cat port)"
expect_rc 6
assert_grep 'cannot bind' err
kill $ppid 2>/dev/null
wait $ppid 2>/dev/null
end

begin "kvsub: a replay endpoint that never answers times out into a loss"
timeout --foreground 30 kvsub -w "1=ipc://$T/p" --replay "1=ipc://$T/nobody" --replay-timeout 300 >out 2>err &
pid=$!
timeout 30 "$PY" - "ipc://$T/p" <<'EOF'
import sys, time, msgpack, zmq
s = zmq.Context().socket(zmq.XPUB)
s.bind(sys.argv[1])
s.recv()
time.sleep(0.1)
def batch(h):
    return msgpack.packb([2.0, [{"type": "BlockStored", "block_hashes": [h],
                                 "parent_block_hash": None, "token_ids": list(range(4)),
                                 "block_size": 4}], 0])
for seq in (0, 1, 3, 4):
    s.send_multipart([b"", seq.to_bytes(8, "big"), batch(seq + 100)])
time.sleep(1.5)
EOF
for i in $(seq 100); do grep -q '"eid":4' out && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
expect_rc 0
assert_grep 'batches from 2 lost \(replay timed out\)' err
assert_grep 'losses=1 ' err
assert_grep 'replays=1 ' err
# eid 0 and 1 stored, then cleared, then 3 and 4 in order
got=$(jq -r 'if .type == "cleared" then "c" else (.eid | tostring) end' out | tr '\n' ' ')
assert_eq "$got" "0 1 c 3 4 " "events in order"
end

begin "kvsub: each vLLM fixture through the wire prints its expected events"
timeout --foreground 30 kvsub -w "1=ipc://$T/f" -b 16 >out 2>err &
pid=$!
fix=$FIXTURES/vllm
timeout 30 "$PY" - "ipc://$T/f" "$fix" <<'EOF'
import json, sys, time, zmq
s = zmq.Context().socket(zmq.XPUB)
s.bind(sys.argv[1])
s.recv()
time.sleep(0.1)
cases = json.load(open(sys.argv[2] + "/cases.json"))["cases"]
# fixture i goes out as seq i (its events' eid); the ranks some fixtures
# carry make gaps for rank 0, which kvsub reports as losses (clears without eid)
want = []
for i, c in enumerate(cases):
    payload = open(sys.argv[2] + "/" + c["file"], "rb").read()
    s.send_multipart([b"", i.to_bytes(8, "big"), payload])
    want += [dict(e, eid=i) for e in c["expect"]]
    time.sleep(0.02)
json.dump(want, open("expect.json", "w"))
time.sleep(0.3)
EOF
for i in $(seq 50); do [ "$(grep -c '"eid":' out)" -ge 13 ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
expect_rc 1
assert_grep 'decode_errors=2 ' err
"$PY" - <<'EOF' || fail "decoded events differ from cases.json"
import json
want = json.load(open("expect.json"))
got = [json.loads(l) for l in open("out")]
got = [e for e in got if "eid" in e]  # kvsub's own clears carry no eid
bad = 0
if len(got) != len(want):
    print("#   %d events, %d expected" % (len(got), len(want)))
    bad = 1
for g, w in zip(got, want):
    for k, v in w.items():
        if g.get(k) != v:
            print("#   %s: %r != %r" % (k, g.get(k), v))
            bad = 1
raise SystemExit(bad)
EOF
end

begin "kvsub: --json counters at exit; SIGUSR1 per-worker status"
kvsub --json --bind -w "1=ipc://$T/none" >out 2>err &
pid=$!
for i in $(seq 100); do [ -S none ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
expect_rc 0
jq -e '.batches == 0 and .workers == 1 and .losses == 0' err >/dev/null ||
    fail "no JSON counters on stderr: $(cat err)"
kvsub --bind -w "1:2=ipc://$T/quiet" >out 2>err &
pid=$!
for i in $(seq 100); do [ -S quiet ] && break; sleep 0.1; done
kill -USR1 $pid
for i in $(seq 50); do grep -q 'worker 1 dp 2' err && break; sleep 0.1; done
kill -TERM $pid
wait $pid
assert_grep "^kvsub: worker 1 dp 2 ipc://.*/quiet: bound, last seq none, last message never, batches=0 losses=0$" err
kvsub --json --bind -w "1:2=ipc://$T/quiet2" >out 2>err &
pid=$!
for i in $(seq 100); do [ -S quiet2 ] && break; sleep 0.1; done
kill -USR1 $pid
for i in $(seq 50); do grep -q '"worker":1' err && break; sleep 0.1; done
kill -TERM $pid
wait $pid
grep '"worker":1' err | jq -e '.dp == 2 and .state == "bound" and .last_seq == null' >/dev/null ||
    fail "no JSON worker status: $(cat err)"
end

begin "kvsub: a host that does not resolve is said"
kvsub -w 1=tcp://no-such-host.invalid:5557 >out 2>err &
pid=$!
for i in $(seq 300); do grep -q 'does not resolve' err && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
expect_rc 0
assert_grep "worker 1: host 'no-such-host.invalid' of tcp://no-such-host.invalid:5557 does not resolve \(.*\); asked again" err
end

begin "kvsub: --idle-exit counts from the first engine message, not from kvsub's start"
FE=$ROOT/tests/tools/fake_engine.py
timeout --foreground 60 kvsub --idle-exit 1 -w "1=ipc://$T/late" >out 2>err &
pid=$!
# Longer than --idle-exit before any engine: a quiet spell counted from
# kvsub's start would already have stopped it.
sleep 2
kill -0 $pid 2>/dev/null || fail "kvsub stopped before any engine message"
timeout 60 "$PY" "$FE" publish --pub "ipc://$T/late" --worker 1 --batches 5 --linger 0 \
    --expect late.json 2>engine.err
wait $pid
rc=$?
expect_rc 0
"$PY" "$FE" compare out late.json >cmp || fail "events reduce to another state: $(head -5 cmp)"
[ -s out ] || fail "no event printed"
end
