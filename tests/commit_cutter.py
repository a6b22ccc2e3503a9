"""A TCP proxy on loopback in front of a PostgreSQL server that cuts one connection at the COMMIT of
the first transaction whose statements hold a marker: before the COMMIT reaches the server, or once
the server has answered it, the answer never reaching the client. Every other byte passes as it came."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

COMMIT = b"COMMIT\x00"  # a simple query's text, as psycopg sends it
CHUNK = 65536


@dataclass
class Cutter:
    port: int
    marker: bytes
    after_commit: bool
    cut: threading.Event = field(default_factory=threading.Event)


@contextmanager
def commit_cutter(host: str, port: int, marker: bytes, *, after_commit: bool) -> Iterator[Cutter]:
    """The proxy to `host:port`, for as long as the block runs."""
    listener = socket.create_server(("127.0.0.1", 0))
    cutter = Cutter(listener.getsockname()[1], marker, after_commit)

    def serve() -> None:
        with suppress(OSError):  # the listener closed: the block has ended
            while True:
                client, _ = listener.accept()
                server = socket.create_connection((host, port))
                _Connection(cutter, client, server).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield cutter
    finally:
        listener.close()


class _Connection:
    def __init__(self, cutter: Cutter, client: socket.socket, server: socket.socket):
        self.cutter, self.client, self.server = cutter, client, server
        self.armed, self.tail = False, b""
        self.answer_dropped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._from_client, daemon=True).start()
        threading.Thread(target=self._from_server, daemon=True).start()

    def _from_client(self) -> None:
        with suppress(OSError):
            while data := self.client.recv(CHUNK):
                window = self.tail + data  # a marker may come in two reads
                self.armed = self.armed or self.cutter.marker in window
                self.tail = window[-len(self.cutter.marker) :]
                if self._cutting(data):
                    if not self.cutter.after_commit:
                        self._close()
                        return
                    self.answer_dropped.set()
                self.server.sendall(data)
        self._close()

    def _cutting(self, data: bytes) -> bool:
        if self.cutter.cut.is_set() or not self.armed or COMMIT not in data:
            return False
        self.cutter.cut.set()
        return True

    def _from_server(self) -> None:
        with suppress(OSError):
            while data := self.server.recv(CHUNK):
                if self.answer_dropped.is_set():
                    break
                self.client.sendall(data)
        self._close()

    def _close(self) -> None:
        for end in (self.client, self.server):
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
