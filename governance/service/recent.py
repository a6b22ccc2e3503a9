"""Answers the service gives every signed-in user alike (the catalog, a version's lineage), kept for
a moment: under load, one computation answers every request that asks for the same within it. An
answer is at most that old (CUSTODY_SERVICE_CACHE_SECONDS, 2 by default; 0 keeps none)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping

from governance.config import env_amount

SECONDS_VARIABLE = "CUSTODY_SERVICE_CACHE_SECONDS"
DEFAULT_SECONDS = 2.0
# The most answers kept at once: a lineage answer can weigh megabytes.
MOST = 256


class Recent:
    def __init__(self, seconds: float = DEFAULT_SECONDS):
        self.seconds = seconds
        self._kept: dict[Hashable, tuple[float, bytes]] = {}
        self._computing: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Recent:
        seconds = env_amount(environ, SECONDS_VARIABLE, "seconds")
        return cls(DEFAULT_SECONDS if seconds is None else seconds)

    def fresh(self, key: Hashable) -> bytes | None:
        """The answer kept for `key` if it is still fresh, without waiting for anything."""
        kept = self._kept.get(key)
        return kept[1] if kept is not None and time.monotonic() < kept[0] else None

    def answer(self, key: Hashable, compute: Callable[[], bytes]) -> bytes:
        """The answer kept for `key`, or `compute`'s, kept. Requests that ask for the same at once
        wait for one computation."""
        if self.seconds <= 0:
            return compute()
        with self._lock:
            computing = self._computing.setdefault(key, threading.Lock())
        with computing:
            kept = self._kept.get(key)
            if kept is not None and time.monotonic() < kept[0]:
                return kept[1]
            data = compute()
            with self._lock:
                self._make_room(time.monotonic())
                self._kept[key] = (time.monotonic() + self.seconds, data)
            return data

    def _make_room(self, now: float) -> None:
        """Drop what expired; past MOST answers, the oldest too."""
        expired = [key for key, (until, _) in self._kept.items() if until <= now]
        for key in expired:
            del self._kept[key]
        while len(self._kept) >= MOST:
            del self._kept[next(iter(self._kept))]
        for key in [key for key in self._computing if key not in self._kept and not self._computing[key].locked()]:
            del self._computing[key]
