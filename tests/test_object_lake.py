"""A lake in an S3-compatible object store (moto's server on loopback): the same versions, reads,
checks, purge and repair as a folder lake, with the catalog's row as the commit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from sqlmodel import select

from governance import ledger
from governance.access.reads import read_table
from governance.api import PASSWORD_VARIABLE
from governance.catalog import Catalog, make_engine
from governance.catalog.models import VersionRow
from governance.cli import run
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.errors import EnvironmentProblem, IntegrityError, InvalidInput, ValidationFailed
from governance.ingest import ingest
from governance.lake import TABLES_FOLDER, open_lake
from governance.lake.iceberg import tag_of
from governance.lake.objects import ObjectLake, hadoop_conf, pyiceberg_properties
from governance.repair import damaged_versions, repair
from governance.retention.purge import purge
from governance.runs import RunRequest
from governance.versions import read_dataframe, require_files
from governance.zones import AssetKey, Lake, VersionRef
from tests.conftest import DEMO_SPECS, drop, plain_environ, run_pipeline, without_approval
from tests.helpers import cli, duckdb_with_iceberg, execute, recorded
from tests.ports import free_port, listening
from tests.s3_server import CREDENTIALS, S3Server, running_s3
from tests.test_crash import kill_at, people_csv

BUCKET = "lake"
PEOPLE = AssetKey("t", "people")
BOB = RunRequest(requested_by="bob", run_id="run-s3", code_version="code-1")


@pytest.fixture(scope="module")
def store(spark) -> Iterator[S3Server]:
    """The S3 server, its bucket, and the shared Spark session pointed at it. The session's JVM
    started before these credentials were in the environment, so its S3A settings carry them."""
    with pytest.MonkeyPatch.context() as patch, running_s3() as server:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        server.client().create_bucket(Bucket=BUCKET)
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in hadoop_conf(s3_settings(Path("/unused"), server.endpoint, "x")).items():
            hadoop.set(key, value)
        hadoop.set("fs.s3a.access.key", CREDENTIALS["AWS_ACCESS_KEY_ID"])
        hadoop.set("fs.s3a.secret.key", CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        yield server


def s3_settings(home: Path, endpoint: str, prefix: str) -> Settings:
    settings = Settings.from_env(
        {
            "CUSTODY_HOME": str(home),
            "CUSTODY_LAKE": f"s3a://{BUCKET}/{prefix}",
            "CUSTODY_S3_ENDPOINT": endpoint,
            "CUSTODY_S3_REGION": "us-east-1",
        }
    )
    return without_approval(replace(settings, specs=DEMO_SPECS.absolute()))


@dataclass(frozen=True)
class Home:
    settings: Settings
    catalog: Catalog
    lake: ObjectLake
    versions: dict[str, VersionRow]


def open_home(settings: Settings) -> Home:
    lake = open_lake(settings)
    assert isinstance(lake, ObjectLake)
    return Home(settings, Catalog(make_engine(settings.catalog_url), segments=settings.ledger_segments), lake, {})


def committed(home: Home) -> dict[str, VersionRow]:
    with home.catalog.session() as session:
        return {row.ref: row for row in session.exec(select(VersionRow))}


@pytest.fixture(scope="module")
def demo(spark, store, tmp_path_factory) -> Iterator[Home]:
    """`custody demo` run once with its lake in the bucket, as a user runs it; the environment
    stays the home's for the module's other commands."""
    settings = s3_settings(tmp_path_factory.mktemp("s3") / "home", store.endpoint, "demo")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            **plain_environ(settings.home),
            "CUSTODY_CATALOG_URL": settings.catalog_url,
            "CUSTODY_LAKE": settings.lake_url,
            "CUSTODY_S3_ENDPOINT": store.endpoint,
            "CUSTODY_S3_REGION": "us-east-1",
        }.items():
            patch.setenv(name, value)
        code = run(["demo"])
        assert code == 0
        home = open_home(settings)
        yield replace(home, versions=committed(home))


@pytest.fixture
def home(store, tmp_path) -> Home:
    """A lake of its own under a prefix of its own, for a test that changes it."""
    return open_home(s3_settings(tmp_path / "home", store.endpoint, tmp_path.name))


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


def test_every_object_of_a_version_is_under_its_attempt_and_in_its_manifest_with_its_sha256(demo, store):
    row = demo.versions["sales/clients@2"]
    assert row.path == f"_attempts/{row.attempt_id}/data"
    manifest = demo.lake.read_manifest(demo.lake.at(row.path))
    listed = {f"demo/{row.path}/{entry['path']}": entry["sha256"] for entry in manifest["files"]}
    assert set(store.keys(BUCKET, f"demo/{row.path}/")) == {*listed, f"demo/{row.path}/_manifest.json"}
    for key, sha256 in listed.items():
        assert demo.lake.sha256(demo.lake.at(key.removeprefix("demo/"))) == sha256
    assert manifest["data_version"] == row.data_version and manifest["version"] == 2


def test_the_same_rows_have_the_same_data_version_as_in_a_folder_lake(spark, demo, demo_specs, tmp_path):
    settings = without_approval(Settings.under(tmp_path / "home", specs=DEMO_SPECS))
    catalog = Catalog(make_engine(settings.catalog_url), segments=settings.ledger_segments)
    run_pipeline(spark, catalog, Lake(settings.lake), demo_specs)
    with catalog.session() as session:
        in_a_folder = {row.ref: row.data_version for row in session.exec(select(VersionRow))}
    assert in_a_folder == {ref: row.data_version for ref, row in demo.versions.items() if ref in in_a_folder}


def test_an_integration_version_is_made_from_the_versions_in_the_bucket(demo):
    summary = demo.versions["sales/product_summary@1"]
    made_from = demo.catalog.input_ids(summary.stored_id)
    assert [row.ref for row in demo.versions.values() if row.stored_id in made_from] == ["sales/names_and_products@1"]
    assert summary.rows > 0 and summary.column_lineage


def test_custody_read_and_spark_read_a_version_from_the_bucket(spark, demo):
    row = demo.versions["sales/clients@1"]
    arrow = rows(read_table(demo.lake, row))
    assert len(arrow) == row.rows
    assert sorted((r.asDict() for r in read_dataframe(spark, demo.lake, row).collect()), key=repr) == arrow


def tables_of(home: Home) -> SqlCatalog:
    """The lake's Iceberg tables, as PyIceberg opens them from outside Custody."""
    return SqlCatalog(
        "custody",
        uri=home.settings.catalog_url,
        warehouse=f"s3://{BUCKET}/demo/{TABLES_FOLDER}",
        **pyiceberg_properties(home.settings),
    )


def test_pyiceberg_reads_each_tag_from_the_bucket_as_custody_read_does(demo):
    for row in demo.versions.values():
        table = tables_of(demo).load_table(tuple(row.asset_key.split("/")))
        assert table.location().startswith(f"s3://{BUCKET}/demo/{TABLES_FOLDER}/")
        snapshot = table.snapshot_by_name(tag_of(row.number))
        assert rows(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == rows(read_table(demo.lake, row))


def test_duckdb_reads_each_tag_from_the_bucket_as_custody_read_does(demo):
    endpoint = urlsplit(demo.settings.s3_endpoint)
    duckdb = duckdb_with_iceberg("httpfs")
    # DuckDB's own settings for the store (its secret), as a reader outside Custody gives them.
    duckdb.execute(
        f"CREATE SECRET lake (TYPE s3, KEY_ID '{CREDENTIALS['AWS_ACCESS_KEY_ID']}', "
        f"SECRET '{CREDENTIALS['AWS_SECRET_ACCESS_KEY']}', REGION 'us-east-1', ENDPOINT '{endpoint.netloc}', "
        "URL_STYLE 'path', USE_SSL false)"
    )
    for row in demo.versions.values():
        table = tables_of(demo).load_table(tuple(row.asset_key.split("/")))
        snapshot = table.snapshot_by_name(tag_of(row.number)).snapshot_id
        found = duckdb.execute(
            "SELECT * FROM iceberg_scan(?, snapshot_from_id = ?)", [table.metadata_location, snapshot]
        ).to_arrow_table()
        assert rows(found) == rows(read_table(demo.lake, row)), row.ref


def test_bad_rows_are_quarantined_in_the_bucket_and_the_counts_add_up(spark, home, test_specs, store):
    drop(home.lake, "t/people", "b1", {"people.csv": b"id,name,score\n1,ann,1.5\nx,bob,2\n3,cy,oops\n4,di,4\n"})
    row = ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id="b1")
    assert (row.rows, row.rows_quarantined) == (2, 2)
    quarantined = home.lake.read_manifest(home.lake.at(row.quarantine_path))
    assert quarantined["rows"] == 2 and all(
        store.keys(BUCKET, f"{home.lake.at(row.quarantine_path)}/".split("/", 1)[1])
    )


def test_a_batch_refused_for_its_bad_rows_leaves_no_object(spark, home, test_specs, store):
    spec = test_specs[PEOPLE]
    strict = replace(spec, body=spec.body.model_copy(update={"bad_rows": "fail"}))
    drop(home.lake, "t/people", "b1", {"people.csv": b"id,name,score\n1,ann,1.5\nx,bob,2\n"})
    with pytest.raises(ValidationFailed, match="people.csv"):
        ingest(spark, home.catalog, home.lake, strict, BOB, batch_id="b1")
    assert store.keys(BUCKET, home.lake.base.relative_to(BUCKET).as_posix()) == []
    assert home.catalog.versions(PEOPLE) == []


def test_purge_deletes_the_version_objects_and_withdraws_its_tag(spark, home, test_specs, store):
    for batch, rows_in in (("b1", 5), ("b2", 6)):
        drop(home.lake, "t/people", batch, {"people.csv": people_csv(home.settings.home.parent / batch, rows_in)})
        ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id=batch)
    first = home.catalog.versions(PEOPLE)[0]
    prefix = home.lake.at(first.path).relative_to(BUCKET).as_posix()
    assert store.keys(BUCKET, prefix)
    purge(home.catalog, home.lake, {}, "admin", explicit=[VersionRef(PEOPLE, 1)])
    assert store.keys(BUCKET, prefix) == []
    assert home.lake.tables is not None and sorted(home.lake.tables.tables.tags(PEOPLE)) == [2]
    attempt = prefix.removesuffix("/data")
    assert every_key(store, attempt) == [], "S3A's folder markers of the purged version are gone too"


def every_key(store: S3Server, prefix: str) -> list[str]:
    """Every object under `prefix`, S3A's empty folder markers (`…/`) among them."""
    pages = store.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def test_repair_removes_the_folder_markers_an_earlier_purge_left(spark, home, test_specs, store):
    drop(home.lake, "t/people", "b1", {"people.csv": people_csv(home.settings.home.parent / "b1", 5)})
    row = ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id="b1")
    attempt = home.lake.at(row.path).parent.relative_to(BUCKET).as_posix()
    # As an earlier release's purge left it: the version purged, its objects deleted, a marker kept.
    execute(home.catalog, f"UPDATE version SET status = 'purged' WHERE id = {row.id}")
    for key in [key for key in every_key(store, attempt) if not key.endswith("/")]:
        store.client().delete_object(Bucket=BUCKET, Key=key)
    store.client().put_object(Bucket=BUCKET, Key=f"{attempt}/", Body=b"")

    report = repair(home.catalog, home.lake, thorough=True)

    assert f"s3a://{BUCKET}/{attempt}" in report.removed
    assert every_key(store, attempt) == []


def test_an_altered_object_fails_the_integrity_check_naming_it(spark, home, test_specs):
    drop(home.lake, "t/people", "b1", {"people.csv": people_csv(home.settings.home.parent / "p.csv", 5)})
    row = ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id="b1")
    manifest = home.lake.read_manifest(home.lake.at(row.path))
    altered = home.lake.at(row.path) / manifest["files"][0]["path"]
    with home.lake.fs.open_output_stream(str(altered)) as stream:
        stream.write(b"not the bytes that were sealed")
    assert damaged_versions(home.catalog, home.lake) == [
        f"t/people@1: s3a://{altered} is not the size its manifest says"
    ]


def test_an_object_deleted_under_a_version_is_named_by_the_integrity_check(spark, home, test_specs):
    drop(home.lake, "t/people", "b1", {"people.csv": people_csv(home.settings.home.parent / "p.csv", 5)})
    row = ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id="b1")
    gone = home.lake.at(row.path) / home.lake.read_manifest(home.lake.at(row.path))["files"][0]["path"]
    home.lake.fs.delete_file(str(gone))
    assert damaged_versions(home.catalog, home.lake) == [f"t/people@1: missing s3a://{gone}"]


def test_a_version_whose_data_objects_are_all_gone_is_refused_though_its_manifest_stays(spark, home, test_specs):
    drop(home.lake, "t/people", "b1", {"people.csv": people_csv(home.settings.home.parent / "p.csv", 5)})
    row = ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id="b1")
    folder = home.lake.at(row.path)
    require_files(home.lake, [row])
    for entry in home.lake.read_manifest(folder)["files"]:
        home.lake.fs.delete_file(str(folder / entry["path"]))
    assert home.lake.read_manifest(folder) is not None
    with pytest.raises(IntegrityError, match=r"t/people@1 holds 5 rows, but .* has none of its files"):
        require_files(home.lake, [row])
    with pytest.raises(IntegrityError, match=r"t/people@1 cannot be read: missing s3a://"):
        read_table(home.lake, row)


@pytest.mark.parametrize("point", ["spark-write", "during-commit"])
def test_a_killed_ingestion_leaves_no_version_and_repair_removes_its_objects(
    spark, home, test_specs, store, tmp_path, point, monkeypatch
):
    for name, value in {
        "CUSTODY_CATALOG_URL": home.settings.catalog_url,
        "CUSTODY_LAKE": home.settings.lake_url,
        "CUSTODY_S3_ENDPOINT": store.endpoint,
        "CUSTODY_S3_REGION": "us-east-1",
        **CREDENTIALS,
    }.items():
        monkeypatch.setenv(name, value)
    rows_in = 200_000 if point == "spark-write" else 2_000
    drop(home.lake, "t/people", "b1", {"people.csv": people_csv(tmp_path / "people.csv", rows_in)})

    kill_at(home.settings.home, point, "b1")

    attempts = home.lake.base.relative_to(BUCKET).as_posix() + "/_attempts/"
    assert store.keys(BUCKET, attempts), "the killed attempt left objects behind"
    assert home.catalog.versions(PEOPLE) == []
    report = repair(home.catalog, home.lake)
    assert len(report.rolled_back) == 1 and report.removed
    assert store.keys(BUCKET, attempts) == [] and home.lake.staging_attempts() == []
    resumed = ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id="b1")
    assert resumed.number == 1 and resumed.rows == rows_in


def test_repair_keeps_the_objects_of_committed_versions(spark, home, test_specs, store):
    drop(home.lake, "t/people", "b1", {"people.csv": people_csv(home.settings.home.parent / "p.csv", 5)})
    row = ingest(spark, home.catalog, home.lake, test_specs[PEOPLE], BOB, batch_id="b1")
    before = store.keys(BUCKET)
    report = repair(home.catalog, home.lake, thorough=True, verify_files=True)
    assert (report.removed, report.damaged) == ([], []) and store.keys(BUCKET) == before
    assert rows(read_table(home.lake, row))


def stage_object(home: Home, attempt_id: str) -> None:
    with home.lake.fs.open_output_stream(f"{home.lake.base}/_attempts/{attempt_id}/data/part-0.parquet") as out:
        out.write(b"staged")


@pytest.mark.parametrize("thorough", [False, True])
def test_repair_leaves_the_objects_of_an_attempt_on_another_host_or_of_another_catalog(home, store, thorough):
    elsewhere, unknown = "a" * 32, "b" * 32
    home.catalog.start_attempt(elsewhere, PEOPLE, "run-elsewhere", "bob")  # its lock is on its own host
    for attempt_id in (elsewhere, unknown):
        stage_object(home, attempt_id)
    report = repair(home.catalog, home.lake, thorough=thorough)
    assert (report.rolled_back, report.removed) == ([], [])
    prefix = home.lake.base.relative_to(BUCKET).as_posix()
    assert store.keys(BUCKET, f"{prefix}/_attempts/") == [
        f"{prefix}/_attempts/{attempt_id}/data/part-0.parquet" for attempt_id in (elsewhere, unknown)
    ]


def test_custody_repair_removes_what_a_failed_attempt_left_in_the_bucket(home, store):
    failed = "c" * 32
    home.catalog.start_attempt(failed, PEOPLE, "run-failed", "bob")
    with home.catalog.session() as session:
        home.catalog.finish_attempt(session, failed, "failed", error="the store went away")
    stage_object(home, failed)
    assert repair(home.catalog, home.lake).removed == []  # before an ingestion: the bucket is not listed
    assert repair(home.catalog, home.lake, thorough=True).removed == [f"s3a://{home.lake.base}/_attempts/{failed}"]
    assert store.keys(BUCKET, f"{home.lake.base.relative_to(BUCKET)}/_attempts/") == []


def test_spark_gets_the_s3a_jars_beside_a_named_jdbc_driver(tmp_path):
    driver = tmp_path / "postgresql.jar"
    driver.write_bytes(b"jar")
    settings = replace(s3_settings(tmp_path, "http://127.0.0.1:9", "x"), jdbc_driver_at=driver)
    names = [Path(jar).name for jar in settings.spark_jars()]
    assert "postgresql.jar" in names and any(name.startswith("hadoop-aws-") for name in names)


def test_a_bucket_that_does_not_exist_is_named(store, tmp_path):
    settings = s3_settings(tmp_path, store.endpoint, "x")
    with pytest.raises(EnvironmentProblem, match="the bucket 'nowhere' does not exist"):
        open_lake(replace(settings, lake_url="s3a://nowhere/x"))


def test_credentials_the_store_refuses_are_named_without_the_secret(tmp_path, monkeypatch):
    # moto lets the first request through (the bucket's creation), then checks every signature.
    with running_s3({"INITIAL_NO_AUTH_ACTION_COUNT": "1"}) as server:
        server.client().create_bucket(Bucket=BUCKET)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNTOTHESTORE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        with pytest.raises(EnvironmentProblem, match="refused the credentials for bucket 'lake'") as refused:
            open_lake(s3_settings(tmp_path, server.endpoint, "x"))
    assert "not-the-secret" not in str(refused.value)


def test_an_endpoint_holding_credentials_is_refused_without_them(tmp_path):
    with pytest.raises(EnvironmentProblem, match="CUSTODY_S3_ENDPOINT: credentials may not be part") as refused:
        open_lake(s3_settings(tmp_path, "http://AKIAEXAMPLE:s3cret@127.0.0.1:9", "x"))
    assert "s3cret" not in str(refused.value) and "AKIAEXAMPLE" not in str(refused.value)


def test_an_endpoint_that_is_no_object_store_is_named_as_such(tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: listening(port)), "the HTTP server never listened"
        with pytest.raises(EnvironmentProblem) as refused:
            open_lake(s3_settings(tmp_path / "home", f"http://127.0.0.1:{port}", "x"))
    finally:
        server.kill()
        server.wait()
    assert str(refused.value) == (
        f"CUSTODY_S3_ENDPOINT: the server at http://127.0.0.1:{port} does not answer as an S3 object store does "
        "(HTTP 404, text/html)"
    )


def wait_until(check, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_endpoint_that_is_down_is_named(tmp_path):
    settings = s3_settings(tmp_path, "http://127.0.0.1:9", "x")
    with pytest.raises(EnvironmentProblem, match=r"cannot reach the object store at http://127.0.0.1:9"):
        open_lake(settings)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("gs://bucket/lake", r"CUSTODY_LAKE: the scheme gs:// is not supported; .*, or an S3 bucket as s3a://"),
        ("s3a://Bad_Bucket/lake", r"CUSTODY_LAKE: Bad_Bucket is not an S3 bucket's name"),
        ("s3a://bucket/a/../b", r"the prefix may not hold '\.' or '\.\.'"),
    ],
)
def test_a_lake_uri_custody_cannot_use_is_refused_naming_the_setting(value, message):
    with pytest.raises(InvalidInput, match=message):
        Settings.from_env({"CUSTODY_HOME": "/tmp/h", "CUSTODY_LAKE": value})


def test_the_lake_s3_and_s3a_uris_name_the_same_lake():
    settings = Settings.from_env({"CUSTODY_HOME": "/tmp/h", "CUSTODY_LAKE": "s3://bucket/a/b/"})
    assert settings.lake_url == "s3a://bucket/a/b" and settings.lake == Path("/tmp/h/lake")


def test_an_aws_profile_alone_reaches_spark_as_it_reaches_custody(store, tmp_path):
    profiles = tmp_path / "credentials"
    profiles.write_text(
        "[custody-lake]\n"
        f"aws_access_key_id = {CREDENTIALS['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {CREDENTIALS['AWS_SECRET_ACCESS_KEY']}\n"
    )
    settings = s3_settings(tmp_path / "home", store.endpoint, tmp_path.name)
    drop_demo_batches(open_lake(settings))
    done = custody_in_process_of_its_own(
        settings,
        store.endpoint,
        "ingest",
        "sales/products",
        "--as",
        "bob",
        AWS_PROFILE="custody-lake",
        AWS_SHARED_CREDENTIALS_FILE=str(profiles),
    )

    assert done.returncode == 0, done.stderr
    assert "committed sales/products@1" in done.stdout


def custody_in_process_of_its_own(settings: Settings, endpoint: str, *args: str, **environ: str):
    """`custody ARGS` for the home of `settings`, in a process of its own, with `environ`'s
    credentials alone, as a user at a shell runs it."""
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    return subprocess.run(
        [str(Path(sys.executable).with_name("custody")), *args],
        env={
            **{name: value for name, value in os.environ.items() if name not in keys},
            **plain_environ(settings.home),
            "CUSTODY_LAKE": settings.lake_url,
            "CUSTODY_S3_ENDPOINT": endpoint,
            "CUSTODY_S3_REGION": "us-east-1",
            PASSWORD_VARIABLE: demo_password("bob"),
            **environ,
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


READ_ONLY_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:Get*", "s3:List*", "s3:Head*"], "Resource": "*"}],
    }
)


def test_keys_that_may_only_read_fail_the_ingestion_in_one_line_naming_the_object_and_the_refusal(tmp_path):
    # moto answers its first requests unsigned (the bucket, the user and its keys), then checks
    # every request's signature against the user's policy.
    with running_s3({"INITIAL_NO_AUTH_ACTION_COUNT": "5"}) as server:
        server.client().create_bucket(Bucket=BUCKET)
        iam = server.client("iam")
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="read-only", PolicyDocument=READ_ONLY_POLICY)
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        settings = s3_settings(tmp_path / "home", server.endpoint, "ro")
        drop_demo_batches(Lake(settings.lake))

        done = custody_in_process_of_its_own(
            settings,
            server.endpoint,
            "ingest",
            "sales/products",
            "--as",
            "bob",
            AWS_ACCESS_KEY_ID=key["AccessKeyId"],
            AWS_SECRET_ACCESS_KEY=key["SecretAccessKey"],
        )

    assert done.returncode == 1
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: sales/products: the object store refused writing s3a://lake/ro/_attempts/"), (
        done.stderr
    )
    assert line.endswith("access denied: these credentials may not write there")
    assert key["SecretAccessKey"] not in done.stderr
    [failed] = recorded(Catalog.from_url(settings.catalog_url), action=ledger.Action.INGESTION_FAILED)
    assert failed["details"]["error"] == line.removeprefix("error: sales/products: ")


def test_a_store_that_stops_answering_mid_write_fails_the_ingestion_within_its_timeout(tmp_path):
    with running_s3() as server:
        server.client().create_bucket(Bucket=BUCKET)
        settings = s3_settings(tmp_path / "home", server.endpoint, "stops")
        products = "product_id,product_name,category,unit_price\n" + "".join(
            f"p{i},product number {i} of many,home,{i % 100}.50\n" for i in range(300_000)
        )
        drop(Lake(settings.lake), "sales/products", "big", {"products.csv": products.encode()})
        ingesting = subprocess.Popen(
            [str(Path(sys.executable).with_name("custody")), "ingest", "sales/products", "--as", "bob"],
            env={
                **os.environ,
                **plain_environ(settings.home),
                **CREDENTIALS,
                "CUSTODY_LAKE": settings.lake_url,
                "CUSTODY_S3_ENDPOINT": server.endpoint,
                "CUSTODY_S3_TIMEOUT": "15",  # S3A takes no less
                PASSWORD_VARIABLE: demo_password("bob"),
            },
            stderr=subprocess.PIPE,
            text=True,
        )
        assert ingesting.stderr is not None
        said = []
        for line in ingesting.stderr:
            said.append(line)
            if "writing Parquet" in line:
                os.kill(server.pid, signal.SIGSTOP)
                stopped = time.monotonic()
                break
        said.extend(ingesting.stderr)
        ingesting.wait(timeout=600)
        waited = time.monotonic() - stopped

    assert ingesting.returncode == 1
    [line] = [line for line in said if line.startswith("error:")]
    assert "sales/products: the object store did not answer in time writing s3a://lake/stops/_attempts/" in line, line
    assert line.rstrip().endswith("(CUSTODY_S3_TIMEOUT: per request)")
    assert waited < 120, f"it waited {waited:.0f} s"


def test_no_credential_reaches_the_settings_spark_gets(store, tmp_path):
    conf = hadoop_conf(s3_settings(tmp_path, store.endpoint, "x"))
    assert not any(CREDENTIALS["AWS_SECRET_ACCESS_KEY"] in value for value in conf.values())
    assert not any("key" in name for name in conf)


def test_the_demo_runs_through_dagster_with_its_lake_in_the_bucket(demo, store, capsys):
    assert [ref for ref in demo.versions if ref.startswith("sales/product_summary")] == [
        "sales/product_summary@1",
        "sales/product_summary@2",
    ]
    assert all(row.path.startswith("_attempts/") for row in demo.versions.values())
    code, out, err = cli(capsys, "read", "sales/clients@1", "--as", "carol", "--json")
    assert code == 0 and len(json.loads(out)["rows"]) == demo.versions["sales/clients@1"].rows, err
    code, out, err = cli(capsys, "repair", "--verify")
    assert code == 0 and "nothing to repair" in out, out + err
    code, out, _ = cli(capsys, "ledger", "verify")
    assert code == 5 and "chain intact" in out  # without CUSTODY_LEDGER_KEY the checkpoints are not verified
