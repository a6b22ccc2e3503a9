"""A PostgreSQL catalog that stops in the middle of an ingestion: the CLI says whether the version was
committed, or that it cannot know when the connection went during the commit itself, and a step whose
commit may have happened is never run again; repair then says which it was."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from assets.launch import instance_for
from governance import ledger
from governance.catalog import Catalog
from governance.demo import drop_demo_batches
from governance.zones import AssetKey, Lake
from tests.commit_cutter import commit_cutter
from tests.helpers import cli
from tests.pg_server import PostgresServer, running_postgres

PRODUCTS = "sales/products"
DATABASE = "catalog"
SECONDS = 300
# Read from the ledger: the version table may be the one the test holds locked.
COMMITTED = f"SELECT count(*) FROM ledger WHERE action = '{ledger.Action.INGESTION_COMMITTED}'"
# What the transaction that commits a version, and no other, sends.
VERSION_ROW = b"INSERT INTO version ("
UNKNOWN = f"while committing {PRODUCTS}@1: whether it was committed is unknown until the catalog answers again"


@dataclass(frozen=True)
class Catalogued:
    server: PostgresServer
    url: str


@pytest.fixture
def on_postgres(cli_env, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalogued]:
    """The CLI's catalog on a PostgreSQL server of this test's own, which it may stop; the demo batches dropped."""
    with running_postgres() as server:
        url = server.create_database(DATABASE)
        monkeypatch.setenv("CUSTODY_CATALOG_URL", url)
        Catalog.from_url(url)  # its tables, so that the test can lock one before the run starts
        drop_demo_batches(Lake(cli_env.lake))
        yield Catalogued(server, url)


def connect(server: PostgresServer) -> psycopg.Connection:
    return psycopg.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, dbname=DATABASE
    )


def wait_for(check, what: str) -> None:
    deadline = time.monotonic() + SECONDS
    while not check():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


def blocked(watcher: psycopg.Connection) -> bool:
    """Whether a session of the run waits for the test's lock."""
    found = watcher.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'", (DATABASE,)
    ).fetchone()
    return bool(found and found[0])


def count(watcher: psycopg.Connection, query: str) -> int:
    found = watcher.execute(query).fetchone()
    return found[0] if found else 0


class Stopper(threading.Thread):
    """Holds an exclusive lock on `table` once `ready` finds a row, waits until the run waits for it,
    notes how many versions were committed then, and stops PostgreSQL."""

    def __init__(self, server: PostgresServer, table: str, ready: str):
        super().__init__(daemon=True)
        self.server, self.table, self.ready = server, table, ready
        self.versions_at_stop: int | None = None
        self.problem: BaseException | None = None

    def run(self) -> None:
        watcher, holder = connect(self.server), connect(self.server)
        watcher.autocommit = True
        watcher.execute("SET lock_timeout = '10s'")  # the test's own queries never wait for its lock
        try:
            wait_for(lambda: count(watcher, self.ready) > 0, f"saw {self.ready}")
            holder.execute(f"LOCK TABLE {self.table} IN ACCESS EXCLUSIVE MODE")
            wait_for(lambda: blocked(watcher), f"blocked the run on {self.table}")
            self.versions_at_stop = count(watcher, COMMITTED)
            self.server.stop()
        except BaseException as err:  # noqa: BLE001 (raised again by the test, in its own thread)
            self.problem = err
        finally:
            watcher.close()
            holder.close()


def ingest_while_stopping(capsys, stopper: Stopper) -> tuple[int, str]:
    stopper.start()
    code, _, err = cli(capsys, "ingest", PRODUCTS, "--as", "bob")
    stopper.join(SECONDS)
    if stopper.problem:
        raise stopper.problem
    stopper.server.start()
    return code, err


def step_events(settings) -> list[str]:
    instance = instance_for(settings)
    [run] = instance.get_runs(limit=1)
    return [e.dagster_event.event_type_value for e in instance.all_logs(run.run_id) if e.dagster_event]


def test_a_catalog_lost_before_the_commit_says_nothing_was_committed_and_repair_rolls_the_attempt_back(
    on_postgres: Catalogued, capsys
):
    # Once the attempt has started, the version table is next read seconds of Spark work later: to
    # compare the batch's files with those ingested before, then by the commit.
    stopper = Stopper(on_postgres.server, "version", "SELECT count(*) FROM attempt WHERE status = 'running'")
    code, err = ingest_while_stopping(capsys, stopper)
    assert stopper.versions_at_stop == 0
    assert code == 1
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {PRODUCTS}: the catalog at ") and "***" in line
    assert line.endswith("; nothing was committed; custody repair rolls the attempt back"), err
    assert on_postgres.server.password not in err
    assert cli(capsys, "repair")[0] == 0
    catalog = Catalog.from_url(on_postgres.url)
    assert catalog.versions(AssetKey.parse(PRODUCTS)) == []
    with catalog.session() as session:
        rolled = ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.ATTEMPT_ROLLED_BACK))
    assert [entry.asset_key for entry in rolled] == [PRODUCTS]


def test_a_catalog_lost_after_the_commit_names_the_committed_version_and_the_step_is_not_retried(
    on_postgres: Catalogued, cli_env, capsys
):
    # relational_read: a batch's commit never writes it, and the run reads it first after the commit,
    # for the version's column lineage.
    stopper = Stopper(on_postgres.server, "relational_read", "SELECT 1")
    code, err = ingest_while_stopping(capsys, stopper)
    assert stopper.versions_at_stop == 1
    assert code == 1
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {PRODUCTS}: {PRODUCTS}@1 was committed; the catalog became unreachable afterwards")
    assert "STEP_UP_FOR_RETRY" not in step_events(cli_env)
    assert [row.number for row in Catalog.from_url(on_postgres.url).versions(AssetKey.parse(PRODUCTS))] == [1]


def ingest_cut_at_the_commit(on_postgres: Catalogued, capsys, monkeypatch, *, after_commit: bool) -> tuple[int, str]:
    server = on_postgres.server
    with commit_cutter(server.host, server.port, VERSION_ROW, after_commit=after_commit) as cutter:
        monkeypatch.setenv("CUSTODY_CATALOG_URL", on_postgres.url.replace(f":{server.port}/", f":{cutter.port}/"))
        code, _, err = cli(capsys, "ingest", PRODUCTS, "--as", "bob")
        assert cutter.cut.is_set()
    monkeypatch.setenv("CUSTODY_CATALOG_URL", on_postgres.url)
    return code, err


def test_a_commit_whose_answer_is_lost_says_its_outcome_is_unknown_and_repair_finds_it_committed(
    on_postgres: Catalogued, cli_env, capsys, monkeypatch
):
    code, err = ingest_cut_at_the_commit(on_postgres, capsys, monkeypatch, after_commit=True)

    assert code == 1
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert UNKNOWN in line and "nothing was committed" not in line, err
    assert "STEP_UP_FOR_RETRY" not in step_events(cli_env)
    code, out, _ = cli(capsys, "repair", "--verify")
    assert code == 0, out
    assert f"recorded in Dagster: {PRODUCTS}@1" in out and "rolled back" not in out
    assert [row.number for row in Catalog.from_url(on_postgres.url).versions(AssetKey.parse(PRODUCTS))] == [1]


def test_a_commit_cut_before_it_reached_the_catalog_says_its_outcome_is_unknown_and_repair_rolls_it_back(
    on_postgres: Catalogued, cli_env, capsys, monkeypatch
):
    code, err = ingest_cut_at_the_commit(on_postgres, capsys, monkeypatch, after_commit=False)

    assert code == 1
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert UNKNOWN in line, err
    code, out, _ = cli(capsys, "repair")
    assert code == 0, out
    assert f"rolled back: {PRODUCTS} attempt" in out and "recorded in Dagster" not in out
    assert Catalog.from_url(on_postgres.url).versions(AssetKey.parse(PRODUCTS)) == []
    assert not (cli_env.lake / "landing" / "sales" / "products").exists() or not any(
        (cli_env.lake / "landing" / "sales" / "products").iterdir()
    )
