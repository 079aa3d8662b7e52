# `make demo` runs tests/demo.sh: kvreplay acting as the engines of the bundled
# log, kvsub, kvindex with a snapshot, queries, kvdump, and the check that the
# index built through the wire equals the one built from the log. Run it here
# with the tools under test, so the main job cannot rot unnoticed.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

begin "make demo: the main job on the bundled example"
run bash "$ROOT/tests/demo.sh"
expect_rc 0
assert_grep "demo: ok"
assert_grep '"equal":true'
assert_grep '^0:0=ipc://'
# three answers from the snapshot, each naming at least one worker
assert_eq "$(grep -c '^{"id":99[789],' out)" 6 "answers at the end and one minute in"
end
