"""Inputs that name an asset's Iceberg table rather than a version's folder: by the table's location
under the lake's `_tables` folder, or by the name the `custody` catalog gives it
(`custody.sales.clients`, as the dataset's name or a symlink of it), with the snapshot read in the
dataset's `version` facet: the snapshot's id, or its tag `custody-v<N>`. A snapshot id is the
version whose tag holds it; one no tag holds is no version."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from governance.errors import InvalidName
from governance.lake import TABLES_FOLDER
from governance.lake.iceberg import CATALOG_NAME, TAG_PREFIX, number_of
from governance.zones import AssetKey, Lake


def table_of(location: str | None, dataset: Mapping[str, Any]) -> AssetKey | None:
    """The asset whose table the dataset names, if it names one."""
    if location is not None:
        parts = PurePosixPath(location).parts
        if len(parts) == 3 and parts[0] == TABLES_FOLDER:
            return _key(parts[1], parts[2])
    for name in _names(dataset):
        parts = tuple(name.split("."))
        if len(parts) == 3 and parts[0] == CATALOG_NAME:
            return _key(parts[1], parts[2])
    return None


def _names(dataset: Mapping[str, Any]) -> Iterator[str]:
    yield str(dataset["name"])
    symlinks = (dataset.get("facets") or {}).get("symlinks") or {}
    for found in symlinks.get("identifiers") or () if isinstance(symlinks, Mapping) else ():
        if isinstance(found, Mapping) and isinstance(found.get("name"), str):
            yield found["name"]


def _key(domain: str, name: str) -> AssetKey | None:
    try:
        return AssetKey(domain, name)
    except InvalidName:
        return None


# A snapshot's id is a 64-bit integer, which Custody's snapshots keep positive.
LARGEST_ID = 2**63 - 1
LONGEST_ID = len(str(LARGEST_ID))


class Snapshots:
    """Which version each snapshot of an asset's table is, by its `custody-v<N>` tag. A tag never
    moves to another snapshot, so what was read once stays true; a snapshot not met yet reads the
    table's tags again."""

    def __init__(self) -> None:
        self._numbers: dict[tuple[str, str, AssetKey], dict[int, int]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def named(version: str) -> bool:
        """Whether `version` is written as a snapshot is named: a tag, or an id (decimal digits, a
        positive 64-bit integer)."""
        if version.startswith(TAG_PREFIX):
            return number_of(version) is not None
        return version.isascii() and version.isdigit() and len(version) <= LONGEST_ID and 0 < int(version) <= LARGEST_ID

    def number(self, lake: Lake, key: AssetKey, version: str) -> int | None:
        """The version of `key` the facet's `version` names: a tag, or a snapshot id; None if neither."""
        if version.startswith(TAG_PREFIX):
            return number_of(version)
        if not self.named(version) or lake.tables is None:
            return None
        tables = lake.tables.tables
        snapshot, known = int(version), (tables.catalog_url, tables.warehouse, key)
        with self._lock:
            found = self._numbers.get(known, {}).get(snapshot)
        if found is None:
            tags = tables.tags(key)
            with self._lock:
                self._numbers[known] = {snapshot_id: number for number, snapshot_id in tags.items()}
                found = self._numbers[known].get(snapshot)
        return found


SNAPSHOTS = Snapshots()
