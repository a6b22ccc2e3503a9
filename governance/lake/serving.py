"""What another engine is served of an asset's table: the snapshots of the versions the catalog
holds committed, and nothing else. A purged version's tag leaves the table as the purge aligns it;
served from here, it is gone from the next load even before then, and so is a snapshot no version
tag holds (a version being written, another engine's)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from governance.lake.iceberg import IcebergTables, number_of, tag_of
from governance.zones import AssetKey

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata


@dataclass(frozen=True)
class ServedTable:
    """An asset's table as an engine is served it: its metadata, holding the `versions` (number ->
    snapshot id) alone, the newest of them current."""

    key: AssetKey
    metadata_location: str
    metadata: TableMetadata
    versions: Mapping[int, int]

    @property
    def current(self) -> int | None:
        return max(self.versions) if self.versions else None

    def version_of(self, snapshot_id: int) -> int | None:
        """The version a snapshot of this table holds, if it is one served."""
        return next((number for number, held in self.versions.items() if held == snapshot_id), None)


def served_table(tables: IcebergTables, key: AssetKey, committed: Collection[int]) -> ServedTable | None:
    """The asset's table with the `committed` versions' snapshots alone; None if it has no table."""
    from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType

    table = tables.peek(key)
    if table is None:
        return None
    metadata = table.metadata
    tags = {
        number: ref.snapshot_id
        for name, ref in metadata.refs.items()
        if (number := number_of(name)) is not None and number in committed and ref.snapshot_ref_type == "tag"
    }
    kept = set(tags.values())
    refs = {tag_of(number): metadata.refs[tag_of(number)] for number in sorted(tags)}
    current = tags[max(tags)] if tags else None
    if current is not None:
        refs[MAIN_BRANCH] = SnapshotRef.model_validate({"snapshot-id": current, "type": SnapshotRefType.BRANCH})
    served = metadata.model_copy(
        update={
            "refs": refs,
            "snapshots": [snapshot for snapshot in metadata.snapshots if snapshot.snapshot_id in kept],
            "snapshot_log": [entry for entry in metadata.snapshot_log if entry.snapshot_id in kept],
            "current_snapshot_id": current,
        }
    )
    return ServedTable(key, table.metadata_location, served, tags)
