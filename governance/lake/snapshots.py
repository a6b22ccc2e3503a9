"""Each asset's Iceberg table kept in line with the catalog, which alone says which versions exist.

A version exists once the catalog commits it; its table snapshot follows right after. A snapshot
that could not be made then (the table's catalog busy, a crash in between) does not undo the
version: the failure is recorded in the ledger, and the next commit of the asset, a purge or
`custody repair` makes it. A purge withdraws the tag before it deletes a file, and stops if it
cannot, so no tag ever names files that are gone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlmodel import select

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.models import VersionRow, VersionStatus
from governance.errors import TableSnapshotError, reason_of
from governance.lake.iceberg import VERSION_PROPERTY, Alignment, IcebergTables, LiveVersion
from governance.runs import Progress, quiet
from governance.versions import read_manifest
from governance.zones import AssetKey, Lake


@dataclass
class TablesReport:
    """What aligning the tables of many assets did, and which could not be aligned."""

    aligned: dict[str, Alignment] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class TableSnapshots:
    """The lake's versions as snapshots of Iceberg tables."""

    def __init__(self, tables: IcebergTables):
        self.tables = tables

    def align(self, catalog: Catalog, lake: Lake, key: AssetKey) -> Alignment:
        """Make the asset's table agree with its committed versions; TableSnapshotError if it cannot."""
        rows = {row.number: row for row in _committed(catalog, key)}
        return self.tables.align(key, rows.keys(), lambda number: live_version(lake, rows[number]))

    def after_commit(self, catalog: Catalog, lake: Lake, row: VersionRow, progress: Progress = quiet) -> None:
        """Give a just-committed version its snapshot; a failure is recorded and said, not raised."""
        key = AssetKey.parse(row.asset_key)
        try:
            self.align(catalog, lake, key)
        except TableSnapshotError as err:
            progress(f"{row.ref} is committed, but its table snapshot is not: {err}; custody repair makes it")
            record_failure(catalog, row, self.tables.table_name(key), err)

    def align_all(self, catalog: Catalog, lake: Lake, progress: Progress = quiet) -> TablesReport:
        """Align the table of every asset that has had a version."""
        report = TablesReport()
        for key in versioned_assets(catalog):
            try:
                done = self.align(catalog, lake, key)
            except TableSnapshotError as err:
                report.failed[str(key)] = str(err)
                continue
            if done.changed:
                progress(
                    f"{self.tables.table_name(key)}: tagged {done.tagged or 'none'}, withdrawn {done.withdrawn or 'none'}"
                )
            report.aligned[str(key)] = done
        return report


def versioned_assets(catalog: Catalog) -> list[AssetKey]:
    with catalog.session() as session:
        return [AssetKey.parse(key) for key in sorted(set(session.exec(select(VersionRow.asset_key))))]


def _committed(catalog: Catalog, key: AssetKey) -> list[VersionRow]:
    with catalog.session() as session:
        return list(
            session.exec(
                select(VersionRow).where(
                    VersionRow.asset_key == str(key), VersionRow.status == VersionStatus.COMMITTED.value
                )
            )
        )


def live_version(lake: Lake, row: VersionRow) -> LiveVersion:
    """The version's Parquet files, as its manifest lists them, and its snapshot summary."""
    folder = lake.at(row.path)
    manifest = read_manifest(folder)
    if manifest is None:
        raise TableSnapshotError(f"{row.ref}: no readable manifest in {folder}, so no table snapshot")
    # Iceberg keeps a location as written, without percent-encoding: the `=` of `v=N` stays.
    files = tuple(
        f"file://{folder / entry['path']}" for entry in manifest["files"] if entry["path"].endswith(".parquet")
    )
    return LiveVersion(row.number, files, snapshot_summary(row))


def snapshot_summary(row: VersionRow) -> dict[str, str]:
    """What a snapshot's summary says of its version: enough to find it in Custody."""
    said = {
        "custody.asset": row.asset_key,
        VERSION_PROPERTY: str(row.number),
        "custody.data-version": row.data_version,
        "custody.run-id": row.run_id,
        "custody.code-version": row.code_version,
        "custody.requested-by": row.requested_by,
        "custody.assurance": row.assurance,
        "custody.created-at": row.created_at.isoformat(),
    }
    return {name: str(value) for name, value in said.items() if value is not None}


def record_failure(catalog: Catalog, row: VersionRow, table: str, err: TableSnapshotError) -> None:
    with catalog.session() as session:
        ledger.append(
            session,
            actor=row.requested_by,
            action=ledger.Action.TABLE_SNAPSHOT_FAILED,
            asset=row.asset_key,
            version=row.number,
            run_id=row.run_id,
            assurance=row.assurance,
            details={"table": table, "reason": reason_of(err)},
        )
