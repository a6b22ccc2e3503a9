"""JSON as bytes, encoded by orjson: a long answer (a lineage of 100,000 versions) several times
faster than by the standard library. A value JSON has no type for (a time, a path) is written as its
str(), as `json.dumps(default=str)` writes it. What orjson refuses (nesting past 254 levels, as a
long chain of versions makes in a nested lineage; an integer past 64 bits) is encoded by the
standard library instead, so that every answer that encoded before still does."""

from __future__ import annotations

import base64
import json
import math
from datetime import date, time
from typing import Any

import orjson

OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS


def json_bytes(data: object) -> bytes:
    """`data` as JSON text, in UTF-8."""
    try:
        return orjson.dumps(data, default=str, option=OPTIONS)
    except orjson.JSONEncodeError:
        return json.dumps(data, default=str).encode()


def json_value(value: Any) -> Any:
    """A value of a version's row as JSON can hold it, as Spark's `to_json` writes it: a float that
    is not a number as "NaN", "Infinity" or "-Infinity", bytes in base64, a time in ISO 8601; a map's
    pairs and a struct's fields within."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, dict):
        return {name: json_value(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    return value
