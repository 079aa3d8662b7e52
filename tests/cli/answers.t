# One answer per line, always: kvhash and kvindex as coprocesses, rejected
# lines answered with their error, unknown partitions said, and kvix reading
# back what kvix writes (decimal hashes, token lines, token_ids).
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

# ask FD_IN FD_OUT LINE: write a line, read its answer (bounded wait: a
# missing answer fails the test instead of hanging it)
ask() {
    printf '%s\n' "$3" >&"$1"
    answer=""
    IFS= read -r -t 20 answer <&"$2" || answer="<no answer>"
}

begin "kvhash as a coprocess: every line, good or bad, gets its answer line"
coproc KVH { kvhash -b 2 -p local 2>/dev/null; }
kvh_pid=$KVH_PID # bash unsets KVH_PID once the coprocess is reaped
ask "${KVH[1]}" "${KVH[0]}" "1 2"
assert_eq "$answer" 9581a6bbf9cef45a "good line"
ask "${KVH[1]}" "${KVH[0]}" '{"id":2,"tokens":[1,-2]}'
assert_eq "$answer" "{\"id\":2,\"error\":\"token '-2' is negative\"}" "bad line"
ask "${KVH[1]}" "${KVH[0]}" "not a token"
assert_eq "$answer" "{\"error\":\"token 'not' is not a number\"}" "bad line without id"
ask "${KVH[1]}" "${KVH[0]}" "1 2"
assert_eq "$answer" 9581a6bbf9cef45a "good line after"
exec {KVH[1]}>&-
wait "$kvh_pid"
assert_eq "$?" 1 "exit status"
end

begin "kvindex -q as a coprocess: every line gets its answer line"
echo '{"type":"stored","worker":1,"bs":2,"model":"m","blocks":[{"local":"9581a6bbf9cef45a","seq":"1"}]}' |
    kvindex --quiet -s s.kvix
coproc KVI { kvindex -q --quiet -s s.kvix 2>/dev/null; }
kvi_pid=$KVI_PID # bash unsets KVI_PID once the coprocess is reaped
ask "${KVI[1]}" "${KVI[0]}" '{"id":"a","model":"m","tokens":[1,2]}'
assert_eq "$answer" '{"id":"a","blocks":1,"scores":[{"worker":1,"dp":0,"blocks":1,"tokens":2,"tiers":{"gpu":1}}]}' "answer"
ask "${KVI[1]}" "${KVI[0]}" '{"id":"b","model":"m","tokens":[1,-2]}'
assert_eq "$answer" '{"id":"b","error":"\"tokens\"[1] out of range (0 to 4294967295)"}' "bad query"
ask "${KVI[1]}" "${KVI[0]}" '{"id":"c","model":"m",'
assert_eq "${answer%%:*}" '{"error"' "malformed line"
ask "${KVI[1]}" "${KVI[0]}" '{"type":"cleared","worker":1}'
assert_eq "$answer" '{"error":"event in query-only mode (-q)"}' "event with -q"
ask "${KVI[1]}" "${KVI[0]}" '{"id":"d","model":"x","tokens":[1,2]}'
assert_eq "$answer" '{"id":"d","blocks":0,"scores":[],"unknown":"model"}' "unknown model"
ask "${KVI[1]}" "${KVI[0]}" '{"id":"e","model":"m","tenant":"t","tokens":[1,2]}'
assert_eq "$answer" '{"id":"e","blocks":0,"scores":[],"unknown":"tenant"}' "unknown tenant"
exec {KVI[1]}>&-
wait "$kvi_pid"
assert_eq "$?" 1 "exit status"
end

begin "an unknown model or tenant is warned about once per name"
echo '{"type":"stored","worker":1,"bs":2,"model":"m","blocks":[{"local":"1","seq":"1"}]}' >in
for i in 1 2 3; do
    echo '{"model":"x","local":["1"]}'
    echo '{"model":"m","tenant":"t","local":["1"]}'
    echo '{"model":"y","tenant":"t","local":["1"]}'
done >>in
echo '{"model":"m","local":["1"]}' >>in
run kvindex in
expect_rc 0
assert_eq "$(grep -c '"unknown":"model"' out)" 6 "unknown model answers"
assert_eq "$(grep -c '"unknown":"tenant"' out)" 3 "unknown tenant answers"
assert_eq "$(grep -c unknown out)" 9 "the known partition's answer says nothing"
cat >want <<'EOF2'
kvindex: unknown model "x" at in:2: the index has never seen it (answered with "unknown":"model")
kvindex: unknown tenant "t" of model "m" at in:3: the index has never seen it (answered with "unknown":"tenant")
kvindex: unknown model "y" at in:4: the index has never seen it (answered with "unknown":"model")
EOF2
grep '^kvindex: unknown' err >warned
cmp -s want warned || fail "warnings: $(cat err)"
# --quiet means quiet: the answers say "unknown", stderr nothing
run kvindex --quiet in
expect_rc 0
assert_eq "$(grep -c unknown out)" 9 "answers with --quiet"
assert_eq "$(cat err)" "" "stderr with --quiet"
end

begin "a name met before any event is said only if the input ends without it (a log that starts with a query)"
{
    echo '{"model":"m","local":["1"]}'
    echo '{"model":"typo","local":["1"]}'
    echo '{"type":"stored","worker":1,"bs":2,"model":"m","blocks":[{"local":"1","seq":"1"}]}'
    echo '{"model":"m","local":["1"]}'
} >in
run kvindex in
expect_rc 0
assert_eq "$(grep -c '"unknown":"model"' out)" 2 "both early queries are answered unknown"
grep '^kvindex: unknown' err >warned
assert_eq "$(cat warned)" 'kvindex: unknown model "typo" at in:2: the index has never seen it (answered with "unknown":"model")' "only the name still unknown at the end"
# the --mooncake pipeline: its log starts with a query, then fills the partition
kvreplay --quiet --mooncake "$FIXTURES/mooncake/conversation_trace.jsonl.xz" --limit 20 --workers 2 >log
run kvindex log
expect_rc 0
assert_no_grep '^kvindex: unknown' err
end

begin "kvindex reads back what kvhash writes: decimal hashes, token lines"
# the blocks of tokens 1..8, stored under their decimal hashes (u64, past 2^63)
echo 1 2 3 4 5 6 7 8 | kvhash -b 4 -d >h.json
read -r l0 l1 < <($PY -c 'import json,sys; print(*json.load(sys.stdin)["local"])' <h.json)
[ "${#l0}" -ge 19 ] || fail "expected a large decimal hash, got $l0"
printf '{"type":"stored","worker":3,"bs":4,"blocks":[{"local":%s,"seq":%s},{"local":%s,"seq":18446744073709551615}]}\n' \
    "$l0" "$l0" "$l1" >in
echo "1 2 3 4 5 6 7 8" >>in
echo '{"id":1,"token_ids":[1,2,3,4,5,6,7,8]}' >>in
echo '{"id":2,"prompt_token_ids":[1,2,3,4]}' >>in
printf '{"id":3,"local":[%s,%s]}\n' "$l0" "$l1" >>in
echo '{"type":"removed","worker":3,"hashes":[18446744073709551615]}' >>in
echo '{"id":4,"local":["cb38e4d7fb2dca5c","e8d3ec39b907b74c"]}' >>in
run kvindex --quiet in
expect_rc 0
cat >want <<'EOF2'
{"blocks":2,"scores":[{"worker":3,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}}]}
{"id":1,"blocks":2,"scores":[{"worker":3,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}}]}
{"id":2,"blocks":1,"scores":[{"worker":3,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}
{"id":3,"blocks":2,"scores":[{"worker":3,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}}]}
{"id":4,"blocks":2,"scores":[{"worker":3,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}
EOF2
cmp -s want out || { fail "answers"; diff want out | sed 's/^/#   /'; }
# the decimal hashes were read exactly: the dump shows them in hex
kvindex --quiet -s s.kvix <in >/dev/null
kvdump s.kvix >dump
assert_grep "\"local\":\"$(printf '%016x' "$l0")\"" dump
end

begin "kvindex -q answers every line it is given, a blank one too: a coprocess never waits"
echo '{"type":"stored","worker":1,"bs":2,"blocks":[{"local":"1","seq":"1"}]}' | kvindex --quiet -s s.kvix
# one line written, one line read back before the next is written (a blank
# line first: the format is decided without a second line)
"$PY" - "$KVIX_BIN/kvindex" <<'PYEOF' >co.out 2>co.err || fail "coprocess: $(tail -3 co.err)"
import select, subprocess, sys
p = subprocess.Popen([sys.argv[1], "-q", "--quiet", "-s", "s.kvix"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True, bufsize=1)
for line in ["", '{"local":["1"]}', "   ", "[1,2]", ""]:
    p.stdin.write(line + "\n")
    p.stdin.flush()
    if not select.select([p.stdout], [], [], 60)[0]:
        sys.exit("no answer to %r" % line)
    print(p.stdout.readline(), end="")
p.stdin.close()
sys.exit(p.wait())
PYEOF
cat >want <<'EOF2'
{"blocks":0,"scores":[]}
{"blocks":1,"scores":[{"worker":1,"dp":0,"blocks":1,"tokens":2,"tiers":{"gpu":1}}]}
{"blocks":0,"scores":[]}
{"blocks":1,"scores":[]}
{"blocks":0,"scores":[]}
EOF2
cmp -s want co.out || { fail "answers"; diff want co.out | sed 's/^/#     /'; }
# without -q a blank line is no record (an event stream's blank lines are skipped)
printf '\n\n{"local":["1"]}\n' | kvindex --quiet -s s.kvix >plain
assert_eq "$(wc -l <plain)" 1 "answers without -q"
end
