"""On a lake in an object store, engines hold none of its keys: Custody's Iceberg catalog signs each
request an engine makes to the store (remote signing), once it has decided that the user may read
what the request reads, a file of a committed version of that table or its metadata; the version
whose files were signed is recorded as read, once per load. An engine that does not sign (DuckDB)
is vended short-lived credentials of a read role, for that table's files alone.

The store is moto's, checking every request's signature against its IAM users and roles: only the
service holds a user's keys. moto does not evaluate STS session policies, so each asset has a read
role of its own, allowed that asset's objects. One home, with the demo's versions made by bob, and
one `custody serve` on it serve every test."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest
import requests
from botocore.exceptions import ClientError
from pyiceberg.catalog.rest import RestCatalog

from governance.access.reads import read_table
from governance.catalog import Catalog, make_engine
from governance.catalog.models import VersionRow
from governance.lake import open_lake
from governance.lake.objects import ObjectLake, hadoop_conf
from tests.conftest import land_demo, plain_environ
from tests.dagster_servers import start_service, stop, token
from tests.helpers import duckdb_with_iceberg, last_seq, reads_since
from tests.s3_server import S3Server, running_s3
from tests.test_object_lake import BUCKET, s3_settings

pytestmark = pytest.mark.xdist_group("rest-catalog")
# moto lets these first requests through unsigned (the bucket, the service's user, its policy and
# keys), then checks every request's signature.
SETUP_REQUESTS = 4
EVERYTHING = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
# moto's account; a read role per asset.
READ_ROLE = "arn:aws:iam::123456789012:role/read-{domain}-{name}"
SIGNING = {"header.X-Iceberg-Access-Delegation": "remote-signing"}


@dataclass(frozen=True)
class Served:
    url: str
    catalog: Catalog
    # Each version's rows as `custody read` gives them, and a path-style URI of one of its Parquet
    # files, as an engine asks for it: read while this process held the service's keys.
    expected: dict[str, list[dict]]
    files: dict[str, str]
    store: S3Server

    @property
    def endpoint(self) -> str:
        return self.store.endpoint

    @property
    def iceberg(self) -> str:
        return f"{self.url}/iceberg"

    def bearer(self, user: str) -> str:
        return token(f"{self.url}/api/v1", user)["Authorization"].removeprefix("Bearer ")

    def rows(self, ref: str) -> list[dict]:
        return self.expected[ref]

    def entries(self, actor: str, since: int) -> list[dict]:
        return reads_since(self.catalog, actor, since)

    def last_seq(self) -> int:
        return last_seq(self.catalog)

    def sign(self, user: str, table: str, method: str, uri: str) -> requests.Response:
        return requests.post(
            f"{self.iceberg}/v1/custody/namespaces/sales/tables/{table}/sign",
            json={"region": "us-east-1", "uri": uri, "method": method, "headers": {}},
            headers={"Authorization": f"Bearer {self.bearer(user)}"},
            timeout=30,
        )

    def file_of(self, ref: str) -> str:
        return self.files[ref]


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


@pytest.fixture(scope="module")
def served(spark, demo_specs, tmp_path_factory) -> Iterator[Served]:
    with running_s3({"INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}) as store:
        store.client().create_bucket(Bucket=BUCKET)
        iam = store.client("iam")
        iam.create_user(UserName="custody")
        iam.put_user_policy(UserName="custody", PolicyName="everything", PolicyDocument=EVERYTHING)
        created = iam.create_access_key(UserName="custody")["AccessKey"]
        keys = {
            "AWS_ACCESS_KEY_ID": created["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": created["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        settings = s3_settings(tmp_path_factory.mktemp("rest-s3") / "home", store.endpoint, "rest")
        environ = {
            **plain_environ(settings.home),
            "CUSTODY_LAKE": settings.lake_url,
            "CUSTODY_S3_ENDPOINT": store.endpoint,
            "CUSTODY_S3_REGION": "us-east-1",
        }
        engine = make_engine(settings.catalog_url)
        catalog = Catalog(engine, segments=settings.ledger_segments)
        with pytest.MonkeyPatch.context() as patch:
            # The versions are made here with the service's keys, which this process then forgets.
            for name, value in keys.items():
                patch.setenv(name, value)
            hadoop = spark.sparkContext._jsc.hadoopConfiguration()
            for key, value in {
                **hadoop_conf(settings),
                "fs.s3a.access.key": keys["AWS_ACCESS_KEY_ID"],
                "fs.s3a.secret.key": keys["AWS_SECRET_ACCESS_KEY"],
            }.items():
                hadoop.set(key, value)
            lake = open_lake(settings)
            assert isinstance(lake, ObjectLake)
            versions = land_demo(spark, catalog, lake, demo_specs)
            expected = {row.ref: rows(read_table(lake, row)) for row in versions}
            files = {row.ref: first_file(lake, row, store.endpoint) for row in versions}
            make_read_roles(store.client("iam", keys), lake, versions)
            environ["CUSTODY_S3_READ_ROLE"] = READ_ROLE
            server, port = start_service(settings, {**environ, **keys}, ui=False)
        try:
            yield Served(f"http://127.0.0.1:{port}", catalog, expected, files, store)
        finally:
            stop(server)
            engine.dispose()


def make_read_roles(iam, lake: ObjectLake, versions: list[VersionRow]) -> None:
    """A role per asset, which the service may assume, allowed to read the asset's table metadata
    and its versions' objects."""
    trust = {
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::123456789012:user/custody"},
        "Action": "sts:AssumeRole",
    }
    for asset in sorted({row.asset_key for row in versions}):
        domain, name = asset.split("/")
        held = [f"{lake.at(row.path)}/" for row in versions if row.asset_key == asset]
        objects = [f"{lake.at('_tables')}/{domain}/{name}/", *held]
        reads = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": [f"arn:aws:s3:::{o}*" for o in objects]}
        role = f"read-{domain}-{name}"
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(policy(trust)))
        iam.put_role_policy(RoleName=role, PolicyName="reads", PolicyDocument=json.dumps(policy(reads)))


def policy(statement: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": [statement]}


def first_file(lake: ObjectLake, row: VersionRow, endpoint: str) -> str:
    manifest = lake.read_manifest(lake.at(row.path))
    assert manifest is not None
    return f"{endpoint}/{lake.at(row.path)}/{manifest['files'][0]['path']}"


def test_pyiceberg_holding_no_key_reads_a_tag_by_signed_requests_and_the_version_is_recorded_once(served):
    since = served.last_seq()
    catalog = RestCatalog("custody", uri=served.iceberg, token=served.bearer("carol"), **SIGNING)
    table = catalog.load_table(("sales", "clients"))
    first = table.snapshot_by_name("custody-v1").snapshot_id
    assert rows(table.scan(snapshot_id=first).to_arrow()) == served.rows("sales/clients@1")
    entries = served.entries("carol", since)
    assert [(e["version"], e.get("via")) for e in entries] == [(None, None), (1, "signing")]
    assert entries[1]["load"] == entries[0]["load"]


def test_spark_holding_no_key_reads_a_tag_by_signed_requests(spark, served):
    since = served.last_seq()
    session = spark.newSession()
    for key, value in {
        "": "org.apache.iceberg.spark.SparkCatalog",
        ".type": "rest",
        ".uri": served.iceberg,
        ".token": served.bearer("carol"),
        ".cache-enabled": "false",
        ".http-client.type": "urlconnection",
        **{f".{name}": value for name, value in SIGNING.items()},
    }.items():
        session.conf.set(f"spark.sql.catalog.signed{key}", value)
    found = session.sql("SELECT * FROM signed.sales.clients VERSION AS OF 'custody-v2'").collect()
    assert sorted((row.asDict() for row in found), key=repr) == served.rows("sales/clients@2")
    read = [(e["version"], e.get("via")) for e in served.entries("carol", since) if e["version"] is not None]
    assert [version for version, _ in read] == [2]


def test_a_request_outside_the_table_s_versions_is_not_signed_and_the_refusal_is_recorded(served):
    since = served.last_seq()
    clients = served.file_of("sales/clients@1")
    for method, uri in (
        ("GET", served.file_of("sales/products@1")),
        ("PUT", clients),
        ("DELETE", clients),
        ("GET", clients.replace(f"/{BUCKET}/", "/another-bucket/")),
        ("GET", f"{served.endpoint}/{BUCKET}/rest/../rest/{clients.split('/rest/', 1)[1]}"),
        ("GET", f"{served.endpoint}/{BUCKET}/rest/_tables/sales/products/metadata/x.metadata.json"),
        ("GET", f"{served.endpoint}/{BUCKET}?list-type=2&prefix=rest/"),
        ("GET", f"{clients}?acl"),
        ("GET", clients.replace("http://127.0.0.1", "http://localhost")),
    ):
        answer = served.sign("carol", "clients", method, uri)
        assert answer.status_code == 403, (method, uri, answer.text)
        assert answer.json()["error"]["type"] == "ForbiddenException"
    assert served.sign("eve", "clients", "GET", clients).status_code == 403
    assert served.sign("carol", "clients", "GET", clients).status_code == 200
    deadline = time.monotonic() + 30
    while not (refused := [e for e in served.entries("carol", since) if e["result"] == "denied"]):
        assert time.monotonic() < deadline, "no refusal recorded"
        time.sleep(0.2)
    assert refused[0]["channel"] == "iceberg"
    assert refused[0]["table"] == "custody.sales.clients"


def test_a_signed_request_is_one_the_store_takes_and_an_unsigned_one_it_refuses(served):
    uri = served.file_of("sales/clients@1")
    signed = served.sign("carol", "clients", "GET", uri)
    answer = requests.get(uri, headers={name: ", ".join(values) for name, values in signed.json()["headers"].items()})
    assert answer.status_code == 200
    assert answer.content[:4] == b"PAR1"
    assert signed.headers["Cache-Control"] == "no-cache"
    assert requests.get(uri, timeout=30).status_code == 403


def test_a_revoked_role_stops_the_next_signed_request_and_the_next_credentials(served):
    uri = served.file_of("sales/products@1")
    assert served.sign("carol", "products", "GET", uri).status_code == 200
    alice = token(f"{served.url}/api/v1", "alice")
    revoked = requests.delete(f"{served.url}/api/v1/access/sales/products/consumer/carol", headers=alice, timeout=30)
    assert revoked.status_code == 200, revoked.text
    try:
        refused = served.sign("carol", "products", "GET", uri)
        assert refused.status_code == 403
        assert "carol may not read sales/products" in refused.json()["error"]["message"]
        assert credentials_of(served, "carol", "products").status_code == 403
    finally:
        granted = requests.put(
            f"{served.url}/api/v1/access/sales/products/consumer", json={"user": "carol"}, headers=alice, timeout=30
        )
        assert granted.status_code == 200, granted.text


def test_the_table_s_load_tells_the_engine_to_sign_and_gives_it_no_key(served):
    answer = requests.get(
        f"{served.iceberg}/v1/custody/namespaces/sales/tables/clients",
        headers={"Authorization": f"Bearer {served.bearer('carol')}"},
        timeout=30,
    )
    config = answer.json()["config"]
    assert config["s3.remote-signing-enabled"] == "true"
    assert config["s3.signer.endpoint"] == "v1/custody/namespaces/sales/tables/clients/sign"
    assert not any("key" in name or "secret" in name or "token" in name for name in config)
    assert "custody-test" not in answer.text


def test_a_flood_of_refused_signing_requests_is_recorded_counted_not_one_entry_each(served):
    since = served.last_seq()
    other = served.file_of("sales/names_and_products@1")
    for _ in range(100):
        assert served.sign("carol", "clients", "GET", other).status_code == 403
    # The first at once; the repeats as one entry, with their count, once the window ends.
    (refused,) = [entry for entry in served.entries("carol", since) if entry["result"] == "denied"]
    assert "is no file of a version of custody.sales.clients" in refused["reason"]


def credentials_of(served: Served, user: str, table: str) -> requests.Response:
    return requests.get(
        f"{served.iceberg}/v1/custody/namespaces/sales/tables/{table}/credentials",
        headers={"Authorization": f"Bearer {served.bearer(user)}"},
        timeout=30,
    )


def test_duckdb_holding_no_key_reads_a_snapshot_with_credentials_vended_for_the_table(served):
    since = served.last_seq()
    table = RestCatalog("custody", uri=served.iceberg, token=served.bearer("carol"), **SIGNING).load_table(
        ("sales", "clients")
    )
    snapshot = table.snapshot_by_name("custody-v2").snapshot_id
    duckdb = duckdb_with_iceberg("httpfs")
    duckdb.execute(f"CREATE SECRET carol (TYPE iceberg, TOKEN '{served.bearer('carol')}')")
    duckdb.execute(f"ATTACH 'custody' AS lake (TYPE iceberg, SECRET carol, ENDPOINT '{served.iceberg}')")
    found = duckdb.execute(f"SELECT * FROM lake.sales.clients AT (VERSION => {snapshot})").to_arrow_table()
    assert rows(found) == served.rows("sales/clients@2")
    vended = [entry for entry in served.entries("carol", since) if entry.get("access") == "vended-credentials"]
    assert vended and all(entry["engine"].startswith("duckdb/v1.5") for entry in vended)


def test_pyiceberg_asking_for_credentials_as_it_does_by_default_reads_with_them(served):
    table = RestCatalog("custody", uri=served.iceberg, token=served.bearer("carol")).load_table(("sales", "clients"))
    assert "s3.session-token" in table.io.properties
    first = table.snapshot_by_name("custody-v1").snapshot_id
    assert rows(table.scan(snapshot_id=first).to_arrow()) == served.rows("sales/clients@1")


def test_vended_credentials_read_the_table_s_files_and_no_other_table_s(served):
    answer = credentials_of(served, "carol", "clients")
    assert answer.status_code == 200, answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    credentials = answer.json()["storage-credentials"]
    assert {credential["prefix"] for credential in credentials} == {
        f"s3://{BUCKET}/rest/_tables/sales/clients/",
        f"s3://{BUCKET}/rest/_attempts/",
    }
    config = credentials[0]["config"]
    expires = int(config["s3.session-token-expires-at-ms"]) / 1000
    assert time.time() < expires <= time.time() + 900 + 5
    store = served.store.client(
        "s3",
        {
            "AWS_ACCESS_KEY_ID": config["s3.access-key-id"],
            "AWS_SECRET_ACCESS_KEY": config["s3.secret-access-key"],
            "AWS_SESSION_TOKEN": config["s3.session-token"],
        },
    )
    own = served.file_of("sales/clients@1").removeprefix(f"{served.endpoint}/{BUCKET}/")
    assert store.get_object(Bucket=BUCKET, Key=own)["Body"].read()[:4] == b"PAR1"
    other = served.file_of("sales/products@1").removeprefix(f"{served.endpoint}/{BUCKET}/")
    with pytest.raises(ClientError, match="AccessDenied"):
        store.get_object(Bucket=BUCKET, Key=other)
    assert "custody-test" not in answer.text


def test_credentials_are_vended_only_to_a_reader_and_each_vending_is_recorded(served):
    since = served.last_seq()
    refused = credentials_of(served, "eve", "clients")
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "ForbiddenException"
    assert "storage-credentials" not in refused.text
    assert credentials_of(served, "carol", "clients").status_code == 200
    (vended,) = [entry for entry in served.entries("carol", since) if entry.get("via") == "credentials"]
    assert (vended["result"], vended["access"], vended["table"]) == (
        "allowed",
        "vended-credentials",
        "custody.sales.clients",
    )
