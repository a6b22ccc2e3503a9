"""Rows read as one JSON array that the database builds. A driver hands a result over a row at a
time, and SQLite's lets the interpreter go to other threads at every row: on a busy service a page
of 100 rows waits for its turn 100 times, where one row holding them all waits once."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from sqlalchemy import JSON, Connection, Select, Text, cast, func, literal_column, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.sql.elements import ColumnElement


def json_array(
    connection: Connection, query: Select, columns: Sequence[str], order_by: str, json_columns: Sequence[str] = ()
) -> str:
    """The rows of `query`, which selects `columns` ordered by `order_by`, as a JSON array of
    objects keyed by column name, in that order. A column named in `json_columns` holds JSON text:
    its object carries what the text encodes."""
    built = _aggregate(connection.dialect.name, tuple(columns), order_by, frozenset(json_columns))
    text: str = connection.execute(select(built).select_from(query.subquery("rows"))).scalar_one()
    return text


@cache
def _aggregate(dialect: str, columns: tuple[str, ...], order_by: str, json_columns: frozenset[str]) -> ColumnElement:
    """The expression that aggregates the rows: built once, as building it costs more than running
    it. The names are the models' own, safe to write into the statement."""
    postgres = dialect == "postgresql"
    fields: list[ColumnElement] = []
    for name in columns:
        column: ColumnElement = literal_column(name)
        fields.append(literal_column(f"'{name}'"))
        if name not in json_columns:
            fields.append(column)
        else:
            fields.append(cast(column, JSON) if postgres else func.json(column))
    if postgres:
        ordered = aggregate_order_by(func.json_build_object(*fields), literal_column(order_by))
        return cast(func.coalesce(func.json_agg(ordered), literal_column("'[]'::json")), Text)
    # SQLite takes no ORDER BY inside an aggregate before 3.44; it aggregates the rows of an ordered
    # subquery in their order.
    return func.json_group_array(func.json_object(*fields))
