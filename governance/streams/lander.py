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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governance import errors
from governance.errors import CustodyError, EnvironmentProblem, LanderBusy, LanderLost, RemoteFailure, reason_of
from governance.runs import Progress

log = logging.getLogger(__name__)

SOCKET_NAME = "lander.sock"
# A request is a run id and an asset key: anything longer is not one.
REQUEST_LIMIT = 4096
# How long a connection may take to send its request before it is dropped.
REQUEST_SECONDS = 5.0
# Connections answered at once; more are refused (retryably) rather than queued without bound.
MAX_CONNECTIONS = 64
# The longest path of a Unix socket on Linux, less its terminating NUL.
SOCKET_PATH_LIMIT = 107


@dataclass(frozen=True)
class Ask:
    """Land `asset` for run `run_id`. `peer` is the asking process as the lander saw it (its OS
    user and process id), never what the request says."""

    run_id: str
    asset: str
    peer: str = ""


Land = Callable[[Ask, Progress], int]


def socket_path(home: Path) -> Path:
    return home / "lander" / SOCKET_NAME


def ask_lander(path: Path, ask: Ask, progress: Progress) -> int | None:
    """The id of the version the lander at `path` committed for `ask`, relaying its progress; None
    when no lander listens there. Raises what refused or failed the landing."""
    connection = _connected(path)
    if connection is None:
        return None
    with connection, connection.makefile("rwb") as stream:
        stream.write(json.dumps({"run_id": ask.run_id, "asset": ask.asset}).encode() + b"\n")
        stream.flush()
        for line in stream:
            answer = json.loads(line)
            if "progress" in answer:
                progress(str(answer["progress"]))
            elif "landed" in answer:
                return int(answer["landed"])
            else:
                raise RemoteFailure(
                    str(answer.get("message")),
                    kind=str(answer.get("error")),
                    retryable=bool(answer.get("retryable")),
                    exit_code=int(answer.get("exit_code") or 1),
                )
    raise LanderLost(
        f"the lander at {path} stopped before it answered for {ask.asset}: whatever it began is rolled back "
        "by the next landing (or custody repair)"
    )


def _connected(path: Path) -> socket.socket | None:
    if not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        connection.close()
        return None
    return connection


@contextlib.contextmanager
def serving(path: Path, land: Land) -> Iterator[socketserver.BaseServer]:
    """A server at `path` answering each connection on a thread of its own; its socket is removed
    when the block ends."""
    _claim(path)
    server = _Server(str(path), _Handler)
    server.land = land
    os.chmod(path, 0o600)
    try:
        yield server
    finally:
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _claim(path: Path) -> None:
    """Make `path`'s folder, for this OS user alone, and take over a socket no lander listens on."""
    if len(str(path)) > SOCKET_PATH_LIMIT:
        raise EnvironmentProblem(
            f"the lander's socket {path} is longer than a Unix socket's {SOCKET_PATH_LIMIT} characters: "
            "use a shorter CUSTODY_HOME"
        )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    listening = _connected(path)
    if listening is not None:
        listening.close()
        raise EnvironmentProblem(f"a lander already listens at {path}: stop it first")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
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
        pid, uid = _peer(self.connection)
        if uid is not None and uid != os.getuid():
            raise errors.AccessDenied(f"the lander answers its own OS user's processes only, not uid {uid}")
        self.connection.settimeout(REQUEST_SECONDS)
        try:
            line = self.rfile.readline(REQUEST_LIMIT + 1)
        except TimeoutError as err:
            raise errors.InvalidInput(f"no request came within {REQUEST_SECONDS:.0f} s") from err
        finally:
            self.connection.settimeout(None)
        try:
            if len(line) > REQUEST_LIMIT:
                raise ValueError("too long")
            body = json.loads(line)
            peer = f"uid {uid} pid {pid}" if uid is not None else ""
            return Ask(run_id=str(body["run_id"]), asset=str(body["asset"]), peer=peer)
        except (ValueError, KeyError, TypeError) as err:
            raise errors.InvalidInput("a request to the lander is one line: {run_id, asset}") from err

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
