# kvindex with writer threads (also run under ThreadSanitizer): the same answers,
# rejections (reported from the writer threads with their positions) and
# snapshot as inline application, and --strict stopping with threads.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

# Several workers storing chains, removing leaves, clearing; queries along
# the stored prefixes; some stores with a parent nobody holds. Fixed seed.
workload() { # workload SEED EVENTS
    "$PY" -c '
import random, sys
rnd = random.Random(int(sys.argv[1])); n = int(sys.argv[2])
held = {}
prefixes = [[rnd.getrandbits(64) for _ in range(10)] for _ in range(5)]
seqn = 0
for i in range(n):
    w, dp = rnd.randrange(1, 7), rnd.randrange(2)
    chains = held.setdefault((w, dp), [])
    r = rnd.random()
    if r < 0.55:
        p = rnd.choice(prefixes); k = rnd.randrange(1, 10); blocks = []
        for loc in p[:k]:
            seqn += 1; blocks.append((loc, seqn))
        chains.append(blocks)
        bl = ",".join("{\"local\":\"%016x\",\"seq\":\"%016x\"}" % b for b in blocks)
        print("{\"type\":\"stored\",\"worker\":%d,\"dp\":%d,\"bs\":16,\"blocks\":[%s]}" % (w, dp, bl))
    elif r < 0.75 and chains and chains[-1]:
        b = chains[-1].pop()
        print("{\"type\":\"removed\",\"worker\":%d,\"dp\":%d,\"hashes\":[\"%016x\"]}" % (w, dp, b[1]))
    elif r < 0.78:
        held[(w, dp)] = []
        print("{\"type\":\"cleared\",\"worker\":%d,\"dp\":%d}" % (w, dp))
    elif r < 0.80:
        print("{\"type\":\"stored\",\"worker\":%d,\"dp\":%d,\"bs\":16,\"parent\":\"%016x\",\"blocks\":[{\"local\":\"01\",\"seq\":\"02\"}]}" % (w, dp, rnd.getrandbits(64) | 1 << 63))
    else:
        p = rnd.choice(prefixes)
        print("{\"id\":%d,\"local\":[%s]}" % (i, ",".join("\"%016x\"" % x for x in p[:rnd.randrange(1, 11)])))
' "$1" "$2"
}

S=$(mktemp -d "${TMPDIR:-/tmp}/kvix-kvindex-mt.XXXXXX")
trap 'rm -rf "$S"' EXIT
workload 11 1500 >"$S/w.ndjson"

begin "kvindex --threads N answers and rejects exactly as inline"
cp "$S/w.ndjson" .
run kvindex --quiet w.ndjson
cp out inline.out
sort err >inline.err
grep -q '^kvindex: bad event at w.ndjson:[0-9]*: ' inline.err || fail "the workload has no rejection"
[ "$(wc -l <inline.out)" -gt 50 ] || fail "too few answers"
for n in 1 2 4; do
    run kvindex --quiet --threads "$n" w.ndjson
    [ "$rc" = 1 ] || fail "--threads $n: exit $rc, expected 1"
    cmp -s out inline.out || fail "--threads $n: answers differ from inline"
    sort err >threads.err
    cmp -s threads.err inline.err || { fail "--threads $n: rejections differ"; diff inline.err threads.err | head -4 | sed 's/^/#   /'; }
done
end

begin "kvindex --threads: the snapshot equals the inline one's answers, and the summary counts match"
cp "$S/w.ndjson" .
grep -v '"id"' w.ndjson >events
grep '"id"' w.ndjson >queries
run kvindex -s inline.kvix events
sed -E 's/, [0-9.]+ (bytes|KiB|MiB)$//' err | grep -v 'bad event' >inline.sum
run kvindex --threads 3 -s threads.kvix events
sed -E 's/, [0-9.]+ (bytes|KiB|MiB)$//' err | grep -v 'bad event' >threads.sum
cmp -s inline.sum threads.sum || { fail "summaries differ"; diff inline.sum threads.sum | sed 's/^/#   /'; }
run kvindex -q --quiet -s inline.kvix queries
cp out a
run kvindex -q --quiet -s threads.kvix queries
cmp -s out a || fail "answers from the two snapshots differ"
end

begin "kvindex --threads --strict: stops at a rejection reported by a writer thread, saves, exits 5"
cp "$S/w.ndjson" .
run kvindex --quiet --threads 2 --strict -s st.kvix w.ndjson
expect_rc 5
assert_grep '^kvindex: bad event at w.ndjson:[0-9]+: ' err
[ -f st.kvix ] || fail "nothing saved"
end
