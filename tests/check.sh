#!/usr/bin/env bash
# The whole test suite, as `make check` and CI run it:
#   1. a build with -Werror, then every unit and CLI test;
#   2. the same under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the concurrent tests (*_mt*) under ThreadSanitizer.
# The last line is "N passed, M failed" over all three.
set -u
cd "$(dirname "$0")/.." || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
total_p=0
total_f=0

stage() { # stage NAME MAKEVARS RUNARGS...
    local name=$1 vars=$2 build
    shift 2
    echo "## $name"
    # shellcheck disable=SC2086
    if ! make --no-print-directory -s -j"$jobs" WERROR=1 $vars tests >"$tmp/build.log" 2>&1; then
        cat "$tmp/build.log"
        echo "not ok - $name: build failed"
        total_f=$((total_f + 1))
        return
    fi
    # shellcheck disable=SC2086
    build=$(make --no-print-directory -s $vars print-build)
    tests/run.sh "$build" "$@" | tee "$tmp/run.log"
    local last
    last=$(tail -n 1 "$tmp/run.log")
    local p=${last%% passed*} f=${last#*passed, }
    f=${f%% failed*}
    total_p=$((total_p + p))
    total_f=$((total_f + f))
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

stage "build with -Werror: unit and CLI tests" ""
KVIX_TEST_SCALE=${KVIX_SAN_SCALE:-0.25} stage "AddressSanitizer + UndefinedBehaviorSanitizer" "SANITIZE=address,undefined"
KVIX_TEST_SCALE=${KVIX_SAN_SCALE:-0.25} stage "ThreadSanitizer: concurrent tests" "SANITIZE=thread" --mt
echo "$total_p passed, $total_f failed"
[ "$total_f" = 0 ]
