#!/usr/bin/env bash
# kvindex -s: one writer per snapshot (an flock on SNAPSHOT.lock for the
# process's life), symlinked snapshot paths followed, and a snapshot path
# that can never be saved refused before any input is read.
. "$(dirname "$0")/lib.sh"

E1='{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}'
E2='{"type":"stored","worker":2,"bs":4,"blocks":[{"local":"1","seq":"a1"}]}'
Q='{"local":["1"]}'

# wait_for COMMAND...: until it succeeds, at most 20 s (no timed assertion)
wait_for() {
    local i
    for i in $(seq 200); do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}
holds() { [ "$(cat "$1" 2>/dev/null)" = "$2" ]; } # holds LOCKFILE PID

begin "kvindex: a second writer of one snapshot exits 3 and the first's events are kept"
mkfifo feed
kvindex --quiet -s s.kvix feed 2>k1.err &
k1=$!
exec 3>feed
echo "$E1" >&3
wait_for holds s.kvix.lock "$k1" || fail "the first kvindex holds no lock"
echo "$E2" >in2
run kvindex --quiet -s s.kvix in2
expect_rc 3
assert_grep "^kvindex: cannot lock s.kvix: in use by another process \(pid $k1 holds s.kvix.lock\)$" err
[ -e s.kvix ] && fail "the refused kvindex saved"
exec 3>&-
wait "$k1"
assert_eq "$?" 0 "the first kvindex's status"
echo "$Q" >q
run kvindex -q --quiet -s s.kvix q
assert_eq "$(jq -c '[.scores[].worker]' out)" '[1]' "workers in the snapshot"
# the lock died with its holder: the next writer goes on from the snapshot
run kvindex --quiet -s s.kvix in2
expect_rc 0
run kvindex -q --quiet -s s.kvix q
assert_eq "$(jq -c '[.scores[].worker]' out)" '[1,2]' "workers after the second run"
end

begin "kvindex -q takes no lock: it answers while a writer runs"
echo "$E1" | kvindex --quiet -s s.kvix
mkfifo feed
kvindex --quiet -s s.kvix feed 2>k1.err &
k1=$!
exec 3>feed
echo "$E2" >&3
wait_for holds s.kvix.lock "$k1" || fail "the writer holds no lock"
echo "$Q" >q
run kvindex -q --quiet -s s.kvix q
expect_rc 0
assert_eq "$(jq -c '[.scores[].worker]' out)" '[1]' "workers in the snapshot"
exec 3>&-
wait "$k1"
assert_eq "$?" 0 "the writer's status"
end

begin "kvindex: two names of one snapshot (a symbolic link) share its lock"
mkfifo feed
ln -s real.kvix link.kvix
kvindex --quiet -s real.kvix feed 2>k1.err &
k1=$!
exec 3>feed
echo "$E1" >&3
wait_for holds real.kvix.lock "$k1" || fail "the first kvindex holds no lock"
echo "$E2" >in2
run kvindex --quiet -s link.kvix in2
expect_rc 3
assert_grep "^kvindex: cannot lock link.kvix: in use by another process \(pid $k1 holds real.kvix.lock\)$" err
exec 3>&-
wait "$k1"
end

begin "kvindex: a symlinked snapshot is followed: the target is updated, the link stays"
mkdir store
echo "$E1" | kvindex --quiet -s store/real.kvix
ln -s store/real.kvix link.kvix
ln -s link.kvix link2.kvix
echo "$E2" >in2
run kvindex --quiet -s link2.kvix in2
expect_rc 0
[ -L link.kvix ] && [ -L link2.kvix ] || fail "a link was replaced by a file"
assert_eq "$(readlink link.kvix)" store/real.kvix "the link's target"
[ -e store/real.kvix.lock ] || fail "no lock beside the target"
ls -A | grep -q 'tmp' && fail "a temporary file was left: $(ls -A)"
echo "$Q" >q
run kvindex -q --quiet -s store/real.kvix q
assert_eq "$(jq -c '[.scores[].worker]' out)" '[1,2]' "workers in the target"
# a dangling link: the save creates its target
ln -s new.kvix dangling.kvix
run kvindex --quiet -s dangling.kvix in2
expect_rc 0
[ -L dangling.kvix ] && [ -f new.kvix ] || fail "the dangling link's target was not created"
end

begin "kvindex: a snapshot path that cannot be saved fails before reading input"
mkfifo feed
# nothing ever writes to feed: opening it would block, so an exit proves no
# read (timeout only bounds a regression; it is not an assertion on time)
run timeout -k 5 20 kvindex --quiet -s '' feed
expect_rc 2
assert_grep '^kvindex: empty snapshot path \(-s\)$' err
run timeout -k 5 20 kvindex --quiet -s nodir/x.kvix feed
expect_rc 3
assert_grep '^kvindex: cannot lock nodir/x.kvix: cannot create the lock file nodir/x.kvix.lock: ' err
end
