"""What a committed version is checked for, against its spec, the catalog and its files on disk:
shown as asset checks with every materialization, and run again on demand to audit old versions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import col, select

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.models import LineageEdge, StreamRead, VersionRow
from governance.catalog.states import VersionStatus
from governance.checks import Check
from governance.errors import NotFound
from governance.spec import Spec
from governance.streams.records import KAFKA_TYPES
from governance.versions import file_problem
from governance.zones import Lake


@dataclass(frozen=True)
class Finding:
    check: Check
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def version_to_audit(catalog: Catalog, spec: Spec, number: int | None = None) -> VersionRow:
    """The committed version `number` of the asset, or its newest."""
    with catalog.reading() as session:
        query = select(VersionRow).where(
            VersionRow.asset_key == str(spec.key), VersionRow.status == VersionStatus.COMMITTED.value
        )
        if number is not None:
            query = query.where(VersionRow.number == number)
        found = session.exec(query.order_by(col(VersionRow.number).desc())).first()
    if found is None:
        raise NotFound(
            f"{spec.key} has no committed version {number}"
            if number is not None
            else f"{spec.key} has no committed version to audit"
        )
    return found


def audit(
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    version: VersionRow,
    checks: tuple[Check, ...],
    *,
    thorough: bool = True,
) -> list[Finding]:
    """What each of `checks` finds. Not `thorough`, the files are found with their sizes but not
    hashed again: right after the commit that sealed them, a second hash would only repeat the first."""
    return [
        _files_intact(lake, version, thorough)
        if check is Check.FILES_INTACT
        else _RUNNERS[check](catalog, spec, version)
        for check in checks
    ]


def _committed_counts(catalog: Catalog, version: VersionRow) -> dict[str, Any]:
    where = ledger.LedgerFilter(
        asset=version.asset_key, version=version.number, action=ledger.Action.INGESTION_COMMITTED, limit=1
    )
    with catalog.reading() as session:
        found = ledger.entries(session, where)
    return json.loads(found[0].details) if found else {}


def _rows_add_up(catalog: Catalog, spec: Spec, version: VersionRow) -> Finding:
    read = _committed_counts(catalog, version).get("rows_read")
    counts = {"rows_read": read, "rows_landed": version.rows, "rows_quarantined": version.rows_quarantined}
    if read is None:
        return Finding(
            Check.ROWS_ADD_UP, False, f"{version.ref}: its commit in the ledger records no rows read", counts
        )
    passed = read == version.rows + version.rows_quarantined
    sign = "=" if passed else "≠"
    return Finding(
        Check.ROWS_ADD_UP,
        passed,
        f"{version.ref}: read {read} {sign} landed {version.rows} + quarantined {version.rows_quarantined}",
        counts,
    )


def _quarantine_within_limit(catalog: Catalog, spec: Spec, version: VersionRow) -> Finding:
    read = _committed_counts(catalog, version).get("rows_read") or version.rows + version.rows_quarantined
    fraction = version.rows_quarantined / read if read else 0.0
    limit = spec.body.max_bad_fraction
    passed = fraction <= limit
    return Finding(
        Check.QUARANTINE_WITHIN_LIMIT,
        passed,
        f"{version.ref}: {version.rows_quarantined} of {read} rows quarantined ({fraction:.2%}), "
        f"{'within' if passed else 'over'} max_bad_fraction {limit:g}",
        {"quarantined_fraction": fraction, "max_bad_fraction": limit},
    )


def _schema_matches_spec(catalog: Catalog, spec: Spec, version: VersionRow) -> Finding:
    from governance.spark.types import spark_type

    written = {f["name"]: _type_name(f["type"]) for f in json.loads(version.table_schema).get("fields", [])}
    declared = {c.name: _type_name(spark_type(c.type).jsonValue()) for c in spec.body.columns}
    if declared and spec.reads_topic:
        declared |= KAFKA_TYPES  # what a landing of a topic adds to every record
    problems = [f"missing {name}" for name in declared if name not in written]
    problems += [f"undeclared {name}" for name in written if name not in declared]
    problems += [
        f"{name} is {written[name]}, the spec says {kind}"
        for name, kind in declared.items()
        if name in written and written[name] != kind
    ]
    if problems:
        return Finding(
            Check.SCHEMA_MATCHES_SPEC, False, f"{version.ref}: " + "; ".join(problems), {"problems": problems}
        )
    return Finding(Check.SCHEMA_MATCHES_SPEC, True, f"{version.ref}: {len(written)} columns as the spec declares them")


def _type_name(kind: Any) -> str:
    return kind if isinstance(kind, str) else str(kind.get("type", "struct"))


def _inputs_as_declared(catalog: Catalog, spec: Spec, version: VersionRow) -> Finding:
    with catalog.reading() as session:
        used = list(
            session.exec(
                select(VersionRow)
                .join(LineageEdge, col(LineageEdge.input_version_id) == col(VersionRow.id))
                .where(LineageEdge.output_version_id == version.id)
            )
        )
    declared = {str(key) for key in spec.inputs}
    made_from = {row.asset_key for row in used}
    refs = sorted(row.ref for row in used)
    if made_from == declared:
        return Finding(
            Check.INPUTS_AS_DECLARED, True, f"{version.ref} was made from {', '.join(refs)}", {"inputs": refs}
        )
    problems = [f"{key} declared but not used" for key in sorted(declared - made_from)]
    problems += [f"{key} used but not declared" for key in sorted(made_from - declared)]
    return Finding(Check.INPUTS_AS_DECLARED, False, f"{version.ref}: " + "; ".join(problems), {"inputs": refs})


def _files_intact(lake: Lake, version: VersionRow, thorough: bool) -> Finding:
    folder = lake.at(version.path)
    manifest = lake.read_manifest(folder)
    if manifest is None:
        return Finding(Check.FILES_INTACT, False, f"{version.ref}: no readable manifest in {lake.uri(folder)}")
    problems = [
        problem for entry in manifest["files"] if (problem := file_problem(lake, folder, entry, hashed=thorough))
    ]
    if manifest.get("data_version") != version.data_version:
        problems.append("the manifest's data_version differs from the catalog's")
    if problems:
        return Finding(Check.FILES_INTACT, False, f"{version.ref}: " + "; ".join(problems), {"problems": problems})
    matching = "match their sha256" if thorough else "are there with their sizes (hashed as they were sealed)"
    return Finding(
        Check.FILES_INTACT,
        True,
        f"{version.ref}: the {len(manifest['files'])} files of the manifest {matching}",
        {"files": len(manifest["files"]), "hashed": thorough},
    )


def _stream_contiguous(catalog: Catalog, spec: Spec, version: VersionRow) -> Finding:
    with catalog.reading() as session:
        reads = session.exec(
            select(StreamRead).where(StreamRead.version_id == version.stored_id).order_by(col(StreamRead.partition))
        ).all()
    lost = {
        read.partition: read.start_offset - read.follows
        for read in reads
        if read.follows is not None and read.follows < read.start_offset
    }
    if not reads:
        return Finding(Check.STREAM_CONTIGUOUS, False, f"{version.ref}: no offset range is recorded with it")
    if lost:
        said = ", ".join(f"{count} in partition {partition}" for partition, count in sorted(lost.items()))
        return Finding(
            Check.STREAM_CONTIGUOUS,
            False,
            f"{version.ref}: offsets Kafka deleted before they were landed are missing: {said}",
            {"offsets_lost": {str(partition): count for partition, count in lost.items()}},
        )
    return Finding(Check.STREAM_CONTIGUOUS, True, f"{version.ref}: every partition follows on from the version before")


_RUNNERS = {
    Check.ROWS_ADD_UP: _rows_add_up,
    Check.QUARANTINE_WITHIN_LIMIT: _quarantine_within_limit,
    Check.SCHEMA_MATCHES_SPEC: _schema_matches_spec,
    Check.INPUTS_AS_DECLARED: _inputs_as_declared,
    Check.STREAM_CONTIGUOUS: _stream_contiguous,
}
