"""Engines read the lake through Custody's Iceberg REST catalog (`custody serve`, at /iceberg): each
table load is a read decision for the token's user, recorded with the engine that asked, and Spark,
PyIceberg and DuckDB each read a tagged version exactly as `custody read` gives it.

One home, with the demo's versions made by bob, and one `custody serve` on it serve every test."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
import requests
import yaml
from itsdangerous import URLSafeTimedSerializer
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError

from governance.access.reads import read_table
from governance.api import Custody
from governance.catalog import Catalog, make_engine
from governance.catalog.models import VersionRow
from governance.cli import run
from governance.config import Settings
from governance.demo import demo_password
from governance.lake import open_lake
from governance.zones import Lake
from tests.conftest import DEMO_SPECS, land_demo, plain_environ, without_approval
from tests.dagster_servers import client, start_service, stop, token
from tests.helpers import duckdb_with_iceberg, edit_spec, expire_newest_token, last_seq, reads_since

pytestmark = pytest.mark.xdist_group("rest-catalog")


@dataclass(frozen=True)
class Served:
    url: str
    settings: Settings
    lake: Lake
    catalog: Catalog
    versions: dict[str, VersionRow]

    @property
    def iceberg(self) -> str:
        return f"{self.url}/iceberg"

    def bearer(self, user: str) -> str:
        return token(f"{self.url}/api/v1", user)["Authorization"].removeprefix("Bearer ")

    def rest(self, user: str) -> RestCatalog:
        """The catalog as a user opens it with PyIceberg."""
        return RestCatalog("custody", uri=self.iceberg, token=self.bearer(user))

    def rows(self, ref: str) -> list[dict]:
        return rows(read_table(self.lake, self.versions[ref]))

    def entries(self, actor: str, since: int) -> list[dict]:
        return reads_since(self.catalog, actor, since)

    def last_seq(self) -> int:
        return last_seq(self.catalog)


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


@pytest.fixture(scope="module")
def served(spark, demo_specs, tmp_path_factory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("rest-catalog") / "home"
    # A copy of the demo's specs, which a test edits as an owner does.
    specs = Path(shutil.copytree(DEMO_SPECS, home.parent / "specs"))
    settings = without_approval(Settings.under(home, specs=specs))
    engine = make_engine(settings.catalog_url)
    catalog = Catalog(engine, segments=settings.ledger_segments)
    lake = open_lake(settings)
    versions = {row.ref: row for row in land_demo(spark, catalog, lake, demo_specs)}
    server, port = start_service(settings, {**plain_environ(home), "CUSTODY_SPECS": str(specs)}, ui=False)
    yield Served(f"http://127.0.0.1:{port}", settings, lake, catalog, versions)
    stop(server)
    engine.dispose()


def test_pyiceberg_reads_each_tagged_version_as_custody_read_does_and_the_load_is_recorded(served):
    since = served.last_seq()
    table = served.rest("carol").load_table(("sales", "clients"))
    for ref in ("sales/clients@1", "sales/clients@2"):
        tag = f"custody-v{served.versions[ref].number}"
        assert rows(table.scan(snapshot_id=table.snapshot_by_name(tag).snapshot_id).to_arrow()) == served.rows(ref)
    assert rows(table.scan().to_arrow()) == served.rows("sales/clients@2")
    (load,) = served.entries("carol", since)
    assert load["asset"] == "sales/clients"
    assert load["result"] == "allowed"
    assert load["channel"] == "iceberg"
    assert load["table"] == "custody.sales.clients"
    assert load["engine"].startswith("PyIceberg ")
    assert load["current"] == 2


def test_pyiceberg_given_client_credentials_gets_its_own_token_and_reads_as_that_user(served):
    since = served.last_seq()
    catalog = RestCatalog("custody", uri=served.iceberg, credential="carol:carol-demo")
    table = catalog.load_table(("sales", "clients"))
    first = table.snapshot_by_name("custody-v1").snapshot_id
    assert rows(table.scan(snapshot_id=first).to_arrow()) == served.rows("sales/clients@1")
    (load,) = served.entries("carol", since)
    assert (load["result"], load["channel"], load["table"]) == ("allowed", "iceberg", "custody.sales.clients")


def test_a_user_sees_only_the_tables_they_may_read(served):
    carol = served.rest("carol")
    assert carol.list_namespaces() == [("sales",)]
    assert sorted(carol.list_tables("sales")) == [
        ("sales", "clients"),
        ("sales", "names_and_products"),
        ("sales", "product_summary"),
        ("sales", "products"),
    ]
    eve = served.rest("eve")
    assert eve.list_namespaces() == []
    with pytest.raises(Exception, match="holds a table you may read"):
        eve.list_tables("sales")


def test_a_user_without_a_role_is_refused_the_load_and_the_refusal_is_recorded(served):
    since = served.last_seq()
    with pytest.raises(ForbiddenError, match="eve may not read sales/clients"):
        served.rest("eve").load_table(("sales", "clients"))
    (refused,) = served.entries("eve", since)
    assert refused["result"] == "denied"
    assert refused["channel"] == "iceberg"
    assert refused["table"] == "custody.sales.clients"


def test_spark_reads_a_tag_through_the_catalog_and_the_version_it_scanned_is_recorded(spark, served):
    since = served.last_seq()
    session = spark_as(spark, served, "carol")
    found = session.sql("SELECT * FROM engines.sales.clients VERSION AS OF 'custody-v1'").collect()
    assert sorted((row.asDict() for row in found), key=repr) == served.rows("sales/clients@1")
    entries = served.entries("carol", since)
    assert [(e["asset"], e["version"], e.get("via")) for e in entries] == [
        ("sales/clients", None, None),
        ("sales/clients", 1, "metrics"),
    ]
    assert all(e["engine"].startswith("Apache Iceberg") for e in entries)
    assert entries[1]["load"] == entries[0]["load"]


def test_duckdb_reads_a_snapshot_through_the_catalog_and_its_load_is_recorded(served):
    snapshot = served.rest("carol").load_table(("sales", "clients")).snapshot_by_name("custody-v1").snapshot_id
    since = served.last_seq()
    duckdb = duckdb_with_iceberg("httpfs")
    duckdb.execute(f"CREATE SECRET carol (TYPE iceberg, TOKEN '{served.bearer('carol')}')")
    duckdb.execute(f"ATTACH 'custody' AS lake (TYPE iceberg, SECRET carol, ENDPOINT '{served.iceberg}')")
    found = duckdb.execute(f"SELECT * FROM lake.sales.clients AT (VERSION => {snapshot})").to_arrow_table()
    assert rows(found) == served.rows("sales/clients@1")
    loads = served.entries("carol", since)
    assert loads, "no load recorded"
    assert all(entry["engine"].startswith("duckdb/v1.5") for entry in loads)


def test_writes_are_refused_in_the_spec_s_error_shape_and_change_nothing(served):
    headers = {"Authorization": f"Bearer {served.bearer('bob')}"}
    for method, path, body in (
        ("POST", "/v1/custody/namespaces", {"namespace": ["hr"]}),
        ("DELETE", "/v1/custody/namespaces/sales", None),
        ("POST", "/v1/custody/namespaces/sales/tables", {"name": "x", "schema": {"type": "struct", "fields": []}}),
        ("POST", "/v1/custody/namespaces/sales/tables/clients", {"requirements": [], "updates": []}),
        ("DELETE", "/v1/custody/namespaces/sales/tables/clients", None),
        ("POST", "/v1/custody/tables/rename", {"source": {}, "destination": {}}),
    ):
        answer = requests.request(method, f"{served.iceberg}{path}", json=body, headers=headers, timeout=30)
        assert answer.status_code == 406, (path, answer.text)
        error = answer.json()["error"]
        assert error["type"] == "UnsupportedOperationException"
        assert "Custody's ingestion alone writes the lake" in error["message"]
    assert served.rest("bob").load_table(("sales", "clients")).snapshot_by_name("custody-v2") is not None


def test_bad_names_unknown_tables_and_missing_tokens_get_one_clear_error_each(served):
    headers = {"Authorization": f"Bearer {served.bearer('carol')}"}
    for path, status, kind in (
        ("/v1/custody/namespaces/sales/tables/nothing", 404, "NoSuchTableException"),
        ("/v1/custody/namespaces/sa..les/tables/clients", 400, "BadRequestException"),
        ("/v1/custody/namespaces/sales/tables/cl%00ients", 400, "BadRequestException"),
        ("/v1/custody/namespaces/sales%2Fclients/tables/clients", 404, "NoSuchTableException"),
        ("/v1/custody/namespaces/s\u0430les/tables/clients", 400, "BadRequestException"),
        (f"/v1/custody/namespaces/sales/tables/{'c' * 5000}", 400, "BadRequestException"),
        ("/v1/other/namespaces/sales/tables/clients", 404, "NoSuchTableException"),
    ):
        answer = requests.get(f"{served.iceberg}{path}", headers=headers, timeout=30)
        assert answer.status_code == status, (path, answer.text)
        assert answer.json()["error"]["type"] == kind, path
        assert "\n" not in answer.json()["error"]["message"]
    for given in ({}, {"Authorization": "Bearer forged"}):
        answer = requests.get(f"{served.iceberg}/v1/config", headers=given, timeout=30)
        assert answer.status_code == 401
        assert answer.json()["error"]["type"] == "NotAuthorizedException"
    with pytest.raises(NoSuchTableError):
        served.rest("carol").load_table(("sales", "nothing"))


def test_a_scan_report_naming_a_snapshot_of_another_table_is_refused(served):
    products = served.rest("bob").load_table(("sales", "products")).current_snapshot().snapshot_id
    headers = {"Authorization": f"Bearer {served.bearer('carol')}"}
    report = {
        "report-type": "scan-report",
        "table-name": "custody.sales.clients",
        "snapshot-id": products,
        "filter": True,
        "schema-id": 0,
        "projected-field-ids": [],
        "projected-field-names": [],
        "metrics": {},
    }
    answer = requests.post(
        f"{served.iceberg}/v1/custody/namespaces/sales/tables/clients/metrics", json=report, headers=headers, timeout=30
    )
    assert answer.status_code == 400
    assert "is no version of custody.sales.clients" in answer.json()["error"]["message"]


def spark_as(spark, served: Served, user: str, *, credential: bool = False):
    """A Spark session whose `engines` catalog is Custody's, with the user's token, or with their
    name and password as client credentials, for Spark to get its own tokens."""
    session = spark.newSession()
    for key, value in {
        "": "org.apache.iceberg.spark.SparkCatalog",
        ".type": "rest",
        ".uri": served.iceberg,
        **({".credential": f"{user}:{user}-demo"} if credential else {".token": served.bearer(user)}),
        ".cache-enabled": "false",
    }.items():
        session.conf.set(f"spark.sql.catalog.engines{key}", value)
    return session


def test_spark_given_client_credentials_gets_its_own_token_and_reads_as_that_user(spark, served):
    since = served.last_seq()
    session = spark_as(spark, served, "carol", credential=True)
    found = session.sql("SELECT * FROM engines.sales.clients VERSION AS OF 'custody-v1'").collect()
    assert sorted((row.asDict() for row in found), key=repr) == served.rows("sales/clients@1")
    assert {entry["result"] for entry in served.entries("carol", since)} == {"allowed"}


def test_a_grant_revoked_while_a_spark_session_is_open_stops_its_next_load(spark, served):
    session = spark_as(spark, served, "carol")
    assert session.sql("SELECT count(*) AS n FROM engines.sales.products").collect()[0].n > 0
    alice = token(f"{served.url}/api/v1", "alice")
    revoked = requests.delete(f"{served.url}/api/v1/access/sales/products/consumer/carol", headers=alice, timeout=30)
    assert revoked.status_code == 200, revoked.text
    try:
        with pytest.raises(Exception, match="carol may not read sales/products"):
            session.sql("SELECT count(*) FROM engines.sales.products").collect()
    finally:
        granted = requests.put(
            f"{served.url}/api/v1/access/sales/products/consumer", json={"user": "carol"}, headers=alice, timeout=30
        )
        assert granted.status_code == 200, granted.text


def test_a_purged_version_is_gone_from_the_next_load(served):
    carol = served.rest("carol")
    assert carol.load_table(("sales", "product_summary")).snapshot_by_name("custody-v1") is not None
    alice = token(f"{served.url}/api/v1", "alice")
    purged = requests.post(
        f"{served.url}/api/v1/purge", json={"versions": ["sales/product_summary@1"]}, headers=alice, timeout=60
    )
    assert purged.status_code == 200, purged.text
    after = carol.load_table(("sales", "product_summary"))
    assert after.snapshot_by_name("custody-v1") is None
    assert after.current_snapshot() is None


def test_a_token_ended_at_the_service_is_refused_at_the_next_request(served):
    bearer = served.bearer("carol")
    carol = RestCatalog("custody", uri=served.iceberg, token=bearer)
    assert carol.table_exists(("sales", "clients"))
    ended = requests.delete(f"{served.url}/api/v1/tokens/current", headers={"Authorization": f"Bearer {bearer}"})
    assert ended.status_code == 204
    answer = requests.head(
        f"{served.iceberg}/v1/custody/namespaces/sales/tables/clients", headers={"Authorization": f"Bearer {bearer}"}
    )
    assert answer.status_code == 401


def test_existence_checks_and_credentials_answer_a_reader_and_refuse_anyone_else(served):
    carol = {"Authorization": f"Bearer {served.bearer('carol')}"}
    eve = {"Authorization": f"Bearer {served.bearer('eve')}"}
    table = f"{served.iceberg}/v1/custody/namespaces/sales/tables/clients"
    assert requests.head(table, headers=carol, timeout=30).status_code == 204
    assert requests.head(f"{served.iceberg}/v1/custody/namespaces/sales", headers=carol, timeout=30).status_code == 204
    assert requests.get(f"{table}/credentials", headers=carol, timeout=30).json() == {"storage-credentials": []}
    assert requests.head(table, headers=eve, timeout=30).status_code == 403
    refused = requests.get(f"{table}/credentials", headers=eve, timeout=30)
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "ForbiddenException"


def test_a_body_too_large_or_not_json_is_refused_in_the_spec_s_error_shape(served):
    headers = {"Authorization": f"Bearer {served.bearer('carol')}"}
    metrics = f"{served.iceberg}/v1/custody/namespaces/sales/tables/clients/metrics"
    large = requests.post(metrics, data=b"{" + b" " * (5 * 1024 * 1024) + b"}", headers=headers, timeout=60)
    assert large.status_code == 413
    assert large.json()["error"]["code"] == 413
    text = requests.post(metrics, data="report", headers={**headers, "Content-Type": "text/plain"}, timeout=30)
    assert text.status_code == 415
    assert "takes JSON" in text.json()["error"]["message"]


def logged_in(served: Served, tmp_path, user: str) -> None:
    said = client(f"{served.url}/api/v1", tmp_path, "login", user, "--password-stdin", stdin=demo_password(user))
    assert said.returncode == 0, said.stderr


def conf(served: Served, tmp_path, *args: str) -> list[str]:
    said = client(f"{served.url}/api/v1", tmp_path, "tables", "conf", *args)
    assert said.returncode == 0, said.stderr
    return said.stdout.splitlines()


def test_the_spark_conf_the_cli_prints_reads_through_the_catalog_with_no_database_or_lake_key(spark, served, tmp_path):
    logged_in(served, tmp_path, "carol")
    lines = conf(served, tmp_path, "--engine", "spark", "--with-token")
    printed = "\n".join(lines)
    assert "jdbc" not in printed
    assert str(served.settings.home) not in printed
    session = spark.newSession()
    for line in lines:
        key, _, value = line.partition(" ")
        if not key.startswith("#") and key != "spark.jars":  # the shared session started with Iceberg's runtime
            session.conf.set(key, value)
    found = session.sql("SELECT * FROM custody.sales.clients VERSION AS OF 'custody-v2'").collect()
    assert sorted((row.asDict() for row in found), key=repr) == served.rows("sales/clients@2")
    placeholder = conf(served, tmp_path, "--engine", "spark")
    assert placeholder[-1].startswith("# spark.sql.catalog.custody.token <your token")


def test_the_pyiceberg_and_duckdb_confs_the_cli_prints_read_through_the_catalog(served, tmp_path):
    logged_in(served, tmp_path, "carol")
    properties = yaml.safe_load("\n".join(conf(served, tmp_path, "--engine", "pyiceberg", "--with-token")))
    table = load_catalog("custody", **properties["catalog"]["custody"]).load_table(("sales", "products"))
    assert rows(table.scan().to_arrow()) == served.rows("sales/products@1")
    duckdb = duckdb_with_iceberg("httpfs")
    for statement in conf(served, tmp_path, "--engine", "duckdb", "--with-token"):
        duckdb.execute(statement)
    assert rows(duckdb.execute("SELECT * FROM custody.sales.products").to_arrow_table()) == served.rows(
        "sales/products@1"
    )


def test_without_the_service_s_address_the_cli_says_how_engines_read_and_the_operators_recipe_remains(
    served, monkeypatch, capsys
):
    for name, value in plain_environ(served.settings.home).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CUSTODY_URL", raising=False)
    assert run(["tables", "conf"]) == 1
    assert "CUSTODY_URL is not set" in capsys.readouterr().err
    assert run(["tables", "spark-conf", "--jdbc"]) == 0
    assert "spark.sql.catalog.custody.type jdbc" in capsys.readouterr().out


def test_an_auditor_lists_everyone_who_read_a_version_or_one_built_from_it_through_any_channel(spark, served, tmp_path):
    carol = {"Authorization": f"Bearer {served.bearer('carol')}"}
    through_api = requests.get(f"{served.url}/api/v1/assets/sales/clients/rows?version=1", headers=carol, timeout=30)
    assert through_api.status_code == 200
    spark_as(spark, served, "carol").sql("SELECT * FROM engines.sales.clients VERSION AS OF 'custody-v1'").collect()
    served.rest("bob").load_table(("sales", "names_and_products"))  # built from clients@1, its current version

    logged_in(served, tmp_path, "dave")
    said = client(f"{served.url}/api/v1", tmp_path, "impact", "sales/clients@1", "--readers", "--json")
    assert said.returncode == 0, said.stderr
    found = {
        (r["version"], r["user"], r["how"], r["channel"], (r["engine"] or "").split(" ")[0])
        for r in json.loads(said.stdout)
    }
    assert ("sales/clients@1", "carol", "read", "api", "") in found
    assert ("sales/clients@1", "carol", "read", "iceberg", "Apache") in found
    assert ("sales/names_and_products@1", "bob", "loaded", "iceberg", "PyIceberg") in found
    table = client(f"{served.url}/api/v1", tmp_path, "impact", "sales/clients@1", "--readers")
    assert "sales/names_and_products@1" in table.stdout
    assert "which version was read is not known" in " ".join(table.stdout.split())

    logged_in(served, tmp_path, "carol")
    refused = client(f"{served.url}/api/v1", tmp_path, "impact", "sales/clients@1", "--readers")
    assert refused.returncode == 3
    assert "may not read the ledger" in refused.stderr


def test_python_s_custody_lists_the_readers_of_a_version_for_an_auditor(served):
    served.rest("carol").load_table(("sales", "products"))
    custody = Custody(served.settings)
    frame = custody.readers("sales/products@1", as_user="dave", password=demo_password("dave"))
    assert list(frame.columns) == ["version", "user", "how", "channel", "engine", "at", "seq"]
    assert ((frame["user"] == "carol") & (frame["channel"] == "iceberg")).any()


def test_an_expired_token_and_one_signed_with_another_key_are_refused(served):
    bearer = served.bearer("carol")
    newest = expire_newest_token(served.catalog)
    forged = URLSafeTimedSerializer(b"another service's key, 32 bytes long", salt="custody-token").dumps(newest)
    for given, said in ((bearer, "this token has expired"), (forged, "was not made by this service")):
        answer = requests.get(
            f"{served.iceberg}/v1/custody/namespaces/sales/tables/clients",
            headers={"Authorization": f"Bearer {given}"},
            timeout=30,
        )
        assert answer.status_code == 401
        assert said in answer.json()["error"]["message"]


def test_an_owner_s_edit_of_a_role_s_group_counts_for_the_next_loads_within_seconds(served):
    carol = served.rest("carol")
    carol.load_table(("sales", "product_summary"))
    edit_spec(served.settings.specs / "sales", "product_summary", "consumer: sales-consumers", "consumer: hr-consumers")
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                carol.load_table(("sales", "product_summary"))
            except ForbiddenError as refused:
                assert "product_summary: it needs consumer (hr-consumers)" in str(refused)
                break
            assert time.monotonic() < deadline, "the edit did not count"
            time.sleep(0.2)
    finally:
        edit_spec(
            served.settings.specs / "sales", "product_summary", "consumer: hr-consumers", "consumer: sales-consumers"
        )
