"""Thread pools a process keeps. Starting a thread waits for the system to schedule it: a millisecond
or more while Spark keeps the cores busy, which a run would pay for each thread of each pool it made."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

_pools: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def kept(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool `name`, of up to `workers` threads: each is started when a task finds no
    idle one, and stays. Whoever submits waits for their own tasks (`settled`); no one shuts it down."""
    with _lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"custody-{name}")
        return pool


def settled(futures: Iterable[Future | None]) -> None:
    """Wait until `futures` are done, whether they returned or raised: what leaving the `with` block
    of a pool of one's own waits for."""
    wait([future for future in futures if future is not None])


def _forget() -> None:
    """A forked child has none of its parent's threads: it starts pools of its own."""
    global _lock
    _lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget)
