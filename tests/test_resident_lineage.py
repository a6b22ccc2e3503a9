"""Lineage walks over the edges a long-lived process holds in memory: the same answers as the
catalog's, and every version committed since, by this process or another."""

from __future__ import annotations

import pytest

from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.lineage import resident as resident_module
from governance.lineage.graph import closure
from governance.lineage.resident import keep_resident, resident
from governance.lineage.terms import Direction
from tests.graphs import add_version, assert_walks_match_a_bfs, random_dag, stage_version


@pytest.fixture
def kept(catalog: Catalog) -> Catalog:
    keep_resident(catalog.engine)
    return catalog


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("depth", [None, 0, 2])
def test_walks_over_the_lineage_held_in_memory_match_a_breadth_first_search(kept, seed, depth):
    assert_walks_match_a_bfs(kept, random_dag(kept, seed), depth)


def test_a_process_keeps_the_lineage_only_once_asked_to(catalog):
    with catalog.reading() as session:
        assert resident(session) is None
    keep_resident(catalog.engine)
    with catalog.reading() as session:
        assert resident(session) is not None


@pytest.mark.both_backends
def test_a_walk_reaches_the_versions_another_process_committed_since_the_last(kept, catalog_url):
    inputs_of = random_dag(kept, seed=3)
    root = next(iter(inputs_of))
    reached_before = downstream(kept, root)
    elsewhere = Catalog(make_engine(catalog_url))  # its own engine and connections, as another process has

    newer = add_version(elsewhere, "g/newer", 1, inputs=(root,))
    newest = add_version(elsewhere, "g/newest", 1, inputs=(newer,))

    assert downstream(kept, root) == {**reached_before, newer: 1, newest: 2}
    inputs_of |= {newer: [root], newest: [newer]}
    assert_walks_match_a_bfs(kept, inputs_of, None)


@pytest.mark.both_backends
@pytest.mark.parametrize("rebuild_at", [0, 10**9], ids=["arrays-rebuilt", "edges-beside-them"])
def test_edges_added_in_rounds_are_walked_whether_the_arrays_are_rebuilt_or_not(kept, monkeypatch, rebuild_at):
    monkeypatch.setattr(resident_module, "REBUILD_AT", rebuild_at)
    inputs_of: dict[int, list[int]] = {}
    for round_number in range(3):
        first = add_version(kept, f"r/{round_number}", 1)
        second = add_version(kept, f"r/{round_number}b", 1, inputs=(first, *list(inputs_of)[-2:]))
        inputs_of |= {first: [], second: [first, *list(inputs_of)[-2:]]}
        assert_walks_match_a_bfs(kept, inputs_of, None)
        with kept.reading() as session:
            held = resident(session).current(session)  # type: ignore[union-attr]
        assert held.size == (sum(map(len, inputs_of.values())) if rebuild_at == 0 else 0)


def test_an_edge_committed_after_one_with_a_higher_id_is_found_and_a_rolled_back_one_breaks_nothing(pg_url):
    """PostgreSQL hands ids out before commit: an edge can become visible after one with a higher id."""
    kept, elsewhere = Catalog(make_engine(pg_url)), Catalog(make_engine(pg_url))
    keep_resident(kept.engine)
    first, second = (add_version(kept, f"raw/{name}", 1, zone="landing") for name in ("first", "second"))
    with pytest.raises(RuntimeError), elsewhere.session() as session:
        stage_version(session, "mid/rolled_back", 1, inputs=(first,))
        raise RuntimeError("the run failed before its version was committed")
    # Versions of different inputs: one of the same input would wait for the first to commit.
    with elsewhere.session() as slower:
        late = stage_version(slower, "mid/late", 1, inputs=(first,))  # its edge has the lower id
        early = add_version(kept, "mid/early", 1, inputs=(second,))
        assert downstream(kept, first) == {first: 0}
        assert downstream(kept, second) == {second: 0, early: 1}
    assert downstream(kept, first) == {first: 0, late: 1}
    assert_walks_match_a_bfs(kept, {first: [], second: [], early: [second], late: [first]}, None)


def downstream(catalog: Catalog, root: int) -> dict[int, int]:
    with catalog.reading() as session:
        return closure(session, [root], Direction.DOWNSTREAM).depth_of
