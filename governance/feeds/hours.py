"""Complete hours into the DropZone: each becomes a ready batch of the feed's landing asset.

An hour is complete once it has passed by the settling time and its archives are consolidated into
one. Its batch is `<yyyy-mm-ddThh>_<archive hash>`, labelled with the hour and asserted for the
feed's producer; an archive that arrives late merges into a new archive, so the hour comes again as
a new batch, and a new version, never as a change to the one ingested.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from governance.batches import BATCH_META, PRODUCED_FOLDER, READY_MARKER, mark_ready, ready_batches, write_produced
from governance.catalog import Catalog
from governance.errors import InvalidInput, NotFound
from governance.feeds.archive import downloads, read_limit
from governance.feeds.names import HOUR, feed_id, hour_label
from governance.feeds.store import FeedStore, Stored
from governance.locks import private_folder, remove_abandoned
from governance.spec import Feed, Spec
from governance.zones import AssetKey, Lake, Zone

SETTLE = timedelta(minutes=5)
# A drop's private folder in the DropZone: hidden, so it never looks like a batch.
DROPPING = ".feed-drop-"


@dataclass(frozen=True)
class DroppedHour:
    feed: str
    hour: datetime
    batch_id: str
    files: int


def batch_id_of(hour: datetime, digest: str) -> str:
    return f"{hour_label(hour)}_{digest}"


def drop_hour(
    store: FeedStore,
    lake: Lake,
    spec: Spec,
    hour: datetime,
    stored: list[Stored],
    now: datetime,
    ingested: set[str],
    settle: timedelta = SETTLE,
) -> DroppedHour | None:
    """Drop one hour, given its archives, if it is complete, not before the feed's first hour, and
    its archive was not dropped (or ingested) before. Older batches of the hour still waiting are
    no longer ready: the new one holds all they hold, and landing them after it would make the
    hour's newest version the smaller one."""
    if hour + HOUR + settle > now or hour < spec.declared_feed.first_hour or len(stored) != 1:
        return None
    batch_id = batch_id_of(hour, stored[0].archive.digest)
    if batch_id in ingested or lake.batch_dir(spec.key, batch_id).exists():
        return None
    files = _drop(store, lake, spec, stored[0].key, stored[0].archive.name, hour, batch_id)
    if files is None:
        return None
    for older in ready_batches(lake, spec.key):
        if older != batch_id and older not in ingested and hour_of_batch(older) == hour:
            (lake.batch_dir(spec.key, older) / READY_MARKER).unlink(missing_ok=True)
    return DroppedHour(feed_id(spec.key), hour, batch_id, files)


def _drop(store: FeedStore, lake: Lake, spec: Spec, key: str, name: str, hour: datetime, batch_id: str) -> int | None:
    """Fetch and unpack the archive in a private folder of the DropZone, then move the batch to its
    place whole; None when the archive went meanwhile (it was merged with a late one) or another
    replica dropped it first."""
    with private_folder(lake.drop_dir(spec.key), DROPPING) as folder:
        try:
            local = store.get(key, folder / name)
        except NotFound:
            return None
        staging = folder / "batch"
        staging.mkdir(PRODUCED_FOLDER)
        count, repeats, previous = 0, 0, None
        # Members come in name order, which is time order: a body that repeats the one before
        # is the same answer fetched by two replicas, as each collector skips its own repeats.
        for download, data in downloads(local, name, feed_id(spec.key), hour, read_limit(spec.declared_feed.max_bytes)):
            if download.digest == previous:
                repeats += 1
                continue
            write_produced(staging / download.name, data)
            previous = download.digest
            count += 1
        left_out = f"; {repeats} repeated answer{'' if repeats == 1 else 's'} of replicas left out" if repeats else ""
        meta = {
            "requested_by": spec.declared_feed.requested_by,
            "label": hour_label(hour),
            "note": f"feed {feed_id(spec.key)}, hour {hour_label(hour)}, archive {name}{left_out}",
        }
        write_produced(staging / BATCH_META, yaml.safe_dump(meta, sort_keys=True).encode())
        mark_ready(staging)
        try:
            os.rename(staging, lake.batch_dir(spec.key, batch_id))
        except OSError:
            if lake.batch_dir(spec.key, batch_id).exists():
                return None
            raise
        # Moved into place, the folder changed after its mark: marked again, as it stands. Marked
        # before too, so that a process killed in between leaves a batch whose refusal says so.
        mark_ready(lake.batch_dir(spec.key, batch_id))
        return count


def remove_abandoned_drops(lake: Lake, keys: Iterable[AssetKey] | None = None) -> list[Path]:
    """The private folders of drops whose process was killed, removed from the DropZones of `keys`
    (default: every asset's)."""
    folders = [lake.drop_dir(key) for key in keys] if keys is not None else (lake.root / Zone.DROP.value).glob("*/*")
    return [removed for folder in folders for removed in remove_abandoned(folder, DROPPING)]


def hour_of_batch(batch_id: str) -> datetime | None:
    """The hour a feed's batch holds, read from its id; None for a batch a producer named otherwise."""
    try:
        return datetime.strptime(batch_id.split("_", 1)[0], "%Y-%m-%dT%H").replace(tzinfo=UTC)
    except ValueError:
        return None


def ready_batch_for(lake: Lake, catalog: Catalog, spec: Spec, hour: datetime) -> str:
    """The newest ready batch of the hour not ingested yet: a late archive's batch comes after the first."""
    ingested = catalog.ingested_batch_ids(spec.key)
    ready = [b for b in ready_batches(lake, spec.key) if b not in ingested and hour_of_batch(b) == hour]
    if not ready:
        raise NotFound(
            f"no ready batch of {spec.key} for the hour {hour_label(hour)}: an hour is dropped "
            f"{int(SETTLE.total_seconds() // 60)} minutes after it ends, once its archives are merged "
            "(custody feeds status, custody feeds consolidate)"
        )
    return ready[-1]


def batch_to_ingest(lake: Lake, catalog: Catalog, key: AssetKey, feed: Feed, named: str | None) -> tuple[str, datetime]:
    """The batch `custody ingest` lands for the feed of `key`, and the hour (the partition) it lands
    in: the one named, else the newest ready batch of the earliest hour not ingested yet."""
    if named is not None:
        hour = _hour_in_feed(feed, named)
        if hour is None:
            raise InvalidInput(
                f"batch {named!r} of {key} holds no hour of the feed since {feed.start}: "
                "a feed's batches are named <yyyy-mm-ddThh>_<hash>"
            )
        return named, hour
    ingested = catalog.ingested_batch_ids(key)
    # Of two ready batches of one hour the newer holds all the older holds: a partition's run takes it too.
    waiting = [
        (hour, -index, batch)
        for index, batch in enumerate(ready_batches(lake, key))
        if batch not in ingested and (hour := _hour_in_feed(feed, batch)) is not None
    ]
    if not waiting:
        raise NotFound(f"no ready batch of an hour to ingest for {key} in {lake.drop_dir(key)}")
    hour, _, batch = min(waiting)
    return batch, hour


def _hour_in_feed(feed: Feed, batch_id: str) -> datetime | None:
    hour = hour_of_batch(batch_id)
    return hour if hour is not None and hour >= feed.first_hour else None
