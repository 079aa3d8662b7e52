# Every man page's EXAMPLES are transcripts the suite runs (as jq runs its
# manual): a "$ command" line, then exactly what it prints.
# (kvhash(1), kvindex(1) and kvix-events(5) have their own tests too.)
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

# (kvsub(1)'s examples subscribe to kvreplay(1) playing the engines.)
for page in "$ROOT"/man/*.[157]; do
    name=$(basename "$page")
    begin "$name: every example runs and prints what the page says"
    want=$(sed -n '/^\.SH EXAMPLES/,/^\.SH /p' "$page" | grep -c '^\$ ')
    if [ "$want" = 0 ]; then
        fail "no runnable example (\"\$ command\" lines) in the EXAMPLES section"
    else
        # kvreplay(1) and kvsub(1) play a trace: the examples see a copy of it
        run "$PY" "$ROOT/tests/tools/man_examples.py" "$page" \
            "$FIXTURES/mooncake/conversation_trace.jsonl.xz"
        expect_rc 0
        grep -E '^(not ok|#)' out | head -20 | sed 's/^/#   /'
        assert_eq "$(grep -c '^ok - example' out)" "$want" "examples run"
    fi
    end
done

begin "README.md: every transcript runs and prints what the README says"
# in order, in one directory where tests/ is the repository's (the README
# names the bundled fixtures by their path)
run "$PY" "$ROOT/tests/tools/man_examples.py" "$ROOT/README.md" "$ROOT/tests"
expect_rc 0
grep -E '^(not ok|#)' out | head -20 | sed 's/^/#   /'
want=$(grep -c '^    \$ ' "$ROOT/README.md")
assert_eq "$(grep -c '^ok - example' out)" "$want" "examples run"
[ "$want" -ge 8 ] || fail "only $want transcripts in the README"
end
