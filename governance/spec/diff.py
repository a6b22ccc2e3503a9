"""What an edit to a spec changes, field by field, in the words of the spec file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Longest value a change line quotes in full: a description or transform may be long.
SHOWN_CHARS = 80


@dataclass(frozen=True)
class Change:
    """One field added, removed or changed; `field` is its path in the spec (columns by name)."""

    field: str
    kind: str  # added, removed or changed
    before: Any = None
    after: Any = None

    def line(self) -> str:
        if self.kind == "added":
            return f"+ {self.field}: {_shown(self.after)}"
        if self.kind == "removed":
            return f"- {self.field}: {_shown(self.before)}"
        return f"~ {self.field}: {_shown(self.before)} -> {_shown(self.after)}"


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[Change, ...]:
    """The changes from one spec body to another (each as `AssetSpec.model_dump(mode="json")`)."""
    found: list[Change] = []
    for name in _ordered_keys(before, after):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if name == "columns":
            found.extend(_column_changes(old or [], new or []))
        else:
            found.extend(_value_changes(name, old, new))
    return tuple(found)


def _ordered_keys(*mappings: Mapping[str, Any]) -> list[str]:
    keys: dict[str, None] = {}
    for mapping in mappings:
        keys.update(dict.fromkeys(mapping))
    return list(keys)


def _value_changes(path: str, old: Any, new: Any) -> list[Change]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return [
            change
            for key in _ordered_keys(old, new)
            if old.get(key) != new.get(key)
            for change in _value_changes(f"{path}.{key}", old.get(key), new.get(key))
        ]
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(v, str) for v in [*old, *new]):
        removed = [Change(path, "removed", before=item) for item in old if item not in new]
        added = [Change(path, "added", after=item) for item in new if item not in old]
        return removed + added or [Change(path, "changed", old, new)]  # the same items, reordered
    if old is None:
        return [Change(path, "added", after=new)]
    if new is None:
        return [Change(path, "removed", before=old)]
    return [Change(path, "changed", old, new)]


def _column_changes(old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> list[Change]:
    before = {column["name"]: column for column in old}
    after = {column["name"]: column for column in new}
    found = [
        Change(f"columns.{name}", "removed", before=_column(column))
        for name, column in before.items()
        if name not in after
    ]
    for name, column in after.items():
        if name not in before:
            found.append(Change(f"columns.{name}", "added", after=_column(column)))
            continue
        for attribute in _ordered_keys(before[name], column):
            if before[name].get(attribute) != column.get(attribute):
                found.append(
                    Change(f"columns.{name}.{attribute}", "changed", before[name].get(attribute), column.get(attribute))
                )
    common = [name for name in after if name in before]
    if not found and common != [name for name in before if name in after]:
        found.append(Change("columns", "changed", [c["name"] for c in old], [c["name"] for c in new]))
    return found


def _column(column: Mapping[str, Any]) -> str:
    return column["type"] + ("" if column.get("nullable", True) else ", not null")


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
