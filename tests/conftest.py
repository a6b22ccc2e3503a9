"""Shared fixtures: one SparkSession per test run; every test gets its own lake and catalog in tmp_path."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from pyspark.sql import SparkSession
from sqlmodel import select

from governance import ledger
from governance.batches import READY_MARKER, BatchMeta, drop_batch
from governance.catalog import Catalog, make_engine
from governance.catalog.models import VersionRow
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.demo import (
    CLIENTS,
    NAMES_AND_PRODUCTS,
    PRODUCT_SUMMARY,
    PRODUCTS,
    DemoRound,
    drop_demo_batches,
)
from governance.runs import RunRequest, os_user
from governance.runtime import require_java
from governance.spec import SpecSet, load_specs
from governance.zones import AssetKey, Lake
from resources import CustodyResource, SparkResource
from resources.spark import session_conf
from tests.helpers import run_proven
from tests.openlineage_spec import read_events
from tests.pg_server import PostgresServer, running_postgres
from tests.spark_cluster import SparkCluster, running_cluster

if TYPE_CHECKING:
    from governance.streams.local import LocalBroker

pytest_plugins = ["tests.dagster_servers"]

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
DEMO_SPECS = ROOT / "assets" / "specs"
TEST_SPECS = DATA / "specs"

T = TypeVar("T")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Each phase's report on its test (`rep_setup`, `rep_call`), for fixtures that keep evidence of a failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# The modules whose tests share a set-up made once per module or session. `make test` runs the tests
# on several workers (pytest-xdist, --dist loadgroup); each of these modules runs on one of them.
SHARED_SETUP = {
    "test_spark_cluster.py": "a standalone cluster and the demo run on it",
    "test_restore.py": "a home built for the module",
    "test_feeds.py": "an S3-compatible server",
    "test_object_lake.py": "an S3-compatible server and the demo landed in it",
    "test_access_ldap.py": "a slapd",
    "test_directory.py": "a slapd",
    "test_column_lineage.py": "the tables written for the module",
    "test_ui.py": "a service without Dagster's daemon, and one with it",
    "test_browser.py": "a service with Dagster's daemon, on the demo's first versions",
    "test_signin_attacks.py": "a service on the file directory, and one on a slapd",
    "test_streams_access.py": "a Kafka broker",
    "test_streams_landing.py": "a Kafka broker",
}


# The modules with the longest tests (a cluster, Dagster's servers, a browser, child processes). They
# run first, so that xdist's workers share out the short tests at the end and finish together.
LONGEST_FIRST = (
    "test_spark_cluster.py",
    "test_ui.py",
    "test_browser.py",
    "test_ui_console.py",
    "test_feeds_cli.py",
    "test_dagster_postgres.py",
    "test_crash.py",
    "test_object_lake.py",
    "test_streams_landing.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SHARED_SETUP:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """pytest-xdist keeps a group on one worker by writing the group into its tests' node ids; under a
    pytest where that no longer takes (pytest-xdist#1386), each worker would make every shared set-up."""
    if node.config.getoption("dist") != "loadgroup":
        return
    spread = [nodeid for nodeid in ids if Path(nodeid.split("::")[0]).name in SHARED_SETUP and "@" not in nodeid]
    if spread:
        raise pytest.UsageError(
            f"pytest-xdist did not group {spread[0]} with the tests it shares its set-up with: "
            "this pytest and pytest-xdist's --dist loadgroup do not work together (pytest-xdist#1386)"
        )


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    require_java()
    builder = SparkSession.builder
    # Iceberg's runtime too, for the tests that read the versions' table snapshots with Spark.
    jars = tuple(str(jar) for jar in Settings.from_env({}).table_jars())
    for key, value in session_conf("local[2]", jars=jars).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()


# Spark's JVMs in the processes a test starts (the CLI, Dagster's run workers) each live for one
# command: compiling for peak speed and collecting garbage on many threads cost them seconds they
# never earn back. The test process's own session, started first, keeps the JVM's defaults.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def quick_spark_environ() -> dict[str, str]:
    """The variables that give Spark's JVMs in child processes QUICK_JVM: for a server a module's tests
    share, started before any test's own environment is set."""
    return {
        variable: f"{os.environ.get(variable, '')} {QUICK_JVM}".strip()
        for variable in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS")  # Spark's driver, and the launcher before it
    }


@pytest.fixture(autouse=True)
def quick_spark_in_child_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, value in quick_spark_environ().items():
        monkeypatch.setenv(variable, value)


@pytest.fixture(autouse=True)
def specs_taken_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests of other features run on spec files without an owner applying them first; the tests of
    approval (test_specs_approval.py) turn it on."""
    monkeypatch.setenv("CUSTODY_SPECS_APPROVAL", "off")


@pytest.fixture(autouse=True)
def openlineage_events_follow_the_spec(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every OpenLineage event a test's file transport wrote under its tmp_path is validated after it."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp:
        events_follow_the_spec(tmp)


def events_follow_the_spec(folder: Path) -> None:
    """Every OpenLineage event a file transport wrote under `folder` is valid."""
    for path in folder.rglob("events.jsonl"):
        read_events(path)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="module")
def kafka() -> Iterator[LocalBroker]:
    """A single-node Kafka broker for a module's tests, stopped after them: idle, it still takes a
    share of a core."""
    from tests.kafka_server import running_kafka  # Kafka's client, for these tests alone

    with running_kafka() as broker:
        yield broker


STREAM_SPEC = """\
description: Clicks on the shop's pages, streamed by its web servers.
roles: {owner: sales-owners, producer: sales-producers, consumer: sales-consumers}
zone: landing
source: {format: kafka, topic: TOPIC, partitions: PARTITIONS, records: RECORDS, land_after: LAND_AFTER}
bad_rows: quarantine
max_bad_fraction: 1.0
"""


@pytest.fixture
def stream(request: pytest.FixtureRequest, kafka: LocalBroker, catalog: Catalog, tmp_path: Path):
    """sales/clicks, in tmp_path/specs, on a topic of the test's own, created with its ACLs as
    applying it would."""
    from governance.access.directory import FileDirectory
    from governance.streams.broker import KafkaAdmin
    from governance.streams.topics import keep_in_step
    from tests.kafka_server import settings_of

    def made(partitions: int = 2, records: str = "json", land_after: int = 10_000, more: str = ""):
        folder = tmp_path / "specs" / "sales"
        folder.mkdir(parents=True)
        topic = f"landing.{request.node.name.removeprefix('test_')[:40]}"
        body = (
            STREAM_SPEC.replace("TOPIC", topic)
            .replace("PARTITIONS", str(partitions))
            .replace("RECORDS", records)
            .replace("LAND_AFTER", str(land_after))
        ) + more
        (folder / "clicks.yaml").write_text(body, encoding="utf-8")
        spec = next(iter(load_specs(folder.parent, transform_packages=("assets.transforms",))))
        admin = KafkaAdmin(settings_of(kafka))
        directory = FileDirectory.load(ROOT / "assets" / "directory.yaml")
        keep_in_step(catalog, admin, directory, [spec], actor="alice", assurance="verified", because="apply")
        return spec, topic

    return made


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkCluster]:
    """A standalone master and two workers, started once for the tests that need a cluster."""
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(postgres: PostgresServer) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test, dropped after it."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield postgres.create_database(name)
    postgres.drop_database(name)


@pytest.fixture
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """SQLite in tmp_path; tests marked `both_backends` run once more on a fresh PostgreSQL database."""
    backend = getattr(request, "param", "sqlite")
    if backend == "postgresql":
        return request.getfixturevalue("pg_url")
    return Settings.under(tmp_path / "home").catalog_url


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_backends") and "catalog_url" in metafunc.fixturenames:
        metafunc.parametrize("catalog_url", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def settings(tmp_path: Path, catalog_url: str) -> Settings:
    return without_approval(replace(Settings.under(tmp_path / "home", specs=DEMO_SPECS), catalog_url=catalog_url))


def without_approval(settings: Settings) -> Settings:
    return replace(settings, specs_approval="off", explicit=settings.explicit | {"specs_approval"})


@pytest.fixture
def catalog(settings: Settings) -> Catalog:
    return Catalog(make_engine(settings.catalog_url), segments=settings.ledger_segments)


@pytest.fixture
def lake(settings: Settings) -> Lake:
    return Lake(settings.lake)


@pytest.fixture(scope="session")
def demo_specs() -> SpecSet:
    return load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)


@pytest.fixture(scope="session")
def test_specs() -> SpecSet:
    return load_specs(TEST_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)


@pytest.fixture
def pipeline(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    demo_specs: SpecSet,
    settings: Settings,
    tmp_path: Path,
    prepared: Prepared,
) -> DemoRound:
    """products@1, clients@1, names_and_products@1 and product_summary@1, each with its column lineage, made for bob."""
    if not (catalog_in_home(settings) and only_an_empty_catalog(catalog, settings.home)):
        return run_pipeline(spark, catalog, lake, demo_specs)
    catalog.engine.dispose()  # it opens the copy from now on
    shutil.rmtree(settings.home)

    def in_a_home_of_its_own(folder: Path) -> DemoRound:
        home = Settings.under(folder / settings.home.name)
        engine = make_engine(home.catalog_url)
        try:
            return run_pipeline(spark, Catalog(engine, segments=home.ledger_segments), Lake(home.lake), demo_specs)
        finally:
            engine.dispose()

    return prepared.files("pipeline", tmp_path, in_a_home_of_its_own)


def only_an_empty_catalog(catalog: Catalog, home: Path) -> bool:
    """Whether the home holds nothing but the catalog the `catalog` fixture made, with no entry and no version."""
    with catalog.session() as session:
        empty = ledger.last_entry(session) is None and session.exec(select(VersionRow)).first() is None
    return empty and {path.name for path in home.iterdir()} <= {
        "catalog.db",
        "catalog.db-wal",
        "catalog.db-shm",
        "catalog.db-writer",
    }


def run_pipeline(spark: SparkSession, catalog: Catalog, lake: Lake, demo_specs: SpecSet) -> DemoRound:
    from governance.ingest import ingest
    from governance.integrate import materialize

    def bob() -> RunRequest:  # a request of its own for each step: a run pins the versions there are when it starts
        return RunRequest(requested_by="bob")

    dropped = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], bob(), batch_id=dropped.products_batch)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], bob(), batch_id=dropped.client_batches[0])
    materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], bob())
    materialize(spark, catalog, lake, demo_specs[PRODUCT_SUMMARY], bob())
    return dropped


# The second sales/clients version of `land_demo`, by its run and code, for the snapshot summary's test.
BOB = RunRequest(requested_by="bob", run_id="run-7", code_version="code-3")


def land_demo(spark: SparkSession, catalog: Catalog, lake: Lake, demo_specs: SpecSet) -> list[VersionRow]:
    """The demo's four assets, and a second version of sales/clients, for bob."""
    from governance.ingest import ingest

    dropped = run_pipeline(spark, catalog, lake, demo_specs)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], BOB, batch_id=dropped.client_batches[1])
    with catalog.session() as session:
        return sorted(session.exec(select(VersionRow)), key=lambda row: (row.asset_key, row.number))


@pytest.fixture
def resources(settings: Settings, spark: SparkSession) -> dict:
    custody = CustodyResource(
        home=str(settings.home), catalog_url=settings.catalog_url, specs_approval=settings.specs_approval
    )
    return {"custody": custody, "spark": SparkResource()}


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Point the CLI's environment at this test's home."""
    monkeypatch.setenv("CUSTODY_HOME", str(settings.home))
    monkeypatch.setenv("CUSTODY_SPECS", str(settings.specs))
    monkeypatch.delenv("CUSTODY_LAKE", raising=False)
    monkeypatch.setenv("CUSTODY_CATALOG_URL", settings.catalog_url)
    return settings


@pytest.fixture
def folders_made_by_bob(cli_env: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS user running the tests, who makes every DropZone folder, is bob (a producer) in the
    directory: the mapping every process of the test's home pins at its first use."""
    monkeypatch.setenv("CUSTODY_OS_USERS", f"{os_user()}=bob")


def drop(lake: Lake, asset: str, batch_id: str, files: dict[str, bytes | Path], **meta: str) -> Path:
    """Drop a ready batch; Path values are copied from tests/data."""
    content = {name: value.read_bytes() if isinstance(value, Path) else value for name, value in files.items()}
    return drop_batch(lake, AssetKey.parse(asset), batch_id, content, BatchMeta(**meta) if meta else None)


def custody_environ() -> dict[str, str]:
    """The variables a home's commands read from the environment."""
    return {name: value for name, value in os.environ.items() if name.startswith(("CUSTODY_", "DAGSTER_"))}


def plain_environ(home: Path) -> dict[str, str]:
    """What cli_env and the autouse fixtures set for a home of their own, and nothing more."""
    return {
        "CUSTODY_HOME": str(home),
        "CUSTODY_SPECS": str(DEMO_SPECS),
        "CUSTODY_CATALOG_URL": Settings.under(home).catalog_url,
        "CUSTODY_SPECS_APPROVAL": "off",
    }


class Prepared:
    """What fixtures make for many tests, made once per session and copied into each test's tmp_path:
    a home keeps every location relative to itself, so a copy works as what it was copied from. A test
    that holds something already where the copy would go, or whose environment is not a plain one,
    gets it made in place: a copy would not be what it had before."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[str, Any] = {}

    def files(self, name: str, into: Path, build: Callable[[Path], T]) -> T:
        """What `build` makes in a folder, and returns: copied into `into`, from a folder it made once."""
        prepared = self.root / name
        if not prepared.exists():
            try:
                self.made[name] = build(prepared)
            except BaseException:
                shutil.rmtree(prepared, ignore_errors=True)
                raise
        if any((into / made.name).exists() for made in prepared.iterdir()):
            return build(into)
        shutil.copytree(prepared, into, dirs_exist_ok=True)
        # A checkpoint file was last written as the build ended: for what comes next, just now.
        for checkpoints in prepared.rglob("checkpoints.jsonl"):
            os.utime(into / checkpoints.relative_to(prepared))
        # A copied batch's files changed after its `_READY`, as they were copied: marked ready again,
        # keeping the modification time that orders the batches.
        for ready in prepared.rglob(READY_MARKER):
            copied = into / ready.relative_to(prepared)
            os.utime(copied, ns=(copied.stat().st_atime_ns, copied.stat().st_mtime_ns))
        return self.made[name]

    def home(self, settings: Settings, name: str, build: Callable[[Settings], None]) -> None:
        """What `build` makes with the CLI in the home that cli_env points the environment at."""
        if custody_environ() != plain_environ(settings.home):
            build(settings)
            return

        def in_plain_environ(folder: Path) -> None:
            with pytest.MonkeyPatch.context() as monkeypatch:
                for variable in custody_environ():
                    monkeypatch.delenv(variable)
                for variable, value in plain_environ(folder / settings.home.name).items():
                    monkeypatch.setenv(variable, value)
                build(Settings.from_env())

        self.files(name, settings.home.parent, in_plain_environ)


def catalog_in_home(settings: Settings) -> bool:
    """Whether the catalog is the home's SQLite file, which a copy of the home carries."""
    return settings.catalog_url == Settings.under(settings.home).catalog_url


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    return Prepared(tmp_path_factory.mktemp("prepared"))


@pytest.fixture
def landed(cli_env: Settings, spark: SparkSession, capsys: pytest.CaptureFixture[str], prepared: Prepared) -> Settings:
    """The demo batches dropped, and the products batch ingested by bob through the CLI."""
    prepared.home(cli_env, "landed", land_products)
    capsys.readouterr()  # the test reads only what its own commands print
    return cli_env


def land_products(settings: Settings) -> None:
    drop_demo_batches(Lake(settings.lake))
    assert run_proven(["ingest", "sales/products", "--as", "bob"]) == 0
