"""The catalog's lineage held in memory by a long-lived process, the service, as numpy arrays both
ways: its walks then read no database row per version. A one-shot command reads the hops a level
at a time instead (governance.catalog.hops): loading every edge would cost it more than its walk.

Edges are only ever added, each in the transaction that commits its version. Before a walk, the
process asks for the highest edge id and reads the edges above those it holds. PostgreSQL hands ids
out before commit, so an edge may become visible after one with a higher id: the ids a read did not
find below the highest are asked for again before each walk (one rolled back stays on that list).
A catalog put back from a backup under a running service is not noticed: restart the service then.
"""

from __future__ import annotations

import threading
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np
from sqlalchemy import Engine, Pool, text
from sqlmodel import Session

from governance.catalog.byids import ByIds
from governance.catalog.hops import joined
from governance.catalog.models import LineageEdge
from governance.lineage.terms import Direction

EDGES = LineageEdge.__tablename__
EDGE_COLUMNS = ("id", "output_version_id", "input_version_id")
# Edges read per statement while loading: each comes back as text, a few MB per column.
LOAD_CHUNK = 500_000
# New edges wait beside the arrays until there are this many, or a fiftieth of those in them:
# rebuilding a million versions' arrays takes a few hundred milliseconds.
REBUILD_AT = 50_000


@dataclass(frozen=True)
class Adjacency:
    """Each version's next hops in one direction, compressed by row: version `v`'s hops are
    `targets[starts[v]:starts[v + 1]]`."""

    starts: np.ndarray
    targets: np.ndarray

    @classmethod
    def of(cls, keys: np.ndarray, values: np.ndarray) -> Adjacency:
        """The hops `values[i]` of versions `keys[i]`."""
        order = np.argsort(keys, kind="stable")
        counts = np.bincount(keys, minlength=1)
        return cls(np.concatenate(([0], np.cumsum(counts))), values[order])

    def hops(self, versions: np.ndarray) -> Gathered:
        """The next hops of `versions` (given once each) that have any."""
        versions = versions[versions < self.starts.size - 1]
        first = self.starts[versions]
        counts = self.starts[versions + 1] - first
        versions, first, counts = versions[counts > 0], first[counts > 0], counts[counts > 0]
        # Each version's run of positions first, first + 1, ..., laid end to end.
        ends = np.cumsum(counts)
        positions = np.repeat(first - ends + counts, counts) + np.arange(ends[-1] if ends.size else 0)
        return Gathered(versions, counts, self.targets[positions])


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Snapshot:
    """The lineage as of one refresh: the arrays, and the edges added since they were built."""

    outputs: np.ndarray  # of every edge held, the version built...
    inputs: np.ndarray  # ...and the version it read
    built: dict[Direction, Adjacency]  # from the first `size` edges
    size: int
    recent: dict[Direction, Adjacency]  # from the others

    @classmethod
    def of(cls, outputs: np.ndarray, inputs: np.ndarray, size: int | None = None) -> Snapshot:
        size = outputs.size if size is None else size
        return cls(outputs, inputs, _both(outputs[:size], inputs[:size]), size, _both(outputs[size:], inputs[size:]))

    def with_edges(self, outputs: np.ndarray, inputs: np.ndarray) -> Snapshot:
        outputs, inputs = np.concatenate((self.outputs, outputs)), np.concatenate((self.inputs, inputs))
        if outputs.size - self.size > max(REBUILD_AT, self.size // 50):
            return Snapshot.of(outputs, inputs)
        recent = _both(outputs[self.size :], inputs[self.size :])
        return Snapshot(outputs, inputs, self.built, self.size, recent)

    def hops(self, direction: Direction, versions: np.ndarray) -> Gathered:
        return _together([self.built[direction].hops(versions), self.recent[direction].hops(versions)])


def _both(outputs: np.ndarray, inputs: np.ndarray) -> dict[Direction, Adjacency]:
    return {Direction.UPSTREAM: Adjacency.of(outputs, inputs), Direction.DOWNSTREAM: Adjacency.of(inputs, outputs)}


EMPTY = Snapshot.of(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))


@dataclass
class ResidentLineage:
    """The lineage one engine's catalog holds, kept up to date by `current`."""

    snapshot: Snapshot = EMPTY
    top: int = 0  # the highest edge id read
    unseen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # ids below it not found
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self, session: Session) -> Snapshot:
        """The lineage as the session's transaction sees it, or later."""
        with self.lock:
            top = session.connection().execute(text(f"SELECT max(id) FROM {EDGES}")).scalar_one() or 0
            if top == self.top and not self.unseen.size:
                return self.snapshot
            ids, outputs, inputs = _read(session, self.top, top, self.unseen)
            expected = np.concatenate((self.unseen, np.arange(self.top + 1, top + 1, dtype=np.int32)))
            self.unseen = np.setdiff1d(expected, ids, assume_unique=True)
            self.top = max(self.top, top)
            if ids.size:
                self.snapshot = self.snapshot.with_edges(outputs, inputs)
            return self.snapshot


def _read(session: Session, after: int, top: int, unseen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ids, outputs and inputs of the edges above `after` up to `top`, and of those `unseen`."""
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
    ids, outputs, inputs = ([_numbers(row[at]) for row in rows] for at in range(len(EDGE_COLUMNS)))
    return _concatenated(ids), _concatenated(outputs), _concatenated(inputs)


def _numbers(listed: str | None) -> np.ndarray:
    """The numbers of a comma-separated list, or none for a statement that found no row. Ids are
    the catalog's 32-bit integers: held as such, a million versions' lineage takes half the memory."""
    return np.fromstring(listed or "", dtype=np.int64, sep=",").astype(np.int32)


def _concatenated(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)


# By the engine's pool of connections, which the catalog's reading engine shares with it.
_KEPT: WeakKeyDictionary[Pool, ResidentLineage] = WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def keep_resident(engine: Engine) -> None:
    """Hold the lineage of the catalog behind `engine` in this process from its next walk on."""
    with _KEPT_LOCK:
        _KEPT.setdefault(engine.pool, ResidentLineage())


def resident(session: Session) -> ResidentLineage | None:
    """The lineage this process holds for the session's catalog, if it keeps it."""
    return _KEPT.get(session.get_bind().engine.pool)
