"""Complete hours into the DropZone: each becomes a ready batch of the feed's landing asset.

An hour is complete once it has passed by the settling time and its archives are consolidated into
one. Its batch is `<yyyy-mm-ddThh>_<archive hash>`, labelled with the hour and asserted for the
feed's producer; an archive that arrives late merges into a new archive, so the hour comes again as
a new batch, and a new version, never as a change to the one ingested.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from governance.batches import BATCH_META, READY_MARKER
from governance.catalog import Catalog
from governance.errors import NotFound
from governance.feeds.archive import downloads
from governance.feeds.names import HOUR, feed_id, hour_label
from governance.feeds.store import FeedStore
from governance.spec import Spec
from governance.zones import Lake

SETTLE = timedelta(minutes=5)


@dataclass(frozen=True)
class DroppedHour:
    feed: str
    hour: datetime
    batch_id: str
    files: int


def batch_id_of(hour: datetime, digest: str) -> str:
    return f"{hour_label(hour)}_{digest}"


def drop_complete_hours(store: FeedStore, lake: Lake, catalog: Catalog, spec: Spec, now: datetime,
                        settle: timedelta = SETTLE) -> list[DroppedHour]:
    """Drop every complete hour of the feed not dropped before; hours still being merged wait."""
    feed = feed_id(spec.key)
    ingested = catalog.ingested_batch_ids(spec.key)
    dropped = []
    for hour in store.hours(feed):
        if hour + HOUR + settle > now:
            continue
        stored = store.archives(feed, hour)
        if len(stored) != 1:
            continue
        batch_id = batch_id_of(hour, stored[0].archive.digest)
        if batch_id in ingested or lake.batch_dir(spec.key, batch_id).exists():
            continue
        files = _drop(store, lake, spec, stored[0].key, stored[0].archive.name, hour, batch_id)
        if files is not None:
            dropped.append(DroppedHour(feed, hour, batch_id, files))
    return dropped


def _drop(store: FeedStore, lake: Lake, spec: Spec, key: str, name: str, hour: datetime, batch_id: str) -> int | None:
    """Unpack the archive beside the DropZone batch's place, then move it there whole; None when the
    archive went meanwhile (it was merged with a late one) or another replica dropped it first."""
    drop = lake.drop_dir(spec.key)
    drop.mkdir(parents=True, exist_ok=True)
    staging = drop / f".{batch_id}.{uuid.uuid4().hex}.partial"
    staging.mkdir()
    try:
        with tempfile.TemporaryDirectory(prefix="feed-drop-", dir=drop) as folder:
            local = store.get(key, Path(folder) / name)
            count = 0
            for download, data in downloads(local, name, feed_id(spec.key), hour):
                (staging / download.name).write_bytes(data)
                count += 1
        meta = {"requested_by": spec.feed.requested_by, "label": hour_label(hour),
                "note": f"feed {feed_id(spec.key)}, hour {hour_label(hour)}, archive {name}"}
        (staging / BATCH_META).write_text(yaml.safe_dump(meta, sort_keys=True), encoding="utf-8")
        (staging / READY_MARKER).touch()
        os.rename(staging, lake.batch_dir(spec.key, batch_id))
        return count
    except NotFound:
        return None
    except OSError:
        if lake.batch_dir(spec.key, batch_id).exists():
            return None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
