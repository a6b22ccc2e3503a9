"""A lake that cannot be written (mounted read-only) fails each command in one line naming what could
not be written, and every refused request is in the ledger with its reason."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from governance import ledger
from tests.helpers import cli, recorded


@pytest.fixture
def read_only_lake(landed) -> Iterator[None]:
    """The home of `landed` (the demo batches dropped, sales/products ingested) with its lake bound
    read-only onto itself: a real read-only file system (binding needs root, which the tests run as)."""
    lake = str(landed.lake)
    subprocess.run(["mount", "--bind", lake, lake], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", lake], check=True)
        yield
    finally:
        subprocess.run(["umount", "--lazy", lake], check=True)


def test_an_ingestion_fails_in_one_line_and_the_ledger_has_its_failure(landed, read_only_lake, capsys):
    code, _, err = cli(capsys, "ingest", "sales/clients", "--as", "bob")

    assert code == 1
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: sales/clients: cannot write the lock file {landed.lake}/_staging/")
    assert line.endswith("(Read-only file system)") and "Traceback" not in err
    [failed] = recorded(action=ledger.Action.INGESTION_FAILED, asset="sales/clients")
    assert failed["actor"] == "bob" and "Read-only file system" in failed["details"]["error"]


def test_repair_fails_in_one_line_naming_what_it_could_not_write(landed, read_only_lake, capsys):
    code, _, err = cli(capsys, "repair")

    assert code == 1 and "Traceback" not in err
    assert err.strip() == (
        f"error: cannot write the lock file {landed.lake}/_tables/_locks/sales.products.lock (Read-only file system)"
    )
