"""Observed lineage: the files a Spark plan reads, mapped back to asset versions and checked against the spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame

from governance.catalog.models import VersionRow
from governance.errors import UndeclaredRead
from governance.zones import AssetKey, Lake, Zone, local_path

READABLE_ZONES = (Zone.LANDING, Zone.INTEGRATION)


@dataclass(frozen=True)
class Observation:
    """What a transform's plan reads: pinned versions it read, and declared inputs it never touched."""

    read: tuple[str, ...]
    unread: tuple[str, ...]


def observe(
    frame: DataFrame,
    lake: Lake,
    owner: AssetKey,
    pins: Mapping[AssetKey, VersionRow],
    version_at: Callable[[str], VersionRow | None] = lambda _stored: None,
) -> Observation:
    """Check that `frame` reads only the pinned versions of its declared inputs; `version_at` finds
    the version a lake location holds, where the location does not say (an object-store lake).

    The files come from Spark's optimized plan, so a read the optimizer removes does not count.
    Raises UndeclaredRead naming the first file, asset or version that does not fit.
    """
    read: set[AssetKey] = set()
    for uri in sorted(plan_files(frame)):
        read.add(_check_file(uri, lake, owner, pins, version_at))
    unread = tuple(pins[key].ref for key in pins if key not in read)
    return Observation(read=tuple(pins[key].ref for key in pins if key in read), unread=unread)


def plan_files(frame: DataFrame) -> set[str]:
    """Every file the plan scans: Spark's own `inputFiles`, plus those it leaves out, read through
    subquery expressions or cached relations (whose plans are physical, possibly adaptive)."""
    plan = frame._jdf.queryExecution().optimizedPlan()
    return set(frame.inputFiles()) | _scanned(plan, own_relations=False)


def _scanned(plan, *, own_relations: bool = True) -> set[str]:
    """The files of the plan's file relations (unless not `own_relations`: Spark's `inputFiles` has
    them, and each file asked for is a round trip to the JVM), of its subqueries' and of the plans
    of the cached relations it reads."""
    found: set[str] = set()
    for each in [plan, *_items(plan.subqueriesAll())]:
        for leaf in _items(each.collectLeaves()):
            kind = leaf.getClass().getSimpleName()
            if kind in ("LogicalRelation", "FileSourceScanExec"):
                if each is plan and not own_relations:
                    continue
                relation = leaf.relation()
                if relation.getClass().getSimpleName() == "HadoopFsRelation":
                    found.update(relation.inputFiles())
            elif kind == "InMemoryRelation":
                found |= _scanned(leaf.cachedPlan())
            elif kind == "InMemoryTableScanExec":
                found |= _scanned(leaf.relation().cachedPlan())
            elif kind == "AdaptiveSparkPlanExec":
                found |= _scanned(leaf.inputPlan())
    return found


def _items(scala_seq) -> list:
    return [scala_seq.apply(index) for index in range(scala_seq.size())]


def _located(lake: Lake, uri: str, version_at: Callable[[str], VersionRow | None]) -> tuple[Zone, AssetKey, int] | None:
    """Where a file is, by the version the catalog says its folder holds."""
    folder = lake.folder_of(uri)
    row = version_at(folder) if folder is not None else None
    return (Zone(row.zone), AssetKey.parse(row.asset_key), row.number) if row is not None else None


def _check_file(
    uri: str,
    lake: Lake,
    owner: AssetKey,
    pins: Mapping[AssetKey, VersionRow],
    version_at: Callable[[str], VersionRow | None],
) -> AssetKey:
    for key, row in pins.items():
        if lake.holds(lake.at(row.path), uri):
            return key
    declared = ", ".join(str(key) for key in pins) or "none"
    path = local_path(uri) if uri.startswith(("/", "file:")) else uri
    where = (lake.locate(path) if isinstance(path, Path) else None) or _located(lake, uri, version_at)
    if where is None or where[0] not in READABLE_ZONES:
        raise UndeclaredRead(
            f"the transform of {owner} read {path}, which is not a committed version of any asset "
            f"(declared inputs: {declared})"
        )
    _zone, key, number = where
    if key not in pins:
        raise UndeclaredRead(
            f"the transform of {owner} read {key}@{number}, which is not a declared input "
            f"(declared inputs: {declared}); add it to the spec's inputs"
        )
    if number != pins[key].number:
        raise UndeclaredRead(f"the transform of {owner} read {key}@{number}, but this run pinned {pins[key].ref}")
    return key
