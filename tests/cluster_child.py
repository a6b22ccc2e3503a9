"""Governed work on a Spark cluster, in one application of a process of its own (a process has one
SparkContext), for tests/test_spark_cluster.py: `custody demo` as the CLI runs it, then a batch with
a malformed row, a join with its column lineage, an undeclared read, and a database table read in
two partitions while it changes. Prints what happened as one JSON object on its last line.

Usage: cluster_child.py, with CUSTODY_HOME, CUSTODY_SPARK_MASTER, the lake (CUSTODY_LAKE, a
bucket of an S3 server) and the other settings in the environment, and the database's SHOP_HOST, SHOP_PORT, SHOP_DB, SHOP_USER and SHOP_PASSWORD.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psycopg
from pyspark.sql import functions as F

from governance.access.reads import read_table
from governance.batches import drop_batch
from governance.catalog import Catalog
from governance.cli import run
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCTS, drop_demo_batches
from governance.errors import UndeclaredRead
from governance.ingest import ingest
from governance.integrate import materialize
from governance.lake import open_lake
from governance.runs import RunRequest
from governance.spec import Spec, load_specs
from governance.zones import AssetKey, Lake
from resources.spark import SparkResource
from tests import transforms

GOOD = {"name": "Ada", "surname": "Byron", "order": {"product_id": "P1", "quantity": 2}, "version": "9"}
# Not JSON: the quarantine explains it in a Python UDF, on an executor.
MALFORMED = "this line is not JSON\n"
ORDERS = AssetKey("shop", "orders")
ORDERS_SPEC = """description: Orders, read by the executors.
roles: {{owner: sales-owners, producer: sales-producers, consumer: sales-consumers}}
zone: landing
source:
  format: jdbc
  url: jdbc:postgresql://{host}:{port}/{database}
  user_env: SHOP_USER
  password_env: SHOP_PASSWORD
  table: public.orders
  partition_column: id
  num_partitions: 2
columns:
  - {{name: id, type: long, nullable: false}}
  - {{name: amount, type: double}}
"""


def main() -> None:
    demo = run(["demo"])
    settings = Settings.from_env()
    spark = SparkResource(master=settings.spark_master).session(print)
    catalog, lake = Catalog.from_settings(settings, os.environ), open_lake(settings)
    specs = load_specs(settings.specs, transform_packages=settings.transform_packages)
    bob = RunRequest(requested_by="bob")
    dropped = drop_demo_batches(lake)
    products = ingest(spark, catalog, lake, specs[PRODUCTS], bob, batch_id=dropped.products_batch)
    drop_batch(
        lake, CLIENTS, "with-bad-rows", {"clients.json": (json.dumps(GOOD) + "\n").encode() * 20 + MALFORMED.encode()}
    )
    bad = ingest(spark, catalog, lake, specs[CLIENTS], bob, batch_id="with-bad-rows")
    joined = materialize(spark, catalog, lake, specs[NAMES_AND_PRODUCTS], RunRequest(requested_by="bob"))
    transforms.EXTRA_PATH["path"] = lake.uri(lake.at(bad.path))
    join = specs[NAMES_AND_PRODUCTS]
    undeclared = Spec(
        join.key,
        join.file,
        join.body.model_copy(update={"transform": "tests.transforms:joins_an_extra_path", "inputs": [str(PRODUCTS)]}),
    )
    try:
        materialize(spark, catalog, lake, undeclared, RunRequest(requested_by="bob"))
        refusal = None
    except UndeclaredRead as err:
        refusal = str(err)
    database = read_while_it_changes(spark, catalog, lake, bob)
    where = F.udf(lambda _: __import__("governance").__file__)
    print(
        json.dumps(
            {
                "demo": demo,
                "app_id": spark.sparkContext.applicationId,
                "master": spark.sparkContext.master,
                "products": products.ref,
                "bad": {"rows": bad.rows, "quarantined": bad.rows_quarantined, "ref": bad.ref},
                "joined": {
                    "ref": joined.version.ref,
                    "columns": {
                        column: sorted(f"{row.ref}.{name}" for row, name in deps)
                        for column, deps in joined.columns.by_column().items()
                    },
                },
                "refusal": refusal,
                "database": database,
                "verify": run(["repair", "--verify"]),
                "executor_code": spark.range(1).select(where("id")).first()[0],
                "executor_python": spark.range(1).select(F.udf(lambda _: sys.executable)("id")).first()[0],
            }
        )
    )


def read_while_it_changes(spark, catalog: Catalog, lake: Lake, bob: RunRequest) -> dict:
    """The table read in two partitions by the executors, while another connection changes every
    row: what landed, and whether the change reached it."""
    env = os.environ
    folder = Path(env["CUSTODY_HOME"]) / "database-specs"
    (folder / ORDERS.domain).mkdir(parents=True)
    (folder / ORDERS.domain / f"{ORDERS.name}.yaml").write_text(
        ORDERS_SPEC.format(host=env["SHOP_HOST"], port=env["SHOP_PORT"], database=env["SHOP_DB"])
    )
    spec = load_specs(folder, transform_packages=DEFAULT_TRANSFORM_PACKAGES)[ORDERS]
    dsn = (
        f"host={env['SHOP_HOST']} port={env['SHOP_PORT']} dbname={env['SHOP_DB']} "
        f"user={env['SHOP_USER']} password={env['SHOP_PASSWORD']}"
    )

    def meanwhile(message: str) -> None:
        if message.startswith("reading "):
            with psycopg.connect(dsn, autocommit=True) as connection:
                connection.execute("UPDATE orders SET amount = 999")

    version = ingest(spark, catalog, lake, spec, bob, progress=meanwhile)
    amounts = {row["amount"] for row in read_table(lake, version).to_pylist()}
    return {
        "rows": version.rows,
        "saw_the_change": 999.0 in amounts,
        "partitions": catalog.reads_of([version.id])[version.id].partitions,
    }


if __name__ == "__main__":
    main()
