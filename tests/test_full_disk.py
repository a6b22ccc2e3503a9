"""A lake whose file system fills up during an ingestion: one line says so, and the ledger keeps a
short reason, never a stack trace."""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assets.launch import instance_for
from governance import ledger
from governance.api import PASSWORD_VARIABLE
from governance.catalog import Catalog
from governance.demo import demo_password
from governance.zones import Lake
from tests.conftest import ROOT, drop
from tests.helpers import assert_nothing_committed

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
