# kvreplay --pub: act as the engines of a log on the ZMQ wire, on loopback or
# ipc:// in the scratch directory. kvsub subscribed to them must see what the
# log holds, and the index built through kvsub must equal the index built
# from the log directly. Every wait is bounded; the background processes are
# stopped by their ids.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

CONV=$FIXTURES/mooncake/conversation_trace.jsonl.xz
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

# wait_for SECONDS CMD...: until CMD succeeds, at most SECONDS
wait_for() {
    local n=$(($1 * 10))
    shift
    while ! "$@"; do
        n=$((n - 1))
        [ $n -gt 0 ] || return 1
        sleep 0.1
    done
}

lines_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }

# What a subscriber must see of a log, per worker in order (tokens aside:
# kvsub keeps them only with --tokens).
project() {
    jq -c 'select(.type != "query") | [.worker, .dp, .eid, .type, .parent, [.blocks[]? | [.local, .seq]], .hashes]' "$1" |
        sort -s -t, -k1,1
}

# pub_to_sub LOG OUT PUB-OPTIONS...: publish LOG, subscribe with kvsub, stop
# kvsub once it has printed every event of the log.
pub_to_sub() {
    local log=$1 out=$2
    shift 2
    local want
    want=$(grep -vc '"type":"query"' "$log")
    rm -f workers
    kvreplay --fast --pub-wait 30 --map-file workers "$@" "$log" >pub.out 2>pub.err &
    local pub=$!
    pids+=("$pub")
    wait_for 20 test -s workers || fail "no map file"
    kvsub --workers-file workers >"$out" 2>sub.err &
    local sub=$!
    pids+=("$sub")
    wait "$pub"
    pub_rc=$?
    wait_for 30 lines_at_least "$out" "$want" || fail "kvsub printed $(wc -l <"$out") of $want events"
    kill -TERM "$sub"
    wait "$sub"
    sub_rc=$?
}

kvreplay -q --mooncake "$CONV" --workers 4 --capacity 200 --limit 150 --seed 2 --tokens \
    >"${TMPDIR:-/tmp}/kvreplay-pub.$$"
LOG=${TMPDIR:-/tmp}/kvreplay-pub.$$
trap 'cleanup; rm -f "$LOG" "$LOG.hybrid" "$LOG.hybrid.kvix" "$LOG.hybrid.kvix.lock"' EXIT

begin "pub -> kvsub (tcp, map events): kvsub sees the log"
pub_to_sub "$LOG" sub.ndjson --pub 'tcp://127.0.0.1:*'
assert_eq "$pub_rc" 0 "kvreplay exit status"
assert_eq "$sub_rc" 0 "kvsub exit status"
assert_eq "$(wc -l <workers)" 4 "a publisher per worker"
assert_grep '^0:0=tcp://127\.0\.0\.1:[0-9]+$' workers
assert_grep "events published in [0-9]+ batches by 4 publishers" pub.err
assert_grep "150 queries not published" pub.err
project "$LOG" >want
project sub.ndjson >got
cmp -s want got || { fail "kvsub's events differ from the log"; diff want got | head -5 | sed 's/^/#   /'; }
assert_grep "gaps=0 " sub.err
# the index built through the wire equals the index built from the log
kvindex --quiet -s direct.kvix "$LOG" >direct.ans
kvindex --quiet -s wire.kvix sub.ndjson >/dev/null
run kvdump --diff direct.kvix wire.kvix
expect_rc 0
grep '"type":"query"' "$LOG" >queries
kvindex --quiet -q -s wire.kvix queries >wire.ans
kvindex --quiet -q -s direct.kvix queries >direct2.ans
[ -s wire.ans ] || fail "no answers"
cmp -s wire.ans direct2.ans || fail "answers through the wire differ"
end

begin "pub -> kvsub (ipc, legacy array events, a topic)"
pub_to_sub "$LOG" sub.ndjson --pub "ipc://$T/eng" --wire array --topic kv
assert_eq "$pub_rc" 0 "kvreplay exit status"
assert_grep "^2:0=ipc://$T/eng-2-0\$" workers
project "$LOG" >want
project sub.ndjson >got
cmp -s want got || fail "kvsub's events differ from the log"
end

# Every engine generation kvreplay speaks (kvsub(1)'s compatibility table):
# kvsub reads each, and the index built through each wire equals the log's.
for gen in vllm-0.26 vllm-0.25 vllm-0.9 sglang-array sglang-map; do
    begin "pub --wire $gen -> kvsub: the index built through the wire equals the log's"
    # (tcp: under load, a kvsub stopped after its engines went may leave a
    # libzmq monitor message naming a long ipc endpoint unfreed, which
    # LeakSanitizer reports; a tcp endpoint's fits in the message itself)
    pub_to_sub "$LOG" sub.ndjson --pub 'tcp://127.0.0.1:*' --wire "$gen"
    assert_eq "$pub_rc" 0 "kvreplay exit status"
    assert_eq "$sub_rc" 0 "kvsub exit status"
    project "$LOG" >want
    project sub.ndjson >got
    cmp -s want got || { fail "kvsub's events differ from the log"; diff want got | head -3 | sed 's/^/#   /'; }
    assert_grep "gaps=0 " sub.err
    grep -v '"type":"query"' "$LOG" | kvindex --quiet -s direct.kvix
    kvindex --quiet -s wire.kvix sub.ndjson
    run kvdump --diff direct.kvix wire.kvix
    expect_rc 0
    rm -f direct.kvix wire.kvix
    end
done

# The log of a hybrid model: each store of the log is group 1's (full
# attention), and a sliding-window group 0 stores its last block and evicts
# it at once. Through the generations that carry groups, the index equals
# the log's, and the log's equals the index of group 1's events alone.
HYB=$LOG.hybrid
"$PY" - "$LOG" >"$HYB" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["type"] == "query":
        continue
    if e["type"] == "cleared":
        print(json.dumps(e))
        continue
    e["group"] = 1
    if e["type"] == "stored":
        e["kind"] = "full_attention"
    print(json.dumps(e))
    if e["type"] == "stored":
        last = e["blocks"][-1]["seq"]
        sw = {k: e[k] for k in ("worker", "dp", "model", "tenant", "eid", "bs") if k in e}
        parent = e["blocks"][-2]["seq"] if len(e["blocks"]) > 1 else e.get("parent")
        print(json.dumps(dict(sw, type="stored", group=0, kind="sliding_window", parent=parent,
                              hashes=[last])))
        print(json.dumps(dict(sw, type="removed", group=0, hashes=[last])))
EOF
grep -v '"type":"query"' "$LOG" | kvindex --quiet -s "$HYB.kvix"
for gen in vllm-0.26 vllm-0.25 sglang-map; do
    begin "pub --wire $gen -> kvsub: a hybrid model's log, the index of its full-attention group"
    pub_to_sub "$HYB" sub.ndjson --pub 'tcp://127.0.0.1:*' --wire "$gen"
    assert_eq "$pub_rc" 0 "kvreplay exit status"
    assert_grep '"group":0,"kind":"sliding_window",' sub.ndjson
    kvindex --quiet -s wire.kvix sub.ndjson
    run kvdump --diff "$HYB.kvix" wire.kvix
    expect_rc 0
    rm -f wire.kvix
    end
done

begin "pub --wire: what a generation cannot say is refused, not dropped"
printf '%s\n' '{"type":"stored","worker":1,"medium":"cpu","bs":2,"parent":null,"blocks":[{"local":1,"seq":2}],"tokens":[[1,2]]}' >cpu.ndjson
run kvreplay --fast --pub "ipc://$T/old" --pub-wait 0 --wire vllm-0.9 cpu.ndjson
expect_rc 1
assert_grep "the vllm-0.9 wire cannot carry a tier other than the gpu" err
end

begin "pub: one worker with a dp rank of its own"
jq -c 'select(.type == "query" or .worker == 1) | if .worker == 1 then .dp = 3 else . end' "$LOG" >one.ndjson
pub_to_sub one.ndjson sub.ndjson --pub 'tcp://127.0.0.1:*'
assert_eq "$(cat workers | cut -d= -f1)" "1:3" "map line"
assert_eq "$(jq -r .dp sub.ndjson | sort -u)" 3 "dp of the batches"
project one.ndjson >want
project sub.ndjson >got
cmp -s want got || fail "kvsub's events differ from the log"
end

begin "pub: the replay service answers from a seq on, then the end marker"
rm -f workers
kvreplay --fast --pub "ipc://$T/e" --replay-endpoint "ipc://$T/r" --pub-wait 0 --pub-hold 60 \
    --map-file workers "$LOG" 2>pub.err &
pub=$!
pids+=("$pub")
wait_for 20 test -s workers || fail "no map file"
want=$(jq -c 'select(.worker == 0 and .type != "query")' "$LOG" | wc -l)
cat >dealer.py <<'EOF'
import sys, zmq, msgpack
rep = [l.split("replay=")[1].strip() for l in open("workers") if l.startswith("0:0=")][0]
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 0)
s.connect(rep)
start = int(sys.argv[1])
s.send_multipart([b"", start.to_bytes(8, "big")])
seqs = []
while True:
    if not s.poll(20000):
        print("timeout"); sys.exit(1)
    f = s.recv_multipart()
    assert len(f) == 4 and f[0] == b"", f
    seq = int.from_bytes(f[2], "big")
    if seq == 2**64 - 1:
        assert f[3] == b""
        break
    ts, events, dp = msgpack.unpackb(f[3])
    assert dp == 0 and len(events) == 1
    seqs.append(seq)
first = seqs[0] if seqs else -1
print(len(seqs), first, first >= start and seqs == list(range(first, first + len(seqs))))
EOF
wait_for 30 grep -q "all batches sent" pub.err || fail "the publisher did not finish"
run "$PY" dealer.py 0
assert_eq "$(cat out)" "$want 0 True" "every batch of worker 0 from seq 0"
run "$PY" dealer.py 5
assert_eq "$(cat out)" "$((want - 5)) 5 True" "from seq 5"
kill -TERM "$pub"
wait "$pub"
assert_eq "$?" 0 "kvreplay stops cleanly on SIGTERM"
# a buffer of 10 batches: asked from 0, the replay starts at the oldest kept
rm -f workers
kvreplay --fast --pub "ipc://$T/e2" --replay-endpoint "ipc://$T/r2" --replay-buffer 10 \
    --pub-wait 0 --pub-hold 60 --map-file workers "$LOG" 2>pub.err &
pub=$!
pids+=("$pub")
wait_for 20 test -s workers || fail "no map file"
wait_for 30 grep -q "all batches sent" pub.err || fail "the publisher did not finish"
run "$PY" dealer.py 0
assert_eq "$(cat out)" "10 $((want - 10)) True" "the last 10 batches"
kill -TERM "$pub"
wait "$pub"
assert_grep "events published in $want batches|events published" pub.err
end

begin "pub: stored events without tokens cannot be published"
kvreplay -q --mooncake "$CONV" --workers 2 --limit 5 >notok.ndjson
run kvreplay --fast --pub 'tcp://127.0.0.1:*' --pub-wait 0 notok.ndjson
expect_rc 1
assert_grep "cannot publish a batch of worker [0-9]+: stored event without tokens" err
assert_grep " 0 events published in 0 batches by 2 publishers \(0 stored" err
end

begin "pub: each publisher is bound and put in the map file as the scan finds it; kvsub follows the file as it grows"
# The second log is a FIFO: the scan blocks on it after the first log, so the
# map file must already name the first log's worker then. The FIFO is written
# twice: once for the scan, once for the replay.
jq -c 'select(.type != "query" and .worker == 0)' "$LOG" >w0.ndjson
jq -c 'select(.type != "query" and .worker != 0)' "$LOG" >rest.ndjson
mkfifo rest.fifo
kvreplay --fast --pub "ipc://$T/e" --pub-wait 30 --map-file workers w0.ndjson rest.fifo \
    >pub.out 2>pub.err &
pub=$!
pids+=("$pub")
wait_for 20 test -s workers || fail "no map file while the scan waits for the second log"
assert_eq "$(cat workers)" "0:0=ipc://$T/e-0-0" "map file after the first log"
kvsub --workers-file workers >sub.ndjson 2>sub.err &
sub=$!
pids+=("$sub")
cat rest.ndjson >rest.fifo # the scan reads it: three more publishers
has_lines() { [ "$(wc -l <"$1")" = "$2" ]; }
wait_for 20 has_lines workers 4 || fail "map file not completed: $(cat workers)"
# The map file is complete before the scan reaches the FIFO's end: a writer
# opening it while the scan still holds it would be read by the scan, and the
# replay would wait for a third. Once the scan let it go, the replay's open
# waits for this writer.
scan_done() { ! ls -l "/proc/$pub/fd" 2>/dev/null | grep -q 'rest\.fifo$'; }
wait_for 20 scan_done || fail "the scan still holds the FIFO"
cat rest.ndjson >rest.fifo # the replay reads it
wait "$pub"
assert_eq "$?" 0 "kvreplay exit status"
want=$(cat w0.ndjson rest.ndjson | wc -l)
wait_for 30 lines_at_least sub.ndjson "$want" || fail "kvsub printed $(wc -l <sub.ndjson) of $want events"
kill -TERM "$sub"
wait "$sub"
assert_eq "$?" 0 "kvsub exit status"
assert_grep 'reloaded workers: 4 workers, [0-9]+ added, 0 removed' sub.err
assert_no_grep 'no subscriber' pub.err
cat w0.ndjson rest.ndjson >both.ndjson
project both.ndjson >want
project sub.ndjson >got
cmp -s want got || fail "kvsub's events differ from the logs"
end

begin "kvsub: --reload needs --workers-file"
run kvsub -w "1=ipc://$T/x" --reload 1
expect_rc 2
assert_grep '--reload needs --workers-file' err
end
