"""Where a streamed version's records come from: its topic, each partition's offsets and first and
last record times, and who the broker allowed to write the topic while they were written. Kafka
does not say which principal wrote a record: the writers are those whose WRITE entry on the topic
was in place at some moment between the version's first and last record, as the ledger recorded
each entry's adding and removal."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session, col, select

from governance import ledger
from governance.catalog.ledgerfilter import LedgerFilter
from governance.catalog.models import StreamRead, described_stream


def streams_of(session: Session, version_ids: Sequence[int]) -> dict[int, list[StreamRead]]:
    """The offset ranges of the versions `version_ids` that landed a topic, by version id."""
    found: dict[int, list[StreamRead]] = {}
    query = select(StreamRead).where(col(StreamRead.version_id).in_(version_ids)).order_by(col(StreamRead.partition))
    for read in session.exec(query):
        found.setdefault(read.version_id, []).append(read)
    return found


def described(session: Session, asset: str, reads: Sequence[StreamRead]) -> dict[str, Any]:
    """A streamed version's provenance: its ranges, and the producers the broker let write them."""
    times = [moment for read in reads for moment in (read.first_record_at, read.last_record_at) if moment]
    writers = sorted(_writers(session, asset, reads[0].topic, min(times), max(times))) if times else []
    return {**described_stream(reads), "writers": writers}


def _writers(session: Session, asset: str, topic: str, first: datetime, last: datetime) -> set[str]:
    """Who held WRITE on `topic` at some moment between `first` and `last`."""
    holding: dict[str, datetime] = {}  # user: since when, for the entries in place
    held: set[str] = set()
    for entry in _write_entries(session, asset, topic):
        at, user = _utc(entry["ts"]), entry["details"]["user"]
        if entry["action"] == ledger.Action.STREAM_ACL_ADDED:
            holding.setdefault(user, at)
        elif user in holding and holding.pop(user) <= _utc(last) and at >= _utc(first):
            held.add(user)
    return held | {user for user, since in holding.items() if since <= _utc(last)}


def _write_entries(session: Session, asset: str, topic: str) -> list[dict[str, Any]]:
    """The ledger's entries adding or removing someone's WRITE on `topic`, in the ledger's order."""
    found = [
        ledger.entry_dict(entry)
        for action in (ledger.Action.STREAM_ACL_ADDED, ledger.Action.STREAM_ACL_REMOVED)
        for entry in ledger.entries(session, LedgerFilter.asked(asset=asset, action=action))
    ]
    asked = {"resource": "topic", "name": topic, "pattern": "literal", "operation": "write", "permission": "allow"}
    writes = [e for e in found if all(e["details"].get(field) == value for field, value in asked.items())]
    return sorted(writes, key=lambda entry: entry["seq"])


def _utc(moment: datetime | str) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
