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
from governance.errors import NotFound
from governance.spec import Spec
from governance.zones import AssetKey, Lake, VersionRef

if TYPE_CHECKING:
    import pyarrow as pa


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
    dataset = lake.dataset(lake.at(row.path))
    unknown = sorted(set(columns or ()) - set(dataset.schema.names))
    if unknown:
        raise NotFound(f"{row.ref} has no column {', '.join(unknown)}; it has {', '.join(dataset.schema.names)}")
    selected = list(columns) if columns else None
    return dataset.head(limit, columns=selected) if limit is not None else dataset.to_table(columns=selected)
