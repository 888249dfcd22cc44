"""Real HTTP servers on 127.0.0.1 for the load-generator tests (stdlib ``http.server``).

A helper module (no tests): each test module wraps :func:`serve` in its own fixture.

Routes: ``/json`` (JSON reply), ``/sse`` (5 server-sent events 5 ms apart, chunked),
``/chunked`` (3 plain chunks), ``/fail`` (HTTP 500), ``/stall`` (blocks while the server's
``stall`` event is set — a server that stops answering for a while), anything else: 404.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: TestServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.paths.append(self.path)
        self.server.bodies.append(body)
        if self.path == "/stall":
            while self.server.stall.is_set():
                time.sleep(0.005)
            self.path = "/json"
        if self.path in ("/sse", "/chunked"):
            sse = self.path == "/sse"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if sse else "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(5 if sse else 3):
                if i:
                    time.sleep(0.005)
                self._chunk(f'data: {{"token": {i}}}\n\n'.encode() if sse else b"part%d" % i)
            if sse:
                self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path in ("/json", "/fail") or self.path.startswith("/v1/"):
            status = 500 if self.path == "/fail" else 200
            out = json.dumps({"ok": status == 200, "echo_len": len(body)}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.send_error(404)

    do_GET = do_POST


class TestServer(ThreadingHTTPServer):
    __test__ = False  # not a test class
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stall = threading.Event()
        self.paths: list[str] = []
        self.bodies: list[bytes] = []

    def url(self, path: str = "/json") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


def serve() -> Iterator[TestServer]:
    """Run a :class:`TestServer` in a thread for the duration of a fixture."""
    srv = TestServer()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.stall.clear()
    srv.shutdown()
    srv.server_close()


def free_port() -> int:
    """A port with nothing listening (bound and released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
