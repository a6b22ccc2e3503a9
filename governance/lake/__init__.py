"""The lake: its layout (`governance.zones`) and each version as an Iceberg table snapshot."""

from __future__ import annotations

from governance.config import Settings
from governance.zones import Lake

TABLES_FOLDER = "_tables"


def open_lake(settings: Settings) -> Lake:
    """The lake `settings` name, with its versions' table snapshots unless CUSTODY_TABLES is off."""
    if settings.tables == "off":
        return Lake(settings.lake)
    # Imported here: the code location opens a lake without loading the catalog's modules.
    from governance.lake.iceberg import IcebergTables
    from governance.lake.snapshots import TableSnapshots

    tables = IcebergTables(settings.catalog_url, settings.lake / TABLES_FOLDER)
    return Lake(settings.lake, tables=TableSnapshots(tables))
