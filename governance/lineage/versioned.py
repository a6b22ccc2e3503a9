"""Column lineage by asset version: taken from the plan before a commit, recorded with it, and
followed back across versions to the DropZone fields the values came from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import insert
from sqlmodel import Session, col, select

from governance.catalog.models import ColumnLineageRow, VersionRow
from governance.errors import InvalidInput
from governance.lineage.columns import MAX_ALL_TO_ALL, MAX_COLUMNS, Edge, Kind, edge
from governance.runs import Progress
from governance.zones import AssetKey, Lake, local_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from governance.lineage.spark import PlanLineage, Relation

OFF = "off"


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
        if not cap.strip().isdigit() or int(cap) < 1:
            raise InvalidInput(f"CUSTODY_COLUMN_LINEAGE_CAP={cap!r}: expected a positive number of column dependencies")
        return cls(max_all_to_all=int(cap))


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
        progress(f"warning: column lineage took every input column for every output column of {', '.join(columns.fallbacks)}")
    for note in columns.notes:
        progress(f"warning: column lineage: {note}")


def integration_columns(
    frame: DataFrame, options: ColumnOptions, lake: Lake, pins: Mapping[AssetKey, VersionRow]
) -> VersionColumns:
    """The column lineage of a transform's result over its pinned input versions."""
    from governance.lineage.spark import extract

    lineage = extract(frame, max_columns=options.max_columns, max_all_to_all=options.max_all_to_all)
    sources: dict[int, VersionRow | None] = {}
    for index, relation in enumerate(lineage.inputs):
        row = _pinned_version(relation, lake, pins)
        if row is not None:
            sources[index] = row
    return _versioned(lineage, sources)


def landing_columns(frame: DataFrame, options: ColumnOptions, batch_files: list[Path]) -> VersionColumns:
    """The column lineage of a landing version over the fields of its DropZone batch."""
    from governance.lineage.spark import extract

    lineage = extract(frame, max_columns=options.max_columns, max_all_to_all=options.max_all_to_all)
    batch = {f.resolve() for f in batch_files}
    sources: dict[int, VersionRow | None] = {
        index: None for index, relation in enumerate(lineage.inputs)
        if relation.paths and all(local_path(p).resolve() in batch for p in relation.paths)
    }
    return _versioned(lineage, sources)


def _pinned_version(relation: Relation, lake: Lake, pins: Mapping[AssetKey, VersionRow]) -> VersionRow | None:
    found = {lake.locate(local_path(p)) for p in relation.paths}
    if len(found) != 1 or None in found:
        return None
    ((_zone, key, number),) = found
    row = pins.get(key)
    return row if row is not None and row.number == number else None


def _versioned(lineage: PlanLineage, sources: Mapping[int, VersionRow | None]) -> VersionColumns:
    deps = []
    for column in lineage.columns:
        deps += [
            ColumnDep(column.column, sources[d.relation], d.column, Edge(d.kind, d.transformation, d.masking))
            for d in column.dependencies if d.relation in sources
        ]
    deps += [
        ColumnDep(None, sources[d.relation], d.column, Edge(d.kind, d.transformation, d.masking))
        for d in lineage.dataset if d.relation in sources
    ]
    notes = list(lineage.notes)
    notes += [f"{relation.name} is not a pinned input; its columns are left out" for index, relation in
              enumerate(lineage.inputs) if index not in sources]
    return VersionColumns(tuple(deps), lineage.fallbacks, tuple(notes))


def record(session: Session, version_id: int, columns: VersionColumns) -> None:
    """Store a version's column lineage in the caller's transaction, in one statement."""
    if not columns.deps:
        return
    session.execute(insert(ColumnLineageRow), [
        {
            "version_id": version_id, "output_column": dep.column,
            "input_version_id": dep.source.id if dep.source is not None else None,
            "input_column": dep.input_column, "kind": dep.edge.kind.value,
            "transformation": dep.edge.transformation.value, "masking": dep.edge.masking,
        }
        for dep in columns.deps
    ])


class RecordedColumns:
    """The recorded column lineage, read one version at a time and kept for the session."""

    def __init__(self, session: Session):
        self.session = session
        self._deps: dict[int, list[ColumnDep]] = {}
        self._versions: dict[int, VersionRow] = {}

    def of(self, version: VersionRow) -> list[ColumnDep]:
        if version.id not in self._deps:
            rows = list(self.session.exec(
                select(ColumnLineageRow).where(ColumnLineageRow.version_id == version.id).order_by(col(ColumnLineageRow.id))
            ))
            self._load_versions({r.input_version_id for r in rows if r.input_version_id is not None})
            self._deps[version.id] = [
                ColumnDep(r.output_column, self._versions[r.input_version_id] if r.input_version_id else None,
                       r.input_column, edge(r.kind, r.transformation, r.masking))
                for r in rows
            ]
        return self._deps[version.id]

    def feeding(self, version: VersionRow, column: str, *, direct_only: bool = False) -> dict[tuple[int | None, str], set[Edge]]:
        """What `column` of `version` depends on, its own dependencies and every column's, by input."""
        found: dict[tuple[int | None, str], set[Edge]] = {}
        for dep in self.of(version):
            if dep.column not in (None, column) or (direct_only and dep.edge.kind is not Kind.DIRECT):
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
                self._versions[row.id] = row


def recorded(version: VersionRow) -> bool:
    return version.column_lineage is not None


def summary_of(version: VersionRow) -> dict[str, list[str]]:
    return json.loads(version.column_lineage) if version.column_lineage else {"fallbacks": [], "notes": []}


def column_names(version: VersionRow) -> list[str]:
    return [f["name"] for f in json.loads(version.table_schema).get("fields", [])]
