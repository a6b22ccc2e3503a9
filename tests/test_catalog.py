"""The catalog's schema: a catalog made by an earlier release is brought up to date when opened."""

from __future__ import annotations

import sqlite3

from sqlalchemy import inspect

from governance.catalog import Catalog, make_engine
from tests.graphs import add_version

ADDED_SINCE_FIRST_RELEASE = ("assurance", "label_from", "criticality", "purged_at")


def test_an_older_catalog_gains_the_new_columns_and_keeps_its_rows(settings):
    catalog = Catalog(make_engine(settings.catalog_url))
    add_version(catalog, "raw/a", 1)
    catalog.engine.dispose()
    database = settings.catalog_url.removeprefix("sqlite:///")
    with sqlite3.connect(database) as old:
        old.execute("DROP INDEX ix_version_criticality")
        for column in ADDED_SINCE_FIRST_RELEASE:
            old.execute(f"ALTER TABLE version DROP COLUMN {column}")

    upgraded = make_engine(settings.catalog_url)
    columns = {c["name"] for c in inspect(upgraded).get_columns("version")}
    assert set(ADDED_SINCE_FIRST_RELEASE) <= columns
    assert "ix_version_criticality" in {i["name"] for i in inspect(upgraded).get_indexes("version")}
    with upgraded.connect() as connection:
        row = connection.exec_driver_sql("SELECT asset_key, assurance, criticality, purged_at FROM version").one()
    assert tuple(row) == ("raw/a", "unknown", "normal", None)
