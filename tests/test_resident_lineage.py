"""Lineage walks over the edges a long-lived process holds in memory: the same answers as the
catalog's, and every version committed since, by this process or another."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session

from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.hops import Hops
from governance.lineage import graph
from governance.lineage import resident as resident_module
from governance.lineage.graph import closure, explore, stream
from governance.lineage.resident import ResidentLineage, keep_resident, resident
from governance.lineage.terms import Direction
from governance.zones import VersionRef
from tests.graphs import add_version, assert_walks_match_a_bfs, random_dag, stage_version


@pytest.fixture
def kept(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    """A catalog whose lineage this process holds, and whose walks that only read never touch its hops."""
    keep_resident(catalog.engine)
    walks_read_memory(monkeypatch)
    return catalog


def walks_read_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: Hops, versions: object) -> None:
        raise AssertionError("a walk that only reads read the catalog's hops, not the lineage held in memory")

    monkeypatch.setattr(Hops, "of", refused)


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("depth", [None, 0, 2])
def test_walks_over_the_lineage_held_in_memory_match_a_breadth_first_search(kept, seed, depth):
    assert_walks_match_a_bfs(kept, random_dag(kept, seed), depth)


def test_a_process_keeps_the_lineage_once_asked_to_for_that_engine_alone_even_after_its_pool_is_made_anew(
    catalog, catalog_url
):
    with catalog.reading() as session:
        assert resident(session) is None
    keep_resident(catalog.engine)
    catalog.engine.dispose()
    with catalog.reading() as session:
        assert resident(session) is not None
    with Catalog(make_engine(catalog_url)).reading() as session:  # as another process's engine
        assert resident(session) is None


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
            snapshot = held(session).current(session)
        edges = sum(map(len, inputs_of.values()))
        assert (len(snapshot.built), len(snapshot.recent)) == ((edges, 0) if rebuild_at == 0 else (0, edges))


def test_an_edge_committed_after_one_with_a_higher_id_is_found_and_a_rolled_back_one_is_asked_for_no_more(
    pg_url, monkeypatch
):
    """PostgreSQL hands ids out before commit: an edge can become visible after one with a higher id."""
    kept, elsewhere = Catalog(make_engine(pg_url)), Catalog(make_engine(pg_url))
    keep_resident(kept.engine)
    walks_read_memory(monkeypatch)
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
    with kept.reading() as session:  # no transaction that could commit it is left
        assert held(session).unseen.size == 0


def test_a_walk_in_a_transaction_that_writes_reads_the_catalog_and_leaves_the_held_lineage_as_committed(
    catalog,
):
    keep_resident(catalog.engine)
    root = add_version(catalog, "raw/root", 1, zone="landing")
    assert downstream(catalog, root) == {root: 0}
    with pytest.raises(RuntimeError), catalog.session() as session:
        staged = stage_version(session, "mid/rolled_back", 1, inputs=(root,))
        assert closure(session, [root], Direction.DOWNSTREAM).depth_of == {root: 0, staged: 1}
        raise RuntimeError("the run failed before its version was committed")
    assert downstream(catalog, root) == {root: 0}
    committed = add_version(catalog, "mid/committed", 1, inputs=(root,))  # on SQLite, the same edge id again
    assert downstream(catalog, root) == {root: 0, committed: 1}


def test_a_summary_counts_only_the_versions_its_transaction_reads_though_the_held_lineage_is_newer(kept, monkeypatch):
    root, _older = root_and_dependent(kept)
    newer = another_request_meanwhile(kept, monkeypatch, root)

    summary = explore(kept, VersionRef("raw/root", 1), Direction.DOWNSTREAM, summary_over=0)

    assert newer  # committed, and held, while the walk read
    assert summary.versions == 2
    assert summary.counts == (("raw/root", 0, 1), ("mid/older", 1, 1))


def test_a_streamed_lineage_names_only_the_versions_its_transaction_reads_though_the_held_lineage_is_newer(
    kept, monkeypatch
):
    root, _older = root_and_dependent(kept)
    newer = another_request_meanwhile(kept, monkeypatch, root)

    streamed = list(stream(kept, VersionRef("raw/root", 1), Direction.DOWNSTREAM))

    assert newer
    assert [(node["asset"], node["version"]) for node in streamed] == [("raw/root", 1), ("mid/older", 1)]
    assert "mid/newer" not in json.dumps(streamed)


def root_and_dependent(catalog: Catalog) -> tuple[int, int]:
    root = add_version(catalog, "raw/root", 1, zone="landing")
    return root, add_version(catalog, "mid/older", 1, inputs=(root,))


def another_request_meanwhile(catalog: Catalog, monkeypatch: pytest.MonkeyPatch, root: int) -> list[int]:
    """Once the next walk's transaction has begun reading (SQLite's reader then sees the catalog as
    it was), a version built from `root` is committed and another request's walk brings the held
    lineage up to date; gives that version's id once it exists."""
    existing, newer = graph._existing, []

    def meanwhile(session: Session, ids: list[int]) -> list[int]:
        found = existing(session, ids)
        if not newer:
            newer.append(add_version(catalog, "mid/newer", 1, inputs=(root,)))
            assert newer[0] in downstream(catalog, root)
        return found

    monkeypatch.setattr(graph, "_existing", meanwhile)
    return newer


def downstream(catalog: Catalog, root: int) -> dict[int, int]:
    with catalog.reading() as session:
        return closure(session, [root], Direction.DOWNSTREAM).depth_of


def held(session: Session) -> ResidentLineage:
    kept = resident(session)
    assert kept is not None
    return kept
