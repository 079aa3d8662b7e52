#!/usr/bin/env bash
# Run the unit binaries and CLI tests of one build directory.
#   tests/run.sh BUILD [--mt]     (--mt: only tests named *_mt*, for ThreadSanitizer)
# Prints every test's line, then "N passed, M failed" as the last line.
set -u
build=${1:?usage: tests/run.sh BUILD [--mt]}
only_mt=0
[ "${2:-}" = --mt ] && only_mt=1
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
passed=0
failed=0

count() { # count FILE RC NAME: add a file's ok / not ok lines; a crash is a failure
    local p f
    p=$(grep -c '^ok - ' "$1")
    f=$(grep -c '^not ok - ' "$1")
    if [ "$2" != 0 ] && [ "$f" = 0 ]; then
        echo "not ok - $3 exited with status $2"
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    [ $only_mt = 1 ] && [[ $name != *_mt* ]] && continue
    echo "# unit: $name"
    "$t" >"$log" 2>&1
    rc=$?
    grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$log"
    count "$log" $rc "$name"
done
for t in "$root"/tests/cli/*.t; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .t)
    [ $only_mt = 1 ] && [[ $name != *_mt* ]] && continue
    echo "# cli: $name"
    KVIX_BIN="$build/bin" bash "$t" >"$log" 2>&1 </dev/null
    rc=$?
    cat "$log"
    count "$log" $rc "$name"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
