# Background processes of a CLI test, sourced after lib.sh by the tests that
# start servers (kvindex --listen, nats-server, engines):
#   PIDS                 add "$!" to it: killed (-9) when the test script exits
#   listening ERRFILE    the URL a kvindex --listen said (on stderr) it serves
#   free_port            a loopback TCP port nobody listens on now
# shellcheck shell=bash
PIDS=""
cleanup() {
    local p
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap cleanup EXIT

listening() {
    local i u
    for i in $(seq 300); do
        u=$(sed -n 's/^kvindex: listening on \(http:.*\)$/\1/p' "$1")
        [ -n "$u" ] && { echo "$u"; return 0; }
        sleep 0.05
    done
    return 1
}

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
