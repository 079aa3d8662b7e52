# kvdump: dump, --stats, --check, --diff; round trips through kvindex; a
# snapshot written by an independent encoder of kvix-snapshot(5); corrupt
# input refused; exit codes.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"

# A small state: branches, two tiers, dp ranks, two partitions, a worker
# left with only an eid.
events() {
    cat <<'EOF'
{"type":"stored","worker":1,"dp":0,"model":"llama","bs":16,"eid":0,"parent":null,"blocks":[{"local":"00000000000000a1","seq":"0000000000000001"},{"local":"00000000000000a2","seq":"0000000000000002"},{"local":"00000000000000a3","seq":"0000000000000003"}]}
{"type":"stored","worker":1,"dp":0,"model":"llama","bs":16,"eid":1,"parent":"0000000000000001","blocks":[{"local":"00000000000000b2","seq":"0000000000000012"}]}
{"type":"stored","worker":1,"dp":0,"model":"llama","bs":16,"eid":2,"medium":"cpu","parent":null,"blocks":[{"local":"00000000000000a1","seq":"0000000000000001"},{"local":"00000000000000a2","seq":"0000000000000002"}]}
{"type":"stored","worker":2,"dp":1,"model":"llama","bs":16,"eid":7,"parent":null,"blocks":[{"local":"00000000000000a1","seq":"0000000000000101"},{"local":"00000000000000a2","seq":"0000000000000102"}]}
{"type":"stored","worker":3,"dp":0,"model":"qwen","tenant":"acme","bs":4,"eid":9,"parent":null,"blocks":[{"local":"00000000000000c1","seq":"0000000000000201"}]}
{"type":"cleared","worker":4,"dp":0,"model":"qwen","tenant":"acme","eid":3}
EOF
}

# Random stored events (chains that branch, several tiers, dp ranks, eids):
# a state with no orphan, so a dump replays into an equal index.
random_events() { # SEED N
    $PY - "$1" "$2" <<'EOF'
import json, random, sys
r = random.Random(int(sys.argv[1]))
held = {}
eid = {}
for i in range(int(sys.argv[2])):
    w, dp = r.randint(1, 5), r.randint(0, 1)
    key = (w, dp)
    blocks = held.setdefault(key, [])
    parent = None
    if blocks and r.random() < 0.7:
        parent = r.choice(blocks)
    n = r.randint(1, 12)
    out = []
    for _ in range(n):
        seq = r.getrandbits(64)
        out.append({"local": "%016x" % r.getrandbits(64), "seq": "%016x" % seq})
    medium = r.choice(["gpu"] * 6 + ["cpu", "disk", "external"])
    eid[key] = eid.get(key, 0) + r.randint(1, 3)
    ev = {"type": "stored", "worker": w, "dp": dp, "model": r.choice(["llama", "qwen"]),
          "bs": 16, "medium": medium, "eid": eid[key],
          "parent": ("%016x" % parent) if parent is not None else None, "blocks": out}
    # one model per worker keeps parents in the partition they were stored in
    ev["model"] = "llama" if w % 2 else "qwen"
    print(json.dumps(ev, separators=(",", ":")))
    blocks.extend(int(b["seq"], 16) for b in out)
    # the same blocks again in another tier now and then
    if r.random() < 0.2:
        ev = dict(ev, medium="cpu" if medium != "cpu" else "disk")
        print(json.dumps(ev, separators=(",", ":")))
EOF
}

begin "dump: stable events, one per chain and extra tier, eid on the last"
events | kvindex -s a.kvix 2>/dev/null
run kvdump a.kvix
expect_rc 0
golden kvdump_events
assert_eq "$(wc -l <out)" 6 "event lines"
assert_eq "$(jq -c 'select(.worker==1) | [.medium, .parent, (.blocks|length), .eid]' out | tr '\n' ' ')" \
    '["gpu",null,3,null] ["cpu",null,2,null] ["gpu","0000000000000001",1,2] ' "worker 1's events"
assert_eq "$(jq -c 'select(.worker==4) | [.type, .eid]' out)" '["cleared",3]' "an eid without blocks"
end

begin "dump | kvindex rebuilds the snapshot byte for byte"
events | kvindex -s a.kvix 2>/dev/null
kvdump a.kvix | kvindex -s b.kvix 2>/dev/null
cmp -s a.kvix b.kvix || fail "small state: snapshots differ"
random_events 7 3000 >ev
kvindex -s r1.kvix <ev 2>/dev/null
run kvdump r1.kvix
expect_rc 0
mv out d1
kvindex -s r2.kvix <d1 2>/dev/null
cmp -s r1.kvix r2.kvix || fail "random state: snapshots differ"
run kvdump r2.kvix
cmp -s d1 out || fail "random state: dumps differ"
[ "$(kvdump --check r1.kvix | grep -o '[0-9]* blocks')" != "0 blocks" ] || fail "empty random state"
# chains make far fewer events than blocks
nb=$(jq '.blocks|length' d1 | paste -sd+ | bc)
nl=$(wc -l <d1)
[ "$nl" -lt "$nb" ] || fail "$nl events for $nb blocks"
end

# Events that leave orphans: chains stored, parents removed before their
# children, engine hashes stored again with other content or elsewhere
# (kvix-events(5): the block moves, its old children stay).
orphan_events() { # SEED N
    $PY - "$1" "$2" <<'EOF'
import json, random, sys
r = random.Random(int(sys.argv[1]))
held = {}
def ev(w, **kw):
    e = {"type": kw.pop("type", "stored"), "worker": w, "dp": 0, "bs": 4}
    e.update(kw)
    print(json.dumps(e, separators=(",", ":")))
for i in range(int(sys.argv[2])):
    w = r.randint(1, 3)
    hs = held.setdefault(w, [])
    if r.random() < 0.5 or not hs:
        parent = r.choice(hs) if hs and r.random() < 0.7 else None
        blocks = []
        for _ in range(r.randint(1, 6)):
            seq = r.randint(1, 60)  # few hashes: they are stored again
            blocks.append({"local": "%x" % r.getrandbits(64), "seq": "%x" % seq})
            hs.append(seq)
        ev(w, parent=("%x" % parent) if parent is not None else None, blocks=blocks,
           medium=r.choice(["gpu", "gpu", "cpu"]))
    else:
        gone = r.sample(hs, min(len(hs), r.randint(1, 3)))
        ev(w, type="removed", hashes=["%x" % h for h in gone])
        hs[:] = [h for h in hs if h not in gone]
EOF
}

begin "dump | kvindex restores orphans exactly (parent_position, parent_canon), as NDJSON and msgpack"
seed=$ROOT/tests/fuzz/seeds/snapshot/orphans.kvix
run kvdump "$seed"
expect_rc 0
assert_eq "$(cat err)" "" "no warning"
assert_eq "$(jq -c 'select(.parent_canon) | [.parent, .parent_position, .parent_canon]' out)" \
    '["0000000000000005",0,"0000000000000001"]' "the orphan's event says where its parent sat"
kvindex -s b.kvix <out 2>/dev/null
run kvdump --diff "$seed" b.kvix
expect_rc 0
cp "$seed" seed.kvix
kvindex --quiet -s seed.kvix </dev/null # the seed is version 1: the same state in version 3
cmp -s seed.kvix b.kvix || fail "seed: snapshots differ"
orphan_events 3 4000 | kvindex -s o.kvix 2>/dev/null
[ "$(kvdump --stats --json o.kvix | jq -s 'map(select(.scope=="partition") | .orphans) | add')" -gt 10 ] ||
    fail "the events left too few orphans"
kvdump o.kvix >d
kvindex -s p.kvix <d 2>err
assert_grep 'rejected 0 records' err
run kvdump --diff o.kvix p.kvix
expect_rc 0
cmp -s o.kvix p.kvix || fail "NDJSON: snapshots differ"
kvreplay --fast -q -f msgpack d >d.mp
kvindex -f msgpack -s q.kvix <d.mp 2>err
assert_grep 'rejected 0 records' err
cmp -s o.kvix q.kvix || fail "msgpack: snapshots differ"
# the extension's rules, the same in both framings
for bad in '"parent":"5","parent_position":0' '"parent":"5","parent_canon":"1"' \
    '"parent":null,"parent_position":0,"parent_canon":"1"' '"parent":"5","parent_position":-1,"parent_canon":"1"'; do
    echo '{"type":"stored","worker":1,"bs":4,'"$bad"',"blocks":[{"local":"1","seq":"9"}]}' >bad
    run kvindex -s r.kvix <bad
    assert_grep 'rejected 1 record:' err
    kvreplay --fast -q -f msgpack bad >bad.mp 2>/dev/null
    [ -s bad.mp ] && fail "kvreplay wrote a record the NDJSON reader refused: $bad"
done
end

begin "dump | kvindex keeps pairs that hold only their eid, through NDJSON and msgpack (100 random histories)"
# 143 of 300 such histories came back different: a pair whose blocks were all
# removed lost its eid (the resume position), and so did one first in its
# partition; a partition emptied by clears was saved, and lost by the dump
$PY "$ROOT/tests/tools/random_history.py" 100 1000 . || fail "random_history.py"
bad=0 eidonly=0
for i in $(seq 0 99); do
    rm -f a.kvix b.kvix c.kvix
    kvindex --quiet -s a.kvix <"h$i.ndjson" >/dev/null 2>&1
    [ -f a.kvix ] || continue
    kvdump a.kvix >d.ndjson
    kvindex --quiet -s b.kvix <d.ndjson >/dev/null 2>&1
    kvreplay --fast -q -f msgpack d.ndjson | kvindex --quiet -f msgpack -s c.kvix >/dev/null 2>&1
    if ! cmp -s a.kvix b.kvix || ! cmp -s a.kvix c.kvix; then
        bad=$((bad + 1))
        [ "$bad" = 1 ] && cp "h$i.ndjson" first-differing.ndjson
    fi
    eidonly=$((eidonly + $(kvdump --stats --json a.kvix | jq -s 'map(select(.scope=="worker" and .blocks==0)) | length')))
done
assert_eq "$bad" 0 "histories whose snapshot a dump does not rebuild"
[ "$eidonly" -ge 50 ] || fail "only $eidonly pairs held just an eid: the histories test too little"
# a partition that holds nothing (cleared without an eid) is not saved
printf '%s\n' '{"type":"stored","worker":1,"model":"gone","bs":4,"blocks":[{"local":"1","seq":"1"}]}' \
    '{"type":"cleared","worker":1,"model":"gone"}' \
    '{"type":"stored","worker":2,"model":"kept","bs":4,"eid":5,"blocks":[{"local":"1","seq":"1"}]}' \
    '{"type":"removed","worker":2,"model":"kept","eid":6,"hashes":["1"]}' | kvindex --quiet -s e.kvix
run kvdump --check e.kvix
assert_grep ': ok: version [0-9]+, 1 partitions, 1 workers, 0 blocks' out
run kvdump e.kvix
assert_eq "$(cat out)" '{"type":"cleared","worker":2,"dp":0,"model":"kept","tenant":"default","medium":"gpu","eid":6,"bs":4}' "the dump"
end

begin "dump reads standard input; filters by model, tenant and worker"
events | kvindex -s a.kvix 2>/dev/null
run kvdump - <a.kvix
expect_rc 0
golden kvdump_events
run kvdump --model qwen --tenant acme a.kvix
assert_eq "$(jq -r .worker out | tr '\n' ' ')" "3 4 " "qwen/acme workers"
run kvdump -w 2 a.kvix
assert_eq "$(jq -r '[.worker,.dp]|@csv' out)" "2,1" "worker 2 only"
run kvdump -m nosuch a.kvix
expect_rc 0
assert_eq "$(wc -c <out)" 0 "no output for an unknown model"
end

begin "--stats: an aligned table, and NDJSON with --json"
events | kvindex -s a.kvix 2>/dev/null
run kvdump --stats a.kvix
expect_rc 0
# memory follows the index's layout, which changes with it: the goldens hold
# every other column, and the next test checks memory against kvindex
sed -E 's/(  |; index )[0-9.]+ (B|KiB|MiB)$/\1MEMORY/' out >stats
golden kvdump_stats stats
# every row has the same column starts: the header's "blocks" column ends
# where each number of it ends
w=$(head -n 1 out | awk '{ print index($0, "blocks") + 5 }')
awk -v w="$w" 'NF > 5 && NR <= 7 && substr($0, w, 1) !~ /[0-9s]/ { bad = 1 } END { exit bad }' out ||
    fail "blocks column not aligned"
run kvdump --stats --json a.kvix
expect_rc 0
sed -E 's/"memory":[0-9]+/"memory":M/' out >stats
golden kvdump_stats_json stats
assert_eq "$(jq -s 'map(.memory | numbers | select(. > 0)) | length' out)" 7 "memory on every row"
jq -e . out >/dev/null || fail "not JSON lines"
assert_eq "$(jq -c 'select(.scope=="partition") | [.model, .workers, .blocks, .unique_blocks, .depth]' out | tr '\n' ' ')" \
    '["llama",2,6,4,2] ["qwen",2,1,1,0] ' "partition rows"
assert_eq "$(jq -c 'select(.scope=="worker" and .worker==1) | [.blocks, .tiers.gpu, .tiers.cpu, .eid, .depth]' out)" \
    '[4,4,2,2,2]' "worker 1 row"
assert_eq "$(jq -c 'select(.scope=="file") | [.partitions, .workers, .blocks]' out)" '[2,4,7]' "file row"
run kvdump --stats --json -w 1 a.kvix
assert_eq "$(jq -c 'select(.scope!="file") | [.scope, .blocks]' out | tr '\n' ' ')" \
    '["partition",4] ["worker",4] ' "filtered to worker 1"
end

# index_bytes SNAPSHOT BACKEND: kvix_index_bytes of a kvindex --listen that
# loaded SNAPSHOT (the index's own accounting, exact, not the summary's
# rounded figure).
index_bytes() {
    # kv.err emptied here first: the background job's own 2>kv.err may come
    # after `listening` has read the last run's line (a dead port: no
    # metrics, seen in make check). The kvindex itself is waited for, not
    # only timeout: the next run locks the same snapshot.
    : >kv.err
    timeout --foreground 60 kvindex --listen 127.0.0.1:0 --backend "$2" -s "$1" </dev/null \
        >kv.out 2>kv.err 3>&- &
    local tpid=$! url kpid i
    PIDS="$PIDS $tpid"
    if url=$(listening kv.err); then
        curl -s "$url/metrics" | awk '$1 == "kvix_index_bytes" { print $2 }'
    else
        fail "kvindex never said where it listens"
    fi
    kpid=$(pgrep -P "$tpid" -x kvindex)
    kill "$tpid" 2>/dev/null
    wait "$tpid" 2>/dev/null
    for i in $(seq 1200); do
        [ -n "$kpid" ] && kill -0 "$kpid" 2>/dev/null || break
        sleep 0.05
    done
}

begin "--stats memory is the index's own: what kvindex reports for the same snapshot"
events | kvindex -s a.kvix 2>/dev/null
random_events 5 400 | kvindex -s r.kvix 2>/dev/null
for snap in a.kvix r.kvix; do
    for be in positional radix reference; do
        run kvdump --stats --json --backend $be $snap
        expect_rc 0
        mem=$(jq 'select(.scope=="file") | .memory' out)
        want=$(index_bytes $snap $be)
        [ -n "$want" ] || fail "$snap $be: no kvix_index_bytes"
        assert_eq "$mem" "$want" "$snap $be: kvdump's memory"
        # the partitions' rows add up to the index less its empty self
        parts=$(jq -s 'map(select(.scope=="partition") | .memory) | add' out)
        [ "$parts" -gt 0 ] && [ "$parts" -lt "$mem" ] || fail "$snap $be: partitions $parts of $mem"
        # unique blocks are the index's count too
        u=$(jq -s 'map(select(.scope=="partition") | .unique_blocks) | add' out)
        kvindex --backend $be -s $snap </dev/null 2>err
        assert_grep ", $u unique blocks, " err
    done
done
run kvdump --stats --backend nosuch a.kvix
expect_rc 2
run kvdump --backend radix a.kvix
expect_rc 2
end

begin "--check: sound snapshots, one line each; several files"
events | kvindex -s a.kvix 2>/dev/null
random_events 3 200 | kvindex -s b.kvix 2>/dev/null
run kvdump --check a.kvix b.kvix
expect_rc 0
assert_eq "$(wc -l <out)" 2 "lines"
assert_grep '^a\.kvix: ok: version 3, 2 partitions, 4 workers, 7 blocks, [0-9]+ bytes, checksum [0-9a-f]{16}$'
run kvdump --check -q a.kvix
expect_rc 0
assert_eq "$(wc -c <out)" 0 "quiet"
run kvdump --check - <a.kvix
assert_grep '^<stdin>: ok'
end

begin "corrupt, truncated, foreign and missing snapshots are refused"
events | kvindex -s a.kvix 2>/dev/null
size=$(stat -c %s a.kvix)
cp a.kvix flip.kvix
printf '\x55' | dd of=flip.kvix bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
head -c $((size - 1)) a.kvix >trunc.kvix
head -c 10 a.kvix >short.kvix
cp a.kvix ver.kvix
printf '\x04' | dd of=ver.kvix bs=1 seek=8 conv=notrunc 2>/dev/null
events >text.kvix
: >empty.kvix
for f in flip trunc short ver text empty; do
    cp $f.kvix $f.orig
    for mode in "" --stats --check; do
        run kvdump $mode $f.kvix
        expect_rc 4
        assert_eq "$(wc -c <out)" 0 "$f $mode: no output"
        assert_grep "^kvdump: $f\.kvix: " err
    done
    cmp -s $f.kvix $f.orig || fail "$f changed"
done
run kvdump --check flip.kvix
assert_grep 'checksum mismatch' err
run kvdump --check trunc.kvix
assert_grep 'truncated' err
run kvdump --check ver.kvix
assert_grep 'unsupported snapshot format version 4' err
run kvdump --check text.kvix
assert_grep 'not a kvix snapshot' err
run kvdump - <flip.kvix
expect_rc 4
assert_grep '<stdin>: .*checksum' err
run kvdump --check a.kvix flip.kvix
expect_rc 4
assert_grep '^a\.kvix: ok' out
run kvdump nosuch.kvix
expect_rc 3
assert_grep 'nosuch.kvix: No such file' err
# kvindex does not save over a snapshot it could not load
run kvindex -s flip.kvix </dev/null
expect_rc 4
cmp -s flip.kvix flip.orig || fail "kvindex overwrote a corrupt snapshot"
end

begin "a snapshot written from the format description (kvix-snapshot(5)) reads back"
# Independent encoders, in python, of exactly what the man page says: the
# version 3 layout kvix writes, and version 1 (VERSIONS 1 AND 2).
$PY - <<'EOF'
import struct, xxhash
def canon(parent_canon, local, pos):
    if pos == 0:
        return local
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent_canon, local), seed=1337)
def close(body):
    body += struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(body), seed=0))
    return body
def rec(kind, payload, flags=0):
    return struct.pack("<IIQ", kind, flags, len(payload)) + payload
# version 3: worker 5 (eid 42) holds a root (engine 0x1) and its child
# (engine 0x2, gpu and cpu): control bytes 1 child | engine, engine | tiers
body = bytearray(b"KVIXSNAP" + struct.pack("<II", 3, 0))
body += rec(1, struct.pack("<IIII", 16, 1, 2, 0) + b"m" + b"t1")
blocks = struct.pack("<BQQ", 1 | 4, 0xa1, 0x1) + struct.pack("<BQQB", 4 | 8, 0xa2, 0x2, 3)
body += rec(2, struct.pack("<QIIQQ", 5, 0, 1, 42, 2) + blocks)
body += struct.pack("<IIQQQQ", 3, 0, 32, 1, 1, 2)
open("py.kvix", "wb").write(close(body))
# version 1: the same state
body = bytearray(b"KVIXSNAP" + struct.pack("<II", 1, 0))
body += struct.pack("<IIII", 1, 16, 1, 2) + b"m" + b"t1"
blocks = [(0, 1, 0xa1, 0x1, 0, 0), (1, 1 | 2, 0xa2, 0x2, 0x1, canon(0, 0xa1, 0))]
body += struct.pack("<IIQIIQQ", 2, 0, 5, 1, 0, 42, len(blocks))
for b in blocks:
    body += struct.pack("<IIQQQQ", *b)
body += struct.pack("<IIQQQ", 3, 0, 1, 1, len(blocks))
open("py1.kvix", "wb").write(close(body))
EOF
run kvdump --check py.kvix py1.kvix
expect_rc 0
assert_grep '^py.kvix: ok: version 3, 1 partitions, 1 workers, 2 blocks, 182 bytes'
assert_grep '^py1.kvix: ok: version 1, 1 partitions, 1 workers, 2 blocks, 195 bytes'
for f in py py1; do
    run kvdump $f.kvix
    expect_rc 0
    assert_eq "$(jq -c '[.model,.tenant,.worker,.medium,.parent,[.blocks[].seq],.eid]' out | tr '\n' ' ')" \
        '["m","t1",5,"gpu",null,["0000000000000001","0000000000000002"],null] ["m","t1",5,"cpu","0000000000000001",["0000000000000002"],42] ' \
        "$f: events"
done
# kvindex loads either and saves the version 3 bytes
kvdump py.kvix | kvindex -s again.kvix 2>/dev/null
cmp -s py.kvix again.kvix || fail "kvindex wrote different bytes"
kvindex -s py1.kvix </dev/null 2>/dev/null
cmp -s py.kvix py1.kvix || fail "kvindex did not save version 1's state as the version 3 bytes"
end

begin "snapshots kvix wrote before version 3 read as they did"
fx=$ROOT/tests/fixtures/snapshot
for v in 1 2; do
    run kvdump --check "$fx/v$v.kvix"
    expect_rc 0
    assert_grep "ok: version $v, 3 partitions, 35 workers, 140 blocks"
    run kvdump "$fx/v$v.kvix"
    expect_rc 0
    cmp -s out "$fx/dump.ndjson" || fail "kvdump v$v.kvix differs from what kvix printed before"
done
# loaded, saved as version 3: the same state as the events give
cp "$fx/v1.kvix" old.kvix
kvindex --quiet -s old.kvix </dev/null
kvindex --quiet -s new.kvix "$fx/events.ndjson"
run kvdump --check old.kvix
# the partition without workers holds nothing: not saved again
assert_grep 'ok: version 3, 2 partitions, 35 workers, 140 blocks'
cmp -s old.kvix new.kvix || fail "a version 1 snapshot re-saved is not the events' snapshot"
end

begin "--diff: replicas that diverge by a known set of blocks"
events >base
cat base >a.ev
cat base >b.ev
# A: worker 1 extends block 3 by two blocks; B: worker 2 gets a new chain and
# worker 1's eid moves on
echo '{"type":"stored","worker":1,"dp":0,"model":"llama","bs":16,"eid":2,"parent":"0000000000000003","blocks":[{"local":"00000000000000a4","seq":"0000000000000004"},{"local":"00000000000000a5","seq":"0000000000000005"}]}' >>a.ev
echo '{"type":"stored","worker":2,"dp":1,"model":"llama","bs":16,"eid":8,"parent":null,"blocks":[{"local":"00000000000000d1","seq":"0000000000000301"}]}' >>b.ev
echo '{"type":"removed","worker":1,"dp":0,"model":"llama","eid":5,"medium":"cpu","hashes":["0000000000000002"]}' >>b.ev
kvindex -s a.kvix <a.ev 2>/dev/null
kvindex -s b.kvix <b.ev 2>/dev/null
run kvdump --diff a.kvix b.kvix
expect_rc 1
golden kvdump_diff
assert_eq "$(tail -n 1 out | jq -c '[.equal, .differing, .only_a, .only_b]')" '[false,2,3,2]' "summary"
# worker 1: A has blocks 4 and 5; block 2 changed tiers (both lists); eid 2 vs 5
assert_eq "$(jq -c 'select(.worker==1) | [[.only_a[].seq], [.only_b[].seq], .eid_a, .eid_b]' out)" \
    '[["0000000000000002","0000000000000004","0000000000000005"],["0000000000000002"],2,5]' "worker 1"
assert_eq "$(jq -c 'select(.worker==2) | [[.only_a[].seq], [.only_b[].seq]]' out)" \
    '[[],["0000000000000301"]]' "worker 2"
run kvdump --diff b.kvix a.kvix
expect_rc 1
assert_eq "$(tail -n 1 out | jq -c '[.only_a, .only_b]')" '[2,3]' "swapped"
run kvdump --diff -q a.kvix b.kvix
expect_rc 1
assert_eq "$(wc -c <out)" 0 "quiet"
run kvdump --diff a.kvix a.kvix
expect_rc 0
assert_eq "$(cat out)" '{"summary":true,"equal":true,"differing":0,"only_a":0,"only_b":0,"blocks_a":9,"blocks_b":9}' "equal"
cp a.kvix a2.kvix
run kvdump --diff a.kvix - <a2.kvix
expect_rc 0
end

begin "--diff: any error is exit 2, as diff(1)"
events | kvindex -s a.kvix 2>/dev/null
head -c 100 a.kvix >bad.kvix
run kvdump --diff a.kvix bad.kvix
expect_rc 2
assert_grep 'bad.kvix: truncated' err
run kvdump --diff a.kvix nosuch.kvix
expect_rc 2
run kvdump --diff a.kvix
expect_rc 2
run kvdump --diff - - <a.kvix
expect_rc 2
end

begin "a reader that goes away is not an error; --diff still tells"
random_events 11 3000 | kvindex -s a.kvix 2>/dev/null
random_events 12 3000 | kvindex -s b.kvix 2>/dev/null
# shellcheck disable=SC2016
bash -c 'trap "" PIPE; kvdump "$1" | head -n 1 >/dev/null; echo "${PIPESTATUS[0]}" >rc' _ a.kvix 2>err
assert_eq "$(cat rc)" 0 "dump into head"
assert_eq "$(cat err)" "" "stderr"
# shellcheck disable=SC2016
bash -c 'trap "" PIPE; kvdump --diff "$1" "$2" | head -n 1 >/dev/null; echo "${PIPESTATUS[0]}" >rc' _ a.kvix b.kvix 2>err
assert_eq "$(cat rc)" 1 "diff into head: the snapshots differ"
assert_eq "$(cat err)" "" "stderr"
end

begin "usage errors exit 2"
for args in "" "a b" "--stats --check x" "--json x" "-q x" "--check" "--check -m x y" "-w abc x" "--bogus x"; do
    # shellcheck disable=SC2086
    run kvdump $args
    expect_rc 2
    assert_grep "^kvdump: " err
done
run kvdump --check - - </dev/null
expect_rc 2
end
