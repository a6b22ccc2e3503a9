"""Who read a version, and every version built from it, through any channel: who must be told when
a version turns out wrong. Taken from the ledger's allowed `read` entries: a read of a version by
number (`custody read`, the API, Python, an engine whose scan report or signed requests named it),
and an engine's load of the table while the version was its current one, when which version the
engine then read is not known (PyIceberg or DuckDB on a folder lake)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass
from typing import Any

from sqlmodel import Session

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.byids import ByIds
from governance.catalog.models import LedgerEntry, VersionRow
from governance.lineage.graph import closure
from governance.lineage.terms import Direction
from governance.zones import AssetKey, VersionRef

READ = "read"
# A load of the table whose version read is not known: it names the one then current.
LOADED = "loaded"


@dataclass(frozen=True)
class Reader:
    """One read of a version, as the ledger has it."""

    version: str
    user: str
    how: str
    channel: str | None
    engine: str | None
    at: str
    seq: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def readers(catalog: Catalog, ref: VersionRef, depth: int | None = None) -> list[Reader]:
    """Everyone who read `ref` or a version built from it (at most `depth` hops downstream), in
    the ledger's order."""
    root = catalog.version(ref)
    with catalog.reading() as session:
        found = closure(session, [root.stored_id], Direction.DOWNSTREAM, depth)
        numbers: dict[str, set[int]] = {}
        for asset, number in _versions(session, found.ids.tolist()):
            numbers.setdefault(asset, set()).add(number)
        read = [
            reader
            for asset, wanted in sorted(numbers.items())
            for reader in _readers(ledger.entries(session, ledger.LedgerFilter.asked(asset=asset, action=READ)), wanted)
        ]
    return sorted(read, key=lambda reader: reader.seq)


def _versions(session: Session, ids: list[int]) -> Sequence[tuple[Any, ...]]:
    """Each version's asset and number, by id: as many ids as a closure holds, in one statement."""
    with closing(ByIds(session, '"asset_key", "number"', VersionRow.__tablename__, "id")) as versions:
        return versions.rows(ids) if ids else []


def _readers(entries: Iterable[LedgerEntry], wanted: set[int]) -> list[Reader]:
    """The allowed reads among an asset's `read` entries of the `wanted` versions; a load whose
    version read is known from the same load's later entry counts as that read only."""
    allowed = [(entry, json.loads(entry.details)) for entry in entries]
    allowed = [(entry, details) for entry, details in allowed if details.get("result") == "allowed"]
    known_loads = {details["load"] for entry, details in allowed if entry.version is not None and "load" in details}
    found = []
    for entry, details in allowed:
        if entry.version in wanted:
            found.append(_reader(entry, details, entry.version, READ))
        elif entry.version is None and details.get("current") in wanted and details.get("load") not in known_loads:
            found.append(_reader(entry, details, details["current"], LOADED))
    return found


def _reader(entry: LedgerEntry, details: Mapping[str, Any], number: int, how: str) -> Reader:
    ref = str(VersionRef(AssetKey.parse(entry.asset_key or ""), number))
    return Reader(ref, entry.actor, how, details.get("channel"), details.get("engine"), entry.ts, entry.seq)
