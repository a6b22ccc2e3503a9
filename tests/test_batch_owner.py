"""Whose a DropZone batch is: its folder's owner's, only when its folder, `_READY`, `_batch.yaml` and
every data file are theirs, none writable by anyone else, and none changed after the batch was marked
ready. The sensor's decision and every ingestion hold a batch to this, and an ingestion again as it
reads the batch's bytes; a batch that breaks it is refused with one line naming the file, recorded,
and nothing is written.

The tests run as root, who makes the batches; `nobody` is the other OS user, `users` the group."""

from __future__ import annotations

import grp
import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

import governance.ingest
from governance.batches import (
    BATCH_META,
    MARKING_NS,
    READY_MARKER,
    BatchMeta,
    batch_owner,
    drop_batch,
    mark_ready,
    open_batch,
    scan_batch,
)
from governance.catalog.ledgerfilter import LedgerFilter
from governance.errors import BatchError
from governance.ingest import ingest
from governance.ledger import Action, entries
from governance.runs import RunRequest, os_user
from governance.zones import AssetKey, Lake
from tests.helpers import (
    OTHER_USER,
    SHARED_GROUP,
    acl_granting_write,
    after_the_mark,
    assert_nothing_committed,
    given_to,
    rewritten_as_it_was_dated,
)

PEOPLE = AssetKey("t", "people")
CSV = b"id,name,score\n1,ann,1.5\n2,bob,2.5\n"
# The same bytes but one: a rewrite that keeps the file's size.
OTHER_CSV = CSV.replace(b"ann", b"eve")
ALONE = "a batch's files must be writable by their owner alone, so who wrote them is known"

# The two moments a batch's owner is established: as the sensor decides it, and as an ingestion opens it.
ESTABLISHED: dict[str, Callable[[Lake], str]] = {
    "decided": lambda lake: batch_owner(lake, PEOPLE, "b1"),
    "opened": lambda lake: open_batch(lake, PEOPLE, "b1", "csv").owner,
}


@pytest.fixture(params=sorted(ESTABLISHED))
def owner_of(request, lake) -> Callable[[], str]:
    """Whose batch b1 of t/people is, as the sensor decides it or as an ingestion opens it."""
    return lambda: ESTABLISHED[request.param](lake)


def dropped(lake: Lake) -> Path:
    """Batch b1 of t/people as its producer drops it: a data file and a `_batch.yaml`, then `_READY`."""
    return drop_batch(lake, PEOPLE, "b1", {"p.csv": CSV}, BatchMeta(label="15"))


def refusal(establish: Callable[[], object]) -> str:
    with pytest.raises(BatchError) as refused:
        establish()
    return str(refused.value)


def changed_after_the_mark(folder: Path, path: Path) -> str:
    return (
        f"{path} changed after the batch was marked ready: touch {folder / READY_MARKER} again once the "
        "batch is complete"
    )


def test_a_batch_whose_every_file_is_its_folder_owner_s_alone_is_theirs(lake, owner_of):
    dropped(lake)
    assert owner_of() == os_user()


def test_a_data_file_another_os_user_owns_refuses_the_batch_naming_both(lake, owner_of):
    folder = dropped(lake)
    given_to(folder / "p.csv")
    mark_ready(folder)
    assert refusal(owner_of) == (
        f"{folder / 'p.csv'} is owned by {OTHER_USER}, not by {os_user()} who owns the batch's folder"
    )


def test_a_symlinked_data_file_is_held_to_the_rule_by_the_file_it_leads_to(lake, owner_of):
    theirs = drop_batch(lake, PEOPLE, "theirs", {"q.csv": CSV})
    given_to(theirs / "q.csv")
    folder = dropped(lake)
    (folder / "q.csv").symlink_to(theirs / "q.csv")
    mark_ready(folder)
    assert refusal(owner_of) == (
        f"{folder / 'q.csv'} is owned by {OTHER_USER}, not by {os_user()} who owns the batch's folder"
    )


@pytest.mark.parametrize("name", ["", READY_MARKER, BATCH_META, "p.csv"], ids=["folder", "ready", "meta", "data"])
@pytest.mark.parametrize(
    ("bit", "whom"), [(stat.S_IWGRP, f"its group ({SHARED_GROUP})"), (stat.S_IWOTH, "others")], ids=["group", "others"]
)
def test_a_file_its_group_or_others_may_write_refuses_the_batch(lake, owner_of, name, bit, whom):
    folder = dropped(lake)
    path = folder / name
    given_to(path, os_user(), SHARED_GROUP)
    path.chmod(path.stat().st_mode | bit)
    mark_ready(folder)
    assert refusal(owner_of) == f"{path} is writable by {whom}: {ALONE}"


def test_an_acl_that_lets_another_user_write_a_file_refuses_the_batch(lake, owner_of):
    folder = dropped(lake)
    acl_granting_write(folder / "p.csv", OTHER_USER)
    mark_ready(folder)
    group = grp.getgrgid((folder / "p.csv").stat().st_gid).gr_name
    assert refusal(owner_of) == f"{folder / 'p.csv'} is writable by its group ({group}): {ALONE}"


@pytest.mark.parametrize("name", [BATCH_META, "p.csv"])
def test_a_file_rewritten_after_the_batch_was_marked_ready_refuses_it_though_its_mtime_was_set_back(
    lake, owner_of, name
):
    folder = dropped(lake)
    after_the_mark(folder)
    rewritten_as_it_was_dated(folder / name, (folder / name).read_bytes().replace(b"1", b"2"))
    assert refusal(owner_of) == changed_after_the_mark(folder, folder / name)


def test_a_batch_changed_after_its_mark_is_its_owner_s_again_once_marked_ready_again(lake, owner_of):
    folder = dropped(lake)
    after_the_mark(folder)
    (folder / "p.csv").write_bytes(OTHER_CSV)
    mark_ready(folder)
    assert owner_of() == os_user()


def test_a_file_removed_after_the_batch_was_marked_ready_refuses_it(lake):
    folder = drop_batch(lake, PEOPLE, "b1", {"p.csv": CSV, "q.csv": OTHER_CSV})
    after_the_mark(folder, MARKING_NS + 20_000_000)
    (folder / "q.csv").unlink()
    assert refusal(lambda: batch_owner(lake, PEOPLE, "b1")) == changed_after_the_mark(folder, folder)


def test_a_data_file_rewritten_after_the_batch_was_opened_is_refused_as_it_is_read(lake):
    folder = dropped(lake)
    batch = open_batch(lake, PEOPLE, "b1", "csv")
    after_the_mark(folder)
    rewritten_as_it_was_dated(folder / "p.csv", OTHER_CSV)
    assert refusal(lambda: scan_batch(batch)) == (
        f"{folder / 'p.csv'}: changed while being ingested (replaced or rewritten); "
        "a batch must not change once marked ready"
    )


def test_a_batch_yaml_rewritten_after_the_batch_was_opened_is_refused_as_it_is_read(lake):
    folder = dropped(lake)
    batch = open_batch(lake, PEOPLE, "b1", "csv")
    after_the_mark(folder)
    (folder / BATCH_META).write_text("label: '16'\n")
    assert refusal(lambda: scan_batch(batch)) == changed_after_the_mark(folder, folder / BATCH_META)


def failures(catalog) -> list[dict]:
    with catalog.session() as session:
        found = entries(session, LedgerFilter(action=Action.INGESTION_FAILED))
    return [json.loads(entry.details) for entry in found]


def refused_and_recorded(spark, catalog, lake, test_specs, reason: str) -> None:
    """The ingestion of batch b1 refused with `reason`, an `ingestion.failed` entry saying so, and
    nothing committed."""
    with pytest.raises(BatchError) as refused:
        ingest(spark, catalog, lake, test_specs[PEOPLE], RunRequest(requested_by="bob"), batch_id="b1")
    assert str(refused.value) == reason
    [failed] = failures(catalog)
    assert (failed["error"], failed["batch"]) == (reason, "b1")
    assert_nothing_committed(catalog, lake, "t/people")


def test_an_ingestion_of_a_batch_that_breaks_the_rule_is_refused_recorded_and_changes_nothing(
    spark, catalog, lake, test_specs
):
    folder = dropped(lake)
    given_to(folder / "p.csv")
    mark_ready(folder)
    reason = f"{folder / 'p.csv'} is owned by {OTHER_USER}, not by {os_user()} who owns the batch's folder"
    refused_and_recorded(spark, catalog, lake, test_specs, reason)


def test_a_file_rewritten_between_the_decision_and_the_read_fails_the_ingestion_recorded_and_changes_nothing(
    spark, catalog, lake, test_specs, monkeypatch
):
    folder = dropped(lake)

    def decided_then_rewritten(*args, **kwargs):
        batch = open_batch(*args, **kwargs)
        after_the_mark(folder)
        rewritten_as_it_was_dated(folder / "p.csv", OTHER_CSV)
        return batch

    monkeypatch.setattr(governance.ingest, "open_batch", decided_then_rewritten)
    reason = (
        f"{folder / 'p.csv'}: changed while being ingested (replaced or rewritten); "
        "a batch must not change once marked ready"
    )
    refused_and_recorded(spark, catalog, lake, test_specs, reason)
