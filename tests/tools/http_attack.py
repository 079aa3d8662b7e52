#!/usr/bin/python3
"""Hostile HTTP clients for kvindex --listen, and what the server does under them.

    http_attack.py URL half N [--source ADDR] [--probe-source ADDR] [--pid PID]
        N connections that each send half a request and hold it (slowloris);
        then GET /health on a new connection, timed. Prints one JSON object:
        {"held": connections still open after the probe, "health_s": seconds
        for the answer (null: none within --probe-timeout), "health_status",
        "rss_kb", "hwm_kb" (of PID: VmRSS and VmHWM before and under attack)}.
    http_attack.py URL bodies N SIZE [--pid PID]
        N connections that each announce a SIZE-byte POST /query body and
        send SIZE - 1 bytes of it, then wait; the statuses seen, RSS as above.
    http_attack.py URL nested SIZE [--pid PID]
        one POST /query of SIZE bytes of [[],[],...]: its status, and PID's RSS
        and peak RSS before and after.

Source addresses (127.0.0.2 ...) are loopback addresses of their own: the
server counts connections per client address. Every wait is bounded."""
import argparse
import json
import socket
import sys
import time
import urllib.parse


def proc_kb(pid, field):
    if not pid:
        return None
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def connect(host, port, source, timeout=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    return s


def read_status(s, deadline):
    """The status of the answer on s, or None when none came by deadline."""
    buf = b""
    while b"\r\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s.settimeout(left)
        try:
            got = s.recv(4096)
        except (socket.timeout, OSError):
            return None
        if not got:
            return None
        buf += got
    parts = buf.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 else None


def probe(host, port, source, timeout):
    t0 = time.monotonic()
    try:
        s = connect(host, port, source, timeout)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        st = read_status(s, t0 + timeout)
        s.close()
    except OSError:
        st = None
    return (time.monotonic() - t0 if st else None), st


def still_open(socks):
    n = 0
    for s in socks:
        try:
            s.setblocking(False)
            got = s.recv(1)
            n += got != b""  # b"": closed by the server
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def half(a, host, port):
    socks = []
    rss0, hwm0 = proc_kb(a.pid, "VmRSS"), proc_kb(a.pid, "VmHWM")
    for _ in range(a.n):
        try:
            s = connect(host, port, a.source)
            s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
            socks.append(s)
        except OSError:
            pass
    time.sleep(a.settle)
    health_s, status = probe(host, port, a.probe_source, a.probe_timeout)
    out = {"opened": len(socks), "held": still_open(socks), "health_s": health_s,
           "health_status": status, "rss_kb": [rss0, proc_kb(a.pid, "VmRSS")],
           "hwm_kb": [hwm0, proc_kb(a.pid, "VmHWM")]}
    for s in socks:
        s.close()
    return out


def bodies(a, host, port):
    socks, statuses = [], {}
    rss0, hwm0 = proc_kb(a.pid, "VmRSS"), proc_kb(a.pid, "VmHWM")
    chunk = b"1," * 32768
    for _ in range(a.n):
        try:
            s = connect(host, port, a.source)
            s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % a.size)
            socks.append(s)
        except OSError:
            statuses["refused"] = statuses.get("refused", 0) + 1
    # the bodies in turns, so that all of them are held at once
    left = {s: a.size - 1 for s in socks}
    while left:
        for s in list(left):
            n = min(left[s], len(chunk))
            try:
                s.settimeout(5)
                s.sendall(chunk[:n])
                left[s] -= n
            except OSError:
                statuses["closed"] = statuses.get("closed", 0) + 1
                left[s] = 0
            if left[s] == 0:
                del left[s]
    rss1, hwm1 = proc_kb(a.pid, "VmRSS"), proc_kb(a.pid, "VmHWM")
    deadline = time.monotonic() + 2
    for s in socks:
        st = read_status(s, deadline) if time.monotonic() < deadline else None
        statuses[str(st)] = statuses.get(str(st), 0) + 1
        s.close()
    health_s, status = probe(host, port, a.probe_source, a.probe_timeout)
    return {"statuses": statuses, "rss_kb": [rss0, rss1], "hwm_kb": [hwm0, hwm1],
            "health_s": health_s, "health_status": status}


def nested(a, host, port):
    rss0, hwm0 = proc_kb(a.pid, "VmRSS"), proc_kb(a.pid, "VmHWM")
    n = (a.size - 2) // 3
    body = b"[" + b"[]," * (n - 1) + b"[]]"
    t0 = time.monotonic()
    s = connect(host, port, a.source, 60)
    s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    st = read_status(s, time.monotonic() + 60)
    s.close()
    return {"status": st, "seconds": time.monotonic() - t0,
            "rss_kb": [rss0, proc_kb(a.pid, "VmRSS")], "hwm_kb": [hwm0, proc_kb(a.pid, "VmHWM")]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("kind", choices=["half", "bodies", "nested"])
    p.add_argument("n", type=int)
    p.add_argument("size", type=int, nargs="?", default=0)
    p.add_argument("--source", default=None)
    p.add_argument("--probe-source", default=None)
    p.add_argument("--probe-timeout", type=float, default=5.0)
    p.add_argument("--settle", type=float, default=0.5)
    p.add_argument("--pid", type=int, default=0)
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port
    if a.kind == "nested":
        a.size = a.n
    out = {"half": half, "bodies": bodies, "nested": nested}[a.kind](a, host, port)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
