"""What a reader asks of the ledger, and times as the ledger writes them: plain values, which the CLI
also sends to the service without loading a database library."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from governance.errors import InvalidInput

# The fewest first characters of a run's id that name it, as Custody prints run ids.
SHORTEST_RUN_PREFIX = 8
# A time ago, as `--since 30m` gives it: seconds, minutes, hours or days.
AGO = re.compile(r"(?P<count>[0-9]{1,6})(?P<unit>[smhd])")
AGO_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def timestamp(moment: datetime) -> str:
    """A moment as the ledger writes it: UTC, microseconds, `Z`; such strings sort as time does."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def moment(value: str | datetime) -> str:
    """A time a filter names, as the ledger writes times: an ISO 8601 date or time (UTC unless it
    says otherwise), a time ago (`30m`, `2h`, `7d`), or a datetime."""
    if isinstance(value, str):
        ago = AGO.fullmatch(value.strip())
        try:
            value = (
                datetime.now(UTC) - timedelta(seconds=int(ago["count"]) * AGO_UNITS[ago["unit"]])
                if ago
                else datetime.fromisoformat(value)
            )
        except (ValueError, OverflowError) as err:
            raise InvalidInput(
                f"{value!r} is not an ISO 8601 date or time, e.g. 2026-11-22 or 2026-11-22T09:30, "
                "nor a time ago such as 30m, 2h or 7d"
            ) from err
    return timestamp(value if value.tzinfo else value.replace(tzinfo=UTC))


@dataclass(frozen=True)
class LedgerFilter:
    """The entries a reader asks for: each filter given must hold; from `from_seq` on, at most `limit`."""

    asset: str | None = None
    version: int | None = None
    actor: str | None = None
    action: str | None = None
    run_id: str | None = None
    since: str | None = None
    until: str | None = None
    from_seq: int = 1
    limit: int | None = None

    @classmethod
    def asked(
        cls, *, since: str | datetime | None = None, until: str | datetime | None = None, **given: Any
    ) -> LedgerFilter:
        """The filter a caller asks for, its times given as ISO dates or times, or datetimes."""
        return cls(
            since=None if since is None else moment(since), until=None if until is None else moment(until), **given
        )
