#!/usr/bin/env bash
# kvindex -s keeps what it learned of a hybrid model's KV cache groups and of
# an EAGLE engine across a restart (the snapshot's extension record 64,
# kvix-snapshot(5)): a sliding-window group's eviction after the restart
# still leaves the full group's block, and an EAGLE partition's token
# queries still hash EAGLE's windows.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

begin "kvindex -s: a hybrid model's groups and an EAGLE partition survive a restart"
cat >ev1.ndjson <<'EOF2'
{"type":"stored","worker":1,"bs":4,"group":1,"kind":"full_attention","parent":null,"blocks":[{"local":"1","seq":"a1"},{"local":"2","seq":"a2"},{"local":"3","seq":"a3"}]}
{"type":"stored","worker":1,"bs":4,"group":0,"kind":"sliding_window","parent":"a2","hashes":["a3"]}
{"type":"stored","worker":2,"model":"e","bs":4,"eagle":true,"parent":null,"blocks":[{"local":"1a92ffa9004c0851","seq":"b1"}]}
EOF2
run kvindex --quiet -s s.kvix ev1.ndjson
expect_rc 0
# without groups' kinds, no record: a snapshot of a plain index is as before
printf '%s\n' '{"type":"stored","worker":1,"bs":4,"parent":null,"blocks":[{"local":"1","seq":"a1"}]}' |
    kvindex --quiet -s plain.kvix
# after the restart: group 0's eviction of block 0 (a sliding window's) keeps it
printf '%s\n' '{"type":"removed","worker":1,"group":0,"hashes":["a1"]}' \
    '{"local":["1","2","3"]}' >ev2.ndjson
run kvindex --quiet -s s.kvix ev2.ndjson
expect_rc 0
assert_eq "$(jq -c '[.blocks, .scores[0].blocks]' out)" "[3,3]" "the full group's blocks after the restart"
want=$(echo 1 2 3 4 5 | kvhash -b 4 --eagle -p local)
assert_eq "$want" 1a92ffa9004c0851 "the EAGLE block's local hash"
printf '%s\n' '{"model":"e","tokens":[1,2,3,4,5]}' >q.ndjson
run kvindex --quiet -q -s s.kvix q.ndjson
assert_eq "$(jq -c '[.blocks, .scores[0].blocks]' out)" "[1,1]" "the EAGLE partition's query after the restart"
# a plain store into the EAGLE partition is still refused
printf '%s\n' '{"type":"stored","worker":3,"model":"e","bs":4,"parent":null,"blocks":[{"local":"9","seq":"c1"}]}' >ev3.ndjson
run kvindex -s s.kvix ev3.ndjson
expect_rc 1
assert_grep "partition e/default hashes eagle blocks, this event plain ones" err
end
