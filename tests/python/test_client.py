"""kvix.Client against a real kvindex --listen (started here, fed events made
with kvix.block_hashes), every method and every kind of error; the router
example of the package's docstring, run as written."""
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import unittest

import kvix

BS = 4
MODEL = "llama"
PROMPT = list(range(100, 132))  # 8 blocks


def stored(worker, tokens, n_blocks, dp=0):
    h = kvix.block_hashes(tokens[: n_blocks * BS], BS)
    return json.dumps({"type": "stored", "model": MODEL, "worker": worker, "dp": dp, "bs": BS,
                       "blocks": [{"local": "%x" % l, "seq": "%x" % s}
                                  for l, s in zip(h.local, h.seq)]})


class Kvindex:
    """kvindex --listen 127.0.0.1:0 fed EVENTS on stdin; stopped with SIGTERM."""

    def __init__(self, events, *args):
        self.p = subprocess.Popen(["kvindex", "--listen", "127.0.0.1:0"] + list(args),
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        self.p.stdin.write("".join(e + "\n" for e in events))
        self.p.stdin.close()
        self.url = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a line said, not a sleep
            line = self.p.stderr.readline()
            if not line:
                break
            m = re.match(r"kvindex: listening on (http://\S+)$", line.strip())
            if m:
                self.url = m.group(1)
                break
        if not self.url:
            self.stop()
            raise RuntimeError("kvindex never said where it listens")
        # stderr keeps being read, so kvindex never blocks on it
        self.err = []
        self.t = threading.Thread(target=lambda: self.err.extend(self.p.stderr), daemon=True)
        self.t.start()
        # every event applied: counted in /metrics
        c = kvix.Client(self.url)
        while time.monotonic() < deadline:
            m = re.search(r'^kvix_events_applied_total\{type="stored"\} (\d+)$', c.metrics(), re.M)
            if m and int(m.group(1)) == len(events):
                return
            time.sleep(0.02)
        raise RuntimeError("kvindex did not apply the events")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        return self.p.wait(60)


def refusing_port():
    """A port nobody can take meanwhile and where a connection is refused: a
    socket bound to it that does not listen (keep it until done)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


class ClientAgainstKvindex(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # worker 2 holds the whole prompt, worker 1 its first 3 blocks, worker 3
        # (dp 1) another prompt
        cls.k = Kvindex([stored(1, PROMPT, 3), stored(2, PROMPT, 8),
                         stored(3, list(range(900, 916)), 4, dp=1)])
        cls.c = kvix.Client(cls.k.url, timeout=5)

    @classmethod
    def tearDownClass(cls):
        assert cls.k.stop() == 0

    def test_query_and_best_worker(self):
        o = self.c.query(PROMPT + [7, 7], MODEL)  # a trailing partial block is dropped
        self.assertEqual(o.scores(), {(2, 0): 32, (1, 0): 12})
        self.assertEqual(o.best(), kvix.Match(2, 0, 32, 8))
        self.assertEqual([m.worker for m in o.matches], [2, 1])
        self.assertEqual(o.raw["frequencies"], [])
        self.assertEqual(self.c.best_worker(PROMPT[:12], MODEL).worker in (1, 2), True)
        # equal prefixes: fewer blocks held first
        self.assertEqual(self.c.best_worker(PROMPT[:12], MODEL), kvix.Match(1, 0, 12, 3))
        self.assertIsNone(self.c.best_worker([5, 5, 5, 5], MODEL))
        self.assertEqual(self.c.best_worker(list(range(900, 916)), MODEL, tenant="default"),
                         kvix.Match(3, 1, 16, 4))

    def test_query_by_hash_equals_query(self):
        h = kvix.block_hashes(PROMPT, BS)
        self.assertEqual(self.c.query_by_hash(h.local, MODEL).raw, self.c.query(PROMPT, MODEL).raw)
        self.assertEqual(self.c.query_by_hash([(1 << 64) - 1], MODEL).matches, [])

    def test_unknown_model_or_tenant(self):
        with self.assertRaises(kvix.NotFound) as e:
            self.c.query(PROMPT, "nope")
        self.assertEqual(e.exception.status, 404)
        self.assertIn("nope", e.exception.message)
        self.assertRegex(str(e.exception), r"^kvix: POST http://127\.0\.0\.1:\d+/query: 404 ")
        self.assertIsNone(self.c.best_worker(PROMPT, "nope"))
        self.assertIsNone(self.c.best_worker(PROMPT, MODEL, tenant="other"))

    def test_register_workers_unregister(self):
        ep = "ipc:///tmp/kvix-python-test-%d" % os.getpid()
        self.c.register(41, ep, MODEL, BS, dp_rank=2)
        self.assertEqual(self.c.workers(), {41: {2: ep}})
        with self.assertRaises(kvix.Conflict) as e:
            self.c.register(41, ep, MODEL, BS, dp_rank=2)
        self.assertEqual(e.exception.status, 409)
        with self.assertRaisesRegex(kvix.Conflict, r"block_size 16 differs from the 4"):
            self.c.register(42, ep + "b", MODEL, 16)
        with self.assertRaisesRegex(kvix.BadRequest, r'bad "endpoint"'):
            self.c.register(42, "http://h:1", MODEL, BS)
        self.c.unregister(41, MODEL)
        self.assertEqual(self.c.workers(), {})
        with self.assertRaisesRegex(kvix.NotFound, r"no registration of instance 41"):
            self.c.unregister(41, MODEL)

    def test_peers(self):
        self.c.register_peer("http://peer-a:8090/")
        self.c.register_peer("http://peer-b:8090")
        self.assertEqual(self.c.peers(), ["http://peer-a:8090", "http://peer-b:8090"])
        self.c.deregister_peer("http://peer-a:8090")
        self.assertEqual(self.c.peers(), ["http://peer-b:8090"])
        with self.assertRaises(kvix.BadRequest):
            self.c.register_peer("ftp://x")
        self.c.deregister_peer("http://peer-b:8090")

    def test_health_metrics_dump(self):
        self.assertTrue(self.c.health())
        self.assertIn('dynamo_kvindexer_requests_total{endpoint="/health",method="GET"}',
                      self.c.metrics())
        d = self.c.dump()
        self.assertEqual(d["llama:default"]["block_size"], BS)
        self.assertEqual(len(d["llama:default"]["events"]), 3)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, r"token -1 is not an integer"):
            self.c.query([-1], MODEL)
        with self.assertRaisesRegex(ValueError, r"hash 18446744073709551616 is not an integer"):
            self.c.query_by_hash([1 << 64], MODEL)
        with self.assertRaisesRegex(ValueError, r"over the service's limit"):
            self.c.query([1] * (5 << 20), MODEL)


class ClientErrors(unittest.TestCase):
    def test_bad_url_or_timeout(self):
        for u in ("localhost:8090", "http://", "http://:8090", "ftp://h:1", "http://h:port"):
            with self.assertRaisesRegex(ValueError, r"bad service URL"):
                kvix.Client(u)
        for t in (0, -1, "1", None):
            with self.assertRaisesRegex(ValueError, r"timeout must be a positive number"):
                kvix.Client("http://h:1", timeout=t)

    def test_unreachable(self):
        held, port = refusing_port()
        try:
            c = kvix.Client("http://127.0.0.1:%d" % port, timeout=5)
            with self.assertRaisesRegex(kvix.Unreachable,
                                        r"^kvix: GET http://127\.0\.0\.1:\d+/health: cannot reach "
                                        r"the service: Connection refused$"):
                c.health()
        finally:
            held.close()

    def test_timeout(self):
        # a listener that never answers (connections wait in its backlog)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        try:
            c = kvix.Client("http://127.0.0.1:%d" % s.getsockname()[1], timeout=0.2)
            t0 = time.monotonic()
            with self.assertRaisesRegex(kvix.Timeout, r"/query: no answer within 0\.2 s$"):
                c.query([1, 2, 3, 4], MODEL)
            self.assertLess(time.monotonic() - t0, 30)
            self.assertTrue(issubclass(kvix.Timeout, kvix.Unreachable))
        finally:
            s.close()

    def test_wrong_answers(self):
        answers = {"/query": (200, b"not json"), "/workers": (200, b'{"a":1}'),
                   "/peers": (200, b"[1]"), "/health": (500, b"plain failure"),
                   "/query_by_hash": (200, b'{"scores":[1]}')}

        class H(http.server.BaseHTTPRequestHandler):
            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                st, body = answers[self.path]
                self.send_response(st)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer

            def log_message(self, *a):
                pass

        srv = http.server.HTTPServer(("127.0.0.1", 0), H)
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        try:
            c = kvix.Client("http://127.0.0.1:%d" % srv.server_address[1], timeout=10)
            with self.assertRaisesRegex(kvix.ProtocolError, r"/query: answer is not JSON"):
                c.query([1], MODEL)
            with self.assertRaisesRegex(kvix.ProtocolError, r"/workers: not a worker list"):
                c.workers()
            with self.assertRaisesRegex(kvix.ProtocolError, r"/peers: not a list of URLs"):
                c.peers()
            with self.assertRaisesRegex(kvix.ProtocolError, r"not an overlap answer"):
                c.query_by_hash([1], MODEL)
            with self.assertRaises(kvix.ServiceError) as e:
                c.health()
            self.assertEqual((e.exception.status, e.exception.message), (500, "plain failure"))
        finally:
            srv.shutdown()
            srv.server_close()


class RouterExample(unittest.TestCase):
    """The router of kvix's docstring, run as written."""

    def example(self):
        doc = kvix.__doc__
        start = doc.index("::\n") + 3
        lines = []
        for line in doc[start:].splitlines():
            if line and not line.startswith("    "):
                break
            lines.append(line[4:])
        code = "\n".join(lines).strip() + "\n"
        self.assertLessEqual(len([l for l in code.splitlines() if l.strip()]), 20,
                             "the example is a 20-line router")
        return code

    def run_example(self, url):
        os.environ["KVIX_URL"] = url
        try:
            ns = {}
            exec(compile(self.example(), "kvix docstring", "exec"), ns)
            return ns["route"]
        finally:
            del os.environ["KVIX_URL"]

    def test_routes_to_the_longest_prefix(self):
        k = Kvindex([stored(1, PROMPT, 3), stored(2, PROMPT, 8)])
        try:
            route = self.run_example(k.url)
            self.assertEqual(route(PROMPT), "http://gpu2:8000")
            self.assertEqual(route(PROMPT[:4] + [0] * 28), "http://gpu1:8000")  # a tie: fewer held
            self.assertEqual(route([9] * 32), "http://gpu1:8000")  # nothing cached: any
            self.assertEqual(route(PROMPT, model="other"), "http://gpu1:8000")  # unknown model
        finally:
            self.assertEqual(k.stop(), 0)

    def test_index_down(self):
        held, port = refusing_port()
        try:
            route = self.run_example("http://127.0.0.1:%d" % port)
            self.assertEqual(route(PROMPT), "http://gpu1:8000")
        finally:
            held.close()
