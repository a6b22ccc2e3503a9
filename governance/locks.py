"""Locks between processes: a file lock for what lives on disk, an advisory lock for what lives in
the catalog. A file lock dies with its process, so one nobody holds is proof its holder is gone."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from governance.errors import EnvironmentProblem

if TYPE_CHECKING:
    from sqlmodel import Session


# Beside private folders: held shared while one is made and locked, exclusively while they are swept.
FOLDERS_LOCK = ".private-folders.lock"


@contextmanager
def file_lock(path: Path, *, shared: bool = False) -> Iterator[int]:
    """Hold an exclusive (or shared) lock on `path` (created if missing) for the block; yields its
    descriptor. A lock file that cannot be made (a read-only file system, a folder this user may not
    write) is an EnvironmentProblem naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as err:
        raise EnvironmentProblem(f"cannot write the lock file {path} ({err.strerror or err})") from err
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield descriptor
    finally:
        os.close(descriptor)


@contextmanager
def file_lock_within(path: Path, seconds: float) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the block, waiting at most `seconds`
    for it, else TimeoutError. The tries come at most a millisecond apart, so that a lock let go is
    taken at once by a process waiting for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Read-only, and as the umask allows: every OS user who may write the file beside it may lock it.
    descriptor = os.open(path, os.O_CREAT | os.O_RDONLY, 0o666)
    try:
        deadline, pause = time.monotonic() + seconds, 0.0001
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{path} stayed locked for {seconds} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.001)
        yield
    finally:
        # Let go before closing: a child forked meanwhile shares the descriptor, and would hold it.
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)


@contextmanager
def private_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder `parent/<prefix>…`, locked while the block runs and removed after it. A process
    killed in the block leaves it unlocked, for `remove_abandoned` to take away."""
    with file_lock(parent / FOLDERS_LOCK, shared=True):
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(descriptor)


def remove_abandoned(parent: Path, prefix: str) -> list[Path]:
    """Remove the folders `parent/<prefix>…` that no live process holds: those of processes killed
    in `private_folder`. Returns them."""
    found = sorted(parent.glob(f"{prefix}*"))
    if not found:
        return []
    with file_lock(parent / FOLDERS_LOCK):
        return [folder for folder in found if _removed_if_free(folder)]


def _removed_if_free(folder: Path) -> bool:
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        shutil.rmtree(folder)
        return True
    finally:
        os.close(descriptor)


def take_if_free(path: Path) -> int | None:
    """A descriptor holding `path`'s lock, for the caller to close; None while a live process holds
    it, or when the file is gone."""
    try:
        # Read-only: a lock file another OS user made may not be opened for writing, and flock needs no more.
        descriptor = os.open(path, os.O_RDONLY)
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
