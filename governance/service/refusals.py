"""Refused requests, recorded so that a flood neither fills the ledger nor hides what matters in it.

Each kind of refusal (from one peer: the same action and the same reason, but for the names and
numbers in it) is recorded at once the first time in a window of WINDOW_SECONDS; its repeats in that
window are counted, and recorded as one entry when the window ends, with their count (`repeats`),
the users and names they were for or claimed most often (`names`, NAMES of them) and how many
different ones there were (`distinct_names`). So every distinct reason reaches the ledger within a
window whatever else a client sends, and the counts add up to the requests refused. A peer's kinds
beyond KINDS_PER_PEER in a window (a client that varies what it sends past every reason Custody
gives, or every user behind one gateway) are counted together under one, which names the reasons
it counted (`reasons`, NAMES of them); all kinds beyond OPEN_KINDS at once (a flood from very many
peers) are counted under one for every peer.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from governance.access.policy import Decision
from governance.config import env_amount
from governance.errors import CustodyError, error_summary

WINDOW_SECONDS = 60.0
WINDOW_VARIABLE = "CUSTODY_REFUSALS_WINDOW_SECONDS"
KINDS_PER_PEER = 50
OPEN_KINDS = 10_000
# How many of its users and names a kind's repeats name; how many different ones it counts at most.
NAMES = 20
COUNTED_NAMES = 10_000
# How often the repeats of windows that ended are recorded.
FLUSH_SECONDS = 5.0
NUMBERS = re.compile(r"\d+")
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
MANY = "more kinds of refused requests than are recorded one by one: the rest of this window are counted"
EVERY_PEER = "every peer"

Details = Mapping[str, Any]
Write = Callable[[Sequence[tuple[Decision, Details]]], None]


@dataclass
class _Kind:
    """One kind of refusal in its window: the first one, as recorded, and the repeats since."""

    decision: Decision
    details: Details
    opened: float
    repeats: int = 0
    last: datetime | None = None
    names: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def repeat(self, at: datetime, name: str, shape: str) -> None:
        self.repeats += 1
        self.last = at
        for counted, value in ((self.names, name), (self.reasons, shape)):
            if value in counted or len(counted) < COUNTED_NAMES:
                counted[value] += 1

    def repeated(self, peer: str) -> tuple[Decision, Details]:
        """The entry that records the repeats."""
        first = str(self.details.get("at", ""))
        reason = f"{self.decision.reason} (again {self.repeats} times from {peer} since {first})"
        last = self.last.isoformat(timespec="seconds") if self.last else ""
        many = {"reasons": [shape for shape, _ in self.reasons.most_common(NAMES)]} if self.details.get("many") else {}
        said = {
            **self.details,
            "repeats": self.repeats,
            "until": last,
            "names": [name for name, _ in self.names.most_common(NAMES)],
            "distinct_names": len(self.names),
            **many,
        }
        return replace(self.decision, reason=reason), said


@dataclass
class Refusals:
    """The refusals of one process, written with `write` (in one transaction per call)."""

    write: Write
    window: float = WINDOW_SECONDS
    per_peer: int = KINDS_PER_PEER
    _open: dict[tuple[Any, ...], _Kind] = field(default_factory=dict)
    _peers: Counter[str] = field(default_factory=Counter)
    _unwritten: list[tuple[Decision, Details]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refused(self, peer: str, decision: Decision, details: Details) -> None:
        """Record `decision`, a refusal of a request from `peer`, as its kind is due."""
        now, at = time.monotonic(), datetime.now(UTC)
        shape = _shape(decision, details)
        with self._lock:
            due = [*self._unwritten, *self._ended(now)]
            self._unwritten = []
            key = self._key(peer, decision.verb, shape)
            kind = self._open.get(key)
            if kind is not None:
                kind.repeat(at, _name(decision, details), shape)
            else:
                said = {**details, "peer": peer, "at": at.isoformat(timespec="seconds")}
                first = decision
                if key[1] == MANY:
                    first = replace(decision, reason=f"{key[0]} sent {MANY}; the first: {decision.reason}")
                    said["many"] = True
                self._open[key] = _Kind(first, said, now)
                self._peers[key[0]] += 1
                due.append((first, said))
        if due:
            self._write(due)

    def _write(self, due: list[tuple[Decision, Details]]) -> None:
        """Write `due`; what cannot be written waits for the next write or flush."""
        try:
            self.write(due)
        except CustodyError:
            with self._lock:
                self._unwritten = due + self._unwritten
            raise

    def flush(self, everything: bool = False) -> None:
        """Record the repeats of the windows that ended (of all of them, as the process stops), and
        those a failed flush left; a flush that fails keeps them for the next."""
        with self._lock:
            due = [*self._unwritten, *self._ended(float("inf") if everything else time.monotonic())]
            self._unwritten = []
        if due:
            self._write(due)

    def _key(self, peer: str, verb: str, shape: str) -> tuple[Any, ...]:
        """The kind of a refusal; the peer's one kind for many past its bound, or every peer's past
        the process's."""
        key = (peer, verb, shape)
        if key in self._open:
            return key
        if len(self._open) >= OPEN_KINDS:
            return (EVERY_PEER, MANY)
        if self._peers[peer] >= self.per_peer:
            return (peer, MANY)
        return key

    def _ended(self, now: float) -> list[tuple[Decision, Details]]:
        """Close the windows that ended by `now`; the entries of their repeats."""
        ended = [key for key, kind in self._open.items() if now - kind.opened >= self.window]
        due = []
        for key in ended:
            kind = self._open.pop(key)
            self._peers[key[0]] -= 1
            if self._peers[key[0]] <= 0:
                del self._peers[key[0]]
            if kind.repeats:
                due.append(kind.repeated(key[0]))
        return due


def _name(decision: Decision, details: Details) -> str:
    """Whom a refused request was for, or claimed to be for."""
    claimed = details.get("claimed")
    return f"{decision.identity.user} (claimed {claimed})" if claimed else decision.identity.user


def _shape(decision: Decision, details: Details) -> str:
    """A refusal's reason with the names and numbers in it left out."""
    reason = decision.reason
    for name in (decision.identity.user, str(details.get("claimed") or "")):
        if name:
            reason = reason.replace(name, "…")
    return NUMBERS.sub("N", QUOTED.sub("…", reason))


def window_from(environ: Mapping[str, str]) -> float:
    """CUSTODY_REFUSALS_WINDOW_SECONDS, else a minute."""
    seconds = env_amount(environ, WINDOW_VARIABLE, "seconds")
    return WINDOW_SECONDS if seconds is None else seconds


class Flusher:
    """Records the repeats of ended windows every FLUSH_SECONDS (or the window, when shorter) on a
    thread of its own, and all of them when stopped."""

    def __init__(self, refusals: Refusals):
        self.refusals = refusals
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="custody-refusals", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.refusals.flush(everything=True)

    def _run(self) -> None:
        while not self._stop.wait(min(FLUSH_SECONDS, self.refusals.window)):
            try:
                self.refusals.flush()
            except CustodyError as err:  # the catalog is down: the repeats wait for the next flush
                print(f"warning: refused requests' repeats not recorded yet: {error_summary(err)}", file=sys.stderr)
