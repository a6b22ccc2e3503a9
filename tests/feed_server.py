"""A feed server on a loopback port: each path answers as one kind of feed does."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FeedServer:
    port: int
    hits: dict[str, int] = field(default_factory=dict)
    headers_seen: list[dict[str, str]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


class _Handler(BaseHTTPRequestHandler):
    server_version = "feeds/1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        state: FeedServer = self.server.state
        path = self.path.split("?", 1)[0]
        with self.server.lock:
            count = state.hits[path] = state.hits.get(path, 0) + 1
            state.headers_seen.append(dict(self.headers))
        if path == "/changing":
            self._send(200, json.dumps({"tick": count, "price": 100 + count}).encode())
        elif path == "/same":
            self._send(200, b'{"price": 100}')
        elif path == "/error":
            self._send(500, b"boom")
        elif path == "/flaky":
            self._send(500, b"boom") if count % 2 else self._send(200, json.dumps({"tick": count}).encode())
        elif path == "/slow":
            time.sleep(1.5)
            self._send(200, b'{"slow": true}')
        elif path == "/notjson":
            self._send(200, f"<html>not json {count}</html>".encode())
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.3)
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.2/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/empty":
            self._send(200, b"")
        elif path == "/big":
            self._send(200, b"x" * 5000)
        else:
            self._send(404, b"no such feed")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


@contextmanager
def running_feed_server() -> Iterator[FeedServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.state = FeedServer(httpd.server_address[1])
    httpd.lock = threading.Lock()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.state
    finally:
        httpd.shutdown()
        httpd.server_close()
