#!/usr/bin/python3
"""Python client of kvindex's HTTP API for tests/cli/kvindex_http.t.

    http_client.py gen SEED EVENTS.ndjson MODEL.json QUERIES.json
        random events (shared prefixes, parents, removals, clears, dp ranks,
        hashes over the whole u64 range) with local hashes from the
        contract's reference hasher (hash_ref.py), the per-(model, tenant,
        worker, dp) block counts they leave, and queries of those prompts
    http_client.py check URL MODEL.json QUERIES.json KVIX_ANSWERS.out
        every query through POST /query (kvix and Dynamo shapes) and
        POST /query_by_hash; the kvix answers must equal the lines kvindex -q
        printed for the same queries (KVIX_ANSWERS), the Dynamo answers must
        be those answers in Dynamo's shape, with tree_sizes from MODEL.json
    http_client.py kvix-queries QUERIES.json   the queries as kvix query lines
    http_client.py inflight URL PID             a request in flight across SIGTERM
    http_client.py serve-dump FILE PORTFILE     serve FILE at GET /dump (a fake peer, as
                                                Dynamo's: 404 on GET /snapshot)
    http_client.py burst URL N ROUNDS           N keep-alive connections each send
        GET /health at once, ROUNDS times, every answer read before the next
        round (a closed loop, as wrk's): all answered within 30 s

Exits 1 with a message on the first mismatch."""
import http.client
import http.server
import json
import os
import random
import selectors
import signal
import socket
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hash_ref  # noqa: E402

M64 = (1 << 64) - 1
BS = 4
PARTS = [("llama", "default"), ("llama", "t2")]


def die(msg):
    print("http_client: " + msg, file=sys.stderr)
    sys.exit(1)


def chain(tokens, lora=""):
    seed = hash_ref.lora_seed(lora)
    locs, seqs, prev = [], [], None
    for i in range(len(tokens) // BS):
        loc = hash_ref.local_hash(tokens[i * BS:(i + 1) * BS], seed)
        prev = loc if prev is None else hash_ref.seq_next(prev, loc)
        locs.append(loc)
        seqs.append(prev)
    return locs, seqs


def gen(seed, evpath, modelpath, qpath):
    rng = random.Random(seed)
    workers = [(w, dp) for w in (1, 7, (1 << 62) + 5, (1 << 63) - 1) for dp in (0, 1)]
    prefixes = [[rng.randrange(1 << 32) for _ in range(3 * BS)] for _ in range(6)]
    prompts = []
    for _ in range(24):
        p = list(rng.choice(prefixes))
        p += [rng.randrange(1 << 32) for _ in range(rng.randrange(1, 4) * BS)]
        prompts.append(p)
    held = {}  # (model, tenant, worker, dp) -> set of seq
    eids = {}
    out = []
    for _ in range(400):
        m, t = rng.choice(PARTS)
        w, dp = rng.choice(workers)
        key = (m, t, w, dp)
        hs = held.setdefault(key, set())
        eid = eids.get(key, -1) + 1
        eids[key] = eid
        ev = {"worker": w, "dp": dp, "model": m, "tenant": t, "eid": eid}
        r = rng.random()
        if r < 0.7 or not hs:
            locs, seqs = chain(rng.choice(prompts))
            k = 0
            while k < len(seqs) and seqs[k] in hs:
                k += 1
            if k == len(seqs):
                k = rng.randrange(len(seqs))  # a duplicate store: idempotent
            ev.update(type="stored", bs=BS,
                      parent=("%016x" % seqs[k - 1]) if k else None,
                      blocks=[{"local": "%016x" % locs[i], "seq": "%016x" % seqs[i]}
                              for i in range(k, len(seqs))])
            hs.update(seqs[k:])
        elif r < 0.95:
            gone = rng.sample(sorted(hs), min(len(hs), rng.randrange(1, 4)))
            ev.update(type="removed", hashes=["%016x" % h for h in gone])
            hs.difference_update(gone)
        else:
            ev.update(type="cleared")
            hs.clear()
        out.append(json.dumps(ev))
    with open(evpath, "w") as f:
        f.write("\n".join(out) + "\n")
    with open(modelpath, "w") as f:
        json.dump([[m, t, w, dp, len(s)] for (m, t, w, dp), s in held.items()], f)
    queries = []
    for i, p in enumerate(prompts + [[5] * 9, []]):
        m, t = PARTS[i % 2]
        queries.append({"id": i, "model": m, "tenant": t, "tokens": p})
    with open(qpath, "w") as f:
        json.dump(queries, f)


def post(url, path, body):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def get(url, path):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def dynamo_expect(ans, bs, held, m, t):
    scores, trees = {}, {}
    for s in ans["scores"]:
        w, dp = str(s["worker"]), str(s["dp"])
        scores.setdefault(w, {})[dp] = s["blocks"] * bs
        trees.setdefault(w, {})[dp] = held.get((m, t, s["worker"], s["dp"]), 0)
    return {"scores": scores, "frequencies": [], "tree_sizes": trees}


def check(url, modelpath, qpath, answers):
    with open(modelpath) as f:
        held = {(m, t, w, dp): n for m, t, w, dp, n in json.load(f)}
    with open(qpath) as f:
        queries = json.load(f)
    with open(answers) as f:
        expected = f.read().splitlines()
    if len(expected) != len(queries):
        die("kvindex -q printed %d answers for %d queries" % (len(expected), len(queries)))
    matched = 0
    for q, want in zip(queries, expected):
        st, body = post(url, "/query", json.dumps(q))
        got = body.decode().rstrip("\n")
        if st != 200 or got != want:
            die("POST /query (kvix) %d: %s, kvindex -q: %s" % (st, got, want))
        ans = json.loads(want)
        matched += len(ans["scores"])
        dyn = dynamo_expect(ans, BS, held, q["model"], q["tenant"])
        st, body = post(url, "/query", json.dumps(
            {"token_ids": q["tokens"], "model_name": q["model"], "tenant_id": q["tenant"]}))
        if st != 200 or json.loads(body) != dyn:
            die("POST /query (dynamo) %d: %s, expected %s" % (st, body[:300], dyn))
        locs, _ = chain(q["tokens"])
        # u64 both ways: the hashes are written as bare integers up to 2^64-1
        text = '{"block_hashes":[%s],"model_name":"%s","tenant_id":"%s"}' % (
            ",".join(str(x) for x in locs), q["model"], q["tenant"])
        st, body = post(url, "/query_by_hash", text)
        if st != 200 or json.loads(body) != dyn:
            die("POST /query_by_hash %d: %s, expected %s" % (st, body[:300], dyn))
    if matched == 0:
        die("no query matched anything: the test proves nothing")
    print("checked %d queries, %d scores" % (len(queries), matched))


def kvix_queries(qpath):
    with open(qpath) as f:
        for q in json.load(f):
            print(json.dumps(q))


def inflight(url, pid):
    """Send a POST's headers and half its body, SIGTERM kvindex, wait until it
    refuses new connections, then send the rest: the answer must come."""
    u = urllib.parse.urlparse(url)
    body = json.dumps({"model": "llama", "tokens": [1, 2, 3, 4]}).encode()
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
    for _ in range(300):  # until the server has begun the request (this scrape is the other)
        st, m = get(url, "/metrics")
        if b"\nkvix_http_requests_in_flight 2\n" in m:
            break
        time.sleep(0.05)
    else:
        die("the half-sent request never showed in kvix_http_requests_in_flight")
    os.kill(pid, signal.SIGTERM)
    for _ in range(300):
        try:
            socket.create_connection((u.hostname, u.port), timeout=1).close()
        except OSError:
            break
        time.sleep(0.05)
    else:
        die("kvindex still accepts connections after SIGTERM")
    s.sendall(body[10:])
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if b"\r\n\r\n" in data:
            head, rest = data.split(b"\r\n\r\n", 1)
            n = [int(h.split(b":")[1]) for h in head.split(b"\r\n")
                 if h.lower().startswith(b"content-length:")]
            if n and len(rest) >= n[0]:
                break
    s.close()
    if not data.startswith(b"HTTP/1.1 200"):
        die("request in flight across SIGTERM got: %r" % data[:200])
    print(data.split(b"\r\n\r\n", 1)[1].decode().strip())


def serve_dump(path, portfile):
    with open(path, "rb") as f:
        dump = f.read()

    served = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/dump":
                self.send_error(404)
                return
            served.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(dump)))
            self.end_headers()
            self.wfile.write(dump)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(portfile + ".tmp", portfile)
    srv.timeout = 60
    deadline = time.monotonic() + 60
    while not served and time.monotonic() < deadline:  # one dump, then exit
        srv.handle_request()


def burst(url, n, rounds):
    """libmicrohttpd's own loop stalled when exactly 128 connections were
    ready on one thread (it waited for more before serving them)."""
    u = urllib.parse.urlparse(url)
    req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    socks = [socket.create_connection((u.hostname, u.port), timeout=30) for _ in range(n)]
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + 30
    for r in range(rounds):
        for s in socks:
            s.sendall(req)
        got = {s: b"" for s in socks}
        while len(got):
            if time.monotonic() > deadline:
                die("round %d of %d: %d of %d connections unanswered after 30 s"
                    % (r + 1, rounds, len(got), n))
            for k, _ in sel.select(0.5):
                s = k.fileobj
                if s not in got:
                    continue
                d = s.recv(65536)
                if not d:
                    die("round %d: a connection closed" % (r + 1))
                got[s] += d
                if got[s].endswith(b'{"status":"ok"}'):
                    if not got[s].startswith(b"HTTP/1.1 200"):
                        die("round %d: got %r" % (r + 1, got[s][:200]))
                    del got[s]
    for s in socks:
        s.close()


def main():
    a = sys.argv[1:]
    if a[:1] == ["gen"] and len(a) == 5:
        gen(int(a[1]), a[2], a[3], a[4])
    elif a[:1] == ["check"] and len(a) == 5:
        check(a[1], a[2], a[3], a[4])
    elif a[:1] == ["kvix-queries"] and len(a) == 2:
        kvix_queries(a[1])
    elif a[:1] == ["inflight"] and len(a) == 3:
        inflight(a[1], int(a[2]))
    elif a[:1] == ["burst"] and len(a) == 4:
        burst(a[1], int(a[2]), int(a[3]))
    elif a[:1] == ["serve-dump"] and len(a) == 3:
        serve_dump(a[1], a[2])
    else:
        die("usage: see the top of this file")


if __name__ == "__main__":
    main()
