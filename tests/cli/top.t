#!/usr/bin/env bash
# Top answers: kvindex --top K as the default of kvix queries, a query's own
# "top" over it, the answer in rank order with how many were left out; over
# HTTP, a kvix-shaped /query under --top and a Dynamo-shaped /query and
# /query_by_hash that keep the full list unless their body says "top".
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"

# Four workers hold block 0 of tokens 1..8 (bs 4), worker 9 both blocks,
# workers 1 and 3 block 0 on cpu too; then the queries.
events() {
    local l0=cb38e4d7fb2dca5c l1=e8d3ec39b907b74c w
    for w in 5 3 9 1; do
        echo "{\"type\":\"stored\",\"worker\":$w,\"model\":\"m\",\"bs\":4,\"blocks\":[{\"local\":\"$l0\",\"seq\":\"$w\"}]}"
    done
    echo "{\"type\":\"stored\",\"worker\":9,\"model\":\"m\",\"bs\":4,\"parent\":\"9\",\"blocks\":[{\"local\":\"$l1\",\"seq\":\"99\"}]}"
    for w in 3 1; do
        echo "{\"type\":\"stored\",\"worker\":$w,\"model\":\"m\",\"bs\":4,\"medium\":\"cpu\",\"blocks\":[{\"local\":\"$l0\",\"seq\":\"$w\"}]}"
    done
}

S9='{"worker":9,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}}'
S1='{"worker":1,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1,"cpu":1}}'
S3='{"worker":3,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1,"cpu":1}}'
S5='{"worker":5,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}'

begin "kvindex --top K: the best K in rank order and how many were left out; a query's top over it"
events >in
{
    echo '{"id":1,"model":"m","tokens":[1,2,3,4,5,6,7,8]}'
    echo '{"id":2,"model":"m","tokens":[1,2,3,4,5,6,7,8],"top":0}'
    echo '{"id":3,"model":"m","tokens":[1,2,3,4,5,6,7,8],"top":3}'
    echo '{"id":4,"model":"m","tokens":[1,2,3,4,5,6,7,8],"top":100}'
    echo '{"id":5,"model":"x","tokens":[1,2,3,4]}'
    echo '{"id":6,"model":"m","tokens":[1,2,3,4,5,6,7,8],"top":-1}'
} >>in
run kvindex --quiet --top 2 in
expect_rc 1
cat >want <<EOF
{"id":1,"blocks":2,"scores":[$S9,$S1],"omitted":2}
{"id":2,"blocks":2,"scores":[$S9,$S1,$S3,$S5]}
{"id":3,"blocks":2,"scores":[$S9,$S1,$S3],"omitted":1}
{"id":4,"blocks":2,"scores":[$S9,$S1,$S3,$S5],"omitted":0}
{"id":5,"blocks":0,"scores":[],"omitted":0,"unknown":"model"}
{"id":6,"error":"\"top\" is negative"}
EOF
cmp -s want out || fail "answers: $(diff want out)"
# without --top: the full list in the contract's order (blocks, then worker)
run kvindex --quiet in
assert_eq "$(sed -n 1p out)" "{\"id\":1,\"blocks\":2,\"scores\":[$S9,$S1,$S3,$S5]}" "full answer"
run kvindex --top x in
expect_rc 2
assert_grep "top" err
end

begin "kvindex --top on a snapshot with -q, and from msgpack input"
events | kvindex --quiet -s s.kvix
echo '{"model":"m","tokens":[1,2,3,4,5,6,7,8],"top":1}' >q
run kvindex -q --quiet -s s.kvix q
expect_rc 0
assert_eq "$(cat out)" "{\"blocks\":2,\"scores\":[$S9],\"omitted\":3}" "answer from -q"
# the same query read back from kvix's own msgpack writer (kvreplay -f msgpack)
kvreplay --quiet -f msgpack q >q.mp 2>/dev/null
run kvindex -q --quiet -s s.kvix q.mp
assert_eq "$(cat out)" "{\"blocks\":2,\"scores\":[$S9],\"omitted\":3}" "answer from msgpack"
end

begin "HTTP: kvix /query follows --top; Dynamo /query and /query_by_hash keep the full list unless asked"
events >in
: >kv.err
timeout --foreground 120 kvindex --listen 127.0.0.1:0 --top 1 <in >kv.out 2>kv.err 3>&- &
KPID=$!
PIDS="$PIDS $KPID"
URL=$(listening kv.err) || fail "kvindex never said where it listens"
for i in $(seq 600); do
    n=$(curl -s "$URL/metrics" | awk '/^kvix_events_applied_total/ {s += $2} END {print s + 0}')
    [ "$n" = 7 ] && break
    sleep 0.05
done
assert_eq "$n" 7 "events applied"
body=$(curl -s -XPOST "$URL/query" -d '{"model":"m","tokens":[1,2,3,4,5,6,7,8]}')
assert_eq "$body" "{\"blocks\":2,\"scores\":[$S9],\"omitted\":3}" "kvix /query under --top 1"
body=$(curl -s -XPOST "$URL/query" -d '{"model":"m","tokens":[1,2,3,4,5,6,7,8],"top":2}')
assert_eq "$body" "{\"blocks\":2,\"scores\":[$S9,$S1],\"omitted\":2}" "kvix /query top 2"
body=$(curl -s -XPOST "$URL/query" -d '{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8]}')
assert_eq "$body" '{"scores":{"1":{"0":4},"3":{"0":4},"5":{"0":4},"9":{"0":8}},"frequencies":[],"tree_sizes":{"1":{"0":1},"3":{"0":1},"5":{"0":1},"9":{"0":2}}}' \
    "Dynamo /query: the full list"
body=$(curl -s -XPOST "$URL/query" -d '{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8],"top":2}')
assert_eq "$body" '{"scores":{"1":{"0":4},"9":{"0":8}},"frequencies":[],"tree_sizes":{"1":{"0":1},"9":{"0":2}},"omitted":2}' \
    "Dynamo /query top 2"
body=$(curl -s -XPOST "$URL/query_by_hash" -d '{"model_name":"m","block_hashes":[14643705804678351452,16777012769546811212],"top":1}')
assert_eq "$body" '{"scores":{"9":{"0":8}},"frequencies":[],"tree_sizes":{"9":{"0":2}},"omitted":3}' \
    "Dynamo /query_by_hash top 1"
body=$(curl -s -XPOST "$URL/query_by_hash" -d '{"model_name":"m","block_hashes":[14643705804678351452]}')
assert_eq "$body" '{"scores":{"1":{"0":4},"3":{"0":4},"5":{"0":4},"9":{"0":4}},"frequencies":[],"tree_sizes":{"1":{"0":1},"3":{"0":1},"5":{"0":1},"9":{"0":2}}}' \
    "Dynamo /query_by_hash: the full list"
st=$(curl -s -o body -w '%{http_code}' -XPOST "$URL/query" -d '{"model_name":"m","token_ids":[1],"top":"2"}')
assert_eq "$st" 400 "a top that is not an integer"
assert_grep '"top\\" is not an unsigned integer' body
st=$(curl -s -o body -w '%{http_code}' -XPOST "$URL/query" -d '{"model_name":"m","token_ids":[1],"top":4294967296}')
assert_eq "$st" 400 "a top past 2^32-1"
kill -TERM "$KPID"
wait "$KPID"
assert_eq "$?" 0 "exit status"
end
