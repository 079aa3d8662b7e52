#!/usr/bin/env bash
# kvindex --nats with --peers, against a real nats-server (JetStream on, its
# store in the scratch directory, loopback, a free port): a new replica
# takes a peer's GET /snapshot and its stream position and ends equal to one
# that read the whole stream; a replica the stream's retention left behind
# takes a peer's snapshot at a later position (given with --peers, or
# registered over HTTP while it waits for the server), or exits 7 when no
# peer can. Every wait is a bounded poll; nothing asserts on time.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
. "$(dirname "$0")/nats.sh"

at_seq() { # at_seq URL N: the replica at URL serves a snapshot of sequence >= N
    local i
    for i in $(seq 300); do
        curl -s -o peer.kvix "$1/snapshot" && [ "$(seq_of peer.kvix)" -ge "$2" ] && return 0
        sleep 0.1
    done
    fail "$1 never reached sequence $2 (at $(seq_of peer.kvix))"
    return 1
}

# publish SUBJECT EID...: one stored batch per eid
publish() { stored_eids "${@:2}" | nats_pub "$1"; }

# stream NAME SUBJECT [kvsub options]: created by kvsub, which then stops
stream() {
    # timeout's own deadline far past the wait below: its SIGTERM must never
    # land on a kvsub already exiting on ours (a sanitizer build's leak check
    # at exit, ptrace-stopping the threads, was seen to hang for ever on a
    # signal arriving then)
    timeout 300 kvsub -w "1=ipc://$T/none" --nats "$URL" --stream "$1" --subject "$2" "${@:3}" \
        >/dev/null 2>sub.err &
    local p=$!
    for i in $(seq 600); do grep -q "created stream $1" sub.err && break; sleep 0.1; done
    grep -q "created stream $1" sub.err || fail "kvsub did not create stream $1"
    kill -TERM "$p"
    wait "$p"
}

begin "kvindex --nats --peers: a new replica takes a peer's snapshot and position, then the stream"
nats_start
URL=$NURL
stream BOOT b
publish b.m.1 $(seq 1 40)
kvindex --nats "$URL" --stream BOOT -s a.kvix --listen 127.0.0.1:0 2>a.err &
APID=$!
PIDS="$PIDS $APID"
A=$(listening a.err) || fail "replica a never said where it listens"
at_seq "$A" 40
# the first peer does not listen; the second hands over at 40
run timeout 60 kvindex --nats "$URL" --stream BOOT -s b.kvix --until-caught-up \
    --peers "http://127.0.0.1:1,$A"
expect_rc 0
assert_grep "recovered from $A/snapshot: stream BOOT at 40, 40 blocks" err
assert_grep "stream BOOT: applied up to sequence 40\$" err
assert_eq "$(seq_of b.kvix)" 40 "b's position"
publish b.m.1 $(seq 41 60)
# b resumes from its own snapshot (no peer asked), a reference reads it all
run timeout 60 kvindex --nats "$URL" --stream BOOT -s b.kvix --until-caught-up --peers "$A"
expect_rc 0
assert_no_grep "recovered from" err
assert_grep "stream BOOT: applied up to sequence 60; .* over 20 messages" err
run timeout 60 kvindex --nats "$URL" --stream BOOT -s ref.kvix --until-caught-up --quiet
expect_rc 0
at_seq "$A" 60
kvdump --diff ref.kvix b.kvix >diff.out 2>&1 || { fail "b differs from the whole stream"; head -3 diff.out; }
kvdump --diff ref.kvix peer.kvix >diff.out 2>&1 || { fail "a differs from the whole stream"; head -3 diff.out; }
# a peer of another stream, or one that only dumps, cannot hand over: start empty
stream OTHER o
run timeout 60 kvindex --nats "$URL" --stream OTHER -s o.kvix --until-caught-up --peers "$A"
expect_rc 0
assert_grep "reflects stream BOOT, not stream OTHER" err
assert_grep "stream OTHER: starting empty from its first message" err
kill -TERM "$APID"
wait "$APID"
assert_eq "$?" 0 "a's exit status"
end

begin "kvindex --nats: a replica the stream left behind takes a peer's later snapshot, or exits 7"
nats_start
URL=$NURL
# a stream of 200 bytes holds one of these messages
stream GAP g --stream-max-bytes 200
kvindex --nats "$URL" --stream GAP -s a.kvix --listen 127.0.0.1:0 2>a.err &
APID=$!
PIDS="$PIDS $APID"
A=$(listening a.err) || fail "replica a never said where it listens"
publish g.m.1 1
at_seq "$A" 1
run timeout 60 kvindex --nats "$URL" --stream GAP -s c.kvix --until-caught-up --quiet
expect_rc 0
for e in 2 3 4; do
    publish g.m.1 "$e"
    at_seq "$A" "$e"
done
# no peer: exit 7; a peer that only dumps (Dynamo's) cannot hand over either
cp c.kvix c0.kvix
run timeout 60 kvindex --nats "$URL" --stream GAP -s c.kvix --until-caught-up
expect_rc 7
assert_grep "stream GAP: messages 2\.\.3 are gone" err
printf '{}' >empty.json
"$PY" "$ROOT/tests/tools/http_client.py" serve-dump empty.json port &
FAKE=$!
PIDS="$PIDS $FAKE"
for i in $(seq 200); do [ -s port ] && break; sleep 0.05; done
run timeout 60 kvindex --nats "$URL" --stream GAP -s c.kvix --until-caught-up \
    --peers "http://127.0.0.1:$(cat port)"
expect_rc 7
assert_grep "no peer could hand over stream GAP at 3 or later \(.*/snapshot: status 404\)" err
kill "$FAKE" 2>/dev/null
assert_eq "$(seq_of c.kvix)" 1 "c's position after exit 7"
# with a peer: in place, then the stream from the peer's position on
run timeout 60 kvindex --nats "$URL" --stream GAP -s c.kvix --until-caught-up --peers "$A"
expect_rc 0
assert_grep "bootstrapped from $A/snapshot: stream GAP at 4, 4 blocks" err
assert_eq "$(seq_of c.kvix)" 4 "c's position"
kvdump --diff peer.kvix c.kvix >diff.out 2>&1 || { fail "c differs from its peer"; head -3 diff.out; }
# a peer registered over HTTP while the replica waits for the server
cp c0.kvix d.kvix
kill -9 "$SPID"
wait "$SPID" 2>/dev/null
kvindex --nats "$URL" --stream GAP -s d.kvix --listen 127.0.0.1:0 2>d.err &
DPID=$!
PIDS="$PIDS $DPID"
D=$(listening d.err) || fail "replica d never said where it listens"
st=$(curl -s -o body -w '%{http_code}' -XPOST --data-binary "{\"url\":\"$A\"}" "$D/register_peer")
assert_eq "$st" 200 "register a with d"
nats_restart
publish g.m.1 5
at_seq "$A" 5
at_seq "$D" 5
assert_grep "bootstrapped from $A/snapshot: stream GAP at [45], [45] blocks" d.err
curl -s -o a5.kvix "$A/snapshot" # (peer.kvix is now d's)
kvdump --diff a5.kvix peer.kvix >diff.out 2>&1 || { fail "d differs from a"; head -3 diff.out; }
kill -TERM "$DPID" "$APID"
wait "$DPID"
assert_eq "$?" 0 "d's exit status"
wait "$APID"
end
