#!/usr/bin/env bash
# One record, one verdict whatever its framing (kvix-events(5)): what kvindex
# refuses as NDJSON it refuses as msgpack, so whatever it keeps kvdump can
# print and kvindex read back; a snapshot holding what no event could carry
# is corrupt for every reader; white space before a msgpack stream is no
# record.
. "$(dirname "$0")/lib.sh"

# msgpack records from python literals, one per argument
mp() {
    $PY - "$@" <<'EOF'
import sys, msgpack
for a in sys.argv[1:]:
    rec = eval(a)
    sys.stdout.buffer.write(msgpack.packb(rec, use_bin_type=True))
EOF
}

begin "kvindex: msgpack records NDJSON could not say are refused, the rest is kept and prints"
# dicts cannot hold a key twice: the duplicate is spliced in by hand
mp "{'type':'stored','worker':1,'bs':4,'blocks':[{'local':1,'seq':2}]}" \
   "{'type':'stored','worker':2**63,'bs':4,'blocks':[{'local':1,'seq':3}]}" \
   "{'type':'stored','worker':3,'eid':2**64-1,'bs':4,'blocks':[{'local':1,'seq':4}]}" \
   "{'type':'stored','worker':4,'model':b'm\\xff','bs':4,'blocks':[{'local':1,'seq':5}]}" \
   "{'id':'a\\x00b','local':[1]}" >in.mp
$PY - <<'EOF' >>in.mp
import msgpack
body = b''.join(msgpack.packb(x) for x in ['type', 'cleared', 'worker', 1, 'worker', 5])
import sys; sys.stdout.buffer.write(b'\x83' + body)
EOF
run kvindex --quiet -s s.kvix in.mp
expect_rc 1
assert_grep '^kvindex: bad event at in.mp:2: "worker" out of range \(0 to 9223372036854775807\)$' err
assert_grep '^kvindex: bad event at in.mp:3: "eid" out of range \(0 to 9223372036854775807\)$' err
assert_grep '^kvindex: bad event at in.mp:4: binary data has no json form in "model"$' err
assert_grep '^kvindex: bad event at in.mp:5: a string contains a NUL byte in "id"$' err
assert_grep '^kvindex: bad event at in.mp:6: duplicate key "worker"$' err
assert_eq "$(wc -l <err)" 5 "lines of stderr"
run kvdump s.kvix
expect_rc 0
cp out dumped
run kvindex --quiet dumped
expect_rc 0
end

begin "kvindex: a non-UTF-8 model in msgpack is refused"
$PY - <<'EOF' >in.mp
import msgpack, sys
rec = msgpack.packb({'type': 'cleared', 'worker': 1, 'bs': 4})
# a str (not bin) holding invalid UTF-8, packed by hand: 0xa2 'm' 0xff
sys.stdout.buffer.write(b'\x84' + rec[1:] + msgpack.packb('model') + b'\xa2m\xff')
EOF
run kvindex --quiet -s s.kvix in.mp
expect_rc 1
assert_eq "$(cat err)" 'kvindex: bad event at in.mp:1: a string is not valid utf-8 in "model"' "stderr"
end

begin "kvindex: null model, tenant and dp mean absent"
echo '{"type":"stored","worker":1,"dp":null,"model":null,"tenant":null,"bs":4,"blocks":[{"local":"1","seq":"2"}]}' >in
echo '{"local":["1"]}' >q
run kvindex --quiet in q
expect_rc 0
assert_eq "$(cat out)" '{"blocks":1,"scores":[{"worker":1,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}' "answer"
end

begin "kvindex: white space before a msgpack stream is no record"
{ printf ' \n\t\n'; mp "{'type':'stored','worker':1,'bs':4,'blocks':[{'local':1,'seq':2}]}"; } >in.mp
run kvindex -s s.kvix in.mp
expect_rc 0
assert_grep '^kvindex: rejected 0 records$' err
assert_grep '^kvindex: applied 1 event: 1 stored' err
end

begin "kvdump --check: a snapshot holding a non-UTF-8 name is corrupt"
echo '{"type":"stored","worker":1,"model":"mx","bs":4,"blocks":[{"local":"1","seq":"2"}]}' |
    kvindex --quiet -s s.kvix
# replace the model "mx" by "m\xff" and fix the checksum (XXH3-64 of all but the last 8 bytes)
$PY - <<'EOF'
import xxhash
b = bytearray(open('s.kvix', 'rb').read())
i = b.index(b'mx')
b[i + 1] = 0xff
b[-8:] = xxhash.xxh3_64_intdigest(bytes(b[:-8])).to_bytes(8, 'little')
open('bad.kvix', 'wb').write(b)
EOF
run kvdump --check bad.kvix
expect_rc 4
assert_grep 'model name is not valid utf-8' err
run kvdump bad.kvix
expect_rc 4
end
