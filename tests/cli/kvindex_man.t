# The EXAMPLES of kvindex(1) are transcripts: run every command, compare its output.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

page=$ROOT/man/kvindex.1
begin "kvindex(1) examples print what the page says"
run "$PY" "$ROOT/tests/tools/man_examples.py" "$page"
expect_rc 0
grep -E '^(not ok|#)' out | head -20 | sed 's/^/#   /'
want=$(sed -n '/^\.SH EXAMPLES/,/^\.SH /p' "$page" | grep -c '^\$ ')
assert_eq "$(grep -c '^ok - example' out)" "$want" "examples run"
[ "$want" -ge 5 ] || fail "only $want examples in the page"
end

begin "kvix-events(5) examples print what the page says"
page=$ROOT/man/kvix-events.5
run "$PY" "$ROOT/tests/tools/man_examples.py" "$page"
expect_rc 0
grep -E '^(not ok|#)' out | head -20 | sed 's/^/#   /'
want=$(sed -n '/^\.SH EXAMPLES/,/^\.SH /p' "$page" | grep -c '^\$ ')
assert_eq "$(grep -c '^ok - example' out)" "$want" "examples run"
[ "$want" -ge 3 ] || fail "only $want examples in the page"
end
