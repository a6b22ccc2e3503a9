"""Reconcile the lake with the catalog after a crash: interrupted attempts are rolled back whole."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from sqlmodel import select

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.hops import build_from_edges, missing
from governance.catalog.models import Attempt, VersionRow
from governance.catalog.states import VersionStatus
from governance.retention.purge import finish_interrupted
from governance.runs import Assurance
from governance.versions import file_problem
from governance.zones import AssetKey, Lake, Zone

PUBLISHED_ZONES = (Zone.LANDING, Zone.INTEGRATION, Zone.QUARANTINE)
# How an attempt whose staged files are not a version ends; "committed" keeps them as its version.
ENDED_WITHOUT_VERSION = ("failed", "aborted", "unchanged")


@dataclass
class RepairReport:
    rolled_back: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    # Table snapshots made or withdrawn to agree with the catalog, and tables that could not be.
    tables: list[str] = field(default_factory=list)
    table_problems: list[str] = field(default_factory=list)
    # The lineage walks' next hops, built again where they disagreed with the lineage edges.
    lineage: list[str] = field(default_factory=list)
    # Versions whose purge was stopped before its end, finished.
    purged: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.rolled_back
            or self.removed
            or self.damaged
            or self.tables
            or self.table_problems
            or self.lineage
            or self.purged
        )


def repair(
    catalog: Catalog, lake: Lake, *, actor: str = "system", thorough: bool = False, verify_files: bool = False
) -> RepairReport:
    """Roll back attempts whose process is gone and remove the folders no committed version owns.

    Only an attempt publishes `v=N` folders, after its row exists, so by default only the assets of
    abandoned attempts are looked at: cheap enough to run before every ingestion. `thorough` sweeps
    every asset folder of the lake, finishes the purges that were stopped before their end, aligns
    every table snapshot with the catalog and the lineage walks' next hops with the lineage edges,
    and `verify_files` re-hashes every committed version.
    """
    report = RepairReport()
    running = {a.id: a for a in catalog.running_attempts()}
    live = {attempt_id for attempt_id in running if not lake.stage(attempt_id).is_abandoned()}
    if thorough:
        keys = _all_asset_keys(lake)
    else:
        keys = sorted({AssetKey.parse(a.asset_key) for attempt_id, a in running.items() if attempt_id not in live})
    # Settled first, each only if it is still running: a commit that lands meanwhile keeps its
    # version, whose files the sweep below then leaves alone.
    rolled = {
        attempt_id
        for attempt_id, attempt in running.items()
        if attempt_id not in live and _roll_back(catalog, attempt, actor)
    }
    report.rolled_back.extend(f"{running[attempt_id].asset_key} attempt {attempt_id}" for attempt_id in sorted(rolled))
    for folder in _unowned_version_folders(catalog, lake, keys, live):
        shutil.rmtree(folder, ignore_errors=True)
        report.removed.append(str(folder))
    if lake.versions_stay_staged:
        report.removed.extend(_remove_staged_objects(catalog, lake, rolled, thorough))
    else:
        for attempt_id in lake.staging_attempts():
            stage = lake.stage(attempt_id)
            if attempt_id not in live and stage.is_abandoned():
                lake.remove_stage(stage)
    if thorough:
        report.purged.extend(finish_interrupted(catalog, lake, actor))
    if thorough and lake.tables is not None:
        aligned = lake.tables.align_all(catalog, lake)
        report.tables.extend(
            f"{key}: tagged {_listed(done.tagged)}, withdrew {_listed(done.withdrawn)}{_guard(done.guarded)}"
            for key, done in aligned.aligned.items()
            if done.changed
        )
        report.table_problems.extend(f"{key}: {problem}" for key, problem in aligned.failed.items())
    if thorough:
        report.lineage.extend(_aligned_hops(catalog))
    if verify_files:
        report.damaged.extend(damaged_versions(catalog, lake))
    return report


def _aligned_hops(catalog: Catalog) -> list[str]:
    with catalog.session() as session:
        connection = session.connection()
        left_out = missing(connection)
        if not left_out:
            return []
        build_from_edges(connection)
    return [f"next hops built again from the lineage edges, which they disagreed with by {left_out} edge(s)"]


def _remove_staged_objects(catalog: Catalog, lake: Lake, rolled: set[str], thorough: bool) -> list[str]:
    """The staged objects of attempts abandoned on this host; `thorough`, also those of every
    attempt of this catalog that ended without a version (its own clean-up is best effort). An
    attempt this catalog does not know (another home's, or one that started after the statuses were
    read) and one whose lock is on another host are left alone. Without `thorough` the store is not
    listed: the cost stays that of the attempts in progress, however many versions there are."""
    removed = []
    statuses = catalog.attempt_statuses() if thorough else dict.fromkeys(rolled, "aborted")
    for attempt_id in lake.staging_attempts() if thorough else sorted(rolled):
        status, stage = statuses.get(attempt_id), lake.stage(attempt_id)
        if status in ENDED_WITHOUT_VERSION:
            lake.remove_stage(stage)
            removed.append(lake.uri(stage.path))
        elif status == "committed" and stage.is_abandoned():  # killed after its commit: only its lock is left
            stage.lock_file.unlink(missing_ok=True)
        if status == "committed" and thorough and lake.holds_nothing(stage.path):
            # A purged version's: an earlier release's purge left S3A's empty folder markers.
            lake.remove_stage(stage)
            removed.append(lake.uri(stage.path))
    return removed


def _guard(found: dict[str, str | None]) -> str:
    """The guarding properties put back, with what someone had made them."""
    if not found:
        return ""
    changes = ", ".join(
        f"{name} was {value if value is not None else 'removed'}" for name, value in sorted(found.items())
    )
    return f"; put back its guarding properties ({changes})"


def _listed(numbers: list[int]) -> str:
    return ", ".join(f"v{n}" for n in numbers) or "none"


def _all_asset_keys(lake: Lake) -> list[AssetKey]:
    keys = set()
    for zone in PUBLISHED_ZONES:
        zone_root = lake.root / zone.value
        if zone_root.is_dir():
            keys |= {
                AssetKey(domain.name, asset.name)
                for domain in zone_root.iterdir()
                if domain.is_dir()
                for asset in domain.iterdir()
            }
    return sorted(keys)


def _unowned_version_folders(catalog: Catalog, lake: Lake, keys: list[AssetKey], live: set[str]) -> list[Path]:
    """`v=N` folders with no committed version N, unless a live attempt is publishing them."""
    found = []
    for key in keys:
        committed = catalog.committed_numbers(key)
        for zone in PUBLISHED_ZONES:
            for number, folder in sorted(lake.version_dirs(zone, key).items()):
                if number not in committed and (lake.read_manifest(folder) or {}).get("attempt_id") not in live:
                    found.append(folder)
    return found


def _roll_back(catalog: Catalog, attempt: Attempt, actor: str) -> bool:
    """Abort an interrupted attempt, if it is still running; whether it was."""
    with catalog.session() as session:
        if not catalog.finish_attempt(session, attempt.id, "aborted", error="interrupted; rolled back by repair"):
            return False
        ledger.append(
            session,
            actor=actor,
            action=ledger.Action.ATTEMPT_ROLLED_BACK,
            asset=attempt.asset_key,
            run_id=attempt.run_id,
            assurance=Assurance.SYSTEM,
            details={
                "attempt": attempt.id,
                "requested_by": attempt.requested_by,
                "started_at": attempt.started_at.isoformat(),
            },
        )
    return True


def damaged_versions(catalog: Catalog, lake: Lake) -> list[str]:
    """Committed versions whose files are missing or do not match their manifest."""
    with catalog.session() as session:
        rows = list(session.exec(select(VersionRow).where(VersionRow.status == VersionStatus.COMMITTED.value)))
    problems = []
    for row in rows:
        problem = version_problem(lake, lake.at(row.path), row.data_version)
        if problem:
            problems.append(f"{row.ref}: {problem}")
    return problems


def version_problem(lake: Lake, folder: PurePath, data_version: str) -> str | None:
    manifest = lake.read_manifest(folder)
    if manifest is None:
        return f"no readable manifest in {lake.uri(folder)}"
    if manifest.get("data_version") != data_version:
        return "manifest data_version differs from the catalog"
    return next(filter(None, (file_problem(lake, folder, entry) for entry in manifest["files"])), None)
