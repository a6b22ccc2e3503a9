"""After collection: merge each ended hour's archives, and drop each complete hour for ingestion.

Any replica may run it, at any time and as often as it likes: consolidation and the drop are both
idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from governance.catalog import Catalog
from governance.feeds.consolidate import Consolidated, consolidate
from governance.feeds.hours import SETTLE, DroppedHour, drop_complete_hours
from governance.feeds.names import feed_id, hour_of
from governance.feeds.store import FeedStore
from governance.spec import Spec
from governance.zones import Lake


@dataclass(frozen=True)
class Tended:
    consolidated: tuple[Consolidated, ...]
    dropped: tuple[DroppedHour, ...]


def tend(store: FeedStore, specs: Iterable[Spec], work: Path, now: datetime, *, lake: Lake | None = None,
         catalog: Catalog | None = None, settle: timedelta = SETTLE) -> Tended:
    """Consolidate every ended hour with more than one archive; with a lake and catalog, drop the
    complete hours as batches."""
    merged, dropped = [], []
    work.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        feed = feed_id(spec.key)
        for hour in store.hours(feed):
            if hour < hour_of(now) and len(store.archives(feed, hour)) > 1:
                merged.append(consolidate(store, feed, hour, work))
        if lake is not None and catalog is not None:
            dropped += drop_complete_hours(store, lake, catalog, spec, now, settle)
    return Tended(tuple(merged), tuple(dropped))
