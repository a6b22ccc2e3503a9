"""Governed reads: a version's rows for a user who may read it, each read a ledger entry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from governance.access.guard import authorize
from governance.access.policy import Identity, Policy, Verb
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.catalog.states import VersionStatus
from governance.errors import IntegrityError, NotFound
from governance.spec import Spec
from governance.zones import AssetKey, Lake, VersionRef

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

# What an operator runs to see every damaged version, and what is wrong with each.
VERIFY = "custody repair --verify names what is damaged"


@dataclass(frozen=True)
class Target:
    """`domain/name@N`, or `domain/name` for its newest committed version."""

    key: AssetKey
    number: int | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        if "@" in text:
            ref = VersionRef.parse(text)
            return cls(ref.key, ref.number)
        return cls(AssetKey.parse(text))

    def __str__(self) -> str:
        return f"{self.key}@{self.number}" if self.number else str(self.key)


def open_version(
    catalog: Catalog,
    policy: Policy,
    spec: Spec | None,
    identity: Identity,
    target: Target,
    run_id: str | None = None,
    details: Mapping[str, Any] | None = None,
    settings: Mapping[str, str] | None = None,
) -> VersionRow:
    """The version to read, once the user is allowed to read it; the decision is recorded with
    `details` (the channel), and only while `settings` hold (see guard.record_all). It comes
    first, so a user who may not read an asset learns nothing about its versions."""
    row = _find(catalog, target)
    number = row.number if row else target.number
    authorize(
        catalog, policy, identity, Verb.READ, spec, version=number, run_id=run_id, details=details, settings=settings
    )
    if row is None:
        raise NotFound(f"{target} has no committed version" if target.number is None else f"no version {target}")
    if row.status != VersionStatus.COMMITTED:
        raise NotFound(f"{row.ref} was purged: its rows are gone; its lineage and history remain")
    return row


def _find(catalog: Catalog, target: Target) -> VersionRow | None:
    if target.number is not None:
        with catalog.session() as session:
            return catalog.find_version(session, VersionRef(target.key, target.number))
    committed = [row for row in catalog.versions(target.key) if row.status == VersionStatus.COMMITTED]
    return committed[-1] if committed else None


def read_table(
    lake: Lake, row: VersionRow, *, limit: int | None = None, columns: Sequence[str] | None = None
) -> pa.Table:
    """The version's rows as an Arrow table, the first `limit` of them when given."""
    dataset = version_dataset(lake, row)
    unknown = sorted(set(columns or ()) - set(dataset.schema.names))
    if unknown:
        raise NotFound(f"{row.ref} has no column {', '.join(unknown)}; it has {', '.join(dataset.schema.names)}")
    selected = list(columns) if columns else None
    return dataset.head(limit, columns=selected) if limit is not None else dataset.to_table(columns=selected)


def version_dataset(lake: Lake, row: VersionRow) -> ds.Dataset:
    """The files the version's manifest lists, each there at the size it lists: a version whose files
    are gone, or some of them, is refused naming them, never read as empty or short."""
    import pyarrow.dataset as ds

    from governance.versions import file_problem

    folder = lake.at(row.path)
    manifest = lake.read_manifest(folder)
    if manifest is None or manifest.get("data_version") != row.data_version:
        state = "is missing or unreadable" if manifest is None else "is not the catalog's"
        raise IntegrityError(f"{row.ref} cannot be read: its manifest in {lake.uri(folder)} {state}; {VERIFY}")
    entries = manifest["files"]
    if any(not _bare_name(entry.get("path")) for entry in entries):
        raise IntegrityError(f"{row.ref} cannot be read: its manifest names a file outside its folder; {VERIFY}")
    problems = [problem for entry in entries if (problem := file_problem(lake, folder, entry, hashed=False))]
    if problems:
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        raise IntegrityError(f"{row.ref} cannot be read: {problems[0]}{more}; {VERIFY}")
    return ds.dataset([str(folder / entry["path"]) for entry in entries], filesystem=lake.fs, format="parquet")


def _bare_name(path: object) -> bool:
    """Whether a manifest's file is named as one within the version's folder: a plain file name."""
    return isinstance(path, str) and "/" not in path and "\\" not in path and path not in ("", ".", "..")
