"""Shared fixtures: one SparkSession per test run; every test gets its own lake and catalog in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from governance.batches import BatchMeta, drop_batch
from governance.catalog import Catalog, make_engine
from governance.config import Settings
from governance.runtime import require_java
from governance.spec import SpecSet, load_specs
from governance.zones import AssetKey, Lake
from resources import CustodyResource, SparkResource
from resources.spark import session_conf

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
DEMO_SPECS = ROOT / "assets" / "specs"
TEST_SPECS = DATA / "specs"


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    require_java()
    builder = SparkSession.builder
    for key, value in session_conf("local[2]").items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.under(tmp_path / "home", specs=DEMO_SPECS)


@pytest.fixture
def catalog(settings: Settings) -> Catalog:
    return Catalog(make_engine(settings.catalog_url))


@pytest.fixture
def lake(settings: Settings) -> Lake:
    return Lake(settings.lake)


@pytest.fixture(scope="session")
def demo_specs() -> SpecSet:
    return load_specs(DEMO_SPECS)


@pytest.fixture(scope="session")
def test_specs() -> SpecSet:
    return load_specs(TEST_SPECS)


@pytest.fixture
def resources(settings: Settings, spark: SparkSession) -> dict:
    return {"custody": CustodyResource(home=str(settings.home)), "spark": SparkResource()}


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Point the CLI's environment at this test's home."""
    monkeypatch.setenv("CUSTODY_HOME", str(settings.home))
    monkeypatch.setenv("CUSTODY_SPECS", str(settings.specs))
    monkeypatch.delenv("CUSTODY_LAKE", raising=False)
    monkeypatch.delenv("CUSTODY_CATALOG_URL", raising=False)
    return settings


def drop(lake: Lake, asset: str, batch_id: str, files: dict[str, bytes | Path], **meta: str) -> Path:
    """Drop a ready batch; Path values are copied from tests/data."""
    content = {name: value.read_bytes() if isinstance(value, Path) else value for name, value in files.items()}
    return drop_batch(lake, AssetKey.parse(asset), batch_id, content, BatchMeta(**meta) if meta else None)
