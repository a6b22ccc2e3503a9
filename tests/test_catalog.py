"""The catalog's schema and database: a catalog made by an earlier release is brought up to date
when opened, writers in several processes number versions without gaps or clashes, and a database
that cannot be reached is one clear line that never shows its password."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from sqlalchemy import inspect
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from governance import ledger
from governance.catalog import Catalog, make_engine
from governance.catalog.ledgerfilter import LedgerFilter
from governance.catalog.models import PolicySetting, VersionRow
from governance.cli import run
from governance.errors import CatalogUnavailable, NotFound
from governance.locks import file_lock_within
from governance.zones import LARGEST_NUMBER, AssetKey, VersionRef
from tests.graphs import EPOCH, add_version

WRITERS, VERSIONS_EACH = 4, 15

ADDED_SINCE_FIRST_RELEASE = ("assurance", "label_from", "criticality", "purged_at")


@pytest.mark.both_backends
def test_an_older_catalog_gains_the_new_columns_and_keeps_its_rows(settings):
    catalog = Catalog(make_engine(settings.catalog_url))
    add_version(catalog, "raw/a", 1)
    with catalog.engine.begin() as old:
        old.exec_driver_sql("DROP INDEX ix_version_criticality")
        for column in ADDED_SINCE_FIRST_RELEASE:
            old.exec_driver_sql(f"ALTER TABLE version DROP COLUMN {column}")
    catalog.engine.dispose()

    upgraded = make_engine(settings.catalog_url)
    columns = {c["name"] for c in inspect(upgraded).get_columns("version")}
    assert set(ADDED_SINCE_FIRST_RELEASE) <= columns
    assert "ix_version_criticality" in {i["name"] for i in inspect(upgraded).get_indexes("version")}
    with upgraded.connect() as connection:
        row = connection.exec_driver_sql("SELECT asset_key, assurance, criticality, purged_at FROM version").one()
    assert tuple(row) == ("raw/a", "unknown", "normal", None)


def test_a_statement_the_database_refuses_is_not_called_unavailable(catalog):
    with pytest.raises(OperationalError, match="no such table") as refused, catalog.session() as session:
        session.connection().exec_driver_sql("SELECT * FROM no_such_table")
    assert not isinstance(refused.value, CatalogUnavailable)


def test_an_unreachable_catalog_is_one_line_without_its_password(postgres, cli_env, monkeypatch, capsys):
    wrong = postgres.url("postgres").replace(postgres.password, "not-the-Pa55word")
    monkeypatch.setenv("CUSTODY_CATALOG_URL", wrong)
    assert run(["ledger", "show"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"error: the catalog at postgresql+psycopg://{postgres.user}:***@{postgres.host}:{postgres.port}/postgres is unavailable:"
    )
    assert "password authentication failed" in err and len(err.splitlines()) == 1
    assert "not-the-Pa55word" not in err


def test_a_role_that_may_only_read_the_catalog_is_told_so_in_one_line_and_pins_nothing(
    postgres, pg_url, cli_env, monkeypatch, capsys
):
    catalog = Catalog(make_engine(pg_url))  # its tables made, nothing pinned yet
    database = pg_url.rsplit("/", 1)[1]
    with catalog.engine.begin() as connection:
        for statement in (
            "CREATE ROLE reader LOGIN PASSWORD 'reader-Pa55word'",
            f'GRANT CONNECT ON DATABASE "{database}" TO reader',
            "GRANT USAGE ON SCHEMA public TO reader",
            "GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader",
        ):
            connection.exec_driver_sql(statement)
    reader = postgres.url(database).replace(f"{postgres.user}:{postgres.password}@", "reader:reader-Pa55word@")
    monkeypatch.setenv("CUSTODY_CATALOG_URL", reader)
    try:
        assert run(["settings", "show"]) == 1
    finally:
        with catalog.engine.begin() as connection:
            connection.exec_driver_sql("DROP OWNED BY reader; DROP ROLE reader")
    assert capsys.readouterr().err == (
        "error: the policy settings, which their first use pins in the catalog, could not be written: the catalog at "
        f"postgresql+psycopg://reader:***@{postgres.host}:{postgres.port}/{database} cannot be written by this "
        "process (permission denied for table policy_setting)\n"
    )
    with catalog.reading() as session:
        assert session.exec(select(PolicySetting)).all() == []


@pytest.mark.both_backends
def test_the_largest_number_a_request_may_name_is_looked_up_on_either_database_and_the_next_names_no_version(catalog):
    key = AssetKey.parse("sales/clients")
    with pytest.raises(NotFound, match="^no version sales/clients@2147483647: unknown asset sales/clients$"):
        catalog.version(VersionRef.named(key, LARGEST_NUMBER))
    assert catalog.versions_page(key, LARGEST_NUMBER, before=LARGEST_NUMBER) == []
    with catalog.reading() as session:
        asked = LedgerFilter(version=LARGEST_NUMBER, from_seq=LARGEST_NUMBER, limit=LARGEST_NUMBER)
        assert ledger.entries(session, asked) == []
    with pytest.raises(
        NotFound, match="^no version sales/clients@2147483648: a version is numbered from 1 to 2147483647$"
    ):
        VersionRef.named(key, LARGEST_NUMBER + 1)


def number_versions(url: str, writer: int) -> None:
    catalog = Catalog.from_url(url)
    key = AssetKey.parse("raw/shared")
    for i in range(VERSIONS_EACH):
        with catalog.session() as session:
            number = catalog.next_number(session, key)
            session.add(
                VersionRow(
                    asset_key=str(key),
                    number=number,
                    data_version=f"{writer}-{i}",
                    zone="landing",
                    path=f"/lake/{number}",
                    rows=1,
                    bytes=1,
                    table_schema="{}",
                    code_version="c",
                    spec_hash="s",
                    requested_by=f"w{writer}",
                    attempt_id=f"w{writer}-{i}",
                    created_at=EPOCH,
                )
            )
            ledger.append(session, actor=f"w{writer}", action="ingestion.committed", asset=str(key), version=number)


@pytest.mark.both_backends
def test_writers_in_several_processes_number_versions_without_gaps_or_clashes(settings):
    make_engine(settings.catalog_url)
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=number_versions, args=(settings.catalog_url, w)) for w in range(WRITERS)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
    assert [p.exitcode for p in writers] == [0] * WRITERS
    catalog = Catalog.from_url(settings.catalog_url)
    numbers = sorted(v.number for v in catalog.versions(AssetKey.parse("raw/shared")))
    assert numbers == list(range(1, WRITERS * VERSIONS_EACH + 1))
    with catalog.session() as session:
        assert [e.version for e in ledger.entries(session)] == list(range(1, WRITERS * VERSIONS_EACH + 1))


def test_a_reader_reads_while_a_writer_holds_the_catalog(catalog):
    with catalog.session() as writing:
        ledger.append(writing, actor="bob", action="read")
        with ThreadPoolExecutor(max_workers=1) as pool:
            # A reader in another thread sees the catalog as last committed, without waiting.
            read = pool.submit(lambda: catalog.version_count(AssetKey("sales", "clients")))
            assert read.result(timeout=5) == 0


HOLD_THE_WRITER_LOCK = """
import fcntl, os, sys, time
descriptor = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR)
fcntl.flock(descriptor, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


@contextmanager
def writer_lock_held_elsewhere(settings) -> Iterator[Callable[[], None]]:
    """Another process holding the SQLite catalog's writer lock until the function given lets it go."""
    database = settings.catalog_url.removeprefix("sqlite:///")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITER_LOCK, f"{database}-writer"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "held\n"

    def let_go() -> None:
        if holder.poll() is None and not holder.stdin.closed:
            holder.stdin.write("\n")
            holder.stdin.close()

    try:
        yield let_go
    finally:
        let_go()
        holder.wait(timeout=30)


def test_processes_writing_to_a_sqlite_catalog_take_turns_through_the_lock_file_beside_it(catalog, settings):
    with ThreadPoolExecutor(max_workers=1) as pool, writer_lock_held_elsewhere(settings) as let_go:
        writing = pool.submit(catalog.record, [ledger.Event(actor="bob", action="spec.registered")])
        time.sleep(0.5)
        assert not writing.done()  # waiting for the other process's write
        let_go()
        released = time.monotonic()
        [appended] = writing.result(timeout=30)
        assert time.monotonic() - released < 2
    assert appended.seq == 1


def test_what_a_run_reads_before_it_writes_is_read_while_another_process_writes(catalog, settings):
    """Pins, the newest version and its inputs, batches seen, marks, attempts, the ledger entry to
    checkpoint (none here): reads, which wait for no writer."""
    key = AssetKey("sales", "clients")
    reads = {
        "newest committed": lambda: catalog.newest_committed(key),
        "inputs": lambda: catalog.input_ids(1),
        "versions": lambda: list(catalog.iter_versions(key)),
        "numbers": lambda: catalog.committed_numbers(key),
        "roles": lambda: catalog.roles_of([key]),
        "batch": lambda: catalog.batch_by_id(key, "b1"),
        "fingerprints": lambda: catalog.batch_fingerprints(key),
        "batch ids": lambda: catalog.ingested_batch_ids(key),
        "mark": lambda: catalog.last_mark(key, "updated_at", "public.clients"),
        "attempts": lambda: (catalog.running_attempts(), catalog.attempt_statuses()),
        "checkpoint of the newest entry": catalog.checkpoint,
    }
    # The lock is let go before the pool waits for its thread: a read that waits fails, not hangs.
    with ThreadPoolExecutor(max_workers=1) as pool, writer_lock_held_elsewhere(settings):
        answers = {name: pool.submit(read).result(timeout=5) for name, read in reads.items()}
        with pytest.raises(NotFound):
            pool.submit(catalog.pinned, key, "run-1", EPOCH).result(timeout=5)
    assert answers == {
        "newest committed": None,
        "inputs": set(),
        "versions": [],
        "numbers": set(),
        "roles": {},
        "batch": None,
        "fingerprints": frozenset(),
        "batch ids": set(),
        "mark": None,
        "attempts": ([], {}),
        "checkpoint of the newest entry": None,
    }


def test_a_writer_lock_held_past_the_wait_is_a_timeout_naming_its_file(tmp_path):
    lock = tmp_path / "catalog.db-writer"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITER_LOCK, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    try:
        with (
            pytest.raises(TimeoutError, match="catalog.db-writer stayed locked for 0.2 s"),
            file_lock_within(lock, 0.2),
        ):
            pass
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with file_lock_within(lock, 0.2):  # its holder gone, the lock is free
        pass
