"""Replicas in one feed store: each name held by one running collector, each clock near the store's.

A collector writes `_replicas/<name>.json` when it starts and every beat after. Another collector
that finds the name's record written less than three beats ago by the store's clock refuses to
start, unless that record names a process of this host that is gone: its pid runs no more, or runs a
process started since (a collector restarted at once after a `kill -9`). The same first write tells
the collector how far its clock is from the store's, by the time the store gives the record: a
replica files downloads under the hour of its own clock, so one whose clock is off by more than
`max_skew` refuses to start.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from governance.errors import EnvironmentProblem
from governance.feeds.store import FeedStore

BEAT = timedelta(seconds=10)
MAX_SKEW = timedelta(seconds=60)
PROC = Path("/proc")
# Fields of /proc/<pid>/stat after the command's closing parenthesis: its state, and when it started.
STATE, START_TICKS = 0, 19


@dataclass(frozen=True)
class Lease:
    replica: str
    instance: str
    host: str
    pid: int
    # Where the pid is meaningful (the boot and the pid namespace), and when its process started:
    # a pid reused later, or in another container of the host, does not match both.
    pid_space: str | None = None
    pid_started: str | None = None


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
        if held.get("instance") != lease.instance and live and not held_by_gone_process(held, lease):
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
        "pid_space": lease.pid_space,
        "pid_started": lease.pid_started,
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
    pid = os.getpid()
    return Lease(replica, instance, socket.gethostname(), pid, pid_space(), process_started(pid))


def held_by_gone_process(held: dict, lease: Lease) -> bool:
    """True when `held`, a replica's record, names a process where `lease` runs, whose pid no longer
    runs it. A record of another host or pid space, or without them, cannot be judged from here."""
    if lease.pid_space is None or (held.get("host"), held.get("pid_space")) != (lease.host, lease.pid_space):
        return False
    started = process_started(int(held.get("pid") or 0))
    return started is None or started != held.get("pid_started")


def pid_space() -> str | None:
    """The boot and pid namespace of this process; None where /proc does not say (not Linux)."""
    try:
        boot = (PROC / "sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink(PROC / 'self/ns/pid')}"
    except OSError:
        return None


def process_started(pid: int) -> str | None:
    """When the process `pid` started, in clock ticks since boot; None when none runs (a zombie,
    killed but not yet reaped, runs no more)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return None if fields[STATE] in ("Z", "X") else fields[START_TICKS]
