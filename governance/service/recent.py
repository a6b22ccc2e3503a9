"""Answers the service gives every signed-in user alike (the catalog, a version's lineage), and pages of
the ledger that can no longer change (given each auditor after their request's decision), kept for
a moment: under load, one computation answers every request that asks for the same within it. An
answer is at most that old (CUSTODY_SERVICE_CACHE_SECONDS, 2 by default; 0 keeps none), counted
from the end of its computation. One asked for again past half that time is renewed in the
background, so that an answer asked for all the time is never waited for."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping

from governance.config import env_amount
from governance.errors import CustodyError

SECONDS_VARIABLE = "CUSTODY_SERVICE_CACHE_SECONDS"
DEFAULT_SECONDS = 2.0
# The most answers kept at once: a lineage answer can weigh megabytes.
MOST = 256


class Recent:
    def __init__(self, seconds: float = DEFAULT_SECONDS, most: int = MOST):
        self.seconds, self.most = seconds, most
        self._kept: dict[Hashable, tuple[float, bytes]] = {}
        self._computing: dict[Hashable, threading.Lock] = {}
        # Since when each renewal was claimed: a claim whose renewal never ran lapses after `seconds`.
        self._renewing: dict[Hashable, float] = {}
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
        with self._computing_lock(key):
            kept = self._kept.get(key)
            if kept is not None and time.monotonic() < kept[0]:
                return kept[1]
            data = compute()
            self.keep(key, data)
            return data

    def renewal_due(self, key: Hashable) -> bool:
        """Whether the kept answer for `key` has lived past half its time with nobody renewing it.
        The caller that hears True renews it (`renew`)."""
        kept = self._kept.get(key)
        if kept is None or time.monotonic() < kept[0] - self.seconds / 2:
            return False
        with self._lock:
            now = time.monotonic()
            if now - self._renewing.get(key, -self.seconds) < self.seconds:
                return False
            self._renewing[key] = now
            return True

    def renew(self, key: Hashable, compute: Callable[[], bytes]) -> None:
        """Compute the answer for `key` again and keep it; requests get the kept one meanwhile, and
        those that find it expired wait for this computation."""
        try:
            with self._computing_lock(key):
                self.keep(key, compute())
        except CustodyError:
            # The kept answer expires as it would have: the next request computes it and answers
            # with the reason (a catalog that cannot be reached, say).
            return
        finally:
            with self._lock:
                self._renewing.pop(key, None)

    def _computing_lock(self, key: Hashable) -> threading.Lock:
        with self._lock:
            return self._computing.setdefault(key, threading.Lock())

    def keep(self, key: Hashable, data: bytes) -> None:
        """Keep `data` as the answer for `key`, fresh from now (unless nothing is kept)."""
        if self.seconds <= 0:
            return
        with self._lock:
            self._make_room(time.monotonic())
            self._kept[key] = (time.monotonic() + self.seconds, data)

    def _make_room(self, now: float) -> None:
        """Drop what expired; past `most` answers, the oldest too."""
        expired = [key for key, (until, _) in self._kept.items() if until <= now]
        for key in expired:
            del self._kept[key]
        while len(self._kept) >= self.most:
            del self._kept[next(iter(self._kept))]
        for key in [key for key in self._computing if key not in self._kept and not self._computing[key].locked()]:
            del self._computing[key]
