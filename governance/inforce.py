"""Which spec files wait for an owner's approval, as the code location shows them at every load, and
the definitions in force of those it cannot load.

Read with Python's sqlite3 for a SQLite catalog, else SQLAlchemy Core: the catalog's SQLModel
tables would cost each load most of a second to import, SQLAlchemy a third of one. What is read is
shown, not enforced (runs are decided at submission), so a catalog that cannot be read leaves the
assets unmarked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from governance.config import OFF
from governance.errors import CatalogUnavailable, error_summary
from governance.spec import AssetSpec, Spec, SpecSet
from governance.zones import AssetKey

if TYPE_CHECKING:
    from sqlalchemy import Connection

# The catalog's tables as governance.catalog.models defines them: `asset` holds the specs in force.
IN_FORCE = "SELECT key, spec_hash FROM asset"
BODIES = "SELECT key, spec_json FROM asset WHERE key IN"
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


def applied(catalog_url: str, root: Path, keys: Collection[AssetKey]) -> dict[AssetKey, Spec]:
    """The definitions in force of `keys`, for assets whose file cannot be loaded: the code location
    shows them with the inputs, owners and kinds they last had. One the spec model no longer reads,
    or a catalog that cannot be read, leaves an asset with its problems alone."""
    if not keys:
        return {}
    names = sorted(str(key) for key in keys)
    try:
        rows = _bodies_sqlite(catalog_url, names) if catalog_url.startswith(SQLITE) else _bodies(catalog_url, names)
    except (sqlite3.Error, OSError, CatalogUnavailable):
        return {}
    found = {}
    for name, body in rows:
        key = AssetKey.parse(name)
        try:
            found[key] = Spec(key, root / key.domain / f"{key.name}.yaml", AssetSpec.model_validate_json(body), body)
        except ValidationError:
            continue
    return found


@contextmanager
def _sqlite(catalog_url: str) -> Iterator[sqlite3.Connection | None]:
    """The catalog read-only; None before a command has made its tables."""
    path = Path(catalog_url.removeprefix(SQLITE).partition("?")[0])
    if not path.is_file():
        yield None
        return
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as connection:
        made = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'asset'").fetchone()
        yield connection if made else None


@contextmanager
def _connected(catalog_url: str) -> Iterator[Connection | None]:
    """The catalog through SQLAlchemy Core; None before a command has made its tables."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.exc import SQLAlchemyError

    engine = create_engine(catalog_url)
    try:
        with engine.connect() as connection:
            yield connection if inspect(connection).has_table("asset") else None
    except SQLAlchemyError as err:
        raise CatalogUnavailable(f"the catalog could not be read: {error_summary(err)}") from err
    finally:
        engine.dispose()


def _read_sqlite(catalog_url: str) -> tuple[str | None, dict[str, str]]:
    with _sqlite(catalog_url) as connection:
        if connection is None:
            return None, {}
        row = connection.execute(APPROVAL).fetchone()
        return (row[0] if row else None), dict(connection.execute(IN_FORCE).fetchall())


def _read(catalog_url: str) -> tuple[str | None, dict[str, str]]:
    from sqlalchemy import text

    with _connected(catalog_url) as connection:
        if connection is None:
            return None, {}
        pinned = connection.execute(text(APPROVAL)).scalar()
        return pinned, dict(connection.execute(text(IN_FORCE)).tuples().all())


def _bodies_sqlite(catalog_url: str, keys: list[str]) -> list[tuple[str, str]]:
    with _sqlite(catalog_url) as connection:
        if connection is None:
            return []
        return connection.execute(f"{BODIES} ({', '.join('?' * len(keys))})", keys).fetchall()


def _bodies(catalog_url: str, keys: list[str]) -> list[tuple[str, str]]:
    from sqlalchemy import bindparam, text

    with _connected(catalog_url) as connection:
        if connection is None:
            return []
        query = text(f"{BODIES} :keys").bindparams(bindparam("keys", expanding=True))
        return [(key, body) for key, body in connection.execute(query, {"keys": keys})]
