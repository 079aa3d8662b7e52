# The EXAMPLES of kvhash(1) are transcripts: run every command, compare its output.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

page=$ROOT/man/kvhash.1
begin "kvhash(1) examples print what the page says"
run "$PY" "$ROOT/tests/tools/man_examples.py" "$page"
expect_rc 0
grep -E '^(not ok|#)' out | head -20 | sed 's/^/#   /'
# every "$ " line of the EXAMPLES section was run
want=$(sed -n '/^\.SH EXAMPLES/,/^\.SH /p' "$page" | grep -c '^\$ ')
assert_eq "$(grep -c '^ok - example' out)" "$want" "examples run"
assert_grep "^$want examples$"
[ "$want" -ge 5 ] || fail "only $want examples in the page"
end

begin "the example runner notices a wrong transcript"
sed 's/^6665157333201000639$/6665157333201000638/' "$page" >wrong.1
run "$PY" "$ROOT/tests/tools/man_examples.py" wrong.1
expect_rc 1
assert_grep "^not ok - example 2: echo 0 1 2 3 \| kvhash -b 4 --lora adapter-a --decimal --plain local$"
end

begin "the README's kvhash examples print what it says"
# "    $ cmd" lines of the README's kvhash section, each followed by its output
awk '/^## kvhash/ { on = 1; next } /^## / { on = 0 } on && /^    /' "$ROOT/README.md" |
    sed 's/^    //' >transcript
n=0
while IFS= read -r line; do
    if [[ $line == '$ '* ]]; then
        [ "$n" -gt 0 ] && { cmp -s want.$n got.$n || fail "README example $n: $(cat cmd.$n)"; }
        n=$((n + 1))
        printf '%s\n' "${line#\$ }" >cmd.$n
        bash -c "${line#\$ }" >got.$n 2>&1
        : >want.$n
    elif [ "$n" -gt 0 ]; then
        printf '%s\n' "$line" >>want.$n
    fi
done <transcript
[ "$n" -gt 0 ] && { cmp -s want.$n got.$n || fail "README example $n: $(cat cmd.$n)"; }
[ "$n" -ge 2 ] || fail "only $n examples found in the README's kvhash section"
end
