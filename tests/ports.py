"""Loopback ports for the tests' servers and for clients that must find nobody, or a stranger, there.

A client connecting to a loopback port nobody holds may be given that very port as its own: the
connection then joins itself and reads back what it sent. So a port that must refuse is held, and a
server is taken as listening only when a connection reaches another socket than its own.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


def free_port() -> int:
    """A port no one listens on now: for a server that takes its port only as a number."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int, timeout: float = 0.5) -> bool:
    """Whether a server listens on the loopback `port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            return connection.getsockname() != connection.getpeername()
    except OSError:
        return False


@contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port held and never listened on: a connection to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@dataclass(frozen=True)
class EchoServer:
    port: int
    hung_up: threading.Event  # set once a client has closed its connection


@contextmanager
def echo_server() -> Iterator[EchoServer]:
    """A loopback port whose server sends back every byte it reads: it answers, in no protocol."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = EchoServer(listener.getsockname()[1], threading.Event())

        def echo() -> None:
            with contextlib.suppress(OSError):  # the test is over and the listener shut down
                while True:
                    connection, _ = listener.accept()
                    try:
                        with connection, contextlib.suppress(OSError):  # a client that resets hangs up too
                            while data := connection.recv(4096):
                                connection.sendall(data)
                    finally:
                        server.hung_up.set()

        threading.Thread(target=echo, daemon=True).start()
        try:
            yield server
        finally:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
