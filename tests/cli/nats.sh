# A real nats-server (JetStream) for the CLI tests that need one, sourced
# after lib.sh and procs.sh:
#   nats_start         a server for this test case (with NATS_ARGS, when set, on
#                      its command line): JetStream store in $T/js,
#                      log in $T/server.log, on loopback at a port the server
#                      picks itself (no window in which another test could
#                      take it); sets NPORT, NURL=nats://127.0.0.1:NPORT and
#                      SPID (killed at exit with the other PIDS)
#   nats_restart       the same server again (same store, same port), after
#                      the test killed the last one
#   seq_of SNAPSHOT    the stream sequence a snapshot records (0 if none)
#   nats_pub SUBJECT   each NDJSON record on stdin published on SUBJECT as one
#                      msgpack message, with the NATS text protocol's PUB (the
#                      tests need no client library of their own); returns once
#                      the server answered a PING sent after them
#   stored_eids EID... a stored record of one block per eid (worker 1, dp 0,
#                      model m, bs 4), NDJSON
# Without nats-server the test file fails: .ci/deps (the README's test
# command) installs it, and a check skipped there would pass unseen.
# shellcheck shell=bash
if ! command -v nats-server >/dev/null 2>&1; then
    echo "not ok - nats-server is not installed ('make deps' or .ci/deps installs it)"
    exit 1
fi

# _nats_up PORT: start nats-server on PORT (-1: its choice), wait until its
# log says it is ready once more than before (a restart appends to the log)
_nats_up() {
    local before i
    before=$(grep -c "Server is ready" "$T/server.log" 2>/dev/null)
    # shellcheck disable=SC2086 # NATS_ARGS: the test's extra flags, word-split
    nats-server -js -sd "$T/js" -a 127.0.0.1 -p "$1" ${NATS_ARGS:-} >>"$T/server.log" 2>&1 &
    SPID=$!
    PIDS="$PIDS $SPID"
    for i in $(seq 600); do
        [ "$(grep -c "Server is ready" "$T/server.log" 2>/dev/null)" -gt "${before:-0}" ] && return 0
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.05
    done
    fail "nats-server did not start"
    sed 's/^/#     nats-server: /' "$T/server.log" | tail -3
    return 1
}

nats_start() {
    _nats_up -1 || return 1
    NPORT=$(sed -n 's/.*Listening for client connections on 127\.0\.0\.1:\([0-9]*\)$/\1/p' \
        "$T/server.log" | tail -n 1)
    [ -n "$NPORT" ] || { fail "nats-server did not say its port"; return 1; }
    NURL=nats://127.0.0.1:$NPORT
}

nats_restart() {
    _nats_up "$NPORT"
}

seq_of() {
    local s
    s=$(kvdump --stats --json "$1" 2>/dev/null | sed -n 's/.*"stream_seq":\([0-9]*\).*/\1/p')
    echo "${s:-0}"
}

nats_pub() {
    # (the script as an argument: stdin carries the records)
    "$PY" -c '
import json, socket, sys, msgpack
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.recv(4096)
s.sendall(b"CONNECT {\"verbose\":false,\"headers\":true}\r\n")
subject = sys.argv[2].encode()
for line in sys.stdin:
    body = msgpack.packb(json.loads(line))
    s.sendall(b"PUB %s %d\r\n" % (subject, len(body)) + body + b"\r\n")
s.sendall(b"PING\r\n")
buf = b""
while b"PONG" not in buf:
    got = s.recv(4096)
    if not got:
        sys.exit("nats_pub: the server closed the connection")
    buf += got
' "$NPORT" "$1"
}

stored_eids() {
    local e
    for e in "$@"; do
        printf '{"type":"stored","worker":1,"dp":0,"model":"m","bs":4,"eid":%d,"parent":null,"blocks":[{"local":"%016x","seq":"%016x"}]}\n' \
            "$e" "$e" "$e"
    done
}
