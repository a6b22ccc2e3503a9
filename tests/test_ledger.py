"""The ledger: gap-free, hash-chained, and any tampering is named by its first bad entry."""

from __future__ import annotations

import pytest

from governance import ledger
from governance.ledger import LedgerFilter


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
    assert all(e.prev_hash == p.hash for p, e in zip(found, found[1:], strict=False))
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
        ("UPDATE ledger SET hash = (CASE WHEN hash LIKE 'f%' THEN '0' ELSE 'f' END) || substr(hash, 2) WHERE seq = 2", 2),
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
