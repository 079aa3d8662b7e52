#!/usr/bin/env bash
# Explain, cause by cause, through kvindex (stdin, -q, --explain) and over
# HTTP (POST /explain with kvix and Dynamo bodies, /query with
# "explain":true): a block removed a moment ago, a clear, a prompt longer
# than anything stored, another continuation, another first block, a LoRA
# adapter on either side only, an unknown model or tenant, another block
# size, a router's own hashes, a worker the index does not know.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"

# the index's clock in "at" and "ago" changes from run to run
clock() { sed -E 's/"at":[0-9.]+,"ago":[0-9.]+/"at":T,"ago":A/g'; }

# tokens 1..16 in blocks of 4: their local hashes, plain and with an adapter
L0=cb38e4d7fb2dca5c L1=e8d3ec39b907b74c
events() {
    local a0 x2
    a0=$(echo 1 2 3 4 | kvhash -b 4 --lora adapter-a --plain local)
    x2=$(echo 1 2 3 4 5 6 7 8 9 9 9 9 | kvhash -b 4 --plain local | cut -d' ' -f3)
    cat <<EOF
{"type":"stored","worker":1,"model":"m","bs":4,"eid":1,"blocks":[{"local":"$L0","seq":"11"},{"local":"$L1","seq":"12"}]}
{"type":"stored","worker":2,"model":"m","bs":4,"eid":1,"blocks":[{"local":"$L0","seq":"21"},{"local":"$L1","seq":"22"}]}
{"type":"removed","worker":2,"model":"m","eid":2,"ts":1700000000.5,"hashes":["22"]}
{"type":"stored","worker":3,"model":"m","bs":4,"eid":1,"blocks":[{"local":"$L0","seq":"31"},{"local":"$L1","seq":"32"},{"local":"$x2","seq":"33"}]}
{"type":"stored","worker":4,"model":"m","bs":4,"eid":1,"lora":"adapter-a","blocks":[{"local":"$a0","seq":"41"}]}
{"type":"stored","worker":5,"model":"m","bs":4,"eid":1,"blocks":[{"local":"$L0","seq":"51"}]}
{"type":"cleared","worker":5,"model":"m","eid":9}
{"type":"stored","worker":6,"model":"m","tenant":"team-a","bs":4,"blocks":[{"local":"$L0","seq":"61"}]}
EOF
}

Q='"tokens":[1,2,3,4,5,6,7,8,10,11,12,13]'
W2='{"worker":2,"dp":0,"named":true,"why":"removed","blocks":1,"want":"'$L1'","removed":{"blocks":1,"eid":2,"ts":1700000000.5,"at":T,"ago":A}}'
W5='{"worker":5,"dp":0,"named":true,"why":"cleared","blocks":0,"want":"'$L0'","cleared":{"blocks":1,"eid":9,"at":T,"ago":A}}'
W4='{"worker":4,"dp":0,"named":true,"why":"differs","blocks":0,"want":"'$L0'","held":{"at":1,"after_prefix":1,"blocks":[{"local":"9df1b8814fdc3b69","engine":"0000000000000041","tiers":["gpu"],"after_prefix":true}]},"causes":["tokens","lora","multimodal"],"likely":["lora"],"engine_lora":"adapter-a"}'
W9='{"worker":9,"dp":0,"named":true,"why":"unknown_worker"}'

begin "kvindex: each cause a query misses by, and what explain says of it"
events >in
{
    echo '{"id":1,"model":"m",'"$Q"',"top":2,"explain":true,"workers":[2,5,4,9]}'
    echo '{"id":2,"model":"M",'"$Q"',"explain":true}'
    echo '{"id":3,"model":"m","tenant":"team_a",'"$Q"',"explain":true}'
    echo '{"id":4,"model":"m","bs":8,'"$Q"',"explain":true}'
    echo '{"id":5,"model":"m","lora":"adapter-b","tokens":[1,2,3,4],"explain":true,"workers":[1]}'
    echo '{"id":6,"model":"m","local":["0000000000000001"],"explain":true,"workers":[1]}'
    echo '{"id":7,"model":"m",'"$Q"'}'
} >>in
run kvindex --quiet in
expect_rc 0
clock <out >got
x3=$(echo 1 2 3 4 5 6 7 8 9 9 9 9 | kvhash -b 4 --plain local | cut -d' ' -f3)
w2=$(echo 1 2 3 4 5 6 7 8 10 11 12 13 | kvhash -b 4 --plain local | cut -d' ' -f3)
b0=$(echo 1 2 3 4 | kvhash -b 4 --lora adapter-b --plain local)
cat >want <<EOF
{"id":1,"blocks":3,"scores":[{"worker":1,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}},{"worker":3,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}}],"omitted":1,"explain":{"bs":4,"depth":3,"workers":[{"worker":1,"dp":0,"why":"absent","blocks":2,"want":"$w2"},{"worker":3,"dp":0,"why":"differs","blocks":2,"want":"$w2","held":{"at":1,"after_prefix":1,"blocks":[{"local":"$x3","engine":"0000000000000033","tiers":["gpu"],"after_prefix":true}]},"causes":["tokens","multimodal"]},$W2,$W5,$W4,$W9]}}
{"id":2,"blocks":0,"scores":[],"unknown":"model","explain":{"why":"unknown_model","closest":["m"]}}
{"id":3,"blocks":0,"scores":[],"unknown":"tenant","explain":{"why":"unknown_tenant","closest":["team-a","default"]}}
{"id":4,"blocks":0,"scores":[],"explain":{"why":"block_size","bs":4,"query_bs":8,"depth":3,"workers":[]}}
{"id":5,"blocks":1,"scores":[],"explain":{"bs":4,"depth":3,"workers":[{"worker":1,"dp":0,"named":true,"why":"differs","blocks":0,"want":"$b0","held":{"at":1,"after_prefix":1,"blocks":[{"local":"$L0","engine":"0000000000000011","tiers":["gpu"],"after_prefix":true}]},"causes":["tokens","lora","multimodal"],"likely":["lora"],"engine_lora":""}]}}
{"id":6,"blocks":1,"scores":[],"explain":{"bs":4,"depth":3,"workers":[{"worker":1,"dp":0,"named":true,"why":"differs","blocks":0,"want":"0000000000000001","held":{"at":1,"after_prefix":1,"blocks":[{"local":"$L0","engine":"0000000000000011","tiers":["gpu"],"after_prefix":true}]},"causes":["tokens","lora","salt","multimodal","block_size","eagle"]}]}}
{"id":7,"blocks":3,"scores":[{"worker":1,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}},{"worker":3,"dp":0,"blocks":2,"tokens":8,"tiers":{"gpu":2}},{"worker":2,"dp":0,"blocks":1,"tokens":4,"tiers":{"gpu":1}}]}
EOF
diff want got >d || fail "answers differ: $(cat d)"
end

begin "an EAGLE engine: token queries hashed as its windows, a router's plain hashes likely EAGLE (CLI and HTTP)"
e=$(echo 1 2 3 4 5 6 7 8 9 | kvhash -b 4 --eagle --plain local)
p=$(echo 1 2 3 4 5 6 7 8 | kvhash -b 4 --decimal --plain local)
read -r e0 e1 <<<"$e"
read -r p0 p1 <<<"$p"
echo "{\"type\":\"stored\",\"worker\":1,\"model\":\"e\",\"bs\":4,\"eagle\":true,\"blocks\":[{\"local\":\"$e0\",\"seq\":\"1\"},{\"local\":\"$e1\",\"seq\":\"2\"}]}" >in
cp in in2
echo '{"model":"e","tokens":[1,2,3,4,5,6,7,8,9],"explain":true,"workers":[1]}' >>in
echo '{"model":"e","local":['"$p0,$p1"'],"explain":true,"workers":[1]}' >>in
run kvindex --quiet in
expect_rc 0
assert_eq "$(sed -n 1p out | jq -c '[.explain.eagle, .explain.workers[0].why]')" '[true,"match"]' "token query"
assert_eq "$(sed -n 2p out | jq -c '[.explain.workers[0].why, .explain.workers[0].likely]')" \
    '["differs",["eagle"]]' "a router's plain hashes"
: >kv.err
timeout --foreground 120 kvindex --listen 127.0.0.1:0 <in2 >kv.out 2>kv.err 3>&- &
KPID=$!
PIDS="$PIDS $KPID"
URL=$(listening kv.err) || fail "kvindex never said where it listens"
for i in $(seq 600); do
    n=$(curl -s "$URL/metrics" | awk '/^kvix_events_applied_total/ {s += $2} END {print s + 0}')
    [ "$n" = 1 ] && break
    sleep 0.05
done
body=$(curl -s -XPOST "$URL/explain" -d '{"model_name":"e","block_hashes":['"$p0,$p1"'],"workers":[1]}')
assert_eq "$(jq -c '[.explain.eagle, .explain.workers[0].likely]' <<<"$body")" '[true,["eagle"]]' "HTTP"
kill -TERM "$KPID"
wait "$KPID"
end

begin "kvindex --explain explains every query; -q from a snapshot; --removals 0 keeps no record"
events | kvindex --quiet -s s.kvix
echo '{"model":"m","tokens":[1,2,3,4,5,6,7,8,9,9,9,9,1,1,1,1],"workers":[3]}' >q
run kvindex -q --quiet --explain -s s.kvix q
expect_rc 0
assert_grep '"worker":3,"dp":0,"named":true,"why":"nobody","blocks":3,' out
# the record is not in the snapshot: -q knows no removal (worker 2 holds block 0 only)
echo '{"model":"m","tokens":[1,2,3,4,5,6,7,8],"workers":[2]}' >q2
run kvindex -q --quiet --explain -s s.kvix q2
assert_grep '"worker":2,"dp":0,"named":true,"why":"absent","blocks":1,' out
events >in2
cat q2 >>in2
run kvindex --quiet --explain --removals 0 in2
assert_grep '"worker":2,"dp":0,"named":true,"why":"absent","blocks":1,' out
run kvindex --quiet --explain in2
assert_grep '"worker":2,"dp":0,"named":true,"why":"removed","blocks":1,' out
run kvindex --removals 65537 in2
expect_rc 2
end

begin "HTTP: POST /explain (kvix and Dynamo bodies) and /query with explain, each cause"
events >in
: >kv.err
timeout --foreground 120 kvindex --listen 127.0.0.1:0 <in >kv.out 2>kv.err 3>&- &
KPID=$!
PIDS="$PIDS $KPID"
URL=$(listening kv.err) || fail "kvindex never said where it listens"
for i in $(seq 600); do
    n=$(curl -s "$URL/metrics" | awk '/^kvix_events_applied_total/ {s += $2} END {print s + 0}')
    [ "$n" = 8 ] && break
    sleep 0.05
done
assert_eq "$n" 8 "events applied"
post() { curl -s -XPOST "$URL$1" -d "$2"; }
body=$(post /explain '{"model":"m",'"$Q"',"workers":[2,5,4,9]}')
assert_eq "$(jq -c '.explain.workers[] | select(.named)' <<<"$body" | clock | tr -d '\n')" "$W2$W5$W4$W9" "kvix body"
body=$(post /query '{"model":"m",'"$Q"',"explain":true,"workers":[2]}')
assert_eq "$(jq -c '.explain.workers[2]' <<<"$body" | clock)" "$W2" "/query with explain"
body=$(post /query '{"model":"m",'"$Q"'}')
assert_eq "$(jq -c 'has("explain")' <<<"$body")" false "/query without explain"
body=$(post /explain '{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8,10,11,12,13],"workers":[5]}')
assert_eq "$(jq -c '.explain.workers[] | select(.named)' <<<"$body" | clock)" "$W5" "Dynamo body"
body=$(post /explain '{"model_name":"m","block_hashes":[14643705804678351452,16777012769546811212],"workers":[2]}')
assert_eq "$(jq -c '.explain.workers[] | select(.worker == 2)' <<<"$body" | clock)" \
    '{"worker":2,"dp":0,"named":true,"why":"removed","blocks":1,"want":"'$L1'","removed":{"blocks":1,"eid":2,"ts":1700000000.5,"at":T,"ago":A}}' \
    "Dynamo body by hash"
st=$(curl -s -o body -w '%{http_code}' -XPOST "$URL/explain" -d '{"model_name":"mm","token_ids":[1,2,3,4]}')
assert_eq "$st" 200 "an unknown model explained, not 404"
assert_eq "$(jq -c .explain body)" '{"why":"unknown_model","closest":["m"]}' "closest model"
st=$(curl -s -o body -w '%{http_code}' -XPOST "$URL/query" -d '{"model_name":"mm","token_ids":[1,2,3,4]}')
assert_eq "$st" 404 "Dynamo /query of an unknown model still 404"
body=$(post /explain '{"model":"m","bs":16,"tokens":[1,2,3,4]}')
assert_eq "$(jq -c .explain <<<"$body")" '{"why":"block_size","bs":4,"query_bs":16,"depth":3,"workers":[]}' "block size"
st=$(curl -s -o body -w '%{http_code}' -XPOST "$URL/explain" -d '{"model_name":"m","token_ids":[1],"workers":[-1]}')
assert_eq "$st" 400 "a bad worker id"
st=$(curl -s -o body -w '%{http_code}' -XGET "$URL/explain")
assert_eq "$st" 405 "GET /explain"
kill -TERM "$KPID"
wait "$KPID"
assert_eq "$?" 0 "exit status"
end
