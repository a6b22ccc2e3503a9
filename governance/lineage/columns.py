"""Column lineage values: how an output column depends on an input column, and how steps compose.

The vocabulary is OpenLineage's columnLineage facet. A DIRECT dependency carries the input's value
into the output; an INDIRECT one only decides which rows there are or which branch is taken.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from typing import NamedTuple

MAX_COLUMNS = 1000
MAX_ALL_TO_ALL = 10_000


class Kind(StrEnum):
    DIRECT = "DIRECT"
    INDIRECT = "INDIRECT"


class Transformation(StrEnum):
    """What a dependency does: the first four are DIRECT, the others INDIRECT."""

    IDENTITY = "IDENTITY"
    TRANSFORMATION = "TRANSFORMATION"
    AGGREGATION = "AGGREGATION"
    UNKNOWN = "UNKNOWN"
    FILTER = "FILTER"
    JOIN = "JOIN"
    GROUP_BY = "GROUP_BY"
    SORT = "SORT"
    WINDOW = "WINDOW"
    CONDITIONAL = "CONDITIONAL"


# How much a DIRECT step changes the value: a chain of steps is as strong as its strongest step,
# and a step whose effect nobody knows (a Python UDF, an operation without a rule) stays unknown.
_STRENGTH = {
    Transformation.IDENTITY: 0,
    Transformation.TRANSFORMATION: 1,
    Transformation.AGGREGATION: 2,
    Transformation.UNKNOWN: 3,
}


class Edge(NamedTuple):
    """One way a column depends on another."""

    kind: Kind
    transformation: Transformation
    masking: bool = False

    @property
    def label(self) -> str:
        return f"{self.kind.value} {self.transformation.value}{' masking' if self.masking else ''}"


IDENTITY = Edge(Kind.DIRECT, Transformation.IDENTITY)
TRANSFORM = Edge(Kind.DIRECT, Transformation.TRANSFORMATION)
MASK = Edge(Kind.DIRECT, Transformation.TRANSFORMATION, masking=True)
AGGREGATE = Edge(Kind.DIRECT, Transformation.AGGREGATION)
UNKNOWN = Edge(Kind.DIRECT, Transformation.UNKNOWN)
FILTER = Edge(Kind.INDIRECT, Transformation.FILTER)
JOIN = Edge(Kind.INDIRECT, Transformation.JOIN)
GROUP_BY = Edge(Kind.INDIRECT, Transformation.GROUP_BY)
SORT = Edge(Kind.INDIRECT, Transformation.SORT)
WINDOW = Edge(Kind.INDIRECT, Transformation.WINDOW)
CONDITIONAL = Edge(Kind.INDIRECT, Transformation.CONDITIONAL)


@cache
def compose(outer: Edge, inner: Edge) -> Edge:
    """`outer` applied to a value that depends on a column through `inner`.

    Anything that flows into a row-deciding step becomes that INDIRECT step; an INDIRECT
    dependency stays INDIRECT through any later step; DIRECT steps keep the strongest change.
    """
    if outer.kind is Kind.INDIRECT:
        return outer
    if inner.kind is Kind.INDIRECT:
        return inner
    strongest = max(outer.transformation, inner.transformation, key=_STRENGTH.__getitem__)
    return Edge(Kind.DIRECT, strongest, outer.masking or inner.masking)


@cache
def compose_all(outer: Edge, inner: frozenset[Edge]) -> frozenset[Edge]:
    return frozenset(compose(outer, edge) for edge in inner)


def edge(kind: str, transformation: str, masking: bool = False) -> Edge:
    return Edge(Kind(kind), Transformation(transformation), masking)
