"""Python's collector, held back while work builds many objects it keeps.

A definitions build allocates hundreds of thousands of lists, tuples and dicts that live until it
returns. At Python's default pace the collector walks them again and again as they age, and each
full collection walks every object the process holds. While any such work runs, the youngest
generation is collected once per `FEW_COLLECTIONS` allocations instead of 700.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

FEW_COLLECTIONS = 100_000


class _Holds:
    """How many blocks hold the collector back, and its thresholds from before the first."""

    def __init__(self) -> None:
        # Reentrant: a collection may run while the lock is held, and finalize something that enters.
        self.lock = threading.RLock()
        self.count = 0
        self.saved = gc.get_threshold()


_holds = _Holds()


@contextmanager
def few_collections() -> Iterator[bool]:
    """Collect seldom while the block runs; gives whether it is the outermost such block. The
    thresholds belong to the process: blocks on other threads or nested ones share the setting,
    and the last to leave restores what the first found."""
    with _holds.lock:
        outermost = _holds.count == 0
        if outermost:
            _holds.saved = gc.get_threshold()
            gc.set_threshold(FEW_COLLECTIONS, *_holds.saved[1:])
        _holds.count += 1
    try:
        yield outermost
    finally:
        with _holds.lock:
            _holds.count -= 1
            if _holds.count == 0:
                gc.set_threshold(*_holds.saved)
