"""Ledger checkpoints owed: the newest entry each catalog appended that no checkpoint pins yet, written
when the innermost `closing_checkpoint` block ends. Kept apart from the Catalog API, so that a command
enters the block before anything loads the database's libraries (`custody --help` needs none)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from governance.catalog.api import Catalog

# By checkpoint file: the catalog, and the seq and hash of its newest entry.
owed_checkpoints: ContextVar[dict[Path, tuple[Catalog, int, str]] | None] = ContextVar(
    "custody_checkpoints_owed", default=None
)
# Checkpoints that were due when a transaction committed but could not be written then, by file:
# written, or their failure raised, where the next work begins.
failed_checkpoints: dict[Path, tuple[Catalog, int, str]] = {}
failed_lock = threading.Lock()


@contextmanager
def closing_checkpoint() -> Iterator[None]:
    """Entries appended within the block and not checkpointed yet are checkpointed when it ends,
    however it ends: a command, or a call of the Python API, leaves none of its entries exposed.
    A checkpoint that cannot be written fails the block, unless it is failing already."""
    owed: dict[Path, tuple[Catalog, int, str]] = {}
    token = owed_checkpoints.set(owed)
    try:
        yield
    finally:
        owed_checkpoints.reset(token)
        pending = {**owed, **take_failed(owed)}
        for catalog, seq, entry_hash in pending.values():
            catalog.record_checkpoint(seq, entry_hash)


def take_failed(paths) -> dict[Path, tuple[Catalog, int, str]]:
    with failed_lock:
        return {path: failed_checkpoints.pop(path) for path in list(paths) if path in failed_checkpoints}
