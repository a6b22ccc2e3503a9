"""JSON as bytes, encoded by orjson: a long answer (a lineage of 100,000 versions) several times
faster than by the standard library, and the same once parsed. A value JSON has no type for (a
time, a path) is written as its str(), as `json.dumps(default=str)` writes it."""

from __future__ import annotations

import orjson

OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS


def json_bytes(data: object) -> bytes:
    """`data` as JSON text, in UTF-8."""
    return orjson.dumps(data, default=str, option=OPTIONS)
