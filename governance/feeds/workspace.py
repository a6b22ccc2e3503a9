"""A collector's workspace: downloads by feed and hour, packed into archives and uploaded.

`downloads/<feed>/<yyyy>/<mm>/<dd>/<hh>/<download>` and `archives/<feed>/<yyyy>/<mm>/<dd>/<archive>`,
as Hoard lays them out. A download is written beside its place and renamed in; an hour's downloads
are deleted only once the archive holding them is in the store, so a crash at any point loses none.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from governance.feeds.archive import pack
from governance.feeds.names import DOWNLOAD_NAME, archive_name, hour_folder, parse_download
from governance.feeds.store import FeedStore


@dataclass(frozen=True)
class Uploaded:
    feed: str
    hour: datetime
    name: str
    downloads: int
    bytes: int


class Workspace:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.downloads = self.root / "downloads"
        self.archives = self.root / "archives"

    def hour_dir(self, feed: str, hour: datetime) -> Path:
        return self.downloads / feed / hour_folder(hour)

    def save(self, feed: str, hour: datetime, name: str, data: bytes) -> Path:
        folder = self.hour_dir(feed, hour)
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{name}.{uuid.uuid4().hex}.partial"
        with open(partial, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(partial, folder / name)
        return folder / name

    def hours(self, feed: str | None = None) -> Iterator[tuple[str, datetime]]:
        """Each (feed, hour) that holds downloads, oldest first within a feed."""
        feeds = [feed] if feed else sorted(p.name for p in self.downloads.iterdir()) if self.downloads.is_dir() else []
        for name in feeds:
            base = self.downloads / name
            for folder in sorted(base.glob("*/*/*/*")):
                if folder.is_dir():
                    yield name, datetime.strptime("/".join(folder.parts[-4:]), "%Y/%m/%d/%H").replace(tzinfo=UTC)

    def files(self, feed: str, hour: datetime) -> list[Path]:
        folder = self.hour_dir(feed, hour)
        return sorted(p for p in folder.iterdir() if DOWNLOAD_NAME.fullmatch(p.name)) if folder.is_dir() else []

    def latest(self, feed: str) -> Path | None:
        """The newest download of a feed still in the workspace."""
        hours = list(self.hours(feed))
        for _, hour in reversed(hours):
            files = self.files(feed, hour)
            if files:
                return max(files, key=lambda p: parse_download(p.name).at)
        return None

    def ship(self, store: FeedStore, feed: str, hour: datetime) -> Uploaded | None:
        """Pack an hour's downloads, upload the archive, then delete what it holds."""
        files = self.files(feed, hour)
        if not files:
            _remove_if_empty(self.hour_dir(feed, hour))
            return None
        folder = self.archives / feed / hour.strftime("%Y/%m/%d")
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{feed}_{uuid.uuid4().hex}.partial"
        try:
            packed = pack(files, partial)
            name = archive_name(feed, hour, packed.digest)
            target = folder / name
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        store.put(target, feed, hour, name)
        for path in files:
            path.unlink()
        _remove_if_empty(self.hour_dir(feed, hour))
        target.unlink()
        return Uploaded(feed, hour, name, len(files), packed.bytes)


def _remove_if_empty(folder: Path) -> None:
    # Not empty: a download came in meanwhile, and is shipped next time.
    with contextlib.suppress(OSError):
        folder.rmdir()
