"""The lake: its layout (`governance.zones`), a lake in an object store (`objects`), and each
version as an Iceberg table snapshot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from governance.config import Settings
from governance.zones import Lake

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from governance.lake.snapshots import TableSnapshots

TABLES_FOLDER = "_tables"
# The Iceberg catalog the tables are in, as engines name it.
CATALOG_NAME = "custody"


def open_lake(settings: Settings) -> Lake:
    """The lake `settings` name, with its versions' table snapshots unless CUSTODY_TABLES is off."""
    if settings.lake_url:
        from governance.lake.objects import ObjectLake, object_store, pyiceberg_properties

        store = object_store(settings)
        base = settings.lake_url.removeprefix("s3a://")
        tables = _tables(settings, f"s3://{base}/{TABLES_FOLDER}", store, pyiceberg_properties(settings))
        return ObjectLake(settings.lake_url, store, settings.lake, tables)
    if settings.lake == settings.home / "lake" and not settings.lake.exists():
        # Engines read a folder lake's files themselves, past the catalog's decisions: the default
        # lake is made readable by its owner, the service's user, alone.
        settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        settings.lake.mkdir(mode=0o700)
    return Lake(settings.lake, tables=_tables(settings, f"file://{settings.lake / TABLES_FOLDER}", None, {}))


def lake_spark_conf(settings: Settings) -> dict[str, str]:
    """The Spark settings that reach the lake: Hadoop's S3A settings for a lake in a bucket (each
    under `spark.hadoop.`, none of them secret); none for a folder."""
    if not settings.lake_url:
        return {}
    from governance.lake.objects import hadoop_conf

    return {f"spark.hadoop.{key}": value for key, value in hadoop_conf(settings).items()}


def _tables(
    settings: Settings, warehouse: str, fs: pafs.FileSystem | None, properties: dict[str, str]
) -> TableSnapshots | None:
    if settings.tables == "off":
        return None
    # Imported here: the code location opens a lake without loading the catalog's modules.
    from governance.lake.iceberg import IcebergTables
    from governance.lake.snapshots import LOCKS, TableSnapshots

    tables = IcebergTables(settings.catalog_url, warehouse, fs, properties)
    # Locks are local files, beside the folder lake's tables or in the local part of an object-store lake.
    return TableSnapshots(tables, settings.lake / TABLES_FOLDER / LOCKS)
