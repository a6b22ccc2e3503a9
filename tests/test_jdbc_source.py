"""Landing assets read from PostgreSQL through Spark's JDBC reader: full and incremental loads, query
sources, bad rows, refusals, and one snapshot per read, against the tests' own PostgreSQL server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
import psycopg
import pyarrow.parquet as pq
import pytest
from sqlmodel import select

from assets.factory import REQUESTED_BY_TAG, build_assets
from assets.sensors import dropzone_sensor
from governance.catalog.ledgerfilter import LedgerFilter
from governance.catalog.models import ColumnLineageRow, RelationalRead
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import (
    DuplicateBatch,
    InvalidInput,
    NotFound,
    SourceRefused,
    SourceUnavailable,
)
from governance.ingest import ingest
from governance.ledger import Action, entries
from governance.lineage.openlineage import Emitter, transport_config
from governance.runs import RunRequest
from governance.spec import check_specs, load_specs
from governance.zones import AssetKey
from tests.helpers import assert_nothing_committed, assert_reads_as_inferred, cli
from tests.openlineage_spec import read_events
from tests.pg_server import PostgresServer
from tests.ports import refusing_port

BOB = RunRequest(requested_by="bob", run_id="run-1")
ORDERS = AssetKey("shop", "orders")
COLUMNS = """\
columns:
  - {name: id, type: long, nullable: false}
  - {name: customer, type: string, nullable: false}
  - {name: amount, type: double}
  - {name: updated_at, type: timestamp, nullable: false}
"""


@dataclass(frozen=True)
class Shop:
    """A database of the tests' server holding an `orders` table, and a spec folder reading it."""

    server: PostgresServer
    database: str
    specs: Path

    @property
    def url(self) -> str:
        return f"jdbc:postgresql://{self.server.host}:{self.server.port}/{self.database}"

    def sql(self, *statements: str) -> None:
        dsn = (
            f"host={self.server.host} port={self.server.port} user={self.server.user} "
            f"password={self.server.password} dbname={self.database}"
        )
        with psycopg.connect(dsn, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement)

    def spec(self, source: str, columns: str = COLUMNS, name: str = "orders") -> AssetKey:
        (self.specs / "shop").mkdir(parents=True, exist_ok=True)
        (self.specs / "shop" / f"{name}.yaml").write_text(
            "description: Orders of the shop's database.\n"
            "roles: {owner: sales-owners, producer: sales-producers, consumer: sales-consumers}\n"
            "zone: landing\n"
            f"source:\n  format: jdbc\n  url: {self.url}\n  user_env: SHOP_USER\n  password_env: SHOP_PASSWORD\n"
            + "".join(f"  {line}\n" for line in source.strip().splitlines())
            + columns
        )
        return AssetKey("shop", name)

    def load(self, key: AssetKey = ORDERS):
        return load_specs(self.specs, transform_packages=DEFAULT_TRANSFORM_PACKAGES)[key]


@pytest.fixture
def shop(postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shop]:
    database = f"shop_{uuid.uuid4().hex[:10]}"
    postgres.create_database(database)
    monkeypatch.setenv("SHOP_USER", postgres.user)
    monkeypatch.setenv("SHOP_PASSWORD", postgres.password)
    shop = Shop(postgres, database, tmp_path / "specs")
    shop.sql(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount text, updated_at timestamptz)",
        "INSERT INTO orders SELECT g, 'c' || (g % 3), (g * 1.5)::text, "
        "timestamptz '2026-11-01 00:00:00+00' + g * interval '1 minute' FROM generate_series(1, 20) g",
    )
    yield shop
    postgres.drop_database(database)


def rows(lake, version) -> list[dict]:
    return sorted(pq.read_table(lake.at(version.path)).to_pylist(), key=lambda row: row["id"])


def quarantined(lake, version) -> list[dict]:
    folder = lake.at(version.quarantine_path)
    return [json.loads(line) for part in sorted(folder.glob("part-*.json")) for line in part.read_text().splitlines()]


def logged(catalog, action: str) -> list[dict]:
    """The details of the ledger's entries of `action` about shop/orders."""
    with catalog.session() as session:
        return [json.loads(e.details) for e in entries(session, LedgerFilter(asset=str(ORDERS), action=action))]


def read_of(catalog, version) -> RelationalRead:
    return catalog.reads_of([version.id])[version.id]


def test_a_table_lands_whole_with_where_and_when_it_was_read(spark, catalog, lake, shop):
    shop.spec("table: public.orders")
    version = ingest(spark, catalog, lake, shop.load(), BOB)
    assert (version.number, version.rows, version.rows_quarantined) == (1, 20, 0)
    assert rows(lake, version)[0] == {
        "id": 1,
        "customer": "c1",
        "amount": 1.5,
        "updated_at": rows(lake, version)[0]["updated_at"],
    }
    read = read_of(catalog, version)
    assert (read.namespace, read.name) == (
        f"postgres://{shop.server.host}:{shop.server.port}",
        f"{shop.database}.public.orders",
    )
    assert read.table_name == "public.orders" and read.query is None and read.snapshot_at is not None
    committed = logged(catalog, Action.INGESTION_COMMITTED)[0]
    assert committed["rows_read"] == 20 and committed["source"]["name"] == read.name


def test_a_version_read_from_a_table_reads_back_as_spark_finds_it_in_its_files(spark, catalog, lake, shop):
    shop.spec("table: public.orders")
    assert_reads_as_inferred(spark, lake, ingest(spark, catalog, lake, shop.load(), BOB))


def test_landing_columns_come_from_the_table_columns(spark, catalog, lake, shop):
    shop.spec("table: public.orders")
    version = ingest(spark, catalog, lake, shop.load(), BOB)
    with catalog.session() as session:
        deps = session.exec(select(ColumnLineageRow).where(ColumnLineageRow.version_id == version.id)).all()
    direct = {
        (d.output_column, d.input_column) for d in deps if d.output_column is not None and d.input_version_id is None
    }
    assert direct == {("id", "id"), ("customer", "customer"), ("amount", "amount"), ("updated_at", "updated_at")}


def test_openlineage_names_the_table_by_its_server_and_database(spark, catalog, lake, shop, tmp_path):
    shop.spec("table: public.orders")
    events_file = tmp_path / "ol" / "events.jsonl"
    ingest(spark, catalog, lake, shop.load(), BOB, events=Emitter(transport_config(f"file:{events_file}", tmp_path)))
    complete = next(e for e in read_events(events_file) if e["eventType"] == "COMPLETE")
    (source,) = complete["inputs"]
    assert (source["namespace"], source["name"]) == (
        f"postgres://{shop.server.host}:{shop.server.port}",
        f"{shop.database}.public.orders",
    )
    fields = complete["outputs"][0]["facets"]["columnLineage"]["fields"]
    assert fields["amount"]["inputFields"][0] | {"transformations": None} == {
        "namespace": source["namespace"],
        "name": source["name"],
        "field": "amount",
        "transformations": None,
    }


def test_an_incremental_read_takes_only_rows_past_the_last_versions_mark(spark, catalog, lake, shop):
    shop.spec("table: public.orders\nincremental: {column: updated_at}")
    first = ingest(spark, catalog, lake, shop.load(), BOB)
    shop.sql(
        "INSERT INTO orders SELECT g, 'late', '1', timestamptz '2026-11-02 00:00:00+00' + g * interval '1 second' "
        "FROM generate_series(21, 25) g"
    )
    second = ingest(spark, catalog, lake, shop.load(), BOB)
    assert (first.rows, second.rows) == (20, 5)
    assert [row["id"] for row in rows(lake, second)] == [21, 22, 23, 24, 25]
    marks = read_of(catalog, first), read_of(catalog, second)
    assert marks[0].high_water_from is None and marks[0].high_water_to == "2026-11-01 00:20:00+00"
    assert (marks[1].high_water_from, marks[1].high_water_to) == ("2026-11-01 00:20:00+00", "2026-11-02 00:00:25+00")


def test_a_mark_on_another_column_is_no_mark_for_this_one(spark, catalog, lake, shop):
    shop.spec("table: public.orders\nincremental: {column: updated_at}")
    ingest(spark, catalog, lake, shop.load(), BOB)
    shop.spec("table: public.orders\nincremental: {column: id}")
    again = ingest(spark, catalog, lake, shop.load(), BOB)
    assert again.rows == 20 and read_of(catalog, again).high_water_from is None


def test_two_reads_from_one_mark_commit_once(spark, catalog, lake, shop):
    """A run that read from a mark another run has moved past meanwhile would land the same rows twice."""
    shop.spec("table: public.orders\nincremental: {column: updated_at}")
    raced = []

    def another_run_commits_first(message: str) -> None:
        if message.startswith("committing") and not raced:
            raced.append(ingest(spark, catalog, lake, shop.load(), BOB))

    with pytest.raises(DuplicateBatch, match="another run of shop/orders committed rows of .* up to updated_at"):
        ingest(spark, catalog, lake, shop.load(), BOB, progress=another_run_commits_first)
    assert [v.number for v in catalog.versions(ORDERS)] == [raced[0].number] == [1]


def test_an_incremental_column_must_be_ordered_as_its_values_are(spark, catalog, lake, shop):
    shop.sql("ALTER TABLE orders ALTER COLUMN id TYPE text")
    shop.spec("table: public.orders\nincremental: {column: id}")
    with pytest.raises(SourceRefused, match="column id is text in the database; an incremental read needs an integer"):
        ingest(spark, catalog, lake, shop.load(), BOB)


def test_an_incremental_read_with_nothing_new_commits_nothing_and_says_so(spark, catalog, lake, shop):
    shop.spec("table: public.orders\nincremental: {column: updated_at}")
    ingest(spark, catalog, lake, shop.load(), BOB)
    with pytest.raises(NotFound, match=r"no rows of shop_\w+\.public\.orders past updated_at 2026-11-01 00:20:00"):
        ingest(spark, catalog, lake, shop.load(), BOB)
    assert [v.number for v in catalog.versions(ORDERS)] == [1]
    assert logged(catalog, Action.INGESTION_FAILED)


def test_a_query_source_lands_its_answer_and_keeps_its_text(spark, catalog, lake, shop):
    query = "SELECT id, customer, amount::numeric * 2 AS amount, updated_at FROM orders WHERE id <= 5;"
    shop.spec(f'query: "{query}"')
    version = ingest(spark, catalog, lake, shop.load(), BOB)
    assert [(row["id"], row["amount"]) for row in rows(lake, version)] == [
        (1, 3.0),
        (2, 6.0),
        (3, 9.0),
        (4, 12.0),
        (5, 15.0),
    ]
    read = read_of(catalog, version)
    assert read.query == query.rstrip(";") and read.table_name is None
    assert read.name.startswith(f"{shop.database}.query_")


def test_bad_rows_are_quarantined_with_their_reason_and_the_counts_add_up(spark, catalog, lake, shop):
    shop.sql("UPDATE orders SET amount = 'n/a' WHERE id = 7", "UPDATE orders SET customer = NULL WHERE id = 9")
    shop.spec("table: public.orders", COLUMNS + "max_bad_fraction: 0.2\n")
    version = ingest(spark, catalog, lake, shop.load(), BOB)
    assert (version.rows, version.rows_quarantined) == (18, 2)
    refused = sorted(quarantined(lake, version), key=lambda row: json.loads(row["record"])["id"])
    assert [r["reason"] for r in refused] == [
        "column amount is not a valid double",
        "column customer is null but declared not nullable",
    ]
    assert {r["file"] for r in refused} == {f"{shop.database}.public.orders"}
    committed = logged(catalog, Action.INGESTION_COMMITTED)[0]
    assert committed["rows_read"] == version.rows + version.rows_quarantined == 20


def test_a_null_where_none_is_allowed_is_quarantined_when_no_column_needs_converting(spark, catalog, lake, shop):
    shop.sql("UPDATE orders SET customer = NULL WHERE id = 3")
    shop.spec(
        "table: public.orders",
        COLUMNS.replace("{name: amount, type: double}", "{name: amount, type: string}") + "max_bad_fraction: 0.1\n",
    )
    version = ingest(spark, catalog, lake, shop.load(), BOB)
    assert (version.rows, version.rows_quarantined) == (19, 1)
    assert [r["reason"] for r in quarantined(lake, version)] == ["column customer is null but declared not nullable"]


def test_text_its_declared_type_would_change_is_quarantined(spark, catalog, lake, shop):
    shop.sql(
        "CREATE TABLE readings (id bigint, day text, price text, amount text, ratio text)",
        "INSERT INTO readings VALUES (1, '2026-11-01', '1.25', '3', '0.5'), (2, '2026-11-01 10:00', '1.25', '3', '0.5'), "
        "(3, '2026-11-01', '1.005', '3', '0.5'), (4, '2026-11-01', '1.25', '1.5', '0.5'), (5, '2026', '1.25', '3', '0.5'), "
        "(6, '2026-11-01', '1.25', '3', '1e400'), (7, '2026-11-01', '1.25', '3', 'Infinity')",
    )
    key = shop.spec(
        "table: public.readings",
        "columns:\n  - {name: id, type: long}\n  - {name: day, type: date}\n"
        '  - {name: price, type: "decimal(12,2)"}\n  - {name: amount, type: int}\n  - {name: ratio, type: double}\n'
        "max_bad_fraction: 0.9\n",
        name="readings",
    )
    version = ingest(spark, catalog, lake, shop.load(key), BOB)
    assert [(row["id"], row["ratio"]) for row in rows(lake, version)] == [(1, 0.5), (7, float("inf"))]
    assert sorted((json.loads(r["record"])["id"], r["reason"]) for r in quarantined(lake, version)) == [
        (2, "column day is not a valid date"),
        (3, "column price is not a valid decimal(12,2)"),
        (4, "column amount is not a valid int"),
        (5, "column day is not a valid date"),
        (6, "column ratio is not a valid double"),
    ]


def test_too_many_bad_rows_commit_nothing(spark, catalog, lake, shop):
    shop.sql("UPDATE orders SET amount = 'n/a' WHERE id <= 5")
    shop.spec("table: public.orders")
    with pytest.raises(InvalidInput, match=r"read of .*orders of shop/orders: 5 of 20 rows \(25.0%\) break the spec"):
        ingest(spark, catalog, lake, shop.load(), BOB)
    assert_nothing_committed(catalog, lake, "shop/orders")


def test_a_wrong_password_is_one_line_that_names_the_user_and_never_the_secret(spark, catalog, lake, shop, monkeypatch):
    monkeypatch.setenv("SHOP_PASSWORD", "not-the-password-4711")
    shop.spec("table: public.orders")
    with pytest.raises(SourceRefused) as refused:
        ingest(spark, catalog, lake, shop.load(), BOB)
    message = str(refused.value)
    assert "\n" not in message and "not-the-password-4711" not in message
    assert f"as user '{shop.server.user}'" in message and "password authentication failed" in message
    failed = logged(catalog, Action.INGESTION_FAILED)
    assert failed and "not-the-password-4711" not in json.dumps(failed)
    assert_nothing_committed(catalog, lake, "shop/orders")


def test_a_database_that_cannot_be_reached_is_worth_another_try(spark, catalog, lake, shop, tmp_path):
    with refusing_port() as port:
        closed = Shop(replace(shop.server, port=port), shop.database, tmp_path / "elsewhere")
        closed.spec("table: public.orders")
        with pytest.raises(SourceUnavailable, match="Connection to 127.0.0.1:[0-9]+ refused") as unreachable:
            ingest(spark, catalog, lake, closed.load(), BOB)
    assert unreachable.value.retryable


def test_a_variable_that_is_not_set_is_named(spark, catalog, lake, shop, monkeypatch):
    monkeypatch.delenv("SHOP_PASSWORD")
    shop.spec("table: public.orders")
    with pytest.raises(InvalidInput, match="SHOP_PASSWORD is not set"):
        ingest(spark, catalog, lake, shop.load(), BOB)


def test_columns_the_table_lacks_are_named_before_anything_is_written(spark, catalog, lake, shop):
    shop.spec("table: public.orders", COLUMNS + "  - {name: region, type: string}\n")
    with pytest.raises(SourceRefused, match="does not have the columns of the spec of shop/orders: missing region"):
        ingest(spark, catalog, lake, shop.load(), BOB)
    assert_nothing_committed(catalog, lake, "shop/orders")


def test_a_table_that_changes_during_the_read_lands_as_of_the_snapshot(spark, catalog, lake, shop):
    """The consistency rule: every partition, the count and the quarantine pass read one snapshot,
    taken when the read starts; what is committed after it lands in the next version."""
    shop.spec("table: public.orders\npartition_column: id\nnum_partitions: 3")

    def meanwhile(message: str) -> None:
        if message.startswith("reading "):
            shop.sql(
                "UPDATE orders SET amount = '999' WHERE id <= 10",
                "INSERT INTO orders SELECT g, 'new', '2', now() FROM generate_series(21, 30) g",
            )

    first = ingest(spark, catalog, lake, shop.load(), BOB, progress=meanwhile)
    assert [(row["id"], row["amount"]) for row in rows(lake, first)] == [(g, g * 1.5) for g in range(1, 21)]
    assert read_of(catalog, first).partitions == 3
    second = ingest(spark, catalog, lake, shop.load(), BOB)
    assert second.rows == 30 and {row["amount"] for row in rows(lake, second) if row["id"] <= 10} == {999.0}


def test_a_database_asset_takes_no_batch(spark, catalog, lake, shop):
    shop.spec("table: public.orders")
    with pytest.raises(InvalidInput, match="read from a database, not from DropZone batches"):
        ingest(spark, catalog, lake, shop.load(), BOB, batch_id="b1")


def test_in_dagster_a_database_asset_shows_its_source_and_each_materialization_its_read(spark, shop, resources):
    shop.spec("table: public.orders\nincremental: {column: updated_at}")
    specs = load_specs(shop.specs, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    (asset,) = build_assets(specs)
    spec = asset.specs_by_key[dg.AssetKey(["shop", "orders"])]
    assert "postgres" in spec.kinds and spec.metadata["custody/source"].value.endswith(f"{shop.database}.public.orders")
    with dg.instance_for_test() as instance:
        result = dg.materialize([asset], resources=resources, instance=instance, tags={REQUESTED_BY_TAG: "bob"})
    (event,) = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert metadata["custody/read"].value["name"] == f"{shop.database}.public.orders"
    assert metadata["custody/read"].value["high_water_to"] == "2026-11-01 00:20:00+00"
    assert f"{shop.database}.public.orders.amount" in metadata["custody/column_lineage"].value


def test_the_cli_ingests_a_table_and_shows_where_each_column_came_from(cli_env, spark, shop, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_SPECS", str(shop.specs))
    shop.spec("table: public.orders\nincremental: {column: updated_at}")
    code, out, _ = cli(capsys, "ingest", "shop/orders", "--as", "bob")
    assert code == 0 and out.startswith("committed shop/orders@1")
    code, out, _ = cli(capsys, "provenance", "shop/orders@1")
    assert code == 0 and f"table {shop.database}.public.orders" in " ".join(out.split())
    assert "updated_at up to 2026-11-01 00:20:00+00" in " ".join(out.split())
    code, out, _ = cli(capsys, "lineage", "columns", "shop/orders@1", "amount", "--origins")
    assert code == 0 and f"column amount of postgres://{shop.server.host}:{shop.server.port}" in " ".join(out.split())
    code, _, err = cli(capsys, "ingest", "shop/orders", "--as", "bob")
    assert code == 4 and "nothing to ingest" in err
    code, _, err = cli(capsys, "ingest", "shop/orders", "--as", "bob", "--batch", "b1")
    assert code != 0 and "read from a database, not from DropZone batches" in err


def write_spec(folder: Path, source: str, columns: str = COLUMNS) -> Path:
    (folder / "shop").mkdir(parents=True, exist_ok=True)
    path = folder / "shop" / "orders.yaml"
    path.write_text(
        "description: Orders.\nroles: {owner: sales-owners, producer: sales-producers, consumer: sales-consumers}\n"
        "zone: landing\nsource:\n  format: jdbc\n  user_env: SHOP_USER\n  password_env: SHOP_PASSWORD\n"
        + "".join(f"  {line}\n" for line in source.strip().splitlines())
        + columns
    )
    return path


@pytest.mark.parametrize(
    ("source", "columns", "problem"),
    [
        (
            "url: jdbc:postgresql://db:5432/shop?user=u&password=p\ntable: public.orders",
            COLUMNS,
            "source: the url holds credentials; name the variables that hold them in user_env and password_env",
        ),
        (
            "url: jdbc:postgresql://u:p@db/shop\ntable: public.orders",
            COLUMNS,
            "source.url: must be a JDBC URL as jdbc:postgresql://host:port/database",
        ),
        (
            "url: jdbc:postgresql://db/shop\ntable: public.orders\nquery: SELECT 1",
            COLUMNS,
            "source: give either a table or a query",
        ),
        (
            "url: jdbc:postgresql://db/shop\nquery: SELECT 1; DROP TABLE orders",
            COLUMNS,
            "a query is one SELECT statement, without ;",
        ),
        (
            "url: jdbc:postgresql://db/shop\ntable: public.orders\nincremental: {column: amount}",
            COLUMNS,
            "incremental column 'amount' must be a declared column, nullable: false, of type int",
        ),
        (
            "url: jdbc:postgresql://db/shop\ntable: public.orders\npartition_column: customer",
            COLUMNS,
            "partition_column 'customer' must be a declared column of type int, long, short or byte",
        ),
        (
            "url: jdbc:postgresql://db/shop\ntable: public.orders\nnum_partitions: 4",
            COLUMNS,
            "bounds and num_partitions split the read on a partition_column",
        ),
        ("url: jdbc:postgresql://db/shop\ntable: public.orders", "", "a JDBC source needs its columns declared"),
    ],
)
def test_a_database_source_is_checked_when_its_spec_is_loaded(tmp_path, source, columns, problem):
    spec = write_spec(tmp_path, source, columns)
    found = [str(p) for p in check_specs(tmp_path, transform_packages=DEFAULT_TRANSFORM_PACKAGES)]
    assert len(found) == 1 and found[0].startswith(f"{spec}:") and problem in found[0]


def test_the_dropzone_sensor_leaves_database_assets_alone(tmp_path):
    write_spec(tmp_path, "url: jdbc:postgresql://db/shop\ntable: public.orders")
    specs = load_specs(tmp_path, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    assert specs[ORDERS].is_landing and not specs[ORDERS].takes_batches
    assert dropzone_sensor(specs) is None
