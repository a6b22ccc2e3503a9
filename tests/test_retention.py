"""Retention: purge what the spec lets go, never a protected version; tombstone, delete, record."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from governance import ledger
from governance.catalog.models import VersionRow
from governance.catalog.states import Criticality, VersionStatus
from governance.errors import InUse, InvalidInput, NotFound, Protected, UnsafePath
from governance.lineage.graph import provenance
from governance.repair import repair
from governance.retention.purge import expired, purge, set_status
from governance.runs import RunRequest
from governance.spec import Retention
from governance.zones import AssetKey, VersionRef
from tests.graphs import EPOCH, add_version

pytestmark = pytest.mark.both_backends

RAW = AssetKey.parse("raw/a")
KEEP_TWO = {RAW: Retention(keep_versions=2)}
NOW = EPOCH + timedelta(days=1)


@pytest.fixture
def history(catalog, lake):
    """raw/a@1..4 with real folders (4 is the newest), and top/d@1 built from raw/a@2."""
    ids = {}
    for number in range(1, 5):
        folder = lake.root / "landing" / "raw" / "a" / f"v={number}"
        folder.mkdir(parents=True)
        (folder / "part-00000.parquet").write_bytes(b"data")
        ids[number] = add_version(catalog, "raw/a", number, age_days=10 - number, zone="landing")
    ids["top"] = add_version(catalog, "top/d", 1, inputs=(ids[2],))
    return ids


def row(catalog, ref):
    return catalog.version(VersionRef.parse(ref))


def purged_refs(catalog):
    with catalog.session() as session:
        return [
            e.asset_key + f"@{e.version}" for e in ledger.entries(session, ledger.LedgerFilter(action="version.purged"))
        ]


def test_keep_versions_purges_the_older_ones_files_only(catalog, lake, history):
    report = purge(catalog, lake, KEEP_TWO, "alice", now=NOW)
    assert [c.ref for c in report.purged] == ["raw/a@2", "raw/a@1"]
    for ref in ("raw/a@1", "raw/a@2"):
        version = row(catalog, ref)
        assert version.status == "purged" and version.purged_at is not None
        assert not lake.at(version.path).exists()
    assert lake.at(row(catalog, "raw/a@3").path).exists() and row(catalog, "raw/a@3").status == "committed"
    assert purged_refs(catalog) == ["raw/a@2", "raw/a@1"]


def test_a_purged_version_keeps_its_lineage_and_shows_as_purged(catalog, lake, history):
    purge(catalog, lake, KEEP_TWO, "alice", now=NOW)
    tree = provenance(catalog, VersionRef.parse("top/d@1"))
    assert [(n.ref, n.status) for n in tree.root.links] == [("raw/a@2", "purged")]


def test_a_version_upstream_of_a_critical_one_is_kept(catalog, lake, history):
    set_status(catalog, VersionRef.parse("top/d@1"), Criticality.CRITICAL, "alice")
    report = purge(catalog, lake, KEEP_TWO, "alice", now=NOW)
    assert [c.ref for c in report.purged] == ["raw/a@1"]
    assert report.kept_protected == ["raw/a@2"]
    assert lake.at(row(catalog, "raw/a@2").path).exists()


def test_an_explicit_purge_of_a_protected_version_is_refused_and_changes_nothing(catalog, lake, history):
    set_status(catalog, VersionRef.parse("raw/a@1"), Criticality.CRITICAL, "alice")
    refs = [VersionRef.parse("raw/a@3"), VersionRef.parse("raw/a@1")]
    with pytest.raises(Protected, match="raw/a@1 is protected: it is marked critical"):
        purge(catalog, lake, {}, "alice", explicit=refs)
    assert {row(catalog, f"raw/a@{n}").status for n in (1, 3)} == {"committed"}
    assert purged_refs(catalog) == []


def test_upstream_protection_is_named_in_the_refusal(catalog, lake, history):
    set_status(catalog, VersionRef.parse("top/d@1"), Criticality.CRITICAL, "alice")
    with pytest.raises(Protected, match="a critical version depends on it"):
        purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/a@2")])


def test_a_dry_run_lists_and_changes_nothing(catalog, lake, history):
    report = purge(catalog, lake, KEEP_TWO, "alice", now=NOW, dry_run=True)
    assert [c.ref for c in report.purged] == ["raw/a@2", "raw/a@1"]
    assert all(row(catalog, f"raw/a@{n}").status == "committed" for n in (1, 2))
    assert lake.at(row(catalog, "raw/a@1").path).exists() and purged_refs(catalog) == []


def test_a_version_a_run_in_progress_reads_is_purged_only_once_the_run_has_ended(catalog, lake, history):
    held = "attempt-reading"
    with lake.staging(held):
        catalog.start_attempt(held, AssetKey.parse("top/e"), "run-9", "bob", [row(catalog, "raw/a@1")])
        reader = "run run-9 reads it to make top/e, and has not ended"
        with pytest.raises(InUse, match=f"raw/a@1 is in use: {reader}; nothing was purged"):
            purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/a@1")])
        kept = purge(catalog, lake, KEEP_TWO, "alice", now=NOW)
        assert kept.kept_in_use == [f"raw/a@1: {reader}"] and [c.ref for c in kept.purged] == ["raw/a@2"]
        assert row(catalog, "raw/a@1").status == "committed" and lake.at(row(catalog, "raw/a@1").path).exists()
    # Its process gone, the attempt reads nothing more: repair will roll it back.
    assert [c.ref for c in purge(catalog, lake, KEEP_TWO, "alice", now=NOW).purged] == ["raw/a@1"]


def test_a_run_does_not_start_on_an_input_a_purge_has_marked(catalog, lake, history):
    with catalog.session() as session:
        tombstoned = session.get(VersionRow, history[1])
        tombstoned.status = VersionStatus.PURGING.value
        session.add(tombstoned)

    with pytest.raises(NotFound, match="input raw/a@1 was purged; materialize top/e again"):
        catalog.start_attempt("attempt-late", AssetKey.parse("top/e"), "run-9", "bob", [row(catalog, "raw/a@1")])

    assert catalog.running_attempts() == []


def test_an_interrupted_purge_is_finished_by_the_next_one(catalog, lake, history):
    with catalog.session() as session:
        tombstoned = session.get(VersionRow, history[1])
        tombstoned.status = VersionStatus.PURGING.value
        session.add(tombstoned)
    (lake.at(row(catalog, "raw/a@1").path) / "part-00000.parquet").unlink()
    report = purge(catalog, lake, {}, "alice", now=NOW)
    assert report.finished == ["raw/a@1"] and report.purged == []
    assert row(catalog, "raw/a@1").status == "purged" and not lake.at(row(catalog, "raw/a@1").path).exists()
    assert purged_refs(catalog) == ["raw/a@1"]


def test_an_interrupted_purge_is_finished_by_repair_and_recorded_as_the_system_s(catalog, lake, history):
    with catalog.session() as session:
        tombstoned = session.get(VersionRow, history[1])
        tombstoned.status = VersionStatus.PURGING.value
        session.add(tombstoned)

    report = repair(catalog, lake, actor="custody-repair", thorough=True)

    assert report.purged == ["raw/a@1"]
    assert row(catalog, "raw/a@1").status == "purged" and not lake.at(row(catalog, "raw/a@1").path).exists()
    with catalog.session() as session:
        [entry] = ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.VERSION_PURGED))
    assert (entry.actor, entry.assurance, json.loads(entry.details)["reason"]) == (
        "custody-repair",
        "system",
        "an interrupted purge, finished by repair",
    )
    assert repair(catalog, lake, actor="custody-repair", thorough=True).purged == []


def test_a_purge_run_twice_purges_once(catalog, lake, history):
    purge(catalog, lake, KEEP_TWO, "alice", now=NOW)
    again = purge(catalog, lake, KEEP_TWO, "alice", now=NOW)
    assert again.purged == [] and again.finished == []
    assert purged_refs(catalog) == ["raw/a@2", "raw/a@1"]


def test_every_rule_set_must_agree_and_the_newest_version_always_stays(catalog, lake, history):
    rows = [row(catalog, f"raw/a@{n}") for n in range(1, 5)]
    # Ages are 9, 8, 7 and 6 days at EPOCH.
    assert [r.ref for r, _ in expired(rows, Retention(keep_versions=1, max_age_days=8), EPOCH)] == [
        "raw/a@2",
        "raw/a@1",
    ]
    assert [r.ref for r, _ in expired(rows, Retention(max_age_days=1), EPOCH)] == ["raw/a@3", "raw/a@2", "raw/a@1"]
    assert expired(rows, Retention(), EPOCH) == []


def test_a_status_change_is_recorded_with_its_actor(catalog, lake, history):
    set_status(catalog, VersionRef.parse("top/d@1"), Criticality.CRITICAL, "carol")
    with catalog.session() as session:
        [entry] = ledger.entries(session, ledger.LedgerFilter(action="version.status_changed"))
    assert (entry.actor, entry.asset_key, entry.version) == ("carol", "top/d", 1)
    assert json.loads(entry.details)["to"] == "critical"


def test_a_purged_version_cannot_be_made_critical(catalog, lake, history):
    purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/a@1")])
    with pytest.raises(InvalidInput, match="raw/a@1 is purged"):
        set_status(catalog, VersionRef.parse("raw/a@1"), Criticality.CRITICAL, "alice")


def test_an_unknown_status_is_refused():
    with pytest.raises(InvalidInput, match="unknown status 'urgent'"):
        Criticality.parse("urgent")


def test_a_run_cannot_pin_a_purged_input(catalog, lake, history):
    purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/a@4")])
    request = RunRequest(requested_by="bob", started_at=EPOCH + timedelta(days=30))
    with pytest.raises(NotFound, match="input raw/a@4 was purged"):
        catalog.pinned(RAW, request.run_id, request.started_at)


def test_versions_purged_earlier_do_not_count_toward_those_kept(catalog, lake, history):
    purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/a@3")])
    report = purge(catalog, lake, KEEP_TWO, "alice", now=NOW)
    assert [c.ref for c in report.purged] == ["raw/a@1"]
    assert row(catalog, "raw/a@2").status == "committed" and row(catalog, "raw/a@4").status == "committed"


def test_purging_a_purged_version_again_is_not_an_error(catalog, lake, history):
    purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/a@2")])
    set_status(catalog, VersionRef.parse("top/d@1"), Criticality.CRITICAL, "alice")
    report = purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/a@2")])
    assert report.already_purged == ["raw/a@2"] and report.purged == []
    assert purged_refs(catalog) == ["raw/a@2"]


def test_a_folder_outside_the_lake_is_never_deleted(catalog, lake, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    add_version(catalog, "raw/b", 1, path="../../precious", zone="landing")  # the lake is tmp_path/home/lake
    with pytest.raises(UnsafePath, match="outside"):
        purge(catalog, lake, {}, "alice", explicit=[VersionRef.parse("raw/b@1")])
    assert outside.is_dir() and row(catalog, "raw/b@1").status == "purging"
