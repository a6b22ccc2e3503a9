"""A real PostgreSQL server for tests: its own cluster in a temporary folder, password auth, loopback only.

`make test` installs postgresql; without it the fixtures fail, they never skip. PostgreSQL refuses to run
as root, so under root the cluster belongs to `nobody` and its programs run through `runuser`.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_port

SUPERUSER = "custody"
UNPRIVILEGED = "nobody"


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    data: Path | None = None

    def stop(self) -> None:
        """Stop the server as an administrator does: its sessions are ended, new ones refused."""
        _run(_as_server_user([str(postgres_bin() / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]))

    def start(self) -> None:
        """Start the stopped server again, on the same port."""
        _start(postgres_bin(), self.data, self.port)
        _wait_ready(self)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        self._administer(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop the database, closing whatever connections the test's engines still keep open."""
        self._administer(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _administer(self, statement: str) -> None:
        import psycopg

        dsn = f"host={self.host} port={self.port} user={self.user} password={self.password} dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(statement)


def postgres_bin() -> Path:
    on_path = shutil.which("pg_ctl")
    candidates = ([str(Path(on_path).resolve().parent)] if on_path else []) + sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), reverse=True
    )
    for folder in candidates:
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    raise RuntimeError("PostgreSQL is not installed: `apt-get install postgresql` (make test installs it)")


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", UNPRIVILEGED, "--", *command] if os.geteuid() == 0 else command


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway cluster on a free loopback port; stop it and delete it afterwards."""
    binaries = postgres_bin()
    # Not under pytest's tmp_path: its parents are private to root, and the server may run as nobody.
    folder = Path(tempfile.mkdtemp(prefix="custody-pg-"))
    data, password_file = folder / "data", folder / "password"
    password = secrets.token_urlsafe(16)
    password_file.write_text(password)
    if os.geteuid() == 0:
        account = pwd.getpwnam(UNPRIVILEGED)
        os.chown(folder, account.pw_uid, account.pw_gid)
        os.chown(password_file, account.pw_uid, account.pw_gid)
    port = free_port()
    try:
        _run(
            _as_server_user(
                [
                    str(binaries / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    SUPERUSER,
                    "--pwfile",
                    str(password_file),
                    "-A",
                    "scram-sha-256",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale",
                    "C",
                ]
            )
        )
        _start(binaries, data, port)
        server = PostgresServer("127.0.0.1", port, SUPERUSER, password, data)
        _wait_ready(server)
        yield server
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                capture_output=True,
                check=False,
            )
        shutil.rmtree(folder, ignore_errors=True)


def _start(binaries: Path, data: Path, port: int) -> None:
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' -c fsync=off -c max_connections=200"
    )
    log = data.parent / "server.log"
    _run(
        _as_server_user(
            [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"]
        )
    )


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{Path(command[0]).name} {' '.join(command[1:4])}… failed: {result.stderr.strip() or result.stdout.strip()}"
        )


def _wait_ready(server: PostgresServer, seconds: float = 30) -> None:
    import psycopg

    deadline = time.monotonic() + seconds
    dsn = f"host={server.host} port={server.port} user={server.user} password={server.password} dbname=postgres"
    while True:
        try:
            psycopg.connect(dsn).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
