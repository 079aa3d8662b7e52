#!/usr/bin/env bash
# `make fuzz` builds and runs: every fuzz target (tests/fuzz/run.sh, clang's
# libFuzzer with ASan and UBSan: record codecs, engine wire, snapshot reader,
# token lines, the query path over the three backends) links and runs on its
# seed corpus and its past findings for a bounded time without a finding.
. "$(dirname "$0")/lib.sh"

out=$(mktemp -d "${TMPDIR:-/tmp}/kvix-fuzz.XXXXXX")
begin "tests/fuzz/run.sh builds every target and runs each on its seeds (5 s each)"
# the library's objects kept in build/fuzz/obj (as `make fuzz` keeps them): the
# stages of `make check` build them once
run env KVIX_FUZZ_OUT="$out" KVIX_FUZZ_OBJ="$ROOT/build/fuzz/obj" bash "$ROOT/tests/fuzz/run.sh" 5
expect_rc 0
for t in stream wire snapshot tokens query; do
    assert_grep "^fuzz: $t for 5 s" out
done
[ "$(grep -c '^Done [0-9]* runs' err)" = 5 ] || fail "not every target ran to its end: $(grep -c '^Done' err) of 5"
findings=$(ls "$out" | grep -E '^(crash|leak|oom|timeout)-' || true)
[ -z "$findings" ] || fail "a finding: $findings"
end

begin "each past finding, replayed alone, passes (tests/fuzz/regressions)"
for t in stream wire snapshot query; do
    set -- "$ROOT/tests/fuzz/regressions/$t"/*
    [ -f "$1" ] || fail "no regression input for $t"
    run "$out/fuzz_$t" "$@"
    expect_rc 0
    assert_grep "^Executed .* in [0-9]+ ms" err
done
end
rm -rf "$out"
