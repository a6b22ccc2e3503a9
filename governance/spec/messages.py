"""Validation errors of a spec in its owner's words: what the field must be, and what it holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from governance.errors import SpecError, SpecProblem

SHOWN_CHARS = 60

# What a field with a naming rule must hold, by the last part of its path that is not an index.
NAMED = {
    "owner": "a group name: lowercase letters, digits, _ and -, starting with a letter, at most 64 characters",
    "producer": "a group name: lowercase letters, digits, _ and -, starting with a letter, at most 64 characters",
    "consumer": "a group name: lowercase letters, digits, _ and -, starting with a letter, at most 64 characters",
    "tags": "a tag name: lowercase letters, digits, _, . and -, starting with a letter, at most 63 characters",
    "name": "a column name: letters, digits and _, not starting with a digit, at most 128 characters",
    "inputs": "an asset as DOMAIN/NAME, such as sales/clients",
    "transform": "a function as module:function, such as assets.transforms.sales:summary",
    "url": "a JDBC URL as jdbc:postgresql://host:port/database, without user or password",
    "user_env": "the name of an environment variable, such as SHOP_DB_USER",
    "password_env": "the name of an environment variable, such as SHOP_DB_PASSWORD",
    "table": "a table as schema.table, such as public.orders",
    "partition_column": "a column name: letters, digits and _, not starting with a digit, at most 128 characters",
    "column": "a column name: letters, digits and _, not starting with a digit, at most 128 characters",
    "max_lag": "a lag as a whole number of minutes, hours or days: 90m, 24h, 7d",
    "warn_lag": "a lag as a whole number of minutes, hours or days: 90m, 24h, 7d",
    "feed.url": "an http:// or https:// URL without spaces; ${NAME} takes a part from the environment",
    "feed.postfix": "a file name's ending: letters, digits, _, . and -, at most 32 characters",
    "feed.requested_by": "a directory user name: letters, digits, '.', '_' or '-', at most 64",
    "feed.start": "the first hour kept, as yyyy-mm-ddThh in UTC, such as 2026-11-23T00",
    "headers": "a header name: letters, digits and !#$%&'*+.^_`|~-, at most 64 characters",
}
ONE_OF = {"owner": "one group name", "producer": "one group name", "consumer": "one group name"}


# A source's format chooses its kind of fields; pydantic names the format in an error's location.
SOURCE_FORMATS = frozenset({"csv", "json", "parquet", "raw", "jdbc", "kafka"})


def field_path(location: tuple[int | str, ...]) -> str:
    """The dotted path of a field (a tag's own name stands for the tag)."""
    return ".".join(str(part) for part in _without_format(location) if part != "[key]")


def error_path(detail: Mapping[str, Any]) -> str:
    """The dotted path of the field an error is about: a source's format when it chooses no kind."""
    path = field_path(detail["loc"])
    return f"{path}.format" if detail["type"] in ("union_tag_invalid", "union_tag_not_found") else path


def _without_format(location: tuple[int | str, ...]) -> tuple[int | str, ...]:
    if len(location) > 1 and location[0] == "source" and location[1] in SOURCE_FORMATS:
        return (location[0], *location[2:])
    return location


def owner_message(detail: Mapping[str, Any]) -> str:
    """One of pydantic's error details as the owner of the spec reads it."""
    kind, context = detail["type"], detail.get("ctx") or {}
    found = _found(detail.get("input"))
    named = _name_of(detail["loc"])
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "union_tag_invalid":
        expected = " or ".join(str(context.get("expected_tags", "")).rsplit(", ", 1))
        return f"must be {expected}, found {_found(context.get('tag'))}"
    if kind == "union_tag_not_found":
        return "missing required field"
    if kind == "missing":
        return "missing required field"
    if kind == "value_error":
        return str(detail["msg"]).removeprefix("Value error, ")
    if kind == "string_type":
        return f"must be {ONE_OF.get(named, 'text')}, found {found}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of fields, found {found}"
    if kind == "list_type":
        return f"must be a list, found {found}"
    if kind in ("literal_error", "enum"):
        return f"must be {context.get('expected', 'one of the allowed values')}, found {found}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false, found {found}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number, found {found}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number, found {found}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("more than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {context.get(key)}, found {found}"
    if kind == "string_too_short":
        limit = context.get("min_length", 1)
        return "must not be empty" if limit == 1 else f"must have at least {limit} characters"
    if kind == "string_too_long":
        limit = context.get("max_length")
        return f"must have at most {limit} character{'' if limit == 1 else 's'}, found {found}"
    if kind == "string_pattern_mismatch":
        return f"must be {NAMED.get(named, 'in the documented form')}, found {found}"
    return str(detail["msg"])


def _name_of(location: tuple[int | str, ...]) -> str:
    names = [str(part) for part in location if not isinstance(part, int) and part != "[key]"]
    if len(location) > 1 and location[-1] == "[key]":
        return str(location[-3] if "feed" in location else location[0])  # a key of a mapping: tags, headers
    if len(names) > 1 and names[-2] == "feed":
        return f"feed.{names[-1]}"
    return names[-1] if names else ""


def _found(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, str):
        shown = value if len(value) <= SHOWN_CHARS else value[: SHOWN_CHARS - 1] + "…"
        return repr(shown) if value else "an empty value"
    return str(value)


def code_frame(problem: SpecProblem) -> str:
    """A problem as Dagster shows one in a `defs.yaml`: where it is, then its line of the spec, marked."""
    said = str(problem)
    lines = _lines(problem.file) if problem.line else []
    if not problem.line or problem.line > len(lines):
        return said
    line = lines[problem.line - 1]
    number = str(problem.line)
    gutter = " " * len(number)
    indent = " " * (len(line) - len(line.lstrip()))
    return "\n".join([said, f"  {gutter} |", f"  {number} | {line}", f"  {gutter} | {indent}^ {problem.message}"])


class FramedSpecError(SpecError):
    """A SpecError whose message shows each problem with its line of the spec."""

    def __init__(self, problems: Sequence[SpecProblem]):
        super().__init__(problems)
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in asset specs"
        self.args = ("\n".join([head, *(code_frame(problem) for problem in self.problems)]),)


def _lines(file: str) -> list[str]:
    try:
        return Path(file).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
