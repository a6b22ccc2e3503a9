"""After collection: merge each ended hour's archives, and drop each complete hour for ingestion.

Any replica may run it, at any time and as often as it likes: consolidation and the drop are both
idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from governance import ledger
from governance.catalog import Catalog
from governance.errors import bounded_reason
from governance.feeds.archive import ArchiveProblem, read_limit
from governance.feeds.consolidate import Consolidated, consolidate, remove_abandoned_merges
from governance.feeds.hours import SETTLE, DroppedHour, drop_hour, remove_abandoned_drops
from governance.feeds.names import feed_id, hour_of
from governance.feeds.store import FeedStore
from governance.spec import Spec
from governance.zones import AssetKey, Lake


@dataclass(frozen=True)
class Refused:
    """An hour left as it is: one of its archives is not what it must be."""

    feed: str
    hour: datetime
    reason: str


@dataclass(frozen=True)
class Tended:
    consolidated: tuple[Consolidated, ...]
    dropped: tuple[DroppedHour, ...]
    refused: tuple[Refused, ...] = ()
    removed: tuple[Path, ...] = ()


def tend(
    store: FeedStore,
    specs: Iterable[Spec],
    work: Path,
    now: datetime,
    *,
    lake: Lake | None = None,
    catalog: Catalog | None = None,
    settle: timedelta = SETTLE,
) -> Tended:
    """Consolidate every ended hour with more than one archive; with a lake and catalog, drop the
    complete hours as batches. An hour with a bad archive is refused and the others go on. First,
    what merges and drops killed mid-way left is removed."""
    merged, dropped, refused = [], [], []
    specs = list(specs)
    removed = remove_abandoned_work(work, lake, [spec.key for spec in specs])
    for spec in specs:
        feed = feed_id(spec.key)
        ingested = catalog.ingested_batch_ids(spec.key) if catalog is not None else set()
        for hour, stored in store.index(feed).items():
            try:
                if hour < hour_of(now) and len(stored) > 1:
                    done = consolidate(store, feed, hour, work, read_limit(spec.declared_feed.max_bytes))
                    merged.append(done)
                    stored = [done.archive] if done.archive else []
                if lake is not None and catalog is not None:
                    landed = drop_hour(store, lake, spec, hour, stored, now, ingested, settle)
                    dropped += [landed] if landed else []
            except ArchiveProblem as err:
                refused.append(Refused(feed, hour, str(err)))
    return Tended(tuple(merged), tuple(dropped), tuple(refused), tuple(removed))


def remove_abandoned_work(work: Path, lake: Lake | None, keys: Iterable[AssetKey] | None = None) -> list[Path]:
    """The private folders of merges in `work`, and of drops in the DropZones of `keys` (default:
    every asset's), whose process was killed, removed; those of live processes are left to them."""
    return remove_abandoned_merges(work) + (remove_abandoned_drops(lake, keys) if lake is not None else [])


def record_refusal(catalog: Catalog, actor: str, reason: str, **details: str) -> None:
    """A refusal to the ledger: a collector that may not start, an hour left as it is."""
    with catalog.session() as session:
        ledger.append(
            session,
            actor=actor,
            action=ledger.Action.FEED_REFUSED,
            details={"reason": bounded_reason(reason), **details},
        )
