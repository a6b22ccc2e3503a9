"""`repair` removes what no committed version owns; the quick form only looks where attempts died."""

from __future__ import annotations

import pytest

from governance.catalog.models import LineageEdge
from governance.lineage.graph import closure
from governance.lineage.terms import Direction
from governance.repair import repair
from governance.zones import AssetKey, Zone
from tests.graphs import add_version

PEOPLE = AssetKey("t", "people")

pytestmark = pytest.mark.both_backends


def test_a_stray_version_folder_is_left_to_the_thorough_sweep(catalog, lake):
    stray = lake.version_dir(Zone.LANDING, PEOPLE, 7)
    stray.mkdir(parents=True)
    (stray / "part-00000.parquet").write_bytes(b"PAR1")

    assert repair(catalog, lake).clean
    assert stray.exists()

    report = repair(catalog, lake, thorough=True)
    assert report.removed == [str(stray)]
    assert not stray.exists()


def test_lineage_an_earlier_release_wrote_without_next_hops_is_walked_again_after_a_thorough_repair(catalog, lake):
    source = add_version(catalog, "raw/a", 1, zone="landing")
    old = add_version(catalog, "mid/b", 1)
    with catalog.session() as session:  # its lineage as an earlier release records it: the edge only
        session.add(LineageEdge(output_version_id=old, input_version_id=source))

    assert repair(catalog, lake).clean
    report = repair(catalog, lake, thorough=True)

    assert report.lineage == ["next hops built again from the lineage edges, which they disagreed with by 1 edge(s)"]
    with catalog.session() as session:
        assert closure(session, [source], Direction.DOWNSTREAM).depth_of == {source: 0, old: 1}
        assert closure(session, [old], Direction.UPSTREAM).depth_of == {old: 0, source: 1}
    assert repair(catalog, lake, thorough=True).clean


def test_an_attempt_that_committed_keeps_its_status_whatever_tries_to_end_it_afterwards(catalog, lake):
    key = AssetKey.parse("t/kept")
    catalog.start_attempt("attempt-kept", key, "run-1", "bob")
    with catalog.session() as session:
        assert catalog.finish_attempt(session, "attempt-kept", "committed", version=1)
    with catalog.session() as session:
        # A failure after the commit (the table snapshot's, the catalog lost), or repair.
        assert not catalog.finish_attempt(session, "attempt-kept", "failed", error="after the commit")
    assert catalog.attempt_statuses()["attempt-kept"] == "committed"
