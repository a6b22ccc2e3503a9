"""The column lineage foreign runs report: OpenLineage's columnLineage facet on a dataset a run
wrote, kept by run and dataset, and read back with each input named as the Custody versions it is
(the versions the run read under that input's namespace and name)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlmodel import Session, col, select

from governance.catalog.byids import chunked
from governance.catalog.models import ForeignColumn, ForeignDataset, ForeignIO, VersionRow
from governance.foreign.datasets import INPUT, digest, ident
from governance.lineage.columns import Edge, Kind, Transformation

NEW_COLUMN = (
    "INSERT INTO foreign_column (run_id, dataset_id, output_column, input_namespace, input_name, input_ident, "
    "input_field, kind, transformation, masking, key) VALUES ({run_id}, {dataset_id}, {output_column}, "
    "{input_namespace}, {input_name}, {input_ident}, {input_field}, {kind}, {transformation}, {masking}, {key}) "
    "ON CONFLICT DO NOTHING"
)
DIRECT_KINDS = frozenset({Transformation.IDENTITY, Transformation.TRANSFORMATION, Transformation.AGGREGATION})
INDIRECT_KINDS = frozenset(Transformation) - DIRECT_KINDS - {Transformation.UNKNOWN}


class Statements(Protocol):
    def run(self, statement: str, params: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class ForeignField:
    """An input field a column of a foreign run's output derives from, through `edge`; `custody`:
    the Custody versions (id, asset@N) the run read under that input's name, if any."""

    namespace: str
    name: str
    field: str
    edge: Edge
    custody: tuple[tuple[int, str], ...] = ()

    def to_dicts(self) -> list[dict[str, Any]]:
        said = {
            "field": self.field,
            "kind": self.edge.kind.value,
            "transformation": self.edge.transformation.value,
            "masking": self.edge.masking,
        }
        if not self.custody:
            return [{"namespace": self.namespace, "name": self.name, **said}]
        return [{"version": ref, **said} for _, ref in self.custody]


@dataclass(frozen=True)
class WrittenColumns:
    """What each column of a dataset a foreign run wrote derives from, and what every column does."""

    columns: dict[str, list[ForeignField]]
    every_column: list[ForeignField]

    def feeding(self, column: str, *, direct_only: bool = False) -> list[ForeignField]:
        """What `column` (or `order.product_id`'s top-level `order`) depends on: its own inputs and
        every column's; none when the writer said nothing of the column itself."""
        parts = column.split(".")
        own = [f for end in range(1, len(parts) + 1) for f in self.columns.get(".".join(parts[:end]), ())]
        found = [*own, *self.every_column] if own else []
        return [f for f in found if not direct_only or f.edge.kind is Kind.DIRECT]

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": {name: _dicts(fields) for name, fields in self.columns.items()},
            "every_column": _dicts(self.every_column),
        }


def _dicts(fields: Iterable[ForeignField]) -> list[dict[str, Any]]:
    return [said for found in fields for said in found.to_dicts()]


def record(db: Statements, run_id: str, dataset_id: int, dataset: Mapping[str, Any]) -> None:
    """Keep the column lineage the run's event gives for a dataset it wrote (once each). The
    facet has been held to its schema: its fields and their inputs have the shape it gives."""
    facet = (dataset.get("facets") or {}).get("columnLineage")
    if facet is None:
        return
    for column, spec in facet["fields"].items():
        for found in spec["inputFields"]:
            _keep(db, run_id, dataset_id, column, found, _legacy(spec))
    for found in facet.get("dataset") or ():
        _keep(db, run_id, dataset_id, None, found, None)


def _keep(
    db: Statements,
    run_id: str,
    dataset_id: int,
    column: str | None,
    found: Mapping[str, Any],
    legacy: Edge | None,
) -> None:
    namespace, name, field = str(found["namespace"]), str(found["name"]), str(found["field"])
    for edge in edges(found.get("transformations"), legacy):
        row = {
            "run_id": run_id,
            "dataset_id": dataset_id,
            "output_column": column,
            "input_namespace": namespace,
            "input_name": name,
            "input_ident": ident(namespace, name),
            "input_field": field,
            "kind": edge.kind.value,
            "transformation": edge.transformation.value,
            "masking": edge.masking,
        }
        # Every column's row apart from any column's, whatever the column is called ("None" too).
        which = "*" if column is None else f"={column}"
        db.run(NEW_COLUMN, {**row, "key": digest(which, *(row[k] for k in sorted(row) if k != "output_column"))})


def edges(transformations: Any, legacy: Edge | None = None) -> Iterator[Edge]:
    """The facet's transformations as Custody's edges. None given: the field-level type of the
    facet's first version (IDENTITY or MASKED), else a DIRECT dependency nobody described."""
    listed = [t for t in transformations or () if isinstance(t, Mapping)]
    if not listed:
        yield legacy or Edge(Kind.DIRECT, Transformation.UNKNOWN)
        return
    for said in listed:
        yield _edge(str(said.get("type", "")).upper(), str(said.get("subtype", "")).upper(), said.get("masking"))


def _edge(kind: str, subtype: str, masking: Any) -> Edge:
    masked = masking is True
    if kind == Kind.INDIRECT.value:
        known = subtype in INDIRECT_KINDS
        return Edge(Kind.INDIRECT, Transformation(subtype) if known else Transformation.UNKNOWN, masked)
    # DIRECT, or a type this version of the facet does not know: assume the value flows.
    known = kind == Kind.DIRECT.value and subtype in DIRECT_KINDS
    return Edge(Kind.DIRECT, Transformation(subtype) if known else Transformation.UNKNOWN, masked)


def _legacy(spec: Mapping[str, Any]) -> Edge | None:
    said = str(spec.get("transformationType", "")).upper()
    if said == "IDENTITY":
        return Edge(Kind.DIRECT, Transformation.IDENTITY)
    if said == "MASKED":
        return Edge(Kind.DIRECT, Transformation.TRANSFORMATION, masking=True)
    return None


def written_columns(session: Session, written: Iterable[tuple[str, int]]) -> dict[tuple[str, int], WrittenColumns]:
    """For each (run, dataset it wrote), the column lineage the run reported for it."""
    wanted = set(written)
    rows: list[ForeignColumn] = []
    for chunk in chunked(sorted({dataset_id for _, dataset_id in wanted})):
        query = select(ForeignColumn).where(col(ForeignColumn.dataset_id).in_(chunk))
        rows += [row for row in session.exec(query) if (row.run_id, row.dataset_id) in wanted]
    read = _versions_read(session, sorted({row.run_id for row in rows}))
    found: dict[tuple[str, int], WrittenColumns] = {}
    for row in sorted(rows, key=lambda r: (r.output_column or "", r.input_name, r.input_field, r.kind)):
        columns = found.setdefault((row.run_id, row.dataset_id), WrittenColumns({}, []))
        edge = Edge(Kind(row.kind), Transformation(row.transformation), row.masking)
        field = ForeignField(
            row.input_namespace, row.input_name, row.input_field, edge, read.get((row.run_id, row.input_ident), ())
        )
        if row.output_column is None:
            columns.every_column.append(field)
        else:
            columns.columns.setdefault(row.output_column, []).append(field)
    return found


def _versions_read(session: Session, run_ids: list[str]) -> dict[tuple[str, str], tuple[tuple[int, str], ...]]:
    """The Custody versions each run read, by the namespace and name it read them under."""
    read: dict[tuple[str, str], set[tuple[int, str]]] = {}
    for chunk in chunked(run_ids):
        query = (
            select(ForeignIO.run_id, ForeignDataset.ident, VersionRow)
            .join(ForeignDataset, col(ForeignDataset.id) == col(ForeignIO.dataset_id))
            .join(VersionRow, col(VersionRow.id) == col(ForeignIO.version_id))
            .where(col(ForeignIO.direction) == INPUT, col(ForeignIO.run_id).in_(chunk))
        )
        for run_id, named, version in session.exec(query):
            read.setdefault((run_id, named), set()).add((version.stored_id, version.ref))
    return {key: tuple(sorted(found, key=lambda v: v[1])) for key, found in read.items()}
