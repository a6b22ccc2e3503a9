"""Each asset's Iceberg table kept in line with the catalog, which alone says which versions exist.

A version exists once the catalog commits it; its table snapshot follows right after. A snapshot
that could not be made then (the table's catalog busy, a crash in between) does not undo the
version: the failure is recorded in the ledger, and the next commit of the asset, a purge or
`custody repair` makes it. A purge withdraws the tag before it deletes a file, and stops if it
cannot, so no tag ever names files that are gone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import select

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.catalog.states import VersionStatus
from governance.errors import CustodyError, TableSnapshotError, bounded_reason
from governance.lake.iceberg import (
    TABLE_PROPERTIES,
    VERSION_PROPERTY,
    Alignment,
    IcebergTables,
    LiveVersion,
    tag_of,
)
from governance.locks import file_lock
from governance.runs import Progress, quiet
from governance.zones import AssetKey, Lake

if TYPE_CHECKING:
    # Only named: importing it would load the digest's libraries wherever a lake is opened.
    from governance.content import Footer

# Beside the tables' metadata, one lock file an asset: whoever aligns a table holds it.
LOCKS = "_locks"


@dataclass
class TablesReport:
    """What aligning the tables of many assets did, and which could not be aligned."""

    aligned: dict[str, Alignment] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class TableSnapshots:
    """The lake's versions as snapshots of Iceberg tables."""

    def __init__(self, tables: IcebergTables, locks: Path):
        self.tables = tables
        # A local folder: an object store has no lock. Processes of other hosts that write one asset
        # meet at the table's commit instead, which Iceberg lets only one of them win at a time.
        self.locks = locks

    def align(
        self, catalog: Catalog, lake: Lake, key: AssetKey, footers: Mapping[int, Mapping[str, Footer]] | None = None
    ) -> Alignment:
        """Make the asset's table agree with its committed versions, read while this process alone
        aligns it; TableSnapshotError if the table cannot be reached. `footers` are the Parquet
        footers already read of some versions' files, by version and file name."""
        with self.held(key):
            done = self._align(catalog, lake, key, footers)
        if done.guarded:
            record_guard(catalog, key, self.tables.table_name(key), done.guarded)
        return done

    def _align(
        self, catalog: Catalog, lake: Lake, key: AssetKey, footers: Mapping[int, Mapping[str, Footer]] | None = None
    ) -> Alignment:
        rows = {row.number: row for row in _committed(catalog, key)}
        known = footers or {}
        return self.tables.align(key, rows.keys(), lambda number: live_version(lake, rows[number], known.get(number)))

    @contextmanager
    def held(self, key: AssetKey) -> Iterator[None]:
        """The asset's table to this process alone: two commits of one asset, or a commit and a
        purge, would otherwise each make the table agree with the versions it saw."""
        lock = self.locks / f"{key.domain}.{key.name}.lock"
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise TableSnapshotError(f"cannot lock the table of {key} at {lock}: {err.strerror or err}") from err
        with file_lock(lock):
            yield

    @contextmanager
    def withdrawing(self, catalog: Catalog, lake: Lake, key: AssetKey) -> Iterator[None]:
        """The tags of the asset's versions that are no longer committed withdrawn, and the table
        held until the block (which deletes their files) ends."""
        with self.held(key):
            done = self._align(catalog, lake, key)
            yield
        if done.guarded:
            record_guard(catalog, key, self.tables.table_name(key), done.guarded)

    def after_commit(
        self,
        catalog: Catalog,
        lake: Lake,
        row: VersionRow,
        progress: Progress = quiet,
        footers: Mapping[str, Footer] | None = None,
    ) -> None:
        """Give a just-committed version its snapshot, from the `footers` of its files (by name)
        that sealing read; a failure is recorded and said, not raised: the version stands, and the
        step that committed it must not be taken for one that failed."""
        key = AssetKey.parse(row.asset_key)
        try:
            done = self.align(catalog, lake, key, {row.number: footers or {}})
        except (CustodyError, SQLAlchemyError) as err:
            problem = str(err)
        else:
            if row.number not in done.failed:
                return
            problem = done.failed[row.number]
        progress(f"{row.ref} is committed, but its table snapshot is not: {problem}; custody repair makes it")
        try:
            record_failure(catalog, row, self.tables.table_name(key), problem)
        except (CustodyError, SQLAlchemyError) as err:  # the catalog went: the next repair makes the snapshot
            progress(f"{row.ref}: the table snapshot's failure could not be recorded: {err}")

    def align_all(self, catalog: Catalog, lake: Lake, progress: Progress = quiet) -> TablesReport:
        """Align the table of every asset that has had a version."""
        report = TablesReport()
        for key in versioned_assets(catalog):
            try:
                done = self.align(catalog, lake, key)
            except TableSnapshotError as err:
                report.failed[str(key)] = str(err)
                continue
            report.failed.update({f"{key}@{number}": problem for number, problem in done.failed.items()})
            if done.changed:
                progress(
                    f"{self.tables.table_name(key)}: tagged {done.tagged or 'none'}, withdrawn {done.withdrawn or 'none'}"
                )
            report.aligned[str(key)] = done
        return report


def versioned_assets(catalog: Catalog) -> list[AssetKey]:
    with catalog.reading() as session:
        return [AssetKey.parse(key) for key in sorted(session.exec(select(VersionRow.asset_key).distinct()))]


def table_listing(catalog: Catalog, tables: IcebergTables) -> list[dict[str, Any]]:
    """Each versioned asset's table, the versions tagged in it and the tag of its current snapshot
    (the newest): what `custody tables list --json` prints. A table that cannot be read is listed
    with the `problem`, among the others."""
    listed = []
    for key in versioned_assets(catalog):
        problem = None
        try:
            numbers = sorted(tables.tags(key))
        except TableSnapshotError as err:
            numbers, problem = [], str(err)
        listed.append(
            {
                "asset": str(key),
                "table": tables.table_name(key),
                "versions": numbers,
                "tags": [tag_of(number) for number in numbers],
                "current": tag_of(numbers[-1]) if numbers else None,
                "problem": problem,
            }
        )
    return listed


def _committed(catalog: Catalog, key: AssetKey) -> list[VersionRow]:
    with catalog.session() as session:
        return list(
            session.exec(
                select(VersionRow).where(
                    VersionRow.asset_key == str(key), VersionRow.status == VersionStatus.COMMITTED.value
                )
            )
        )


def live_version(lake: Lake, row: VersionRow, footers: Mapping[str, Footer] | None = None) -> LiveVersion:
    """The version's Parquet files, as its manifest lists them, with those of their `footers`
    (by file name) already read, and its snapshot summary."""
    folder = lake.at(row.path)
    manifest = lake.read_manifest(folder)
    if manifest is None:
        raise TableSnapshotError(f"{row.ref}: no readable manifest in {lake.uri(folder)}, so no table snapshot")
    # Iceberg keeps a location as written, without percent-encoding: the `=` of `v=N` stays.
    names = [entry["path"] for entry in manifest["files"] if entry["path"].endswith(".parquet")]
    uris = {name: lake.file_uri(folder / name) for name in names}
    read = {uris[name]: footer for name, footer in (footers or {}).items() if name in uris}
    partitioned = manifest.get("partitioned_by", {})
    return LiveVersion(row.number, tuple(uris.values()), snapshot_summary(row), read, partitioned)


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


def record_guard(catalog: Catalog, key: AssetKey, table: str, found: Mapping[str, str | None]) -> None:
    """The guarding properties of the asset's table that someone had changed, as found, and put back."""
    with catalog.session() as session:
        ledger.append(
            session,
            actor="system",
            action=ledger.Action.TABLE_GUARD_RESTORED,
            asset=str(key),
            assurance="system",
            details={
                "table": table,
                "found": dict(found),
                "restored": {name: TABLE_PROPERTIES[name] for name in found},
            },
        )


def record_failure(catalog: Catalog, row: VersionRow, table: str, problem: str) -> None:
    with catalog.session() as session:
        ledger.append(
            session,
            actor=row.requested_by,
            action=ledger.Action.TABLE_SNAPSHOT_FAILED,
            asset=row.asset_key,
            version=row.number,
            run_id=row.run_id,
            assurance=row.assurance,
            details={"table": table, "reason": bounded_reason(problem)},
        )
