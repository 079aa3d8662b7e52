# A snapshot save killed with SIGKILL at random moments leaves on disk either
# the previous snapshot or the new one, whole: never a torn file.
# The saver is tests/unit/test_snapshot in its saver mode: it writes two known
# large states, A then B then A..., to one path, until killed.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

saver=$KVIX_BIN/../tests/test_snapshot
KILLS=${KVIX_CRASH_KILLS:-30}
# 3 x 18000 blocks, 2.2 MB a file: a save is mostly write and fsync time
export KVIX_TEST_SCALE=${KVIX_CRASH_SCALE:-0.03}

begin "kill -9 during saves: the snapshot is always A or B, whole"
if [ ! -x "$saver" ]; then
    fail "no saver binary $saver"
else
    KVIX_TEST_SNAPSHOT_STATES=$T "$saver" || fail "writing the reference states"
    kvdump --check a.kvix b.kvix >/dev/null || fail "reference states do not check"
    cmp -s a.kvix b.kvix && fail "the two states are equal"
    cp b.kvix snap.kvix
    torn=0 hit=0 saves=0
    RANDOM=$(( $(date +%s) % 32768 ))
    for i in $(seq 1 "$KILLS"); do
        KVIX_TEST_SNAPSHOT_SAVER=$T/snap.kvix "$saver" 2>log &
        pid=$!
        # wait until the states are built, so the kill lands in the save loop
        for _ in $(seq 1 600); do
            grep -q ready log 2>/dev/null && break
            sleep 0.05
        done
        sleep "0.$(printf '%03d' $((RANDOM % 600)))"
        kill -9 "$pid"
        wait "$pid" 2>/dev/null
        saves=$((saves + $(grep -c '^saved' log)))
        # a temporary file left behind: the kill came in the middle of a save
        if compgen -G 'snap.kvix.tmp.*' >/dev/null; then
            hit=$((hit + 1))
            rm -f snap.kvix.tmp.*
        fi
        if ! kvdump --check -q snap.kvix; then
            torn=$((torn + 1))
            cp snap.kvix "torn.$i.kvix"
        elif ! cmp -s snap.kvix a.kvix && ! cmp -s snap.kvix b.kvix; then
            torn=$((torn + 1))
            cp snap.kvix "mixed.$i.kvix"
        fi
    done
    echo "# $KILLS kills, $hit in the middle of a save, $saves saves completed"
    assert_eq "$torn" 0 "snapshots neither A nor B"
    [ "$hit" -ge 1 ] || fail "no kill landed in the middle of a save"
    [ "$saves" -ge 1 ] || fail "no save completed"
    # and kvindex loads what is there
    kvindex -s snap.kvix --quiet </dev/null || fail "kvindex could not load the snapshot"
fi
end

begin "kill -9 of kvindex saving as it goes: the snapshot always loads"
# stored chains for 8 workers, enough that saves come often and take a while
$PY - <<'PYEOF' >ev
import json, random
r = random.Random(5)
for i in range(40000):
    w = r.randint(1, 8)
    out = [{"local": "%016x" % r.getrandbits(64), "seq": "%016x" % r.getrandbits(64)}
           for _ in range(r.randint(1, 16))]
    print(json.dumps({"type": "stored", "worker": w, "eid": i, "bs": 16, "parent": None,
                      "blocks": out}, separators=(",", ":")))
PYEOF
bad=0 seen=0
RANDOM=$(( $(date +%s) % 32768 ))
for i in $(seq 1 10); do
    touch marker && sleep 0.02
    kvindex -s idx.kvix --quiet --save-every-events 2000 <ev 2>log &
    pid=$!
    # wait for a save of this run, then kill at a random moment after it
    for _ in $(seq 1 1200); do
        [ -n "$(find . -maxdepth 1 -name idx.kvix -newer marker)" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    sleep "0.$(printf '%03d' $((RANDOM % 500)))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    [ -f idx.kvix ] || continue
    seen=$((seen + 1))
    if ! kvdump --check -q idx.kvix; then
        bad=$((bad + 1))
        cp idx.kvix "bad.$i.kvix"
    fi
done
echo "# 10 kills, $seen snapshots on disk checked"
assert_eq "$bad" 0 "snapshots that do not check"
[ "$seen" -ge 1 ] || fail "kvindex never saved before being killed"
# what the killed saves left (one more planted, so there is one) is removed
# by the next kvindex of the path, and only that
echo x >idx.kvix.tmp.Zz9Yy8
echo x >idx.kvix.tmp.short
run kvindex -s idx.kvix </dev/null
expect_rc 0
assert_grep '^kvindex: idx.kvix: removed [0-9]+ temporary files? of interrupted saves$' err
compgen -G 'idx.kvix.tmp.??????' >/dev/null && fail "temporary files of killed saves are left"
[ -f idx.kvix.tmp.short ] || fail "a file of another name was removed"
end
