"""The feed store: a folder or S3-compatible object storage, through fsspec, laid out as Hoard's
`<prefix>/<feed>/<yyyy>/<mm>/<dd>/<hh>/<archive>`.

Every write is of a whole object under a name that holds its hash: a folder's objects are written
beside their place and renamed into it, an object store's are put whole. So a reader sees an archive
complete or not at all, and writing one twice changes nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import fsspec

from governance.errors import EnvironmentProblem, NotFound
from governance.feeds.names import ArchiveName, hour_folder, parse_archive

SCHEMES = ("file", "s3")
# Where an S3-compatible store is, when it is not AWS: read from the environment with the credentials.
S3_ENDPOINT = "CUSTODY_FEEDS_S3_ENDPOINT"


@dataclass(frozen=True)
class Stored:
    """An archive in the store."""

    key: str
    archive: ArchiveName
    bytes: int


class FeedStore:
    """One store, addressed by URL: `file:///path` or `s3://bucket/prefix`."""

    def __init__(self, url: str, environ: Mapping[str, str] | None = None):
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in SCHEMES:
            raise EnvironmentProblem(f"feed store {url!r}: use file:///path or s3://bucket/prefix")
        self.url = url
        environ = os.environ if environ is None else environ
        if scheme == "s3":
            options: dict[str, object] = {"use_listings_cache": False}
            if environ.get(S3_ENDPOINT):
                options["client_kwargs"] = {"endpoint_url": environ[S3_ENDPOINT]}
            self.fs, root = fsspec.core.url_to_fs(url, **options)
        else:
            self.fs, root = fsspec.core.url_to_fs(url, auto_mkdir=True)
        self.root = root.rstrip("/")
        self.local = scheme == "file"

    def hour_key(self, feed: str, hour: datetime) -> str:
        return f"{self.root}/{feed}/{hour_folder(hour)}"

    def archives(self, feed: str, hour: datetime) -> list[Stored]:
        """The archives of one feed's hour, in name order."""
        found = []
        for entry in self._list(self.hour_key(feed, hour)):
            archive = parse_archive(entry["name"].rsplit("/", 1)[-1])
            if archive and archive.feed == feed and archive.hour == hour:
                found.append(Stored(entry["name"], archive, int(entry.get("size") or 0)))
        return sorted(found, key=lambda s: s.archive.name)

    def index(self, feed: str) -> dict[datetime, list[Stored]]:
        """Every archive of a feed by hour, in one listing; each hour's in name order."""
        found: dict[datetime, list[Stored]] = {}
        listing = self.fs.glob(f"{self.root}/{feed}/*/*/*/*/{feed}_*.tar.gz", detail=True)
        for key, info in sorted(listing.items()):
            archive = parse_archive(key.rsplit("/", 1)[-1])
            if archive and archive.feed == feed and self.hour_key(feed, archive.hour) == key.rsplit("/", 1)[0]:
                found.setdefault(archive.hour, []).append(Stored(key, archive, int(info.get("size") or 0)))
        return dict(sorted(found.items()))

    def hours(self, feed: str) -> list[datetime]:
        """Every hour of a feed that holds an archive."""
        return list(self.index(feed))

    def put(self, source: Path, feed: str, hour: datetime, name: str) -> str:
        """Upload an archive; one that is there already is left as it is (its name is its content)."""
        key = f"{self.hour_key(feed, hour)}/{name}"
        if self.fs.exists(key):
            return key
        if self.local:
            # A temporary name no listing reads as an archive, then one rename into place.
            partial = f"{self.hour_key(feed, hour)}/.{name}.{uuid.uuid4().hex}.partial"
            self.fs.put_file(str(source), partial)
            self.fs.mv(partial, key)
        else:
            self.fs.put_file(str(source), key)
        return key

    def get(self, key: str, target: Path) -> Path:
        try:
            self.fs.get_file(key, str(target))
        except FileNotFoundError as err:
            raise NotFound(f"{key} is gone from the feed store") from err
        return target

    def delete(self, key: str) -> bool:
        """Remove an object; False when another replica removed it first."""
        try:
            self.fs.rm_file(key)
        except FileNotFoundError:
            return False
        return True

    def write_text(self, key: str, text: str) -> None:
        relative = f"{self.root}/{key}"
        if self.local:
            partial = f"{relative}.{uuid.uuid4().hex}.partial"
            self.fs.pipe_file(partial, text.encode())
            self.fs.mv(partial, relative)
        else:
            self.fs.pipe_file(relative, text.encode())

    def read_text(self, key: str) -> tuple[str, datetime] | None:
        """An object's text and when the store last wrote it, by the store's clock."""
        relative = f"{self.root}/{key}"
        try:
            info = self.fs.info(relative)
            text = self.fs.cat_file(relative).decode()
        except FileNotFoundError:
            return None
        return text, _modified(info)

    def size(self, feed: str) -> int:
        return sum(s.bytes for stored in self.index(feed).values() for s in stored)

    def _list(self, key: str) -> list[dict]:
        try:
            return self.fs.ls(key, detail=True)
        except FileNotFoundError:
            return []


def _modified(info: Mapping) -> datetime:
    value = info.get("LastModified") or info.get("mtime") or info.get("created")
    if value is None:
        raise EnvironmentProblem(f"the feed store gives no modification time for {info.get('name')}")
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), tz=UTC)
