"""The ledger: gap-free, hash-chained, and any tampering is named by its first bad entry."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError

from governance import ledger
from governance.access.settings import pinned_settings
from governance.catalog.group import Append, GroupCommit, Outcome
from governance.catalog.ledgerfilter import LedgerFilter
from governance.catalog.models import PolicySetting
from governance.errors import CustodyError, InvalidInput, SettingsChanged
from governance.runs import Assurance

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def ten(catalog):
    for i in range(10):
        with catalog.session() as session:
            ledger.append(session, actor="bob", action="ingestion.requested", asset="t/people", details={"i": i})
    return catalog


def execute(catalog, sql):
    with catalog.session() as session:
        session.connection().exec_driver_sql(sql)


def verify(catalog):
    with catalog.session() as session:
        return ledger.verify(session)


def test_sequence_numbers_are_gap_free_and_chained(ten):
    with ten.session() as session:
        found = ledger.entries(session)
    assert [e.seq for e in found] == list(range(1, 11))
    assert all(e.prev_hash == p.hash for p, e in itertools.pairwise(found))
    assert verify(ten).ok and verify(ten).entries == 10


def test_an_entry_rolled_back_with_its_transaction_leaves_no_gap(ten):
    with pytest.raises(RuntimeError), ten.session() as session:
        ledger.append(session, actor="bob", action="x")
        raise RuntimeError("abort")
    with ten.session() as session:
        assert ledger.append(session, actor="bob", action="y").seq == 11


@pytest.mark.parametrize(
    ("sql", "first_bad"),
    [
        ("UPDATE ledger SET details = '{\"i\":99}' WHERE seq = 4", 4),
        ("UPDATE ledger SET actor = 'mallory' WHERE seq = 7", 7),
        ("DELETE FROM ledger WHERE seq = 5", 5),
        ("UPDATE ledger SET seq = 100 WHERE seq = 3", 3),
        (
            "UPDATE ledger SET hash = (CASE WHEN hash LIKE 'f%' THEN '0' ELSE 'f' END) || substr(hash, 2) WHERE seq = 2",
            2,
        ),
    ],
)
def test_tampering_is_detected_at_the_first_bad_entry(ten, sql, first_bad):
    execute(ten, sql)
    result = verify(ten)
    assert not result.ok and result.first_bad_seq == first_bad, result


# Long enough for threads started while the writer is held to queue behind it, on a busy machine.
QUEUEING_SECONDS = 1


def appending_behind_a_held_writer(catalog, actors, settings=None):
    """Each actor's entry appended by a thread of its own: the first started while this thread holds
    the catalog's writer, the others once it waits; under the policy settings `settings` gives an
    actor, if any. What each got back, or raised."""
    outcomes = {}

    def append(actor):
        try:
            outcomes[actor] = catalog.record([ledger.Event(actor, "read")], (settings or {}).get(actor))
        except (SQLAlchemyError, CustodyError) as err:
            outcomes[actor] = err

    threads = [threading.Thread(target=append, args=(actor,)) for actor in actors]
    with catalog.session():
        threads[0].start()
        time.sleep(QUEUEING_SECONDS)
        for thread in threads[1:]:
            thread.start()
        time.sleep(QUEUEING_SECONDS)
    for thread in threads:
        thread.join(timeout=30)
    return outcomes


def test_threads_appending_at_once_share_a_transaction_and_each_gets_its_own_entry(catalog):
    commits = []
    event.listen(catalog.engine, "commit", commits.append)
    actors = [f"user{i}" for i in range(20)]
    outcomes = appending_behind_a_held_writer(catalog, actors)
    # The held writer's, the first thread's own transaction, then one for the 19 that queued behind it.
    assert len(commits) == 3
    with catalog.reading() as session:
        found = {entry.seq: entry.actor for entry in ledger.entries(session)}
    assert sorted(found) == list(range(1, 21))
    assert all(found[outcomes[actor][0].seq] == actor for actor in actors)
    assert verify(catalog).ok


def test_a_shared_transaction_that_fails_fails_every_thread_in_it_and_keeps_none_of_their_entries(catalog):
    execute(
        catalog,
        "CREATE TRIGGER refuse_mallory BEFORE INSERT ON ledger WHEN NEW.actor = 'mallory' "
        "BEGIN SELECT RAISE(ABORT, 'mallory is refused'); END",
    )
    outcomes = appending_behind_a_held_writer(catalog, ["carol", "alice", "mallory"])
    assert [entry.seq for entry in outcomes["carol"]] == [1]
    assert "mallory is refused" in str(outcomes["alice"]) and "mallory is refused" in str(outcomes["mallory"])
    with catalog.reading() as session:
        assert [entry.actor for entry in ledger.entries(session)] == ["carol"]


def pinned(catalog, settings, changed=None):
    """The policy settings, pinned by their first use; then `changed` (key, value) as an admin's
    change by another process would leave them."""
    values = pinned_settings(catalog, settings, {}).values()
    if changed is not None:
        execute(catalog, f"UPDATE policy_setting SET value = '{changed[1]}' WHERE key = '{changed[0]}'")
    return values


def actions(catalog):
    with catalog.reading() as session:
        return [(entry.actor, entry.action) for entry in ledger.entries(session)]


@pytest.mark.both_backends
def test_entries_recorded_under_the_settings_still_pinned_are_kept(catalog, settings):
    under = pinned(catalog, settings)
    catalog.record([ledger.Event("dave", "ledger.read")], under)
    assert actions(catalog)[-1] == ("dave", "ledger.read")


@pytest.mark.both_backends
def test_entries_decided_under_settings_an_admin_changed_since_are_refused_and_none_is_kept(catalog, settings):
    under = pinned(catalog, settings, changed=("auditor_group", "sales-owners"))
    before = actions(catalog)
    with pytest.raises(
        SettingsChanged,
        match="the policy settings changed while this request was decided, so nothing of it was recorded",
    ):
        catalog.record([ledger.Event("dave", "ledger.read"), ledger.Event("dave", "read")], under)
    assert actions(catalog) == before


def test_a_thread_whose_settings_changed_is_refused_alone_in_a_shared_transaction(catalog, settings):
    under = pinned(catalog, settings)
    stale = {**under, "auditor_group": "sales-owners"}
    outcomes = appending_behind_a_held_writer(
        catalog, ["carol", "alice", "mallory", "bob"], {"alice": under, "mallory": stale}
    )
    assert isinstance(outcomes["mallory"], SettingsChanged)
    assert {actor for actor, action in actions(catalog) if action == "read"} == {"carol", "alice", "bob"}
    assert verify(catalog).ok


def test_a_shared_transaction_s_committer_returns_every_entry_it_committed_even_when_its_own_were_refused():
    group, first_running, queued = GroupCommit(), threading.Event(), threading.Event()
    stale = {"auditor_group": "sales-owners"}

    def commit(appends):
        first_running.set()
        queued.wait(timeout=30)
        return [
            None if append.settings == stale else Outcome([ledger.Appended(seq, name) for seq, name in append.events])
            for append in appends
        ]

    outcomes = {}

    def append(seq, name, settings=None):
        outcomes[name] = group.append(Append([(seq, name)], settings), commit)

    threads = [threading.Thread(target=append, args=(1, "carol"))]
    threads[0].start()
    first_running.wait(timeout=30)
    threads += [threading.Thread(target=append, args=args) for args in ((2, "mallory", stale), (2, "alice"))]
    for thread in threads[1:]:
        thread.start()
    while len(group._waiting) < 2:  # both queued behind carol's transaction
        time.sleep(0.01)
    queued.set()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes["mallory"].refused and outcomes["mallory"].appended == ()
    assert [outcome.appended for outcome in (outcomes["carol"], outcomes["alice"])] == [
        [ledger.Appended(1, "carol")],
        [ledger.Appended(2, "alice")],
    ]
    # The committer of each transaction, refused or not, sees to the checkpoint of all it committed.
    assert sorted(entry.hash for outcome in outcomes.values() for entry in outcome.batch) == ["alice", "carol"]


def test_a_work_that_failed_after_appending_leaves_the_chain_whole_for_the_next_work_of_its_batch(catalog):
    def failing(session):
        ledger.append(session, actor="mallory", action="spec.changed")
        raise InvalidInput("the work failed")

    def appending(session):
        return None, [ledger.Event("alice", "read.outside-policy")]

    outcomes = catalog._append(
        [
            Append([ledger.Event("bob", "lineage.report")], None, failing),
            Append([ledger.Event("carol", "read")], None, appending),
        ]
    )

    assert isinstance(outcomes[0].failed, InvalidInput)
    assert [actor for actor, _ in actions(catalog)][-3:] == ["bob", "carol", "alice"]
    assert verify(catalog).ok


def test_a_recorded_work_that_writes_through_the_orm_fails_its_whole_batch(catalog):
    def orm(session):
        session.add(
            PolicySetting(key="auditor_group", value="everyone", set_by="mallory", assurance="asserted", set_at=EPOCH)
        )
        return None, []

    with pytest.raises(RuntimeError, match="not through the ORM"):
        catalog.record_then([ledger.Event("bob", "lineage.report")], orm)
    assert "bob" not in {actor for actor, _ in actions(catalog)}


def test_a_thread_inside_a_write_transaction_may_not_record_and_is_told_at_once(catalog):
    with catalog.session(), pytest.raises(RuntimeError, match="recorded in a transaction of their own"):
        catalog.record([ledger.Event("bob", "read")])


def test_filters_select_entries_in_order(ten):
    with ten.session() as session:
        ledger.append(session, actor="alice", action="spec.changed", asset="t/other")
        found = ledger.entries(session, LedgerFilter(actor="alice"))
        paged = ledger.entries(session, LedgerFilter(from_seq=4, limit=3))
    assert [e.seq for e in found] == [11]
    assert [e.seq for e in paged] == [4, 5, 6]


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "where",
    [
        LedgerFilter(),
        LedgerFilter(from_seq=4, limit=3),
        LedgerFilter(asset="t/people", limit=250),
        LedgerFilter(action="ingestion"),
        LedgerFilter(actor="nobody"),
        LedgerFilter(since="2000-01-01", until="2100-01-01", limit=1),
    ],
)
def test_a_page_as_json_holds_the_entries_as_they_read_each_details_an_object(catalog, where):
    with catalog.session() as session:
        for i, text in enumerate(STRINGS * 40):
            ledger.append(
                session, actor="bob", action="ingestion.requested", asset="t/people", details={"i": i, "s": text}
            )
    with catalog.reading() as session:
        page = ledger.entries_json(session, where)
        found = ledger.entries(session, where)
    entries = json.loads(page.json)
    assert entries == [ledger.entry_dict(entry) for entry in found]
    assert [entry["seq"] for entry in entries] == sorted(entry["seq"] for entry in entries)
    assert page.entries == len(found)


@pytest.mark.both_backends
@pytest.mark.parametrize("action", ["ingestion%", "ingestio_", "ingestion\\", "INGESTION", "Ingestion.requested"])
def test_an_action_is_matched_letter_for_letter_its_wildcards_and_case_its_own(catalog, action):
    with catalog.session() as session:
        ledger.append(session, actor="bob", action="ingestion.requested", asset="t/people")
    with catalog.reading() as session:
        assert json.loads(ledger.entries_json(session, LedgerFilter(action=action)).json) == []
        assert ledger.entries(session, LedgerFilter(action=action)) == []


def reference_body(row: dict) -> str:
    """The hashed body as the ledger has always defined it: json.dumps of the hashed columns."""
    fields = {
        "seq": row["seq"],
        "ts": row["ts"],
        "actor": row["actor"],
        "action": row["action"],
        "asset": row["asset_key"],
        "version": row["version"],
        "run_id": row["run_id"],
        "details": row["details"],
    }
    if row.get("assurance") is not None:
        fields["assurance"] = row["assurance"]
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


STRINGS = [
    "",
    "bob",
    "Zoë",
    "日本語",
    "emoji 🧾",
    'quote " backslash \\ slash /',
    "tab\tnew\nline\r\x00\x1f\x7f",
    "\ud800",
]


@pytest.mark.parametrize("seed", range(20))
def test_the_hashed_body_is_exactly_the_canonical_json(seed):
    rng = random.Random(seed)
    for _ in range(200):
        row = {
            "seq": rng.choice([1, 2**63 - 1, rng.randrange(10**12)]),
            "ts": rng.choice(STRINGS),
            "actor": rng.choice(STRINGS),
            "action": rng.choice(STRINGS),
            "asset_key": rng.choice([None, *STRINGS]),
            "version": rng.choice([None, 0, -1, 10**20]),
            "run_id": rng.choice([None, *STRINGS]),
            "assurance": rng.choice([None, *STRINGS]),
            "details": json.dumps({rng.choice(STRINGS): rng.choice(STRINGS), "n": rng.random()}),
        }
        assert ledger.hashed_body(row) == reference_body(row)


@pytest.mark.parametrize("odd", [True, 1.5, Assurance.SYSTEM])
def test_values_of_other_types_hash_as_the_general_encoder_writes_them(odd):
    row = {
        "seq": 1,
        "ts": "t",
        "actor": "a",
        "action": "read",
        "asset_key": None,
        "version": odd,
        "run_id": None,
        "assurance": Assurance.SYSTEM,
        "details": "{}",
    }
    assert ledger.hashed_body(row) == reference_body(row)


def test_a_failed_work_is_raised_its_changes_undone_and_the_entries_it_came_with_committed(catalog):
    def work(session):
        ledger.append(session, actor="mallory", action="spec.changed")
        raise InvalidInput("the work failed")

    with pytest.raises(InvalidInput, match="the work failed"):
        catalog.record_then([ledger.Event("bob", "lineage.report")], work)
    assert [actor for actor, _ in actions(catalog)][-1] == "bob"
    assert "mallory" not in {actor for actor, _ in actions(catalog)}
    assert verify(catalog).ok
