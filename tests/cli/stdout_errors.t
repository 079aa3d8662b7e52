#!/usr/bin/env bash
# Standard output is checked at exit, with the true reason: a reader that went
# away (head) is not an error, a full disk is (exit 3, "No space left on
# device"), whatever errno the run left behind.
. "$(dirname "$0")/lib.sh"

begin "kvindex | head -1: no error, exit 0"
for i in $(seq 5000); do echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"1","seq":"2"}]}'; echo '{"local":["1"]}'; done >in
kvindex --quiet in 2>err | head -1 >out
rc=${PIPESTATUS[0]}
assert_eq "$rc" 0 "kvindex's status"
assert_no_grep 'error writing' err
assert_eq "$(wc -l <out)" 1 "lines read"
end

begin "kvindex >/dev/full: exit 3 with the reason"
echo '{"local":["1"]}' >q
run sh -c 'kvindex --quiet q >/dev/full'
expect_rc 3
assert_grep '^kvindex: error writing standard output: No space left on device$' err
end
