"""Data migrations a catalog made by an earlier release goes through once, when it is opened.

Earlier releases kept absolute paths: a home restored elsewhere then looked for its files where the
original had been, and a copy beside its original read and deleted the original's files. Locations
are now kept relative to their roots (the lake, the ledger's segments folder).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import PurePosixPath

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import IntegrityError

RELATIVE_LOCATIONS = "relative-locations"

# A version's folders follow the lake's layout, so their relative form needs only the row itself.
VERSION_FOLDERS = """
UPDATE version SET path = zone || '/' || asset_key || '/v=' || CAST(number AS TEXT) WHERE path LIKE '/%'
"""
QUARANTINE_FOLDERS = """
UPDATE version SET quarantine_path = 'quarantine/' || asset_key || '/v=' || CAST(number AS TEXT)
WHERE quarantine_path LIKE '/%'
"""
ABSOLUTE_SOURCES = """
SELECT source_file.id, source_file.path, batch.asset_key FROM source_file
JOIN batch ON batch.id = source_file.batch_pk WHERE source_file.path LIKE '/%'
"""


def migrate(engine: Engine) -> None:
    """Apply the migrations this catalog has not been through; two processes may race, and the
    second finds the work done."""
    with engine.connect() as connection:
        done = connection.execute(
            text("SELECT 1 FROM catalog_migration WHERE name = :name"), {"name": RELATIVE_LOCATIONS}
        ).first()
    if done:
        return
    try:
        with engine.begin() as connection:
            _relative_locations(connection)
            connection.execute(
                text("INSERT INTO catalog_migration (name, applied_at) VALUES (:name, :at)"),
                {"name": RELATIVE_LOCATIONS, "at": datetime.now(UTC)},
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
