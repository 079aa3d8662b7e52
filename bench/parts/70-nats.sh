#!/usr/bin/env bash
# Scale-out through NATS JetStream against the direct pipe, on this machine:
#   direct:  bench_wire pub -> kvsub -f msgpack | kvindex
#   nats:    bench_wire pub -> kvsub --nats (stdout to /dev/null) -> nats-server
#            (JetStream, file store in a temporary folder) -> kvindex --nats (live)
# events/s and blocks/s from the publisher's first send to kvindex's last
# applied event (kvindex is asked with SIGUSR1), the lag from the server
# storing a message to kvindex applying it (kvindex's own p50/p99), and the
# catch-up rate of a new replica (kvindex --nats --until-caught-up over the
# whole stream) against kvindex reading the same events from a file.
# Medians of several runs; markdown on stdout, progress on stderr.
set -euo pipefail
BUILD=${BUILD:?BUILD must name the build directory}
B=$BUILD/bin
BENCH=$BUILD/bench/bench_wire
RUNS=${KVIX_BENCH_RUNS:-3}
N=${KVIX_BENCH_NATS_BATCHES:-20000}
EVENTS=4 BLOCKS=4 BS=16
command -v nats-server >/dev/null || { echo "70-nats: nats-server is not installed (make deps)" >&2; exit 1; }
for f in "$B/kvsub" "$B/kvindex" "$BENCH"; do
    [ -x "$f" ] || { echo "70-nats: $f is missing (make benches)" >&2; exit 1; }
done
. "$(dirname "$0")/../lib.sh"
EV=$((N * EVENTS))

port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
nats-server -js -sd "$tmp/js" -a 127.0.0.1 -p "$port" >"$tmp/server.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do grep -q "Server is ready" "$tmp/server.log" && break; sleep 0.1; done
URL=nats://127.0.0.1:$port

# wait_applied PID ERRFILE: until kvindex (PID) says it applied every event;
# prints the time it was seen
wait_applied() {
    local i
    # SIGUSR1 before kvindex installed its handler would kill it: wait for
    # the handler (bit 10 of SigCgt)
    for i in $(seq 200); do
        (($(printf '%d' "0x$(awk '/^SigCgt/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0)") & 0x200)) && break
        sleep 0.05
    done
    for i in $(seq 2400); do # at most 120 s
        sleep 0.05
        kill -USR1 "$1"
        if grep -q "applied $EV events" "$2"; then
            echo "$EPOCHREALTIME"
            return 0
        fi
    done
    echo "70-nats: kvindex did not apply all $EV events" >&2
    tail -n 3 "$2" >&2
    exit 1
}

start_pub() { # start_pub SOCK: the publisher, which starts once a subscriber joined
    "$BENCH" pub "ipc://$1" -n "$N" -e $EVENTS -k $BLOCKS -b $BS >"$tmp/pub.out" &
    pids+=($!)
    for i in $(seq 100); do [ -S "$1" ] && break; sleep 0.05; done
}

pub_start() {
    for i in $(seq 200); do grep -q '^start=' "$tmp/pub.out" && break; sleep 0.05; done
    sed -n 's/^start=//p' "$tmp/pub.out"
}

direct_once() {
    local sock=$tmp/d.$1
    start_pub "$sock"
    ("$B/kvsub" -w "1=ipc://$sock" -b $BS -f msgpack 2>/dev/null | tee "$tmp/events.mp" |
        "$B/kvindex" 2>"$tmp/d.err") &
    local pipe=$!
    local kpid
    for i in $(seq 100); do
        kpid=$(pgrep -n -P "$pipe" -x kvindex || true)
        [ -n "$kpid" ] && break
        sleep 0.05
    done
    local t0 t1
    t0=$(pub_start)
    t1=$(wait_applied "$kpid" "$tmp/d.err")
    pkill -TERM -P "$pipe" -x kvsub || true
    wait "$pipe" || true
    echo "$t0 $t1" | awk '{ printf "%.6f\n", $2 - $1 }'
}

nats_once() { # nats_once RUN WINDOW
    local sock=$tmp/n.$1.$2 stream=B$1W$2
    start_pub "$sock"
    "$B/kvsub" -w "1=ipc://$sock" -b $BS --nats "$URL" --stream "$stream" --subject "b$1w$2" \
        --nats-window "$2" >/dev/null 2>"$tmp/s.err" &
    local spid=$!
    pids+=($spid)
    for i in $(seq 100); do grep -q "created stream" "$tmp/s.err" && break; sleep 0.05; done
    "$B/kvindex" --nats "$URL" --stream "$stream" 2>"$tmp/n.err" &
    local kpid=$!
    pids+=($kpid)
    local t0 t1
    t0=$(pub_start)
    t1=$(wait_applied "$kpid" "$tmp/n.err")
    kill -TERM "$spid"
    wait "$spid" || true
    kill -TERM "$kpid"
    wait "$kpid" || true
    local lag
    lag=$(sed -n 's/.*lag from stored to applied: p50 \([0-9.]*\) ms, p99 \([0-9.]*\) ms.*/\1 \2/p' "$tmp/n.err")
    # a new replica catching up over the whole stream, and kvindex from a file
    local c0 c1 f0 f1
    c0=$EPOCHREALTIME
    "$B/kvindex" --nats "$URL" --stream "$stream" --until-caught-up --quiet
    c1=$EPOCHREALTIME
    f0=$EPOCHREALTIME
    "$B/kvindex" --quiet <"$tmp/events.mp"
    f1=$EPOCHREALTIME
    echo "$t0 $t1 $lag $c0 $c1 $f0 $f1" |
        awk '{ printf "%.6f %s %s %.6f %.6f\n", $2 - $1, $3, $4, $6 - $5, $8 - $7 }'
}

WINDOW=${KVIX_BENCH_NATS_WINDOW:-256}
: >"$tmp/direct"
: >"$tmp/nats"
: >"$tmp/sync"
for ((r = 0; r < RUNS; r++)); do
    echo "70-nats: run $((r + 1)) of $RUNS, $N batches" >&2
    direct_once "$r" >>"$tmp/direct"
    nats_once "$r" "$WINDOW" >>"$tmp/nats"
    nats_once "$r" 1 >>"$tmp/sync"
done
col() { awk -v c="$1" '{ print $c }' "$2" | median; }
ds=$(col 1 "$tmp/direct")
ns=$(col 1 "$tmp/nats")
p50=$(col 2 "$tmp/nats")
p99=$(col 3 "$tmp/nats")
cs=$(col 4 "$tmp/nats")
fs=$(col 5 "$tmp/nats")
ss=$(col 1 "$tmp/sync")
sp50=$(col 2 "$tmp/sync")
sp99=$(col 3 "$tmp/sync")
rate() { awk -v s="$1" -v n="$2" 'BEGIN { printf "%.0f", n / s }'; }
BL=$((EV * BLOCKS))

cat <<EOF
## Many replicas: kvsub -> NATS JetStream -> kvindex

$N engine batches of $EVENTS stored events of $BLOCKS blocks ($EV events, $BL blocks) from a
C publisher over ipc://; nats-server with JetStream (file store) on loopback; everything
on this machine's cores. One NATS message per batch; kvsub keeps up to \`--nats-window\`
batches awaiting the server's acknowledgement (the synchronous publisher, each batch
acknowledged before the next is sent, is window 1, run in the same session as the
baseline). Medians of $RUNS runs.

| path | seconds | events/s | blocks/s | batches/s |
|---|---|---|---|---|
| direct pipe: \`kvsub -f msgpack \| kvindex\` | $ds | $(rate "$ds" $EV) | $(rate "$ds" $BL) | $(rate "$ds" "$N") |
| through JetStream, live, \`--nats-window $WINDOW\` | $ns | $(rate "$ns" $EV) | $(rate "$ns" $BL) | $(rate "$ns" "$N") |
| through JetStream, live, \`--nats-window 1\` (synchronous) | $ss | $(rate "$ss" $EV) | $(rate "$ss" $BL) | $(rate "$ss" "$N") |
| a new replica catching up (\`kvindex --nats --until-caught-up\`) | $cs | $(rate "$cs" $EV) | $(rate "$cs" $BL) | $(rate "$cs" "$N") |
| \`kvindex <events.msgpack\` (the same events from a file) | $fs | $(rate "$fs" $EV) | $(rate "$fs" $BL) | $(rate "$fs" "$N") |

The window lifts the live path $(awk -v a="$ss" -v b="$ns" 'BEGIN { printf "%.1f", a / b }')x over the synchronous publisher (one round trip to the
server per batch). Lag from the server storing a message to the live replica applying
it: p50 $p50 ms, p99 $p99 ms with the window (p50 $sp50 ms, p99 $sp99 ms synchronous;
kvindex's own measure, the server's and kvindex's clocks being the same machine's).
EOF
