"""Rows read as one JSON array that the database builds. A driver hands a result over a row at a
time, and SQLite's lets the interpreter go to other threads at every row: on a busy service a page
of 100 rows waits for its turn 100 times, where one row holding them all waits once. The statements
are written for the driver itself: the busiest reads (a decision's pinned settings, an auditor's
page of the ledger) cost less that way than building them as expressions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select


def json_array_sql(
    dialect: str, rows: str, columns: Sequence[str], order_by: str | None, json_columns: Sequence[str] = ()
) -> str:
    """A statement that gives the rows of the subquery `rows` (which selects `columns`, ordered by
    `order_by` if given, in its own ORDER BY) as a JSON array of objects keyed by column name, in that
    order: PostgreSQL orders the aggregate by `order_by`, SQLite follows the subquery. A column named in
    `json_columns` holds JSON text: its object carries what the text encodes. The names are the
    models' own, safe to write into the statement."""
    postgres = dialect == "postgresql"
    fields = []
    for name in columns:
        value = f'"{name}"'
        if name in json_columns:
            value = f"CAST({value} AS JSON)" if postgres else f"json({value})"
        fields.append(f"'{name}', {value}")
    if postgres:
        ordered = "" if order_by is None else f' ORDER BY "{order_by}"'
        built = f"json_agg(json_build_object({', '.join(fields)}){ordered})"
        return f"SELECT CAST(COALESCE({built}, CAST('[]' AS JSON)) AS TEXT) FROM ({rows}) AS page"
    # SQLite takes no ORDER BY inside an aggregate before 3.44; it aggregates the rows of an ordered
    # subquery in their order.
    return f"SELECT json_group_array(json_object({', '.join(fields)})) FROM ({rows}) AS page"


def marker(dialect: str) -> str:
    """How the driver of `dialect` writes a named parameter, as a format of its name."""
    return "%({})s" if dialect == "postgresql" else ":{}"


def json_rows(connection: Connection, query: Select, json_columns: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The rows of `query` as dicts keyed by the names of its columns (label the computed ones), read
    in one row. In no particular order: for the rows of an ordered page, `json_array_sql`. Its
    parameters reach the driver as they are: plain strings and numbers, no lists to expand."""
    compiled = query.compile(dialect=connection.dialect)
    dialect = connection.dialect.name
    columns = list(query.subquery().c.keys())
    statement = json_array_sql(dialect, compiled.string, columns, order_by=None, json_columns=json_columns)
    params = compiled.params
    bound = params if compiled.positiontup is None else tuple(params[name] for name in compiled.positiontup)
    text: str = connection.exec_driver_sql(statement, bound).scalar_one()
    rows: list[dict[str, Any]] = json.loads(text)
    return rows
