# Mistakes that used to pass silently are said: a snapshot where events are
# read, contradictory options, filters that match nothing.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

begin "a snapshot fed where events are read is said once, not rejected line by line"
echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"a","seq":"b"}]}' | kvindex --quiet -s index.kvix
msg="this is a kvix snapshot, not a stream of events (load it with kvindex -s, read it with kvdump)"
run kvindex --quiet <index.kvix
expect_rc 1
assert_eq "$(cat err)" "kvindex: bad event at <stdin>:1: $msg" "kvindex"
assert_eq "$(cat out)" "{\"error\":\"$msg\"}" "its answer line"
run kvindex --quiet -f auto index.kvix
expect_rc 1
assert_eq "$(wc -l <err)" 1 "one message"
run kvreplay --fast index.kvix
expect_rc 1
assert_eq "$(head -n 1 err)" "kvreplay: bad record at index.kvix:1: $msg" "kvreplay"
assert_eq "$(grep -cF "$msg" err)" 1 "one message"
# the magic alone decides: a line that merely starts with K is a bad line
printf 'KVIX\n{"local":[]}\n' >notsnap
run kvindex --quiet notsnap
expect_rc 1
assert_grep "malformed json" err
assert_eq "$(wc -l <out)" 2 "both lines answered"
end
