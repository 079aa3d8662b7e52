#!/usr/bin/env bash
# The main job on the bundled example, with no engine present (`make demo`).
#
# tests/fixtures/demo/events.msgpack.xz is a log of four engines serving the
# first 1000 requests of the Mooncake conversation trace (made by the tools
# themselves: tests/fixtures/demo/make.sh). kvreplay acts as those four
# engines on the ZMQ wire, kvsub subscribes to them, kvindex keeps the index
# and its snapshot; then the snapshot answers the log's queries, kvdump shows
# it, and it is checked against the index built from the log directly.
#   tests/demo.sh            (tools from $KVIX_BIN, else $BUILD/bin, else build/bin)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
BIN=${KVIX_BIN:-$BUILD/bin}
PATH=$BIN:$PATH
LOG=$ROOT/tests/fixtures/demo/events.msgpack.xz
W=$(mktemp -d "${TMPDIR:-/tmp}/kvix-demo.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 1

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; }
die() { echo "demo: FAILED: $*" >&2; exit 1; }

for t in kvreplay kvsub kvindex kvdump; do
    [ -x "$BIN/$t" ] || die "no $BIN/$t (build first: make)"
done

# until CMD succeeds, at most $1 seconds
wait_for() {
    local n=$(($1 * 10))
    shift
    until "$@"; do
        n=$((n - 1))
        [ $n -gt 0 ] || return 1
        sleep 0.1
    done
}

say "the example: $(basename "$LOG") ($(du -k "$LOG" | cut -f1) KiB)"
show "kvreplay --fast $(basename "$LOG") | jq -r .type | sort | uniq -c"
kvreplay -q --fast "$LOG" | jq -r .type | sort | uniq -c
events=$(kvreplay -q --fast --no-queries "$LOG" | wc -l)
[ "$events" -gt 1000 ] || die "the example log has only $events events"

say "four engines publish the log on the ZMQ wire, 100 times the recorded speed"
show "kvreplay --pub ipc://$W/engine --map-file workers --pub-wait 30 --speed 100 $(basename "$LOG") &"
kvreplay --pub "ipc://$W/engine" --map-file workers --pub-wait 30 --speed 100 "$LOG" \
    2>replay.err &
pub=$!
pids+=("$pub")
# the map file grows as the publishers are bound (kvsub would follow it);
# shown once it names the four
four_workers() { [ "$(cat workers 2>/dev/null | wc -l)" = 4 ]; }
wait_for 30 four_workers || die "kvreplay wrote no map file of four workers: $(cat replay.err)"
cat workers

say "the router's side: subscribe, keep a copy of the stream, index it with a snapshot"
show "kvsub --workers-file workers | tee captured.ndjson | kvindex -s index.kvix"
mkfifo feed
kvindex -s index.kvix feed >index.out 2>index.err &
idx=$!
pids+=("$idx")
kvsub --workers-file workers 2>sub.err > >(tee captured.ndjson >feed) &
sub=$!
pids+=("$sub")
wait "$pub" || die "kvreplay failed: $(cat replay.err)"
cat replay.err
lines() { [ "$(wc -l <captured.ndjson)" -ge "$events" ]; }
wait_for 60 lines || die "kvsub passed $(wc -l <captured.ndjson) of $events events"
kill -TERM "$sub"
wait "$sub"
wait "$idx" || die "kvindex failed: $(cat index.err)"
cat sub.err index.err
[ -s index.kvix ] || die "no snapshot"

say "queries: the last three requests of the log, answered from the snapshot"
kvreplay -q --fast "$LOG" | jq -c 'select(.type == "query")' | tail -3 >queries
show "kvindex -q -s index.kvix <queries"
kvindex --quiet -q -s index.kvix queries | tee answers
[ "$(wc -l <answers)" = 3 ] || die "expected three answers"
jq -e '.scores | length > 0' answers >/dev/null || die "no worker holds any of the three prompts"

say "what the snapshot holds"
show "kvdump --stats index.kvix"
kvdump --stats index.kvix || die "kvdump --stats failed"

say "check: the index built through the wire equals the one built from the log"
show "kvreplay --fast $(basename "$LOG") | kvindex -s direct.kvix; kvdump --diff direct.kvix index.kvix"
kvreplay -q --fast "$LOG" | kvindex --quiet -s direct.kvix >/dev/null || die "direct kvindex failed"
kvdump --diff direct.kvix index.kvix || die "the two indexes differ"

say "forensics: the same three prompts against the index as it was one minute into the log"
show "kvreplay --fast --until +60 --no-queries $(basename "$LOG") | kvindex -s minute1.kvix; kvindex -q -s minute1.kvix <queries"
kvreplay -q --fast --until +60 --no-queries "$LOG" | kvindex --quiet -s minute1.kvix >/dev/null ||
    die "kvindex at one minute failed"
kvindex --quiet -q -s minute1.kvix queries | tee answers1
cmp -s answers answers1 && die "one minute in, the index answers as at the end"

say "demo: ok"
