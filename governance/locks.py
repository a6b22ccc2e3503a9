"""Locks between processes: a file lock for what lives on disk, an advisory lock for what lives in
the catalog. A file lock dies with its process, so one nobody holds is proof its holder is gone."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlmodel import Session


@contextmanager
def file_lock(path: Path) -> Iterator[int]:
    """Hold an exclusive lock on `path` (created if missing) for the block; yields its descriptor."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield descriptor
    finally:
        os.close(descriptor)


def take_if_free(path: Path) -> int | None:
    """A descriptor holding `path`'s lock, for the caller to close; None while a live process holds
    it, or when the file is gone."""
    try:
        descriptor = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def advisory_lock(session: Session, name: str) -> None:
    """Hold the lock named `name` until the session's transaction ends. SQLite transactions already
    begin with the database's write lock; PostgreSQL takes a transaction advisory lock."""
    from sqlalchemy import text

    if session.get_bind().dialect.name == "postgresql":
        session.connection().execute(text("SELECT pg_advisory_xact_lock(hashtext(:name))").bindparams(name=name))
