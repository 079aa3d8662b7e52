# kvindex: answers on a hand-checked example (every backend), bad records with
# their messages and positions, --strict, the summary, snapshots (save, load,
# -q, corrupt files), msgpack input, threads, signals.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

EX=$FIXTURES/kvindex/answers.ndjson

# NDJSON records -> the msgpack framing (hashes as uint64, as kvix writes them)
to_msgpack() {
    "$PY" -c '
import json, sys, msgpack
H = {"parent"}
def h(v): return int(v, 16) if isinstance(v, str) else v
out = sys.stdout.buffer
for line in sys.stdin:
    if not line.strip():
        continue
    r = json.loads(line)
    if isinstance(r, dict):
        if r.get("parent") is not None: r["parent"] = h(r["parent"])
        for b in r.get("blocks", []):
            b["local"] = h(b["local"]); b["seq"] = h(b["seq"])
        for k in ("hashes", "local"):
            if isinstance(r.get(k), list): r[k] = [h(x) for x in r[k]]
    out.write(msgpack.packb(r))
'
}

# A random workload: chains stored by several workers and dp ranks, removals
# of leaves, clears, and queries along stored chains; a few stores with an
# unknown parent. Same seed, same file.
workload() { # workload SEED EVENTS
    "$PY" -c '
import random, sys
rnd = random.Random(int(sys.argv[1])); n = int(sys.argv[2])
held = {}   # (w, dp) -> list of chains, each a list of (local, seq)
prefixes = [[rnd.getrandbits(64) for _ in range(12)] for _ in range(6)]
seqn = 0
for i in range(n):
    w, dp = rnd.randrange(1, 9), rnd.randrange(2)
    chains = held.setdefault((w, dp), [])
    r = rnd.random()
    if r < 0.55:
        p = rnd.choice(prefixes); k = rnd.randrange(1, 12)
        blocks = []
        for loc in p[:k]:
            seqn += 1; blocks.append((loc, seqn))
        chains.append(blocks)
        bl = ",".join("{\"local\":\"%016x\",\"seq\":\"%016x\"}" % b for b in blocks)
        print("{\"type\":\"stored\",\"worker\":%d,\"dp\":%d,\"bs\":16,\"eid\":%d,\"blocks\":[%s]}" % (w, dp, i, bl))
    elif r < 0.75 and chains:
        c = rnd.choice(chains)
        if c:
            b = c.pop()
            print("{\"type\":\"removed\",\"worker\":%d,\"dp\":%d,\"hashes\":[\"%016x\"]}" % (w, dp, b[1]))
    elif r < 0.78:
        held[(w, dp)] = []
        print("{\"type\":\"cleared\",\"worker\":%d,\"dp\":%d}" % (w, dp))
    elif r < 0.80:
        print("{\"type\":\"stored\",\"worker\":%d,\"dp\":%d,\"bs\":16,\"parent\":\"%016x\",\"blocks\":[{\"local\":\"01\",\"seq\":\"02\"}]}" % (w, dp, rnd.getrandbits(64) | 1 << 63))
    else:
        p = rnd.choice(prefixes)
        print("{\"id\":%d,\"local\":[%s]}" % (i, ",".join("\"%016x\"" % x for x in p[:rnd.randrange(1, 13)])))
' "$1" "$2"
}

# Inputs shared by several tests (each test runs in its own scratch directory).
S=$(mktemp -d "${TMPDIR:-/tmp}/kvix-kvindex.XXXXXX")
trap 'rm -rf "$S"' EXIT
workload 7 3000 >"$S/w.ndjson"
grep -v '"id"' "$S/w.ndjson" >"$S/events"
grep '"id"' "$S/w.ndjson" >"$S/queries"
echo '{"local":["1"]}' >"$S/q"
{
    echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}'
    echo 'this is not json'
    echo '{"type":"stored","bs":4,"blocks":[]}'
    echo '{"type":"cleared","worker":"one"}'
    echo '{"type":"removed","worker":1,"hashes":["a1","xyz"]}'
    echo '{"type":"cleared","worker":1,"dp":-2}'
    echo '{"type":"evicted","worker":1}'
    echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"2"}]}'
    echo '{"type":"cleared","worker":1,"worker":2}'
    echo ''
    echo '{"model":"m"}'
    echo '{"type":"stored","worker":2,"bs":8,"blocks":[{"local":"1","seq":"b1"}]}'
    echo '{"type":"stored","worker":2,"bs":4,"parent":"77","blocks":[{"local":"2","seq":"b2"}]}'
    echo '{"id":"last","local":["1"]}'
} >"$S/in"

for be in positional radix reference; do
    begin "kvindex --backend $be: answers of the hand-checked example"
    run kvindex --backend "$be" --quiet "$EX"
    expect_rc 0
    golden kvindex_answers
    # q6 asks for a model the index never saw: the answer says so; said once
    # on stderr too, but not with --quiet
    assert_eq "$(cat err)" "" "stderr with --quiet"
    run kvindex --backend "$be" "$EX"
    assert_eq "$(grep '^kvindex: unknown' err)" "kvindex: unknown model \"nope\" at $EX:15: the index has never seen it (answered with \"unknown\":\"model\")" "stderr"
    end
done

begin "kvindex: answers on stdin and from a file are the same; the default backend too"
run kvindex --quiet <"$EX"
expect_rc 0
golden kvindex_answers
end

begin "kvindex: every kind of bad record, with its position and reason, the rest applied"
cp "$S/in" in
run kvindex --quiet in
expect_rc 1
golden kvindex_bad_lines.out
# the block-size and parent messages are the index's own: check the position and the gist
grep -v -e '^kvindex: bad event at in:12: ' -e '^kvindex: bad event at in:13: ' err >err.codec
golden kvindex_bad_lines.err err.codec
assert_grep '^kvindex: bad event at in:12: .*block size' err
assert_grep '^kvindex: bad event at in:13: .*(parent|0000000000000077)' err
assert_eq "$(wc -l <err)" 11 "lines of stderr"
end

begin "kvindex: a line over 16 MiB is rejected with its line number and skipped"
{
    echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}'
    printf '{"pad":"'
    head -c 17000000 /dev/zero | tr '\0' x
    echo '"}'
    echo '{"local":["1"]}'
} >big
run kvindex --quiet big
expect_rc 1
assert_eq "$(cat err)" "kvindex: bad event at big:2: line longer than 16777216 bytes" "stderr"
assert_eq "$(sed -n 1p out)" '{"error":"line longer than 16777216 bytes"}' "the long line's own answer"
assert_eq "$(sed -n 2p out)" '{"blocks":1,"scores":[{"worker":1,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}' "answer after the long line"
assert_eq "$(wc -l <out)" 2 "answers"
end

begin "kvindex: the summary counts events by type, blocks, queries, rejections by reason"
cp "$S/in" in
run kvindex in
expect_rc 1
grep -v '^kvindex: bad event' err | sed -E 's/, [0-9.]+ (bytes|KiB|MiB)$/, MEM/' >summary
golden kvindex_summary summary
end

begin "kvindex --strict: stops at the first bad record, saves what came before, exits 5"
cp "$S/in" in
run kvindex --strict --quiet -s s.kvix in
expect_rc 5
assert_eq "$(cat err)" "kvindex: bad event at in:2: malformed json at column 4: '[' or '{' expected near 'this'" "stderr"
[ -f s.kvix ] || fail "no snapshot saved"
cp "$S/q" q
run kvindex -q --quiet -s s.kvix q
expect_rc 0
assert_eq "$(cat out)" '{"blocks":1,"scores":[{"worker":1,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}' "state saved by --strict"
# the records after the bad one were not applied: worker 1 still holds a1
echo '{"type":"removed","worker":1,"hashes":["a1"]}' | kvindex --quiet -s s.kvix
run kvindex -q --quiet -s s.kvix q
# (the partition held nothing more: not saved, unknown after the reload)
assert_eq "$(cat out)" '{"blocks":1,"scores":[],"unknown":"model"}' "removal applied to the saved state"
end

begin "kvindex: events -> snapshot -> kvindex -q answers what the live run answered"
cp "$S/events" "$S/queries" .
run kvindex --quiet -s w.kvix events
cp err events.err
cat events queries >both
run kvindex --quiet both
cp out live
run kvindex -q --quiet -s w.kvix queries
expect_rc 0
cmp -s out live || fail "answers from the snapshot differ from the live run"
[ "$(wc -l <out)" -gt 100 ] || fail "too few answers: $(wc -l <out)"
grep -q '"blocks":[1-9][0-9]*,"tokens"' out || fail "no query matched anything"
# and the snapshot reloads into the same state when saved again
run kvindex --quiet -s w.kvix </dev/null
expect_rc 0
run kvindex -q --quiet -s w.kvix queries
cmp -s out live || fail "answers changed after a load and save"
cp w.kvix live "$S/"
end

begin "kvindex: msgpack input gives what NDJSON input gives (auto and -f msgpack)"
cp "$S/w.ndjson" .
to_msgpack <w.ndjson >w.msgpack
to_msgpack <"$EX" >ex.msgpack
run kvindex --quiet ex.msgpack
expect_rc 0
golden kvindex_answers
run kvindex w.ndjson
sed -E 's/, [0-9.]+ (bytes|KiB|MiB)$//' err >ndjson.err
cp out ndjson.out
cp ndjson.out ndjson.err "$S/"
run kvindex -f msgpack w.msgpack
sed -E 's/, [0-9.]+ (bytes|KiB|MiB)$//' err >msgpack.err
cmp -s out ndjson.out || fail "answers differ between msgpack and ndjson"
# the same rejections at the same positions: record numbers are line numbers here
grep -q 'bad event at w.msgpack:[0-9]*: ' msgpack.err || fail "no rejection reported in the msgpack run"
sed -i 's/w\.msgpack:/w.ndjson:/' msgpack.err
cmp -s msgpack.err ndjson.err || { fail "stderr differs"; diff ndjson.err msgpack.err | head -5 | sed 's/^/#   /'; }
# a malformed record cannot be skipped in msgpack: reported, the rest is lost
{ head -c 300 ex.msgpack; printf '\xc1'; } >broken.msgpack
run kvindex --quiet broken.msgpack
expect_rc 1
assert_grep '^kvindex: bad event at broken.msgpack:[0-9]+: (malformed|truncated) msgpack' err
end

begin "kvindex --threads: the same answers and rejections as inline"
cp "$S/w.ndjson" "$S/ndjson.out" "$S/ndjson.err" "$S/events" "$S/queries" "$S/live" .
run kvindex --threads 3 w.ndjson
sort err | sed -E 's/, [0-9.]+ (bytes|KiB|MiB)$//' >threads.err
cmp -s out ndjson.out || fail "answers differ with threads"
sort ndjson.err >inline.err
cmp -s threads.err inline.err || { fail "stderr differs with threads"; diff inline.err threads.err | head -5 | sed 's/^/#   /'; }
grep -q 'bad event at w.ndjson:' threads.err || fail "rejections from writer threads not reported"
run kvindex --threads 2 -s t.kvix --quiet events
run kvindex -q -s t.kvix --quiet queries
cmp -s out live || fail "snapshot saved with threads answers differently"
end

begin "kvindex: a corrupt snapshot is refused (exit 4) and left untouched"
cp "$S/events" "$S/queries" .
cp "$S/w.kvix" c.kvix
printf 'X' | dd of=c.kvix bs=1 seek=100 conv=notrunc 2>/dev/null
cp c.kvix c.orig
run kvindex -s c.kvix events
expect_rc 4
assert_grep '^kvindex: cannot load c.kvix: ' err
cmp -s c.kvix c.orig || fail "the corrupt snapshot was modified"
run kvindex -q -s c.kvix queries
expect_rc 4
head -c 10 "$S/w.kvix" >trunc.kvix
run kvindex -s trunc.kvix </dev/null
expect_rc 4
assert_eq "$(wc -c <trunc.kvix)" 10 "truncated snapshot size"
end

begin "kvindex -q: needs -s, a snapshot that exists, and rejects events"
run kvindex -q </dev/null
expect_rc 2
assert_grep 'needs a snapshot' err
run kvindex -q -s missing.kvix </dev/null
expect_rc 3
[ -e missing.kvix ] && fail "-q created a snapshot"
echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}' | kvindex --quiet -s s.kvix
printf '%s\n' '{"type":"cleared","worker":1}' '{"local":["1"]}' >mixed
run kvindex -q --quiet -s s.kvix mixed
expect_rc 1
assert_eq "$(cat err)" "kvindex: bad event at mixed:1: event in query-only mode (-q)" "stderr"
assert_eq "$(sed -n 1p out)" '{"error":"event in query-only mode (-q)"}' "with -q every line is answered"
assert_eq "$(wc -l <out)" 2 "the query is still answered"
end

begin "kvindex: usage errors exit 2"
for args in "--backend nope" "--format xml" "--threads x" "--save-every-events 5" "-q -s x --save-every-seconds 3" "--jump 0"; do
    # shellcheck disable=SC2086
    run kvindex $args </dev/null
    [ "$rc" = 2 ] || fail "kvindex $args: exit $rc"
done
end

begin "kvindex: a missing input file is reported (exit 3), the others are read"
run kvindex --quiet -s m.kvix nosuch "$EX"
expect_rc 3
assert_grep "^kvindex: cannot open nosuch: No such file" err
assert_eq "$(wc -l <out)" 9 "answers from the readable file"
[ -f m.kvix ] || fail "not saved"
end

begin "kvindex --save-every-events: saves as it goes"
cp "$S/events" .
run kvindex --quiet -v --save-every-events 1000 -s e.kvix events
expect_rc 1
n=$(grep -c 'saved e.kvix (event count)' err)
[ "$n" -ge 2 ] || fail "only $n saves by event count"
assert_grep 'saved e.kvix \(end of input\)' err
end

# Drive a running kvindex through fifos: $KV_IN is its input, $KV_OUT its answers.
start_kv() {
    mkfifo kin kout
    kvindex "$@" <kin >kout 2>kerr &
    KV_PID=$!
    exec 3>kin 4<kout
}
# Send one query and read its answer: every line sent before it has been read.
roundtrip() {
    echo '{"local":["1"]}' >&3
    read -r -t 20 ANSWER <&4 || fail "no answer from kvindex"
}
# Signals are asynchronous: wait (up to 20 s) for their effect to show.
wait_for() { # wait_for COMMAND...
    local i
    for i in $(seq 200); do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}
stop_kv() { # stop_kv [SIGNAL]
    [ -n "${1:-}" ] && kill -s "$1" "$KV_PID"
    exec 3>&-
    wait "$KV_PID"
    KV_RC=$?
    exec 4<&-
}

begin "kvindex: SIGTERM while waiting for input saves and exits 0"
cp "$S/q" q
start_kv --quiet -s sig.kvix
echo '{"type":"stored","worker":4,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}' >&3
roundtrip
stop_kv TERM
assert_eq "$KV_RC" 0 "exit status after SIGTERM"
run kvindex -q --quiet -s sig.kvix q
assert_eq "$(cat out)" '{"blocks":1,"scores":[{"worker":4,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}' "state saved on SIGTERM"
end

begin "kvindex: SIGHUP saves and goes on; SIGUSR1 prints the summary and goes on"
cp "$S/q" q
start_kv --quiet -s hup.kvix
echo '{"type":"stored","worker":4,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}' >&3
roundtrip
[ -e hup.kvix ] && fail "saved before SIGHUP"
kill -HUP "$KV_PID"
wait_for test -f hup.kvix || fail "SIGHUP did not save"
roundtrip
kill -USR1 "$KV_PID"
wait_for grep -q '^kvindex: index:' kerr || fail "no summary on SIGUSR1"
assert_grep '^kvindex: applied 1 event: 1 stored, 0 removed, 0 cleared$' kerr
assert_grep '^kvindex: answered 2 of 2 queries$' kerr
echo '{"type":"cleared","worker":4}' >&3
stop_kv
assert_eq "$KV_RC" 0 "exit status"
assert_eq "$(grep -c 'applied' kerr)" 1 "summaries with --quiet (only SIGUSR1's)"
run kvindex -q --quiet -s hup.kvix q
assert_eq "$(cat out)" '{"blocks":1,"scores":[],"unknown":"model"}' "state saved at the end of input"
end

begin "kvindex: SIGINT saves like SIGTERM"
cp "$S/q" q
start_kv --quiet -s int.kvix
echo '{"type":"stored","worker":6,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}' >&3
roundtrip
stop_kv INT
assert_eq "$KV_RC" 0 "exit status after SIGINT"
run kvindex -q --quiet -s int.kvix q
assert_eq "$(cat out)" '{"blocks":1,"scores":[{"worker":6,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}' "state saved on SIGINT"
end

begin "kvindex --save-every-seconds: saves while the input stays open"
start_kv --quiet -v --save-every-seconds 1 -s timer.kvix
echo '{"type":"stored","worker":6,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}' >&3
roundtrip
wait_for test -f timer.kvix || fail "no save by the timer"
wait_for grep -q 'saved timer.kvix (timer)' kerr || fail "the save was not the timer's"
stop_kv
assert_eq "$KV_RC" 0 "exit status"
end

begin "kvindex: output and input errors exit 3"
cp "$S/q" q
echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}' >ev
run kvindex --quiet -s full.kvix ev q
expect_rc 0
kvindex --quiet -s full.kvix q >/dev/full 2>err
rc=$?
expect_rc 3
assert_grep 'error writing standard output' err
mkdir dir
run kvindex --quiet dir q
expect_rc 3
assert_grep '^kvindex: error reading dir: Is a directory$' err
assert_eq "$(wc -l <out)" 1 "the readable file is still read"
end

if command -v script >/dev/null; then
    begin "kvindex: on a terminal, a progress line while input lasts"
    # input typed on the terminal (a tool fed by a pipe leaves the drawing
    # to the head of its pipeline): script's stdin, a FIFO here, is typed
    mkfifo pin
    script -q -f -c "kvindex >/dev/null" ts <pin >/dev/null 2>&1 &
    spid=$!
    exec 5>pin
    echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}' >&5
    wait_for grep -q 'kvindex: <stdin>: 1 records, ' ts || fail "no progress line"
    kpid=$(pgrep -P "$spid" -x kvindex)
    [ -n "$kpid" ] && kill -TERM "$kpid"
    exec 5>&-
    wait "$spid"
    assert_grep 'applied 1 event:' ts
    end
fi
