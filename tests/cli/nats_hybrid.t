#!/usr/bin/env bash
# A hybrid model's engine (tests/tools/fake_engine.py --hybrid: sliding-window
# and Mamba groups evicting blocks the full-attention group still holds) fed
# through kvsub --nats into a real nats-server, and a kvindex --nats replica
# following the stream: the group and kind of every event travel in the
# stream's records, so the replica's index equals kvindex of kvsub's printed
# log, and its answers are what the full group holds. Every wait is a bounded
# poll; nothing asserts on time.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
FE=$ROOT/tests/tools/fake_engine.py
. "$(dirname "$0")/nats.sh"
trap cleanup EXIT

begin "kvindex --nats: a hybrid model's KV cache groups through the stream"
nats_start
timeout 300 "$PY" "$FE" publish --pub "ipc://$T/pub" --hybrid --batches 80 --expect exp.json \
    --seed 41 --linger 1 2>engine.err &
EPID=$!
timeout --foreground 300 kvsub -w "1=ipc://$T/pub" --nats "$NURL" --stream HYB \
    --subject hyb >events.ndjson 2>kvsub.err &
KPID=$!
kvindex --nats "$NURL" --stream HYB -s "$T/a.kvix" --save-every-events 50 >a.out 2>a.err &
APID=$!
PIDS="$PIDS $EPID $KPID $APID"
for i in $(seq 600); do
    "$PY" "$FE" final events.ndjson exp.json 2>/dev/null && break
    sleep 0.1
done
"$PY" "$FE" final events.ndjson exp.json || fail "kvsub did not print the engine's last batches"
kill -TERM "$KPID"
wait "$KPID"
assert_eq "$?" 0 "kvsub's exit status"
assert_grep '^kvsub: nats published=[1-9]' kvsub.err
assert_grep ' other_kinds=[1-9]' kvsub.err
kill -TERM "$APID"
wait "$APID"
timeout --foreground 120 kvindex --nats "$NURL" --stream HYB -s "$T/a.kvix" --until-caught-up \
    --quiet 2>>a.err
assert_eq "$?" 0 "the replica catching up"
kvindex -s ref.kvix --quiet <events.ndjson || fail "kvindex of kvsub's log"
kvdump --diff ref.kvix a.kvix >diff.out 2>&1 ||
    { fail "the replica differs from kvsub's log"; head -3 diff.out | sed 's/^/#     /'; }
"$PY" "$FE" queries exp.json >queries.ndjson
kvindex --quiet -q -s a.kvix <queries.ndjson >a.ans || fail "kvindex -q"
"$PY" "$FE" answers a.ans exp.json >acmp ||
    { fail "the replica's answers differ from the full group's state"; head -4 acmp | sed 's/^/#     /'; }
assert_grep '^same: [1-9][0-9]* answers checked' acmp
end
