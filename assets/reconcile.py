"""Versions the catalog committed that Dagster never heard of: the run lost its process, or the
catalog, between the commit and its materialization event. Recorded in Dagster, so that the UI's
latest materialization is the catalog's newest version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg

from assets.factory import VERSION_NUMBER, materialize_result
from assets.tags import PARTITION_NAME_TAG

if TYPE_CHECKING:
    from governance.catalog import Catalog
    from governance.catalog.models import VersionRow

RECORDED_BY = "custody/recorded_by"


@dataclass(frozen=True)
class Recorded:
    ref: str
    run_id: str

    def __str__(self) -> str:
        return f"{self.ref}, committed by run {self.run_id}, which ended before it could tell Dagster"


def record_committed_versions(catalog: Catalog, instance: dg.DagsterInstance) -> list[Recorded]:
    """Record in Dagster each asset's newest committed version that a finished run of this instance
    made and Dagster has no materialization of (nor of any newer version); return them."""
    newest = catalog.newest_committed_by_asset()
    keys = {key: dg.AssetKey(key.split("/")) for key in newest}
    known = instance.get_latest_materialization_events(list(keys.values()))
    recorded = []
    for key, row in sorted(newest.items()):
        if row.run_id is None or _reported_number(known.get(keys[key])) >= row.number:
            continue
        run = instance.get_run_by_id(row.run_id)
        if run is None or not run.is_finished:  # another instance's run, or one still going, which says so itself
            continue
        instance.report_runless_asset_event(_materialization(keys[key], row, run.tags.get(PARTITION_NAME_TAG)))
        recorded.append(Recorded(row.ref, row.run_id))
    return recorded


def _reported_number(entry: dg.EventLogEntry | None) -> int:
    materialization = entry.asset_materialization if entry else None
    metadata = materialization.metadata if materialization else {}
    # Materializations recorded before the key had Custody's prefix say it as "version".
    version = metadata.get(VERSION_NUMBER, metadata.get("version"))
    return version.value if isinstance(version, dg.IntMetadataValue) and version.value is not None else 0


def _materialization(key: dg.AssetKey, row: VersionRow, partition: str | None) -> dg.AssetMaterialization:
    metadata = dict(materialize_result(row).metadata or {})
    metadata[RECORDED_BY] = dg.MetadataValue.md(
        f"Recorded by `custody repair`: run `{row.run_id}` committed {row.ref}, then ended before it could say so."
    )
    return dg.AssetMaterialization(asset_key=key, metadata=metadata, partition=partition)
