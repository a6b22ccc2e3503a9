"""The lake's layout: validated names, paths that cannot escape their zone, staging and atomic publish."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from governance.errors import InvalidName, UnsafePath
from governance.locks import file_lock, take_if_free

if TYPE_CHECKING:
    from governance.lake.snapshots import TableSnapshots

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,62}")
BATCH_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
VERSION_DIR = re.compile(r"v=([1-9][0-9]*)")


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
        asset, sep, number = text.partition("@")
        if not sep or not number.isdigit() or int(number) < 1:
            raise InvalidName(f"invalid version {text!r}: expected DOMAIN/NAME@N with N >= 1, e.g. sales/clients@2")
        return cls(AssetKey.parse(asset), int(number))

    def __str__(self) -> str:
        return f"{self.key}@{self.number}"


class Lake:
    """Paths of the lake, each checked to stay under the root after resolution (symlinks included),
    and the table snapshots its versions are shown as, if any."""

    def __init__(self, root: Path, tables: TableSnapshots | None = None):
        self.root = Path(root).absolute()
        self.tables = tables

    def contain(self, path: Path, within: Path | None = None) -> Path:
        """Return `path` resolved, if it stays inside `within` (default: the lake root)."""
        base = (within or self.root).resolve()
        resolved = Path(path).resolve()
        if resolved != base and not resolved.is_relative_to(base):
            raise UnsafePath(f"path {path} resolves to {resolved}, outside {base}")
        return resolved

    def stored(self, path: Path) -> str:
        """`path` as the catalog keeps it: relative to the lake root, so a home restored elsewhere
        still finds it, and a copy beside its original never reaches into the original."""
        return self.contain(path).relative_to(self.root.resolve()).as_posix()

    def at(self, stored: str) -> Path:
        """A location the catalog keeps, under this lake's root; UnsafePath if it would leave it."""
        if Path(stored).is_absolute():
            raise UnsafePath(f"the catalog names {stored}, an absolute path: locations are kept relative to the lake")
        return self.contain(self.root / stored)

    def zone_dir(self, zone: Zone, key: AssetKey) -> Path:
        return self.contain(self.root / zone.value / key.domain / key.name)

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

    @contextmanager
    def staging(self, attempt_id: str) -> Iterator[Staging]:
        """A private folder for one attempt, locked for as long as the attempt runs."""
        self.staging_root.mkdir(parents=True, exist_ok=True)
        stage = Staging(self.staging_root / attempt_id)
        with stage.locked():
            try:
                yield stage
            finally:
                shutil.rmtree(stage.path, ignore_errors=True)

    def staging_attempts(self) -> list[str]:
        if not self.staging_root.is_dir():
            return []
        names = {p.name.removesuffix(".lock") for p in self.staging_root.iterdir()}
        return sorted(names)


@dataclass(frozen=True)
class Staging:
    """Where one attempt writes before it commits; `path.lock` is held while the attempt lives."""

    path: Path

    @property
    def data(self) -> Path:
        return self.path / "data"

    @property
    def quarantine(self) -> Path:
        return self.path / "quarantine"

    @property
    def lock_file(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @contextmanager
    def locked(self) -> Iterator[None]:
        with file_lock(self.lock_file):
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                yield
            finally:
                self.lock_file.unlink(missing_ok=True)

    def is_abandoned(self) -> bool:
        """True when no live process holds this attempt's lock."""
        descriptor = take_if_free(self.lock_file)
        if descriptor is None:
            return not self.lock_file.exists()
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
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return Path(uri)
    return Path(unquote(parsed.path))
