"""A home restored elsewhere works as the original did, and a copy beside its original never reads or
writes the original: the catalog keeps every location relative to its root."""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlmodel import select

from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.catalog.states import VersionStatus
from governance.config import Settings
from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCTS, drop_demo_batches
from governance.ingest import ingest
from governance.integrate import materialize
from governance.rollover import rollover
from governance.runs import RunRequest
from governance.zones import Lake
from tests.conftest import DEMO_SPECS, drop
from tests.helpers import cli

KEY = "restore-test-key"
CLIENT = {"name": "ann", "surname": "lee", "order": {"product_id": 1, "quantity": 2}, "version": "30"}
# 20 good rows and one that is not JSON: under the spec's max_bad_fraction of 5 %, so it is quarantined.
ONE_BAD_CLIENT = (json.dumps(CLIENT) + "\n") * 20 + "not json\n"


def environ(home: Path) -> dict[str, str]:
    return {
        "CUSTODY_HOME": str(home),
        "CUSTODY_SPECS": str(DEMO_SPECS),
        "CUSTODY_SPECS_APPROVAL": "off",
        "CUSTODY_LEDGER_KEY": KEY,
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory, spark, demo_specs) -> Path:
    """A home with versions, quarantined rows, ledger entries rolled into a segment, and a purge in
    progress (its version marked, its files not yet deleted)."""
    home = tmp_path_factory.mktemp("built") / "home"
    settings = Settings.from_env(environ(home))
    catalog = Catalog.from_settings(settings, environ(home))
    lake = Lake(settings.lake)
    dropped = drop_demo_batches(lake)

    def bob() -> RunRequest:
        return RunRequest(requested_by="bob")

    ingest(spark, catalog, lake, demo_specs[PRODUCTS], bob(), batch_id=dropped.products_batch)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], bob(), batch_id=dropped.client_batches[0])
    materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], bob())
    drop(lake, "sales/clients", "with-a-bad-row", {"clients.json": ONE_BAD_CLIENT.encode()}, label="30")
    quarantined = ingest(spark, catalog, lake, demo_specs[CLIENTS], bob(), batch_id="with-a-bad-row")
    assert quarantined.rows_quarantined == 1
    ingest(spark, catalog, lake, demo_specs[CLIENTS], bob(), batch_id=dropped.client_batches[1])
    assert rollover(catalog, settings.ledger_segments, timedelta(0)).entries > 0
    with catalog.session() as session:
        session.execute(
            text("UPDATE version SET status = :purging WHERE asset_key = 'sales/clients' AND number = 1"),
            {"purging": VersionStatus.PURGING.value},
        )
    return home


@pytest.fixture
def original(built, tmp_path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "original"))


def use(home: Path, monkeypatch) -> None:
    for name in ("CUSTODY_LAKE", "CUSTODY_CATALOG_URL", "CUSTODY_LEDGER_SEGMENTS", "CUSTODY_LEDGER_CHECKPOINTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ(home).items():
        monkeypatch.setenv(name, value)


def stored_locations(home: Path) -> list[str]:
    catalog = Catalog.from_settings(Settings.from_env(environ(home)), environ(home))
    with catalog.session() as session:
        rows = session.execute(
            text(
                "SELECT path FROM version UNION ALL SELECT quarantine_path FROM version "
                "WHERE quarantine_path IS NOT NULL UNION ALL SELECT path FROM source_file "
                "UNION ALL SELECT path FROM ledger_segment"
            )
        )
        return [path for (path,) in rows]


def test_the_catalog_keeps_no_absolute_location(original):
    found = stored_locations(original)
    assert found and [path for path in found if path.startswith("/")] == []


def test_a_catalog_of_absolute_locations_is_migrated_when_opened(original, tmp_path, capsys, monkeypatch):
    lake = original / "lake"
    segments = original / "ledger" / "segments"
    # As an earlier release wrote them: absolute paths, and no record of the migration.
    with sqlite3.connect(original / "catalog.db") as database:
        database.execute("UPDATE version SET path = ? || path", (f"{lake}/",))
        database.execute("UPDATE version SET quarantine_path = ? || quarantine_path", (f"{lake}/",))
        database.execute("UPDATE source_file SET path = ? || path", (f"{lake}/",))
        database.execute("UPDATE ledger_segment SET path = ? || path", (f"{segments}/",))
        database.execute("DELETE FROM catalog_migration")
    restored = Path(shutil.copytree(original, tmp_path / "restored"))
    shutil.rmtree(original)
    assert [path for path in stored_locations(restored) if path.startswith("/")] == []
    use(restored, monkeypatch)
    assert cli(capsys, "read", "sales/clients@2", "--as", "carol")[0] == 0
    assert cli(capsys, "ledger", "verify")[0] == 0


def test_a_home_restored_elsewhere_reads_repairs_materializes_purges_and_verifies(
    original, tmp_path, capsys, monkeypatch
):
    restored = tmp_path / "restored"
    shutil.copytree(original, restored)
    shutil.rmtree(original)
    use(restored, monkeypatch)

    code, out, err = cli(capsys, "read", "sales/clients@2", "--as", "carol", "--json")
    assert code == 0, err
    assert [row["name"] for row in json.loads(out)["rows"]] == ["ann"] * 20
    code, out, err = cli(capsys, "provenance", "sales/names_and_products@1", "--json")
    assert code == 0, err
    sources = [source["path"] for node in json.loads(out)["inputs"] for source in node.get("sources", [])]
    assert sources and all(path.startswith("drop/sales/") for path in sources)
    code, out, err = cli(capsys, "repair", "--verify")
    assert (code, "damaged" in out + err) == (0, False), out + err
    assert "finished an interrupted purge: sales/clients@1" in out
    assert not (restored / "lake" / "landing" / "sales" / "clients" / "v=1").exists()
    assert cli(capsys, "materialize", "sales/names_and_products", "--as", "alice")[0] == 0
    code, out, err = cli(capsys, "purge", "sales/clients@2", "--by", "alice", password="alice-demo")
    assert code == 0, err
    assert "purged sales/clients@2" in out
    assert not (restored / "lake" / "landing" / "sales" / "clients" / "v=2").exists()
    code, out, err = cli(capsys, "ledger", "verify")
    assert code == 0, out + err


def test_a_copy_beside_its_original_never_reads_or_writes_the_original(original, tmp_path, capsys, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    original_files = {path: path.read_bytes() for path in (original / "lake").rglob("*") if path.is_file()}
    # The original's data files are made unreadable as Parquet: a copy that read them would fail.
    for path in original_files:
        if path.suffix == ".parquet":
            path.write_bytes(b"not parquet")
    use(copy, monkeypatch)

    code, out, err = cli(capsys, "read", "sales/products@1", "--as", "carol", "--json")
    assert code == 0, err
    code, out, err = cli(capsys, "repair", "--verify")
    assert (code, "damaged" in out + err) == (0, False), out + err
    assert cli(capsys, "purge", "--by", "alice", password="alice-demo")[0] == 0
    assert (original / "lake" / "landing" / "sales" / "clients" / "v=1").is_dir()
    assert cli(capsys, "ledger", "verify")[0] == 0
    assert original_status("sales/clients", 1, original) == VersionStatus.PURGING.value


def original_status(asset: str, number: int, home: Path) -> str:
    catalog = Catalog.from_settings(Settings.from_env(environ(home)), environ(home))
    with catalog.session() as session:
        [row] = session.exec(select(VersionRow).where(VersionRow.asset_key == asset, VersionRow.number == number))
        return row.status
