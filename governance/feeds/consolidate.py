"""Hoard's hashed-object consolidation: the archives several replicas uploaded for one hour, merged
into one.

Until one archive is left: download every archive of the hour, merge them, upload the merge under
its own hash, then delete exactly the archives that were read. Every step can be repeated, by this
replica or another at the same time, without losing a download: an archive is deleted only once
all it holds is in an archive uploaded before, and an archive's name is the hash of its bytes, so a
deletion removes exactly the data that was merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from governance.errors import NotFound
from governance.feeds.archive import MAX_BYTES, merge
from governance.feeds.names import archive_name
from governance.feeds.store import FeedStore, Stored
from governance.locks import private_folder, remove_abandoned

MAX_ROUNDS = 20
MERGING = "consolidate-"


@dataclass(frozen=True)
class Consolidated:
    """One hour after consolidation: the archive left, and what it took."""

    feed: str
    hour: datetime
    archive: Stored | None
    rounds: int
    bytes_read: int
    bytes_written: int
    deleted: int


def consolidate(store: FeedStore, feed: str, hour: datetime, work: Path, max_bytes: int = MAX_BYTES) -> Consolidated:
    """Merge the hour's archives until one is left (or none was there); a download over
    `max_bytes` refuses the merge."""
    rounds = read = written = deleted = 0
    for _ in range(MAX_ROUNDS):
        stored = store.archives(feed, hour)
        if len(stored) <= 1:
            return Consolidated(feed, hour, stored[0] if stored else None, rounds, read, written, deleted)
        rounds += 1
        with private_folder(work, MERGING) as folder:
            fetched = _fetch(store, stored, folder)
            if len(fetched) < 2:
                continue  # another replica merged them meanwhile: look again
            read += sum(s.bytes for s, _ in fetched)
            packed = merge(
                [(s.archive.name, path) for s, path in fetched], folder / "merged.tar.gz", feed, hour, max_bytes
            )
            name = archive_name(feed, hour, packed.digest)
            store.put(packed.path, feed, hour, name)
            written += packed.bytes
            deleted += sum(store.delete(s.key) for s, _ in fetched if s.archive.name != name)
    stored = store.archives(feed, hour)
    return Consolidated(feed, hour, stored[0] if len(stored) == 1 else None, rounds, read, written, deleted)


def _fetch(store: FeedStore, stored: list[Stored], folder: Path) -> list[tuple[Stored, Path]]:
    fetched = []
    for item in stored:
        try:
            fetched.append((item, store.get(item.key, folder / item.archive.name)))
        except NotFound:
            continue
    return fetched


def remove_abandoned_merges(work: Path) -> list[Path]:
    """The private folders of merges in `work` whose process was killed, removed."""
    return remove_abandoned(work, MERGING)
