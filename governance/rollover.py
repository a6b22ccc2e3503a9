"""Rollover and age-off: ledger entries older than an age move out of the hot table into segment
files, and segments past the retention age, or beyond a size budget, are deleted oldest first.

Each rollover writes one immutable segment per run of old entries (at most `per_segment` each),
then, in one transaction, records the segment, keeps the entries' searchable columns in
`ledger_archive` and deletes them from the hot table. A crash between the two leaves a segment
file the catalog does not know: `recover` (run first by every rollover) adopts it when it is whole
and the hot table still holds exactly its entries, and deletes it otherwise.

Age-off first appends a checkpoint marked `aged_off` naming the last entry it deletes (signed like
every checkpoint), then records that horizon in the catalog and forgets the segment, then deletes
the file: `verify` starts after the horizon, so what remains stays verifiable, and a crash at any
step is completed by the next age-off or rollover.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, insert
from sqlmodel import col, select

from governance import ledger
from governance.catalog import Catalog, utcnow
from governance.catalog.models import (
    ArchivedEntry,
    LedgerEntry,
    LedgerHorizon,
    LedgerSegmentRow,
    SearchableEntry,
)
from governance.errors import InvalidInput
from governance.locks import file_lock
from governance.runs import Assurance, Progress, quiet
from governance.segments import PARTIAL, SUFFIX, Segment, TornSegment, open_segment, write_segment

PER_SEGMENT = 100_000
MAINTENANCE = "custody-maintenance"
SEARCHABLE = tuple(SearchableEntry.model_fields)


@dataclass
class RolloverReport:
    segments: list[str] = field(default_factory=list)
    entries: int = 0
    adopted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def rollover(
    catalog: Catalog,
    folder: Path,
    older_than: timedelta,
    *,
    now: datetime | None = None,
    per_segment: int = PER_SEGMENT,
    progress: Progress = quiet,
) -> RolloverReport:
    """Move the hot table's oldest entries, those older than `older_than`, into segments."""
    cutoff = ledger.timestamp((now or utcnow()) - older_than)
    report = RolloverReport()
    with file_lock(folder / ".rollover.lock"):
        recover(catalog, folder, report)
        while rows := _oldest(catalog, cutoff, per_segment):
            segment = write_segment(folder, rows)
            _adopt(catalog, segment, rows)
            report.segments.append(segment.path.name)
            report.entries += len(rows)
            progress(f"{segment.path.name}: {len(rows):,} entries, {segment.path.stat().st_size:,} B")
            if len(rows) < per_segment:
                break
    return report


def leftovers(catalog: Catalog, folder: Path) -> list[Path]:
    """Files an interrupted rollover left in `folder`: half-written ones and segments the catalog
    never recorded. The ledger reads right without them; `recover` finishes or removes them."""
    if not folder.is_dir():
        return []
    with catalog.session() as session:
        known = {Path(row.path).name for row in session.exec(select(LedgerSegmentRow))}
    partial = sorted(folder.glob(f"{PARTIAL}*{SUFFIX}"))
    unrecorded = [path for path in sorted(folder.glob(f"*{SUFFIX}")) if path.name not in known and path not in partial]
    return partial + unrecorded


def recover(catalog: Catalog, folder: Path, report: RolloverReport | None = None) -> RolloverReport:
    """Finish or undo what an interrupted rollover left in `folder`."""
    report = report if report is not None else RolloverReport()
    for path in leftovers(catalog, folder):
        if path.name.startswith(PARTIAL):
            path.unlink()
            report.removed.append(path.name)
            continue
        try:
            segment = open_segment(path)
        except TornSegment:
            segment = None
        if segment is not None and _still_hot(catalog, segment):
            _adopt(catalog, segment)
            report.adopted.append(path.name)
        else:
            path.unlink()
            report.removed.append(path.name)
    return report


def _oldest(catalog: Catalog, cutoff: str, limit: int) -> list[dict]:
    """The hot table's first entries older than `cutoff`, up to the first that is not."""
    with catalog.session() as session:
        found = list(session.exec(select(LedgerEntry).order_by(col(LedgerEntry.seq)).limit(limit)))
    rows = []
    for entry in found:
        if entry.ts >= cutoff:
            break
        rows.append(entry.model_dump())
    return rows


def _still_hot(catalog: Catalog, segment: Segment) -> bool:
    with catalog.session() as session:
        first = session.get(LedgerEntry, segment.first_seq)
        last = session.get(LedgerEntry, segment.last_seq)
    return first is not None and last is not None and last.hash == segment.last_hash


def _adopt(catalog: Catalog, segment: Segment, rows: list[dict] | None = None) -> None:
    """One transaction: the segment is recorded, its entries indexed and gone from the hot table.
    `rows` are the entries just written, when at hand; else they are read back from the file."""
    archived = [{name: row[name] for name in SEARCHABLE} for row in (rows if rows is not None else segment.entries())]
    with catalog.session() as session:
        session.add(
            LedgerSegmentRow(
                first_seq=segment.first_seq,
                last_seq=segment.last_seq,
                path=segment.path.name,
                entries=len(archived),
                bytes=segment.path.stat().st_size,
                last_hash=segment.last_hash,
                created_at=utcnow(),
                last_ts=archived[-1]["ts"],
            )
        )
        session.execute(insert(ArchivedEntry), archived)
        session.execute(
            delete(LedgerEntry).where(
                col(LedgerEntry.seq) >= segment.first_seq, col(LedgerEntry.seq) <= segment.last_seq
            )
        )


@dataclass
class AgeOffReport:
    segments: list[str] = field(default_factory=list)
    entries: int = 0
    bytes: int = 0
    horizon: int | None = None


def age_off(
    catalog: Catalog,
    folder: Path,
    *,
    older_than: timedelta | None = None,
    max_bytes: int | None = None,
    now: datetime | None = None,
    actor: str = MAINTENANCE,
    assurance: Assurance = Assurance.SYSTEM,
    run_id: str | None = None,
    progress: Progress = quiet,
    how: Mapping[str, str] | None = None,
) -> AgeOffReport:
    """Delete the oldest segments: those whose newest entry is older than `older_than`, and then as
    many more as it takes to bring the segments to 90 % of `max_bytes` when they exceed it. Each
    deletion is a `ledger.aged_off` entry, committed with the new horizon, that keeps `how` the
    actor's identity was established."""
    if catalog.checkpoints is None:
        raise InvalidInput(
            "age-off records where the ledger now begins in the checkpoint file, and this catalog has none"
        )
    cutoff = ledger.timestamp((now or utcnow()) - older_than) if older_than is not None else None
    report = AgeOffReport()
    with file_lock(folder / ".rollover.lock"):
        recover(catalog, folder)
        with catalog.session() as session:
            segments = list(session.exec(select(LedgerSegmentRow).order_by(col(LedgerSegmentRow.first_seq))))
        for row in _expired(segments, cutoff, max_bytes):
            catalog.record_checkpoint(row.last_seq, row.last_hash, aged_off=True)
            with catalog.session() as session:
                session.execute(
                    delete(ArchivedEntry).where(
                        col(ArchivedEntry.seq) >= row.first_seq, col(ArchivedEntry.seq) <= row.last_seq
                    )
                )
                session.execute(delete(LedgerSegmentRow).where(col(LedgerSegmentRow.first_seq) == row.first_seq))
                session.add(LedgerHorizon(seq=row.last_seq, hash=row.last_hash, aged_off_at=utcnow()))
                ledger.append(
                    session,
                    actor=actor,
                    action=ledger.Action.LEDGER_AGED_OFF,
                    run_id=run_id,
                    assurance=assurance,
                    details={
                        **(how or {}),
                        "segment": row.path,
                        "first_seq": row.first_seq,
                        "last_seq": row.last_seq,
                        "entries": row.entries,
                        "bytes": row.bytes,
                        "last_ts": row.last_ts,
                        "older_than_days": older_than.total_seconds() / 86400 if older_than is not None else None,
                        "max_bytes": max_bytes,
                    },
                )
            (folder / row.path).unlink(missing_ok=True)
            progress(f"aged off {row.path}: {row.entries:,} entries, {row.bytes:,} B")
            report.segments.append(row.path)
            report.entries += row.entries
            report.bytes += row.bytes
            report.horizon = row.last_seq
    return report


def _ends_before(segment: LedgerSegmentRow, cutoff: str) -> bool:
    return segment.last_ts is not None and segment.last_ts < cutoff


def _expired(segments: list[LedgerSegmentRow], cutoff: str | None, max_bytes: int | None) -> list[LedgerSegmentRow]:
    """The oldest segments to delete, always a prefix: deleting from the start keeps the rest verifiable."""
    by_age = 0
    if cutoff is not None:
        while by_age < len(segments) and _ends_before(segments[by_age], cutoff):
            by_age += 1
    by_size = 0
    if max_bytes is not None:
        total = sum(row.bytes for row in segments)
        if total > max_bytes:
            while by_size < len(segments) and total > max_bytes * 0.9:
                total -= segments[by_size].bytes
                by_size += 1
    return segments[: max(by_age, by_size)]
