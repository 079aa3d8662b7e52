#!/usr/bin/env bash
# Run the unit binaries and CLI tests of one build directory.
#   tests/run.sh BUILD [--mt]     (--mt: only tests named *_mt*, for ThreadSanitizer)
# Tests run KVIX_TEST_JOBS at a time (default: the number of CPUs), each with
# its output in a file of its own; they are printed whole, one after the
# other, in the same order whatever order they end in. Every test is isolated
# (its own mktemp directory, ports the OS chose), so two can run at once.
# Prints every test's line, then "N passed, M failed" as the last line.
# KVIX_TEST_TIMES=FILE appends "SECONDS NAME" for each test to FILE.
set -u
build=${1:?usage: tests/run.sh BUILD [--mt]}
only_mt=0
[ "${2:-}" = --mt ] && only_mt=1
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
jobs=${KVIX_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "tests/run.sh: bad KVIX_TEST_JOBS '$jobs'" >&2; exit 2; }
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

work=$(mktemp -d "${TMPDIR:-/tmp}/kvix-run.XXXXXX")
shopt -s nullglob
trap 'rm -rf "$work"' EXIT
kinds=() paths=() names=()
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    [ $only_mt = 1 ] && [[ $name != *_mt* ]] && continue
    kinds+=(unit) paths+=("$t") names+=("$name")
done
for t in "$root"/tests/cli/*.t; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .t)
    [ $only_mt = 1 ] && [[ $name != *_mt* ]] && continue
    kinds+=(cli) paths+=("$t") names+=("$name")
done
n=${#names[@]}

# The order tests start in: the longest known first, so that the last to
# start are short and the jobs end together (an order hint only: output and
# results do not depend on it; a name not here starts in list order).
first=" fuzz failalloc kvsub_live kvreplay_demo snapshot_crash test_index_diff options_drift man_examples nats_replicas "
order=()
for ((i = 0; i < n; i++)); do [[ $first == *" ${names[i]} "* ]] && order+=("$i"); done
for ((i = 0; i < n; i++)); do [[ $first == *" ${names[i]} "* ]] || order+=("$i"); done

# The processes a test left running: every process it started carries its
# tag in the environment (a zombie shows none: it has ended).
leftovers() {
    local f
    for f in $(grep -lzxF "KVIX_RUN_TAG=$1" /proc/[0-9]*/environ 2>/dev/null); do
        f=${f#/proc/}
        echo "${f%/environ}"
    done
}

one() { # one I: run test I, its output in $work/I.out, then its status in $work/I.rc
    local i=$1 t0=$EPOCHREALTIME t1 rc tag left p k
    tag=$work/$i
    if [ "${kinds[i]}" = unit ]; then
        KVIX_RUN_TAG=$tag "${paths[i]}" >"$work/$i.out" 2>&1 </dev/null
    else
        KVIX_RUN_TAG=$tag KVIX_BIN="$build/bin" bash "${paths[i]}" >"$work/$i.out" 2>&1 </dev/null
    fi
    rc=$?
    t1=$EPOCHREALTIME
    # A test ends with every process it started gone (a moment for ones it
    # has just killed); one left running is a failure, then stopped here.
    for ((k = 0; k < 50; k++)); do
        left=$(leftovers "$tag")
        [ -z "$left" ] && break
        sleep 0.1
    done
    for p in $left; do
        echo "not ok - ${names[i]} left process $p running: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
        kill -9 "$p" 2>/dev/null
    done >>"$work/$i.out"
    [ -n "${KVIX_TEST_TIMES:-}" ] &&
        awk -v a="$t0" -v b="$t1" -v n="${kinds[i]}: ${names[i]}" \
            'BEGIN { printf "%.2f %s\n", b - a, n }' >>"$KVIX_TEST_TIMES"
    echo "$rc" >"$work/$i.rc.tmp" && mv "$work/$i.rc.tmp" "$work/$i.rc"
}

started=0
shown=0
while [ "$shown" -lt "$n" ]; do
    # Keep $jobs tests running: a test is running from its start to its .rc.
    rcs=("$work"/*.rc)
    done_n=${#rcs[@]}
    while [ "$started" -lt "$n" ] && [ $((started - done_n)) -lt "$jobs" ]; do
        i=${order[started]}
        # a runner fault in one (not the test's) still ends it, as a failure
        ( (one "$i"); [ -f "$work/$i.rc" ] || echo 125 >"$work/$i.rc" ) &
        started=$((started + 1))
    done
    if [ -f "$work/$shown.rc" ]; then
        echo "# ${kinds[shown]}: ${names[shown]}"
        if [ "${kinds[shown]}" = unit ]; then
            grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$work/$shown.out"
        else
            cat "$work/$shown.out"
        fi
        count "$work/$shown.out" "$(cat "$work/$shown.rc")" "${names[shown]}"
        rm -f "$work/$shown.out"
        shown=$((shown + 1))
        continue
    fi
    wait -n 2>/dev/null || sleep 0.05 # a test ended (or none left to wait for)
done
wait
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
