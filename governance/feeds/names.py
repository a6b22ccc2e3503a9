"""Names of downloads, archives and store keys, as Hoard lays them out; every time is UTC."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from governance.errors import InvalidInput
from governance.zones import AssetKey

HASH_CHARS = 20
HOUR = timedelta(hours=1)
_HASH = rf"[A-Za-z0-9_-]{{{HASH_CHARS}}}"
_AT = r"\d{8}T\d{6}\.\d{3}"
DOWNLOAD_NAME = re.compile(rf"(?P<feed>[a-z][a-z0-9_.]*)_(?P<at>{_AT})_(?P<hash>{_HASH})(?P<postfix>[A-Za-z0-9_.-]*)")
# When a download was fetched, as the one group of a pattern Spark's (Java's) regular expressions read too.
FETCHED_AT = rf"_({_AT})_{_HASH}"
ARCHIVE_NAME = re.compile(rf"(?P<feed>[a-z][a-z0-9_.]*)_(?P<hour>\d{{8}}T\d{{2}})_(?P<hash>{_HASH})\.tar\.gz")


def feed_id(key: AssetKey) -> str:
    """The feed's name in files and keys: `domain.name`, which no asset name can be confused with."""
    return f"{key.domain}.{key.name}"


def content_hash(data: bytes) -> str:
    """The first 20 characters of the URL-safe base64 of the bytes' SHA-256."""
    return short_hash(hashlib.sha256(data))


def short_hash(digest: hashlib._Hash) -> str:
    return base64.urlsafe_b64encode(digest.digest()).decode()[:HASH_CHARS]


def hour_of(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hour_label(hour: datetime) -> str:
    """The hour as a batch's label and in messages: `2026-11-23T14`."""
    return hour.strftime("%Y-%m-%dT%H")


def hour_folder(hour: datetime) -> str:
    return hour.strftime("%Y/%m/%d/%H")


def download_name(feed: str, at: datetime, digest: str, postfix: str) -> str:
    stamp = at.astimezone(UTC).strftime("%Y%m%dT%H%M%S.") + f"{at.microsecond // 1000:03d}"
    return f"{feed}_{stamp}_{digest}{postfix}"


def archive_name(feed: str, hour: datetime, digest: str) -> str:
    return f"{feed}_{hour.strftime('%Y%m%dT%H')}_{digest}.tar.gz"


@dataclass(frozen=True)
class Download:
    """A download's name, read back: the feed, when it was fetched, and its content's hash."""

    name: str
    feed: str
    at: datetime
    digest: str

    @property
    def hour(self) -> datetime:
        return hour_of(self.at)


def parse_download(name: str) -> Download:
    match = DOWNLOAD_NAME.fullmatch(name)
    if match is None:
        raise InvalidInput(f"{name!r} is not a download's name (<feed>_<yyyymmddThhmmss.mmm>_<hash><postfix>)")
    at = datetime.strptime(match["at"], "%Y%m%dT%H%M%S.%f").replace(tzinfo=UTC)
    return Download(name, match["feed"], at, match["hash"])


@dataclass(frozen=True)
class ArchiveName:
    name: str
    feed: str
    hour: datetime
    digest: str


def parse_archive(name: str) -> ArchiveName | None:
    """The archive a store object's name describes, or None for any other object."""
    match = ARCHIVE_NAME.fullmatch(name)
    if match is None:
        return None
    return ArchiveName(
        name, match["feed"], datetime.strptime(match["hour"], "%Y%m%dT%H").replace(tzinfo=UTC), match["hash"]
    )


def parse_moment(text: str, what: str) -> datetime:
    """A time given on the command line: ISO 8601, `2026-11-23T14` for an hour; UTC unless it says."""
    value = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}", value):
        value += ":00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as err:
        raise InvalidInput(
            f"{what} {text!r} is not a time: use ISO 8601, e.g. 2026-11-23T14 or 2026-11-23T14:30:00Z"
        ) from err
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """The hours from `start` rounded down to `end` rounded up, end excluded: Hoard's range."""
    first, last = hour_of(start), hour_of(end)
    if last < end:
        last += HOUR
    hours = []
    while first < last:
        hours.append(first)
        first += HOUR
    return hours
