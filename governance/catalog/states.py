"""The states a version row is in, apart from the tables: commands that only print them need no
database library."""

from __future__ import annotations

from enum import StrEnum

from governance.errors import InvalidInput


class VersionStatus(StrEnum):
    """A version's life: committed, then tombstoned by a purge, then purged (row kept, files gone)."""

    COMMITTED = "committed"
    PURGING = "purging"
    PURGED = "purged"


class Criticality(StrEnum):
    """Critical versions, and everything upstream of them, are protected from purge."""

    CRITICAL = "critical"
    NORMAL = "normal"

    @classmethod
    def parse(cls, value: str) -> Criticality:
        try:
            return cls(value)
        except ValueError as err:
            raise InvalidInput(f"unknown status {value!r}: use critical or normal") from err
