#!/usr/bin/env bash
# kvindex --peers against peers that hang or answer big (tests/tools/fake_peer.py):
# a recovery is bounded in time whatever the peers do (--peers-timeout), and
# an answer goes to a file as it arrives, so what kvindex holds follows the
# index it builds, not the answer's size. Peak memory from /usr/bin/time.
# Every wait is bounded.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
FP=$ROOT/tests/tools/fake_peer.py

# peer NAME MODE [ARG]: a fake peer in the background; its URL in NAME.url
peer() {
    local n=$1 i
    shift
    "$PY" "$FP" "$n.port" "$@" &
    PIDS="$PIDS $!"
    for i in $(seq 200); do [ -s "$n.port" ] && break; sleep 0.05; done
    echo "http://127.0.0.1:$(cat "$n.port")" >"$n.url"
}

# peak: the peak RSS (kB) /usr/bin/time wrote last into err
peak() { sed -n 's/^maxrss=\([0-9]*\)$/\1/p' err | tail -n 1; }

begin "kvindex --peers: seven peers that never answer hold the start --peers-timeout, not 20 s each"
urls=""
for i in 1 2 3 4 5 6 7; do
    peer "h$i" hang
    urls="$urls${urls:+,}$(cat "h$i.url")"
done
# 140 s before (each peer's /snapshot and /dump waited 10 s); at most 3 s now
run timeout 60 kvindex --peers "$urls" --peers-timeout 3 -s a.kvix </dev/null
expect_rc 0
assert_grep 'no peer' err
end

begin "kvindex --peers: a big answer that is no snapshot is refused without being held in memory"
peer g garbage 104857600
run /usr/bin/time -f 'maxrss=%M' kvindex --peers "$(cat g.url)" -s a.kvix </dev/null
expect_rc 0
assert_grep 'no peer answered' err
# 100 MB of it was held twice before (the answer, then a copy): ~210 MB
[ "$(peak)" -lt 81920 ] || fail "peak RSS $(peak) kB for a 100 MB answer"
end

begin "kvindex --peers: a /dump is applied event by event: its memory follows the index"
"$PY" "$ROOT/tests/tools/make_dump.py" 50000 dump.json
peer d dump dump.json
run /usr/bin/time -f 'maxrss=%M' kvindex --peers "$(cat d.url)" -s a.kvix </dev/null
expect_rc 0
assert_grep "recovered from $(cat d.url)/dump: 50000 events applied, 0 rejected" err
# a 17 MB dump took ~230 MB as one jansson document before; ~45 MB now
[ "$(peak)" -lt 122880 ] || fail "peak RSS $(peak) kB for a 17 MB dump"
run kvdump --check a.kvix
assert_grep ', 8 workers, 200000 blocks' out
end
