"""Getting archived hours back out of the store, and deleting them, by time range (Hoard's retrieve
and delete). Members are checked before anything is written: only plain files named as downloads of
the feed and hour, so nothing lands outside the target folder."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from governance.feeds.archive import MAX_BYTES, downloads
from governance.feeds.names import hour_folder, hours_between
from governance.feeds.store import FeedStore, Stored


@dataclass(frozen=True)
class Retrieved:
    hours: int
    archives: int
    files: int
    bytes: int
    target: Path


def archives_in(store: FeedStore, feed: str, start: datetime, end: datetime) -> list[Stored]:
    """The archives of the hours from `start` rounded down to `end` rounded up."""
    wanted = set(hours_between(start, end))
    return [s for hour, stored in store.index(feed).items() if hour in wanted for s in stored]


def retrieve(
    store: FeedStore,
    feed: str,
    start: datetime,
    end: datetime,
    target: Path,
    *,
    collapse: bool = False,
    max_bytes: int = MAX_BYTES,
) -> Retrieved:
    """Unpack the range's archives under `target`: `<feed>/<yyyy>/<mm>/<dd>/<hh>/`, or all in
    `target` itself with `collapse`."""
    found = archives_in(store, feed, start, end)
    target.mkdir(parents=True, exist_ok=True)
    files = size = 0
    with tempfile.TemporaryDirectory(prefix="feed-retrieve-") as folder:
        for stored in found:
            local = store.get(stored.key, Path(folder) / stored.archive.name)
            place = target if collapse else target / feed / hour_folder(stored.archive.hour)
            # Unpacked beside the target first: an archive found bad half-way leaves nothing there.
            staging = Path(tempfile.mkdtemp(prefix=".retrieving-", dir=target))
            try:
                unpacked = [
                    (download.name, len(data)) for download, data in _unpack(local, stored, feed, staging, max_bytes)
                ]
                place.mkdir(parents=True, exist_ok=True)
                for name, length in unpacked:
                    (staging / name).replace(place / name)
                    files += 1
                    size += length
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            local.unlink()
    return Retrieved(len({s.archive.hour for s in found}), len(found), files, size, target)


def _unpack(local: Path, stored: Stored, feed: str, staging: Path, max_bytes: int):
    for download, data in downloads(local, stored.archive.name, feed, stored.archive.hour, max_bytes):
        (staging / download.name).write_bytes(data)
        yield download, data


def delete(store: FeedStore, feed: str, start: datetime, end: datetime) -> Iterator[Stored]:
    """Remove the range's archives one by one, yielding each once it is gone."""
    for stored in archives_in(store, feed, start, end):
        if store.delete(stored.key):
            yield stored
