# kvhash: contract vectors, input shapes, output forms, bad lines, exit codes.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"

# contract section 1, block size 4: tokens 1..12
begin "contract vectors: local and seq, hex and decimal"
seq 1 12 | tr '\n' ' ' >in
run kvhash -b 4 -d in
expect_rc 0
# decimal hashes are JSON integers: read with python (jq 1.6 rounds them)
pyj() { $PY -c "import json,sys; [print(json.dumps($1, separators=(',', ':'))) for r in map(json.loads, sys.stdin)]" <out; }
assert_eq "$(pyj 'r["local"]')" '[14643705804678351452,16777012769546811212,483935686894639516]' local
assert_eq "$(pyj 'r["seq"]')" '[14643705804678351452,4945711292740353085,12583592247330656132]' seq
run kvhash -b 4 in
assert_eq "$(jq -r '.local[0]' out)" "$(printf '%016x' 14643705804678351452)" "hex of local[0]"
assert_eq "$(jq -r '.seq[2]' out)" "$(printf '%016x' 12583592247330656132)" "hex of seq[2]"
golden kvhash_vectors
end

begin "contract vectors: one block, LoRA, block size 2"
echo 0 1 2 3 >in
run kvhash -b 4 --decimal --plain local in
assert_eq "$(cat out)" 9143094415614847814 "tokens 0..3"
run kvhash -b 4 --lora adapter-a --decimal --plain local in
assert_eq "$(cat out)" 6665157333201000639 "LoRA adapter-a"
run kvhash -b 4 --lora '' --decimal --plain local in
assert_eq "$(cat out)" 9143094415614847814 "an empty LoRA name is no LoRA"
echo 0 1 2 3 4 5 | kvhash -b 2 -d -p local >out
assert_eq "$(cat out)" "10918435022357402928 10731123482949079648 12189426826560619506" "bs 2"
end

begin "multimodal keys (--mm, \"mm\") and a salt (--salt, \"salt\") as the routers hash them"
echo 0 1 2 3 >in
run kvhash -b 4 --decimal --plain local --mm 0=2a in
assert_eq "$(cat out)" 18280081842874931122 "contract vector: multimodal hash {42}"
echo '{"tokens":[0,1,2,3],"mm":[["000000000000002a"]]}' >in2
run kvhash -b 4 --decimal --plain local in2
assert_eq "$(cat out)" 18280081842874931122 "the line's mm"
# a vLLM identifier (64 hex digits) gives its first 16; a block's hashes in any order
id=000000000000002aff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00
run kvhash -b 4 --decimal --plain local --mm "0=$id" in
assert_eq "$(cat out)" 18280081842874931122 "64-digit identifier"
echo 0 1 2 3 4 5 6 7 >in3
run kvhash -b 4 --mm 1=2a,7 in3
run2=$(kvhash -b 4 --mm 1=7 --mm 1=2a in3)
assert_eq "$(cat out)" "$run2" "a block's hashes in any order, one --mm or two"
want=$($PY -c '
import struct, xxhash
t = struct.pack("<8I", *range(8))
l0 = xxhash.xxh3_64_intdigest(t[:16], seed=1337)
l1 = xxhash.xxh3_64_intdigest(t[16:] + struct.pack("<2Q", 7, 42), seed=1337)
s1 = xxhash.xxh3_64_intdigest(struct.pack("<2Q", l0, l1), seed=1337)
print("%016x %016x" % (l1, s1))')
assert_eq "$(jq -r '"\(.local[1]) \(.seq[1])"' out)" "$want" "block 1's local and the rolling hash after it"
# Dynamo's newest router: seed 1337 + XXH3(lora, 0) + XXH3(salt, 1)
want=$($PY -c '
import struct, xxhash
t = struct.pack("<4I", 0, 1, 2, 3)
for lora in (b"", b"adapter-a"):
    s = 1337 + (xxhash.xxh3_64_intdigest(lora, seed=0) if lora else 0) + xxhash.xxh3_64_intdigest(b"tenant-a", seed=1)
    print("%016x" % xxhash.xxh3_64_intdigest(t, seed=s % 2**64))' | tr '\n' ' ')
got="$(kvhash -b 4 -p local --salt tenant-a in) $(kvhash -b 4 -p local --salt tenant-a --lora adapter-a in) "
assert_eq "$got" "$want" "salted seeds"
echo '{"tokens":[0,1,2,3],"salt":"tenant-a","lora":"adapter-a"}' >in4
assert_eq "$(kvhash -b 4 -p local in4) " "${want#* }" "the line's salt and lora"
echo '{"tokens":[0,1,2,3],"salt":""}' >in5
assert_eq "$(kvhash -b 4 -p local --salt tenant-a in5)" "$(kvhash -b 4 -p local in)" "an empty salt is none"
{
    echo '{"tokens":[0,1,2,3],"mm":[["zz"]]}'
    echo '{"tokens":[0,1,2,3],"mm":{"0":1}}'
    echo '{"tokens":[0,1,2,3],"salt":3}'
} >bad
run kvhash -b 4 bad
expect_rc 1
assert_grep 'bad line at bad:1: "mm"\[0\]\[0\] is not a hash' err
assert_grep 'bad line at bad:2: "mm" is not an array' err
assert_grep 'bad line at bad:3: "salt" is not a string' err
run kvhash -b 4 --mm 0=xyz in
expect_rc 2
run kvhash -b 4 --mm 2a in
expect_rc 2
end

begin "contract vectors: positional hashes of tokens 1..8"
echo 1 2 3 4 5 6 7 8 >in
run kvhash -b 4 --positional in
expect_rc 0
assert_eq "$(jq -c .psh out)" '["0038e4d7fb2dca5ccb38e4d7fb2dca5c","0053ec39b907b74c44a2b2379d6d3c3d"]' psh
assert_eq "$(jq -c .plh out)" '["00000000000000000338e4d7fb2dca5c","0059c726bfd96e52e4a2b2379d6d3c3d"]' plh
run kvhash -b 4 -p plh in
assert_eq "$(cat out)" "00000000000000000338e4d7fb2dca5c 0059c726bfd96e52e4a2b2379d6d3c3d" "plain plh"
run kvhash -b 4 -P -d in
# u128 in decimal: hi * 2^64 + lo, checked with python's integers (JSON
# integers, not strings: jq would round them, python reads them exactly)
want=$($PY -c 'print(int("0053ec39b907b74c44a2b2379d6d3c3d", 16))')
assert_eq "$($PY -c 'import json,sys; print(json.load(sys.stdin)["psh"][1])' <out)" "$want" "decimal psh"
assert_eq "$($PY -c 'import json,sys; print(type(json.load(sys.stdin)["local"][0]).__name__)' <out)" int "decimal hashes are integers"
golden kvhash_positional_decimal
end

# EAGLE (SGLang's speculative decoding): each block hashed over its tokens and
# the next block's first, as Dynamo's newest router and kvsub do; checked
# against python's xxhash, and against the index built from EAGLE's pairs.
begin "--eagle: block size + 1 windows, as the engines' EAGLE blocks are indexed"
echo 1 2 3 4 5 6 7 8 9 10 >in
run kvhash -b 4 --eagle in
expect_rc 0
want=$($PY -c '
import struct, xxhash
t = list(range(1, 11))
h = lambda w: "%016x" % xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(w), *w), seed=1337)
print(h(t[0:5]), h(t[4:9]))')
assert_eq "$(jq -r '.local | join(" ")' out)" "$want" "local hashes of the two windows"
assert_eq "$(jq -r .partial out)" 1 "the token no window took"
run kvhash -b 4 --eagle -p local in
assert_eq "$(cat out)" "$want" "plain"
echo 1 2 3 4 >in
run kvhash -b 4 --eagle in
assert_eq "$(cat out)" '{"local":[],"seq":[],"partial":4}' "a block needs the next token"
# an SGLang EAGLE engine's store (its pairs) through kvsub's decoder, then a
# query of the same tokens: kvhash --eagle's hashes are the ones indexed
printf '%s\n' '{"type":"stored","worker":1,"bs":4,"eagle":true,"parent":null,"blocks":[{"local":"'"${want% *}"'","seq":"a1"},{"local":"'"${want#* }"'","seq":"a2"}]}' \
    '[1,2,3,4,5,6,7,8,9,10]' >ev.ndjson
run kvindex --quiet ev.ndjson
assert_eq "$(jq -c '[.blocks, .scores[0].blocks]' out)" "[2,2]" "an EAGLE partition's query"
end

begin "input shapes: whitespace, JSON array, query object, per-block arrays agree"
{
    echo "1 2 3 4 5 6 7 8 9"
    printf '\t 1  2\t3 4 5 6 7 8 9 \r\n'
    echo "001 2 3 4 5 6 7 8 0009"
    echo "[1,2,3,4,5,6,7,8,9]"
    echo " [ 1 , 2,3,4,5,6,7,8,9 ] "
    echo '{"model":"m","tenant":"t","tokens":[1,2,3,4,5,6,7,8,9]}'
    echo '{"type":"stored","tokens":[[1,2,3,4],[5,6,7,8],[9]]}'
    echo '[1, 2, 3, 4, 5, 6, 7, 8, 9.0e0]'
} >in
run kvhash -b 4 in
expect_rc 1
assert_eq "$(head -n 7 out | sort -u | wc -l)" 1 "seven shapes, one result"
assert_eq "$(wc -l <out)" 8 "output lines"
assert_eq "$(tail -n 1 out)" "{\"error\":\"token '9.0' is not an integer\"}" "the rejected line's own line"
assert_grep '"partial":1' out
assert_eq "$(cat err)" "kvhash: bad line at in:8: token '9.0' is not an integer" "a real is not a token"
end

begin "empty lines give empty arrays; a line may lack its newline"
printf '\n   \n[]\n{"tokens":[]}\n1 2 3' >in
run kvhash -b 4 in
expect_rc 0
golden kvhash_empty
end

begin "query objects: id echoed, own lora wins over --lora, null or absent lora takes it"
{
    echo '{"id":7,"tokens":[0,1,2,3]}'
    echo '{"id":"q-1","lora":"adapter-a","tokens":[0,1,2,3]}'
    echo '{"lora":"","tokens":[0,1,2,3]}'
    echo '{"lora":null,"id":{"a":[1]},"tokens":[0,1,2,3]}'
    echo '[0,1,2,3]'
} >in
run kvhash -b 4 -d --lora adapter-a in
expect_rc 0
a=6665157333201000639 n=9143094415614847814
assert_eq "$(pyj '[r.get("id"), r["local"][0]]' | tr '\n' ' ')" \
    "[7,$a] [\"q-1\",$a] [null,$n] [{\"a\":[1]},$a] [null,$a] " "ids and seeds"
golden kvhash_objects
end

begin "bad lines: reported with file:line and reason, the rest processed, exit 1"
{
    echo "1 2 3 4"
    echo "1 two 3"
    echo "1 -2 3"
    echo "4294967295 4294967296"
    echo "99999999999999999999999"
    echo "12abc"
    echo "[1,2,]"
    echo "[01]"
    echo "[1] x"
    echo "[-1]"
    echo "[4294967296]"
    echo '["1"]'
    echo '[[1]]'
    echo '{"tokens":"1 2"}'
    echo '{"tokens":[1],"lora":5}'
    echo '{"x":1}'
    echo '{"tokens":[1],"tokens":[2]}'
    printf '1 \001\377x 2\n'
    echo "true"
    echo "5 6 7 8"
} >in
run kvhash -b 4 in
expect_rc 1
# one output line per input line: the rejected ones say why
assert_eq "$(wc -l <out)" "$(wc -l <in)" "one line per input line"
assert_eq "$(grep -vc '"error"' out)" 2 "two good lines"
golden kvhash_bad_lines.out out
golden kvhash_bad_lines.err err
end

begin "--strict stops at the first bad line, keeps what came before, exit 5"
printf '1 2\n3 4\nx\n5 6\n' >in
run kvhash -b 2 --strict in
expect_rc 5
assert_eq "$(head -n 2 out | grep -c local)" 2 "lines before the bad one"
assert_eq "$(sed -n 3p out)" "{\"error\":\"token 'x' is not a number\"}" "the bad line's own line"
assert_eq "$(wc -l <out)" 3 "nothing after the stop"
assert_eq "$(cat err)" "kvhash: bad line at in:3: token 'x' is not a number" message
end

begin "several files and stdin: line numbers per file, missing file exit 3"
printf '1 2\nbad\n' >a
printf '3 4\n\n[x]\n' >b
run kvhash -b 2 -p seq a - nosuch b <<<"5 6 oops"
expect_rc 3
golden kvhash_files.out out
golden kvhash_files.err err
end

begin "a line past the 16 MiB ceiling is rejected, the next one is hashed"
{
    echo "1 2"
    head -c $((16 * 1024 * 1024 + 10)) /dev/zero | tr '\0' '7'
    echo
    echo "3 4"
} >in
run kvhash -b 2 -p local in
expect_rc 1
assert_eq "$(grep -vc error out)" 2 "two good lines"
assert_eq "$(sed -n 2p out)" '{"error":"line longer than 16777216 bytes"}' "the long line's own line"
assert_eq "$(cat err)" "kvhash: bad line at in:2: line longer than 16777216 bytes" message
# just under the ceiling is fine: a single 16 MiB token is out of range, not too long
head -c $((16 * 1024 * 1024)) /dev/zero | tr '\0' '7' >in2
run kvhash -b 2 in2
expect_rc 1
assert_grep "in2:1: token '777777777777777777777777\.\.\.' is out of range" err
end

begin "usage errors exit 2"
run kvhash
expect_rc 2
assert_grep "missing -b" err
run kvhash -b 0
expect_rc 2
run kvhash -b 65537
expect_rc 2
run kvhash -b 4 --plain bogus
expect_rc 2
assert_grep "bad field for --plain" err
run kvhash -b 4 --no-such-option
expect_rc 2
run kvhash -b 4 --lora "$(head -c 300 /dev/zero | tr '\0' a)"
expect_rc 2
end

begin "a write error on stdout is exit 3"
if [ -w /dev/full ]; then
    echo 1 2 | kvhash -b 1 >/dev/full 2>err
    rc=$?
    expect_rc 3
    assert_grep "error writing standard output" err
else
    fail "/dev/full is missing: cannot test write errors"
fi
end

begin "results are written as each input line completes (pipes)"
want1=$(echo 1 2 | kvhash -b 2 -p local)
want2=$(echo 3 4 | kvhash -b 2 -p local)
coproc KVH { kvhash -b 2 -p local; }
pid=$KVH_PID
in=${KVH[1]} outfd=${KVH[0]}
line=""
# the timeouts only keep a broken build from hanging the suite
echo "1 2" >&"$in" && read -r -t 60 line <&"$outfd"
assert_eq "$line" "$want1" "first result before end of input"
line=""
echo "3 4" >&"$in" && read -r -t 60 line <&"$outfd"
assert_eq "$line" "$want2" "second result"
exec {in}>&-
wait "$pid"
assert_eq "$?" 0 "exit status"
end

begin "the scanners agree with jansson on every digit count"
$PY - >in <<'EOF'
import random
r = random.Random(5)
for d in range(1, 11):
    for _ in range(50):
        toks = [r.randrange(10 ** (d - 1), min(10 ** d, 1 << 32)) for _ in range(r.randrange(1, 20))]
        print(" ".join(map(str, toks)))
        print("[" + ",".join(map(str, toks)) + "]")
        print('{"tokens":[' + ", ".join(map(str, toks)) + "]}")
EOF
run kvhash -b 1 -p local in
expect_rc 0
# lines come in threes: whitespace (own scanner), flat array (fast path), object (jansson)
assert_eq "$(awk 'NR%3==1{a=$0} NR%3==2{b=$0} NR%3==0{if(a!=$0||b!=$0)bad++} END{print bad+0}' out)" 0 \
    "shapes disagree"
assert_eq "$(wc -l <out)" 1500 lines
end

begin "tokens at every offset across the 64-byte chunks of the whitespace scanner"
# every shift of a run of tokens of 1 to 10 digits, as whitespace ints and as the
# same JSON array (a different scanner); then a bad byte at every offset
$PY - >in <<'EOF2'
toks = [7, 1234567, 12345678, 4294967295, 0, 42, 999999, 1000000, 3, 12, 123, 1234, 12345,
        123456, 99999999, 100000000, 987654321, 1000000000, 5]
for k in range(140):
    pad = " " * k
    print(pad + " ".join(map(str, toks)) + " " + " ".join(map(str, toks)))
    print("[" + ",".join(map(str, toks + toks)) + "]")
EOF2
run kvhash -b 2 -p local in
expect_rc 0
assert_eq "$(awk 'NR%2==1{a=$0} NR%2==0 && a!=$0{bad++} END{print bad+0}' out)" 0 "shapes disagree"
assert_eq "$(sort -u out | wc -l)" 1 "every shift gives the same hashes"
$PY - >bad <<'EOF2'
for k in range(1, 140):
    s = list(" ".join(["1234567"] * 20))
    s[k] = "x" if s[k] != " " else "-"
    print("".join(s))
EOF2
run kvhash -b 2 -p local bad
expect_rc 1
assert_eq "$(grep -vc '^{"error":"token ' out)" 0 "no bad line hashed"
assert_eq "$(wc -l <out)" 139 "every bad line answered"
assert_eq "$(wc -l <err)" 139 "every bad line reported"
assert_no_grep "token '1234567' " err
end

begin "a reader that goes away is not an error, even with SIGPIPE ignored"
seq 1 400000 | paste -d' ' - - - - - - - - >in
(
    trap '' PIPE
    kvhash -b 1 in 2>err | head -c 100 >/dev/null
    echo "${PIPESTATUS[0]}" >rc
)
assert_eq "$(cat rc)" 0 "exit status"
assert_eq "$(cat err)" "" "stderr"
end
