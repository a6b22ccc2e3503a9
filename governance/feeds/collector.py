"""The collector: every feed downloaded on its period, each finished hour packed and uploaded.

Feeds keep to a fixed grid of times from the start: a download that runs late does not push the
next one back, and a tick that comes while the feed's last download is still running is counted as
missed. A download that fails is tried again after a short wait while its period allows, then the
feed pauses for longer after each tick in a row that found nothing (up to a minute). Stopping waits
for the downloads in progress, then ships every hour in the workspace, the current one too (Hoard's
"clean"): nothing downloaded stays behind.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import requests

from governance.feeds.fetch import FetchFailed, fetch
from governance.feeds.names import content_hash, download_name, feed_id, hour_of, parse_download
from governance.feeds.store import FeedStore
from governance.feeds.templates import Filled, fill_request
from governance.feeds.workspace import Workspace
from governance.spec import Feed, Spec

Emit = Callable[[dict[str, Any]], None]
SHIP_EVERY = 5.0
# An hour is packed this long after it ends, so a download that began in it has been written.
SHIP_GRACE = timedelta(seconds=2)
FIRST_BACKOFF = 0.5
MAX_PAUSE = 60.0
MAX_DOUBLINGS = 16
ATTEMPTS = 3


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Counts:
    """What one feed's collection did, since the collector started."""

    downloads: int = 0
    unchanged: int = 0
    empty: int = 0
    failed_attempts: int = 0
    failed_ticks: int = 0
    missed: int = 0
    paused: int = 0
    bytes: int = 0
    archives: int = 0
    last_download: str | None = None
    last_error: str | None = None
    max_lag_seconds: float = 0.0


@dataclass
class _Feed:
    name: str
    feed: Feed
    request: Filled
    due: float = 0.0
    busy: bool = False
    failing: int = 0
    paused_until: float = 0.0
    last_digest: str | None = None
    counts: Counts = field(default_factory=Counts)
    lags: list[float] = field(default_factory=list)


def plan_feeds(specs: list[Spec], environ: Mapping[str, str]) -> list[tuple[str, Feed, Filled]]:
    """Each feed's request, its templates filled: an unset variable refuses the whole start."""
    return [
        (feed_id(spec.key), spec.feed, fill_request(spec.feed.url, spec.feed.headers, environ, feed_id(spec.key)))
        for spec in specs
        if spec.feed
    ]


class Collector:
    def __init__(
        self,
        feeds: list[tuple[str, Feed, Filled]],
        workspace: Workspace,
        store: FeedStore,
        *,
        now: Callable[[], datetime] = utc_now,
        emit: Emit = lambda event: None,
        workers: int = 16,
        every_minute: Callable[[], None] | None = None,
        keep_lags: bool = False,
    ):
        self.feeds = [_Feed(name, feed, request) for name, feed, request in feeds]
        self.workspace, self.store, self.now, self.emit = workspace, store, now, emit
        self.workers, self.every_minute, self.keep_lags = workers, every_minute, keep_lags
        self._lock = threading.Lock()
        # Downloads in progress, by feed and hour: an hour is packed only once none is left.
        self._writing: dict[tuple[str, datetime], int] = {}
        for state in self.feeds:
            latest = workspace.latest(state.name)
            state.last_digest = parse_download(latest.name).digest if latest else None

    def status(self) -> dict[str, dict]:
        with self._lock:
            return {state.name: asdict(state.counts) for state in self.feeds}

    def run(self, stop: threading.Event, on_beat: Callable[[], None] | None = None, beat_every: float = 10.0) -> None:
        """Collect until `stop` is set, then ship everything. Packing, uploads, the replica's record
        and consolidation run beside the downloads, on a thread of their own: they take seconds."""
        start = time.monotonic()
        queue: list[tuple[float, int]] = []
        for index, state in enumerate(self.feeds):
            # Spread over their period, feeds do not all ask at the same instant.
            state.due = start + state.feed.period * index / len(self.feeds)
            heapq.heappush(queue, (state.due, index))
        chores = [(SHIP_EVERY, "upload", lambda: self.ship(finished_only=True))]
        chores += [(beat_every, "record", on_beat)] if on_beat else []
        chores += [(60.0, "consolidation", self.every_minute)] if self.every_minute else []
        # A thread each: a long consolidation must not hold back the record that says this replica lives.
        keepers = [
            threading.Thread(target=self._keep_up, args=(stop, every, what, chore), name=f"feed-{what}", daemon=True)
            for every, what, chore in chores
        ]
        for keeper in keepers:
            keeper.start()
        session = requests.Session()
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=self.workers))
        session.mount("https://", requests.adapters.HTTPAdapter(pool_maxsize=self.workers))
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="feed") as pool:
            while not stop.is_set():
                moment = time.monotonic()
                while queue and queue[0][0] <= moment:
                    due, index = heapq.heappop(queue)
                    self._start(pool, session, self.feeds[index], due, stop)
                    heapq.heappush(queue, (self.feeds[index].due, index))
                stop.wait(max(0.0, queue[0][0] - time.monotonic()) if queue else 1.0)
        for keeper in keepers:
            keeper.join()
        session.close()
        self.ship(finished_only=False)

    def _keep_up(self, stop: threading.Event, every: float, what: str, chore: Callable[[], None]) -> None:
        """A chore on its period. Whatever it raises is reported and the chore tried again next
        time, never the end of it: what it was to take stays in the workspace meanwhile."""
        while not stop.wait(every):
            try:
                chore()
            except Exception as err:  # noqa: BLE001 (reported, and retried next period)
                self.emit(
                    {"event": "store_error", "during": what, "error": self._masked(f"{type(err).__name__}: {err}")}
                )

    def _masked(self, text: str) -> str:
        for state in self.feeds:
            text = state.request.mask(text)
        return text

    def _start(
        self, pool: ThreadPoolExecutor, session: requests.Session, state: _Feed, due: float, stop: threading.Event
    ) -> None:
        period = state.feed.period
        late = time.monotonic() - due
        skipped = int(late // period)
        state.due = due + (skipped + 1) * period
        with self._lock:
            state.counts.missed += skipped
            if due < state.paused_until:
                state.counts.paused += 1
                return
            if state.busy:
                state.counts.missed += 1
                return
            state.busy = True
        pool.submit(self._tick, session, state, due, stop)

    def _tick(self, session: requests.Session, state: _Feed, due: float, stop: threading.Event) -> None:
        with self._lock:
            lag = time.monotonic() - due
            state.counts.max_lag_seconds = max(state.counts.max_lag_seconds, lag)
            if self.keep_lags:
                state.lags.append(lag)
            # Registered before the hour is known to the shipper: it leaves this hour alone until the download is in.
            at = self.now()
            writing = (state.name, hour_of(at))
            self._writing[writing] = self._writing.get(writing, 0) + 1
        try:
            body = self._download(session, state, stop)
            if body is not None:
                self._keep(state, at, body)
        finally:
            with self._lock:
                state.busy = False
                self._writing[writing] -= 1
                if not self._writing[writing]:
                    del self._writing[writing]

    def _download(self, session: requests.Session, state: _Feed, stop: threading.Event) -> bytes | None:
        wait = FIRST_BACKOFF
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return fetch(session, state.request, timeout=state.feed.timeout, max_bytes=state.feed.max_bytes)
            except FetchFailed as err:
                self._failed_attempt(state, str(err))
                if stop.is_set():
                    return None
                if attempt == ATTEMPTS or wait >= state.due - time.monotonic() or stop.wait(wait):
                    break
                wait *= 2
        if stop.is_set():
            return None
        with self._lock:
            state.counts.failed_ticks += 1
            state.failing += 1
            pause = min(state.feed.period * (2 ** min(state.failing - 1, MAX_DOUBLINGS) - 1), MAX_PAUSE)
            state.paused_until = time.monotonic() + pause
            error = state.counts.last_error
        self.emit({"event": "failed", "feed": state.name, "error": error, "paused_seconds": pause})
        return None

    def _failed_attempt(self, state: _Feed, message: str) -> None:
        with self._lock:
            state.counts.failed_attempts += 1
            state.counts.last_error = f"{self.now().isoformat(timespec='seconds')} {state.request.mask(message)}"

    def _keep(self, state: _Feed, at: datetime, body: bytes) -> None:
        """Write a download unless it repeats the feed's last one; an empty body is counted, not kept."""
        digest = content_hash(body)
        with self._lock:
            state.failing = 0
            if not body:
                state.counts.empty += 1
                return
            if digest == state.last_digest:
                state.counts.unchanged += 1
                return
        name = download_name(state.name, at, digest, state.feed.postfix)
        try:
            self.workspace.save(state.name, hour_of(at), name, body)
        except OSError as err:
            self._failed_attempt(state, f"the download could not be written to the workspace: {err.strerror or err}")
            self.emit({"event": "failed", "feed": state.name, "error": state.counts.last_error, "paused_seconds": 0})
            return
        with self._lock:
            state.last_digest = digest
            state.counts.downloads += 1
            state.counts.bytes += len(body)
            state.counts.last_download = at.isoformat(timespec="milliseconds")

    def ship(self, *, finished_only: bool) -> None:
        """Pack and upload the workspace's hours: those that ended and hold no download in progress,
        or, once collection has stopped, all of them."""
        current = hour_of(self.now() - SHIP_GRACE)
        for name, hour in list(self.workspace.hours()):
            with self._lock:
                busy = (name, hour) in self._writing
            if finished_only and (hour >= current or busy):
                continue
            uploaded = self.workspace.ship(self.store, name, hour)
            if uploaded is None:
                continue
            state = next((s for s in self.feeds if s.name == name), None)
            if state is not None:
                with self._lock:
                    state.counts.archives += 1
            self.emit(
                {
                    "event": "uploaded",
                    "feed": name,
                    "archive": uploaded.name,
                    "downloads": uploaded.downloads,
                    "bytes": uploaded.bytes,
                }
            )
