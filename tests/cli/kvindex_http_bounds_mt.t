#!/usr/bin/env bash
# kvindex --listen against hostile clients (tests/tools/http_attack.py): half
# requests held by the thousand, a request trickled in a byte at a time,
# bodies that together outgrow the memory, a query of nested arrays, a body
# announced past the ceiling. The server keeps answering /health and holds
# what its limits say. Also under ThreadSanitizer (the server's threads
# share the connections' records). Every wait is bounded.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
HA=$ROOT/tests/tools/http_attack.py
KPID=""
# the attacks hold a thousand sockets and more, and so does the server
ulimit -n "$(ulimit -Hn)" 2>/dev/null

serve() {
    : >in
    timeout --foreground 120 kvindex --listen 127.0.0.1:0 "$@" <in >kv.out 2>kv.err 3>&- &
    KPID=$!
    PIDS="$PIDS $KPID"
    URL=$(listening kv.err) && return 0
    fail "kvindex never said where it listens"
    sed 's/^/#     /' kv.err | head -5
    return 1
}

stop() {
    kill -TERM "$KPID"
    wait "$KPID"
    rc=$?
    KPID=""
}

kvpid() { pgrep -P "$KPID" -x kvindex; } # under timeout(1)

# field JSON-FILE JQ: one value of the attack's report
field() { jq -r "$2" "$1"; }

metric() { curl -s "$URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

begin "kvindex --listen: 1,100 half-sent requests from one address, and /health is still answered"
# one server thread: libmicrohttpd alone held 1,020 and left the rest (and
# /health) waiting in the backlog for as long as the attack lasted
serve --http-threads 1 || { end; exit; }
"$PY" "$HA" "$URL" half 1100 --settle 1 >r.json || fail "the attack did not run"
assert_eq "$(field r.json .health_status)" 200 "/health's status under the attack"
held=$(field r.json .held)
[ "$held" -le 512 ] || fail "$held half requests held from one address (limit 512)"
[ "$(metric kvix_http_connections_evicted_total)" -ge 1 ] || fail "no connection was evicted"
stop
expect_rc 0
end

begin "kvindex --listen: --http-max-per-address bounds one address, others are served"
serve --http-max-per-address 50 --http-max-connections 200 || { end; exit; }
"$PY" "$HA" "$URL" half 300 --source 127.0.0.2 --probe-source 127.0.0.3 --settle 1 >r.json ||
    fail "the attack did not run"
assert_eq "$(field r.json .health_status)" 200 "/health's status from another address"
held=$(field r.json .held)
[ "$held" -le 50 ] || fail "$held half requests held from one address (limit 50)"
stop
expect_rc 0
end

begin "kvindex --listen: a request trickled a byte at a time is cut at --http-timeout"
serve --http-timeout 1 || { end; exit; }
"$PY" - "$URL" <<'EOF' >drip.out || fail "the trickle was never cut"
import socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port))
s.sendall(b"GET /health HTTP/1.1\r\n")
t0 = time.monotonic()
# libmicrohttpd's own timeout starts again at every byte: this never ended
while time.monotonic() - t0 < 20:
    try:
        s.sendall(b"X")
        s.settimeout(0.3)
        if s.recv(1) == b"":
            print("cut after %.1f s" % (time.monotonic() - t0))
            sys.exit(0)
    except socket.timeout:
        continue
    except OSError:
        print("cut after %.1f s" % (time.monotonic() - t0))
        sys.exit(0)
sys.exit(1)
EOF
[ "$(metric kvix_http_connections_expired_total)" -ge 1 ] || fail "no connection counted expired"
stop
expect_rc 0
end

begin "kvindex --listen: bodies past --http-memory are refused (503), what they hold stays bounded"
serve --http-memory 16777216 || { end; exit; }
pid=$(kvpid)
"$PY" "$HA" "$URL" bodies 40 4194304 --pid "$pid" >r.json || fail "the attack did not run"
assert_eq "$(field r.json .health_status)" 200 "/health's status after the attack"
grow=$(( $(field r.json '.hwm_kb[1]') - $(field r.json '.hwm_kb[0]') ))
# 40 x 4 MiB were held before, ~170 MB; 16 MiB now, and the sanitizers' keep
[ "$grow" -lt 122880 ] || fail "peak memory grew by $grow kB"
[ "$(metric kvix_http_request_memory_refused_total)" -ge 1 ] || fail "no request was refused"
# and a body announced past the ceiling is answered before it is sent
"$PY" - "$URL" <<'EOF' >early.out || fail "no early 413: $(cat early.out)"
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port), timeout=5)
s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
got = s.recv(64)
print(got)
sys.exit(0 if got.startswith(b"HTTP/1.1 413") else 1)
EOF
stop
expect_rc 0
end

begin "kvindex --listen: an 8 MiB query of nested arrays is refused without being built"
serve || { end; exit; }
pid=$(kvpid)
"$PY" "$HA" "$URL" nested 8388608 --pid "$pid" >r.json || fail "the attack did not run"
assert_eq "$(field r.json .status)" 413 "the answer's status"
grow=$(( $(field r.json '.hwm_kb[1]') - $(field r.json '.hwm_kb[0]') ))
# jansson's values for it were ~630 MB at their peak
[ "$grow" -lt 153600 ] || fail "peak memory grew by $grow kB"
assert_grep '"error":"more than 4096 arrays and objects' <(curl -s -XPOST --data-binary \
    "[$(printf '[],%.0s' $(seq 5000))[]]" "$URL/query")
stop
expect_rc 0
end
