"""Assertions shared by tests."""

from __future__ import annotations

from sqlmodel import select

from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.zones import AssetKey, Lake, Zone


def assert_nothing_committed(catalog: Catalog, lake: Lake, asset: str) -> None:
    """No version in the catalog, no version folder on disk, no staging left behind."""
    key = AssetKey.parse(asset)
    assert catalog.versions(key) == []
    for zone in (Zone.LANDING, Zone.INTEGRATION, Zone.QUARANTINE):
        assert lake.version_dirs(zone, key) == {}, f"unexpected folders in {zone}"
    assert lake.staging_attempts() == []


def all_versions(catalog: Catalog) -> list[VersionRow]:
    with catalog.session() as session:
        return list(session.exec(select(VersionRow)))
