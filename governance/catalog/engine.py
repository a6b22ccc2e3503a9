"""Database engines for the catalog: SQLite (WAL, busy timeout, immediate writes) or any SQLAlchemy URL."""

from __future__ import annotations

import contextlib
import os
import shutil
from functools import cache
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Column, DefaultClause, TextClause, event, inspect
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import SQLModel, create_engine

from governance.catalog import models  # noqa: F401  (registers the tables)
from governance.catalog.migrations import migrate
from governance.errors import (
    CatalogReadOnly,
    CatalogStorageFailed,
    CatalogUnavailable,
    CustodyError,
    error_summary,
)

BUSY_TIMEOUT_SECONDS = 30
SQLITE_CONNECTIONS_KEPT = 48
# The execution option of a transaction that only reads (Catalog.reading).
READ_ONLY = "custody_read_only"


def make_engine(url: str) -> Engine:
    """An engine for `url` with the catalog's tables created."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url, parsed.database)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    try:
        SQLModel.metadata.create_all(engine)
        _add_new_columns(engine)
        migrate(engine)
    except DBAPIError as err:
        failure = failure_of(parsed, err)
        if failure is None:
            raise
        if isinstance(failure, CatalogStorageFailed) and immutable_reader(engine) is not None:
            return engine  # it is read from its file alone (Catalog.reading); a write fails as this did
        raise failure from err
    return engine


# SQLite's words for a database it cannot reach, or that stayed locked past the busy timeout
SQLITE_UNREACHABLE = ("database is locked", "database is busy", "unable to open database file")


def unreachable(err: OperationalError) -> bool:
    """Whether the database could not be reached or stayed busy, rather than refused the statement."""
    if err.connection_invalidated:
        return True
    state = getattr(err.orig, "sqlstate", "")
    if state is None:  # psycopg: the connection failed before the server could answer
        return True
    if state:
        return state.startswith(("08", "57P"))  # connection exceptions, operator intervention
    return any(words in str(err.orig) for words in SQLITE_UNREACHABLE)


def unavailable(url: URL, err: OperationalError) -> CatalogUnavailable:
    """The error to show for a database that cannot be used: its URL without the password, and why."""
    where = url.render_as_string(hide_password=True)
    return CatalogUnavailable(f"the catalog at {where} is unavailable: {error_summary(err.orig or err)}")


# PostgreSQL's codes for writes this process may not make: a role without the privilege, a server
# (a standby) or a transaction that only reads.
WRITES_REFUSED = ("42501", "25006")


def refuses_writes(err: DBAPIError) -> bool:
    """Whether the database refused this process's writes, rather than the statement: a SQLite file,
    or its folder, the process may not write; a PostgreSQL role or server that may not write."""
    name = getattr(err.orig, "sqlite_errorname", None)
    if name is not None:
        return str(name).startswith("SQLITE_READONLY")
    return getattr(err.orig, "sqlstate", None) in WRITES_REFUSED


def read_only(url: URL, why: str) -> CatalogReadOnly:
    """The error to show for a catalog this process may not write: its URL without the password, and why."""
    where = url.render_as_string(hide_password=True)
    return CatalogReadOnly(f"the catalog at {where} cannot be written by this process ({why})")


# SQLite's and PostgreSQL's words for storage that failed under the database: no room left, an I/O error.
SQLITE_STORAGE = ("SQLITE_FULL", "SQLITE_IOERR")
POSTGRES_STORAGE = ("53100", "58030")  # disk_full, io_error


def storage_failed(url: URL, err: DBAPIError) -> CatalogStorageFailed | None:
    """The error to show when the catalog's storage failed under it, naming a file system that is full."""
    name = str(getattr(err.orig, "sqlite_errorname", "") or "")
    if not name.startswith(SQLITE_STORAGE) and getattr(err.orig, "sqlstate", None) not in POSTGRES_STORAGE:
        return None
    where = url.render_as_string(hide_password=True)
    full = url.get_backend_name() == "sqlite" and no_room_beside(url.database)
    room = f"the file system of {Path(url.database or '').parent} has no room left" if full else "its storage failed"
    return CatalogStorageFailed(f"the catalog at {where} cannot be written: {room} ({error_summary(err.orig or err)})")


def no_room_beside(database: str | None) -> bool:
    """Whether the file system a SQLite database is on has no free block left for this user."""
    if not database or database == ":memory:":
        return False
    try:
        return shutil.disk_usage(Path(database).parent).free == 0
    except OSError:
        return False


def immutable_reader(engine: Engine) -> Engine | None:
    """For a SQLite catalog whose file system has no room for the files a reader of its write-ahead
    log must make: the database file alone, opened read-only and immutable, when no write-ahead log
    holds anything the file lacks (none can be written on a full file system meanwhile). None
    otherwise, and for any other database."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    log = Path(f"{database}-wal")
    if log.exists() and log.stat().st_size > 0:
        return None
    return _immutable(str(Path(database).resolve()))


@cache
def _immutable(database: str) -> Engine:
    return create_engine(f"sqlite:///file:{quote(database)}?mode=ro&immutable=1&uri=true")


def failure_of(url: URL, err: DBAPIError) -> CustodyError | None:
    """What a database's failure means for the catalog at `url`: it cannot be reached, or not written
    by this process; None when it refused the statement itself."""
    if refuses_writes(err):
        return read_only(url, error_summary(err.orig or err))
    if (failed := storage_failed(url, err)) is not None:
        return failed
    if isinstance(err, OperationalError) and unreachable(err):
        return unavailable(url, err)
    return None


def _default_clause(column: Column) -> str:
    default = column.server_default
    if default is None:
        return ""
    # The models give every server default as text(...): a literal SQL expression.
    assert isinstance(default, DefaultClause) and isinstance(default.arg, TextClause)
    return f" DEFAULT {default.arg.text}"


def _add_new_columns(engine: Engine) -> None:
    """Bring a catalog made by an earlier release up to date: add the columns and indexes it lacks.

    Only additions happen this way, and every column added since the first release is nullable or
    has a server default, so existing rows stay valid.
    """
    with engine.begin() as connection:
        existing = inspect(connection)
        for table in SQLModel.metadata.sorted_tables:
            present = {c["name"] for c in existing.get_columns(table.name)}
            missing = [column for column in table.columns if column.name not in present]
            for column in missing:
                kind = column.type.compile(dialect=engine.dialect)
                default = _default_clause(column)
                # IF NOT EXISTS: two PostgreSQL processes may upgrade the same catalog at once.
                guard = " IF NOT EXISTS" if engine.dialect.name == "postgresql" else ""
                connection.exec_driver_sql(
                    f'ALTER TABLE {table.name} ADD COLUMN{guard} "{column.name}" {kind}{default}'
                )
            for index in table.indexes:
                index.create(connection, checkfirst=True)


def _sqlite_engine(url: str, database: str | None) -> Engine:
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        # A new catalog is its owner's alone: SQLite gives its journal files the database's mode. One
        # this process may not make is left for SQLite to refuse, in its own words.
        if not os.path.exists(database) and os.access(Path(database).parent, os.W_OK):
            with contextlib.suppress(FileExistsError):  # another process made it meanwhile
                os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    # Connections are kept for as many threads as a busy service runs at once (its deciding
    # threads and its workers): one opened past the pool's size is closed after its use, and
    # opening one (its settings below) costs more than most statements run on it.
    engine = create_engine(
        url,
        connect_args={"timeout": BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        pool_size=SQLITE_CONNECTIONS_KEPT,
        max_overflow=SQLITE_CONNECTIONS_KEPT,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # Take over transaction control from pysqlite so writes can BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_SECONDS * 1000}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        # Immediate: a transaction that will write takes the write lock up front, so two
        # writers queue on the busy timeout instead of failing on a lock upgrade. One that only
        # reads begins deferred: it reads its snapshot of the WAL database beside every other.
        reads = connection.get_execution_options().get(READ_ONLY)
        connection.exec_driver_sql("BEGIN" if reads else "BEGIN IMMEDIATE")

    return engine
