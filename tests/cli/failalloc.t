# Out of memory (issue 10): a copy of kvindex whose every allocation in kvix's
# own code can be made to fail (tests/failalloc/failalloc.c, linked with
# --wrap; build/tests/kvindex_failalloc). For every N up to the run's count,
# the N-th allocation fails: kvindex must exit 6 saying "out of memory",
# never crash, leave no temporary file, and leave a snapshot that passes
# kvdump --check; failing before any input is applied, the old file byte
# for byte. The points it covers: lock, load, index, reader, codecs, queries,
# the snapshot writer. A few allocations are survived by design (a query's
# ranking scratch: the answer is sorted instead): a run that exits 0 must
# then have written exactly what a run without a failure writes, answers and
# snapshot both.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

FA=$KVIX_BIN/../tests/kvindex_failalloc

begin "the N-th allocation fails: exit 6, the snapshot sound (the old one if it failed loading)"
[ -x "$FA" ] || fail "no $FA (make tests builds it)"
for i in $(seq 1 20); do
    printf '{"type":"stored","worker":%d,"bs":4,"eid":%d,"blocks":[{"local":"%x","seq":"%x"},{"local":"1","seq":"%x"}]}\n' \
        $((i % 3)) "$i" "$i" "$i" $((i + 1000))
done >e1
{ sed 's/"eid":\([0-9]*\)/"eid":1\1/; s/"worker":/"worker":1/' e1; cat "$FIXTURES/kvindex/answers.ndjson"; } >e2
kvindex --quiet -s old.kvix <e1 || fail "the old snapshot could not be made"
cp old.kvix snap.kvix
env KVIX_FAILALLOC_REPORT=1 "$FA" --quiet -s snap.kvix <e2 >full.out 2>err
cp snap.kvix full.kvix
all=$(sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p' err)
[ -n "$all" ] && [ "$all" -gt 100 ] || fail "no allocation count ($all)"
mkdir run
bad=0
for n in $(seq 1 4 "${all:-0}") $(seq $((${all:-0} - 29)) "${all:-0}"); do
    cp old.kvix run/snap.kvix
    (cd run && KVIX_FAILALLOC_N=$n "$FA" --quiet -s snap.kvix <../e2 >../out 2>../err)
    rc=$?
    why=""
    if [ "$rc" = 0 ]; then
        cmp -s out full.out || why="exit 0 with other answers"
        kvdump --diff full.kvix run/snap.kvix >/dev/null 2>&1 || why="$why, exit 0 with another snapshot"
    else
        [ "$rc" = 6 ] || why="exit $rc"
        grep -q "out of memory" err || why="$why, no 'out of memory' in: $(head -c 200 err)"
    fi
    kvdump --check run/snap.kvix >/dev/null 2>&1 || why="$why, kvdump --check fails"
    grep -q -e "cannot load" -e "cannot lock" err && ! cmp -s old.kvix run/snap.kvix &&
        why="$why, the old snapshot changed"
    extra=$(ls -A run | grep -v -x -e snap.kvix -e snap.kvix.lock)
    [ -z "$extra" ] || why="$why, left: $extra"
    if [ -n "$why" ]; then
        fail "allocation $n of $all failed:$why"
        bad=$((bad + 1))
        [ $bad -lt 5 ] || break
    fi
done
end

begin "with --listen: out of memory mid-input stops the service, frees the index, exits 6"
[ -x "$FA" ] || fail "no $FA (make tests builds it)"
for i in $(seq 1 20); do
    printf '{"type":"stored","worker":%d,"bs":4,"eid":%d,"blocks":[{"local":"%x","seq":"%x"},{"local":"1","seq":"%x"}]}\n' \
        $((i % 3)) "$i" "$i" "$i" $((i + 1000))
done >e1
# the run's count: the service serves until told to stop once input ends
# (about 100: the positional backend makes its slab chunks and shard tables
# as nodes come, not 64 tables up front)
env KVIX_FAILALLOC_REPORT=1 timeout -s TERM 2 "$FA" --quiet --listen 127.0.0.1:0 -s s.kvix <e1 >/dev/null 2>err
all=$(sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p' err)
[ -n "$all" ] && [ "$all" -gt 50 ] || fail "no allocation count ($all)"
# a quarter, half and three quarters in: while the service runs and input is applied
for n in $((${all:-0} / 4)) $((${all:-0} / 2)) $((${all:-0} * 3 / 4)); do
    rm -f s.kvix s.kvix.lock
    KVIX_FAILALLOC_N=$n timeout -s KILL 20 "$FA" --quiet --listen 127.0.0.1:0 -s s.kvix <e1 >/dev/null 2>err
    rc=$?
    assert_eq "$rc" 6 "allocation $n of $all: exit status"
    assert_grep "out of memory" err
    assert_no_grep "Sanitizer" err
    [ ! -e s.kvix ] || kvdump --check s.kvix >/dev/null 2>&1 || fail "allocation $n: the snapshot is unsound"
done
end
