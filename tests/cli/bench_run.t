# bench/run.sh: a full run writes every part's section; a partial run
# (bench/run.sh PATTERN) rewrites only the parts it selects and keeps the others.
# The parts here are small stand-ins (BENCH_PARTS) that print a counter.
. "$(dirname "$0")/lib.sh"

fake_parts() { # fake_parts DIR: three parts whose sections say how often they ran
    mkdir -p "$1"
    local p
    for p in 10-alpha 20-beta 30-gamma; do
        cat >"$1/$p.sh" <<EOS
n=\$(cat "$T/count-$p" 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n >"$T/count-$p"
echo "## section $p"
echo
echo "$p ran \$n times"
EOS
    done
}

begin "bench/run.sh: a full run writes every section, a partial run replaces only the selected ones"
fake_parts parts
export BENCH_PARTS=$T/parts BENCH_OUT=$T/RESULTS.md
run bash "$ROOT/bench/run.sh"
expect_rc 0
for p in 10-alpha 20-beta 30-gamma; do
    assert_grep "^<!-- bench part: $p [0-9-]+ -->\$" RESULTS.md
    assert_grep "^$p ran 1 times\$" RESULTS.md
done
run bash "$ROOT/bench/run.sh" beta
expect_rc 0
assert_grep '^10-alpha ran 1 times$' RESULTS.md
assert_grep '^20-beta ran 2 times$' RESULTS.md
assert_grep '^30-gamma ran 1 times$' RESULTS.md
assert_no_grep 'beta ran 1 times' RESULTS.md
assert_eq "$(grep -c '^## section' RESULTS.md)" 3 "sections after a partial run"
assert_eq "$(grep '^## section' RESULTS.md | tr '\n' ' ')" \
    "## section 10-alpha ## section 20-beta ## section 30-gamma " "sections in part order"
assert_grep 'bench/run.sh beta' RESULTS.md
# A second partial run of another part keeps the first partial run's section.
run bash "$ROOT/bench/run.sh" gamma
assert_grep '^20-beta ran 2 times$' RESULTS.md
assert_grep '^30-gamma ran 2 times$' RESULTS.md
assert_grep '^10-alpha ran 1 times$' RESULTS.md
end

begin "bench/run.sh: a pattern matching no part, or a failing part, leaves the results as they were"
fake_parts parts
export BENCH_PARTS=$T/parts BENCH_OUT=$T/RESULTS.md
run bash "$ROOT/bench/run.sh"
cp RESULTS.md before.md
run bash "$ROOT/bench/run.sh" nosuchpart
expect_rc 2
assert_grep "no part matches 'nosuchpart'" err
cmp -s before.md RESULTS.md || fail "RESULTS.md changed by a run of nothing"
echo 'exit 1' >>parts/20-beta.sh
run bash "$ROOT/bench/run.sh" beta
[ "$rc" != 0 ] || fail "a failing part exited 0"
cmp -s before.md RESULTS.md || fail "RESULTS.md changed by a failing part"
end

begin "bench/run.sh: text written by hand around a part's generated block survives partial and full runs"
fake_parts parts
export BENCH_PARTS=$T/parts BENCH_OUT=$T/RESULTS.md
run bash "$ROOT/bench/run.sh"
expect_rc 0
assert_grep '^<!-- generated: part 20-beta -->$' RESULTS.md
assert_eq "$(grep -c '^<!-- end generated -->$' RESULTS.md)" 3 "generated blocks"
# Hand-written notes before and after beta's generated block.
awk '{ print }
     /^<!-- bench part: 20-beta / { print "Note before beta, by hand." }
     /^<!-- end generated -->$/ && ++n == 2 { print ""; print "Before/after figures, by hand." }' \
    RESULTS.md >edited.md && mv edited.md RESULTS.md
run bash "$ROOT/bench/run.sh" beta
expect_rc 0
assert_grep '^20-beta ran 2 times$' RESULTS.md
assert_no_grep 'beta ran 1 times' RESULTS.md
assert_grep '^Note before beta, by hand\.$' RESULTS.md
assert_grep '^Before/after figures, by hand\.$' RESULTS.md
run bash "$ROOT/bench/run.sh"
expect_rc 0
assert_grep '^20-beta ran 3 times$' RESULTS.md
assert_grep '^30-gamma ran 2 times$' RESULTS.md
assert_eq "$(grep -c 'by hand' RESULTS.md)" 2 "hand-written lines after a full run"
# In place: the note still opens beta's section, the figures still follow its block.
assert_eq "$(grep -A1 '^<!-- bench part: 20-beta ' RESULTS.md | tail -1)" "Note before beta, by hand." "note's place"
assert_eq "$(awk '/^<!-- end generated -->$/ && ++n == 2 { getline; getline; print }' RESULTS.md)" \
    "Before/after figures, by hand." "figures' place"
assert_eq "$(grep -c '^## section' RESULTS.md)" 3 "sections after a full run"
end

begin "bench/run.sh: a section from before the generated markers is replaced whole, with a warning"
fake_parts parts
export BENCH_PARTS=$T/parts BENCH_OUT=$T/RESULTS.md
printf '%s\n' '# old results' '' '<!-- bench part: 20-beta 2026-01-01 -->' '## section 20-beta' '' \
    'old beta figures' '' >RESULTS.md
run bash "$ROOT/bench/run.sh" beta
expect_rc 0
assert_grep "20-beta's section had no generated markers: replaced whole" err
assert_no_grep 'old beta figures' RESULTS.md
assert_eq "$(grep -c '^## section 20-beta' RESULTS.md)" 1 "beta sections"
assert_grep '^<!-- generated: part 20-beta -->$' RESULTS.md
end

begin "bench/run.sh: the file opens with bench/summary.md, full run or partial, as the summary now reads"
fake_parts parts
export BENCH_PARTS=$T/parts BENCH_OUT=$T/RESULTS.md BENCH_SUMMARY=$T/summary.md
printf '%s\n' '## Summary' '' 'kvix against the alternatives, first edition.' >summary.md
run bash "$ROOT/bench/run.sh"
expect_rc 0
# the summary comes after the title and the machine's lines, before the first section
assert_eq "$(grep -n '^## ' RESULTS.md | head -2 | cut -d: -f2 | tr '\n' '|')" \
    "## Summary|## section 10-alpha|" "summary first, then the sections"
assert_grep '^kvix against the alternatives, first edition\.$' RESULTS.md
sed -i 's/first edition/second edition/' summary.md
run bash "$ROOT/bench/run.sh" gamma
expect_rc 0
assert_grep '^kvix against the alternatives, second edition\.$' RESULTS.md
assert_no_grep 'first edition' RESULTS.md
assert_eq "$(grep -c '^## Summary$' RESULTS.md)" 1 "one summary after a partial run"
assert_grep '^10-alpha ran 1 times$' RESULTS.md
# the repository's own: RESULTS.md opens with bench/summary.md as it is
assert_eq "$(sed -n '/^## Summary/,/^<!-- bench part/p' "$ROOT/bench/RESULTS.md" | sed '$d')" \
    "$(cat "$ROOT/bench/summary.md"; echo)" "bench/RESULTS.md's summary is bench/summary.md"
end
