"""Rows of a statement over a set of ids, fetched in one statement whatever the set's size, through
the driver's own cursor: a lineage walk asks for a hundred thousand versions at a time.

SQLite takes the set as one JSON array and PostgreSQL as one array parameter, so neither the
statement nor the parameter count grows with the set; another database gets it in chunks.

PostgreSQL gets the array as its text, which the server parses: psycopg would otherwise check each
id in Python, which took longer than the query. Its statement is planned once for any array, while
ByIds is open: planned for the array at hand, a set of thirty thousand ids took 5 ms to plan and
10 ms to run. psycopg 3 also prepares it; psycopg2 cannot.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import text
from sqlmodel import Session

if TYPE_CHECKING:
    from psycopg import Cursor

CHUNK = 5_000
IDS = "/* ids */"

T = TypeVar("T")


class ByIds:
    """`SELECT columns FROM table WHERE key IN (the ids) [AND where]`; the names and `where` are
    the models' own, written into the statement: plain SQL holding no `%` (the drivers' parameter
    mark) and no parameter of its own.

    `driven`: on SQLite, the ids drive a join instead, each a seek on the key, where `IN` sorts
    them into a set first: a fifth faster for a table keyed by them, but an id given twice gives
    its rows twice."""

    def __init__(
        self, session: Session, columns: str, table: str, key: str, where: str | None = None, *, driven: bool = False
    ):
        self.cursor = session.connection().connection.cursor()
        self.dialect = session.get_bind().dialect.name
        if self.dialect == "sqlite" and driven:
            # Renamed, so that json_each's own columns (id, key, value, path...) clash with none of the table's.
            table = f"(SELECT value AS given_id FROM json_each(?)) AS given CROSS JOIN {table}"
            members = "= given.given_id"
        elif self.dialect == "sqlite":
            members = "IN (SELECT value FROM json_each(?))"
        elif self.dialect == "postgresql":
            members = "= ANY(%s::integer[])"
            self.prepared = session.get_bind().dialect.driver == "psycopg"
            self.planning = session.connection().execute(text("SELECT current_setting('plan_cache_mode')")).scalar_one()
            self._plan("force_generic_plan")
        else:
            members = f"IN ({IDS})"
        also = f" AND {where}" if where else ""
        self.query = f"SELECT {columns} FROM {table} WHERE {key} {members}{also}"

    def close(self) -> None:
        if self.dialect == "postgresql":
            self._plan(self.planning)
        self.cursor.close()

    def _plan(self, mode: str) -> None:
        # For this transaction only: the connection goes back to the pool as it came.
        self.cursor.execute("SELECT set_config('plan_cache_mode', %s, true)", (mode,))

    def rows(self, ids: list[int]) -> Sequence[tuple[Any, ...]]:
        if self.dialect == "sqlite":
            self.cursor.execute(self.query, (json.dumps(ids),))
            return self.cursor.fetchall()
        if self.dialect == "postgresql":
            listed = "{" + ",".join(map(str, ids)) + "}"
            if self.prepared:  # psycopg's own cursor, which prepares a statement when asked
                cast("Cursor[tuple[Any, ...]]", self.cursor).execute(self.query, (listed,), prepare=True)
            else:
                self.cursor.execute(self.query, (listed,))
            return self.cursor.fetchall()
        rows: list[tuple[Any, ...]] = []
        for chunk in chunked(ids):
            self.cursor.execute(self.query.replace(IDS, ", ".join(str(int(i)) for i in chunk)))
            rows.extend(self.cursor.fetchall())
        return rows


def chunked(items: list[T]) -> Iterator[list[T]]:
    """`items` a few thousand at a time: as many as one statement's parameters may be."""
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]
