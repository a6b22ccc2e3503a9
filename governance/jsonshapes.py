"""Which files of a multiline JSON batch Spark must see to infer the schema of them all.

Spark infers a schema by reading every file in a job of its own: about 10 ms a file when they are
small, most of the time an hour of a feed's downloads takes to land. The schema it infers is the
merge of each record's, and a record's depends only on its shape: which keys, and for each value
its kind (for a whole number, how many digits; for a list, the shapes of its elements). So one
file of each shape gives the same schema as all of them.

A file whose shape Python cannot vouch for (not UTF-8, not JSON as Python reads it, a key twice, a
number that is not finite, nesting past the parser's limit) is a shape of its own, and always
among those Spark sees: a doubt costs a file in the sample, never a field missed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence

from governance.batches import DropFile, opened
from governance.quarantine import MAX_JSON_DEPTH

LONG = 1 << 63
# Past these, Spark's parser refuses what Python reads: numbers of 1,000 characters, strings of
# 20,000,000 UTF-16 units (a code point is at most two). A file this large is not parsed here.
MAX_NUMBER_CHARS = 1000
MAX_STRING_CHARS = 10_000_000
MAX_FILE_BYTES = 16 * 1024 * 1024


class _Doubt(Exception):
    """Something Python's reading might not share with Spark's."""


def representatives(files: Sequence[DropFile]) -> list[DropFile]:
    """One file of each shape, in the batch's order; every file whose shape is in doubt."""
    seen: set[Hashable] = set()
    chosen = []
    for file in files:
        shape = _file_shape(file)
        if shape is None or shape not in seen:
            chosen.append(file)
            if shape is not None:
                seen.add(shape)
    return chosen


def _file_shape(file: DropFile) -> Hashable | None:
    if file.bytes > MAX_FILE_BYTES:
        return None
    with opened(file) as handle:
        data = handle.read()
    try:
        document = json.loads(
            data.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_refuse_constant, parse_float=_float
        )
        # Spark reads a top-level array as one record per element; the array still counts as a level.
        if isinstance(document, list):
            return ("array", frozenset(_shape(record, 2) for record in document))
        return _shape(document, 1)
    except (UnicodeDecodeError, ValueError, RecursionError, _Doubt):
        return None


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys) or len({key.lower() for key in keys}) != len(keys):
        raise _Doubt("a key twice, or twice but for case")
    return dict(pairs)


def _refuse_constant(name: str) -> float:
    raise _Doubt(f"{name} is read by each parser its own way")


def _float(text: str) -> float:
    if len(text) >= MAX_NUMBER_CHARS:
        raise _Doubt("a number longer than Spark's parser reads")
    return float(text)


def _shape(value: object, depth: int) -> Hashable:
    """A value's shape; `depth` is its nesting level, as Spark's parser counts it."""
    if depth >= MAX_JSON_DEPTH:
        raise _Doubt("nested as deep as Spark's limit")
    if isinstance(value, str):
        if len(value) >= MAX_STRING_CHARS:
            raise _Doubt("a string longer than Spark's parser reads")
        # Spark infers nothing from an empty string: it merges as a null would.
        return "str" if value else "empty"
    if value is None or isinstance(value, bool):
        return type(value).__name__
    if isinstance(value, int):
        return "long" if -LONG <= value < LONG else ("integer", len(str(abs(value))))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Doubt("a number too large for a double")
        return "double"
    if isinstance(value, list):
        return ("array", frozenset(_shape(item, depth + 1) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _shape(item, depth + 1)) for key, item in value.items()))
    raise _Doubt(f"a {type(value).__name__}, which no JSON parser makes")
