"""Column lineage by asset version: taken from the plan before a commit, recorded with it, and
followed back across versions to the DropZone fields the values came from."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import insert
from sqlmodel import Session, col, select

from governance.catalog.models import ColumnLineageRow, VersionRow
from governance.errors import InvalidInput, error_summary
from governance.lineage.columns import MAX_ALL_TO_ALL, MAX_COLUMNS, Edge, Kind, edge
from governance.runs import Progress
from governance.zones import AssetKey, Lake, local_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from governance.lineage.spark import PlanLineage, Relation

OFF = "off"
# How the plan names the relation Spark's JDBC reader makes (see `lineage.spark.Relation`).
JDBC_RELATION = "JDBCRelation"


@dataclass(frozen=True)
class ColumnOptions:
    """Whether and how far column lineage is extracted; see `extract`."""

    max_columns: int = MAX_COLUMNS
    max_all_to_all: int = MAX_ALL_TO_ALL

    @classmethod
    def from_settings(cls, setting: str, cap: str | None) -> ColumnOptions | None:
        """None when `CUSTODY_COLUMN_LINEAGE` is off; the cap comes from `CUSTODY_COLUMN_LINEAGE_CAP`."""
        if setting.strip().lower() == OFF:
            return None
        if setting.strip().lower() not in ("", "on"):
            raise InvalidInput(f"CUSTODY_COLUMN_LINEAGE={setting!r}: use on or off")
        if not cap:
            return cls()
        refused = f"CUSTODY_COLUMN_LINEAGE_CAP={cap!r}: expected a positive number of column dependencies"
        try:
            limit = int(cap)
        except ValueError as err:
            raise InvalidInput(refused) from err
        if limit < 1:
            raise InvalidInput(refused)
        return cls(max_all_to_all=limit)


DEFAULT_COLUMNS = ColumnOptions()


@dataclass(frozen=True)
class ColumnDep:
    """`column` of a version (None: every column) depends on `input_column` of `source`, an input
    version, or, when `source` is None, a field of the DropZone batch the version was ingested from."""

    column: str | None
    source: VersionRow | None
    input_column: str
    edge: Edge


@dataclass(frozen=True)
class VersionColumns:
    """The column lineage of a version about to be committed."""

    deps: tuple[ColumnDep, ...] = ()
    fallbacks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def summary(self) -> dict[str, object]:
        return {"dependencies": len(self.deps), "fallbacks": list(self.fallbacks), "notes": list(self.notes)}

    def by_column(self) -> dict[str, list[tuple[VersionRow, str]]]:
        """Each column's own input columns (not those that shape every row), for catalogs that take
        a flat list."""
        found: dict[str, dict[tuple[str, str], VersionRow]] = {}
        for dep in self.deps:
            if dep.column is not None and dep.source is not None:
                found.setdefault(dep.column, {})[(dep.source.asset_key, dep.input_column)] = dep.source
        return {column: [(row, name) for (_, name), row in sorted(deps.items())] for column, deps in found.items()}


def warn_about(columns: VersionColumns | None, progress: Progress) -> None:
    """Say in the run log where the column lineage is approximate or incomplete."""
    if columns is None:
        return
    if columns.fallbacks:
        progress(
            f"warning: column lineage took every input column for every output column of {', '.join(columns.fallbacks)}"
        )
    for note in columns.notes:
        progress(f"warning: column lineage: {note}")


def integration_columns(
    frame: DataFrame, options: ColumnOptions, lake: Lake, pins: Mapping[AssetKey, VersionRow]
) -> VersionColumns:
    """The column lineage of a transform's result over its pinned input versions."""

    def sources(lineage: PlanLineage) -> dict[int, VersionRow | None]:
        found = {index: _pinned_version(relation, lake, pins) for index, relation in enumerate(lineage.inputs)}
        return {index: row for index, row in found.items() if row is not None}

    return _traced(frame, options, sources, "is not a pinned input")


def landing_columns(frame: DataFrame, options: ColumnOptions, batch_files: list[Path]) -> VersionColumns:
    """The column lineage of a landing version over the fields of its DropZone batch."""
    batch = {f.resolve() for f in batch_files}

    def sources(lineage: PlanLineage) -> dict[int, VersionRow | None]:
        return {
            index: None
            for index, relation in enumerate(lineage.inputs)
            if relation.paths and all(local_path(p).resolve() in batch for p in relation.paths)
        }

    return _traced(frame, options, sources, "is not a file of the DropZone batch")


def relational_columns(frame: DataFrame, options: ColumnOptions) -> VersionColumns:
    """The column lineage of a landing version over the columns of the database table or query it read."""

    def sources(lineage: PlanLineage) -> dict[int, VersionRow | None]:
        return {index: None for index, relation in enumerate(lineage.inputs) if relation.name.startswith(JDBC_RELATION)}

    return _traced(frame, options, sources, "is not the database source")


def fetched_columns(frame: DataFrame, options: ColumnOptions, fetched: str) -> VersionColumns:
    """The column lineage of a landing version over the fields of the records it fetched into
    `fetched` (a staging folder's URI): the topic's, as the version's input names it."""

    def bare(uri: str) -> str:
        return uri.removeprefix("file:").lstrip("/").rstrip("/")

    def sources(lineage: PlanLineage) -> dict[int, VersionRow | None]:
        return {
            index: None
            for index, relation in enumerate(lineage.inputs)
            if any(bare(path) == bare(fetched) for path in (relation.name, *relation.paths))
        }

    return _traced(frame, options, sources, "is not the topic's records")


def _traced(
    frame: DataFrame,
    options: ColumnOptions,
    sources_of: Callable[[PlanLineage], dict[int, VersionRow | None]],
    outside: str,
) -> VersionColumns:
    from py4j.protocol import Py4JError

    from governance.lineage.spark import extract

    try:
        lineage = extract(frame, max_columns=options.max_columns, max_all_to_all=options.max_all_to_all)
    except (KeyError, IndexError, TypeError, ValueError, Py4JError) as err:
        # A plan this release cannot read must not hold back data that passed every check: the
        # version is committed and says, in its notes, the run log and Dagster, that its column
        # lineage is missing and why.
        return VersionColumns(
            notes=(f"column lineage could not be extracted: {type(err).__name__}: {error_summary(err)}",)
        )
    return _versioned(lineage, sources_of(lineage), outside)


def _pinned_version(relation: Relation, lake: Lake, pins: Mapping[AssetKey, VersionRow]) -> VersionRow | None:
    if not relation.paths:
        return None
    for row in pins.values():
        folder = lake.at(row.path)
        if all(lake.holds(folder, path) for path in relation.paths):
            return row
    return None


def _versioned(lineage: PlanLineage, sources: Mapping[int, VersionRow | None], outside: str) -> VersionColumns:
    every = [*((c.column, c.dependencies) for c in lineage.columns), (None, lineage.dataset)]
    # Two relations may read the same input version (or DropZone batch): each dependency is kept once.
    deps: dict[tuple, ColumnDep] = {}
    for column, dependencies in every:
        for d in dependencies:
            if d.relation in sources:
                dep = ColumnDep(column, sources[d.relation], d.column, Edge(d.kind, d.transformation, d.masking))
                deps.setdefault((column, dep.source.id if dep.source else None, d.column, dep.edge), dep)
    notes = [
        *lineage.notes,
        *(f"{r.name} {outside}; its columns are left out" for i, r in enumerate(lineage.inputs) if i not in sources),
    ]
    return VersionColumns(tuple(deps.values()), lineage.fallbacks, tuple(notes))


def record(session: Session, version_id: int, columns: VersionColumns) -> None:
    """Store a version's column lineage in the caller's transaction, in one statement."""
    if not columns.deps:
        return
    session.execute(
        insert(ColumnLineageRow),
        [
            {
                "version_id": version_id,
                "output_column": dep.column,
                "input_version_id": dep.source.id if dep.source is not None else None,
                "input_column": dep.input_column,
                "kind": dep.edge.kind.value,
                "transformation": dep.edge.transformation.value,
                "masking": dep.edge.masking,
            }
            for dep in columns.deps
        ],
    )


class RecordedColumns:
    """The recorded column lineage, read one version at a time and kept for the session."""

    def __init__(self, session: Session):
        self.session = session
        self._deps: dict[int, list[ColumnDep]] = {}
        self._versions: dict[int, VersionRow] = {}

    def of(self, version: VersionRow) -> list[ColumnDep]:
        version_id = version.stored_id
        if version_id not in self._deps:
            rows = list(
                self.session.exec(
                    select(ColumnLineageRow)
                    .where(ColumnLineageRow.version_id == version_id)
                    .order_by(col(ColumnLineageRow.id))
                )
            )
            self._load_versions({r.input_version_id for r in rows if r.input_version_id is not None})
            self._deps[version_id] = [
                ColumnDep(
                    r.output_column,
                    self._versions[r.input_version_id] if r.input_version_id else None,
                    r.input_column,
                    edge(r.kind, r.transformation, r.masking),
                )
                for r in rows
            ]
        return self._deps[version_id]

    def feeding(
        self, version: VersionRow, column: str, *, direct_only: bool = False
    ) -> dict[tuple[int | None, str], set[Edge]]:
        """What `column` of `version` depends on, its own dependencies and every column's, by input."""
        found: dict[tuple[int | None, str], set[Edge]] = {}
        # A nested field (`address.city`) is recorded under its top-level column (`address`).
        parts = column.split(".")
        names = {None, *(".".join(parts[:end]) for end in range(1, len(parts) + 1))}
        for dep in self.of(version):
            if dep.column not in names or (direct_only and dep.edge.kind is not Kind.DIRECT):
                continue
            found.setdefault((dep.source.id if dep.source else None, dep.input_column), set()).add(dep.edge)
        return found

    def version(self, version_id: int) -> VersionRow:
        self._load_versions({version_id})
        return self._versions[version_id]

    def _load_versions(self, ids: set[int]) -> None:
        missing = ids - set(self._versions)
        if missing:
            for row in self.session.exec(select(VersionRow).where(col(VersionRow.id).in_(missing))):
                self._versions[row.stored_id] = row


def recorded(version: VersionRow) -> bool:
    return version.column_lineage is not None


def summary_of(version: VersionRow) -> dict[str, list[str]]:
    return json.loads(version.column_lineage) if version.column_lineage else {"fallbacks": [], "notes": []}


def column_names(version: VersionRow) -> list[str]:
    return [f["name"] for f in json.loads(version.table_schema).get("fields", [])]
