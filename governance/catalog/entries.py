"""The catalog's assets and an asset's versions as they are listed, and what a listing is narrowed
to: plain values, which the CLI also builds from the service's answers without loading a database
library."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class NewestVersion:
    """The newest committed version of an asset."""

    number: int
    label: str | None
    rows: int
    created_at: datetime
    requested_by: str


@dataclass(frozen=True)
class AssetEntry:
    """One asset as the catalog lists it. A retired asset (its spec file was deleted and the
    deletion applied) is listed from the last spec it had, with its versions."""

    key: str
    zone: str
    description: str
    owner: str
    producer: str
    consumer: str
    classification: str
    pii: bool
    tags: dict[str, str]
    columns: tuple[str, ...]
    spec_hash: str
    retired: bool
    versions: int
    purged: int
    critical: bool
    newest: NewestVersion | None

    @property
    def domain(self) -> str:
        return self.key.partition("/")[0]

    def matches(self, text: str) -> bool:
        """Whether `text` occurs, ignoring case, in the asset's name, description, a column name
        or a tag (its name or value)."""
        needle = text.casefold()
        haystack = [self.key, self.description, *self.columns, *self.tags, *self.tags.values()]
        return any(needle in each.casefold() for each in haystack)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AssetEntry:
        """The entry `to_dict` gave, as the service sends it."""
        newest = data["newest"]
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name not in ("columns", "newest")}
        return cls(
            **fields,
            columns=tuple(data["columns"]),
            newest=None
            if newest is None
            else NewestVersion(**{**newest, "created_at": datetime.fromisoformat(newest["created_at"])}),
        )

    def to_dict(self) -> dict[str, Any]:
        # Field by field: dataclasses.asdict copies recursively, a third of `custody catalog --json`'s time.
        newest = self.newest
        return {
            "key": self.key,
            "domain": self.domain,
            "zone": self.zone,
            "description": self.description,
            "owner": self.owner,
            "producer": self.producer,
            "consumer": self.consumer,
            "classification": self.classification,
            "pii": self.pii,
            "tags": self.tags,
            "columns": list(self.columns),
            "spec_hash": self.spec_hash,
            "retired": self.retired,
            "versions": self.versions,
            "purged": self.purged,
            "critical": self.critical,
            "newest": None
            if newest is None
            else {
                "number": newest.number,
                "label": newest.label,
                "rows": newest.rows,
                "created_at": newest.created_at.isoformat(),
                "requested_by": newest.requested_by,
            },
        }


@dataclass(frozen=True)
class VersionLine:
    """One version as a list of versions shows it: a line of `custody versions`."""

    number: int
    label: str | None
    created_at: datetime
    rows: int
    rows_quarantined: int
    data_version: str
    requested_by: str
    run_id: str | None
    status: str
    criticality: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VersionLine:
        """The line of a version as the service sends it (every field of its catalog row)."""
        fields = {name: data[name] for name in cls.__dataclass_fields__ if name != "created_at"}
        return cls(**fields, created_at=datetime.fromisoformat(data["created_at"]))


@dataclass(frozen=True)
class Filters:
    """What `custody catalog` narrows the list to; each one given must hold."""

    search: str | None = None
    domain: str | None = None
    classification: str | None = None
    owner: str | None = None

    def keep(self, entry: AssetEntry) -> bool:
        return (
            (self.search is None or entry.matches(self.search))
            and (self.domain is None or entry.domain == self.domain)
            and (self.classification is None or entry.classification == self.classification)
            and (self.owner is None or entry.owner == self.owner)
        )
