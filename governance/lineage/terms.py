"""The words of lineage that need no catalog: which way a walk goes, and how large a lineage is
still shown whole. Apart from the graph, for what only names them (`custody --help`)."""

from __future__ import annotations

from enum import StrEnum


class Direction(StrEnum):
    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"

    @property
    def children_key(self) -> str:
        return "inputs" if self is Direction.UPSTREAM else "dependents"


# Past this many versions a tree is no longer read by a person: the CLI shows a summary instead.
SUMMARY_OVER = 10_000
