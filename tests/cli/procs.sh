# Background processes of a CLI test, sourced after lib.sh by the tests that
# start servers (kvindex --listen, nats-server, engines):
#   PIDS                 add "$!" to it: killed (-9) with every process below it
#                        (a `timeout CMD` leaves no orphaned CMD) when the test
#                        script exits, and asserted gone
#   listening ERRFILE    the URL a kvindex --listen said (on stderr) it serves; empty
#                        ERRFILE before starting it (`: >ERRFILE`): a background job's own
#                        redirection may come after this has read a previous run's line
#   free_port            a loopback TCP port nobody listens on now
# shellcheck shell=bash
PIDS=""

# The processes below PID, deepest first.
descendants() {
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do
        descendants "$c"
        echo "$c"
    done
}

# state_ppid PID: "STATE PPID" of PID (nothing once it is gone)
state_ppid() {
    local s st pp
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    read -r st pp _ <<<"${s##*) }" # after the command name, which may hold spaces
    echo "$st $pp"
}

cleanup() {
    local p all="" i left s
    # only our children still running: a pid waited for may be another's now
    for p in $PIDS; do
        s=$(state_ppid "$p")
        [ "${s#* }" = "$$" ] && all="$all $(descendants "$p") $p"
    done
    for p in $all; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    for i in $(seq 100); do # killed orphans are reaped by init: a moment
        left=""
        for p in $all; do
            s=$(state_ppid "$p")
            [ -n "$s" ] && [ "${s%% *}" != Z ] && left="$left $p"
        done
        [ -z "$left" ] && return 0
        sleep 0.02
    done
    echo "not ok - processes still running after the test: $left"
}
trap cleanup EXIT

listening() { # (up to 60 s: a sanitizer build starting on a loaded machine)
    local i u
    for i in $(seq 1200); do
        u=$(sed -n 's/^kvindex: listening on \(http:.*\)$/\1/p' "$1")
        [ -n "$u" ] && { echo "$u"; return 0; }
        sleep 0.05
    done
    return 1
}

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
