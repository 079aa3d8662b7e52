#!/usr/bin/env bash
# The repository stands alone: nothing the build, the tests, the benchmarks or
# the tools read lives outside it (a clone has no sibling folders; .ci/run
# proves it by running `make check` in a fresh clone). Every data file the
# tests read is in tests/fixtures, with its licence.
. "$(dirname "$0")/lib.sh"

begin "nothing outside the repository is referred to"
up='\.\./'shared env=KVIX_'SHA'RED
run grep -rnE -- "$up|${env}" "$ROOT/Makefile" "$ROOT/.ci" "$ROOT/bench" "$ROOT/cmd" \
    "$ROOT/include" "$ROOT/lib" "$ROOT/tests" "$ROOT/man" "$ROOT/completions" "$ROOT/README.md"
expect_rc 1
[ -s out ] && sed 's/^/#     /' out | head -5
end

begin "the data the tests read is in the repository, with its licence"
for f in mooncake/conversation_trace.jsonl.xz mooncake/synthetic_trace.jsonl.xz \
    mooncake/LICENSE-APACHE mooncake/README.md vllm/cases.json vllm/map-stored.bin; do
    [ -s "$FIXTURES/$f" ] || fail "no $FIXTURES/$f"
done
end

begin ".ci/run tests a clean clone, not the checkout in place"
assert_grep 'git clone' "$ROOT/.ci/run"
assert_grep '^make check$' "$ROOT/.ci/run"
end
