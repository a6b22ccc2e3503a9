"""The ledger: gap-free, hash-chained, and any tampering is named by its first bad entry."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from governance import ledger
from governance.ledger import LedgerFilter
from governance.runs import Assurance


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


def test_filters_select_entries_in_order(ten):
    with ten.session() as session:
        ledger.append(session, actor="alice", action="spec.changed", asset="t/other")
        found = ledger.entries(session, LedgerFilter(actor="alice"))
        paged = ledger.entries(session, LedgerFilter(from_seq=4, limit=3))
    assert [e.seq for e in found] == [11]
    assert [e.seq for e in paged] == [4, 5, 6]


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
