"""Why a row was refused, in words a producer can act on."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from decimal import Decimal, InvalidOperation

from governance.spec import COLUMN_TYPE, Column

_INT_RANGES = {"byte": 8, "short": 16, "int": 32, "long": 64}
# Deeper JSON overflows the stack of the JVM that infers its schema; 64 levels is far more than
# any record flattened into columns needs.
MAX_JSON_DEPTH = 64
# Control characters a text source may not hold: every one below U+0020 but tab, LF and CR. One
# pattern, for Python here and for Java's regular expressions in Spark.
CONTROL = "[\\x00-\\x08\\x0B\\x0C\\x0E-\\x1F]"
_CONTROL = re.compile(CONTROL)
_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def explain_csv_record(raw: str | None, columns: list[Column], delimiter: str) -> str:
    """Re-parse one malformed CSV record and name the first thing wrong with it."""
    if raw is None:
        return "malformed row"
    control = _CONTROL.search(raw)
    if control:
        return f"holds control character U+{ord(control.group()):04X}"
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
            return f"column {column.name} is not a valid {column.type}"
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


def explain_json_record(raw: str | None, *, whole: bool = True) -> str:
    """Name what keeps one JSON record from being an object Spark reads, without quoting it. Of a
    record cut short (not `whole`), only its depth and control characters can be told."""
    if raw is None:
        return "not a JSON object"
    if _depth(raw) > MAX_JSON_DEPTH:
        return f"not valid JSON: nested deeper than {MAX_JSON_DEPTH} levels"
    control = _CONTROL.search(raw)
    if control:
        return f"not valid JSON: holds control character U+{ord(control.group()):04X}"
    if not whole:
        return "not a JSON object"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        return f"not valid JSON: {err.msg.lower()} at character {err.pos + 1}"
    if not isinstance(value, dict):
        return f"not a JSON object: {_JSON_TYPES.get(type(value), 'another value')}"
    return "not a JSON object Spark can read"


def _depth(raw: str) -> int:
    """How deep brackets nest outside strings: counted without parsing, which a deep record would
    take past Python's recursion limit."""
    deepest = depth = 0
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest
