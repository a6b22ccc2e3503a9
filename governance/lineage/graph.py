"""The version graph: provenance (upstream), impact (downstream) and protection, by asset version.

Closures have set semantics: a walk visits each version once, at its shortest distance, and never
enumerates paths. Each version is expanded once in the trees built from them; later occurrences
point back to it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property, partial
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlmodel import Session, col, select

from governance.catalog import Catalog, utc_from
from governance.catalog.byids import ByIds, chunked
from governance.catalog.hops import DEPENDENTS, INPUTS, Hops, NextHops
from governance.catalog.models import VersionRow, described_read
from governance.foreign.impact import batch_locations, foreign_readers, foreign_writers
from governance.lineage.nodes import Lineage, LineageSummary, Source, VersionNode
from governance.lineage.resident import resident
from governance.lineage.terms import SUMMARY_OVER, Direction
from governance.streams.provenance import described as described_stream
from governance.streams.provenance import streams_of
from governance.zones import VersionRef

MAX_DEPTH = 100


# Where a walk reads the next hops of the versions it reached.
_HOPS = {Direction.UPSTREAM: INPUTS, Direction.DOWNSTREAM: DEPENDENTS}


@dataclass(frozen=True, eq=False)
class Closure:
    """Every version reachable from the roots within the depth cap, its shortest distance, and the
    next hops the walk read: `ids` and `depths` side by side, nearest first."""

    ids: np.ndarray
    depths: np.ndarray
    leaving: list[NextHops]
    cap: int

    def __len__(self) -> int:
        return int(self.ids.size)

    @cached_property
    def depth_of(self) -> dict[int, int]:
        """Each version's distance by id. Built when asked: at a million versions, a walk reaching
        half of them would spend as long again building it."""
        return dict(zip(self.ids.tolist(), self.depths.tolist(), strict=True))

    @cached_property
    def next_of(self) -> dict[int, list[int]]:
        """Each version's next hops in the walk's direction, in no set order, for those that have
        any. Built when asked: a summary needs none."""
        found: dict[int, list[int]] = {}
        for level in self.leaving:
            found.update(level.by_version())
        return found

    def beyond_cap(self, version_id: int) -> bool:
        """True when the version has further neighbours that the cap left out."""
        return self.depth_of[version_id] >= self.cap and bool(self.next_of.get(version_id))


def closure(session: Session, roots: Iterable[int], direction: Direction, depth: int | None = None) -> Closure:
    """The transitive inputs (upstream) or dependents (downstream) of `roots`, at most `depth` hops away.

    Breadth first, a level at a time for the whole frontier (one query per level, unless the process
    holds the lineage): each version is expanded once, at its shortest distance, so the work grows
    with the versions and edges reached, never with the paths.
    """
    cap = _cap(depth)
    walked = list(levels(session, roots, direction, cap))
    if not walked:
        return Closure(_NONE, _NONE, [], cap)
    ids = np.concatenate([versions for _level, versions, _leaving in walked])
    depths = np.repeat(np.arange(len(walked)), [versions.size for _level, versions, _leaving in walked])
    return Closure(ids, depths, [leaving for _level, _versions, leaving in walked], cap)


_NONE = np.zeros(0, dtype=np.int64)


def levels(
    session: Session, roots: Iterable[int], direction: Direction, cap: int
) -> Iterator[tuple[int, np.ndarray, NextHops]]:
    """The walk of `closure`, a level at a time: each level's number, its versions (those first
    reached there) and their next hops; the last level's hops may lead past the cap, out of it.
    The hops come from the lineage this process holds when it keeps it (the service), else from
    the catalog, a level at a time."""
    found = np.array(_existing(session, list(roots)), dtype=np.int64)
    kept = resident(session)
    if kept is not None:
        yield from _walk(partial(kept.current(session).hops, direction), cap, found)
        return
    with closing(Hops(session, _HOPS[direction])) as hops:
        yield from _walk(hops.of, cap, found)


def _walk(
    next_hops: Callable[[np.ndarray], NextHops], cap: int, roots: np.ndarray
) -> Iterator[tuple[int, np.ndarray, NextHops]]:
    reached = _Reached()
    level, versions = 0, reached.first_time(roots)
    while versions.size:
        leaving = next_hops(versions)
        yield level, versions, leaving
        if level == cap:
            return
        versions, level = reached.first_time(leaving.targets()), level + 1


class _Reached:
    """The versions a walk has reached, as flags indexed by version id: a level's new versions are
    picked out of its next hops at C's pace, where a Python set of a hundred thousand ids takes
    tens of milliseconds."""

    def __init__(self) -> None:
        self.flags = np.zeros(0, dtype=bool)
        self.slots = np.zeros(0, dtype=np.int64)

    def first_time(self, targets: np.ndarray) -> np.ndarray:
        """Those of `targets` not reached before, each once; from now on they are reached."""
        if targets.size and targets.max() >= self.flags.size:
            self._grow(int(targets.max()) + 1)
        fresh = targets[~self.flags[targets]]
        self.flags[fresh] = True
        # A version that several versions lead to comes several times: of its places, exactly one
        # is the one left in its slot, whichever write numpy kept.
        order = np.arange(fresh.size)
        self.slots[fresh] = order
        return fresh[self.slots[fresh] == order]

    def _grow(self, size: int) -> None:
        size = max(size, 2 * self.flags.size)
        self.flags = np.concatenate([self.flags, np.zeros(size - self.flags.size, dtype=bool)])
        self.slots = np.zeros(size, dtype=np.int64)


def _cap(depth: int | None) -> int:
    return MAX_DEPTH if depth is None else max(0, min(depth, MAX_DEPTH))


def _existing(session: Session, ids: list[int]) -> list[int]:
    # sqlmodel types a selected primary key as the model's `int | None`; the column is NOT NULL.
    return list(session.exec(select(VersionRow.id).where(col(VersionRow.id).in_(ids)))) if ids else []  # type: ignore[arg-type]


def protected_ids(session: Session) -> set[int]:
    """Critical versions and everything upstream of them, however deep: none of these may be purged."""
    query = text(
        """
        WITH RECURSIVE kept(id) AS (
            SELECT id FROM version WHERE criticality = 'critical'
            UNION
            SELECT e.input_version_id FROM lineage_edge e JOIN kept k ON e.output_version_id = k.id
        )
        SELECT id FROM kept
        """
    )
    return {row[0] for row in session.connection().execute(query)}


def provenance(catalog: Catalog, ref: VersionRef, depth: int | None = None) -> Lineage:
    """The version and everything upstream of it, down to the DropZone files (all of it by default)."""
    return lineage(catalog, ref, Direction.UPSTREAM, depth)


def impact(catalog: Catalog, ref: VersionRef, depth: int | None = None) -> Lineage:
    """The version and every version built from it, transitively."""
    return lineage(catalog, ref, Direction.DOWNSTREAM, depth)


def lineage(catalog: Catalog, ref: VersionRef, direction: Direction, depth: int | None = None) -> Lineage:
    root_row = catalog.version(ref)
    with catalog.reading() as session:
        found = closure(session, [root_row.stored_id], direction, depth)
    return _lineage(catalog, root_row.stored_id, direction, found)


def explore(
    catalog: Catalog, ref: VersionRef, direction: Direction, depth: int | None = None, summary_over: int = SUMMARY_OVER
) -> Lineage | LineageSummary:
    """The lineage of `ref`; only its summary when it holds more than `summary_over` versions."""
    root_row = catalog.version(ref)
    with catalog.reading() as session:
        found = closure(session, [root_row.stored_id], direction, depth)
        if len(found) > summary_over:
            return _summary(session, root_row.ref, direction, found)
    return _lineage(catalog, root_row.stored_id, direction, found)


def _lineage(catalog: Catalog, root: int, direction: Direction, found: Closure) -> Lineage:
    with catalog.reading() as session:
        protected = protected_ids(session)
        nodes = _nodes(catalog, session, found.depth_of, protected, direction)
    for vid, node in nodes.items():
        node.truncated = found.beyond_cap(vid)
    return Lineage(_tree(root, nodes, found), direction, len(nodes))


def stream(
    catalog: Catalog, ref: VersionRef, direction: Direction, depth: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every version of the lineage of `ref`, each once, nearest first (by asset and number within a
    depth), as the walk reaches it: the node alone, naming its next hops in the walk's direction by
    ref. A level is given as soon as the next one's versions are read, so that its hops have names:
    the first versions come at once, and no tree of the whole is ever held. An unknown `ref` is
    refused here, before the first is asked for."""
    return _streamed(catalog, catalog.version(ref).stored_id, direction, _cap(depth))


def _streamed(catalog: Catalog, root: int, direction: Direction, cap: int) -> Iterator[dict[str, Any]]:
    key = direction.children_key
    named: dict[int, tuple[str, int]] = {}
    refs: dict[int, str] = {}
    waiting: list[tuple[VersionNode, list[int]]] = []
    claimed: set[str] = set()  # foreign runs expanded at an earlier level, as the tree would
    with catalog.reading() as session:
        protected = protected_ids(session)
        for level, frontier, leaving in levels(session, [root], direction, cap):
            nodes = _nodes(catalog, session, dict.fromkeys(frontier.tolist(), level), protected, direction, claimed)
            named.update((vid, (node.asset, node.version)) for vid, node in nodes.items())
            refs.update((vid, node.ref) for vid, node in nodes.items())
            yield from _named(waiting, named, refs, key)
            hops = leaving.by_version()
            waiting = []
            for vid in sorted(nodes, key=named.__getitem__):
                node, nexts = nodes[vid], hops.get(vid, [])
                if level == cap:
                    node.truncated, nexts = bool(nexts), []
                waiting.append((node, nexts))
        yield from _named(waiting, named, refs, key)


def _named(
    waiting: list[tuple[VersionNode, list[int]]], named: dict[int, tuple[str, int]], refs: dict[int, str], key: str
) -> Iterator[dict[str, Any]]:
    """The waiting nodes, each naming its next hops by ref, in order of asset and number."""
    for node, nexts in waiting:
        yield node.flat_dict(key, [refs[vid] for vid in sorted(_shown(nexts, named), key=named.__getitem__)])


def _nodes(
    catalog: Catalog,
    session: Session,
    depth_of: Mapping[int, int],
    protected: set[int],
    direction: Direction,
    claimed: set[str] | None = None,
) -> dict[int, VersionNode]:
    """The versions `depth_of` names, as nodes at their depth, with the files or database read a
    landing version came from and the foreign runs that read (downstream) or wrote (upstream) them;
    a foreign run in `claimed` was expanded nearer the root."""
    rows = _rows(session, list(depth_of))
    nodes = {vid: _node(row, depth_of[vid], vid in protected) for vid, row in rows.items()}
    if direction is Direction.DOWNSTREAM:
        for vid, runs in foreign_readers(session, list(rows), claimed).items():
            nodes[vid].foreign = runs
    _attach_sources(catalog, nodes)
    if direction is Direction.UPSTREAM:
        _attach_writers(catalog, nodes)
    return nodes


def _tree(root: int, nodes: dict[int, VersionNode], found: Closure) -> VersionNode:
    """Breadth first, so each version is expanded where it is nearest the root."""
    claimed = {root}
    queue = deque([root])
    while queue:
        current = queue.popleft()
        if found.depth_of[current] >= found.cap:
            continue
        node = nodes[current]
        for neighbour in sorted(
            _shown(found.next_of.get(current, ()), nodes), key=lambda vid: (nodes[vid].asset, nodes[vid].version)
        ):
            if neighbour in claimed:
                node.links.append(replace(nodes[neighbour], links=[], sources=[], foreign=[], expanded_elsewhere=True))
            else:
                claimed.add(neighbour)
                node.links.append(nodes[neighbour])
                queue.append(neighbour)
    return nodes[root]


def _shown(versions: Iterable[int], nodes: Mapping[int, object]) -> list[int]:
    """Those of `versions` the walk's transaction reads: a lineage held in memory may lead to
    versions committed since it began, which are left out (governance.lineage.resident)."""
    return [vid for vid in versions if vid in nodes]


def _summary(session: Session, root: str, direction: Direction, found: Closure) -> LineageSummary:
    counts: dict[tuple[str, int], int] = {}
    for chunk in chunked(list(found.depth_of)):
        for vid, asset in session.exec(
            select(VersionRow.id, VersionRow.asset_key).where(col(VersionRow.id).in_(chunk))
        ):
            at = (asset, found.depth_of[vid])  # type: ignore[index]  # as in `_existing`
            counts[at] = counts.get(at, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (item[0][1], item[0][0]))
    return LineageSummary(
        root, direction, sum(counts.values()), tuple((asset, depth, n) for (asset, depth), n in ordered)
    )


def _rows(session: Session, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    """The versions' columns a node shows (NODE_COLUMNS), by id: the driver's plain tuples, where
    the model's objects would take several times as long to build (a lineage may hold a hundred
    thousand)."""
    columns = ", ".join(f'"{name}"' for name in ("id", *NODE_COLUMNS))
    with closing(ByIds(session, columns, VersionRow.__tablename__, "id")) as versions:
        return {row[0]: row[1:] for row in versions.rows(ids)}


def _attach_sources(catalog: Catalog, nodes: dict[int, VersionNode]) -> None:
    landing = [vid for vid, node in nodes.items() if node.zone == "landing"]
    for chunk in chunked(landing):
        for version_id, (batch, files) in catalog.sources_of(chunk).items():
            nodes[version_id].batch = batch.batch_id
            nodes[version_id].sources = [Source(f.path, f.bytes, f.sha256) for f in files]
        for version_id, read in catalog.reads_of(chunk).items():
            nodes[version_id].read = described_read(read)
        with catalog.reading() as session:
            for version_id, ranges in streams_of(session, chunk).items():
                nodes[version_id].stream = described_stream(session, nodes[version_id].asset, ranges)


def _attach_writers(catalog: Catalog, nodes: dict[int, VersionNode]) -> None:
    """The foreign runs that wrote a landing version's DropZone files or their batch folder."""
    locations = {vid: batch_locations(s.path for s in node.sources) for vid, node in nodes.items() if node.sources}
    with catalog.reading() as session:
        for vid, runs in foreign_writers(session, locations).items():
            nodes[vid].foreign = runs


# The columns of a version a node shows, and the node's fields they fill.
NODE_COLUMNS = (
    "asset_key",
    "number",
    "label",
    "label_from",
    "data_version",
    "created_at",
    "run_id",
    "code_version",
    "spec_hash",
    "requested_by",
    "assurance",
    "zone",
    "rows",
    "rows_quarantined",
    "path",
    "status",
    "purged_at",
    "criticality",
)
NODE_FIELDS = ("asset", "version", *NODE_COLUMNS[2:])
CREATED_AT, PURGED_AT = NODE_COLUMNS.index("created_at"), NODE_COLUMNS.index("purged_at")
STORED_LENGTH = len("2026-11-27 10:00:00.000000")  # how SQLAlchemy writes a time into SQLite


def _node(row: tuple[Any, ...], depth: int, protected: bool) -> VersionNode:
    values = list(row)
    values[CREATED_AT] = _iso(values[CREATED_AT])
    if values[PURGED_AT] is not None:
        values[PURGED_AT] = _iso(values[PURGED_AT])
    # By position, twice as fast as by name: NODE_FIELDS are the node's first fields, in order (a
    # lineage may hold 100,000). mypy cannot count a row's values.
    return VersionNode(*values, protected, depth)  # type: ignore[call-arg]


def _iso(moment: datetime | str) -> str:
    """A time in ISO 8601, in UTC as the models give it: SQLite's driver hands over the text it
    keeps, with no zone, in SQLAlchemy's one layout, which is rewritten as it is (a lineage may hold
    100,000 times); any other is parsed."""
    if isinstance(moment, str) and len(moment) == STORED_LENGTH and moment[10] == " " and moment[19] == ".":
        fraction = "" if moment.endswith(".000000") else moment[19:]
        return f"{moment[:10]}T{moment[11:19]}{fraction}+00:00"
    return utc_from(moment).isoformat()
