"""Hourly archives: tar.gz files of downloads, written the same way every time, read with suspicion.

An archive holds regular files only, each named as a download of its feed and hour, in name order,
with fixed metadata and a gzip header without a time or name: the same downloads always make the
same bytes, so an archive's hash names its content and merging twice gives one archive.
"""

from __future__ import annotations

import gzip
import hashlib
import heapq
import io
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from governance.errors import IntegrityError, InvalidInput
from governance.feeds.names import Download, content_hash, hour_label, parse_download, short_hash

COMPRESSLEVEL = 6
CHUNK = 1 << 20
# A member larger than this is refused unread, unless the feed's own max_bytes says otherwise.
MAX_BYTES = 100 * 1024**2
READ_ERRORS = (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError, OSError)


class ArchiveProblem(IntegrityError):
    """An archive that is not what an archive of its feed and hour must be; it is left where it is."""


def read_limit(max_bytes: int) -> int:
    """The largest member a feed's archives are read with: its max_bytes, but never under MAX_BYTES,
    so that the archives written before an owner lowered it still merge and land."""
    return max(max_bytes, MAX_BYTES)


@dataclass(frozen=True)
class Packed:
    """An archive written to disk: its hash and its size."""

    path: Path
    digest: str
    bytes: int


@dataclass(frozen=True)
class _Member:
    """A member of an archive being streamed; its bytes can be read until the archive moves on."""

    name: str
    download: Download
    info: tarfile.TarInfo
    tar: tarfile.TarFile
    archive: str

    def read(self) -> bytes:
        try:
            handle = self.tar.extractfile(self.info)
            assert handle is not None  # `_problem` lets regular files through only, and each has a handle
            data = handle.read()
        except READ_ERRORS as err:
            raise ArchiveProblem(f"{self.archive}: member {self.name} cannot be read: {err}") from err
        if content_hash(data) != self.download.digest:
            raise ArchiveProblem(f"{self.archive}: member {self.name} does not match the hash in its name")
        return data


def pack(files: Iterable[Path], target: Path) -> Packed:
    """Write the downloads `files` into the archive `target`, in name order."""
    ordered = sorted(files, key=lambda p: p.name)
    with _writer(target) as tar:
        for path in ordered:
            data = path.read_bytes()
            tar.addfile(_info(path.name, len(data)), io.BytesIO(data))
    return _sealed(target)


def merge(
    sources: Iterable[tuple[str, Path]], target: Path, feed: str, hour: datetime, max_bytes: int = MAX_BYTES
) -> Packed:
    """Merge archives, each `(name, path)`, into `target`: every download once, in name order.

    Each source is streamed once. A member that is not a regular file named as a download of `feed`
    in `hour`, that is larger than `max_bytes`, or whose bytes do not match the hash in its name,
    refuses the merge."""
    previous = None
    with ExitStack() as stack, _writer(target) as tar:
        streams = [
            _members(stack.enter_context(_reading(path, name)), name, feed, hour, max_bytes) for name, path in sources
        ]
        for member in heapq.merge(*streams, key=lambda m: m.name):
            if member.name == previous:
                continue
            data = member.read()
            tar.addfile(_info(member.name, len(data)), io.BytesIO(data))
            previous = member.name
    return _sealed(target)


def downloads(
    path: Path, name: str, feed: str, hour: datetime, max_bytes: int = MAX_BYTES
) -> Iterator[tuple[Download, bytes]]:
    """Each download an archive holds, checked as `merge` checks them."""
    with _reading(path, name) as tar:
        for member in _members(tar, name, feed, hour, max_bytes):
            yield member.download, member.read()


@contextmanager
def _reading(path: Path, name: str) -> Iterator[tarfile.TarFile]:
    """An archive opened as a stream. Only opening is guarded here: an error later, while another
    archive is read or the merge written, belongs to that archive or to the disk."""
    try:
        tar = tarfile.open(path, mode="r|gz")  # noqa: SIM115 (closed by the block below, outside this guard)
    except READ_ERRORS as err:
        raise ArchiveProblem(f"{name} is not a readable tar.gz: {err}") from err
    with tar:
        yield tar


def _members(tar: tarfile.TarFile, name: str, feed: str, hour: datetime, max_bytes: int) -> Iterator[_Member]:
    previous = ""
    while True:
        try:
            info = tar.next()
        except READ_ERRORS as err:
            raise ArchiveProblem(f"{name} is not a readable tar.gz: {err}") from err
        if info is None:
            return
        problem = _problem(info, feed, hour) or (
            f"is {info.size:,} bytes, over max_bytes {max_bytes:,}" if info.size > max_bytes else None
        )
        if problem:
            raise ArchiveProblem(f"{name}: member {info.name!r} {problem}")
        if info.name <= previous:
            raise ArchiveProblem(f"{name}: members are not in name order at {info.name!r}")
        previous = info.name
        yield _Member(info.name, parse_download(info.name), info, tar, name)


def _problem(info: tarfile.TarInfo, feed: str, hour: datetime) -> str | None:
    if not info.isreg():
        return "is not a regular file (a link, a folder or a device)"
    if "/" in info.name or "\\" in info.name:
        return "is a path, not a download's name"
    try:
        download = parse_download(info.name)
    except InvalidInput:
        return "is not named as a download (<feed>_<yyyymmddThhmmss.mmm>_<hash><postfix>)"
    if download.feed != feed or download.hour != hour:
        return f"is not a download of {feed} in the hour {hour_label(hour)}"
    return None


@contextmanager
def _writer(target: Path) -> Iterator[tarfile.TarFile]:
    with (
        open(target, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=COMPRESSLEVEL, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        yield tar


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _sealed(target: Path) -> Packed:
    digest = hashlib.sha256()
    with open(target, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return Packed(target, short_hash(digest), target.stat().st_size)
