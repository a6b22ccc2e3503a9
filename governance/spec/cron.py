"""Cron schedules as Dagster takes them: five fields, minute to day of the week, each a list of
values, ranges and steps (`*/15`, `1-5`, `mon-fri`), or one of the `@hourly` shorthands."""

from __future__ import annotations

import re

from governance.errors import InvalidInput

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# Each field's name, smallest and largest value, and the names it takes for values.
FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of the month", 1, 31, ()),
    ("month", 1, 12, MONTHS),
    ("day of the week", 0, 7, DAYS),
)
SHORTHANDS = frozenset({"@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight"})
PART = re.compile(r"(?P<range>\*|(?P<low>\w+)(-(?P<high>\w+))?)(/(?P<step>[0-9]+))?")


def check_cron(schedule: str) -> str:
    """The schedule, when Dagster would take it; InvalidInput naming the field that is wrong else."""
    if schedule in SHORTHANDS:
        return schedule
    fields = schedule.split()
    if len(fields) != len(FIELDS):
        raise InvalidInput(
            f"cron schedule {schedule!r} has {len(fields)} fields: give 5 (minute hour day month weekday)"
        )
    for text, (name, low, high, names) in zip(fields, FIELDS, strict=True):
        for part in text.split(","):
            _check_part(schedule, part, name, low, high, names)
    return schedule


def _check_part(schedule: str, part: str, name: str, low: int, high: int, names: tuple[str, ...]) -> None:
    match = PART.fullmatch(part.lower())
    wrong = f"cron schedule {schedule!r}: {name} {part!r}"
    if match is None:
        raise InvalidInput(f"{wrong} is not a value, a range or a step (*/15)")
    if match["step"] is not None and int(match["step"]) == 0:
        raise InvalidInput(f"{wrong} steps by 0")
    if match["range"] == "*":
        return
    first = _value(match["low"], wrong, low, high, names)
    if match["high"] is not None and _value(match["high"], wrong, low, high, names) < first:
        raise InvalidInput(f"{wrong} is a range that ends before it starts")


def _value(text: str, wrong: str, low: int, high: int, names: tuple[str, ...]) -> int:
    if text in names:
        return names.index(text) + (0 if names is DAYS else 1)
    if not text.isdigit() or not low <= int(text) <= high:
        shown = f", or {names[0]}-{names[-1]}" if names else ""
        raise InvalidInput(f"{wrong} is out of its range {low}-{high}{shown}")
    return int(text)
