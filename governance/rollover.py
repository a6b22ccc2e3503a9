"""Rollover: ledger entries older than an age move out of the hot table into segment files.

Each rollover writes one immutable segment per run of old entries (at most `per_segment` each),
then, in one transaction, records the segment, keeps the entries' searchable columns in
`ledger_archive` and deletes them from the hot table. A crash between the two leaves a segment
file the catalog does not know: `recover` (run first by every rollover) adopts it when it is whole
and the hot table still holds exactly its entries, and deletes it otherwise.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, insert
from sqlmodel import col, select

from governance import ledger
from governance.catalog import Catalog, utcnow
from governance.catalog.models import ArchivedEntry, LedgerEntry, LedgerSegmentRow, SearchableEntry
from governance.runs import Progress, quiet
from governance.segments import SUFFIX, Segment, TornSegment, open_segment, write_segment

PER_SEGMENT = 100_000
SEARCHABLE = tuple(SearchableEntry.model_fields)


@dataclass
class RolloverReport:
    segments: list[str] = field(default_factory=list)
    entries: int = 0
    adopted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def rollover(catalog: Catalog, folder: Path, older_than: timedelta, *, now: datetime | None = None,
             per_segment: int = PER_SEGMENT, progress: Progress = quiet) -> RolloverReport:
    """Move the hot table's oldest entries, those older than `older_than`, into segments."""
    cutoff = ledger.timestamp((now or utcnow()) - older_than)
    report = RolloverReport()
    with _locked(folder):
        recover(catalog, folder, report)
        while rows := _oldest(catalog, cutoff, per_segment):
            segment = write_segment(folder, rows)
            _adopt(catalog, segment)
            report.segments.append(segment.path.name)
            report.entries += len(rows)
            progress(f"{segment.path.name}: {len(rows):,} entries, {segment.path.stat().st_size:,} B")
            if len(rows) < per_segment:
                break
    return report


def recover(catalog: Catalog, folder: Path, report: RolloverReport | None = None) -> RolloverReport:
    """Finish or undo what an interrupted rollover left in `folder`."""
    report = report if report is not None else RolloverReport()
    if not folder.is_dir():
        return report
    for partial in folder.glob(f".writing-*{SUFFIX}"):
        partial.unlink()
        report.removed.append(partial.name)
    with catalog.session() as session:
        known = {Path(row.path).name for row in session.exec(select(LedgerSegmentRow))}
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        if path.name in known:
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


def _adopt(catalog: Catalog, segment: Segment) -> None:
    """One transaction: the segment is recorded, its entries indexed and gone from the hot table."""
    archived = [{name: row[name] for name in SEARCHABLE} for row in segment.entries()]
    with catalog.session() as session:
        session.add(LedgerSegmentRow(
            first_seq=segment.first_seq, last_seq=segment.last_seq, path=str(segment.path.absolute()),
            entries=len(archived), bytes=segment.path.stat().st_size, last_hash=segment.last_hash, created_at=utcnow(),
        ))
        session.execute(insert(ArchivedEntry), archived)
        session.execute(delete(LedgerEntry).where(col(LedgerEntry.seq) >= segment.first_seq,
                                                  col(LedgerEntry.seq) <= segment.last_seq))


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".rollover.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
