"""Why a row was refused, in words a producer can act on."""

from __future__ import annotations

import csv
import datetime as dt
from decimal import Decimal, InvalidOperation

from governance.spec import COLUMN_TYPE, Column

_INT_RANGES = {"byte": 8, "short": 16, "int": 32, "long": 64}


def explain_csv_record(raw: str | None, columns: list[Column], delimiter: str) -> str:
    """Re-parse one malformed CSV record and name the first thing wrong with it."""
    if raw is None:
        return "malformed row"
    try:
        rows = list(csv.reader([raw], delimiter=delimiter, strict=True))
    except csv.Error as err:
        return f"bad quoting ({err}); a quoted field spanning lines needs source.multiline: true"
    fields = rows[0] if rows else []
    if len(fields) != len(columns):
        return f"expected {len(columns)} fields, found {len(fields)}"
    for column, value in zip(columns, fields, strict=True):
        if value == "":
            continue
        if not _parses(value, column.type):
            return f"column {column.name}: {value[:60]!r} is not a valid {column.type}"
    if '"' in raw:
        return "bad quoting"
    return "malformed row"


def _parses(value: str, type_name: str) -> bool:
    text = value.strip()
    try:
        if type_name in _INT_RANGES:
            bits = _INT_RANGES[type_name]
            return -(2 ** (bits - 1)) <= int(text) < 2 ** (bits - 1)
        if type_name in ("double", "float"):
            float(text)
        elif type_name == "boolean":
            return text.lower() in ("true", "false")
        elif type_name == "date":
            dt.date.fromisoformat(text)
        elif type_name == "timestamp":
            dt.datetime.fromisoformat(text)
        elif COLUMN_TYPE.fullmatch(type_name) and type_name.startswith("decimal"):
            Decimal(text)
    except (ValueError, InvalidOperation):
        return False
    return True
