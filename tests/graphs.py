"""Version graphs written straight into a catalog, for tests of lineage queries and retention."""

from __future__ import annotations

import random
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import Session

from governance.catalog import Catalog
from governance.catalog.hops import record_inputs
from governance.catalog.models import VersionRow
from governance.lineage.graph import MAX_DEPTH, Closure, closure
from governance.lineage.terms import Direction

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def add_version(catalog: Catalog, asset: str, number: int, **details: Any) -> int:
    """Commit a version row (and its lineage edges) as if a run had produced it; returns its id.
    `details`: as `stage_version` takes them."""
    with catalog.session() as session:
        return stage_version(session, asset, number, **details)


def stage_version(
    session: Session,
    asset: str,
    number: int,
    *,
    inputs: tuple[int, ...] = (),
    path: str | None = None,
    age_days: float = 0,
    zone: str = "integration",
) -> int:
    """A version row and its lineage edges written in the session's transaction, not yet committed; its id."""
    row = VersionRow(
        asset_key=asset,
        number=number,
        data_version=f"{asset}@{number}".encode().hex()[:64],
        zone=zone,
        path=path or f"{zone}/{asset}/v={number}",  # relative to the lake, as the catalog keeps it
        rows=1,
        bytes=10,
        table_schema='{"type":"struct","fields":[]}',
        created_at=EPOCH - timedelta(days=age_days),
        code_version="c1",
        spec_hash="s1",
        requested_by="bob",
        attempt_id=f"a-{asset}-{number}",
    )
    session.add(row)
    session.flush()
    record_inputs(session, row.stored_id, inputs, None)
    session.flush()
    return row.stored_id


def add_versions(catalog: Catalog, asset: str, count: int, *, inputs: tuple[int, ...] = ()) -> list[int]:
    """Versions 1..count of an asset, each built from `inputs`, in one transaction; their ids."""
    with catalog.session() as session:
        rows = [
            VersionRow(
                asset_key=asset,
                number=number,
                data_version=f"{asset}@{number}".encode().hex()[:64],
                zone="integration",
                path=f"/lake/integration/{asset}/v={number}",
                rows=number,
                bytes=10,
                table_schema='{"type":"struct","fields":[]}',
                created_at=EPOCH + timedelta(minutes=number),
                code_version="c1",
                spec_hash="s1",
                requested_by="bob",
                attempt_id=f"a-{asset}-{number}",
            )
            for number in range(1, count + 1)
        ]
        session.add_all(rows)
        session.flush()
        for row in rows:
            record_inputs(session, row.stored_id, inputs, None)
        return [row.id for row in rows]


def random_dag(catalog: Catalog, seed: int, layers: int = 8, width: int = 6) -> dict[int, list[int]]:
    """A layered DAG with shared inputs and skipped layers; returns version id -> input ids."""
    rng = random.Random(seed)
    inputs_of: dict[int, list[int]] = {}
    built: list[list[int]] = []
    for layer in range(layers):
        current = []
        for index in range(width):
            earlier = [vid for previous in built[-3:] for vid in previous]
            chosen = tuple(sorted(set(rng.sample(earlier, min(len(earlier), rng.randint(1, 3)))))) if earlier else ()
            vid = add_version(catalog, f"g/a{layer}x{index}", 1, inputs=chosen)
            inputs_of[vid] = list(chosen)
            current.append(vid)
        built.append(current)
    return inputs_of


def bfs(adjacency: dict[int, list[int]], root: int, cap: int) -> dict[int, int]:
    """Shortest distances from `root` within `cap` hops: the reference the SQL closures must match."""
    found = {root: 0}
    queue = deque([root])
    while queue:
        current = queue.popleft()
        if found[current] >= cap:
            continue
        for neighbour in adjacency.get(current, ()):
            if neighbour not in found:
                found[neighbour] = found[current] + 1
                queue.append(neighbour)
    return found


def reversed_edges(inputs_of: dict[int, list[int]]) -> dict[int, list[int]]:
    dependents: dict[int, list[int]] = {}
    for output, inputs in inputs_of.items():
        for input_id in inputs:
            dependents.setdefault(input_id, []).append(output)
    return dependents


def next_hops(found: Closure) -> dict[int, list[int]]:
    return {vid: sorted(hops) for vid, hops in found.next_of.items()}


def assert_walks_match_a_bfs(catalog: Catalog, inputs_of: dict[int, list[int]], depth: int | None) -> None:
    """From every version both ways: the same versions at the same distances, and the same next hops."""
    dependents = reversed_edges(inputs_of)
    cap = MAX_DEPTH if depth is None else depth
    with catalog.reading() as session:
        for root in inputs_of:
            for direction, adjacency in ((Direction.UPSTREAM, inputs_of), (Direction.DOWNSTREAM, dependents)):
                found = closure(session, [root], direction, depth)
                assert found.depth_of == bfs(adjacency, root, cap)
                assert len(found) == len(found.depth_of)  # each version once...
                assert found.depths.tolist() == sorted(found.depths.tolist())  # ...nearest first
                assert next_hops(found) == {vid: sorted(adjacency[vid]) for vid in found.depth_of if adjacency.get(vid)}
