"""The resident lander's Dagster side (governance.streams.lander): it lands an asset only for a run
the instance shows started with that asset selected, once, and as the person or service account
that run's launch established, decided and recorded as the run's own step would decide it.

    python -m assets.lander        # in the foreground, on CUSTODY_HOME's instance and specs

`custody serve` (`make ui`) starts one beside Dagster's daemon when Kafka is configured.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import NoReturn

import dagster as dg

from assets.factory import channel, requester, run_request
from assets.launch import instance_for
from governance.access.guard import ANONYMOUS, authorize_step, enforce, record
from governance.access.policy import Decision, Identity, Verb
from governance.config import Settings
from governance.errors import AccessDenied, CustodyError, EnvironmentProblem, NotFound
from governance.ingest import ingest
from governance.runs import Assurance, Progress
from governance.spec import Spec, load_upstream
from governance.streams.lander import Ask, reachable, serving, socket_path
from governance.streams.settings import BOOTSTRAP
from governance.zones import AssetKey
from resources import CustodyResource, SparkResource

log = logging.getLogger(__name__)
# How long `custody serve` waits for its lander to stop.
STOP_SECONDS = 30


class Lander:
    """Lands streamed assets in one Spark session, for the runs that ask."""

    def __init__(self, settings: Settings, instance: dg.DagsterInstance, spark: SparkResource) -> None:
        self.settings = settings
        self.instance = instance
        self.spark = spark
        self.custody = CustodyResource()
        # Opened before any request: the requests' threads share them.
        self.catalog, self.lake = self.custody.catalog, self.custody.lake
        self._taken: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def land(self, ask: Ask, progress: Progress) -> int:
        """The id of the version landed for `ask`'s run."""
        key = AssetKey.parse(ask.asset)
        if ask.peer_uid is not None and ask.peer_uid != os.getuid():
            self._refuse(ask, key, f"the lander lands for its own OS user's processes only, not uid {ask.peer_uid}'s")
        run = self._running(ask, key)
        with self._once(ask, key):
            spec = self._spec(key)
            custody, catalog = self.custody, self.catalog
            policy = custody.policy()
            identity = requester(catalog, self.lake, policy, run.run_id, run.tags, spec)
            via = {**channel(run.tags), "lander": f"pid {os.getpid()}", "peer": ask.peer}
            if identity.assurance != Assurance.VERIFIED:
                # A step would take a run's tag at its word where the policy allows that; the lander
                # acts only for someone a launch proved.
                reason = f"run {run.run_id} names {identity.user} by its tag alone: no launch established who it is for"
                enforce(catalog, Decision(identity, Verb.INGEST, str(key), False, reason), run.run_id, via)
            authorize_step(catalog, policy, identity, spec, None, run.run_id, {}, via)
            request = run_request(self.instance, run.run_id, run.job_name, spec, identity)
            progress(f"landing in the resident lander (pid {os.getpid()}) for {identity.user}")
            row = ingest(
                self.spark.spark_session,
                catalog,
                self.lake,
                spec,
                request,
                progress=progress,
                events=custody.events(),
                column_lineage=custody.column_options(),
            )
            catalog.checkpoint()
            log.info("%s landed for run %s (%s)", row.ref, run.run_id, identity.user)
            assert row.id is not None  # a committed version has its id
            return row.id

    def _running(self, ask: Ask, key: AssetKey) -> dg.DagsterRun:
        """The run `ask` names, started, and selecting `key`."""
        run = self.instance.get_run_by_id(ask.run_id)
        if run is None or run.status != dg.DagsterRunStatus.STARTED:
            state = "no run" if run is None else f"run {run.status.value.lower()}"
            self._refuse(ask, key, f"the lander lands only for a started run: {ask.run_id} is {state}")
        if dg.AssetKey([key.domain, key.name]) not in (run.asset_selection or ()):
            self._refuse(ask, key, f"run {ask.run_id} does not select {key}: the lander lands only what a run selects")
        return run

    def _refuse(self, ask: Ask, key: AssetKey, reason: str) -> NoReturn:
        """Refuse a request that establishes nobody, recorded with the process that asked."""
        decision = Decision(Identity(ANONYMOUS, Assurance.NONE), Verb.INGEST, str(key), False, reason)
        record(self.catalog, decision, ask.run_id, details={"lander": f"pid {os.getpid()}", "peer": ask.peer})
        raise AccessDenied(f"denied: {reason}")

    @contextmanager
    def _once(self, ask: Ask, key: AssetKey) -> Iterator[None]:
        """Each asset of a run lands once: a request again while it lands, or after it committed, is refused."""
        taken = (ask.run_id, str(key))
        with self._lock:
            done = any(row.asset_key == str(key) for row in self.catalog.versions_of_run(ask.run_id))
            if taken in self._taken or done:
                self._refuse(ask, key, f"{key} is landing, or landed, for run {ask.run_id} already")
            self._taken.add(taken)
        try:
            yield
        finally:
            # Once committed, the catalog says so; a landing that failed may be retried by its step.
            with self._lock:
                self._taken.discard(taken)

    def _spec(self, key: AssetKey) -> Spec:
        """The asset's spec as its file says now (with approval on, `authorize_step` refuses one
        that is not the definition in force)."""
        settings = self.settings
        loaded = load_upstream(
            settings.specs, [key], settings.cache_dir, transform_packages=settings.transform_packages
        )
        spec = next((spec for spec in loaded.specs if spec.key == key), None)
        if spec is None or not spec.reads_topic:
            raise NotFound(f"{key} is not a streamed asset of {settings.specs}: the lander lands topics only")
        return spec


def main() -> None:
    argparse.ArgumentParser(prog="python -m assets.lander", description=__doc__).parse_args()
    logging.basicConfig(level=logging.WARNING, format="lander: %(message)s")
    log.setLevel(logging.INFO)
    settings = Settings.from_env()
    spark = SparkResource()
    try:
        lander = Lander(settings, instance_for(settings), spark)
        # The socket is this process's before Spark starts: a step that connects meanwhile waits
        # for it rather than starting a JVM of its own.
        with serving(socket_path(settings.home), lander.land) as server:
            signal.signal(signal.SIGTERM, _exit)
            _ = spark.spark_session
            log.info("listening at %s", socket_path(settings.home))
            server.serve_forever()
    except CustodyError as err:
        sys.exit(f"lander: {err}")


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def wanted() -> bool:
    """Whether `custody serve` starts a lander: when Kafka is configured."""
    return bool(os.environ.get(BOOTSTRAP))


@contextmanager
def resident_lander(settings: Settings) -> Iterator[subprocess.Popen[bytes]]:
    """A lander on `settings`' home while the block runs."""
    process = subprocess.Popen(
        [sys.executable, "-m", "assets.lander"],
        env={**os.environ, "DAGSTER_HOME": str(settings.dagster_home)},
        cwd=Path(__file__).resolve().parent.parent,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_listening(settings: Settings, process: subprocess.Popen[bytes], within: float) -> None:
    """Until the lander at `settings`' home takes connections (a request waits there while its Spark
    starts), or raise if it exited or took `within` seconds."""
    path = socket_path(settings.home)
    deadline = time.monotonic() + within
    while not reachable(path):
        if process.poll() is not None:
            raise EnvironmentProblem(f"the lander exited ({process.returncode}) before it listened")
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"the lander did not listen at {path} within {within:.0f} s")
        time.sleep(0.2)


if __name__ == "__main__":
    main()
