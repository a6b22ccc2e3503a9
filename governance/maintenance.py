"""Ledger housekeeping, run daily by a Dagster schedule or on demand: roll the old entries over into
segments, then age off the segments the retention lets go.

CUSTODY_LEDGER_ROLLOVER_DAYS (default 30) says how long entries stay in the hot table;
CUSTODY_LEDGER_RETENTION_DAYS and CUSTODY_LEDGER_MAX_BYTES (both unset by default: nothing is ever
deleted) how long, and how many bytes of, segments are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from governance.catalog import Catalog
from governance.config import env_amount, env_count
from governance.errors import InvalidInput
from governance.rollover import MAINTENANCE, AgeOffReport, RolloverReport, age_off, rollover
from governance.runs import Assurance, Progress, quiet

ROLLOVER_DAYS = "CUSTODY_LEDGER_ROLLOVER_DAYS"
RETENTION_DAYS = "CUSTODY_LEDGER_RETENTION_DAYS"
MAX_BYTES = "CUSTODY_LEDGER_MAX_BYTES"
DEFAULT_ROLLOVER_DAYS = 30.0


@dataclass(frozen=True)
class LedgerRetention:
    """How long entries stay hot, and how long and how much of the rolled-over ledger is kept."""

    rollover_after: timedelta = timedelta(days=DEFAULT_ROLLOVER_DAYS)
    keep_for: timedelta | None = None
    max_bytes: int | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> LedgerRetention:
        rollover_after = rollover_age(environ)
        retention_days = env_amount(environ, RETENTION_DAYS, "days")
        if retention_days is not None and timedelta(days=retention_days) < rollover_after:
            raise InvalidInput(
                f"{RETENTION_DAYS}={retention_days:g} is shorter than the rollover age "
                f"({ROLLOVER_DAYS}, {rollover_after.total_seconds() / 86400:g} days): "
                "entries are aged off only once they have been rolled over"
            )
        return cls(
            rollover_after=rollover_after,
            keep_for=None if retention_days is None else timedelta(days=retention_days),
            max_bytes=env_count(environ, MAX_BYTES, "bytes"),
        )

    @property
    def ages_off(self) -> bool:
        return self.keep_for is not None or self.max_bytes is not None


def rollover_age(environ: Mapping[str, str]) -> timedelta:
    """How old entries get before they leave the hot table."""
    days = env_amount(environ, ROLLOVER_DAYS, "days")
    return timedelta(days=DEFAULT_ROLLOVER_DAYS if days is None else days)


@dataclass(frozen=True)
class MaintenanceReport:
    rollover: RolloverReport
    age_off: AgeOffReport | None


def maintain(
    catalog: Catalog,
    folder: Path,
    retention: LedgerRetention,
    *,
    actor: str = MAINTENANCE,
    assurance: Assurance = Assurance.SYSTEM,
    run_id: str | None = None,
    progress: Progress = quiet,
    how: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Roll over, then age off when the retention says to; each segment aged off is a ledger entry
    in the name of `actor`."""
    rolled = rollover(catalog, folder, retention.rollover_after, progress=progress)
    aged = None
    if retention.ages_off:
        aged = age_off(
            catalog,
            folder,
            older_than=retention.keep_for,
            max_bytes=retention.max_bytes,
            actor=actor,
            assurance=assurance,
            run_id=run_id,
            progress=progress,
            how=how,
        )
    return MaintenanceReport(rolled, aged)
