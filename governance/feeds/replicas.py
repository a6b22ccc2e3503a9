"""Replicas in one feed store: each name held by one running collector, each clock near the store's.

A collector writes `_replicas/<name>.json` when it starts and every beat after. Another collector
that finds the name's record written less than three beats ago by the store's clock refuses to
start. The same first write tells the collector how far its clock is from the store's, by the time
the store gives the record: a replica files downloads under the hour of its own clock, so one whose
clock is off by more than `max_skew` refuses to start.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from governance.errors import EnvironmentProblem
from governance.feeds.store import FeedStore

BEAT = timedelta(seconds=10)
MAX_SKEW = timedelta(seconds=60)


@dataclass(frozen=True)
class Lease:
    replica: str
    instance: str
    host: str
    pid: int


def record_key(replica: str) -> str:
    return f"_replicas/{replica}.json"


def claim(store: FeedStore, lease: Lease, now: datetime, status: dict, max_skew: timedelta = MAX_SKEW) -> timedelta:
    """Take the replica's name in the store; returns this clock's skew from the store's."""
    before = store.read_text(record_key(lease.replica))
    probe = f"_replicas/.probe-{lease.instance}"
    store.write_text(probe, "{}")
    probed = store.read_text(probe)
    if probed is None:
        raise EnvironmentProblem(f"the feed store lost {probe} as soon as it was written")
    _, store_now = probed
    store.delete(f"{store.root}/{probe}")
    skew = now - store_now
    if abs(skew) > max_skew:
        raise EnvironmentProblem(
            f"replica {lease.replica}: this clock is {skew.total_seconds():+.0f}s from the feed store's, more than "
            f"the {max_skew.total_seconds():.0f}s allowed; downloads would be filed under the wrong hour: set the clock (NTP)"
        )
    if before is not None:
        held = json.loads(before[0])
        live = not held.get("stopped") and store_now - before[1] < 3 * BEAT
        if held.get("instance") != lease.instance and live:
            raise EnvironmentProblem(
                f"replica {lease.replica} is already collecting (on {held.get('host')}, pid {held.get('pid')}); "
                "give each collector its own --replica name"
            )
    beat(store, lease, now, status)
    return skew


def beat(store: FeedStore, lease: Lease, now: datetime, status: dict, *, stopped: bool = False) -> None:
    """Write the replica's record: who holds the name, and each feed's counts; `stopped` frees the name."""
    record = {
        "replica": lease.replica,
        "instance": lease.instance,
        "host": lease.host,
        "pid": lease.pid,
        "written_at": now.isoformat(),
        "stopped": stopped,
        "feeds": status,
    }
    store.write_text(record_key(lease.replica), json.dumps(record, sort_keys=True))


def replicas(store: FeedStore, now: datetime) -> list[dict]:
    """Every replica's last record, with `seen` (the store's time of it) and `running`: not stopped,
    and written within three beats (a collector killed, or whose host went, stops writing)."""
    found = []
    for entry in store.fs.glob(f"{store.root}/_replicas/*.json"):
        name = entry.rsplit("/", 1)[-1].removesuffix(".json")
        read = store.read_text(record_key(name))
        if read:
            record = json.loads(read[0])
            running = not record.get("stopped") and now - read[1] < 3 * BEAT
            found.append({**record, "seen": read[1].isoformat(), "running": running})
    return found


def new_lease(replica: str, instance: str) -> Lease:
    return Lease(replica, instance, socket.gethostname(), os.getpid())
