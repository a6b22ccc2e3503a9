"""Provenance and impact by version: closures, trees, depth caps and protection."""

from __future__ import annotations

from dataclasses import fields

import pytest
from sqlalchemy import text

from governance.catalog.engine import make_engine
from governance.catalog.models import VersionRow
from governance.catalog.states import Criticality
from governance.lineage.graph import (
    NODE_COLUMNS,
    NODE_FIELDS,
    closure,
    impact,
    protected_ids,
    provenance,
)
from governance.lineage.nodes import VersionNode
from governance.lineage.terms import Direction
from governance.retention.purge import set_status
from governance.zones import VersionRef
from tests.graphs import add_version, add_versions, assert_walks_match_a_bfs, next_hops, random_dag

pytestmark = pytest.mark.both_backends


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("depth", [None, 0, 1, 3])
def test_closures_match_a_breadth_first_search_over_the_same_edges(catalog, seed, depth):
    assert_walks_match_a_bfs(catalog, random_dag(catalog, seed), depth)


def test_a_catalog_whose_edges_came_without_their_hops_gets_them_when_opened(catalog, catalog_url):
    inputs_of = random_dag(catalog, seed=4)
    with catalog.session() as session:  # as a catalog from before the hops were kept
        for table in ("lineage_inputs", "lineage_dependents"):
            session.connection().execute(text(f"DELETE FROM {table}"))
        session.connection().execute(text("DELETE FROM catalog_migration WHERE name = 'lineage-hops'"))

    make_engine(catalog_url).dispose()

    assert_walks_match_a_bfs(catalog, inputs_of, None)


def test_versions_built_from_one_input_in_one_transaction_are_all_its_dependents(catalog):
    source = add_version(catalog, "raw/a", 1, zone="landing")
    built = add_versions(catalog, "mid/b", 3, inputs=(source,))
    with catalog.session() as session:
        found = closure(session, [source], Direction.DOWNSTREAM)
    assert found.depth_of == {source: 0, **dict.fromkeys(built, 1)}
    assert next_hops(found) == {source: sorted(built)}


@pytest.fixture
def diamond(catalog):
    """raw/a@1 -> {mid/b@1, mid/c@1} -> top/d@1: two paths to the same source."""
    a = add_version(catalog, "raw/a", 1, zone="landing")
    b = add_version(catalog, "mid/b", 1, inputs=(a,))
    c = add_version(catalog, "mid/c", 1, inputs=(a,))
    d = add_version(catalog, "top/d", 1, inputs=(b, c))
    return {"a": a, "b": b, "c": c, "d": d}


def test_a_version_reached_by_two_paths_is_expanded_once(catalog, diamond):
    tree = provenance(catalog, VersionRef.parse("top/d@1"))
    assert tree.versions == 4
    b, c = tree.root.links
    assert [n.ref for n in b.links] == ["raw/a@1"] and not b.links[0].expanded_elsewhere
    assert [n.ref for n in c.links] == ["raw/a@1"] and c.links[0].expanded_elsewhere
    assert tree.to_dict()["inputs"][1]["inputs"][0]["expanded_elsewhere"] is True


def test_the_depth_cap_marks_where_the_tree_was_cut(catalog, diamond):
    tree = provenance(catalog, VersionRef.parse("top/d@1"), depth=1)
    assert [n.ref for n in tree.root.links] == ["mid/b@1", "mid/c@1"]
    assert all(n.truncated and n.links == [] for n in tree.root.links)


def test_impact_lists_every_version_built_from_it_transitively(catalog, diamond):
    tree = impact(catalog, VersionRef.parse("raw/a@1"))
    refs = {node.ref: node.depth for node in tree.root.walk() if not node.expanded_elsewhere}
    assert refs == {"raw/a@1": 0, "mid/b@1": 1, "mid/c@1": 1, "top/d@1": 2}
    assert "dependents" in tree.to_dict()


def test_critical_protects_the_version_and_everything_upstream_only(catalog, diamond):
    change = set_status(catalog, VersionRef.parse("mid/b@1"), Criticality.CRITICAL, "alice")
    assert change.protected_upstream == 1
    with catalog.session() as session:
        assert protected_ids(session) == {diamond["b"], diamond["a"]}
    flags = {n.ref: n.protected for n in provenance(catalog, VersionRef.parse("top/d@1")).root.walk()}
    assert flags == {"top/d@1": False, "mid/b@1": True, "raw/a@1": True, "mid/c@1": False}


def test_back_to_normal_lifts_the_protection(catalog, diamond):
    set_status(catalog, VersionRef.parse("top/d@1"), Criticality.CRITICAL, "alice")
    set_status(catalog, VersionRef.parse("top/d@1"), Criticality.NORMAL, "alice")
    with catalog.session() as session:
        assert protected_ids(session) == set()


def test_each_version_of_a_lineage_shows_its_own_catalog_row(catalog, diamond):
    with catalog.session() as session:
        row = session.get(VersionRow, diamond["b"])
        assert row is not None
        row.label, row.label_from, row.run_id, row.assurance = "june", "batch", "run-9", "verified"
        row.rows_quarantined, row.criticality = 2, Criticality.CRITICAL.value
    shown = next(node for node in impact(catalog, VersionRef.parse("raw/a@1")).root.walk() if node.ref == "mid/b@1")
    stored = catalog.version(VersionRef.parse("mid/b@1"))
    assert (shown.asset, shown.version, shown.created_at) == (stored.asset_key, 1, stored.created_at.isoformat())
    for name in (n for n in NODE_COLUMNS[2:] if n != "created_at"):
        assert getattr(shown, name) == getattr(stored, name), name
    assert (shown.protected, shown.depth) == (True, 1)


def test_a_version_s_columns_are_the_first_fields_of_its_node_in_order():
    first = [f.name for f in fields(VersionNode)][: len(NODE_FIELDS) + 2]
    assert first == [*NODE_FIELDS, "protected", "depth"]
