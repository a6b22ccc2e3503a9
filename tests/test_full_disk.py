"""A home whose file system fills up: an ingestion fails in one line that says so (and, when only
Dagster's storage could not be written, what the run committed), the ledger keeps a short reason,
never a stack trace, and the catalog is still read: versions, provenance, `ledger verify`."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

import governance.ingest as ingest_module
from assets.launch import instance_for
from governance import ledger
from governance.api import PASSWORD_VARIABLE
from governance.catalog import Catalog
from governance.cli.ledger import UNVERIFIED
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.zones import Lake
from tests.conftest import DEMO_SPECS, ROOT, drop
from tests.helpers import assert_nothing_committed, cli

PRODUCTS = "sales/products"
# Room left on the lake once the batch is in: a few lock and metadata files, not its Parquet.
ROOM_LEFT = 64 * 1024


@pytest.fixture
def small_lake(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs mounted as the lake: a real file system that fills up (mounting needs root,
    which the tests run as)."""
    folder = tmp_path / "lake"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def incompressible_products(rows: int) -> bytes:
    """Product names of random letters, so that their Parquet takes about the room of the CSV."""
    draw = random.Random(7)
    lines = ["product_id,product_name,category,unit_price"]
    lines += [f"p{i},{''.join(draw.choices(string.ascii_letters, k=40))},home,{i % 100}.50" for i in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def fill(folder: Path, leave: int) -> None:
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    (folder / "filler").write_bytes(b"\0" * (free - leave))


def test_a_full_lake_fails_the_ingestion_in_one_line_naming_the_lake_and_the_ledger_keeps_no_trace(
    cli_env, small_lake: Path
):
    drop(Lake(small_lake), PRODUCTS, "b1", {"products.csv": incompressible_products(20_000)})
    fill(small_lake, ROOM_LEFT)
    done = subprocess.run(
        [sys.executable, "-c", "from governance.command import main; main()", "ingest", PRODUCTS, "--as", "bob"],
        cwd=ROOT,
        env={**os.environ, "CUSTODY_LAKE": str(small_lake), PASSWORD_VARIABLE: demo_password("bob")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower() or "exception" in line.lower()]
    assert errors == [f"error: {PRODUCTS}: no space left on device writing {small_lake}"], done.stderr
    assert "\tat " not in done.stderr and "Caused by" not in done.stderr and "Traceback" not in done.stderr
    catalog = Catalog.from_url(cli_env.catalog_url)
    with catalog.session() as session:
        [failed] = ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.INGESTION_FAILED))
    details = json.loads(failed.details)
    assert details["error"] == f"no space left on device writing {small_lake}"
    assert "\tat " not in failed.details
    assert "No space left on device" in step_failure_trace(cli_env), "the run's log keeps the trace"
    (small_lake / "filler").unlink()
    assert_nothing_committed(catalog, Lake(small_lake), PRODUCTS)


def step_failure_trace(settings) -> str:
    """The error of the newest run's failed step, with its causes, as Dagster's event log keeps it."""
    instance = instance_for(settings)
    [run] = instance.get_runs(limit=1)
    [failure] = [
        e.dagster_event for e in instance.all_logs(run.run_id) if e.dagster_event and e.dagster_event.is_step_failure
    ]
    return failure.step_failure_data.error.to_string()


@pytest.fixture
def small_dagster_home(cli_env, tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """Dagster's storage on a 16 MB tmpfs of its own, which the test fills."""
    folder = tmp_path / "dagster"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], check=True)
    monkeypatch.setenv("DAGSTER_HOME", str(folder))
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def test_dagster_s_storage_filling_after_the_commit_says_what_was_committed_and_repair_agrees(
    cli_env, small_dagster_home: Path, monkeypatch, capsys
):
    drop_demo_batches(Lake(cli_env.lake))
    committing = ingest_module.commit

    def commit_then_fill(*args, **kwargs):
        committed = committing(*args, **kwargs)
        fill(small_dagster_home, 0)
        return committed

    monkeypatch.setattr(ingest_module, "commit", commit_then_fill)

    code, _, err = cli(capsys, "ingest", PRODUCTS, "--as", "bob")

    assert code == 1 and "Traceback" not in err, err
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: Dagster's storage under {small_dagster_home} failed: ")
    assert f"committed {PRODUCTS}@1, which `custody repair` records in Dagster" in line
    (small_dagster_home / "filler").unlink()
    code, out, _ = cli(capsys, "repair")
    assert code == 0, out
    assert f"recorded in Dagster: {PRODUCTS}@1" in " ".join(out.split())
    instance = instance_for(Settings.from_env())
    [run] = instance.get_runs(limit=1)
    assert run.status == dg.DagsterRunStatus.FAILURE


@pytest.fixture
def full_home(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """A home on a 64 MB tmpfs of its own, sales/products ingested, its catalog closed as the last
    process to use it leaves it (its write-ahead log checkpointed and gone), then the file system
    filled to the last byte."""
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(home)], check=True)
    try:
        for name in ("CUSTODY_LAKE", "CUSTODY_CATALOG_URL", "DAGSTER_HOME"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("CUSTODY_HOME", str(home))
        monkeypatch.setenv("CUSTODY_SPECS", str(DEMO_SPECS))
        drop_demo_batches(Lake(home / "lake"))
        assert custody("ingest", PRODUCTS, "--as", "bob").returncode == 0
        with sqlite3.connect(home / "catalog.db") as database:
            database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        database.close()
        for left in ("catalog.db-wal", "catalog.db-shm"):
            (home / left).unlink(missing_ok=True)
        fill(home, 0)
        yield home
    finally:
        subprocess.run(["umount", "--lazy", str(home)], check=True)


def custody(*args: str, user: str = "bob") -> subprocess.CompletedProcess:
    """`custody ARGS` in a process of its own, as a user at a shell runs it."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("custody")), *args],
        cwd=ROOT,
        env={**os.environ, PASSWORD_VARIABLE: demo_password(user)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(
    "command",
    [("versions", PRODUCTS), ("provenance", f"{PRODUCTS}@1"), ("catalog",), ("impact", f"{PRODUCTS}@1")],
)
def test_the_catalog_is_read_on_a_full_file_system(full_home: Path, command: tuple[str, ...]):
    done = custody(*command)

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_the_ledger_verifies_on_a_full_file_system(full_home: Path):
    done = custody("ledger", "verify")

    assert "chain intact" in done.stdout and done.returncode == UNVERIFIED, done.stdout + done.stderr


def test_a_read_it_cannot_record_is_refused_in_one_line_naming_the_full_file_system(full_home: Path):
    done = custody("read", PRODUCTS, "--as", "carol", user="carol")

    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (
        f"error: the catalog at sqlite:///{full_home}/catalog.db cannot be written: the file system of {full_home} "
        "has no room left (disk I/O error)"
    )
