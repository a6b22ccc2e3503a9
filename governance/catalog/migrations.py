"""Data migrations a catalog made by an earlier release goes through once, when it is opened.

- relative-locations: earlier releases kept absolute paths, so a home restored elsewhere looked for
  its files where the original had been, and a copy beside its original read and deleted the
  original's files. Locations are now kept relative to their roots (the lake, the ledger's segments
  folder).
- lineage-hops: lineage walks read each version's next hops from rows of their own, written with
  the edges since; a catalog made before has them built from its edges. Every process that
  writes versions must run this release from then on: an earlier one writes edges only, and walks
  would not reach the versions it adds.
- session-digests: a session's or token's row was keyed by its id, which anyone who could read the
  catalog and held the service's key could sign into a cookie. Rows are now keyed by the id's
  SHA-256; the rows of sessions opened before are keyed so too, and their cookies still work.
- foreign-runs-told: a foreign run's row now keeps its job's digest (to find a job's runs), its
  error message and its parent run; the runs recorded before get them from their events as kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import PurePosixPath

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import IntegrityError

RELATIVE_LOCATIONS = "relative-locations"
LINEAGE_HOPS = "lineage-hops"
SESSION_DIGESTS = "session-digests"
FOREIGN_RUNS_TOLD = "foreign-runs-told"

# A version's folders follow the lake's layout, so their relative form needs only the row itself.
VERSION_FOLDERS = """
UPDATE version SET path = zone || '/' || asset_key || '/v=' || CAST(number AS TEXT) WHERE path LIKE '/%'
"""
QUARANTINE_FOLDERS = """
UPDATE version SET quarantine_path = 'quarantine/' || asset_key || '/v=' || CAST(number AS TEXT)
WHERE quarantine_path LIKE '/%'
"""
TOLD_RUN = """
UPDATE foreign_run SET job_ident = :job_ident, error = :error, parent_run_id = :parent_run_id,
parent_job_namespace = :parent_job_namespace, parent_job_name = :parent_job_name
WHERE run_id = :run_id AND job_ident IS NULL
"""
PARENTLESS = {"error": None, "parent_run_id": None, "parent_job_namespace": None, "parent_job_name": None}
ABSOLUTE_SOURCES = """
SELECT source_file.id, source_file.path, batch.asset_key FROM source_file
JOIN batch ON batch.id = source_file.batch_pk WHERE source_file.path LIKE '/%'
"""


def migrate(engine: Engine) -> None:
    """Apply the migrations this catalog has not been through, in order; two processes may race,
    and the second finds the work done."""
    for name, apply in MIGRATIONS:
        _once(engine, name, apply)


def _once(engine: Engine, name: str, apply: Callable[[Connection], None]) -> None:
    with engine.connect() as connection:
        done = connection.execute(text("SELECT 1 FROM catalog_migration WHERE name = :name"), {"name": name}).first()
    if done:
        return
    try:
        with engine.begin() as connection:
            apply(connection)
            connection.execute(
                text("INSERT INTO catalog_migration (name, applied_at) VALUES (:name, :at)"),
                {"name": name, "at": datetime.now(UTC)},
            )
    except IntegrityError:
        return  # another process recorded the same migration first; its updates are the same


def _relative_locations(connection: Connection) -> None:
    connection.execute(text(VERSION_FOLDERS))
    connection.execute(text(QUARANTINE_FOLDERS))
    sources = [
        {"id": row_id, "path": relative}
        for row_id, path, asset_key in connection.execute(text(ABSOLUTE_SOURCES))
        if (relative := in_drop_zone(path, asset_key)) is not None
    ]
    if sources:
        connection.execute(text("UPDATE source_file SET path = :path WHERE id = :id"), sources)
    segments = [
        {"old": path, "name": PurePosixPath(path).name}
        for (path,) in connection.execute(text("SELECT path FROM ledger_segment WHERE path LIKE '/%'"))
    ]
    if segments:
        connection.execute(text("UPDATE ledger_segment SET path = :name WHERE path = :old"), segments)


def in_drop_zone(path: str, asset_key: str) -> str | None:
    """`path` from the DropZone of `asset_key` on (`drop/sales/clients/<batch>/<file>`), or None
    for a file that was never in the lake's DropZone."""
    parts = PurePosixPath(path).parts
    zone = ("drop", *asset_key.split("/"))
    for start in range(len(parts) - len(zone), 0, -1):
        if parts[start : start + len(zone)] == zone:
            return "/".join(parts[start:])
    return None


def _lineage_hops(connection: Connection) -> None:
    # Imported here: the hops' arrays need numpy, which a command that only opens the catalog never loads.
    from governance.catalog.hops import build_from_edges

    build_from_edges(connection)


def _session_digests(connection: Connection) -> None:
    keyed = [
        {"id": row_id, "key": hashlib.sha256(row_id.encode()).hexdigest()}
        for (row_id,) in connection.execute(text("SELECT id FROM service_session"))
    ]
    if keyed:
        connection.execute(text("UPDATE service_session SET id = :key WHERE id = :id"), keyed)


def _foreign_runs_told(connection: Connection) -> None:
    # Imported here: the join's module loads what only lineage's intake needs.
    from governance.foreign.datasets import ident
    from governance.foreign.join import error_message, parent_of

    told: dict[str, dict[str, str | None]] = {}
    events = text("SELECT run_id, body FROM foreign_event ORDER BY id").execution_options(yield_per=1_000)
    for run_id, body in connection.execute(events):
        facets = (json.loads(body).get("run") or {}).get("facets") or {}
        run = told.setdefault(run_id, {"error": None, "parent_run_id": None})
        run["error"] = run["error"] or error_message(facets)
        if run["parent_run_id"] is None:
            run.update(zip(("parent_run_id", "parent_job_namespace", "parent_job_name"), parent_of(facets, run_id)))
    rows = [
        {"run_id": run_id, "job_ident": ident(namespace, name), **PARENTLESS, **told.get(run_id, {})}
        for run_id, namespace, name in connection.execute(
            text("SELECT run_id, job_namespace, job_name FROM foreign_run")
        )
    ]
    if rows:
        connection.execute(text(TOLD_RUN), rows)


MIGRATIONS: tuple[tuple[str, Callable[[Connection], None]], ...] = (
    (RELATIVE_LOCATIONS, _relative_locations),
    (LINEAGE_HOPS, _lineage_hops),
    (SESSION_DIGESTS, _session_digests),
    (FOREIGN_RUNS_TOLD, _foreign_runs_told),
)
