#!/usr/bin/env bash
# `make fuzz` builds and runs: the record-codec target (tests/fuzz/run.sh,
# clang's libFuzzer with ASan and UBSan) links and runs on its seed corpus
# for a bounded time without a finding.
. "$(dirname "$0")/lib.sh"

begin "tests/fuzz/run.sh builds the codec target and runs it on the seeds (10 s)"
out=$(mktemp -d "${TMPDIR:-/tmp}/kvix-fuzz.XXXXXX")
run env KVIX_FUZZ_OUT="$out" bash "$ROOT/tests/fuzz/run.sh" 10
expect_rc 0
assert_grep '^Done [0-9]+ runs' err
ls "$out" | grep -q '^crash-' && fail "a crash was found: $(ls "$out" | grep crash-)"
rm -rf "$out"
end
