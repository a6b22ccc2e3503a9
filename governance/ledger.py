"""The append-only, hash-chained ledger: every event of the system, in one gap-free sequence."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlmodel import Session, col, or_, select

from governance.catalog.models import LedgerEntry

GENESIS = "0" * 64
LEDGER_LOCK_ID = 0x637573746F6479  # arbitrary constant naming the ledger's advisory lock


class Action:
    INGESTION_REQUESTED = "ingestion.requested"
    INGESTION_COMMITTED = "ingestion.committed"
    INGESTION_FAILED = "ingestion.failed"
    ROWS_QUARANTINED = "rows.quarantined"
    MATERIALIZATION_REQUESTED = "materialization.requested"
    MATERIALIZATION_COMMITTED = "materialization.committed"
    MATERIALIZATION_FAILED = "materialization.failed"
    ATTEMPT_ROLLED_BACK = "attempt.rolled_back"
    SPEC_REGISTERED = "spec.registered"
    SPEC_CHANGED = "spec.changed"
    STATUS_CHANGED = "version.status_changed"
    VERSION_PURGED = "version.purged"
    MEMBER_ADDED = "member.added"
    MEMBER_REMOVED = "member.removed"


def entry_hash(prev_hash: str, entry: LedgerEntry) -> str:
    fields = {
        "seq": entry.seq,
        "ts": entry.ts,
        "actor": entry.actor,
        "action": entry.action,
        "asset": entry.asset_key,
        "version": entry.version,
        "run_id": entry.run_id,
        "details": entry.details,
    }
    if entry.assurance is not None:  # entries written before assurance was kept hash as they did
        fields["assurance"] = entry.assurance
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{prev_hash}\n{body}".encode()).hexdigest()


def append(
    session: Session,
    *,
    actor: str,
    action: str,
    asset: str | None = None,
    version: int | None = None,
    run_id: str | None = None,
    details: dict[str, Any] | None = None,
    assurance: str | None = None,
) -> LedgerEntry:
    """Add one entry inside the caller's transaction; it commits or vanishes with it."""
    if session.get_bind().dialect.name == "postgresql":
        session.exec(text("SELECT pg_advisory_xact_lock(:id)").bindparams(id=LEDGER_LOCK_ID))
    last = session.exec(select(LedgerEntry).order_by(col(LedgerEntry.seq).desc()).limit(1)).first()
    entry = LedgerEntry(
        seq=last.seq + 1 if last else 1,
        ts=datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
        actor=actor,
        action=action,
        asset_key=asset,
        version=version,
        run_id=run_id,
        details=json.dumps(details or {}, sort_keys=True, separators=(",", ":"), default=str),
        prev_hash=last.hash if last else GENESIS,
        hash="",
        assurance=str(assurance) if assurance is not None else None,
    )
    entry.hash = entry_hash(entry.prev_hash, entry)
    session.add(entry)
    return entry


@dataclass(frozen=True)
class LedgerFilter:
    asset: str | None = None
    version: int | None = None
    actor: str | None = None
    action: str | None = None
    run_id: str | None = None
    from_seq: int = 1
    limit: int | None = None


def entries(session: Session, where: LedgerFilter = LedgerFilter()) -> list[LedgerEntry]:
    query = select(LedgerEntry).where(LedgerEntry.seq >= where.from_seq)
    for column, value in (
        (LedgerEntry.asset_key, where.asset),
        (LedgerEntry.version, where.version),
        (LedgerEntry.actor, where.actor),
        (LedgerEntry.run_id, where.run_id),
    ):
        if value is not None:
            query = query.where(column == value)
    if where.action is not None:
        # `ingestion` means every ingestion.* action, as `read` means the read decisions
        family = where.action.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ".%"
        query = query.where(or_(LedgerEntry.action == where.action, col(LedgerEntry.action).like(family, escape="\\")))
    query = query.order_by(col(LedgerEntry.seq))
    if where.limit is not None:
        query = query.limit(where.limit)
    return list(session.exec(query))


@dataclass(frozen=True)
class Verification:
    entries: int
    first_bad_seq: int | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.first_bad_seq is None


def verify(session: Session, chunk: int = 10_000) -> Verification:
    """Recompute the chain from the first entry; name the first entry that does not fit."""
    expected_seq, prev_hash, count = 1, GENESIS, 0
    for entry in _scan(session, chunk):
        count += 1
        if entry.seq != expected_seq:
            missing = "missing" if entry.seq > expected_seq else "out of order"
            return Verification(count, expected_seq, f"entry {expected_seq} is {missing} (found {entry.seq})")
        if entry.prev_hash != prev_hash:
            return Verification(count, entry.seq, "does not link to the entry before it")
        if entry_hash(prev_hash, entry) != entry.hash:
            return Verification(count, entry.seq, "content does not match its hash")
        expected_seq, prev_hash = entry.seq + 1, entry.hash
    return Verification(count)


def _scan(session: Session, chunk: int) -> Iterator[LedgerEntry]:
    after = 0
    while True:
        batch = list(
            session.exec(
                select(LedgerEntry).where(LedgerEntry.seq > after).order_by(col(LedgerEntry.seq)).limit(chunk)
            )
        )
        yield from batch
        if len(batch) < chunk:
            return
        after = batch[-1].seq
