"""The resident lander: one long-running process, with a Spark session started once, that lands
streamed assets for the landing runs Dagster launches, so that a landing costs seconds of work
rather than a new JVM and a cold Kafka source each time.

A landing run's step asks it over a Unix socket in a folder only the service's OS user may enter
(and the lander checks the peer's OS user again). A request names a run and an asset, nothing
else: the lander establishes who the run is for from what the run's launch recorded, decides,
and lands, exactly as the step would have (the Dagster side: assets/lander.py). It answers with
lines of progress, then the version it committed or why it did not. A step that finds no lander
listening lands in its own Spark.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governance import errors
from governance.errors import CustodyError, EnvironmentProblem, LanderBusy, LanderLost, RemoteFailure, reason_of
from governance.locks import take_if_free
from governance.runs import Progress

log = logging.getLogger(__name__)

SOCKET_NAME = "lander.sock"
# A request is a run id and an asset key: anything longer is not one.
REQUEST_LIMIT = 4096
# How long a connection may take to send its whole request before it is dropped.
REQUEST_SECONDS = 5.0
# How long a step waits to be let in, and the lander for a step to take a line of progress.
CONNECT_SECONDS = 5.0
SEND_SECONDS = 30.0
# Connections answered at once; more are refused (retryably) rather than queued without bound.
MAX_CONNECTIONS = 64
# The longest path of a Unix socket on Linux, in bytes, less its terminating NUL.
SOCKET_PATH_LIMIT = 107
LOCK_NAME = "lander.lock"


@dataclass(frozen=True)
class Ask:
    """Land `asset` for run `run_id`; `peer_uid` and `peer_pid` are the asking process's OS user and
    id as the lander's socket saw them (None where the platform does not say), never what it sent."""

    run_id: str
    asset: str
    peer_uid: int | None = None
    peer_pid: int | None = None

    @property
    def peer(self) -> str:
        return f"uid {self.peer_uid} pid {self.peer_pid}" if self.peer_uid is not None else ""


Land = Callable[[Ask, Progress], int]


def socket_path(home: Path) -> Path:
    return home / "lander" / SOCKET_NAME


def ask_lander(path: Path, ask: Ask, progress: Progress) -> int | None:
    """The id of the version the lander at `path` committed for `ask`, relaying its progress; None
    when none answers there (or it is too busy to take the request, which it has not begun).
    Raises what refused or failed the landing."""
    connection = _connected(path)
    if connection is None:
        return None
    with connection, connection.makefile("rwb") as stream:
        # A lander that refuses at once (busy) may have closed before the request is written: its
        # answer is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stream.write(json.dumps({"run_id": ask.run_id, "asset": ask.asset}).encode() + b"\n")
            stream.flush()
        for line in stream:
            answer = json.loads(line)
            if "progress" in answer:
                progress(str(answer["progress"]))
            elif "landed" in answer:
                return int(answer["landed"])
            elif answer.get("error") == LanderBusy.__name__:
                return None
            else:
                raise RemoteFailure(
                    str(answer.get("message")),
                    kind=str(answer.get("error")),
                    retryable=bool(answer.get("retryable")),
                    exit_code=int(answer.get("exit_code") or 1),
                )
    raise LanderLost(
        f"the lander at {path} stopped before it answered for {ask.asset}: a landing it committed stands "
        "(the step finds it when retried); one it had not is rolled back by the next landing or custody repair"
    )


def reachable(path: Path) -> bool:
    """Whether a lander listens at `path`."""
    connection = _connected(path)
    if connection is not None:
        connection.close()
    return connection is not None


def _connected(path: Path) -> socket.socket | None:
    """A connection to the lander at `path`; None when nobody listens there, or not for this OS
    user (its folder is the service's alone)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(CONNECT_SECONDS)
    try:
        connection.connect(str(path))
    # BlockingIOError: its queue of connections not yet taken is full.
    except (FileNotFoundError, ConnectionRefusedError, PermissionError, TimeoutError, BlockingIOError):
        connection.close()
        return None
    # A landing takes as long as its records: the step waits for it as it would for its own Spark.
    connection.settimeout(None)
    return connection


@contextlib.contextmanager
def serving(path: Path, land: Land) -> Iterator[socketserver.BaseServer]:
    """A server at `path` answering each connection on a thread of its own, held by this process
    alone while the block runs (a second lander on the same home is refused). Connections wait
    until the caller serves; the socket is removed, after the landings under way end, with the block."""
    _check_length(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    lock = path.with_name(LOCK_NAME)
    lock.touch(mode=0o600)
    held = take_if_free(lock)
    if held is None:
        raise EnvironmentProblem(f"a lander already serves {path.parent}: stop it first")
    try:
        # No lander holds the lock: a socket left here is a dead one's.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = _Server(str(path), _Handler)
        server.land = land
        os.chmod(path, 0o600)
        try:
            yield server
        finally:
            server.server_close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    finally:
        os.close(held)


def _check_length(path: Path) -> None:
    if len(os.fsencode(path)) > SOCKET_PATH_LIMIT:
        raise EnvironmentProblem(
            f"the lander's socket {path} is longer than a Unix socket's {SOCKET_PATH_LIMIT} bytes: "
            "use a shorter CUSTODY_HOME"
        )


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    # Closing the server waits for the landings under way rather than killing them half done.
    daemon_threads = False
    block_on_close = True
    request_queue_size = MAX_CONNECTIONS
    land: Land

    def __init__(self, address: str, handler: type[socketserver.BaseRequestHandler]) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        if not self.server.slots.acquire(blocking=False):
            self._answer(_refusal(LanderBusy(f"the lander is answering {MAX_CONNECTIONS} requests already")))
            return
        try:
            self._answer(self._landed())
        finally:
            self.server.slots.release()

    def _landed(self) -> dict[str, Any]:
        ask = None
        try:
            ask = self._request()
            return {"landed": self.server.land(ask, self._progress)}
        except CustodyError as err:
            return _refusal(err)
        except Exception as err:  # answered, and its trace kept in the lander's log
            log.exception("%s failed", ask)
            return {
                "error": type(err).__name__,
                "message": f"{type(err).__name__}, unexpected: the lander's log has what it said and where",
                "retryable": False,
                "exit_code": 1,
            }

    def _request(self) -> Ask:
        line = _line_within(self.connection, REQUEST_LIMIT, time.monotonic() + REQUEST_SECONDS)
        # From here on, a step that stops reading its progress holds the landing up SEND_SECONDS at most.
        self.connection.settimeout(SEND_SECONDS)
        try:
            body = json.loads(line)
            run_id, asset = str(uuid.UUID(str(body["run_id"]))), str(body["asset"])
        except (ValueError, KeyError, TypeError) as err:
            raise errors.InvalidInput("a request to the lander is one line: {run_id: a run's id, asset}") from err
        pid, uid = _peer(self.connection)
        return Ask(run_id=run_id, asset=asset, peer_uid=uid, peer_pid=pid)

    def _progress(self, message: str) -> None:
        # A step that stopped listening (its run was killed) does not stop its landing: the version
        # stands once committed, and `custody repair` tells Dagster of it.
        with contextlib.suppress(OSError):
            self._send({"progress": message})

    def _answer(self, answer: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self._send(answer)

    def _send(self, message: dict[str, Any]) -> None:
        self.wfile.write(json.dumps(message).encode() + b"\n")
        self.wfile.flush()


def _line_within(connection: socket.socket, limit: int, deadline: float) -> bytes:
    """One line of at most `limit` bytes, whole by `deadline`: a client that sends it slowly, or
    never ends it, holds a slot no longer."""
    received = b""
    while b"\n" not in received:
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            connection.settimeout(left)
            chunk = connection.recv(limit + 1 - len(received))
        except TimeoutError as err:
            raise errors.InvalidInput(f"no whole request came within {REQUEST_SECONDS:.0f} s") from err
        if not chunk:
            break
        received += chunk
        if len(received) > limit:
            raise errors.InvalidInput(f"a request to the lander is one line of {limit} bytes at most")
    return received.split(b"\n", 1)[0]


def _refusal(err: CustodyError) -> dict[str, Any]:
    return {
        "error": type(err).__name__,
        "message": reason_of(err),
        "retryable": err.retryable,
        "exit_code": err.exit_code,
    }


def _peer(connection: socket.socket) -> tuple[int | None, int | None]:
    """The process at the other end and its OS user, where the platform says (Linux)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None, None
    pid, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return pid, uid
