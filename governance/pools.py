"""Thread pools a process keeps. Starting a thread waits for the system to schedule it: a millisecond
or more while Spark keeps the cores busy, which a run would pay for each thread of each pool it made.

A task must not wait for another task of its own pool: the pool is shared, and every thread might be
taken by tasks that wait."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def kept(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool `name` of up to `workers` threads: each is started when a task finds no
    idle one, and stays. Whoever submits waits for their own tasks (`settled`); no one shuts it down."""
    with _lock:
        pool = _pools.get((name, workers))
        if pool is None:
            pool = _pools[name, workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"custody-{name}")
        return pool


def settled(futures: Iterable[Future | None]) -> None:
    """Cancel those of `futures` not started yet and wait until the others are done, whether they
    returned or raised: as leaving the `with` block of a pool of one's own after an error would,
    without waiting for what other callers queued. After their results were taken, it waits for none."""
    found = [future for future in futures if future is not None]
    for future in found:
        future.cancel()
    wait(found)


def _forget() -> None:
    """A forked child has none of its parent's threads: it starts pools of its own."""
    global _lock
    _lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget)
