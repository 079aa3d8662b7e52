#!/usr/bin/env bash
# Progress lines on a terminal (script(1) gives the tools one): one tool of a
# pipeline draws, the one at its head; kvreplay --mooncake counts its progress
# in requests (its trace is read ahead, so bytes read said 100 % at once);
# every other line on stderr starts on a cleared line, never glued to one.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
TRACE=$FIXTURES/mooncake/conversation_trace.jsonl.xz

# onterm CMD: CMD with a terminal for stdin, stdout and stderr (its output
# in ./term, raw: carriage returns and escapes kept)
onterm() {
    script -qec "$1" /dev/null >term 2>&1 </dev/null
    rc=$?
}

begin "kvreplay | kvindex >file: only kvreplay draws; a file read by kvindex alone is drawn"
onterm "kvreplay --mooncake $TRACE --limit 400 --workers 8 | kvindex -s x.kvix >answers"
assert_eq "$rc" 0 "pipeline status"
grep -aq $'\rkvreplay: .*requests' term || fail "kvreplay drew no progress line"
grep -aq $'\rkvindex: <stdin>' term && fail "kvindex, fed by a pipe, drew a progress line too"
kvreplay --quiet --mooncake "$TRACE" --limit 400 --workers 8 >log
onterm "kvindex -s y.kvix log >answers2"
grep -aq $'\rkvindex: log: .* records' term || fail "kvindex reading a file drew no progress line"
end

begin "kvreplay --mooncake: progress in requests (never 100 % at the start), its summary on a line of its own"
onterm "kvreplay --mooncake $TRACE --limit 400 --workers 8 >/dev/null"
assert_eq "$rc" 0 "status"
tr '\r' '\n' <term | grep -a 'requests,' >lines
[ -s lines ] || fail "no progress line"
first=$(head -n 1 lines)
case $first in *" 100%"*) fail "the first progress line says 100 %: $first" ;; esac
tail -n 1 lines | grep -q '100% 400 requests,' || fail "the last progress line: $(tail -n 1 lines)"
# the summaries come after the progress line was cleared (\r ESC[K), at the
# start of a line
grep -a 'kvreplay: mooncake: 400 requests' term >sum
grep -aq $'\r\033\\[Kkvreplay: mooncake: 400 requests' sum || fail "the mooncake summary is glued to the progress line: $(cat -v sum | head -c 300)"
"$PY" -c '
import re, sys
t = open(sys.argv[1], "rb").read()
for m in re.finditer(rb"kvreplay: (mooncake: )?[0-9]+ (records read|requests)", t):
    before = t[max(0, m.start() - 4):m.start()]
    if not (before.endswith(b"\r\033[K") or before.endswith(b"\n") or m.start() == 0):
        sys.exit("glued: %r" % t[max(0, m.start() - 40):m.end()])
' term || fail "a summary line is glued to the progress line"
end
