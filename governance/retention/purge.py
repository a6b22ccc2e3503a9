"""Critical status and retention: purge what each spec lets go, never what critical lineage depends on.

A purge tombstones versions first (status `purging`, in one transaction that re-checks protection),
then deletes their folders, then marks each `purged` with a ledger entry. A purge interrupted at any
point is finished by the next one. A purged version keeps its row, its lineage and its history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlmodel import Session, col, select

from governance import ledger
from governance.catalog import Catalog, utcnow
from governance.catalog.models import Attempt, VersionRow
from governance.catalog.states import Criticality, VersionStatus
from governance.errors import InUse, InvalidInput, NotFound, NotSignedIn, Protected
from governance.lineage.graph import protected_ids
from governance.retention.reports import Candidate, PurgeReport, StatusChange
from governance.runs import Assurance, Progress, quiet
from governance.spec import Retention, Spec
from governance.zones import AssetKey, Lake, VersionRef

if TYPE_CHECKING:
    from governance.access.policy import Identity, Policy


def change_status(
    catalog: Catalog,
    policy: Policy,
    identity: Identity,
    spec: Spec | None,
    ref: VersionRef,
    status: Criticality,
    details: Mapping[str, str] | None = None,
) -> StatusChange:
    """Mark a version's status as `identity`, an owner of its asset: decided and recorded first."""
    from governance.access.guard import authorize
    from governance.access.policy import Verb

    said = {**(details or {}), "to": status.value}
    authorize(catalog, policy, identity, Verb.STATUS, spec, version=ref.number, details=said)
    return set_status(catalog, ref, status, identity.user, identity.assurance)


def set_status(
    catalog: Catalog, ref: VersionRef, status: Criticality, actor: str, assurance: str | None = None
) -> StatusChange:
    """Mark a version critical (it and everything upstream become protected) or normal again."""
    row = catalog.version(ref)
    with catalog.session() as session:
        catalog.lock_protection(session)
        current = _stored(session, row.stored_id)
        if current.status != VersionStatus.COMMITTED and status is Criticality.CRITICAL:
            raise InvalidInput(f"{ref} is {current.status}: its files are gone, so it cannot be made critical")
        before = current.criticality
        current.criticality = status.value
        session.add(current)
        upstream = _upstream_rows(session, current.stored_id)
        gone = tuple(
            sorted(f"{asset}@{number}" for asset, number, state in upstream if state != VersionStatus.COMMITTED)
        )
        ledger.append(
            session,
            actor=actor,
            action=ledger.Action.STATUS_CHANGED,
            asset=row.asset_key,
            version=row.number,
            assurance=assurance,
            details={
                "from": before,
                "to": status.value,
                "upstream_versions": len(upstream),
                "upstream_purged": list(gone),
            },
        )
    return StatusChange(str(ref), before, status.value, len(upstream) - len(gone), gone)


def _stored(session: Session, version_id: int) -> VersionRow:
    """A version the caller read from the catalog: versions are never deleted, purged ones included."""
    row = session.get(VersionRow, version_id)
    if row is None:
        raise NotFound(f"no version with id {version_id} in the catalog")
    return row


def _upstream_rows(session: Session, version_id: int) -> list[tuple[str, int, str]]:
    """Asset, number and status of every version upstream of this one, however deep."""
    query = text(
        """
        WITH RECURSIVE up(id) AS (
            SELECT input_version_id FROM lineage_edge WHERE output_version_id = :root
            UNION
            SELECT e.input_version_id FROM lineage_edge e JOIN up ON e.output_version_id = up.id
        )
        SELECT v.asset_key, v.number, v.status FROM up JOIN version v ON v.id = up.id
        """
    )
    return [tuple(row) for row in session.connection().execute(query, {"root": version_id})]


def expired(rows: list[VersionRow], retention: Retention, now: datetime) -> list[tuple[VersionRow, str]]:
    """The versions of one asset its retention lets go: every rule set must agree; the newest always stays.

    Only committed versions count, so versions purged earlier never take the place of ones kept.
    """
    if retention.keep_versions is None and retention.max_age_days is None:
        return []
    newest_first = sorted(
        (r for r in rows if r.status == VersionStatus.COMMITTED), key=lambda r: r.number, reverse=True
    )
    found = []
    for rank, row in enumerate(newest_first):
        if rank == 0:
            continue
        reasons = []
        if retention.keep_versions is not None:
            if rank < retention.keep_versions:
                continue
            reasons.append(f"beyond the newest {retention.keep_versions}")
        if retention.max_age_days is not None:
            if row.created_at.replace(tzinfo=now.tzinfo) > now - timedelta(days=retention.max_age_days):
                continue
            reasons.append(f"older than {retention.max_age_days} days")
        found.append((row, " and ".join(reasons)))
    return found


def governed_purge(
    catalog: Catalog,
    lake: Lake,
    policy: Policy,
    identity: Identity | None,
    specs: Iterable[Spec],
    refs: Sequence[VersionRef] = (),
    *,
    dry_run: bool = False,
    progress: Progress = quiet,
    details: Mapping[str, str] | None = None,
) -> PurgeReport:
    """Purge as `identity`, an admin: exactly `refs`, else what each spec's retention lets go. The
    decision is recorded first; a dry run decides nothing and changes nothing."""
    from governance.access.guard import authorize
    from governance.access.policy import Verb

    by_key = {spec.key: spec for spec in specs}
    retention = {} if refs else {key: spec.body.retention for key, spec in by_key.items()}
    if dry_run:
        return purge(catalog, lake, retention, "dry-run", explicit=refs, dry_run=True, progress=progress)
    if identity is None:
        raise NotSignedIn("purging needs an admin who proved who they are")
    touching = [by_key[ref.key] for ref in refs if ref.key in by_key] if refs else list(by_key.values())
    said = {**(details or {}), "versions": [str(ref) for ref in refs] or "by retention"}
    authorize(catalog, policy, identity, Verb.PURGE, None, touching=touching, details=said)
    return purge(
        catalog, lake, retention, identity.user, explicit=refs, progress=progress, assurance=identity.assurance
    )


def purge(
    catalog: Catalog,
    lake: Lake,
    retention: Mapping[AssetKey, Retention],
    actor: str,
    *,
    explicit: Iterable[VersionRef] = (),
    dry_run: bool = False,
    now: datetime | None = None,
    progress: Progress = quiet,
    assurance: str | None = None,
) -> PurgeReport:
    """Purge the versions the specs' retention lets go (or exactly `explicit`), never a protected one."""
    now = now or utcnow()
    wanted = list(explicit)
    report = PurgeReport(dry_run=dry_run)
    with catalog.session() as session:
        catalog.lock_protection(session)
        protected = protected_ids(session)
        reading = read_by_runs(session, lake)
        interrupted = list(session.exec(select(VersionRow).where(VersionRow.status == VersionStatus.PURGING)))
        if wanted:
            candidates = _explicit(session, catalog, wanted, protected, reading, report)
        else:
            candidates = _by_retention(session, retention, now, protected, reading, report)
        if not dry_run:
            for candidate in candidates:
                row = _stored(session, candidate.version_id)
                row.status = VersionStatus.PURGING.value
                session.add(row)
    report.finished = [row.ref for row in interrupted]
    report.purged = candidates
    if dry_run:
        return report
    reasons = {c.version_id: c.reason for c in candidates}
    reasons.update({row.stored_id: "an interrupted purge, finished" for row in interrupted})
    for version_id, reason in reasons.items():
        _finish(catalog, lake, version_id, reason, actor, progress, assurance)
    return report


def finish_interrupted(catalog: Catalog, lake: Lake, actor: str, progress: Progress = quiet) -> list[str]:
    """Finish the purges that were stopped before their end: each was decided, and recorded, when it
    marked its versions `purging`. The versions finished, by reference."""
    with catalog.reading() as session:
        interrupted = list(session.exec(select(VersionRow).where(VersionRow.status == VersionStatus.PURGING)))
    for row in interrupted:
        _finish(
            catalog, lake, row.stored_id, "an interrupted purge, finished by repair", actor, progress, Assurance.SYSTEM
        )
    return [row.ref for row in interrupted]


def read_by_runs(session: Session, lake: Lake) -> dict[int, Attempt]:
    """The versions that attempts in progress read, by id, each with one of those attempts. An
    attempt whose process is gone reads nothing: `custody repair` rolls it back."""
    reading: dict[int, Attempt] = {}
    for running in session.exec(select(Attempt).where(Attempt.status == "running", col(Attempt.inputs).is_not(None))):
        if not lake.stage(running.id).is_abandoned():
            reading.update(dict.fromkeys(json.loads(running.inputs or "[]"), running))
    return reading


def _in_use(attempt: Attempt) -> str:
    return f"run {attempt.run_id or attempt.id} reads it to make {attempt.asset_key}, and has not ended"


def _explicit(
    session: Session,
    catalog: Catalog,
    refs: list[VersionRef],
    protected: set[int],
    reading: Mapping[int, Attempt],
    report: PurgeReport,
) -> list[Candidate]:
    """The versions named, all known and none protected or read by a run in progress, or an error
    and nothing purged."""
    found = [catalog.find_version(session, ref) for ref in refs]
    unknown = [str(ref) for ref, row in zip(refs, found) if row is None]
    if unknown:
        raise NotFound(f"no version {', '.join(unknown)}; nothing was purged")
    rows = [row for row in found if row is not None]
    candidates = []
    for ref, row in zip(refs, rows):
        if row.status != VersionStatus.COMMITTED:
            report.already_purged.append(row.ref)
        elif row.stored_id in protected:
            raise Protected(f"{ref} is protected: {_protection(row)}; nothing was purged")
        elif row.stored_id in reading:
            raise InUse(f"{ref} is in use: {_in_use(reading[row.stored_id])}; nothing was purged: try once it has")
        else:
            candidates.append(Candidate(row.ref, row.stored_id, "requested explicitly", row.bytes))
    return candidates


def _protection(row: VersionRow) -> str:
    if row.criticality == Criticality.CRITICAL:
        return "it is marked critical (custody status ... normal lifts it)"
    return f"a critical version depends on it (see custody impact {row.ref})"


def _by_retention(
    session: Session,
    retention: Mapping[AssetKey, Retention],
    now: datetime,
    protected: set[int],
    reading: Mapping[int, Attempt],
    report: PurgeReport,
) -> list[Candidate]:
    candidates = []
    for key, rules in sorted(retention.items()):
        rows = list(session.exec(select(VersionRow).where(VersionRow.asset_key == str(key))))
        for row, reason in expired(rows, rules, now):
            if row.stored_id in protected:
                report.kept_protected.append(row.ref)
            elif row.stored_id in reading:
                report.kept_in_use.append(f"{row.ref}: {_in_use(reading[row.stored_id])}")
            else:
                candidates.append(Candidate(row.ref, row.stored_id, reason, row.bytes))
    return candidates


def _finish(
    catalog: Catalog, lake: Lake, version_id: int, reason: str, actor: str, progress: Progress, assurance: str | None
) -> None:
    with catalog.session() as session:
        row = _stored(session, version_id)
    progress(f"purging {row.ref}: {reason}")
    # The version is `purging`, no longer committed: its tag is withdrawn, and a purge that cannot
    # withdraw it stops here, before any file a tag names is gone. No commit of the asset can tag
    # it again until its files are deleted.
    withdrawing = (
        lake.tables.withdrawing(catalog, lake, AssetKey.parse(row.asset_key)) if lake.tables else nullcontext()
    )
    with withdrawing:
        for path in (row.path, row.quarantine_path):
            if path:
                lake.delete(lake.at(path), row.ref)
    with catalog.session() as session:
        row = _stored(session, version_id)
        if row.status != VersionStatus.PURGING:  # another purge finished it meanwhile
            return
        row.status, row.purged_at = VersionStatus.PURGED.value, utcnow()
        session.add(row)
        ledger.append(
            session,
            actor=actor,
            action=ledger.Action.VERSION_PURGED,
            asset=row.asset_key,
            version=row.number,
            assurance=assurance,
            details={
                "reason": reason,
                "bytes": row.bytes,
                "rows": row.rows,
                "path": row.path,
                "quarantine_path": row.quarantine_path,
                "data_version": row.data_version,
            },
        )
