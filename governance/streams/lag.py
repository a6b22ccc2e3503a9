"""How far behind its topic each streamed asset is, and whether its landing is due: once
`land_after` records wait, or `land_every` has passed since its last version while any wait."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from governance.catalog import Catalog
from governance.catalog.api import offsets_landed
from governance.spec import Spec
from governance.streams.broker import KafkaAdmin
from governance.zones import AssetKey


@dataclass(frozen=True)
class Lag:
    """The records of an asset's topic no version holds yet, and since when it last landed."""

    key: AssetKey
    topic: str
    waiting: int
    # The topic's end now, by partition: what a landing started now would read up to.
    ends: tuple[tuple[int, int], ...]
    last_landed: datetime | None
    due: bool
    why: str


def lags(catalog: Catalog, admin: KafkaAdmin, specs: Iterable[Spec], now: datetime) -> list[Lag]:
    """Each streamed spec's lag behind its topic (a topic not created yet is left out)."""
    found = []
    for spec in specs:
        source, topic = spec.stream_source, spec.topic
        if source is None or topic is None:
            continue
        state = admin.topic(topic)
        if state is None:
            continue
        marks = admin.watermarks(topic, state.partitions)
        with catalog.reading() as session:
            landed = offsets_landed(session, spec.key, topic)
        newest = catalog.newest_committed(spec.key)
        waiting = sum(high - max(landed.get(partition, low), low) for partition, (low, high) in marks.items())
        last = newest.created_at if newest is not None else None
        ends = tuple(sorted((partition, high) for partition, (_, high) in marks.items()))
        found.append(_judged(spec, topic, waiting, ends, last, now))
    return found


def _judged(
    spec: Spec, topic: str, waiting: int, ends: tuple[tuple[int, int], ...], last: datetime | None, now: datetime
) -> Lag:
    source = spec.stream_source
    assert source is not None  # only streamed specs come here
    passed = last is None or (now - _aware(last, now)).total_seconds() >= source.period
    if waiting <= 0:
        due, why = False, "no record waits"
    elif waiting >= source.land_after:
        due, why = True, f"{waiting} records wait (land_after {source.land_after})"
    else:
        due, why = passed, f"{waiting} records wait; land_every {source.land_every} {'' if passed else 'not '}passed"
    return Lag(spec.key, topic, waiting, ends, last, due, why)


def _aware(moment: datetime, like: datetime) -> datetime:
    """`moment` as `like` keeps time: the catalog may give its times without their zone (UTC)."""
    if moment.tzinfo is None and like.tzinfo is not None:
        return moment.replace(tzinfo=like.tzinfo)
    return moment
