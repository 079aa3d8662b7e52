#!/usr/bin/python3
"""A peer for kvindex --peers tests: answers GET /snapshot and GET /dump.

    fake_peer.py PORTFILE MODE [FILE]

MODE:
  hang         accept connections and never answer
  garbage N    /snapshot answers N bytes that are no snapshot; /dump 404
  dump FILE    /snapshot 404; /dump answers FILE
Writes the port it listens on (127.0.0.1, picked by the system) to PORTFILE
once it listens; serves until killed."""
import http.server
import os
import socket
import sys
import threading
import time


def main():
    portfile, mode = sys.argv[1], sys.argv[2]
    arg = sys.argv[3] if len(sys.argv) > 3 else None
    if mode == "hang":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        held = []
        with open(portfile + ".tmp", "w") as f:
            f.write(str(s.getsockname()[1]))
        os.rename(portfile + ".tmp", portfile)
        while True:
            c, _ = s.accept()
            held.append(c)  # read nothing, answer nothing

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if mode == "garbage" and self.path == "/snapshot":
                n = int(arg)
                self.send_response(200)
                self.send_header("Content-Length", str(n))
                self.end_headers()
                chunk = b"x" * (1 << 20)
                while n > 0:
                    k = min(n, len(chunk))
                    self.wfile.write(chunk[:k])
                    n -= k
                return
            if mode == "dump" and self.path == "/dump":
                size = os.path.getsize(arg)
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                with open(arg, "rb") as f:
                    while True:
                        b = f.read(1 << 20)
                        if not b:
                            break
                        self.wfile.write(b)
                return
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
