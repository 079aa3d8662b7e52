#!/usr/bin/env bash
# kvsub with an engine whose host name resolves slowly: its resolution is
# held at a gate (tests/dnsgate: getaddrinfo of *.kvix-gate waits while a
# file exists), and another engine's batches still arrive whole meanwhile.
# libzmq resolved names in its one I/O thread at every connection attempt,
# so a slow DNS froze every subscription of the process; kvix resolves them
# on a thread of its own and connects ZMQ to the address. Every wait is a
# bounded poll.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
FE=$ROOT/tests/tools/fake_engine.py
GATE_SO=$(cd "$KVIX_BIN/.." && pwd)/tests/libdnsgate.so

begin "kvsub: a host name stuck in DNS holds no other subscription back"
[ -f "$GATE_SO" ] || fail "no $GATE_SO (make tests builds it)"
touch gate
timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --worker 2 --batches 30 --expect exp.json \
    --seed 4 --linger 1 2>engine.err &
PIDS="$PIDS $!"
# the sanitizers' runtime wants to come first; the gate is plain C
KVIX_DNS_GATE=$T/gate LD_PRELOAD=$GATE_SO \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    kvsub -w 1=tcp://engine1.kvix-gate:5557 -w "2=ipc://$T/pub" >out 2>err &
KPID=$!
PIDS="$PIDS $KPID"
for i in $(seq 300); do "$PY" "$FE" final out exp.json 2>/dev/null && break; sleep 0.1; done
"$PY" "$FE" final out exp.json 2>/dev/null ||
    fail "engine 2's batches did not arrive while engine 1's name was being resolved"
[ -e gate ] || fail "the gate opened early"
rm -f gate # the name now fails to resolve: said, asked again
for i in $(seq 100); do grep -q 'does not resolve' err && break; sleep 0.1; done
assert_grep "worker 1: host 'engine1.kvix-gate' of tcp://engine1.kvix-gate:5557 does not resolve" err
kill -TERM "$KPID"
wait "$KPID"
rc=$?
expect_rc 0
end

begin "kvindex -w: a host name stuck in DNS holds no other subscription back"
[ -f "$GATE_SO" ] || fail "no $GATE_SO (make tests builds it)"
touch gate
timeout 120 "$PY" "$FE" publish --pub "ipc://$T/pub" --worker 2 --batches 30 --expect exp.json \
    --seed 4 --linger 1 2>engine.err &
PIDS="$PIDS $!"
KVIX_DNS_GATE=$T/gate LD_PRELOAD=$GATE_SO \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    kvindex --listen 127.0.0.1:0 -w 1=tcp://engine1.kvix-gate:5557 -w "2=ipc://$T/pub" \
    </dev/null >out 2>err &
KPID=$!
PIDS="$PIDS $KPID"
URL=$(listening err) || fail "kvindex never said where it listens"
n=0
for i in $(seq 300); do
    n=$(curl -s "$URL/metrics" | awk '$1 == "kvix_subscription_batches_total" { print $2 }')
    [ "${n:-0}" -ge 30 ] && break
    sleep 0.1
done
[ "${n:-0}" -ge 30 ] || fail "$n of engine 2's 30 batches while engine 1's name was being resolved"
[ -e gate ] || fail "the gate opened early"
rm -f gate
kill -TERM "$KPID"
wait "$KPID"
rc=$?
expect_rc 0
end
