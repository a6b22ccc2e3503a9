"""The lake's layout: validated names, paths that cannot escape their zone, staging and atomic publish."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from governance.errors import EnvironmentProblem, InvalidName, NotFound, UnsafePath, shown
from governance.locks import file_lock, take_if_free

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from governance.lake.snapshots import TableSnapshots

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,62}")
BATCH_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
VERSION_DIR = re.compile(r"v=([1-9][0-9]*)")
VERSION_NUMBER = re.compile(r"0*([1-9][0-9]*)")
# The largest number the catalog keeps (a version's, a ledger entry's) on every database: its columns
# are INTEGER, 64 bits on SQLite but 32 on PostgreSQL. No version is numbered past it.
LARGEST_NUMBER = 2**31 - 1
MANIFEST = "_manifest.json"
CHUNK = 1 << 20


class Zone(StrEnum):
    DROP = "drop"
    LANDING = "landing"
    INTEGRATION = "integration"
    QUARANTINE = "quarantine"


def check_name(value: str, what: str = "name") -> str:
    """Return `value` if it is a valid domain or asset name, else raise naming the problem."""
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None:
        shown = repr(value) if len(str(value)) <= 80 else repr(str(value)[:77] + "...")
        raise InvalidName(
            f"invalid {what} {shown}: use 1 to 63 characters, lowercase letters, digits and _, starting with a letter"
        )
    return value


def check_batch_id(value: str) -> str:
    if BATCH_ID_PATTERN.fullmatch(value) is None or ".." in value:
        raise InvalidName(
            f"invalid batch id {value!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    return value


@dataclass(frozen=True, order=True)
class AssetKey:
    """`domain/name`, both validated."""

    domain: str
    name: str

    def __post_init__(self) -> None:
        check_name(self.domain, "domain")
        check_name(self.name, "asset name")

    @classmethod
    def parse(cls, text: str) -> AssetKey:
        parts = text.split("/")
        if len(parts) != 2:
            raise InvalidName(f"invalid asset key {text!r}: expected DOMAIN/NAME, e.g. sales/clients")
        return cls(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.domain}/{self.name}"


@dataclass(frozen=True)
class VersionRef:
    """`domain/name@N`."""

    key: AssetKey
    number: int

    @classmethod
    def parse(cls, text: str) -> VersionRef:
        """The version `DOMAIN/NAME@N` names; NotFound for an N no catalog holds."""
        asset, sep, digits = text.partition("@")
        if not sep or VERSION_NUMBER.fullmatch(digits) is None:
            raise InvalidName(f"invalid version {text!r}: expected DOMAIN/NAME@N with N >= 1, e.g. sales/clients@2")
        key, number = AssetKey.parse(asset), version_number(digits)
        if number is None:
            raise _no_such_version(key, digits)
        return cls(key, number)

    @classmethod
    def named(cls, key: AssetKey, number: int) -> VersionRef:
        """The version `number` of `key`, as a request names it; NotFound for a number no catalog holds."""
        if not 1 <= number <= LARGEST_NUMBER:
            raise _no_such_version(key, str(number))
        return cls(key, number)

    def __str__(self) -> str:
        return f"{self.key}@{self.number}"


def version_number(digits: str) -> int | None:
    """The number decimal `digits` write, if a version may have it (1 to LARGEST_NUMBER); else None."""
    found = VERSION_NUMBER.fullmatch(digits)
    # Longer than the largest, it is larger: Python refuses to read an integer of thousands of digits.
    if found is None or len(found.group(1)) > len(str(LARGEST_NUMBER)):
        return None
    number = int(found.group(1))
    return number if number <= LARGEST_NUMBER else None


def _no_such_version(key: AssetKey, number: str) -> NotFound:
    return NotFound(f"no version {key}@{shown(number)}: a version is numbered from 1 to {LARGEST_NUMBER}")


class Lake:
    """A lake in a folder: paths each checked to stay under the root after resolution (symlinks
    included), versions published by rename, and the table snapshots its versions are shown as, if any.

    Its folders are `PurePath`s that the lake's methods and `fs` (a pyarrow file system) read, so
    that code written against them also works on a lake in an object store (`ObjectLake`)."""

    # True where an attempt's staged files stay where they are as its version, the catalog's row
    # being the commit: they must not be removed once a version holds them.
    versions_stay_staged = False

    def __init__(self, root: Path, tables: TableSnapshots | None = None, fs: pafs.FileSystem | None = None):
        self.root = Path(root).absolute()
        self.tables = tables
        self._fs = fs

    @property
    def name(self) -> str:
        """The lake as messages name it."""
        return str(self.root)

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            import pyarrow.fs as pafs

            self._fs = pafs.LocalFileSystem()
        return self._fs

    def uri(self, folder: PurePath) -> str:
        """A folder or file as Spark is given it."""
        return str(folder)

    def file_uri(self, path: PurePath) -> str:
        """A file as a table format's metadata names it."""
        return f"file://{path}"

    def folder_of(self, uri: str) -> str | None:
        """The folder of the file Spark names `uri`, as the catalog keeps it; None outside the lake."""
        try:
            return self.stored(local_path(uri).parent)
        except UnsafePath:
            return None

    def holds(self, folder: PurePath, uri: str) -> bool:
        """Whether the file Spark names `uri` lies in `folder`."""
        return local_path(uri).resolve().is_relative_to(Path(folder).resolve())

    @cached_property
    def _root_prefixes(self) -> tuple[str, ...]:
        """The root as given and as it resolves (a tool may name the lake either way), each as the
        start of the paths under it."""
        return tuple(dict.fromkeys(f"{root.as_posix().rstrip('/')}/" for root in (self.root, self.root.resolve())))

    def location_of(self, uri: str) -> str | None:
        """Where in the lake a tool Custody does not run names `uri` (a path, or a `file:` URI),
        relative to the root as the catalog keeps locations; None outside the lake. The name is
        only read, never looked up on disk: `..` cannot climb out, and a missing file is no error.
        Worked on as text: a busy lineage endpoint asks this several times for every event."""
        path = posixpath.normpath(local_name(uri))
        for prefix in self._root_prefixes:
            # POSIX keeps two leading slashes apart from one: `//x` is under no root but `//`.
            if path.startswith("//") != prefix.startswith("//"):
                continue
            if path.startswith(prefix) or f"{path}/" == prefix:
                return path[len(prefix) :] or "."
        return None

    def contain(self, path: Path, within: Path | None = None) -> Path:
        """Return `path` resolved, if it stays inside `within` (default: the lake root)."""
        base = (within or self.root).resolve()
        resolved = Path(path).resolve()
        if resolved != base and not resolved.is_relative_to(base):
            raise UnsafePath(f"path {path} resolves to {resolved}, outside {base}")
        return resolved

    def stored(self, path: PurePath) -> str:
        """`path` as the catalog keeps it: relative to the lake root, so a home restored elsewhere
        still finds it, and a copy beside its original never reaches into the original."""
        return self.contain(Path(path)).relative_to(self.root.resolve()).as_posix()

    def at(self, stored: str) -> PurePath:
        """A location the catalog keeps, under this lake's root; UnsafePath if it would leave it."""
        if Path(stored).is_absolute():
            raise UnsafePath(f"the catalog names {stored}, an absolute path: locations are kept relative to the lake")
        return self.contain(self.root / stored)

    def zone_dir(self, zone: Zone, key: AssetKey) -> Path:
        return self.contain(self.root / zone.value / key.domain / key.name)

    def asset_uri(self, zone: Zone, key: AssetKey) -> str:
        """Where an asset's versions in a zone are, as lineage names the asset."""
        return str(self.zone_dir(zone, key))

    def drop_dir(self, key: AssetKey) -> Path:
        return self.zone_dir(Zone.DROP, key)

    def batch_dir(self, key: AssetKey, batch_id: str) -> Path:
        drop = self.drop_dir(key)
        return self.contain(drop / check_batch_id(batch_id), within=drop)

    def version_dir(self, zone: Zone, key: AssetKey, number: int) -> Path:
        return self.contain(self.zone_dir(zone, key) / f"v={int(number)}")

    def version_dirs(self, zone: Zone, key: AssetKey) -> dict[int, Path]:
        """Every `v=N` folder of an asset in a zone, committed or not."""
        parent = self.zone_dir(zone, key)
        if not parent.is_dir():
            return {}
        found = {}
        for child in parent.iterdir():
            match = VERSION_DIR.fullmatch(child.name)
            if match:
                found[int(match.group(1))] = child
        return found

    def locate(self, path: Path) -> tuple[Zone, AssetKey, int] | None:
        """The zone, asset and version number a file of the lake belongs to; None outside any `v=N` folder."""
        try:
            parts = Path(path).resolve().relative_to(self.root.resolve()).parts
        except ValueError:
            return None
        if len(parts) < 4 or parts[0] not in Zone._value2member_map_:
            return None
        match = VERSION_DIR.fullmatch(parts[3])
        if match is None:
            return None
        return Zone(parts[0]), AssetKey(parts[1], parts[2]), int(match.group(1))

    @property
    def staging_root(self) -> Path:
        return self.root / "_staging"

    def stage(self, attempt_id: str) -> Staging:
        return Staging(self.staging_root / attempt_id, self.staging_root / f"{attempt_id}.lock", self)

    @contextmanager
    def staging(self, attempt_id: str) -> Iterator[Staging]:
        """A private folder for one attempt, locked for as long as the attempt runs."""
        stage = self.stage(attempt_id)
        with stage.locked():
            try:
                try:
                    Path(stage.path).mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise EnvironmentProblem(f"cannot write {stage.path} ({err.strerror or err})") from err
                yield stage
            finally:
                shutil.rmtree(stage.path, ignore_errors=True)

    def staging_attempts(self) -> list[str]:
        if not self.staging_root.is_dir():
            return []
        names = {p.name.removesuffix(".lock") for p in self.staging_root.iterdir()}
        return sorted(names)

    def remove_stage(self, stage: Staging) -> None:
        shutil.rmtree(stage.path, ignore_errors=True)
        stage.lock_file.unlink(missing_ok=True)

    def seal(self, folder: PurePath, suffix: str) -> list[PurePath]:
        """Drop Spark's bookkeeping files and give part files stable names, in their order."""
        directory = Path(folder)
        for extra in [p for p in directory.iterdir() if p.name.startswith(("_", ".")) and p.is_file()]:
            extra.unlink()
        parts = sorted(p for p in directory.iterdir() if p.is_file())
        targets = [directory / f"part-{index:05d}{suffix}" for index in range(len(parts))]
        for part, target in zip(parts, targets):
            if part != target:
                os.rename(part, target)
        return list(targets)

    def write_manifest(self, folder: PurePath, manifest: dict[str, Any]) -> None:
        """Write the manifest beside a version's files: flushed to disk, then renamed into place."""
        temporary = Path(folder) / f"{MANIFEST}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, Path(folder) / MANIFEST)

    def publish(self, stage: Staging, zone: Zone, key: AssetKey, number: int, quarantine: bool) -> Published:
        """Move an attempt's folders to `v=N` in one rename each; `Published.undo` moves them back."""
        moved = []
        targets = (self.version_dir(zone, key, number), self.version_dir(Zone.QUARANTINE, key, number))
        try:
            for source, target in zip((stage.data, stage.quarantine), targets[: 1 + quarantine]):
                publish(Path(source), Path(target))
                moved.append((Path(source), Path(target)))
        except BaseException:
            _move_back(moved)
            raise
        return Published(targets[0], targets[1] if quarantine else None, lambda: _move_back(moved))

    def delete(self, folder: PurePath, ref: str) -> None:
        """Remove a version's folder; gone already is fine, anything outside the lake is refused."""
        target = self.contain(Path(folder))
        try:
            shutil.rmtree(target)
        except FileNotFoundError:
            return
        except OSError as err:
            raise EnvironmentProblem(
                f"cannot delete {target} of {ref}: {err.strerror or err}; run the purge again"
            ) from err

    def read_manifest(self, folder: PurePath) -> dict[str, Any] | None:
        """A version's manifest; None when it is missing or not JSON. A store that cannot be read is
        an EnvironmentProblem, not a damaged version."""
        where = self.uri(folder / MANIFEST)
        try:
            with self.fs.open_input_stream(str(folder / MANIFEST)) as stream:
                return json.loads(stream.read().decode("utf-8"))
        except (FileNotFoundError, NotADirectoryError, ValueError):
            return None
        except OSError as err:
            raise EnvironmentProblem(f"cannot read {where}: {err}") from err

    def size(self, path: PurePath) -> int | None:
        """A file's size; None when it is not there."""
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(str(path))
        return info.size if info.type == pafs.FileType.File else None

    def sha256(self, path: PurePath) -> str:
        digest = hashlib.sha256()
        for block in self.blocks(path):
            digest.update(block)
        return digest.hexdigest()

    def blocks(self, path: PurePath) -> Iterator[bytes]:
        """A file's bytes, a block at a time."""
        with self.fs.open_input_stream(str(path)) as stream:
            while block := stream.read(CHUNK):
                yield block

    def holds_nothing(self, folder: PurePath) -> bool:
        """Whether no file is anywhere under `folder` (in an object store: nothing but S3A's empty
        folder markers, `…/`)."""
        import pyarrow.fs as pafs

        found = self.fs.get_file_info(pafs.FileSelector(str(folder), recursive=True, allow_not_found=True))
        return not any(info.type == pafs.FileType.File for info in found)

    def has_files(self, folder: PurePath) -> bool:
        """Whether `folder` itself holds a file that Spark reads, not one of its bookkeeping files. A
        version's files are all there: Custody writes no partition folders."""
        import pyarrow.fs as pafs

        found = self.fs.get_file_info(pafs.FileSelector(str(folder), allow_not_found=True))
        return any(info.is_file and not info.base_name.startswith(("_", ".")) for info in found)


@dataclass(frozen=True)
class Published:
    """Where a commit put an attempt's folders, and how to take that back if its transaction fails."""

    data: PurePath
    quarantine: PurePath | None
    undo: Callable[[], None]


def _move_back(moved: list[tuple[Path, Path]]) -> None:
    for source, destination in reversed(moved):
        if destination.exists() and not source.exists():
            os.rename(destination, source)


@dataclass(frozen=True)
class Staging:
    """Where one attempt writes before it commits; `lock_file` is held while the attempt lives."""

    path: PurePath
    lock_file: Path
    lake: Lake = field(repr=False, compare=False)
    # An object-store lake's locks are local files: an attempt whose lock is not here may be running
    # on another host, so only a lock left here and held by no one proves the attempt abandoned.
    lock_elsewhere_when_absent: bool = False

    @property
    def data(self) -> PurePath:
        return self.path / "data"

    @property
    def quarantine(self) -> PurePath:
        return self.path / "quarantine"

    @contextmanager
    def locked(self) -> Iterator[None]:
        with file_lock(self.lock_file):
            try:
                yield
            finally:
                self.lock_file.unlink(missing_ok=True)

    def is_abandoned(self) -> bool:
        """True when no live process holds this attempt's lock."""
        descriptor = take_if_free(self.lock_file)
        if descriptor is None:
            return not self.lock_elsewhere_when_absent and not self.lock_file.exists()
        os.close(descriptor)
        return True


def new_attempt_id() -> str:
    return uuid.uuid4().hex


def publish(source: Path, target: Path) -> None:
    """Move a finished folder to its final place in one rename; never replaces anything."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise UnsafePath(f"refusing to overwrite {target}: versions are immutable")
    os.rename(source, target)


def local_path(uri: str) -> Path:
    """The local path of a `file:` URI as Spark gives it; other URIs as they are."""
    return Path(local_name(uri))


def local_name(uri: str) -> str:
    """`local_path` as text, as a busy caller takes it."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else uri
