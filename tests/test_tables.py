"""Each committed version is also a snapshot of its asset's Iceberg table, tagged custody-v<N>, which
other engines (PyIceberg, Spark SQL, DuckDB) read as `custody read` does."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from governance import ledger
from governance.access.reads import read_table
from governance.catalog import Catalog, make_engine
from governance.catalog.models import VersionRow
from governance.cli import run
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.content import Footer
from governance.errors import InvalidInput, TableSnapshotError
from governance.ingest import ingest
from governance.lake import TABLES_FOLDER, open_lake
from governance.lake.iceberg import IcebergTables, LiveVersion, spark_conf, tag_of
from governance.repair import repair
from governance.retention.purge import purge
from governance.spec import load_specs
from governance.zones import AssetKey, Lake, VersionRef
from tests.conftest import BOB, CLIENTS, DEMO_SPECS, drop, land_demo, plain_environ, without_approval
from tests.helpers import duckdb_with_iceberg, iceberg


@pytest.fixture
def lake(settings: Settings) -> Lake:
    return open_lake(settings)


@pytest.fixture
def landed(spark, catalog, lake, demo_specs) -> list[VersionRow]:
    """The demo's versions, for a test that changes them."""
    return land_demo(spark, catalog, lake, demo_specs)


@dataclass(frozen=True)
class Home:
    settings: Settings
    lake: Lake
    versions: dict[str, VersionRow]


@pytest.fixture(scope="module")
def home(spark, demo_specs, tmp_path_factory) -> Iterator[Home]:
    """The demo's versions, landed once for the tests that only read them."""
    settings = without_approval(Settings.under(tmp_path_factory.mktemp("tables") / "home", specs=DEMO_SPECS))
    engine = make_engine(settings.catalog_url)
    lake = open_lake(settings)
    versions = land_demo(spark, Catalog(engine, segments=settings.ledger_segments), lake, demo_specs)
    yield Home(settings, lake, {row.ref: row for row in versions})
    engine.dispose()


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


def at_tag(settings: Settings, row: VersionRow) -> pa.Table:
    table = iceberg(settings).load_table(tuple(row.asset_key.split("/")))
    return table.scan(snapshot_id=table.snapshot_by_name(tag_of(row.number)).snapshot_id).to_arrow()


def test_each_version_is_a_tagged_snapshot_with_the_rows_custody_read_gives(home):
    assert len(home.versions) == 5
    for row in home.versions.values():
        assert rows(at_tag(home.settings, row)) == rows(read_table(home.lake, row)), row.ref


def test_a_snapshot_summary_names_the_version_its_run_code_and_requester(home):
    row = home.versions["sales/clients@2"]
    table = iceberg(home.settings).load_table(("sales", "clients"))
    summary = table.snapshot_by_name("custody-v2").summary.additional_properties
    assert {key: summary[key] for key in summary if key.startswith("custody.")} == {
        "custody.asset": "sales/clients",
        "custody.version": "2",
        "custody.data-version": row.data_version,
        "custody.run-id": "run-7",
        "custody.code-version": "code-3",
        "custody.requested-by": "bob",
        "custody.assurance": row.assurance,
        "custody.created-at": row.created_at.isoformat(),
    }


def test_the_current_snapshot_is_the_newest_version(home):
    table = iceberg(home.settings).load_table(("sales", "clients"))
    assert table.current_snapshot().snapshot_id == table.snapshot_by_name("custody-v2").snapshot_id
    assert rows(table.scan().to_arrow()) == rows(read_table(home.lake, home.versions["sales/clients@2"]))


def test_spark_sql_reads_a_tag_with_version_as_of(spark, home):
    session = operators_spark(spark, home.settings)
    first = home.versions["sales/clients@1"]
    by_sql = session.sql("SELECT * FROM custody.sales.clients VERSION AS OF 'custody-v1'")
    by_option = session.read.option("versionAsOf", "custody-v1").table("custody.sales.clients")
    expected = rows(read_table(home.lake, first))
    assert sorted((r.asDict() for r in by_sql.collect()), key=repr) == expected
    assert sorted((r.asDict() for r in by_option.collect()), key=repr) == expected


def operators_spark(spark, settings: Settings):
    """A Spark session on the tables' catalog as an operator configures it from `custody tables spark-conf`."""
    session = spark.newSession()
    for key, value in spark_conf(settings.catalog_url, f"file://{settings.lake / TABLES_FOLDER}", ()).items():
        if key != "spark.jars":  # the shared session started with them
            session.conf.set(key, value)
    return session


def test_repair_puts_back_the_guard_another_engine_took_off_and_a_purge_from_spark_is_then_refused(
    spark, settings, catalog, lake, landed
):
    operator = operators_spark(spark, settings)
    operator.sql("ALTER TABLE custody.sales.clients SET TBLPROPERTIES ('gc.enabled'='true')")

    report = repair(catalog, lake, thorough=True)

    assert report.tables == [
        "sales/clients: tagged none, withdrew none; put back its guarding properties (gc.enabled was true)"
    ]
    assert iceberg(settings).load_table(("sales", "clients")).properties["gc.enabled"] == "false"
    with catalog.session() as session:
        [restored] = ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.TABLE_GUARD_RESTORED))
    assert json.loads(restored.details)["found"] == {"gc.enabled": "true"}
    with pytest.raises(Exception, match="GC is disabled"):
        operator.sql("DROP TABLE custody.sales.clients PURGE")
    assert all(lake.at(row.path).is_dir() for row in landed if row.asset_key == "sales/clients")


def test_a_commit_puts_back_the_guard_too(spark, settings, catalog, lake, landed, demo_specs):
    operators_spark(spark, settings).sql("ALTER TABLE custody.sales.clients UNSET TBLPROPERTIES ('gc.enabled')")

    run_pipeline_clients_only(spark, catalog, lake, demo_specs, [])

    assert iceberg(settings).load_table(("sales", "clients")).properties["gc.enabled"] == "false"
    with catalog.session() as session:
        [restored] = ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.TABLE_GUARD_RESTORED))
    assert json.loads(restored.details)["found"] == {"gc.enabled": None}


def test_duckdb_reads_a_tag(home):
    row = home.versions["sales/product_summary@1"]
    table = iceberg(home.settings).load_table(("sales", "product_summary"))
    snapshot = table.snapshot_by_name("custody-v1").snapshot_id
    found = (
        duckdb_with_iceberg()
        .execute("SELECT * FROM iceberg_scan(?, snapshot_from_id = ?)", [table.metadata_location, snapshot])
        .to_arrow_table()
    )
    assert rows(found) == rows(read_table(home.lake, row))


def test_a_purge_withdraws_the_tag_and_the_previous_version_becomes_current(settings, catalog, lake, landed):
    purge(catalog, lake, {}, "admin", explicit=[VersionRef.parse("sales/clients@2")])
    table = iceberg(settings).load_table(("sales", "clients"))
    assert "custody-v2" not in table.refs() and "custody-v1" in table.refs()
    assert table.current_snapshot().snapshot_id == table.snapshot_by_name("custody-v1").snapshot_id
    assert [s.snapshot_id for s in table.snapshots()] == [table.snapshot_by_name("custody-v1").snapshot_id]


def test_a_purge_that_cannot_withdraw_the_tag_deletes_nothing(settings, catalog, lake, landed):
    tables = settings.lake / TABLES_FOLDER
    shutil.rmtree(tables)
    tables.write_text("not a folder")
    with pytest.raises(TableSnapshotError, match="sales/clients"):
        purge(catalog, lake, {}, "admin", explicit=[VersionRef.parse("sales/clients@2")])
    assert lake.at(catalog.version(VersionRef.parse("sales/clients@2")).path).is_dir()


def test_a_snapshot_that_fails_leaves_the_version_committed_and_repair_makes_it(
    spark, settings, catalog, lake, demo_specs
):
    (settings.lake / TABLES_FOLDER).parent.mkdir(parents=True, exist_ok=True)
    (settings.lake / TABLES_FOLDER).write_text("not a folder")
    said = []
    dropped = run_pipeline_clients_only(spark, catalog, lake, demo_specs, said)
    assert dropped.number == 1 and dropped.status == "committed"
    assert any("its table snapshot is not" in line for line in said)
    with catalog.session() as session:
        failures = list(ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.TABLE_SNAPSHOT_FAILED)))
    assert [(e.asset_key, e.version, e.actor) for e in failures] == [("sales/clients", 1, "bob")]
    (settings.lake / TABLES_FOLDER).unlink()
    report = repair(catalog, lake, thorough=True)
    assert report.tables == ["sales/clients: tagged v1, withdrew none"] and not report.table_problems
    assert rows(at_tag(settings, dropped)) == rows(read_table(lake, dropped))


def run_pipeline_clients_only(spark, catalog, lake, demo_specs, said: list[str]) -> VersionRow:
    from governance.demo import drop_demo_batches

    dropped = drop_demo_batches(lake)
    return ingest(
        spark, catalog, lake, demo_specs[CLIENTS], BOB, batch_id=dropped.client_batches[0], progress=said.append
    )


def test_a_snapshot_someone_else_expired_is_made_again_by_repair(settings, catalog, lake, landed):
    table = iceberg(settings).load_table(("sales", "clients"))
    expired = table.snapshot_by_name("custody-v1").snapshot_id
    table.manage_snapshots().remove_tag("custody-v1").commit()
    table.maintenance.expire_snapshots().by_id(expired).commit()
    report = repair(catalog, lake, thorough=True)
    assert report.tables == ["sales/clients: tagged v1, withdrew none"]
    first = next(row for row in landed if row.ref == "sales/clients@1")
    assert rows(at_tag(settings, first)) == rows(read_table(lake, first))


def test_a_copied_home_makes_its_own_tables_and_leaves_the_originals_alone(tmp_path, settings, catalog, lake, landed):
    original = sorted(p.relative_to(settings.home) for p in (settings.lake / TABLES_FOLDER).rglob("*"))
    catalog.engine.dispose()
    copy = tmp_path / "copy"
    shutil.copytree(settings.home, copy)
    moved = Settings.under(copy)
    copied = Catalog.from_url(moved.catalog_url)
    report = repair(copied, open_lake(moved), thorough=True)
    assert not report.table_problems
    assert sorted(p.relative_to(settings.home) for p in (settings.lake / TABLES_FOLDER).rglob("*")) == original
    table = iceberg(moved).load_table(("sales", "clients"))
    assert table.location() == f"file://{copy / 'lake' / TABLES_FOLDER / 'sales' / 'clients'}"
    newest = next(row for row in landed if row.ref == "sales/clients@2")
    assert rows(at_tag(moved, newest)) == rows(read_table(open_lake(moved), newest))


def test_a_restored_home_whose_original_is_gone_makes_its_tables_anew(tmp_path, settings, catalog, lake, landed):
    catalog.engine.dispose()
    restored = tmp_path / "restored"
    shutil.copytree(settings.home, restored)
    settings.home.rename(tmp_path / "moved-away")
    moved = Settings.under(restored)

    report = repair(Catalog.from_url(moved.catalog_url), open_lake(moved), thorough=True)

    assert not report.table_problems, report.table_problems
    newest = next(row for row in landed if row.ref == "sales/clients@2")
    assert rows(at_tag(moved, newest)) == rows(read_table(open_lake(moved), newest))


def test_tables_list_names_a_table_it_cannot_read_after_listing_the_others(settings, landed, monkeypatch, capsys):
    metadata = iceberg(settings).load_table(("sales", "clients")).metadata_location.removeprefix("file://")
    Path(metadata).write_text("not JSON")
    for name, value in plain_environ(settings.home).items():
        monkeypatch.setenv(name, value)

    code = run(["tables", "list"])

    out, err = capsys.readouterr()
    assert code == 1
    assert "custody.sales.products " in out and "custody.sales.clients " in out
    [line] = err.splitlines()
    assert line.startswith("error: cannot read the Iceberg table of sales/clients: ")


TIMES = """description: Times, from Parquet.
roles: {owner: t-owners, producer: t-producers, consumer: t-consumers}
zone: landing
source: {format: parquet}
columns:
  - {name: id, type: long, nullable: false}
  - {name: ts, type: timestamp}
"""


def test_times_without_a_zone_land_as_utc_with_a_note_and_every_version_is_a_snapshot(
    spark, settings, catalog, lake, tmp_path
):
    (tmp_path / "specs" / "lab").mkdir(parents=True)
    (tmp_path / "specs" / "lab" / "times.yaml").write_text(TIMES)
    spec = load_specs(tmp_path / "specs", transform_packages=DEFAULT_TRANSFORM_PACKAGES)[AssetKey.parse("lab/times")]
    nine = datetime(2026, 1, 1, 9, 0)
    batches = {
        "aware": pa.table({"id": [1], "ts": pa.array([nine.replace(tzinfo=UTC)], pa.timestamp("us", tz="UTC"))}),
        "naive": pa.table({"id": [2], "ts": pa.array([nine], pa.timestamp("us"))}),
    }
    landed = []
    for name, table in batches.items():
        pq.write_table(table, tmp_path / f"{name}.parquet")
        drop(lake, "lab/times", name, {"t.parquet": tmp_path / f"{name}.parquet"})
        landed.append(ingest(spark, catalog, lake, spec, BOB, batch_id=name))

    assert read_table(lake, landed[1]).column("ts").to_pylist() == [nine.replace(tzinfo=UTC)]
    assert {"custody-v1", "custody-v2"} <= set(iceberg(settings).load_table(("lab", "times")).refs())
    with catalog.session() as session:
        committed = list(ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.INGESTION_COMMITTED)))
    assert [json.loads(entry.details).get("notes") for entry in committed] == [
        None,
        ["ts: times without a time zone, taken as UTC"],
    ]


# The tables on their own, on Parquet files written here: how a table follows its versions' schemas.


def version_file(folder: Path, number: int, table: pa.Table) -> LiveVersion:
    path = folder / f"v={number}" / "part-00000.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    return LiveVersion(number, (f"file://{path}",), {"custody.version": str(number)})


@pytest.mark.both_backends
def test_each_snapshot_keeps_the_columns_of_its_own_version(tmp_path, catalog_url, catalog):
    tables = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
    key = AssetKey.parse("t/evolving")
    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    versions = {
        1: version_file(
            tmp_path, 1, pa.table({"id": [1, 2], "at": pa.array([stamp, None], pa.timestamp("us", "UTC"))})
        ),
        2: version_file(tmp_path, 2, pa.table({"name": ["x"], "id": [3]})),
    }
    tables.align(key, versions.keys(), versions.__getitem__)
    table = tables.load(key)
    assert table is not None
    for number, version in versions.items():
        snapshot = table.snapshot_by_name(tag_of(number)).snapshot_id
        found = table.scan(snapshot_id=snapshot).to_arrow()
        assert found.to_pylist() == pq.read_table(version.files[0].removeprefix("file://")).to_pylist()


def test_each_snapshot_lists_its_own_version_s_files_alone_and_is_tagged_in_the_same_commit(
    tmp_path, catalog_url, catalog
):
    tables = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
    key = AssetKey.parse("t/wholes")
    versions = {n: version_file(tmp_path, n, pa.table({"id": [n]})) for n in (1, 2, 3)}
    for n in versions:
        tables.align(key, range(1, n + 1), versions.__getitem__)
    table = tables.load(key)
    assert table is not None
    for n, version in versions.items():
        snapshot = table.snapshot_by_name(tag_of(n))
        manifests = snapshot.manifests(table.io)
        assert snapshot.parent_snapshot_id is None and len(manifests) == 1
        listed = [e.data_file.file_path for e in manifests[0].fetch_manifest_entry(table.io, discard_deleted=False)]
        assert listed == list(version.files)
    assert len(table.snapshots()) == 3 and set(table.refs()) == {"main", "custody-v1", "custody-v2", "custody-v3"}
    assert table.current_snapshot().snapshot_id == table.snapshot_by_name("custody-v3").snapshot_id


def test_a_snapshot_made_from_the_footers_sealing_read_is_the_one_made_from_the_files(tmp_path, catalog_url, catalog):
    tables = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
    rows = pa.table(
        {"id": [3, 1, None], "name": ["c", None, "a"], "at": pa.array([1, 2, 3], pa.timestamp("us", "UTC"))}
    )
    version = version_file(tmp_path, 1, rows)
    path = version.files[0]
    local = path.removeprefix("file://")
    footer = Footer(pq.read_metadata(local), Path(local).stat().st_size)
    described = LiveVersion(1, version.files, version.summary, {path: footer})
    made = {}
    for name, live in (("read", version), ("footers", described)):
        key = AssetKey("t", name)
        tables.align(key, [1], {1: live}.__getitem__)
        table = tables.load(key)
        assert table is not None
        made[name] = (table.schema(), table.scan(snapshot_id=tables.tags(key)[1]).plan_files()[0].file)
    (schema, read), (same_schema, from_footer) = made["read"], made["footers"]
    assert same_schema == schema
    described_fields = (
        "file_path",
        "file_size_in_bytes",
        "record_count",
        "column_sizes",
        "value_counts",
        "null_value_counts",
        "nan_value_counts",
        "lower_bounds",
        "upper_bounds",
        "split_offsets",
    )
    assert {name: getattr(from_footer, name) for name in described_fields} == {
        name: getattr(read, name) for name in described_fields
    }
    assert from_footer.record_count == 3 and from_footer.null_value_counts


def test_a_snapshot_a_crash_left_untagged_is_tagged_not_made_twice(tmp_path, catalog_url, catalog):
    tables = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
    key = AssetKey.parse("t/crashed")
    first = version_file(tmp_path, 1, pa.table({"id": [1]}))
    tables.align(key, [1], {1: first}.__getitem__)
    second = version_file(tmp_path, 2, pa.table({"id": [2]}))
    table = tables.load(key)
    with table.transaction() as transaction:  # what a process killed before tagging leaves
        from pyiceberg.expressions import AlwaysTrue

        transaction.delete(AlwaysTrue())
        transaction.add_files(list(second.files), snapshot_properties={"custody.version": "2"})
    untagged = tables.load(key).current_snapshot().snapshot_id
    done = tables.align(key, [1, 2], {1: first, 2: second}.__getitem__)
    assert done.tagged == [2] and tables.tags(key)[2] == untagged


def test_a_version_iceberg_cannot_read_is_named_and_the_others_are_tagged(tmp_path, catalog_url, catalog):
    tables = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
    key = AssetKey.parse("t/old")
    stamps = pa.table({"at": pa.array([datetime(2026, 1, 1, tzinfo=UTC)], pa.timestamp("us", "UTC"))})
    path = tmp_path / "v=1" / "part-00000.parquet"
    path.parent.mkdir()
    pq.write_table(stamps, path, use_deprecated_int96_timestamps=True)
    versions = {1: LiveVersion(1, (f"file://{path}",), {"custody.version": "1"}), 2: version_file(tmp_path, 2, stamps)}
    done = tables.align(key, versions.keys(), versions.__getitem__)
    assert list(done.failed) == [1] and "t/old@1" in done.failed[1] and "'at'" in done.failed[1]
    assert "INT96" in done.failed[1]
    assert done.tagged == [2] and tables.load(key).current_snapshot().snapshot_id == tables.tags(key)[2]


def test_tables_can_be_switched_off_and_an_unknown_setting_is_refused(tmp_path):
    assert open_lake(Settings.from_env({"CUSTODY_HOME": str(tmp_path), "CUSTODY_TABLES": "off"})).tables is None
    with pytest.raises(InvalidInput, match="CUSTODY_TABLES=delta: expected iceberg or off"):
        Settings.from_env({"CUSTODY_HOME": str(tmp_path), "CUSTODY_TABLES": "delta"})


def test_the_cli_lists_the_tables_and_prints_the_operators_spark_settings(home, monkeypatch, capsys):
    for name, value in plain_environ(home.settings.home).items():
        monkeypatch.setenv(name, value)
    assert run(["tables", "list", "--json"]) == 0
    listed = {t["table"]: t for t in json.loads(capsys.readouterr().out)}
    assert listed["custody.sales.clients"]["tags"] == ["custody-v1", "custody-v2"]
    assert listed["custody.sales.clients"]["current"] == "custody-v2"
    assert run(["tables", "spark-conf", "--jdbc"]) == 0
    printed = capsys.readouterr().out
    assert f"spark.sql.catalog.custody.uri jdbc:sqlite:{home.settings.home / 'catalog.db'}" in printed
    assert "iceberg-spark-runtime-4.1_2.13" in printed


@pytest.mark.both_backends
def test_a_writer_whose_table_another_moved_meanwhile_starts_over_and_keeps_its_snapshots(
    tmp_path, catalog_url, catalog
):
    key = AssetKey.parse("t/moved")
    versions = {n: version_file(tmp_path, n, pa.table({"id": [n]})) for n in range(1, 5)}
    first = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
    first.align(key, [1, 2], versions.__getitem__)
    other = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")  # another host's process
    interleaved = []

    def described(number: int) -> LiveVersion:
        if not interleaved:  # the first writer has read the table; the other commits 3 and 4 now
            interleaved.append(other.align(key, [1, 2, 3, 4], versions.__getitem__))
        return versions[number]

    done = first.align(key, [1, 2, 3, 4], described)
    made = interleaved[0]
    assert made.tagged == [3, 4] and done.tagged == []
    table = first.load(key)
    assert table is not None and len(table.snapshots()) == 4
    assert first.tags(key) == {n: table.snapshot_by_name(tag_of(n)).snapshot_id for n in versions}
    assert table.current_snapshot().snapshot_id == first.tags(key)[4]
    assert [s.sequence_number for s in sorted(table.snapshots(), key=lambda s: s.sequence_number)] == [1, 2, 3, 4]


def test_two_writers_aligning_one_table_at_once_leave_every_version_tagged_once(tmp_path, catalog_url, catalog):
    key = AssetKey.parse("t/busy")
    versions = {n: version_file(tmp_path, n, pa.table({"id": [n]})) for n in range(1, 5)}
    start = threading.Barrier(2)

    def writer() -> None:  # each with a catalog of its own, as two processes have
        tables = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
        start.wait()
        tables.align(key, versions.keys(), versions.__getitem__)

    with ThreadPoolExecutor(2) as pool:
        writers = [pool.submit(writer) for _ in range(2)]
    for done in writers:
        done.result()  # what a writer raised, raised here
    tables = IcebergTables(catalog_url, f"file://{tmp_path / 'tables'}")
    table = tables.load(key)
    for number in versions:
        snapshot = table.snapshot_by_name(tag_of(number)).snapshot_id
        assert table.scan(snapshot_id=snapshot).to_arrow().to_pylist() == [{"id": number}]
    assert len(table.snapshots()) == len(versions)
