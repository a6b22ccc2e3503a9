"""Column lineage from a Spark plan, without running a Spark job.

`extract(df)` reads the structure of the DataFrame's analyzed plan from one JSON serialization, and
asks the JVM only what that JSON leaves out: the root paths and format of each file relation. Each plan
operation and expression has a rule, like an analyzer per step; a plan node without one falls back
to "every output column depends on every input column of that node", and is named in the result.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import quote

from py4j.protocol import Py4JError
from pyspark.sql import DataFrame

from governance.lineage.columns import (
    AGGREGATE,
    CONDITIONAL,
    FILTER,
    GROUP_BY,
    IDENTITY,
    JOIN,
    MASK,
    MAX_ALL_TO_ALL,
    MAX_COLUMNS,
    SORT,
    TRANSFORM,
    UNKNOWN,
    WINDOW,
    Edge,
    Kind,
    Transformation,
    compose_all,
)

_AGGREGATES = "org.apache.spark.sql.catalyst.expressions.aggregate."
_TRANSPARENT = frozenset(
    {
        "Alias",
        "SortOrder",
        "KnownNotNull",
        "KnownNullable",
        "KnownFloatingPointNormalized",
        "PromotePrecision",
        "WindowSpecDefinition",
    }
)
_MASKING = frozenset({"Sha1", "Sha2", "Md5", "Crc32", "Murmur3Hash", "XxHash64", "HiveHash", "Mask"})
_OPAQUE = frozenset(
    {
        "PythonUDF",
        "PythonUDAF",
        "PythonUDTF",
        "ScalaUDF",
        "ScalaUDAF",
        "ScalaAggregator",
        "HiveSimpleUDF",
        "HiveGenericUDF",
        "HiveUDAFFunction",
    }
)
_PASS_THROUGH = frozenset(
    {
        "SubqueryAlias",
        "View",
        "ResolvedHint",
        "Repartition",
        "RepartitionByExpression",
        "RebalancePartitions",
        "GlobalLimit",
        "LocalLimit",
        "Offset",
        "Tail",
        "Sample",
        "CollectMetrics",
        "Subquery",
        "EventTimeWatermark",
    }
)
_FILE_RELATIONS = frozenset({"LogicalRelation"})
_TABLE_RELATIONS = frozenset({"DataSourceV2Relation", "DataSourceV2ScanRelation", "HiveTableRelation"})
_RDD_RELATIONS = frozenset({"LogicalRDD"})
_DATA_IN_PLAN = frozenset({"LocalRelation", "Range", "OneRowRelation"})
_SEMI_JOINS = ("LeftSemi", "LeftAnti")
_HADOOP_PATH = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(//[^/]*)?(/.*)")
# Window functions whose value is a row's position in its window. Spark gives rank-like ones the
# window's order columns as arguments, but only to compare rows: none of their values comes through.
_RANKING = frozenset({"RowNumber", "Rank", "DenseRank", "PercentRank", "CumeDist", "NTile"})

# A column's dependencies while the plan is read: (relation leaf, column) -> the ways it depends.
Deps = Mapping[tuple[int, str], frozenset[Edge]]
EMPTY: Deps = {}


@dataclass(frozen=True)
class Relation:
    """An input the plan reads: `files` (with the root paths given to the reader), a `table`, an
    `rdd` (whose own source Spark's plan does not show), or `other`."""

    kind: str
    name: str
    paths: tuple[str, ...] = ()
    format: str | None = None


@dataclass(frozen=True, order=True)
class Dependency:
    """An output column depends on `column` of input `relation` (an index into `inputs`)."""

    relation: int
    column: str
    kind: Kind
    transformation: Transformation
    masking: bool = False


@dataclass(frozen=True)
class ColumnLineage:
    column: str
    dependencies: tuple[Dependency, ...]


@dataclass(frozen=True)
class PlanLineage:
    """What a DataFrame reads, and where each of its columns comes from.

    `dataset` holds the dependencies of every column at once: the columns that filter, join, group,
    sort or deduplicate the rows. `fallbacks` names the plan nodes read by the generic rule, and
    `notes` says what was capped or could not be traced.
    """

    inputs: tuple[Relation, ...]
    columns: tuple[ColumnLineage, ...]
    dataset: tuple[Dependency, ...] = ()
    fallbacks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def of(self, column: str) -> tuple[Dependency, ...]:
        """Everything `column` depends on: its own dependencies and the dataset's. KeyError if the
        DataFrame has no such column, or it lies beyond `max_columns`."""
        for each in self.columns:
            if each.column == column:
                return tuple(sorted({*each.dependencies, *self.dataset}))
        raise KeyError(column)


def extract(frame: DataFrame, *, max_columns: int = MAX_COLUMNS, max_all_to_all: int = MAX_ALL_TO_ALL) -> PlanLineage:
    """The inputs and column lineage of `frame`, read from its analyzed plan.

    `max_columns` caps the output columns traced; `max_all_to_all` caps the dependencies one
    fallback may add, beyond which they are recorded once for the whole dataset.
    """
    analyzed = frame._jdf.queryExecution().analyzed()
    reader = _PlanReader(max_all_to_all)
    top = reader.plan(_plan_json(frame, analyzed))
    relations, index_of = _relations(reader, analyzed)
    notes = list(reader.notes)
    outputs = top.output
    if len(outputs) > max_columns:
        notes.append(f"column lineage covers the first {max_columns:,} of {len(outputs):,} columns")
        outputs = outputs[:max_columns]
    columns = tuple(
        ColumnLineage(reader.names[expr_id], _dependencies(reader.deps_of(expr_id), index_of)) for expr_id in outputs
    )
    if reader.unresolved:
        shown = ", ".join(sorted(reader.unresolved)[:5])
        notes.append(f"the origin of {len(reader.unresolved)} column(s) could not be traced: {shown}")
    return PlanLineage(
        inputs=relations,
        columns=columns,
        dataset=_dependencies(top.rows, index_of),
        fallbacks=tuple(dict.fromkeys(reader.fallbacks)),
        notes=tuple(notes),
    )


def _plan_json(frame: DataFrame, analyzed) -> list[dict[str, Any]]:
    """The analyzed plan's JSON (what `toJSON` gives), written by the driver's JVM to a private
    temporary file: a Py4J answer of 16 KB or more can wait 40 ms on TCP acknowledgements, longer
    than reading most plans takes."""
    handle, name = tempfile.mkstemp(prefix="custody-plan-", suffix=".json")
    os.close(handle)
    try:
        try:
            mapper, file_class = json_writer(frame.sparkSession._jvm)
            mapper.writeValue(file_class(name), analyzed.jsonValue())
        except Py4JError:
            return json.loads(analyzed.toJSON())
        with open(name, "rb") as written:
            return json.loads(written.read())
    finally:
        os.unlink(name)


@cache
def json_writer(jvm) -> tuple[Any, Any]:
    """Spark's own JSON mapper and `java.io.File`, looked up once per JVM (each lookup is a round trip)."""
    return getattr(jvm.org.json4s.jackson, "JsonMethods$").__getattr__("MODULE$").mapper(), jvm.java.io.File


def _dependencies(deps: Deps, index_of: Mapping[int, int]) -> tuple[Dependency, ...]:
    found = {
        Dependency(index_of[leaf], column, each.kind, each.transformation, each.masking)
        for (leaf, column), edges in deps.items()
        if leaf in index_of
        for each in edges
    }
    return tuple(sorted(found))


@dataclass(frozen=True)
class _Out:
    output: list[int]
    rows: Deps = field(default_factory=dict)


@dataclass(frozen=True)
class _Leaf:
    """A relation of the plan: `position` among the leaves of the main plan (None inside a subquery)."""

    kind: str
    node: dict[str, Any]
    first_id: int | None
    position: int | None


def _short(node: Mapping[str, Any]) -> str:
    name = node["class"]
    return name[name.rfind(".") + 1 :]


def _merge(parts: Iterable[Deps]) -> Deps:
    merged: dict[tuple[int, str], frozenset[Edge]] = {}
    for part in parts:
        for key, edges in part.items():
            known = merged.get(key)
            merged[key] = edges if known is None or known == edges else known | edges
    return merged


def _through(deps: Deps, outer: Edge) -> Deps:
    return {key: compose_all(outer, edges) for key, edges in deps.items()}


@dataclass(frozen=True, eq=False)
class _Struct(Mapping[tuple[int, str], frozenset[Edge]]):
    """A struct value: its dependencies as a whole, and each field's own, by ordinal, so that a field
    read back (`s.x`) depends on what went into that field only. Any operation but a field access or
    a cast reads it as a plain mapping, the whole."""

    whole: Deps
    fields: tuple[Deps, ...]

    def __getitem__(self, key: tuple[int, str]) -> frozenset[Edge]:
        return self.whole[key]

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return iter(self.whole)

    def __len__(self) -> int:
        return len(self.whole)


def _cast(deps: Deps, data_type: Any) -> Deps:
    """A cast transforms; a struct cast to a struct (its fields renamed or retyped) keeps its fields
    apart, since Spark casts them position by position."""
    whole = _through(deps, TRANSFORM)
    if isinstance(deps, _Struct) and isinstance(data_type, dict) and data_type.get("type") == "struct":
        targets = [each["type"] for each in data_type["fields"]]
        fields = zip(deps.fields, targets, strict=True)
        return _Struct(whole, tuple(_cast(each, target) for each, target in fields))
    return whole


def _keeps_type(cast: Mapping[str, Any], child: Mapping[str, Any]) -> bool:
    """Whether a cast is to the type its child has already, and so changes no value: Spark casts every
    column read through a catalog view to the type the view declares. Only a child whose JSON gives
    its type (a column) can be compared; any other counts as retyped."""
    return "dataType" in child and child["dataType"] == cast.get("dataType")


def _expr_id(node: Mapping[str, Any]) -> int:
    return node["exprId"]["id"]


class _PlanReader:
    """Reads plan JSON bottom-up, giving each attribute (by expression id) its dependencies."""

    def __init__(self, max_all_to_all: int):
        self.max_all_to_all = max_all_to_all
        self.attrs: dict[int, Deps] = {}
        self.names: dict[int, str] = {}
        self.ctes: dict[int, _Out] = {}
        self.leaves: list[_Leaf] = []
        self.main_leaves: dict[int, int] = {}
        self.fallbacks: list[str] = []
        self.notes: list[str] = []
        self.unresolved: set[str] = set()

    # Plans -----------------------------------------------------------------------------------

    def plan(self, nodes: list[dict[str, Any]]) -> _Out:
        """The output attributes and row dependencies of a plan given as pre-order JSON nodes."""
        children = _children_of(nodes)
        if not self.main_leaves:
            # The main plan is read first. Its leaves come in the order of the JVM's `collectLeaves`,
            # so a relation's paths can be asked of the leaf at the same position.
            leaves = [id(node) for node, kids in zip(nodes, children, strict=True) if not kids]
            self.main_leaves = {identity: position for position, identity in enumerate(leaves)}
        results: dict[int, _Out] = {}
        for index in _post_order(children):
            results[index] = self.node(nodes[index], [results.pop(c) for c in children[index]])
        return results[0]

    def node(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        kind = _short(node)
        rule = _PLAN_RULES.get(kind)
        if rule is not None:
            return rule(self, node, kids)
        if kind in _PASS_THROUGH and len(kids) == 1:
            return kids[0]
        return self.fallback(kind, node, kids)

    def leaf(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        kind = _short(node)
        # Hive tables list their data and partition columns apart.
        output = self.named(node.get("output") or [*(node.get("dataCols") or []), *(node.get("partitionCols") or [])])
        if kind in _FILE_RELATIONS or kind in _TABLE_RELATIONS or kind in _RDD_RELATIONS:
            leaf = len(self.leaves)
            self.leaves.append(_Leaf(kind, node, output[0] if output else None, self.main_leaves.get(id(node))))
            for expr_id in output:
                self.attrs[expr_id] = {(leaf, self.names[expr_id]): frozenset({IDENTITY})}
        else:
            for expr_id in output:
                self.attrs[expr_id] = EMPTY
        return _Out(output)

    def project(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        return _Out(self.named(node["projectList"]), kids[0].rows)

    def filter(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        return _Out(kids[0].output, _merge([kids[0].rows, _through(self.value(node["condition"]), FILTER)]))

    def join(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        left, right = kids
        join_type = str(node.get("joinType", {}).get("object", ""))
        semi = any(f".{name}$" in join_type for name in _SEMI_JOINS)
        condition = _through(self.value(node["condition"]), JOIN) if node.get("condition") else EMPTY
        output = left.output if semi else left.output + right.output
        return _Out(output, _merge([left.rows, right.rows, condition]))

    def aggregate(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        keys = _merge(self.value(e) for e in node["groupingExpressions"])
        return _Out(self.named(node["aggregateExpressions"]), _merge([kids[0].rows, _through(keys, GROUP_BY)]))

    def window(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        return _Out(kids[0].output + self.named(node["windowExpressions"]), kids[0].rows)

    def sort(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        order = _merge(self.value(e) for e in node["order"])
        return _Out(kids[0].output, _merge([kids[0].rows, _through(order, SORT)]))

    def deduplicate(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        keys = [self.value(e) for e in node["keys"]] if "keys" in node else [self.deps_of(i) for i in kids[0].output]
        return _Out(kids[0].output, _merge([kids[0].rows, _through(_merge(keys), GROUP_BY)]))

    def union(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        # A union's columns are its first child's attributes, now also fed by the other children.
        # Changing them in place is safe: the analyzer gives every other use of those attributes
        # above the union new ids.
        output = kids[0].output
        for position, expr_id in enumerate(output):
            self.attrs[expr_id] = _merge(self.deps_of(kid.output[position]) for kid in kids)
        return _Out(output, _merge(kid.rows for kid in kids))

    def set_filter(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        """INTERSECT and EXCEPT keep the left rows that the right side has, or has not."""
        left, right = kids
        other = _merge([right.rows, *(self.deps_of(i) for i in right.output)])
        return _Out(left.output, _merge([left.rows, _through(other, FILTER)]))

    def generate(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        produced = self.value(node["generator"])
        output = self.named(node["generatorOutput"])
        for expr_id in output:
            self.attrs[expr_id] = produced
        return _Out(kids[0].output + output, kids[0].rows)

    def expand(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        output = self.named(node["output"])
        for position, expr_id in enumerate(output):
            self.attrs[expr_id] = _merge(self.value(projection[position]) for projection in node["projections"])
        return _Out(output, kids[0].rows)

    def with_cte(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        return kids[node["plan"]]

    def cte_definition(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        self.ctes[node["id"]] = kids[0]
        return kids[0]

    def cte_reference(self, node: dict[str, Any], kids: list[_Out]) -> _Out:
        definition = self.ctes.get(node["cteId"])
        output = self.named(node["output"])
        if definition is None or len(definition.output) != len(output):
            return self.fallback("CTERelationRef", node, kids)
        for expr_id, source in zip(output, definition.output, strict=True):
            self.attrs[expr_id] = self.deps_of(source)
        return _Out(output, definition.rows)

    def fallback(self, kind: str, node: dict[str, Any], kids: list[_Out]) -> _Out:
        """Every output column depends, in an unknown way, on every input column of the node."""
        self.fallbacks.append(kind)
        inputs = _merge([*(kid.rows for kid in kids), *(self.deps_of(i) for kid in kids for i in kid.output)])
        unknown = _through(inputs, UNKNOWN)
        # A node that does not list its output is taken to pass on its children's columns.
        output = (
            self.named(node["output"])
            if isinstance(node.get("output"), list)
            else [i for kid in kids for i in kid.output]
        )
        rows = _merge(kid.rows for kid in kids)
        if len(output) * len(inputs) > self.max_all_to_all:
            self.notes.append(
                f"{kind}: {len(output):,} x {len(inputs):,} column dependencies exceed the cap of "
                f"{self.max_all_to_all:,}; recorded once for the whole dataset"
            )
            for expr_id in output:
                self.attrs.setdefault(expr_id, EMPTY)
            return _Out(output, _merge([rows, unknown]))
        for expr_id in output:
            self.attrs[expr_id] = unknown
        return _Out(output, rows)

    def named(self, expressions: list[list[dict[str, Any]]]) -> list[int]:
        """The attributes a list of named expressions defines, each given its dependencies."""
        output = []
        for expression in expressions:
            top = expression[0]
            expr_id = _expr_id(top)
            self.names[expr_id] = top["name"]
            if _short(top) != "AttributeReference":
                self.attrs[expr_id] = self.value(expression)
            output.append(expr_id)
        return output

    # Expressions -----------------------------------------------------------------------------

    def value(self, nodes: list[dict[str, Any]]) -> Deps:
        """What an expression's value depends on; its nodes come in pre-order, children inline, so a
        node's first child is the node that follows it."""
        stack: list[Deps] = []
        for index in range(len(nodes) - 1, -1, -1):
            node = nodes[index]
            count = node["num-children"]
            if count:
                kids = stack[-count:][::-1]
                del stack[-count:]
            else:
                kids = []
            if _short(node) == "Cast" and _keeps_type(node, nodes[index + 1]):
                stack.append(kids[0])
            else:
                stack.append(self.expression(node, kids))
        return stack[0]

    def expression(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        kind = _short(node)
        if kind == "AttributeReference":
            return self.attribute(node)
        rule = _EXPRESSION_RULES.get(kind)
        if rule is not None:
            return rule(self, node, kids)
        if not kids:
            return EMPTY
        if kind in _TRANSPARENT:
            return kids[0] if len(kids) == 1 else _merge(kids)
        merged = kids[0] if len(kids) == 1 else _merge(kids)
        if kind in _OPAQUE:
            return _through(merged, UNKNOWN)
        if kind in _MASKING:
            return _through(merged, MASK)
        if node["class"].startswith(_AGGREGATES):
            return _through(merged, AGGREGATE)
        return _through(merged, TRANSFORM)

    def attribute(self, node: dict[str, Any]) -> Deps:
        expr_id = _expr_id(node)
        self.names.setdefault(expr_id, node["name"])
        return self.deps_of(expr_id)

    def deps_of(self, expr_id: int) -> Deps:
        """An attribute's dependencies; one no rule defined is named in the notes, never dropped quietly."""
        deps = self.attrs.get(expr_id)
        if deps is None:
            self.unresolved.add(f"{self.names.get(expr_id, 'column')}#{expr_id}")
            return EMPTY
        return deps

    def outer(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        return self.value(node["e"])

    def struct_field(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        """`s.x` of a struct built in the plan depends on what went into `x`; `s.x` of a column read
        as is depends on the nested field `s.x`; neither on all of `s`."""
        (child,) = kids
        if isinstance(child, _Struct):
            return child.fields[node["ordinal"]]
        name = node.get("name")
        if name and len(child) == 1:
            (((leaf, column), edges),) = child.items()
            if edges == frozenset({IDENTITY}):
                return {(leaf, f"{column}.{name}"): edges}
        return child

    def named_struct(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        """`named_struct('x', a, 'y', b)` (also `struct(a, b)`): its children alternate names and values."""
        values = kids[1::2]
        return _Struct(_through(_merge(values), TRANSFORM), tuple(values))

    def cast(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        (child,) = kids
        return _cast(child, node.get("dataType"))

    def case_when(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        conditions = range(0, 2 * len(node["branches"]), 2)
        return self.conditional(kids, set(conditions))

    def if_(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        return self.conditional(kids, {0})

    @staticmethod
    def conditional(kids: list[Deps], conditions: set[int]) -> Deps:
        return _merge(
            _through(kid, CONDITIONAL if position in conditions else TRANSFORM) for position, kid in enumerate(kids)
        )

    def null_if(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        """`nullif(a, b)` is `a` unless it equals `b`: only `a`'s value comes through, and both decide
        whether it does. Read from its arguments: the replacement Spark builds reads `a` through
        references whose JSON does not say what they refer to."""
        value, other = self.value(node["left"]), self.value(node["right"])
        return _merge([_through(value, TRANSFORM), _through(_merge([value, other]), CONDITIONAL)])

    def coalesce(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        """`coalesce(a, b, ...)` (also `nvl`, `ifnull`) gives the first argument that is not null:
        each argument may be the value, and each one's nullness decides whether the next is."""
        arguments = _merge(kids)
        return _merge([_through(arguments, TRANSFORM), _through(arguments, CONDITIONAL)])

    def aggregate_expression(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        """`sum(x) FILTER (WHERE y > 0)`: the filter decides which rows the aggregate sees."""
        function, *row_filter = kids
        return _merge([function, *(_through(each, FILTER) for each in row_filter)])

    def window_expression(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        function, spec = kids
        return _merge([function, _through(spec, WINDOW)])

    def ranking(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        return _through(_merge(kids), WINDOW)

    def pivot(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        pivot_column, value = kids
        return _merge([_through(pivot_column, CONDITIONAL), _through(value, AGGREGATE)])

    # A subquery expression's children are the outer columns it is correlated on. Each is also read
    # where the subquery's plan uses it (`WHERE c.k = o.k`: a FILTER), so the children add nothing;
    # taken as values, they would make a correlation key a DIRECT input.

    def scalar_subquery(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        return self.subquery(node, columns=1)

    def exists(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        return _through(self.plan(node["plan"]).rows, FILTER)

    def list_query(self, node: dict[str, Any], kids: list[Deps]) -> Deps:
        return self.subquery(node, columns=None)

    def subquery(self, node: dict[str, Any], columns: int | None) -> Deps:
        """A subquery's value: its (first `columns`) output columns and what decides its rows."""
        found = self.plan(node["plan"])
        return _merge([found.rows, *(self.deps_of(i) for i in found.output[:columns])])


_PLAN_RULES = {
    **dict.fromkeys(_FILE_RELATIONS | _TABLE_RELATIONS | _RDD_RELATIONS | _DATA_IN_PLAN, _PlanReader.leaf),
    "Project": _PlanReader.project,
    "Filter": _PlanReader.filter,
    "Join": _PlanReader.join,
    "Aggregate": _PlanReader.aggregate,
    "Window": _PlanReader.window,
    "Sort": _PlanReader.sort,
    "Deduplicate": _PlanReader.deduplicate,
    "Distinct": _PlanReader.deduplicate,
    "Union": _PlanReader.union,
    "Intersect": _PlanReader.set_filter,
    "Except": _PlanReader.set_filter,
    "Generate": _PlanReader.generate,
    "Expand": _PlanReader.expand,
    "WithCTE": _PlanReader.with_cte,
    "CTERelationDef": _PlanReader.cte_definition,
    "CTERelationRef": _PlanReader.cte_reference,
}

_EXPRESSION_RULES = {
    "OuterReference": _PlanReader.outer,
    "GetStructField": _PlanReader.struct_field,
    "CreateNamedStruct": _PlanReader.named_struct,
    "Cast": _PlanReader.cast,
    "CaseWhen": _PlanReader.case_when,
    "If": _PlanReader.if_,
    "NullIf": _PlanReader.null_if,
    "Coalesce": _PlanReader.coalesce,
    "AggregateExpression": _PlanReader.aggregate_expression,
    "WindowExpression": _PlanReader.window_expression,
    **dict.fromkeys(_RANKING, _PlanReader.ranking),
    "PivotFirst": _PlanReader.pivot,
    "ScalarSubquery": _PlanReader.scalar_subquery,
    "Exists": _PlanReader.exists,
    "ListQuery": _PlanReader.list_query,
}


def _children_of(nodes: list[dict[str, Any]]) -> list[list[int]]:
    """Each node's children, by index into the pre-order list."""
    end = [0] * len(nodes)
    children: list[list[int]] = [[] for _ in nodes]
    for index in range(len(nodes) - 1, -1, -1):
        following = index + 1
        for _ in range(nodes[index]["num-children"]):
            children[index].append(following)
            following = end[following]
        end[index] = following
    return children


def _post_order(children: list[list[int]]) -> list[int]:
    order: list[int] = []
    stack = [(0, False)]
    while stack:
        index, done = stack.pop()
        if done:
            order.append(index)
            continue
        stack.append((index, True))
        stack.extend((child, False) for child in reversed(children[index]))
    return order


def _relations(reader: _PlanReader, analyzed) -> tuple[tuple[Relation, ...], dict[int, int]]:
    """The distinct inputs, and the input each leaf of the plan reads."""
    jvm = _JvmRelations(analyzed, len(reader.main_leaves))
    relations: dict[Relation, int] = {}
    index_of: dict[int, int] = {}
    for position, leaf in enumerate(reader.leaves):
        relation = _relation(leaf, jvm.of(leaf) if leaf.kind in _FILE_RELATIONS else None, position)
        index_of[position] = relations.setdefault(relation, len(relations))
    return tuple(relations), index_of


def _relation(leaf: _Leaf, jvm_relation, position: int) -> Relation:
    """The input a leaf reads; one without a name is told apart from the others by its position."""
    table = _table_name(leaf.node)
    if leaf.kind in _RDD_RELATIONS:
        return Relation("rdd", f"{leaf.kind} {position}")
    if jvm_relation is None:
        return Relation("table" if table else "other", table or f"{leaf.kind} {position}")
    paths, file_format = _files_of(jvm_relation)
    if table:
        return Relation("table", table, paths, file_format)
    if paths:
        return Relation(
            "files", paths[0] if len(paths) == 1 else f"{paths[0]} and {len(paths) - 1} more", paths, file_format
        )
    return Relation("other", f"{jvm_relation.getClass().getSimpleName()} {position}")


def _table_name(node: Mapping[str, Any]) -> str | None:
    for key in ("catalogTable", "tableMeta", "identifier"):
        found = node.get(key)
        if isinstance(found, dict):
            identifier = found.get("identifier", found)
            parts = [identifier.get(part) for part in ("catalog", "database", "table", "name")]
            name = ".".join(str(p) for p in parts if p)
            if name:
                return name
    return None


class _JvmRelations:
    """The JVM objects of file relations, asked for only when the JSON has one: by position for
    the main plan, by the id of the first column inside subqueries."""

    def __init__(self, analyzed, main_leaves: int):
        self.analyzed = analyzed
        self.main_leaves = main_leaves
        self._leaves: Any = None
        self._by_first_id: dict[int, Any] | None = None

    def of(self, leaf: _Leaf):
        if leaf.position is not None:
            if self._leaves is None:
                self._leaves = self.analyzed.collectLeaves()
            if self._leaves.size() == self.main_leaves:
                try:
                    return self._leaves.apply(leaf.position).relation()
                except Py4JError:
                    pass  # not the relation expected there: look it up by its first column below
        if leaf.first_id is None:
            return None
        if self._by_first_id is None:
            self._by_first_id = _by_first_id(self.analyzed)
        return self._by_first_id.get(leaf.first_id)


def _by_first_id(analyzed) -> dict[int, Any]:
    found = {}
    plans = analyzed.subqueriesAll()
    for plan in [analyzed, *(plans.apply(i) for i in range(plans.size()))]:
        leaves = plan.collectLeaves()
        for position in range(leaves.size()):
            leaf = leaves.apply(position)
            if leaf.nodeName() in _FILE_RELATIONS and leaf.output().size():
                found[leaf.output().head().exprId().id()] = leaf.relation()
    return found


def _files_of(relation) -> tuple[tuple[str, ...], str | None]:
    try:
        paths = tuple(relation.location().rootPaths().mkString("\n").split("\n"))
    except Py4JError:
        return (), None
    # A HadoopFsRelation's string is its format's short name.
    return tuple(_as_uri(p) for p in paths if p), relation.toString()


def _as_uri(hadoop_path: str) -> str:
    """A Hadoop path's string (`file:/a/c?.csv`, its characters as they are) as the URI it names, so
    that it reads back as the same path wherever URIs are decoded."""
    match = _HADOOP_PATH.fullmatch(hadoop_path)
    if match is None:
        return hadoop_path
    scheme, authority, path = match.groups()
    return f"{scheme}:{authority or ''}{quote(path, safe='/')}"
