"""Which spec files wait for an owner's approval, as the code location shows them at every load.

Read with Python's sqlite3 for a SQLite catalog, else SQLAlchemy Core: the catalog's SQLModel
tables would cost each load most of a second to import, SQLAlchemy a third of one. What is read is
shown, not enforced (runs are decided at submission), so a catalog that cannot be read leaves the
assets unmarked.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from governance.config import OFF
from governance.errors import CatalogUnavailable, error_summary
from governance.spec import SpecSet
from governance.zones import AssetKey

# The catalog's tables as governance.catalog.models defines them: `asset` holds the specs in force.
IN_FORCE = "SELECT key, spec_hash FROM asset"
APPROVAL = "SELECT value FROM policy_setting WHERE key = 'specs_approval'"
SQLITE = "sqlite:///"


def pending_reason(key: AssetKey, hash_in_force: str | None) -> str:
    """Why a run of `key` is refused while its file is not the definition in force."""
    if hash_in_force is None:
        return f"{key} has no definition in force yet: an owner must apply its spec with `custody specs apply {key} --as OWNER`"
    return (
        f"the spec file of {key} differs from its definition in force ({hash_in_force[:12]}): "
        f"an owner must apply it with `custody specs apply {key} --as OWNER`"
    )


def awaiting(catalog_url: str, specs: SpecSet, default: str) -> dict[AssetKey, str]:
    """With approval on (as pinned in the catalog, else `default`), each asset whose spec file is not
    the definition in force, with the reason its runs are refused."""
    try:
        pinned, hashes = _read_sqlite(catalog_url) if catalog_url.startswith(SQLITE) else _read(catalog_url)
    except (sqlite3.Error, OSError, CatalogUnavailable):
        return {}
    if (pinned or default).strip().lower() in OFF:
        return {}
    return {
        spec.key: pending_reason(spec.key, hashes.get(str(spec.key)))
        for spec in specs
        if hashes.get(str(spec.key)) != spec.hash
    }


def _read_sqlite(catalog_url: str) -> tuple[str | None, dict[str, str]]:
    path = Path(catalog_url.removeprefix(SQLITE).partition("?")[0])
    if not path.is_file():  # a catalog no command has made yet
        return None, {}
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as connection:
        if not connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'asset'").fetchone():
            return None, {}
        row = connection.execute(APPROVAL).fetchone()
        return (row[0] if row else None), dict(connection.execute(IN_FORCE).fetchall())


def _read(catalog_url: str) -> tuple[str | None, dict[str, str]]:
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.exc import SQLAlchemyError

    engine = create_engine(catalog_url)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table("asset"):  # a catalog no command has used yet
                return None, {}
            pinned = connection.execute(text(APPROVAL)).scalar()
            return pinned, dict(connection.execute(text(IN_FORCE)).tuples().all())
    except SQLAlchemyError as err:
        raise CatalogUnavailable(f"the catalog could not be read: {error_summary(err)}") from err
    finally:
        engine.dispose()
