#!/usr/bin/env bash
# kvindex --listen --auth-token-file: the endpoints that change or export the
# state answer 401 without the bearer token (before their body is read), the
# queries only with --auth-queries; /health and /metrics stay open; a
# replica recovers from a peer that wants the token, sending it. Every wait
# is a bounded poll.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"

E1='{"type":"stored","worker":3,"model":"m","bs":4,"blocks":[{"local":"1","seq":"a1"}]}'
Q='{"model":"m","local":["1"]}'

# serve NAME ARGS...: kvindex --listen in the background, stdin from NAME.in;
# its URL in NAME.url
serve() {
    local n=$1
    shift
    timeout --foreground 120 kvindex --listen 127.0.0.1:0 "$@" <"$n.in" >"$n.out" 2>"$n.err" &
    PIDS="$PIDS $!"
    eval "${n}_pid=$!"
    listening "$n.err" >"$n.url" || { fail "$n never said where it listens"; return 1; }
}

# a token file only its owner reads
mktok() { printf 'tOk3n-ab.c\n' >tok && chmod 600 tok; }

# st URL [CURL-ARGS...]: the status of a request
st() { curl -s -o body -w '%{http_code}' "$@"; }

begin "kvindex --auth-token-file: the state's endpoints need the token, queries and health do not"
mktok
echo "$E1" >a.in
serve a --auth-token-file tok -w "1=ipc://$T/nobody" || { end; exit; }
U=$(cat a.url)
for i in $(seq 100); do curl -s -XPOST -d "$Q" "$U/query" | grep -q '"worker":3' && break; sleep 0.05; done
assert_eq "$(st "$U/health")" 200 "/health"
assert_eq "$(st "$U/metrics")" 200 "/metrics"
assert_eq "$(st -XPOST -d "$Q" "$U/query")" 200 "/query"
for p in /dump /snapshot /workers /peers; do
    assert_eq "$(st "$U$p")" 401 "GET $p without the token"
done
# an unregistration without the token wiped a worker fed from stdin
assert_eq "$(st -XPOST -d '{"instance_id":3,"model_name":"m"}' "$U/unregister")" 401 "/unregister"
assert_eq "$(st -XPOST -d '{"instance_id":1,"model_name":"m"}' "$U/unregister")" 401 "/unregister -w"
assert_eq "$(st -XPOST -d '{"url":"http://x"}' "$U/register_peer")" 401 "/register_peer"
assert_eq "$(st -XPOST -d '{"instance_id":5,"endpoint":"tcp://h:1","model_name":"m","block_size":4}' \
    "$U/register")" 401 "/register"
assert_grep '"error":"this endpoint needs the service.s bearer token' body
curl -s -D hdr -o /dev/null "$U/dump"
assert_grep '^WWW-Authenticate: Bearer' hdr
assert_eq "$(st -H 'Authorization: Bearer wrong' "$U/dump")" 401 "a wrong token"
assert_eq "$(st -H 'Authorization: Bearer tOk3n-ab.c' "$U/dump")" 200 "/dump with the token"
assert_eq "$(st -H 'Authorization: Bearer tOk3n-ab.c' "$U/workers")" 200 "/workers with the token"
curl -s -XPOST -d "$Q" "$U/query" >out
assert_grep '"worker":3' out
# a body is refused before it is read: 401 at once for an announced 100 MB
"$PY" - "$U" <<'EOF' >early.out || fail "no early 401: $(cat early.out)"
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port), timeout=5)
s.sendall(b"POST /register HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
got = s.recv(64)
print(got)
sys.exit(0 if got.startswith(b"HTTP/1.1 401") else 1)
EOF
kill -TERM "$a_pid"
wait "$a_pid"
end

begin "kvindex --auth-queries: the queries need the token too"
mktok
: >b.in
serve b --auth-token-file tok --auth-queries || { end; exit; }
U=$(cat b.url)
assert_eq "$(st -XPOST -d "$Q" "$U/query")" 401 "/query without the token"
assert_eq "$(st -XPOST -d '{"block_hashes":[1],"model_name":"m"}' "$U/query_by_hash")" 401 \
    "/query_by_hash without the token"
assert_eq "$(st -H 'Authorization: Bearer tOk3n-ab.c' -XPOST -d "$Q" "$U/query")" 200 \
    "/query with the token"
assert_eq "$(st "$U/health")" 200 "/health"
kill -TERM "$b_pid"
wait "$b_pid"
end

begin "kvindex --peers --auth-token-file: a replica sends the token to the peer it recovers from"
mktok
echo "$E1" >a.in
serve a --auth-token-file tok || { end; exit; }
U=$(cat a.url)
for i in $(seq 100); do curl -s -XPOST -d "$Q" "$U/query" | grep -q '"worker":3' && break; sleep 0.05; done
run kvindex --peers "$U" --auth-token-file tok -s c.kvix </dev/null
expect_rc 0
assert_grep "recovered from $U/snapshot" err
echo "$Q" >q
run kvindex -q -s c.kvix q
assert_grep '"worker":3' out
# without it, the peer says 401 and nothing is taken
run kvindex --peers "$U" -s d.kvix </dev/null
assert_grep 'status 401' err
kill -TERM "$a_pid"
wait "$a_pid"
end

begin "kvindex --auth-token-file: a file that is empty, missing or holds a bad token"
: >empty
run kvindex --listen 127.0.0.1:0 --auth-token-file empty </dev/null
expect_rc 2
assert_grep 'empty' err
run kvindex --listen 127.0.0.1:0 --auth-token-file nosuch </dev/null
expect_rc 3
printf 'a b\n' >bad
run kvindex --listen 127.0.0.1:0 --auth-token-file bad </dev/null
expect_rc 2
assert_grep 'token byte 2' err
run kvindex --auth-queries --listen 127.0.0.1:0 </dev/null
expect_rc 2
printf 'tok\n' >open
chmod 644 open
timeout 5 kvindex --listen 127.0.0.1:0 --auth-token-file open </dev/null 2>err &
PIDS="$PIDS $!"
listening err >/dev/null
assert_grep 'may be read by others than its owner' err
end
