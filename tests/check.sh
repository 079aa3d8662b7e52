#!/usr/bin/env bash
# The whole test suite, as `make check` and CI run it:
#   1. a build with -Werror, then every unit and CLI test;
#   2. the same under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the concurrent tests (*_mt*) under ThreadSanitizer.
# The sanitizer builds are made in the background (niced) while the tests of
# the stages before them run: those tests spend much of their time waiting on
# servers and engines, and the build takes the CPU they leave. Each stage's
# tests start once its own build is done.
# Each stage ends with the time it took (its build's wait included); the
# last lines list the stages' times, then "N passed, M failed" over all three.
set -u
cd "$(dirname "$0")/.." || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
total_p=0
total_f=0

tmp=$(mktemp -d)
builder=""
# stopped early: the background build goes too
trap '[ -n "$builder" ] && pkill -TERM -P "$builder" 2>/dev/null; rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

build() { # build KEY MAKEVARS: make a stage's tests; log in $tmp/KEY.log, status in $tmp/KEY.rc
    # shellcheck disable=SC2086
    make --no-print-directory -s -j"$jobs" WERROR=1 $2 tests >"$tmp/$1.log" 2>&1
    echo $? >"$tmp/$1.rc.tmp" && mv "$tmp/$1.rc.tmp" "$tmp/$1.rc"
}

times=""
stage() { # stage NAME KEY MAKEVARS RUNARGS...
    local name=$1 key=$2 vars=$3 build t0=$SECONDS
    shift 3
    echo "## $name"
    while [ ! -f "$tmp/$key.rc" ]; do sleep 0.5; done
    if [ "$(cat "$tmp/$key.rc")" != 0 ]; then
        cat "$tmp/$key.log"
        echo "not ok - $name: build failed"
        total_f=$((total_f + 1))
        stage_done "$name" "$t0"
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
    stage_done "$name" "$t0"
}

stage_done() { # stage_done NAME T0: say how long the stage took
    local line
    line=$(printf '%5d s  %s' $((SECONDS - $2)) "$1")
    echo "# took $((SECONDS - $2)) s: $1"
    times="$times$line"$'\n'
}

t0=$SECONDS
build release ""
stage_done "the -Werror build" "$t0"
(
    renice -n 10 "$BASHPID" >/dev/null 2>&1 # the tests running meanwhile come first
    build asan SANITIZE=address,undefined
    build tsan SANITIZE=thread
) &
builder=$!

stage "build with -Werror: unit and CLI tests" release ""
KVIX_TEST_SCALE=${KVIX_SAN_SCALE:-0.25} stage "AddressSanitizer + UndefinedBehaviorSanitizer" \
    asan "SANITIZE=address,undefined"
KVIX_TEST_SCALE=${KVIX_SAN_SCALE:-0.25} stage "ThreadSanitizer: concurrent tests" \
    tsan "SANITIZE=thread" --mt
builder=""
echo "## time per stage"
printf '%s' "$times"
printf '%5d s  %s\n' "$SECONDS" "in all"
echo "$total_p passed, $total_f failed"
[ "$total_f" = 0 ]
