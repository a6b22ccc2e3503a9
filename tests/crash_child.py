"""Run one real ingestion and stop dead at a chosen point, for tests/test_crash.py.

Usage: crash_child.py HOME POINT BATCH. At POINT the process writes HOME/reached and sleeps; the test
then SIGKILLs it. POINT is one of spark-write, before-commit, during-commit. The lake is the home's
folder, or the object store CUSTODY_LAKE names when the environment gives one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from pyarrow.fs import FileSelector
from pyspark.sql import DataFrameWriter, SparkSession

import governance.ingest as ingest_module
import governance.versions as versions_module
from governance.catalog import Catalog
from governance.config import Settings
from governance.lake import lake_spark_conf, open_lake
from governance.runs import RunRequest
from governance.spec import load_specs
from governance.zones import AssetKey, Lake
from resources.spark import session_conf

SPECS = Path(__file__).parent / "data" / "specs"


def stop_here(home: Path) -> None:
    (home / "reached").write_text("yes")
    time.sleep(600)


def during_spark_write(home: Path, lake: Lake) -> None:
    original = DataFrameWriter.parquet

    def parquet(self, path, *args, **kwargs):
        writer = threading.Thread(target=original, args=(self, path, *args), kwargs=kwargs, daemon=True)
        writer.start()
        while writer.is_alive() and not written(lake, path):
            time.sleep(0.01)
        if writer.is_alive():
            stop_here(home)
        raise SystemExit("the write finished before it could be interrupted")

    DataFrameWriter.parquet = parquet


def written(lake: Lake, uri: str) -> bool:
    """Whether a Parquet file of the write has appeared, in its task's temporary folder or its place."""
    where = uri.split("://", 1)[-1]
    try:
        found = lake.fs.get_file_info(FileSelector(where, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        # Spark replaces the folder and its temporary ones as it goes: one vanishing mid-listing means not yet.
        return False
    return any(info.path.endswith(".parquet") for info in found)


def main() -> None:
    home, point, batch = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    settings = replace(Settings.from_env({**os.environ, "CUSTODY_HOME": str(home)}), specs_approval="off")
    lake = open_lake(replace(settings, tables="off"))
    if point == "spark-write":
        during_spark_write(home, lake)
    elif point == "before-commit":
        ingest_module.commit = lambda *args, **kwargs: stop_here(home)
    elif point == "during-commit":
        versions_module._record = lambda *args, **kwargs: stop_here(home)
    builder = SparkSession.builder
    for key, value in session_conf("local[2]", lake_spark_conf(settings), jars=settings.spark_jars()).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spec = load_specs(SPECS, transform_packages=settings.transform_packages)[AssetKey("t", "people")]
    ingest_module.ingest(
        spark,
        Catalog.from_url(settings.catalog_url),
        lake,
        spec,
        RunRequest(requested_by="bob", run_id=f"crash-{point}"),
        batch_id=batch,
    )


if __name__ == "__main__":
    main()
