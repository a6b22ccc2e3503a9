"""What the catalog keeps in memory between an engine's requests: the loads of this process and the
versions recorded as read in each, the version each folder of the lake holds, and the tables' names."""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from governance.api import Custody
from governance.catalog.states import VersionStatus
from governance.lake.iceberg import IcebergTables
from governance.spec import Spec, SpecSet
from governance.zones import AssetKey

# The most loads, and version reads, this process remembers: past them the oldest are forgotten,
# and a read of a forgotten load is recorded again.
REMEMBERED = 100_000
# How old what the catalog said of a version's status may be when a request for its files is signed.
STATUS_SECONDS = 0.5


class Loads:
    """The table loads of this process, by session and asset, and the versions recorded as read in each."""

    def __init__(self, remembered: int = REMEMBERED):
        self.remembered = remembered
        self._loads: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._read: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def new(self, session: str, key: AssetKey) -> str:
        load = secrets.token_hex(8)
        with self._lock:
            self._loads[(session, str(key))] = load
            self._loads.move_to_end((session, str(key)))
            _bound(self._loads, self.remembered)
        return load

    def read_already(self, session: str, key: AssetKey, version: int) -> bool:
        """Whether a read of `version` in the session's load of the table is recorded already."""
        with self._lock:
            load = self._loads.get((session, str(key)))
            return load is not None and (load, version) in self._read

    def first_read(self, session: str, key: AssetKey, version: int) -> str | None:
        """The load a read of `version` belongs to, if it is the first of that load; else None."""
        with self._lock:
            load = self._loads.get((session, str(key))) or secrets.token_hex(8)
            self._loads[(session, str(key))] = load
            if (load, version) in self._read:
                return None
            self._read[(load, version)] = None
            _bound(self._read, self.remembered)
            return load


def _bound(kept: OrderedDict, most: int) -> None:
    while len(kept) > most:
        kept.popitem(last=False)


@dataclass(frozen=True)
class Held:
    """The version whose files a folder of the lake holds: which it is never changes, its status may."""

    id: int
    asset: str
    number: int


class Folders:
    """The versions the lake's folders hold, as found, by folder (REMEMBERED of them at most), and
    whether each is committed, as read at most STATUS_SECONDS ago."""

    def __init__(self, remembered: int = REMEMBERED):
        self.remembered = remembered
        self._held: OrderedDict[str, Held] = OrderedDict()
        self._statuses: OrderedDict[int, tuple[float, bool]] = OrderedDict()
        self._lock = threading.Lock()

    def committed_as_known(self, held: Held) -> bool | None:
        """Whether the version is committed, as read less than STATUS_SECONDS ago; None if it was not."""
        with self._lock:
            known = self._statuses.get(held.id)
        return known[1] if known is not None and time.monotonic() - known[0] < STATUS_SECONDS else None

    def committed(self, custody: Custody, held: Held) -> bool:
        """Whether the version is committed: read again once what was read is STATUS_SECONDS old.
        (A read of the catalog for each signed request, by the thousand a second, would make them
        wait on one another for SQLite's read slots.)"""
        known = self.committed_as_known(held)
        if known is not None:
            return known
        now = time.monotonic()
        committed = custody.store.status_of(held.id) == VersionStatus.COMMITTED
        with self._lock:
            self._statuses[held.id] = (now, committed)
            self._statuses.move_to_end(held.id)
            _bound(self._statuses, self.remembered)
        return committed

    def known(self, custody: Custody, uri: str) -> Held | None:
        """The version a file of the lake belongs to, if it was found before; None otherwise."""
        folder = custody.lake.folder_of(uri)
        with self._lock:
            return self._held.get(folder) if folder is not None else None

    def version(self, custody: Custody, uri: str) -> Held | None:
        """The version a file of the lake belongs to; None for a file of none."""
        held = self.known(custody, uri)
        folder = custody.lake.folder_of(uri)
        if held is not None or folder is None:
            return held
        row = custody.store.version_at(folder)
        if row is None or row.id is None:
            return None  # not kept: a version committed later may hold it
        held = Held(row.id, row.asset_key, row.number)
        with self._lock:
            self._held[folder] = held
            _bound(self._held, self.remembered)
        return held


class Names:
    """The catalog's tables, as the assets they are of, read again once STATUS_SECONDS old, each
    with how a listing shows it: a listing of thousands of tables, an engine's every `SHOW TABLES`,
    then neither queries the catalog nor makes an object a table."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -math.inf
        self._keys: list[AssetKey] = []
        self._shown: dict[AssetKey, str] = {}

    def keys(self, tables: IcebergTables) -> list[AssetKey]:
        with self._lock:
            if time.monotonic() - self._read_at < STATUS_SECONDS:
                return self._keys
        read_at, keys = time.monotonic(), tables.names()
        with self._lock:
            if keys != self._keys:  # else the same list: what was worked out from it holds
                self._shown = {key: self._shown.get(key) or _identifier(key) for key in keys}
                self._keys = keys
            self._read_at = read_at
            return self._keys

    def shown(self, key: AssetKey) -> str:
        """The table as a listing shows it: the spec's TableIdentifier, as JSON."""
        return self._shown.get(key) or _identifier(key)


def _identifier(key: AssetKey) -> str:
    return json.dumps({"namespace": [key.domain], "name": key.name})


@dataclass(frozen=True)
class Alike:
    """The tables, grouped by what a read of them is decided on, their spec's roles and
    classification: a listing decides once a group, not once a table (for thousands of tables,
    the specs' models compared one by one would take most of its time)."""

    of: SpecSet
    names: list[AssetKey]
    # A spec of each group (None: the tables no spec declares), and each table with its group.
    specs: list[Spec | None]
    keys: list[tuple[AssetKey, int]]

    @classmethod
    def of_tables(cls, specs: SpecSet, names: list[AssetKey]) -> Alike:
        groups: dict[object, int] = {}
        first: list[Spec | None] = []
        keys = []
        for key in names:
            spec = specs.get(key)
            alike = (spec.body.roles, spec.body.classification) if spec is not None else None
            if alike not in groups:
                groups[alike] = len(first)
                first.append(spec)
            keys.append((key, groups[alike]))
        return cls(specs, names, first, keys)
