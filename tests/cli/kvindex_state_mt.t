#!/usr/bin/env bash
# Saves and GET /snapshot, /dump of an index that keeps ingesting (issue 31,
# and issue 29's GET /snapshot and /dump): a snapshot taken while events are
# applied at full speed equals, by kvdump --diff, the index at the eids it
# records; clients asking at once get one state, written once; at most 16
# responses of a kind are in flight (503 past it), clients that do not read
# hold one unlinked file and no memory, and give their places back when they
# go. Every wait is a bounded poll.
# shellcheck shell=bash
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/procs.sh"
TRACE=$ROOT/tests/fixtures/mooncake/conversation_trace.jsonl.xz
KPID=""

serve() { # kvindex --listen 127.0.0.1:0 ARGS, stdin from ./in; sets URL
    timeout --foreground 600 kvindex --listen 127.0.0.1:0 "$@" <in >kv.out 2>kv.err 3>&- &
    KPID=$!
    PIDS="$PIDS $KPID"
    URL=$(listening kv.err) && return 0
    fail "kvindex never said where it listens"
    return 1
}

metric() { # metric NAME[{labels}]: its value (0 when absent)
    curl -s "$URL/metrics" | awk -v m="$1" '$1 == m {print $2; f = 1} END {if (!f) print 0}'
}

applied() { curl -s "$URL/metrics" | awk '/^kvix_events_applied_total/ {s += $2} END {print s + 0}'; }

stop() {
    kill -TERM "$KPID"
    wait "$KPID"
    rc=$?
    KPID=""
}

# expected SNAPSHOT LOG OUT: the index of LOG's events, each worker's up to the
# eid SNAPSHOT records for it (only the workers it holds), saved as OUT
expected() {
    local w e
    : >exp.ndjson
    kvdump --stats --json "$1" | jq -r 'select(.scope == "worker") | "\(.worker) \(.eid)"' |
        while read -r w e; do
            kvreplay --quiet --fast --worker "$w" --until-eid "$e" "$2" >>exp.ndjson
        done
    kvindex --quiet -s "$3" exp.ndjson
}

begin "GET /snapshot while events are applied at full speed: the index at the eids it records"
# 64 workers with 256-block caches: stores and evictions, each worker's eids 0, 1, ...
kvreplay --quiet --mooncake "$TRACE" --limit 6000 --workers 64 --capacity 256 --no-queries \
    -f msgpack >log.mp
total=$(kvreplay --quiet --fast log.mp | wc -l)
rm -f in
mkfifo in
exec 7<>in # (opened both ways: never blocks) the input stays open while the parts are fed
serve --threads 2 -f msgpack || { end; exit; }
head -c 200000 log.mp >&7
for i in $(seq 600); do [ "$(applied)" -gt 0 ] && break; sleep 0.05; done
cat log.mp >/dev/null # (warm the page cache: the feed below runs at full speed)
tail -c +200001 log.mp >&7 &
feeder=$!
before=$(applied)
st=$(curl -s -o mid.kvix -w '%{http_code}' "$URL/snapshot")
after=$(applied)
wait $feeder
exec 7>&-
assert_eq "$st" 200 "GET /snapshot"
echo "# applied $before of $total events when the snapshot was asked, $after when it came"
[ "$before" -lt "$total" ] || fail "ingest was over before the snapshot was asked"
for i in $(seq 2400); do [ "$(applied)" = "$total" ] && break; sleep 0.05; done
stop
assert_eq "$rc" 0 "exit status"
run kvdump --check mid.kvix
expect_rc 0
expected mid.kvix log.mp exp.kvix
run kvdump --diff mid.kvix exp.kvix
expect_rc 0
assert_grep '"equal":true' out
end

begin "a save while input streams in: the index at the eids it records"
kvreplay --quiet --mooncake "$TRACE" --limit 6000 --workers 64 --capacity 256 --no-queries \
    -f msgpack >log.mp
rm -f s.kvix
# --save-every-events saves while the writer threads still apply what came before
kvreplay --quiet --fast log.mp | kvindex --quiet --threads 2 -s s.kvix --save-every-events 3000 \
    2>err &
kpid=$!
PIDS="$PIDS $kpid"
# the first save that is not the last: copied as soon as it is on disk
for i in $(seq 1200); do [ -s s.kvix ] && break; sleep 0.02; done
cp s.kvix first.kvix
wait $kpid
run kvdump --check first.kvix
expect_rc 0
cmp -s first.kvix s.kvix && fail "the first save was the last"
expected first.kvix log.mp exp2.kvix
run kvdump --diff first.kvix exp2.kvix
expect_rc 0
assert_grep '"equal":true' out
end

begin "GET /dump and /snapshot: one state for the clients that ask meanwhile, 16 in flight, 503 past"
# an index whose /dump (about 15 MB) outlasts the socket buffers of a client that does not read
kvreplay --quiet --mooncake "$TRACE" --limit 6000 --workers 64 --capacity 4096 --no-queries \
    -f msgpack | kvindex --quiet -f msgpack -s big.kvix
: >in
serve -s big.kvix || { end; exit; }
pid=$(pgrep -P "$KPID" kvindex || echo "$KPID") # timeout's child
run $PY - "$URL" "$pid" <<'EOF'
import socket, sys, time, os, urllib.parse, urllib.request
url, pid = sys.argv[1], sys.argv[2]
u = urllib.parse.urlparse(url)
def metric(name):
    for line in urllib.request.urlopen(url + "/metrics", timeout=60).read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
def ask(path):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((u.hostname, u.port))
    s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    return s
def status(s):
    line = b""
    s.settimeout(240)
    while not line.endswith(b"\r\n"):
        c = s.recv(1)
        if not c:
            return "closed"
        line += c
    return line.split()[1].decode()
def held_files(): # distinct files: the responses share one
    inodes = set()
    for fd in os.listdir("/proc/%s/fd" % pid):
        try:
            p = "/proc/%s/fd/%s" % (pid, fd)
            if "kvix-http-state" in os.readlink(p):
                inodes.add(os.stat(p).st_ino)
        except OSError:
            continue
    return len(inodes)
D = 'kvix_http_state_responses_in_flight{endpoint="/dump"}'
W = 'kvix_http_states_written_total{endpoint="/dump"}'
# 20 at once, none of them reading its body: 16 answered, 4 refused
socks = [ask(b"/dump") for _ in range(20)]
codes = [status(s) for s in socks]
print("codes", sorted(codes))
assert codes.count("200") == 16 and codes.count("503") == 4, codes
print("written", metric(W), "in flight", metric(D), "files", held_files())
assert metric(D) == 16
assert 1 <= metric(W) <= 3, metric(W) # one state, or a few on a machine this slow
assert 1 <= held_files() <= 3, held_files() # unlinked files, a few at most, not one a client
x = ask(b"/dump")
assert status(x) == "503"
x.close()
# the clients go: their places come back
for s in socks:
    s.close()
for i in range(1200):
    if metric(D) == 0:
        break
    time.sleep(0.05)
assert metric(D) == 0, metric(D)
# three that read: one state, byte for byte
socks = [ask(b"/snapshot") for _ in range(3)]
bodies = []
for s in socks:
    f = s.makefile("rb")
    assert f.readline().split()[1] == b"200"
    n = 0
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        if h.lower().startswith(b"content-length:"):
            n = int(h.split(b":")[1])
    bodies.append(f.read(n))
    s.close()
assert bodies[0] == bodies[1] == bodies[2] and len(bodies[0]) > 1000
open("served.kvix", "wb").write(bodies[0])
print("ok")
EOF
expect_rc 0
assert_grep '^ok$' out
run kvdump --diff served.kvix big.kvix
expect_rc 0
stop
assert_eq "$rc" 0 "exit status"
end
