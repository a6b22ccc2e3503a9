"""What a change of status and a purge answer with, as plain values: a client of the service builds
them from its JSON without loading the catalog."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StatusChange:
    ref: str
    before: str
    after: str
    protected_upstream: int
    purged_upstream: tuple[str, ...]


@dataclass(frozen=True)
class Candidate:
    """A version a purge would remove, and why."""

    ref: str
    version_id: int
    reason: str
    bytes: int


@dataclass
class PurgeReport:
    purged: list[Candidate] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    already_purged: list[str] = field(default_factory=list)
    kept_protected: list[str] = field(default_factory=list)
    # Versions a run in progress reads, each with the run.
    kept_in_use: list[str] = field(default_factory=list)
    dry_run: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PurgeReport:
        """The report as the service sends it."""
        return cls(**{**data, "purged": [Candidate(**candidate) for candidate in data["purged"]]})
