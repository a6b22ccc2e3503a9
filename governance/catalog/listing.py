"""The catalog as an auditor browses it: every asset with its roles, classification and newest
version, found by text or filtered by domain, classification or owner.

A few statements whatever the catalog's size: the definitions in force; the versions counted by
asset and status, and each asset's newest committed one, from one index; the assets with a critical
version; and the last recorded spec of the assets that were retired.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select
from sqlmodel import Session, col

from governance.catalog import Catalog, utc_from
from governance.catalog.entries import AssetEntry, Filters, NewestVersion
from governance.catalog.jsonrows import json_rows
from governance.catalog.models import AssetRow, SpecApplication, SpecSnapshot, VersionRow
from governance.catalog.states import Criticality, VersionStatus
from governance.errors import NotFound
from governance.zones import AssetKey


@dataclass(frozen=True)
class AssetDetail:
    """One asset whole: its entry, the spec in force (or last recorded, once retired), every version,
    its declared inputs and the assets in force that declare it as theirs."""

    entry: AssetEntry
    spec: dict[str, Any]
    versions: tuple[VersionRow, ...]
    dependents: tuple[str, ...]
    # The columns as the service listed them: its versions come without their schemas.
    listed_columns: tuple[dict[str, Any], ...] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AssetDetail:
        """The detail `to_dict` gave, as the service sends it."""
        return cls(
            entry=AssetEntry.from_dict(data),
            spec=data["spec"],
            versions=tuple(VersionRow.model_validate({**row, "table_schema": "{}"}) for row in data["versions"]),
            dependents=tuple(data["dependents"]),
            listed_columns=tuple(data["columns"]),
        )

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.spec.get("inputs", []))

    def facts(self) -> dict[str, str]:
        """What the asset is, in words, as the CLI and Jupyter show it above its columns and versions."""
        entry = self.entry
        return {
            "zone": entry.zone,
            "classification": entry.classification + (", pii" if entry.pii else ""),
            "owner / producer / consumer": f"{entry.owner} / {entry.producer} / {entry.consumer}",
            "inputs": ", ".join(self.inputs) or "none (a landing asset)",
            **({"source": _source_words(self.spec["source"])} if self.spec.get("source") else {}),
            "built from it": ", ".join(self.dependents) or "no asset takes it as an input",
            "spec": f"{'retired, last spec' if entry.retired else 'in force'} {entry.spec_hash}",
        }

    @property
    def columns(self) -> list[dict[str, Any]]:
        """The columns the spec declares (name, type, nullable, description); for a spec that declares
        none, those its newest committed version was written with."""
        if self.listed_columns is not None:
            return list(self.listed_columns)
        declared = self.spec.get("columns", [])
        if declared or self.entry.newest is None:
            return declared
        newest = next(v for v in self.versions if v.number == self.entry.newest.number)
        return [
            {
                "name": f["name"],
                "type": f["type"] if isinstance(f["type"], str) else f["type"].get("type", "struct"),
                "nullable": f.get("nullable", True),
                "description": "",
            }
            for f in json.loads(newest.table_schema).get("fields", [])
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.entry.to_dict(),
            "spec": self.spec,
            "inputs": list(self.inputs),
            "dependents": list(self.dependents),
            "columns": self.columns,
            "versions": [
                row.model_dump(mode="json", exclude={"table_schema", "column_lineage"}) for row in self.versions
            ],
        }


def _source_words(source: dict[str, Any]) -> str:
    """Where a landing asset's rows come from, in words."""
    if source["format"] != "jdbc":
        return f"DropZone batches ({source['format']})"
    what = f"table {source['table']}" if source.get("table") else "a query"
    marks = f", incremental on {source['incremental']['column']}" if source.get("incremental") else ""
    return f"{what} of {source['url']}{marks}"


def listing(catalog: Catalog, filters: Filters | None = None) -> list[AssetEntry]:
    """Every asset the catalog knows, in force or retired, sorted by key, that `filters` keep."""
    filters = filters or Filters()
    with catalog.reading() as session:
        asserted = select(col(AssetRow.key), col(AssetRow.spec_hash), col(AssetRow.spec_json))
        specs = {
            row["key"]: (row["spec_hash"], row["spec_json"], False)
            for row in json_rows(session.connection(), asserted, json_columns=("spec_json",))
        }
        stats = _version_stats(session)
        retired = [key for key in sorted({*stats, *_retirements(session)}) if key not in specs]
        specs.update(_last_specs(session, retired))
    entries = [_entry(key, *specs[key], stats.get(key)) for key in sorted(specs)]
    return [entry for entry in entries if filters.keep(entry)]


def _version_stats(session: Session) -> dict[str, tuple[int, int, bool, NewestVersion | None]]:
    connection = session.connection()
    counts: dict[str, dict[str, int]] = {}
    by_status = select(col(VersionRow.asset_key), col(VersionRow.status), func.count().label("versions")).group_by(
        VersionRow.asset_key, VersionRow.status
    )
    for row in json_rows(connection, by_status):
        counts.setdefault(row["asset_key"], {})[row["status"]] = row["versions"]
    critical = set(
        connection.execute(
            select(col(VersionRow.asset_key))
            .where(col(VersionRow.criticality) == Criticality.CRITICAL.value)
            .distinct()
        ).scalars()
    )
    top = (
        select(col(VersionRow.asset_key), func.max(VersionRow.number).label("number"))
        .where(col(VersionRow.status) == VersionStatus.COMMITTED.value)
        .group_by(VersionRow.asset_key)
        .subquery()
    )
    newest_rows = select(
        col(VersionRow.asset_key),
        col(VersionRow.number),
        col(VersionRow.label),
        col(VersionRow.rows),
        col(VersionRow.created_at),
        col(VersionRow.requested_by),
    ).join(top, and_(col(VersionRow.asset_key) == top.c.asset_key, col(VersionRow.number) == top.c.number))
    newest = {
        row["asset_key"]: NewestVersion(
            row["number"], row["label"], row["rows"], utc_from(row["created_at"]), row["requested_by"]
        )
        for row in json_rows(connection, newest_rows)
    }
    return {
        key: (sum(by_status.values()), by_status.get(VersionStatus.PURGED.value, 0), key in critical, newest.get(key))
        for key, by_status in counts.items()
    }


def _retirements(session: Session) -> dict[str, str | None]:
    """The spec each retired asset had when its owner retired it, by asset (the latest retirement)."""
    rows = session.connection().execute(
        select(col(SpecApplication.asset_key), col(SpecApplication.previous_hash))
        .where(col(SpecApplication.spec_hash).is_(None))
        .order_by(col(SpecApplication.id))
    )
    return {key: previous for key, previous in rows}


def _last_specs(session: Session, keys: list[str]) -> dict[str, tuple[str, dict[str, Any], bool]]:
    """What each of `keys`, retired, was: the spec in force when it was retired, else the newest
    recorded (nothing, for versions older than the catalog's spec records)."""
    found: dict[str, tuple[str, dict[str, Any], bool]] = dict.fromkeys(keys, ("", {}, True))
    if not keys:
        return found
    last = _retirements(session)
    snapshots = session.scalars(
        select(SpecSnapshot).where(col(SpecSnapshot.asset_key).in_(keys)).order_by(col(SpecSnapshot.id))
    )
    for row in snapshots:
        if found[row.asset_key][0] != last.get(row.asset_key):  # once it is the retired one, it stays
            found[row.asset_key] = (row.spec_hash, json.loads(row.spec_json), True)
    return found


def _entry(
    key: str,
    spec_hash: str,
    body: dict[str, Any],
    retired: bool,
    stats: tuple[int, int, bool, NewestVersion | None] | None,
) -> AssetEntry:
    versions, purged, critical, newest = stats or (0, 0, False, None)
    roles = body.get("roles", {})
    return AssetEntry(
        key=key,
        zone=body.get("zone", ""),
        description=body.get("description", ""),
        owner=roles.get("owner", ""),
        producer=roles.get("producer", ""),
        consumer=roles.get("consumer", ""),
        classification=body.get("classification", ""),
        pii=bool(body.get("pii", False)),
        tags=dict(body.get("tags", {})),
        columns=tuple(c["name"] for c in body.get("columns", [])),
        spec_hash=spec_hash,
        retired=retired,
        versions=versions,
        purged=purged,
        critical=critical,
        newest=newest,
    )


def _versions(session: Session, key: AssetKey) -> tuple[VersionRow, ...]:
    return tuple(
        session.scalars(
            select(VersionRow).where(col(VersionRow.asset_key) == str(key)).order_by(col(VersionRow.number))
        )
    )


def detail(catalog: Catalog, key: AssetKey) -> AssetDetail:
    """The asset `key` whole; NotFound names the assets to choose from when the catalog has no such asset."""
    with catalog.reading() as session:
        row = session.get(AssetRow, str(key))
        versions = _versions(session, key)
        if row is not None:
            spec_hash, body, retired = row.spec_hash, json.loads(row.spec_json), False
        elif versions or str(key) in _retirements(session):
            spec_hash, body, retired = _last_specs(session, [str(key)])[str(key)]
        else:
            raise NotFound(
                f"unknown asset {key}: the catalog has no spec and no version of it (custody catalog lists them)"
            )
        dependents = tuple(
            sorted(
                other
                for other, spec_json in session.connection().execute(select(col(AssetRow.key), col(AssetRow.spec_json)))
                if str(key) in json.loads(spec_json).get("inputs", [])
            )
        )
    committed = [v for v in versions if v.status == VersionStatus.COMMITTED.value]
    top = committed[-1] if committed else None
    stats = (
        len(versions),
        sum(v.status == VersionStatus.PURGED.value for v in versions),
        any(v.criticality == Criticality.CRITICAL.value for v in versions),
        NewestVersion(top.number, top.label, top.rows, top.created_at, top.requested_by) if top else None,
    )
    return AssetDetail(_entry(str(key), spec_hash, body, retired, stats), body, versions, dependents)
