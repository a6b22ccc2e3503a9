"""The catalog's lineage held in memory by a long-lived process, the service, as numpy arrays both
ways: its walks then read no database row per version. A one-shot command reads the hops a level
at a time instead (governance.catalog.hops): loading every edge would cost it more than its walk.

Edges are only ever added, each in the transaction that commits its version. Before a walk that
only reads, the process asks for the highest edge id and reads the edges above those it holds.
PostgreSQL hands ids out before commit, so an edge may become visible after one with a higher id:
the ids a read did not find below the highest are asked for again before each walk, until every
transaction that could still commit them has ended (a rolled-back version's ids never come).

The held edges may be newer than a walk's transaction sees: the versions it cannot read are the
newer ones, and the lineage built from the walk leaves them out. The service walks the edges; a
command walks the hops kept beside them, which `custody repair` mends when the two disagree. A
catalog put back from a backup under a running service is not noticed: restart the service then.
"""

from __future__ import annotations

import threading
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np
from sqlalchemy import Connection, Dialect, Engine, text
from sqlmodel import Session

from governance.catalog.byids import ByIds
from governance.catalog.engine import READ_ONLY
from governance.catalog.hops import joined
from governance.catalog.models import LineageEdge
from governance.lineage.terms import Direction

EDGES = LineageEdge.__tablename__
EDGE_COLUMNS = ("id", "output_version_id", "input_version_id")
# Edges read per statement while loading: each comes back as text, a few MB per column.
LOAD_CHUNK = 500_000
# New edges wait beside the arrays until there are this many, or a fiftieth of those in them:
# rebuilding a million versions' arrays takes about half a second.
REBUILD_AT = 50_000
_NONE = np.zeros(0, dtype=np.int32)


@dataclass(frozen=True, eq=False)
class Adjacency:
    """Next hops in one direction, compressed by row: row `r`'s hops are
    `targets[starts[r]:starts[r + 1]]`. `keys`: the versions of the rows, sorted; None when row
    `v` is version `v`'s, for every version up to the last."""

    keys: np.ndarray | None
    starts: np.ndarray
    targets: np.ndarray

    @classmethod
    def of(cls, keys: np.ndarray, values: np.ndarray, *, dense: bool) -> Adjacency:
        """The hops `values[i]` of versions `keys[i]`, with a row per version up to the last
        (`dense`, read by index), or per version that has any (read by binary search)."""
        order = np.argsort(keys, kind="stable")
        if dense:
            counts = np.bincount(keys, minlength=1)
            return cls(None, np.concatenate(([0], np.cumsum(counts))), values[order])
        rows, counts = np.unique(keys, return_counts=True)
        return cls(rows, np.concatenate(([0], np.cumsum(counts))), values[order])

    def hops(self, versions: np.ndarray) -> Gathered:
        """The next hops of `versions` (given once each) that have any."""
        versions, rows = self._rows(versions)
        first = self.starts[rows]
        counts = self.starts[rows + 1] - first
        versions, first, counts = versions[counts > 0], first[counts > 0], counts[counts > 0]
        # Each version's run of positions first, first + 1, ..., laid end to end.
        ends = np.cumsum(counts)
        positions = np.repeat(first - ends + counts, counts) + np.arange(ends[-1] if ends.size else 0)
        return Gathered(versions, counts, self.targets[positions])

    def _rows(self, versions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Those of `versions` that have a row, and their rows."""
        if self.keys is None:
            versions = versions[versions < self.starts.size - 1]
            return versions, versions
        if not self.keys.size:
            return _NONE, _NONE
        rows = np.minimum(np.searchsorted(self.keys, versions), self.keys.size - 1)
        found = self.keys[rows] == versions
        return versions[found], rows[found]


@dataclass(frozen=True, eq=False)
class Gathered:
    """The next hops of a level's versions: `versions` those that have any, `counts` how many each,
    `hops` all of them in the same order."""

    versions: np.ndarray
    counts: np.ndarray
    hops: np.ndarray

    def targets(self) -> np.ndarray:
        return self.hops

    def by_version(self) -> dict[int, list[int]]:
        flat, ends = self.hops.tolist(), np.cumsum(self.counts).tolist()
        found: dict[int, list[int]] = {}
        start = 0
        for version, end in zip(self.versions.tolist(), ends, strict=True):
            found.setdefault(version, []).extend(flat[start:end])
            start = end
        return found


def _together(parts: list[Gathered]) -> Gathered:
    return Gathered(
        np.concatenate([part.versions for part in parts]),
        np.concatenate([part.counts for part in parts]),
        np.concatenate([part.hops for part in parts]),
    )


@dataclass(frozen=True, eq=False)
class Edges:
    """Edges as two arrays side by side: the version built, and the version it read."""

    outputs: np.ndarray
    inputs: np.ndarray

    def __len__(self) -> int:
        return int(self.outputs.size)

    def __add__(self, other: Edges) -> Edges:
        return Edges(np.concatenate((self.outputs, other.outputs)), np.concatenate((self.inputs, other.inputs)))

    def both_ways(self, *, dense: bool) -> dict[Direction, Adjacency]:
        return {
            Direction.UPSTREAM: Adjacency.of(self.outputs, self.inputs, dense=dense),
            Direction.DOWNSTREAM: Adjacency.of(self.inputs, self.outputs, dense=dense),
        }


NO_EDGES = Edges(_NONE, _NONE)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The lineage as of one refresh: arrays indexed by version of the edges read up to the last
    rebuild, and those read since beside them, in rows of their own versions only."""

    built: Edges
    recent: Edges
    by_index: dict[Direction, Adjacency]
    by_search: dict[Direction, Adjacency]

    @classmethod
    def of(cls, built: Edges, recent: Edges = NO_EDGES) -> Snapshot:
        return cls(built, recent, built.both_ways(dense=True), recent.both_ways(dense=False))

    def with_edges(self, new: Edges) -> Snapshot:
        recent = self.recent + new
        if len(recent) > max(REBUILD_AT, len(self.built) // 50):
            return Snapshot.of(self.built + recent)
        return Snapshot(self.built, recent, self.by_index, recent.both_ways(dense=False))

    def hops(self, direction: Direction, versions: np.ndarray) -> Gathered:
        return _together([self.by_index[direction].hops(versions), self.by_search[direction].hops(versions)])


EMPTY = Snapshot.of(NO_EDGES)


@dataclass
class ResidentLineage:
    """The lineage one catalog holds, kept up to date by `current`."""

    snapshot: Snapshot = EMPTY
    top: int = 0  # the highest edge id read
    unseen: np.ndarray = field(default_factory=lambda: _NONE)  # ids below it not found yet...
    # ...and for each, once asked for again, the first transaction id then not yet given out (0: not yet).
    unseen_until: np.ndarray = field(default_factory=lambda: _NONE)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self, session: Session) -> Snapshot:
        """The lineage as the session's transaction sees it, or later."""
        with self.lock:
            connection = session.connection()
            top = connection.execute(text(f"SELECT max(id) FROM {EDGES}")).scalar_one() or 0
            if top == self.top and not self.unseen.size:
                return self.snapshot
            horizon = _horizon(connection)
            ids, new = _read(session, self.top, top, self.unseen)
            snapshot = self.snapshot.with_edges(new) if len(new) else self.snapshot
            self._still_unseen(ids, top, horizon)
            self.snapshot, self.top = snapshot, max(self.top, top)
            return snapshot

    def _still_unseen(self, found: np.ndarray, top: int, horizon: tuple[int, int] | None) -> None:
        """Which ids to ask for again. A transaction that could still commit an id below the top
        already had its own id when the id was asked for again; once every such transaction has
        ended, what is still missing never comes. SQLite commits one transaction at a time, in
        the order of its ids: what a read does not find below the top never comes."""
        if horizon is None:
            self.unseen = self.unseen_until = _NONE
            return
        oldest_running, next_to_give = horizon
        fresh = np.arange(self.top + 1, top + 1, dtype=np.int64)
        ids = np.concatenate((self.unseen, fresh))
        until = np.concatenate((np.where(self.unseen_until > 0, self.unseen_until, next_to_give), np.zeros_like(fresh)))
        keep = ~np.isin(ids, found) & ((until == 0) | (until > oldest_running))
        self.unseen, self.unseen_until = ids[keep], until[keep]


def _horizon(connection: Connection) -> tuple[int, int] | None:
    """PostgreSQL's oldest transaction still running and the first id not yet given to one; None
    on a database that commits one transaction at a time."""
    if connection.dialect.name != "postgresql":
        return None
    row = connection.execute(
        text(
            "SELECT CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text), "
            "CAST(pg_snapshot_xmax(pg_current_snapshot()) AS text)"
        )
    ).one()
    return int(row[0]), int(row[1])


def _read(session: Session, after: int, top: int, unseen: np.ndarray) -> tuple[np.ndarray, Edges]:
    """The ids and the edges above `after` up to `top`, and of those `unseen`."""
    connection = session.connection()
    columns = ", ".join(joined(connection.dialect.name, name) for name in EDGE_COLUMNS)
    statement = text(f"SELECT {columns} FROM {EDGES} WHERE id > :low AND id <= :high")
    rows: list[tuple[Any, ...]] = [
        tuple(connection.execute(statement, {"low": low, "high": min(low + LOAD_CHUNK, top)}).one())
        for low in range(after, top, LOAD_CHUNK)
    ]
    if unseen.size:
        with closing(ByIds(session, columns, EDGES, "id")) as by_ids:
            rows.extend(by_ids.rows(unseen.tolist()))
    ids, outputs, inputs = (_concatenated([_numbers(row[at]) for row in rows]) for at in range(len(EDGE_COLUMNS)))
    return ids, Edges(outputs, inputs)


def _numbers(listed: str | None) -> np.ndarray:
    """The numbers of a comma-separated list, or none for a statement that found no row. Held as
    32-bit integers while they fit (numpy widens them when they meet larger ones): a million
    versions' lineage then takes 50 MB instead of 80."""
    numbers = np.fromstring(listed or "", dtype=np.int64, sep=",")
    return numbers.astype(np.int32) if not numbers.size or numbers.max() < 2**31 else numbers


def _concatenated(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else _NONE


# By the engine's dialect, the one object an engine shares with its copies (the catalog's reading
# engine) and keeps when its pool is made anew; another engine of the same catalog, as in another
# process, does not share it.
_KEPT: WeakKeyDictionary[Dialect, ResidentLineage] = WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def keep_resident(engine: Engine) -> None:
    """Hold the lineage of the catalog behind `engine` in this process from its next walk on."""
    with _KEPT_LOCK:
        _KEPT.setdefault(engine.dialect, ResidentLineage())


def load(session: Session) -> None:
    """Read the edges this process holds for the session's catalog now rather than at its next
    walk, which would wait for them: a second at a million versions."""
    held = resident(session)
    if held is not None:
        held.current(session)


def resident(session: Session) -> ResidentLineage | None:
    """The lineage this process holds for the session's catalog, if it keeps it and the session
    only reads: one that writes could show it edges that are never committed."""
    bind = session.get_bind()
    if not bind.get_execution_options().get(READ_ONLY):
        return None
    return _KEPT.get(bind.dialect)
