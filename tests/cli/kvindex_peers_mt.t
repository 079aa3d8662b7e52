#!/usr/bin/env bash
# kvindex's peer endpoints: POST /register_peer, POST /deregister_peer and
# GET /peers with every error path, on the server's threads (also under
# ThreadSanitizer). Recovery from peers: kvindex_peers.t, nats_peers.t.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"

# req METHOD PATH [BODY]: status in $st, body in ./body
req() {
    if [ $# -ge 3 ]; then
        st=$(curl -s -o body -w '%{http_code}' -X "$1" --data-binary "$3" "$URL$2")
    else
        st=$(curl -s -o body -w '%{http_code}' -X "$1" "$URL$2")
    fi
}

# bad BODY STATUS MESSAGE-RE: POST /register_peer answers STATUS with an error saying it
bad() {
    req POST /register_peer "$1"
    assert_eq "$st" "$2" "status of /register_peer $1"
    assert_grep "^\{\"error\":\".*$3" body
    req GET /peers
    assert_eq "$(cat body)" "$want" "/peers after /register_peer $1"
}

begin "kvindex --listen: /register_peer, /deregister_peer, /peers and their errors"
mkfifo in
exec 3<>in
timeout --foreground 60 kvindex --listen 127.0.0.1:0 --peers http://seed:1/,https://seed2:2 \
    <in >kv.out 2>kv.err &
KPID=$!
PIDS="$KPID"
URL=$(listening kv.err) || fail "kvindex never said where it listens"
req GET /peers
assert_eq "$st" 200 "GET /peers"
want='["http://seed:1","https://seed2:2"]'
assert_eq "$(cat body)" "$want" "--peers listed, trailing slash dropped"
req POST /register_peer '{"url":"http://127.0.0.1:9/"}'
assert_eq "$st" 200 "register"
assert_eq "$(cat body)" '{"status":"ok"}' "register's answer"
req POST /register_peer '{"url":"http://127.0.0.1:9"}' # the same peer again: kept once
assert_eq "$st" 200 "register again"
want='["http://seed:1","https://seed2:2","http://127.0.0.1:9"]'
req GET /peers
assert_eq "$(cat body)" "$want" "registered once"
bad '{"url":' 400 'malformed json'
bad '[1]' 400 'not a JSON object'
bad '{}' 400 'missing \\"url\\"'
bad '{"url":7}' 400 '\\"url\\" is not a string'
bad '{"url":"ftp://x"}' 400 'is not an http:// or https:// URL'
bad '{"url":"http://"}' 400 'has no host'
bad '{"url":"http://a b"}' 400 'a space or a control byte'
bad '{"url":"http://a\u0001b"}' 400 'a space or a control byte'
bad "{\"url\":\"http://$(head -c 1100 /dev/zero | tr '\0' a)\"}" 400 'longer than 1023 bytes'
req GET /register_peer
assert_eq "$st" 405 "GET /register_peer"
assert_grep 'method not allowed \(use POST\)' body
req POST /peers '{}'
assert_eq "$st" 405 "POST /peers"
# the set's ceiling: 64 peers
for i in $(seq 4 64); do
    req POST /register_peer "{\"url\":\"http://h$i:1\"}"
    [ "$st" = 200 ] || fail "peer $i: $st $(cat body)"
done
req GET /peers
want=$(cat body)
bad '{"url":"http://one-too-many:1"}' 400 'too many peers \(limit 64\)'
# deregistering
req POST /deregister_peer '{"url":"http://127.0.0.1:9/"}'
assert_eq "$st" 200 "deregister"
assert_eq "$(cat body)" '{"status":"ok"}' "deregister's answer"
req GET /peers
assert_no_grep '127\.0\.0\.1:9' body
req POST /deregister_peer '{"url":"http://never-seen:1"}'
assert_eq "$st" 200 "deregister an unknown peer (nothing to do)"
req POST /deregister_peer '{"url":3}'
assert_eq "$st" 400 "deregister a number"
assert_grep '"url\\" is not a string' body
req POST /deregister_peer 'nope'
assert_eq "$st" 400 "deregister malformed"
req POST /deregister_peer '{"url":"gopher://x"}'
assert_eq "$st" 400 "deregister a non-http url"
req GET /metrics
assert_grep '^dynamo_kvindexer_requests_total\{endpoint="/register_peer",method="POST"\} [1-9]' body
assert_grep '^dynamo_kvindexer_errors_total\{endpoint="/register_peer",status_class="4xx"\} [1-9]' body
exec 3>&-
kill -TERM "$KPID"
wait "$KPID"
assert_eq "$?" 0 "exit status"
end


begin "kvindex --listen --peers: a peer registered while recovery asks the others is asked too"
for w in 1 2 3; do
    printf '{"type":"stored","worker":%s,"dp":0,"model":"m","bs":4,"eid":0,"blocks":[{"local":"00000000000000aa","seq":"%016x"}]}\n' "$w" "$w"
done >ev
timeout --foreground 60 kvindex --listen 127.0.0.1:0 <ev >a.out 2>a.err &
PIDS="$PIDS $!"
AURL=$(listening a.err) || fail "the live peer never said where it listens"
for i in $(seq 200); do
    curl -s "$AURL/metrics" | grep -q '^kvix_events_applied_total{type="stored"} 3$' && break
    sleep 0.05
done
# a peer that says nothing until ./go exists, then 503 to everything
cat >slow.py <<'PYEOF'
import http.server, os, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open("asked", "w").close()
        for _ in range(1200):
            if os.path.exists("go"):
                break
            time.sleep(0.05)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
with open("port.tmp", "w") as f:
    f.write(str(s.server_address[1]))
os.rename("port.tmp", "port")
s.serve_forever()
PYEOF
"$PY" slow.py &
PIDS="$PIDS $!"
for i in $(seq 200); do [ -f port ] && break; sleep 0.05; done
timeout --foreground 60 kvindex --listen 127.0.0.1:0 --peers "http://127.0.0.1:$(cat port)" \
    </dev/null >b.out 2>b.err &
BPID=$!
PIDS="$PIDS $BPID"
URL=$(listening b.err) || fail "the recovering replica never said where it listens"
# registered once recovery has listed its peers and asked the slow one
for i in $(seq 600); do [ -f asked ] && break; sleep 0.05; done
[ -f asked ] || fail "the recovering replica never asked its --peers"
req POST /register_peer "{\"url\":\"$AURL\"}"
assert_eq "$st" 200 "register the live peer during recovery"
touch go
for i in $(seq 600); do grep -q '^kvindex: recovered from\|no peer answered' b.err && break; sleep 0.05; done
assert_grep "^kvindex: recovered from $AURL/snapshot: 3 blocks$" b.err
curl -s "$AURL/dump" >a.dump
curl -s "$URL/dump" >b.dump
assert_eq "$(cat b.dump)" "$(cat a.dump)" "the replica's /dump equals its registered peer's"
kill -TERM "$BPID"
wait "$BPID"
assert_eq "$?" 0 "the replica exits 0 on SIGTERM"
end
