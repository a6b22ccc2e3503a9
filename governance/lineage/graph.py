"""The version graph: provenance (upstream), impact (downstream) and protection, by asset version.

Closures are recursive SQL queries with set semantics: the walk keeps each (version, depth) pair once,
so a version reached by many paths costs once per depth, never once per path. Each node is expanded
once in the trees built from them; later occurrences point back to it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from sqlalchemy import bindparam, text
from sqlmodel import Session, col, select

from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.zones import VersionRef

MAX_DEPTH = 100
CHUNK = 5_000


class Direction(StrEnum):
    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"

    @property
    def children_key(self) -> str:
        return "inputs" if self is Direction.UPSTREAM else "dependents"


_STEP = {
    Direction.UPSTREAM: ("output_version_id", "input_version_id"),
    Direction.DOWNSTREAM: ("input_version_id", "output_version_id"),
}


@dataclass(frozen=True)
class Closure:
    """Every version reachable from `roots` within the depth cap, its shortest distance, and its next hops."""

    depth_of: dict[int, int]
    next_of: dict[int, tuple[int, ...]]
    cap: int

    def beyond_cap(self, version_id: int) -> bool:
        """True when the version has further neighbours that the cap left out."""
        return self.depth_of[version_id] >= self.cap and bool(self.next_of.get(version_id))


def closure(session: Session, roots: Iterable[int], direction: Direction, depth: int | None = None) -> Closure:
    """The transitive inputs (upstream) or dependents (downstream) of `roots`, at most `depth` hops away."""
    cap = MAX_DEPTH if depth is None else min(depth, MAX_DEPTH)
    source, target = _STEP[direction]
    query = text(
        f"""
        WITH RECURSIVE walk(id, depth) AS (
            SELECT id, 0 FROM version WHERE id IN :roots
            UNION
            SELECT e.{target}, w.depth + 1 FROM lineage_edge e JOIN walk w ON e.{source} = w.id
            WHERE w.depth < :cap
        ),
        reached(id, depth) AS (SELECT id, MIN(depth) FROM walk GROUP BY id)
        SELECT r.id, r.depth, e.{target} FROM reached r LEFT JOIN lineage_edge e ON e.{source} = r.id
        """
    ).bindparams(bindparam("roots", expanding=True))
    depth_of: dict[int, int] = {}
    next_of: dict[int, list[int]] = {}
    for version_id, distance, neighbour in session.connection().execute(query, {"roots": list(roots), "cap": cap}):
        depth_of[version_id] = distance
        if neighbour is not None:
            next_of.setdefault(version_id, []).append(neighbour)
    return Closure(depth_of, {vid: tuple(sorted(hops)) for vid, hops in next_of.items()}, cap)


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


@dataclass(frozen=True)
class Source:
    path: str
    bytes: int
    sha256: str


@dataclass
class VersionNode:
    """One version with what an auditor asks about it; `links` are its inputs or its dependents."""

    asset: str
    version: int
    label: str | None
    label_from: str | None
    data_version: str
    created_at: str
    run_id: str | None
    code_version: str
    spec_hash: str
    requested_by: str
    assurance: str
    zone: str
    rows: int
    rows_quarantined: int
    path: str
    status: str
    purged_at: str | None
    criticality: str
    protected: bool
    depth: int
    batch: str | None = None
    sources: list[Source] = field(default_factory=list)
    links: list[VersionNode] = field(default_factory=list)
    truncated: bool = False
    expanded_elsewhere: bool = False

    @property
    def ref(self) -> str:
        return f"{self.asset}@{self.version}"

    def walk(self) -> Iterator[VersionNode]:
        """This node and every node below it, each occurrence once."""
        yield self
        for link in self.links:
            yield from link.walk()

    def to_dict(self, children_key: str = "inputs") -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("sources", "links")}
        out[children_key] = [node.to_dict(children_key) for node in self.links]
        if self.zone == "landing":
            out["sources"] = [source.__dict__ for source in self.sources]
        return out


@dataclass(frozen=True)
class Lineage:
    """A tree of versions from one root, in one direction."""

    root: VersionNode
    direction: Direction
    versions: int

    def to_dict(self) -> dict[str, Any]:
        return self.root.to_dict(self.direction.children_key)


def provenance(catalog: Catalog, ref: VersionRef, depth: int | None = None) -> Lineage:
    """The version and everything upstream of it, down to the DropZone files (all of it by default)."""
    return lineage(catalog, ref, Direction.UPSTREAM, depth)


def impact(catalog: Catalog, ref: VersionRef, depth: int | None = None) -> Lineage:
    """The version and every version built from it, transitively."""
    return lineage(catalog, ref, Direction.DOWNSTREAM, depth)


def lineage(catalog: Catalog, ref: VersionRef, direction: Direction, depth: int | None = None) -> Lineage:
    root_row = catalog.version(ref)
    with catalog.session() as session:
        found = closure(session, [root_row.id], direction, depth)
        rows = _rows(session, list(found.depth_of))
        protected = protected_ids(session)
    nodes = {vid: _node(row, found.depth_of[vid], vid in protected) for vid, row in rows.items()}
    _attach_sources(catalog, nodes)
    for vid, node in nodes.items():
        node.truncated = found.beyond_cap(vid)
    return Lineage(_tree(root_row.id, nodes, found), direction, len(nodes))


def _tree(root: int, nodes: dict[int, VersionNode], found: Closure) -> VersionNode:
    """Breadth first, so each version is expanded where it is nearest the root."""
    claimed = {root}
    queue = deque([root])
    while queue:
        current = queue.popleft()
        if found.depth_of[current] >= found.cap:
            continue
        node = nodes[current]
        for neighbour in sorted(found.next_of.get(current, ()), key=lambda vid: (nodes[vid].asset, nodes[vid].version)):
            if neighbour in claimed:
                node.links.append(replace(nodes[neighbour], links=[], sources=[], expanded_elsewhere=True))
            else:
                claimed.add(neighbour)
                node.links.append(nodes[neighbour])
                queue.append(neighbour)
    return nodes[root]


def _rows(session: Session, ids: list[int]) -> dict[int, VersionRow]:
    rows: dict[int, VersionRow] = {}
    for chunk in _chunks(ids):
        rows.update((row.id, row) for row in session.exec(select(VersionRow).where(col(VersionRow.id).in_(chunk))))
    return rows


def _attach_sources(catalog: Catalog, nodes: dict[int, VersionNode]) -> None:
    landing = [vid for vid, node in nodes.items() if node.zone == "landing"]
    for chunk in _chunks(landing):
        for version_id, (batch, files) in catalog.sources_of(chunk).items():
            nodes[version_id].batch = batch.batch_id
            nodes[version_id].sources = [Source(f.path, f.bytes, f.sha256) for f in files]


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _node(row: VersionRow, depth: int, protected: bool) -> VersionNode:
    return VersionNode(
        asset=row.asset_key, version=row.number, label=row.label, label_from=row.label_from,
        data_version=row.data_version, created_at=row.created_at.isoformat(), run_id=row.run_id,
        code_version=row.code_version, spec_hash=row.spec_hash, requested_by=row.requested_by,
        assurance=row.assurance, zone=row.zone, rows=row.rows, rows_quarantined=row.rows_quarantined,
        path=row.path, status=row.status, purged_at=row.purged_at.isoformat() if row.purged_at else None,
        criticality=row.criticality, protected=protected, depth=depth,
    )
