#!/usr/bin/env bash
# kvsub --nats against a server whose largest message (max_payload) is
# smaller than some batches: each is published in parts, cut between
# events, and a replica consuming the stream ends equal to kvsub's own log;
# an event over the limit alone is published as a clear of its worker and
# rank, said and counted, and the batches after it go on. A batch over the
# limit wedged kvsub before: neither stdout nor the stream saw another
# batch. Every wait is a bounded poll.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
FE=$ROOT/tests/tools/fake_engine.py
. "$(dirname "$0")/procs.sh"
. "$(dirname "$0")/nats.sh"

# publish BS: a fake engine's 40 batches of block size BS (token ids kept:
# a block of 64 is ~250 bytes of msgpack) through kvsub --nats, until every
# batch reached kvsub's stdout; kvsub's status in $rc
publish() {
    timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --batches 40 --bs "$1" \
        --expect exp.json --seed 9 --linger 1 2>engine.err &
    local epid=$!
    timeout --foreground 120 kvsub -w "1=ipc://$T/pub" --tokens --nats "$NURL" --stream P \
        --subject p >events.ndjson 2>kvsub.err &
    local spid=$!
    PIDS="$PIDS $epid $spid"
    for i in $(seq 600); do
        "$PY" "$FE" final events.ndjson exp.json 2>/dev/null && break
        sleep 0.1
    done
    "$PY" "$FE" final events.ndjson exp.json 2>/dev/null || fail "kvsub's stdout never had every batch"
    kill -TERM "$spid"
    wait "$spid"
    rc=$?
    wait "$epid"
}

begin "kvsub --nats: batches over the server's max_payload go in parts; a replica equals the log"
echo "max_payload: 2048" >max.conf
NATS_ARGS="-c $T/max.conf" nats_start
publish 64
assert_eq "$rc" 0 "kvsub's exit status"
assert_grep '^kvsub: nats split=[1-9][0-9]* lost=0$' kvsub.err
run timeout --foreground 60 kvindex --nats "$NURL" --stream P --until-caught-up -s nats.kvix
expect_rc 0
kvindex --quiet -s log.kvix <events.ndjson || fail "indexing kvsub's log"
run kvdump --diff log.kvix nats.kvix
expect_rc 0
end

begin "kvsub --nats: an event over max_payload alone is published as a clear, said, and kvsub goes on"
echo "max_payload: 2048" >max.conf
NATS_ARGS="-c $T/max.conf" nats_start
publish 512
assert_eq "$rc" 0 "kvsub's exit status"
assert_grep '^kvsub: nats split=[0-9]+ lost=[1-9][0-9]*$' kvsub.err
assert_grep "^kvsub: nats: worker 1 dp 0: [0-9]+ events? of batch [0-9]+ over the server's largest message: published as a clear$" kvsub.err
run timeout --foreground 60 kvindex --nats "$NURL" --stream P --until-caught-up -s nats.kvix
# 1: blocks stored under a parent the clear took are refused, rightly
[ "$rc" = 0 ] || [ "$rc" = 1 ] || fail "kvindex's exit status $rc"
# every message the stream took was applied: the replica is at its end
last=$(kvdump --stats --json nats.kvix | sed -n 's/.*"stream_seq":\([0-9]*\).*/\1/p')
[ "${last:-0}" -ge 40 ] || fail "the replica stopped at message ${last:-0}"
end
