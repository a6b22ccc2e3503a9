"""Assertions and hostile inputs shared by tests."""

from __future__ import annotations

import os
from pathlib import Path

from sqlmodel import select

from governance import ledger
from governance.api import PASSWORD_VARIABLE
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.cli import run
from governance.zones import AssetKey, Lake, Zone


def cli(capsys, *args: str, password: str | None = None) -> tuple[int, str, str]:
    """Run `custody ARGS`; its exit code, standard output and standard error. `password` is the one
    the user of --as or --by gives (in CUSTODY_PASSWORD), which makes their identity verified."""
    before = os.environ.get(PASSWORD_VARIABLE)
    if password is not None:
        os.environ[PASSWORD_VARIABLE] = password
    try:
        code = run(list(args))
    finally:
        if before is None:
            os.environ.pop(PASSWORD_VARIABLE, None)
        else:
            os.environ[PASSWORD_VARIABLE] = before
    out, err = capsys.readouterr()
    return code, out, err


def verify_ledger(catalog: Catalog) -> ledger.Verification:
    with catalog.session() as session:
        return ledger.verify(session, catalog.checkpoints)


def execute(catalog: Catalog, *statements: str) -> None:
    """Statements run on the catalog's database as they are: what someone who can write it does."""
    with catalog.session() as session:
        for statement in statements:
            session.connection().exec_driver_sql(statement)


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


def alias_bomb(key: str = "bomb", levels: int = 7) -> str:
    """YAML of a few hundred bytes whose nested aliases expand to 9**levels strings, under `key`;
    its first alias is on its third line."""
    lines = [f"{key}:", '  - &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        lines.append(f"  - &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def edit_spec(specs: Path, asset: str, old: str, new: str) -> Path:
    """Replace `old` with `new` in the spec file of `asset` (DOMAIN/NAME) under `specs`."""
    path = specs / f"{asset}.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} is not in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path
