"""Assertions and hostile inputs shared by tests."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import struct
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import DataFrame, SparkSession
from sqlmodel import col, func, select

from governance import ledger
from governance.access.settings import pinned_settings
from governance.api import PASSWORD_VARIABLE
from governance.batches import READY_MARKER
from governance.catalog import Catalog
from governance.catalog.models import LedgerEntry, ServiceSession, VersionRow
from governance.cli import run
from governance.config import Settings
from governance.demo import demo_password
from governance.lake import TABLES_FOLDER
from governance.runs import os_user
from governance.versions import read_dataframe
from governance.zones import AssetKey, Lake, Zone

# The password of the user --as or --by names, as the demo directory documents it.
NAMED = object()


def cli(capsys, *args: str, password: str | None | object = NAMED) -> tuple[int, str, str]:
    """Run `custody ARGS`; its exit code, standard output and standard error. `password` is the one
    the user of --as or --by gives (in CUSTODY_PASSWORD): by default that user's demo password, so
    the directory verifies them; None for none, as when a command names another user unproven."""
    proof = named_password(args) if password is NAMED else password
    if password is NAMED and proof is None:  # a command naming nobody keeps the password the test set, if any
        code = run(list(args))
    else:
        with given_password(proof if isinstance(proof, str) else None):
            code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@contextmanager
def given_password(password: str | None) -> Iterator[None]:
    """CUSTODY_PASSWORD set to `password` (unset for None) while the block runs."""
    before = os.environ.pop(PASSWORD_VARIABLE, None)
    if password is not None:
        os.environ[PASSWORD_VARIABLE] = password
    try:
        yield
    finally:
        os.environ.pop(PASSWORD_VARIABLE, None)
        if before is not None:
            os.environ[PASSWORD_VARIABLE] = before


def proven(user: str) -> AbstractContextManager[None]:
    """The block runs with `user`'s demo password at hand, as a user who proves who they are."""
    return given_password(demo_password(user))


def run_proven(args: Sequence[str]) -> int:
    """`custody ARGS`, the user --as or --by names proving who they are with their demo password."""
    with given_password(named_password(args)):
        return run(list(args))


def named_password(args: Sequence[str]) -> str | None:
    """The demo password of the user `--as` or `--by` names in `args`; None when none is named."""
    named = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in ("--as", "--by")]
    return demo_password(named[0]) if named else None


def os_user_is(settings: Settings, user: str) -> None:
    """Pin the `os_users` setting of the home of `settings` at its first use: the OS user running
    the tests, who makes every DropZone folder, is `user` in the directory."""
    pinned_settings(Catalog.from_settings(settings, {}), replace(settings, os_users=f"{os_user()}={user}"), {})


# Another OS user than the one running the tests, and a group they may be given: real accounts of the machine.
OTHER_USER = "nobody"
SHARED_GROUP = "users"


def given_to(path: Path, user: str = OTHER_USER, group: str | None = None) -> None:
    """`path` given to OS user `user` (and `group`), as only root can: as if they had made it."""
    account = pwd.getpwnam(user)
    os.chown(path, account.pw_uid, grp.getgrnam(group).gr_gid if group else account.pw_gid, follow_symlinks=False)


def written_as(user: str, path: Path, content: bytes, *, groups: Sequence[str] = ()) -> None:
    """`path` rewritten in place by a process of OS user `user`, a member of `groups` too, with
    their rights only. The process starts in the file's folder: the folders above it may be closed
    to them, as pytest's are."""
    account = pwd.getpwnam(user)
    subprocess.run(
        ["/bin/sh", "-c", 'cat > "$1"', "sh", path.name],
        input=content,
        cwd=path.parent,
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[grp.getgrnam(name).gr_gid for name in groups],
        check=True,
    )


def after_the_mark(folder: Path, by_ns: int = 20_000_000) -> None:
    """Wait until a change would be stamped at least `by_ns` later than `folder`'s `_READY`: change
    times may come from a clock that moves only every few milliseconds."""
    marked = (folder / READY_MARKER).stat().st_ctime_ns
    while time.time_ns() < marked + by_ns:
        time.sleep(0.005)


def rewritten_as_it_was_dated(path: Path, content: bytes) -> None:
    """`path` rewritten in place by its owner, its modification time then set back as it was."""
    before = path.stat()
    path.write_bytes(content)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def acl_granting_write(path: Path, user: str) -> None:
    """A POSIX ACL on `path` that lets OS user `user` write it, as `setfacl -m u:USER:rw` sets one:
    the owner's, group's and others' entries as the mode has them, the user's, and a mask of rw."""
    mode, unset = path.stat().st_mode, 0xFFFFFFFF
    entries = [
        (0x01, (mode >> 6) & 7, unset),  # the owner
        (0x02, 6, pwd.getpwnam(user).pw_uid),  # the named user
        (0x04, (mode >> 3) & 7, unset),  # the owning group
        (0x10, 6, unset),  # the mask: the most any named entry or the group may have
        (0x20, mode & 7, unset),  # others
    ]
    os.setxattr(
        path, "system.posix_acl_access", struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    )


def recorded(catalog: Catalog | None = None, **filters: Any) -> list[dict[str, Any]]:
    """The ledger's entries that match `filters` (LedgerFilter.asked's), as `custody ledger show
    --json` gives them, read as evidence from the catalog itself (by default, the one this
    environment names): a test's look at what was recorded, which records nothing itself."""
    store = catalog or Catalog.from_settings(Settings.from_env(), os.environ)
    with store.reading() as session:
        return [ledger.entry_dict(entry) for entry in ledger.entries(session, ledger.LedgerFilter.asked(**filters))]


def reads_since(catalog: Catalog, actor: str, since: int) -> list[dict[str, Any]]:
    """The `read` entries of `actor` after entry `since`: asset, version and details, flattened."""
    found = recorded(catalog, actor=actor, action="read", from_seq=since + 1)
    return [{"asset": e["asset_key"], "version": e["version"], **e["details"]} for e in found]


def last_seq(catalog: Catalog) -> int:
    """The sequence number of the ledger's last entry."""
    with catalog.reading() as session:
        return session.exec(select(func.max(LedgerEntry.seq))).one() or 0


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


def sha256_file(path: Path) -> str:
    """A file's SHA-256, as a version's manifest gives it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def duckdb_with_iceberg(*more: str):
    """A DuckDB connection with the iceberg extension (and avro, which it needs, and the extensions
    `more` names) loaded from their PyPI packages' files: nothing is downloaded at run time."""
    from importlib.resources import files

    import duckdb

    connection = duckdb.connect()
    for name in ("avro", "iceberg", *more):
        binary = (
            files(f"duckdb_extension_{name}") / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
        )
        connection.execute(f"LOAD '{binary}'")
    return connection


def inferred(spark: SparkSession, lake: Lake, row: VersionRow) -> DataFrame:
    """A version's files as Spark reads them, finding their schema itself."""
    return spark.read.parquet(lake.uri(lake.at(row.path)))


def assert_reads_as_inferred(spark: SparkSession, lake: Lake, row: VersionRow) -> None:
    """Read with the schema the catalog keeps, a version has the columns, types and rows Spark finds in its files."""
    given, found = read_dataframe(spark, lake, row), inferred(spark, lake, row)
    assert given.schema == found.schema, row.ref
    assert given.collect() == found.collect(), row.ref


def expire_newest_token(catalog: Catalog) -> str:
    """End the newest token's life a second ago, as time would; its session's id."""
    with catalog.session() as session:
        row = session.exec(
            select(ServiceSession).where(ServiceSession.kind == "token").order_by(col(ServiceSession.issued_at).desc())
        ).first()
        assert row is not None
        row.expires_at = datetime.now(UTC) - timedelta(seconds=1)
        session.add(row)
        return row.id


def step_times(instance: dg.DagsterInstance, run_id: str) -> tuple[float, float]:
    """When the run's step writing sales/products started and when it ended."""
    times = {
        entry.dagster_event.event_type_value: entry.timestamp
        for entry in instance.all_logs(run_id)
        if entry.dagster_event is not None and entry.step_key == "sales__products"
    }
    return times["STEP_START"], times["STEP_SUCCESS"]


def iceberg(settings: Settings) -> SqlCatalog:
    """The tables' catalog as an analyst opens it with PyIceberg."""
    return SqlCatalog("custody", uri=settings.catalog_url, warehouse=f"file://{settings.lake / TABLES_FOLDER}")
