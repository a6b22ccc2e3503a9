"""Following a column of a version back, version by version, to the DropZone fields (or database
columns) it came from."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlmodel import Session, col, select

from governance.catalog import Catalog
from governance.catalog.models import BatchRow, RelationalRead, SourceFile, VersionRow
from governance.errors import InvalidInput, NotFound
from governance.foreign.columns import WrittenColumns
from governance.foreign.impact import batch_locations, written_lineage
from governance.lineage.columns import IDENTITY, Edge, compose
from governance.lineage.versioned import (
    ColumnDep,
    RecordedColumns,
    column_names,
    recorded,
    summary_of,
)
from governance.zones import VersionRef


@dataclass(frozen=True)
class Batch:
    """The DropZone batch a landing version was ingested from, with its files."""

    batch_id: str
    files: tuple[SourceFile, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch_id,
            "files": [{"path": f.path, "bytes": f.bytes, "sha256": f.sha256} for f in self.files],
        }


@dataclass(frozen=True)
class SourceTable:
    """The database table or query a landing version was read from, as of its snapshot."""

    namespace: str
    name: str
    snapshot_at: str

    def to_dict(self) -> dict[str, Any]:
        return {"table": {"namespace": self.namespace, "name": self.name, "snapshot_at": self.snapshot_at}}


@dataclass(frozen=True)
class DropZoneField:
    """A field of the DropZone batch a landing column was read from, or a column of the `table`."""

    field: str
    edges: tuple[Edge, ...]
    batch: Batch | None
    table: SourceTable | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, **_edges_dict(self.edges), **_landed_from(self.batch, self.table)}


@dataclass
class ColumnNode:
    """A column of a version, how the column above depends on it, and what it depends on in turn."""

    version: VersionRow
    column: str
    edges: tuple[Edge, ...] = ()
    inputs: list[ColumnNode] = field(default_factory=list)
    fields: list[DropZoneField] = field(default_factory=list)
    expanded_elsewhere: bool = False

    @property
    def recorded(self) -> bool:
        return recorded(self.version)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": self.version.ref, "column": self.column, **_edges_dict(self.edges)}
        if self.expanded_elsewhere:
            return {**data, "expanded_elsewhere": True}
        if not self.recorded:
            return {**data, "recorded": False}
        data["inputs"] = [node.to_dict() for node in self.inputs]
        if self.fields:
            data["dropzone"] = [f.to_dict() for f in self.fields]
        return data


class Ending(StrEnum):
    """Where following a column back stops."""

    DROPZONE = "dropzone"  # a field of the DropZone batch (or a database column) a landing version was read from
    NOT_RECORDED = "not recorded"  # a version committed without column lineage
    NO_INPUT = "no input"  # a column that reads nothing: a literal or generated value, or one left out (see its notes)
    # A field of a dataset outside Custody, read by the foreign job that wrote a DropZone batch.
    FOREIGN = "outside custody"


@dataclass(frozen=True)
class Origin:
    """Where a column's values begin, reached through `edges` (composed along every path)."""

    version: VersionRow
    field: str
    edges: tuple[Edge, ...]
    batch: Batch | None
    ending: Ending = Ending.DROPZONE
    table: SourceTable | None = None
    # The foreign jobs crossed on the way: those that wrote a DropZone batch the column came through.
    via: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        where = (
            {"dropzone_field": self.field}
            if self.ending is Ending.DROPZONE
            else {"column": self.field, "ends": self.ending.value}
        )
        return {
            "version": self.version.ref,
            **where,
            **_edges_dict(self.edges),
            **_landed_from(self.batch, self.table),
            **_via_dict(self.via),
        }


@dataclass(frozen=True)
class ForeignOrigin:
    """A field of a dataset outside Custody a column's values begin at: a foreign job read it and
    wrote the DropZone batch a landing version was ingested from, and said so in its column lineage."""

    namespace: str
    name: str
    field: str
    edges: tuple[Edge, ...]
    via: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": {"namespace": self.namespace, "name": self.name},
            "column": self.field,
            "ends": Ending.FOREIGN.value,
            **_edges_dict(self.edges),
            **_via_dict(self.via),
        }


def _via_dict(via: tuple[str, ...]) -> dict[str, Any]:
    return {"via": list(via)} if via else {}


def _landed_from(batch: Batch | None, table: SourceTable | None) -> dict[str, Any]:
    return {**(batch.to_dict() if batch else {}), **(table.to_dict() if table else {})}


@dataclass(frozen=True)
class Overview:
    """Every column of a version with its own dependencies, and those of every column."""

    version: VersionRow
    columns: dict[str, list[ColumnDep]]
    every_column: list[ColumnDep]
    # The database table a landing version's columns were read from; None: the DropZone.
    table: str | None = None

    def source_of(self, dep: ColumnDep) -> str:
        return f"{dep.source.ref if dep.source else self.table or 'DropZone'}.{dep.input_column}"

    def to_dict(self) -> dict[str, Any]:
        summary = summary_of(self.version)
        return {
            "version": self.version.ref,
            "recorded": recorded(self.version),
            "columns": {name: [_dep_dict(d, self.table) for d in deps] for name, deps in self.columns.items()},
            "every_column": [_dep_dict(d, self.table) for d in self.every_column],
            "fallbacks": summary.get("fallbacks", []),
            "notes": summary.get("notes", []),
        }


def overview(catalog: Catalog, ref: VersionRef) -> Overview:
    with catalog.reading() as session:
        version = _version(catalog, session, ref)
        deps = RecordedColumns(session).of(version)
        table = _Batches(session).table(version)
    columns: dict[str, list[ColumnDep]] = {name: [] for name in column_names(version)}
    for dep in deps:
        if dep.column is not None:
            columns.setdefault(dep.column, []).append(dep)
    return Overview(version, columns, [d for d in deps if d.column is None], table.name if table else None)


def column_tree(catalog: Catalog, ref: VersionRef, column: str, *, direct_only: bool = False) -> ColumnNode:
    """`column` of `ref` and everything it depends on; a column met again is named, not expanded again."""
    with catalog.reading() as session:
        root = _version(catalog, session, ref)
        _require_column(root, column)
        graph, batches, seen = RecordedColumns(session), _Batches(session), set()

        def grow(node: ColumnNode) -> ColumnNode:
            if (node.version.id, node.column) in seen:
                node.expanded_elsewhere = True
                return node
            seen.add((node.version.id, node.column))
            for (source_id, name), edges in sorted(
                graph.feeding(node.version, node.column, direct_only=direct_only).items(), key=_by_input
            ):
                if source_id is None:
                    node.fields.append(
                        DropZoneField(name, tuple(sorted(edges)), batches.of(node.version), batches.table(node.version))
                    )
                else:
                    node.inputs.append(grow(ColumnNode(graph.version(source_id), name, tuple(sorted(edges)))))
            return node

        return grow(ColumnNode(root, column))


def origins(
    catalog: Catalog, ref: VersionRef, column: str, *, direct_only: bool = False
) -> list[Origin | ForeignOrigin]:
    """Where `column` of `ref` begins, across every version between: DropZone fields, and beyond
    those a foreign job wrote, the fields it says they came from, in Custody or outside it."""
    with catalog.reading() as session:
        root = _version(catalog, session, ref)
        _require_column(root, column)
        walk = _OriginWalk(RecordedColumns(session), _Batches(session), _Writers(session), direct_only)
        walk.reach((root.stored_id, column), {IDENTITY}, frozenset())
        while walk.queue:
            walk.step(walk.queue.popleft())
        return walk.found()


Node = tuple[int, str]


class _OriginWalk:
    """Following columns back breadth first; a column is followed again only when it is reached
    by a way of depending on it, or through a foreign job, not met before."""

    def __init__(self, graph: RecordedColumns, batches: _Batches, writers: _Writers, direct_only: bool):
        self.graph, self.batches, self.writers, self.direct_only = graph, batches, writers, direct_only
        self.reached: dict[Node, tuple[set[Edge], set[str]]] = {}
        self.queue: deque[Node] = deque()
        self.ends: dict[tuple[int, str, Ending], tuple[set[Edge], set[str]]] = {}
        self.outside: dict[tuple[str, str, str], tuple[set[Edge], set[str]]] = {}

    def reach(self, node: Node, edges: set[Edge], via: frozenset[str]) -> None:
        known_edges, known_via = self.reached.setdefault(node, (set(), set()))
        if not (edges <= known_edges and via <= known_via):
            known_edges.update(edges)
            known_via.update(via)
            self.queue.append(node)

    def step(self, node: Node) -> None:
        version_id, name = node
        version = self.graph.version(version_id)
        here, via = self.reached[node]
        feeding = self.graph.feeding(version, name, direct_only=self.direct_only) if recorded(version) else {}
        if not feeding:
            ending = Ending.NO_INPUT if recorded(version) else Ending.NOT_RECORDED
            _merge(self.ends, (version_id, name, ending), here, via)
            return
        for (source_id, input_column), edges in feeding.items():
            composed = {compose(outer, inner) for outer in here for inner in edges}
            if source_id is not None:
                self.reach((source_id, input_column), composed, frozenset(via))
            elif not self._cross(version, input_column, composed, via):
                _merge(self.ends, (version_id, input_column, Ending.DROPZONE), composed, via)

    def _cross(self, version: VersionRow, field: str, edges: set[Edge], via: set[str]) -> bool:
        """Follow a DropZone field into the foreign jobs that wrote it, where they said what it came
        from; whether any did."""
        crossed = False
        for job, written in self.writers.of(version, self.batches):
            for found in written.feeding(field, direct_only=self.direct_only):
                crossed = True
                composed = {compose(outer, found.edge) for outer in edges}
                onward = frozenset(via | {job})
                for version_id, _ in found.custody:
                    self.reach((version_id, found.field), composed, onward)
                if not found.custody:
                    _merge(self.outside, (found.namespace, found.name, found.field), composed, onward)
        return crossed

    def found(self) -> list[Origin | ForeignOrigin]:
        version = self.graph.version
        inside: list[Origin | ForeignOrigin] = [
            Origin(
                version(version_id),
                name,
                tuple(sorted(edges)),
                self.batches.of(version(version_id)),
                ending,
                self.batches.table(version(version_id)),
                tuple(sorted(via)),
            )
            for (version_id, name, ending), (edges, via) in sorted(
                self.ends.items(), key=lambda item: (version(item[0][0]).ref, item[0][1])
            )
        ]
        outside = [
            ForeignOrigin(namespace, name, field, tuple(sorted(edges)), tuple(sorted(via)))
            for (namespace, name, field), (edges, via) in sorted(self.outside.items())
        ]
        return inside + outside


def _merge(into: dict[Any, tuple[set[Edge], set[str]]], key: Any, edges: set[Edge], via: Iterable[str]) -> None:
    known_edges, known_via = into.setdefault(key, (set(), set()))
    known_edges.update(edges)
    known_via.update(via)


def column_lineage(
    catalog: Catalog,
    ref: VersionRef,
    column: str | None = None,
    *,
    origins_only: bool = False,
    direct_only: bool = False,
) -> dict[str, Any]:
    """What `custody lineage columns` shows and the service answers: every column of `ref` with the
    input columns it derives from; with `column`, its whole way back to the DropZone fields, or only
    where its values begin."""
    if column is None:
        if origins_only or direct_only:
            raise InvalidInput(
                "only where a column's values begin, or only its DIRECT dependencies, needs a column to follow"
            )
        return overview(catalog, ref).to_dict()
    if origins_only:
        begins = origins(catalog, ref, column, direct_only=direct_only)
        return {"version": str(ref), "column": column, "origins": [origin.to_dict() for origin in begins]}
    return column_tree(catalog, ref, column, direct_only=direct_only).to_dict()


def _by_input(item: tuple[tuple[int | None, str], set[Edge]]) -> tuple[int, str]:
    (source_id, name), _ = item
    return (source_id or 0, name)


def _version(catalog: Catalog, session: Session, ref: VersionRef) -> VersionRow:
    row = catalog.find_version(session, ref)
    if row is None:
        raise NotFound(f"no version {ref}")
    return row


def _require_column(version: VersionRow, column: str) -> None:
    names = column_names(version)
    if column not in names:
        raise NotFound(f"{version.ref} has no column {column!r}; its columns are {', '.join(names)}")


class _Writers:
    """The column lineage of the foreign jobs that wrote a landing version's DropZone batch, looked
    up once per version."""

    def __init__(self, session: Session):
        self.session = session
        self._found: dict[int, list[tuple[str, WrittenColumns]]] = {}

    def of(self, version: VersionRow, batches: _Batches) -> list[tuple[str, WrittenColumns]]:
        version_id = version.stored_id
        if version_id not in self._found:
            batch = batches.of(version)
            locations = {version_id: batch_locations(f.path for f in batch.files)} if batch else {}
            self._found[version_id] = written_lineage(self.session, locations).get(version_id, [])
        return self._found[version_id]


class _Batches:
    """What landing versions were read from, looked up once per version."""

    def __init__(self, session: Session):
        self.session = session
        self._found: dict[int, Batch | None] = {}
        self._tables: dict[int, SourceTable | None] = {}

    def table(self, version: VersionRow) -> SourceTable | None:
        version_id = version.stored_id
        if version_id not in self._tables:
            read = self.session.exec(select(RelationalRead).where(RelationalRead.version_id == version_id)).first()
            self._tables[version_id] = (
                SourceTable(read.namespace, read.name, read.snapshot_at.isoformat()) if read else None
            )
        return self._tables[version_id]

    def of(self, version: VersionRow) -> Batch | None:
        version_id = version.stored_id
        if version_id not in self._found:
            batch = self.session.exec(select(BatchRow).where(BatchRow.version_id == version_id)).first()
            files: Iterable[SourceFile] = (
                self.session.exec(
                    select(SourceFile).where(SourceFile.batch_pk == batch.id).order_by(col(SourceFile.path))
                )
                if batch
                else []
            )
            self._found[version_id] = Batch(batch.batch_id, tuple(files)) if batch else None
        return self._found[version_id]


def _edges_dict(edges: tuple[Edge, ...]) -> dict[str, Any]:
    if not edges:
        return {}
    return {
        "dependencies": [
            {"kind": e.kind.value, "transformation": e.transformation.value, "masking": e.masking} for e in edges
        ]
    }


def _dep_dict(dep: ColumnDep, table: str | None) -> dict[str, Any]:
    return {
        "input": dep.source.ref if dep.source else table or "dropzone",
        "column": dep.input_column,
        "kind": dep.edge.kind.value,
        "transformation": dep.edge.transformation.value,
        "masking": dep.edge.masking,
    }
