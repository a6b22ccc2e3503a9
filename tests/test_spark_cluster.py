"""Custody on a Spark standalone cluster: the executors run the work, with the project's code and Python,
and write the versions to a lake in an S3 bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.s3_server import CREDENTIALS, S3Server, running_s3

ROOT = Path(__file__).resolve().parents[1]
# A run takes both workers' cores and half their memory; the driver is reached on loopback, where
# the workers are, whatever this host's name resolves to.
CONF = "spark.cores.max=2,spark.executor.memory=512m,spark.driver.host=127.0.0.1,spark.driver.bindAddress=127.0.0.1"


def on_cluster(home: Path, cluster, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("CUSTODY_")}
    return {
        **env,
        "CUSTODY_HOME": str(home),
        "CUSTODY_SPARK_MASTER": cluster.master,
        "CUSTODY_SPARK_CONF": CONF,
        "CUSTODY_SPECS": str(ROOT / "assets" / "specs"),
        "CUSTODY_SPECS_APPROVAL": "off",
        **extra,
    }


@pytest.fixture(scope="module")
def shop(postgres) -> Iterator[dict[str, str]]:
    """A database of the tests' server with 40 orders, as the child finds it in its environment."""
    database = "cluster_shop"
    postgres.create_database(database)
    dsn = (
        f"host={postgres.host} port={postgres.port} user={postgres.user} password={postgres.password} dbname={database}"
    )
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE orders (id bigint PRIMARY KEY, amount double precision)")
        connection.execute("INSERT INTO orders SELECT g, g * 1.5 FROM generate_series(1, 40) g")
    yield {
        "SHOP_HOST": postgres.host,
        "SHOP_PORT": str(postgres.port),
        "SHOP_DB": database,
        "SHOP_USER": postgres.user,
        "SHOP_PASSWORD": postgres.password,
    }
    postgres.drop_database(database)


@pytest.fixture(scope="module")
def bucket() -> Iterator[S3Server]:
    """The S3 server the lake is in: no folder of the lake is shared between the driver and the workers."""
    with running_s3() as server:
        server.client().create_bucket(Bucket="lake")
        yield server


@pytest.fixture(scope="module")
def child(spark_cluster, shop, bucket, tmp_path_factory) -> tuple[dict, str, list[dict]]:
    """The demo, then ingestion with bad rows, a join with column lineage, an undeclared read and a
    database read, in one application, with the lake in a bucket; its report, everything it
    printed, and the applications it added to the master."""
    before = {app["id"] for app in spark_cluster.applications()}
    home = tmp_path_factory.mktemp("cluster-child")
    env = on_cluster(
        home,
        spark_cluster,
        CUSTODY_TRANSFORM_PACKAGES="assets.transforms,tests.transforms",
        CUSTODY_LAKE="s3a://lake/cluster",
        CUSTODY_S3_ENDPOINT=bucket.endpoint,
        **CREDENTIALS,
        **shop,
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.cluster_child"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    added = [app for app in spark_cluster.applications() if app["id"] not in before]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout, added


@pytest.fixture(scope="module")
def child_report(child) -> dict:
    return child[0]


def test_the_demo_runs_on_the_cluster(child):
    report, printed, added = child
    assert report["demo"] == 0
    assert "Origins of sales/product_summary@2.revenue" in printed
    assert [(app["name"], app["cores"]) for app in added] == [("custody", 2)]


def test_the_master_lists_the_application_that_did_the_work(spark_cluster, child_report):
    assert child_report["master"] == spark_cluster.master
    assert child_report["app_id"] in {app["id"] for app in spark_cluster.applications()}


def test_bad_rows_are_explained_and_quarantined_by_python_on_the_executors(child_report):
    assert (child_report["bad"]["rows"], child_report["bad"]["quarantined"]) == (20, 1)


def test_executors_import_the_shipped_code_with_the_drivers_python(child_report):
    assert "custody-code-" in child_report["executor_code"]
    assert child_report["executor_code"].endswith("governance/__init__.py")
    assert child_report["executor_python"] == sys.executable


def test_column_lineage_is_recorded_for_work_done_on_the_cluster(child_report):
    columns, clients, products = child_report["joined"]["columns"], child_report["bad"]["ref"], child_report["products"]
    assert columns["amount"] == [f"{clients}.order__quantity", f"{products}.unit_price"]
    assert columns["product_name"] == [f"{products}.product_name"]


def test_an_undeclared_read_is_refused_on_the_cluster(child_report):
    assert child_report["refusal"] == (
        f"the transform of sales/names_and_products read {child_report['bad']['ref']}, which is not a declared "
        "input (declared inputs: sales/products); add it to the spec's inputs"
    )


def test_the_executors_read_a_database_in_one_snapshot(child_report):
    """Both partitions were read by executors that imported the driver's snapshot: an update
    committed while they read did not reach them."""
    assert child_report["database"] == {"rows": 40, "saw_the_change": False, "partitions": 2}


def test_the_versions_the_cluster_wrote_are_objects_of_the_bucket(bucket, child_report):
    keys = bucket.keys("lake")
    assert any(key.startswith("cluster/_attempts/") and key.endswith(".parquet") for key in keys)
    assert any(key.startswith("cluster/_tables/sales/clients/metadata/") for key in keys)
    assert child_report["verify"] == 0
