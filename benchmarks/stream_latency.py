#!/usr/bin/env python
"""How fast, and how steadily, the `custody_streams` sensor lands streamed assets under Dagster's daemon.

Starts a throwaway single-node Kafka broker, Dagster's daemon and the resident lander (as `make ui`
does; `--no-lander` leaves it out, and each landing run starts its own Spark) on a fresh
temporary CUSTODY_HOME whose specs are `--assets` streamed assets, sales/clicks01, clicks02, …, each
on its own topic (2 partitions, `land_every: 10s`, `land_after` out of reach so the period alone
decides). alice applies them, which creates the topics and their ACLs; the daemon's OS user is the
directory's service account svc-custody, made a producer of the sales domain so its runs may land.
A producer thread, signed in as Custody's own principal, sends `--rate` small JSON records a second
to each topic for `--minutes`; the benchmark then waits for every record to land (at most
DRAIN_SECONDS). Nothing is landed by the benchmark itself: every version comes from a run the
sensor requested and the daemon launched.

It reports two figures:

  latency   for each record landed, its version's `created_at` in the catalog (the commit) less the
            record's Kafka timestamp, which the producer sets as it sends it. Which records a
            version holds is exact: its StreamRead rows give each partition's offset range, and
            the producer's delivery reports give each offset's timestamp. Prints p50, p95 and
            max over all records, the time between an asset's versions, and where a landing
            run's time goes (each run is a new process; its step asks the lander to land).
            Goal (one asset, the default): p95 <= 30 s.
  lag       every SAMPLE_SECONDS, each asset's records waiting (its topic's end offsets less the
            offsets its versions hold, as governance.streams.lag counts them for the sensor) and
            the age of its oldest waiting record; a table over time, then the largest total lag in
            each third of the production period. The lag is "bounded" when the last third's largest
            total is at most BOUNDED_RATIO (1.5) times the middle third's: landing keeps up if the
            backlog stops growing once the first landings have started. Also the runs the sensor
            launched, succeeded and failed, from the Dagster instance. Goal (20 assets): bounded.

    .venv/bin/python benchmarks/stream_latency.py                              # 1 asset, 5 minutes
    .venv/bin/python benchmarks/stream_latency.py --assets 20 --minutes 10     # 20 assets side by side
    .venv/bin/python benchmarks/stream_latency.py --assets 2 --minutes 2       # smoke run
    .venv/bin/python benchmarks/stream_latency.py --assets 1 --minutes 2 --keep  # keeps the daemon's and broker's logs
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from types import FrameType

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dagster as dg
from confluent_kafka import KafkaError, Message, Producer
from sqlmodel import select

from assets.lander import wait_until_listening
from assets.launch import instance_for
from assets.sensors import STREAM_TAG, STREAMS_SENSOR
from assets.tags import SENSOR_NAME_TAG
from governance.api import Custody
from governance.approval import apply
from governance.catalog import Catalog
from governance.catalog.api import offsets_landed
from governance.catalog.models import StreamRead
from governance.catalog.states import VersionStatus
from governance.config import Settings
from governance.demo import OWNER, demo_password
from governance.runs import os_user
from governance.spec import Spec
from governance.streams.broker import KafkaAdmin
from governance.streams.lag import lags
from governance.streams.local import LocalBroker, running
from governance.streams.settings import KafkaSettings
from tests.ports import free_port

DAEMON = Path(sys.executable).with_name("dagster-daemon")
DOMAIN = "sales"
SERVICE_ACCOUNT = "svc-custody"
PARTITIONS = 2
SPEC = """\
description: Clicks {n}, streamed for the stream latency benchmark.
roles: {{owner: sales-owners, producer: sales-producers, consumer: sales-consumers}}
zone: landing
source:
  format: kafka
  records: json
  partitions: {partitions}
  retention: 1d
  land_after: 100000000
  land_every: 10s
"""
SAMPLE_SECONDS = 15
# How long the resident lander may take to start its Spark and listen.
LANDER_START_SECONDS = 180
# How long the records sent last may take to land once production stops.
DRAIN_SECONDS = 180
BOUNDED_RATIO = 1.5
LATENCY_GOAL_SECONDS = 30.0
PAGES = ["/", "/products", "/cart", "/checkout", "/about"]


@dataclass
class Sent:
    """Each record's Kafka timestamp by (topic, partition, offset), from the producer's delivery reports."""

    at: dict[tuple[str, int, int], float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, err: KafkaError | None, message: Message) -> None:
        with self.lock:
            if err is not None:
                self.failed.append(err.name())
                return
            _, stamp = message.timestamp()
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            self.at[(topic, partition, offset)] = stamp / 1000

    def time_of(self, topic: str, partition: int, offset: int) -> float | None:
        with self.lock:
            return self.at.get((topic, partition, offset))

    def count(self) -> int:
        with self.lock:
            return len(self.at)


def produce(settings: KafkaSettings, topics: list[str], rate: float, stop: threading.Event, sent: Sent) -> None:
    """`rate` records a second to each topic until `stop`, on a fixed schedule so that a slow
    moment is caught up rather than lowering the rate. Small batches: a record's timestamp is the
    moment it is handed to the client, and it should reach the broker right away."""
    producer = Producer({**settings.client_config(), "linger.ms": 5, "message.timeout.ms": 30_000})
    interval, due, n = 1 / rate, time.monotonic(), 0
    while not stop.is_set():
        for topic in topics:
            record = {"click": n, "page": PAGES[n % len(PAGES)], "topic": topic}
            producer.produce(
                topic, json.dumps(record).encode(), timestamp=int(time.time() * 1000), on_delivery=sent.delivered
            )
        n += 1
        due += interval
        while time.monotonic() < due and not stop.is_set():
            producer.poll(min(0.05, max(0.0, due - time.monotonic())))
    left = producer.flush(30)
    if left:
        sent.failed.append(f"{left} records unsent at the end")


@dataclass(frozen=True)
class Sample:
    """Each asset's records waiting and the age of its oldest one, at `elapsed` seconds into production."""

    elapsed: float
    waiting: dict[str, int]
    oldest: dict[str, float | None]
    running: int

    @property
    def total(self) -> int:
        return sum(self.waiting.values())


def sample(
    catalog: Catalog, admin: KafkaAdmin, specs: list[Spec], sent: Sent, instance: dg.DagsterInstance, began: float
) -> Sample:
    now = datetime.now(UTC)
    waiting, oldest = {}, {}
    for lag in lags(catalog, admin, specs, now):
        waiting[lag.key.name] = lag.waiting
        with catalog.reading() as session:
            landed = offsets_landed(session, lag.key, lag.topic)
        # The oldest waiting record of a partition is the first offset no version holds yet (no
        # retention deletes any here, so the topics start at 0).
        times = [
            sent.time_of(lag.topic, partition, landed.get(partition, 0))
            for partition, end in lag.ends
            if landed.get(partition, 0) < end
        ]
        known = [t for t in times if t is not None]
        oldest[lag.key.name] = now.timestamp() - min(known) if known else None
    unfinished = instance.get_runs_count(
        dg.RunsFilter(
            tags={SENSOR_NAME_TAG: STREAMS_SENSOR},
            statuses=[dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED],
        )
    )
    return Sample(time.time() - began, waiting, oldest, unfinished)


def print_sample(row: Sample, names: list[str]) -> None:
    ages = [age for age in row.oldest.values() if age is not None]
    oldest = f"{max(ages):6.1f}" if ages else "     -"
    each = " ".join(f"{row.waiting.get(name, 0):4d}" for name in names)
    print(f"{row.elapsed:6.0f} {row.total:6d} {oldest} {row.running:4d} | {each}", flush=True)


def setup_home(tmp: Path, broker: LocalBroker, assets: int) -> dict[str, str]:
    """The specs, the directory and the environment of a fresh home, shared by this process and
    the daemon (the policy settings are pinned at first use: both must say the same)."""
    specs = tmp / "specs" / DOMAIN
    specs.mkdir(parents=True)
    for n in range(1, assets + 1):
        (specs / f"clicks{n:02d}.yaml").write_text(SPEC.format(n=n, partitions=PARTITIONS), encoding="utf-8")
    # The demo's directory, with the daemon's service account among the producers: its runs land
    # as it, and landing takes the producer role.
    directory = yaml.safe_load((ROOT / "assets" / "directory.yaml").read_text(encoding="utf-8"))
    directory["groups"]["sales-producers"].append(SERVICE_ACCOUNT)
    (tmp / "directory.yaml").write_text(yaml.safe_dump(directory), encoding="utf-8")
    home = tmp / "home"
    return {
        **os.environ,
        **broker.environment,
        "CUSTODY_KAFKA_LANDER_PASSWORD": secrets.token_urlsafe(18),
        "CUSTODY_HOME": str(home),
        "CUSTODY_SPECS": str(tmp / "specs"),
        "DAGSTER_HOME": str(home / "dagster"),
        "CUSTODY_DIRECTORY": f"file:{tmp / 'directory.yaml'}",
        "CUSTODY_OS_USERS": f"{os_user()}={SERVICE_ACCOUNT}",
        "CUSTODY_CATALOG_URL": f"sqlite:///{home / 'catalog.db'}",
    }


def start_daemon(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # A session of its own: its code server, run workers and their Spark JVMs stop with its group.
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(DAEMON), "run", "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def start_lander(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # The resident lander `custody serve` starts beside the daemon when Kafka is configured.
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "assets.lander"],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_group(process: subprocess.Popen[bytes], seconds: float = 60) -> None:
    """SIGTERM to the daemon's whole group, then SIGKILL to whatever of it outlives the daemon
    (a run worker or Spark JVM in the middle of a landing)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stamp(value: datetime) -> float:
    return value.replace(tzinfo=UTC).timestamp() if value.tzinfo is None else value.timestamp()


def latencies(catalog: Catalog, specs: list[Spec], sent: Sent) -> tuple[list[float], list[float], int]:
    """Each landed record's seconds from its production to its version's commit; the seconds
    between consecutive versions of an asset; records landed the producer has no report of."""
    found, gaps, unknown = [], [], 0
    for spec in specs:
        versions = [row for row in catalog.versions(spec.key) if row.status == VersionStatus.COMMITTED.value]
        commits = [stamp(row.created_at) for row in versions]
        gaps += [b - a for a, b in pairwise(commits)]
        with catalog.reading() as session:
            reads = list(session.exec(select(StreamRead).where(StreamRead.asset_key == str(spec.key))))
        committed_at = {row.id: at for row, at in zip(versions, commits, strict=True)}
        for read in reads:
            if read.version_id not in committed_at:
                continue
            for offset in range(read.start_offset, read.end_offset):
                produced = sent.time_of(read.topic, read.partition, offset)
                if produced is None:
                    unknown += 1
                else:
                    found.append(committed_at[read.version_id] - produced)
    return found, gaps, unknown


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def report_latency(catalog: Catalog, specs: list[Spec], sent: Sent, instance: dg.DagsterInstance) -> float | None:
    """Prints the latency figures; returns the median seconds between an asset's versions."""
    found, gaps, unknown = latencies(catalog, specs, sent)
    versions = sum(
        1 for spec in specs for row in catalog.versions(spec.key) if row.status == VersionStatus.COMMITTED.value
    )
    print(f"\nrecords produced {sent.count()}, landed {len(found) + unknown}", end="")
    print(f" ({unknown} without a delivery report)" if unknown else "")
    if not found:
        print("no record landed: no latency to report")
        return None
    p50, p95 = percentile(found, 0.50), percentile(found, 0.95)
    print(
        f"production -> committed version: p50 {p50:.1f} s, p95 {p95:.1f} s, max {max(found):.1f} s, "
        f"min {min(found):.1f} s over {len(found)} records"
    )
    if gaps:
        print(
            f"versions {versions} ({versions / len(specs):.1f} an asset), "
            f"seconds between an asset's versions: median {statistics.median(gaps):.1f}, max {max(gaps):.1f}"
        )
    report_phases(catalog, instance)
    if len(specs) == 1:
        verdict = "met" if p95 <= LATENCY_GOAL_SECONDS else "MISSED"
        print(f"goal p95 <= {LATENCY_GOAL_SECONDS:.0f} s: {verdict}")
    return statistics.median(gaps) if gaps else None


def report_phases(catalog: Catalog, instance: dg.DagsterInstance) -> None:
    """Where a landing run's time goes, medians over the runs that committed a version: from the
    sensor's request (the run's creation) to its start, which includes the queue and the run
    worker's own start; from its start to its commit (Spark, the read, the checks, the commit); from
    the commit to the run's end, during which the sensor requests nothing more of the asset."""
    phases = []
    for record in instance.get_run_records(filters=dg.RunsFilter(tags={SENSOR_NAME_TAG: STREAMS_SENSOR})):
        versions = catalog.versions_of_run(record.dagster_run.run_id)
        if not versions or record.start_time is None or record.end_time is None:
            continue
        created, committed = record.create_timestamp.timestamp(), stamp(versions[0].created_at)
        phases.append((record.start_time - created, committed - record.start_time, record.end_time - committed))
    if phases:
        waited, landed, ended = (statistics.median(phase) for phase in zip(*phases, strict=True))
        print(
            f"landing runs, medians of {len(phases)}: requested -> started {waited:.1f} s, started -> committed "
            f"{landed:.1f} s, committed -> ended {ended:.1f} s"
        )


def report_lag(samples: list[Sample], seconds: float, cycle: float | None) -> None:
    """`cycle`: the median seconds between an asset's versions. Within a shorter stretch the lag is
    one tooth of its sawtooth, and a third's largest value says nothing of a trend."""
    thirds = [
        [row.total for row in samples if i * seconds / 3 <= row.elapsed < (i + 1) * seconds / 3] for i in range(3)
    ]
    highest = [max(third) if third else None for third in thirds]
    shown = ", ".join("-" if value is None else str(value) for value in highest)
    print(f"\nlargest total records waiting in each third of the production period: {shown}")
    middle, last = highest[1], highest[2]
    if middle is None or last is None:
        print("lag: too few samples to judge")
        return
    bounded = last <= BOUNDED_RATIO * middle
    print(
        f"lag: {'bounded' if bounded else 'GROWING'} (last third's largest total {last} "
        f"{'<=' if bounded else '>'} {BOUNDED_RATIO} x the middle third's {middle})"
    )
    if cycle is not None and seconds / 3 < 2 * cycle:
        print(
            f"  (a third, {seconds / 3:.0f} s, spans fewer than two landing cycles of {cycle:.0f} s: "
            "too short for the verdict to mean much)"
        )


def report_runs(instance: dg.DagsterInstance, specs: list[Spec]) -> None:
    records = instance.get_run_records(filters=dg.RunsFilter(tags={SENSOR_NAME_TAG: STREAMS_SENSOR}))
    statuses = Counter(record.dagster_run.status for record in records)
    succeeded, failed = statuses[dg.DagsterRunStatus.SUCCESS], statuses[dg.DagsterRunStatus.FAILURE]
    others = ", ".join(
        f"{status.value} {n}" for status, n in statuses.items() if status.value not in ("SUCCESS", "FAILURE")
    )
    print(
        f"runs the sensor launched: {len(records)}, succeeded {succeeded}, failed {failed}"
        + (f", unfinished {others}" if others else "")
    )
    if len(specs) > 1:
        # A run lands every asset due at its tick: its tag names them all.
        by_asset = Counter(key for record in records for key in record.dagster_run.tags.get(STREAM_TAG, "").split())
        counts = sorted(by_asset[str(spec.key)] for spec in specs)
        print(f"landings of an asset: fewest {counts[0]}, most {counts[-1]}")
    failures = [r.dagster_run.run_id for r in records if r.dagster_run.status == dg.DagsterRunStatus.FAILURE]
    for run_id in failures[:3]:
        said = [
            event.dagster_event.message or ""
            for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
            if event.dagster_event is not None
        ] or ["no step failed (see the run's log)"]
        print(f"  failed run {run_id}: {said[0].splitlines()[0][:300] if said[0] else '?'}")


def measure(tmp: Path, broker: LocalBroker, args: argparse.Namespace) -> None:
    env = setup_home(tmp, broker, args.assets)
    os.environ.update(env)
    settings = Settings.from_env(env)
    custody = Custody(settings)
    catalog = Catalog.from_settings(settings, os.environ)
    # As `make demo` does: the demo's owner puts the specs in force, which creates the topics.
    apply(catalog, custody.policy, custody.identity(OWNER, demo_password(OWNER)), custody.specs)
    specs = sorted(custody.specs, key=lambda spec: spec.key.name)
    names = [spec.key.name for spec in specs]
    topics = [spec.topic for spec in specs if spec.topic]
    instance = instance_for(settings)
    kafka = KafkaSettings.from_env(env)
    admin = KafkaAdmin(kafka)
    log = tmp / "daemon.log"
    lander = None
    if args.lander:
        lander = start_lander(env, tmp / "lander.log")
        wait_until_listening(settings, lander, LANDER_START_SECONDS)
    daemon = start_daemon(env, log)
    sent, stop = Sent(), threading.Event()
    producer = threading.Thread(target=produce, args=(kafka, topics, args.rate, stop, sent), daemon=True)
    samples: list[Sample] = []
    reported = False
    try:
        began = time.time()
        producer.start()
        seconds = args.minutes * 60
        where = "a resident lander" if lander else "each run's own Spark"
        print(
            f"{len(specs)} streamed assets, {args.rate:g} records/s each for {seconds:.0f} s, landed in {where}; "
            f"daemon log {log}"
        )
        print(f"{'t (s)':>6} {'total':>6} {'oldest':>6} {'runs':>4} | records waiting by asset ({names[0]}…)")
        while time.time() - began < seconds:
            time.sleep(min(SAMPLE_SECONDS, max(0.0, seconds - (time.time() - began))))
            if daemon.poll() is not None:
                raise SystemExit(f"the Dagster daemon exited ({daemon.returncode}):\n{tail(log)}")
            samples.append(sample(catalog, admin, specs, sent, instance, began))
            print_sample(samples[-1], names)
        stop.set()
        producer.join(60)
        drained = drain(catalog, admin, specs, sent, instance, began, daemon, log, names)
        print(
            f"production stopped at {seconds:.0f} s; "
            + (
                f"all landed {drained:.0f} s later"
                if drained is not None
                else f"records still waiting after {DRAIN_SECONDS} s"
            )
        )
        settle(instance)
        if sent.failed:
            print(f"producer errors: {Counter(sent.failed).most_common(5)}")
        cycle = report_latency(catalog, specs, sent, instance)
        report_lag(samples, seconds, cycle)
        report_runs(instance, specs)
        reported = True
    finally:
        if not reported:
            print(f"daemon log, last lines:\n{tail(log)}", file=sys.stderr)
        # A second Ctrl-C would leave the daemon's group or the broker running: each stop is bounded.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop.set()
        stop_group(daemon)
        if lander is not None:
            stop_group(lander)
        producer.join(30)


def drain(
    catalog: Catalog,
    admin: KafkaAdmin,
    specs: list[Spec],
    sent: Sent,
    instance: dg.DagsterInstance,
    began: float,
    daemon: subprocess.Popen[bytes],
    log: Path,
    names: list[str],
) -> float | None:
    """Seconds until no record waits once production stopped; None if some still wait after DRAIN_SECONDS."""
    stopped, shown = time.time(), time.time()
    while time.time() - stopped < DRAIN_SECONDS:
        time.sleep(1)
        if daemon.poll() is not None:
            raise SystemExit(f"the Dagster daemon exited ({daemon.returncode}):\n{tail(log)}")
        row = sample(catalog, admin, specs, sent, instance, began)
        if row.total == 0:
            return time.time() - stopped
        if time.time() - shown >= SAMPLE_SECONDS / 3:
            print_sample(row, names)
            shown = time.time()
    return None


def settle(instance: dg.DagsterInstance, seconds: float = 60) -> None:
    """Wait a little for the runs still going, which have committed and are ending, so that the
    counts of runs are final; the sensor launches no more, nothing waits."""
    unfinished = dg.RunsFilter(
        tags={SENSOR_NAME_TAG: STREAMS_SENSOR},
        statuses=[dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED],
    )
    deadline = time.monotonic() + seconds
    while instance.get_runs_count(unfinished) and time.monotonic() < deadline:
        time.sleep(1)


def interruptible() -> None:
    """SIGTERM, and SIGINT even where the shell that started this ignores it (`cmd &`), unwind as
    Ctrl-C does, so that the daemon and the broker are stopped on the way out."""

    def raised(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raised)
    signal.signal(signal.SIGINT, raised)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=int, default=1, help="streamed assets, each on its own topic")
    parser.add_argument("--minutes", type=float, default=5, help="how long records are produced")
    parser.add_argument("--rate", type=float, default=2, help="records a second to each topic")
    parser.add_argument("--keep", action="store_true", help="keep the temporary home, its logs among it")
    parser.add_argument(
        "--no-lander",
        dest="lander",
        action="store_false",
        help="no resident lander: each landing run starts its own Spark (as without `custody serve`)",
    )
    args = parser.parse_args()
    if not 1 <= args.assets <= 99:
        parser.error("--assets: 1 to 99")
    interruptible()
    tmp = Path(tempfile.mkdtemp(prefix="bench-stream-latency-"))
    broker = LocalBroker(tmp / "kafka", free_port(), free_port(), "custody", secrets.token_urlsafe(18))
    try:
        with running(broker):
            measure(tmp, broker, args)
    except KeyboardInterrupt:
        print("interrupted: the daemon and the broker are stopped", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
