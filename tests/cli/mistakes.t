# Mistakes that used to pass silently are said: a snapshot where events are
# read, contradictory options, filters that match nothing.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

begin "a snapshot fed where events are read is said once, not rejected line by line"
echo '{"type":"stored","worker":1,"bs":4,"blocks":[{"local":"a","seq":"b"}]}' | kvindex --quiet -s index.kvix
msg="this is a kvix snapshot, not a stream of events (load it with kvindex -s, read it with kvdump)"
run kvindex --quiet <index.kvix
expect_rc 1
assert_eq "$(cat err)" "kvindex: bad event at <stdin>:1: $msg" "kvindex"
assert_eq "$(cat out)" "{\"error\":\"$msg\"}" "its answer line"
run kvindex --quiet -f auto index.kvix
expect_rc 1
assert_eq "$(wc -l <err)" 1 "one message"
run kvreplay --fast index.kvix
expect_rc 1
assert_eq "$(head -n 1 err)" "kvreplay: bad record at index.kvix:1: $msg" "kvreplay"
assert_eq "$(grep -cF "$msg" err)" 1 "one message"
# the magic alone decides: a line that merely starts with K is a bad line
printf 'KVIX\n{"local":[]}\n' >notsnap
run kvindex --quiet notsnap
expect_rc 1
assert_grep "malformed json" err
assert_eq "$(wc -l <out)" 2 "both lines answered"
end

begin "kvreplay refuses contradictory options"
printf '%s\n' '{"type":"cleared","worker":1,"ts":10}' '{"type":"cleared","worker":2,"ts":20}' >log
run kvreplay --since +100 --until +50 log
expect_rc 2
assert_grep "^kvreplay: --since \+100 is after --until \+50: nothing would be kept$" err
run kvreplay --since 30 --until 20 log
expect_rc 2
run kvreplay --since-eid 5 --until-eid 2 log
expect_rc 2
assert_grep "^kvreplay: --since-eid 5 is above --until-eid 2: nothing would be kept$" err
run kvreplay --fast --speed 2 --rate 5 log
expect_rc 2
assert_grep "^kvreplay: --fast and --speed and --rate: choose one timing \(--fast, --speed or --rate\)$" err
run kvreplay -x 2 --fast log
expect_rc 2
run kvreplay -r 5 -x 2 log
expect_rc 2
assert_eq "$(wc -c <out)" 0 "nothing replayed"
# a window of mixed forms cannot be judged before reading; equal bounds are fine
run kvreplay --fast --since +10 --until +10 log
expect_rc 0
assert_eq "$(wc -l <out)" 1 "the record at the bound"
end

begin "kvreplay says when a filter matches nothing (even with --quiet)"
printf '%s\n' '{"type":"cleared","worker":1,"ts":10}' '{"type":"cleared","worker":2,"ts":20}' >log
run kvreplay --fast --quiet -w 9 -w 1 log
expect_rc 0
assert_eq "$(cat err)" "kvreplay: --worker 9 matched no event of the 2 records read" "one warning"
assert_eq "$(wc -l <out)" 1 "worker 1 kept"
run kvreplay --fast --quiet --since +100 log
expect_rc 0
assert_eq "$(cat err)" "kvreplay: the filters kept none of the 2 records read" "window"
run kvreplay --fast --quiet -w 1 -w 2 log
expect_rc 0
assert_eq "$(cat err)" "" "filters that match say nothing"
end

begin "kvdump says when a filter matches nothing"
printf '%s\n' '{"type":"stored","worker":1,"model":"m","bs":4,"blocks":[{"local":"a","seq":"b"}]}' |
    kvindex --quiet -s s.kvix
run kvdump -w 9 s.kvix
expect_rc 0
assert_eq "$(cat err)" "kvdump: --worker 9: matched nothing in s.kvix" "dump"
run kvdump --stats --model x --worker 9 s.kvix
expect_rc 0
assert_eq "$(cat err)" "kvdump: --model x --worker 9: matched nothing in s.kvix" "stats"
run kvdump --model m -w 1 s.kvix
expect_rc 0
assert_eq "$(cat err)" "" "a filter that matches says nothing"
assert_eq "$(wc -l <out)" 1 "its worker dumped"
end

# on_terminal OUT_TOO CMD...: run CMD with stderr on a pseudo-terminal (and
# stdout too when OUT_TOO is 1, else into ./stdout); what the terminal got
# goes to ./tty
on_terminal() {
    "$PY" - "$@" <<'PYEOF'
import os, pty, subprocess, sys
out_too, cmd = sys.argv[1] == "1", sys.argv[2:]
m, s = pty.openpty()
with open("stdout", "wb") as so:
    p = subprocess.Popen(cmd, stdin=open(os.devnull), stdout=s if out_too else so, stderr=s)
    os.close(s)
    got = b""
    while True:
        try:
            b = os.read(m, 65536)
        except OSError:
            break
        if not b:
            break
        got += b
    p.wait()
open("tty", "wb").write(got)
PYEOF
}

begin "one progress line per terminal: the tool whose stdout is not the terminal draws it"
for i in $(seq 1 200); do echo "{\"type\":\"cleared\",\"worker\":$i,\"ts\":$i}"; done >log
# kvindex reading a file, answers going elsewhere: progress with a percentage
on_terminal 0 kvindex log
grep -q 'kvindex: log: 100% 200 records' tty || fail "no progress line: $(tr '\r\033' '|~' <tty | head -c 300)"
# kvindex printing its answers on the terminal: no progress line there
on_terminal 1 kvindex log
grep -q 'records, ' tty && fail "progress drawn on the terminal kvindex prints to"
grep -q 'applied 200 events' tty || fail "the summary is still printed"
# kvreplay: the same rule
on_terminal 0 kvreplay --fast log
grep -q 'kvreplay: log: 100% 200 read, 200 written' tty || fail "kvreplay draws no progress into a pipe"
on_terminal 1 kvreplay --fast log
grep -q ' read, .* written, [0-9]*/s' tty && fail "kvreplay draws progress on the terminal it prints to"
assert_eq "$(grep -c '"type":"cleared"' tty)" 200 "kvreplay's records on the terminal"
# a log larger than one read: kvreplay's line has a percentage and an eta
# while the log lasts (the first line is drawn at the first record)
for i in $(seq 1 40000); do echo "{\"type\":\"cleared\",\"worker\":$i,\"ts\":$i}"; done >big
on_terminal 0 kvreplay --rate 40000 big
grep -qE 'kvreplay: big: [0-9]+%, eta [0-9]+:[0-9]{2} [0-9]+ read, ' tty ||
    fail "no percentage and eta: $(tr '\r\033' '|~' <tty | head -c 300)"
grep -q 'kvreplay: big: 100% 40000 read, 40000 written' tty || fail "no final 100% line"
end

begin "an error names the option as the user wrote it"
run kvhash -b 2 --plain
expect_rc 2
assert_grep "^kvhash: missing argument to --plain$" err
run kvhash -b 2 -p
assert_grep "^kvhash: missing argument to -p$" err
run kvhash -b 2 --pl nope
assert_grep "^kvhash: bad field for --pl: 'nope' " err
run kvindex --backend
assert_grep "^kvindex: missing argument to --backend$" err
run kvindex --no-such
assert_grep "^kvindex: unknown option --no-such$" err
run kvindex -qt x
assert_grep "^kvindex: bad thread count \(-t\): 'x' " err
run kvindex --threads=x
assert_grep "^kvindex: bad thread count \(--threads\): 'x' " err
run kvreplay -x 0 /dev/null
expect_rc 2
assert_grep "^kvreplay: bad -x: '0' " err
run kvreplay --speed 0 /dev/null
assert_grep "^kvreplay: bad --speed: '0' " err
run kvreplay --fast --wire nope /dev/null
assert_grep "^kvreplay: bad --wire: 'nope' " err
end
