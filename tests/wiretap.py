"""A wiretap on the hop between the Custody service and a Dagster webserver served on its own: an
HTTP proxy on loopback that passes every request on as it came and keeps a copy of each, as someone
who can watch that hop sees it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

# Headers of one hop (RFC 9110, 7.6.1), which the proxy makes anew.
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Wiretap:
    port: int
    seen: list[Seen] = field(default_factory=list)


@contextmanager
def wiretap(target: str) -> Iterator[Wiretap]:
    """A proxy to the webserver at `target` on a loopback port of its own, for as long as the block runs."""
    tap = Wiretap(0)

    class Handler(BaseHTTPRequestHandler):
        def _pass_on(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            tap.seen.append(Seen(self.command, self.path, headers, body))
            answer = requests.request(self.command, target + self.path, headers=headers, data=body, timeout=300)
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in HOP | {"content-encoding"}:
                    self.send_header(name, value)
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _pass_on

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tap.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tap
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
