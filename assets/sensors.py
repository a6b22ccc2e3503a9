"""The DropZone sensor: one ingestion run per ready batch, for the owner of the batch's folder."""

# No `from __future__ import annotations` here: Dagster reads the sensor function's annotations at runtime.

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import dagster as dg

from assets.factory import BATCH_TAG, PARTITION_FORMAT, REQUESTED_BY_TAG
from assets.tags import RUN_KEY_TAG, SENSOR_NAME_TAG
from governance.config import DROPZONE_SENSOR_SECONDS
from governance.spec import Spec, SpecSet
from resources import CustodyResource

if TYPE_CHECKING:
    from governance.dropzone import ReadyBatch
    from governance.streams.lag import Lag

SENSOR = "custody_dropzone"
FEEDS_SENSOR = "custody_feeds"
AUTOMATION_SENSOR = "custody_automation"
STREAMS_SENSOR = "custody_streams"
# The streamed assets a landing run the streams sensor requested is for (their keys, space apart);
# the count it observes.
STREAM_TAG = "custody/stream"
WAITING = "custody/records_waiting"
# How often the streams sensor may tick, at most and at least, in seconds.
STREAMS_EVERY_SECONDS = (5, 60)
# How long after a failed landing the sensor waits before it requests the asset's next one, at least.
STREAMS_RETRY_SECONDS = 60
UNFINISHED = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)
FEEDS_EVERY_SECONDS = 60
# A feed's counts (downloads, failures, last download) reach its asset at most this often.
HEALTH_EVERY = timedelta(minutes=15)
# What changes a feed's state, shown on its asset at the next tick.
STATE = ("custody/collectors_running", "custody/replicas", "custody/last_error")


def dropzone_sensor(
    specs: SpecSet, *, running: bool = True, every_seconds: int = DROPZONE_SENSOR_SECONDS
) -> dg.SensorDefinition | None:
    """None when no spec is a landing asset: there is no DropZone to watch. `running` is its state
    until someone starts or stops it in the UI (CUSTODY_DROPZONE_SENSOR=off: stopped); it ticks at
    most every `every_seconds` (CUSTODY_DROPZONE_SENSOR_SECONDS)."""
    landing = [spec for spec in specs if spec.takes_batches]
    if not landing:
        return None

    @dg.sensor(
        name=SENSOR,
        asset_selection=[dg.AssetKey([s.key.domain, s.key.name]) for s in landing],
        default_status=dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=every_seconds,
        required_resource_keys={"custody"},
        description="One ingestion run per ready DropZone batch, for the owner of its folder (as the "
        "os_users setting maps it); a batch that user may not ingest, or whose _batch.yaml names someone "
        "else, is refused in the ledger and reported once.",
    )
    def custody_dropzone(context: dg.SensorEvaluationContext) -> Iterator[dg.RunRequest | dg.SkipReason]:
        from governance.dropzone import watch

        custody: CustodyResource = context.resources.custody
        reported = frozenset(json.loads(context.cursor)) if context.cursor else frozenset()
        try:
            seen = watch(custody.catalog, custody.lake, custody.policy(), landing, reported, via=f"sensor {SENSOR}")
        finally:
            custody.catalog.checkpoint()
        for refusal in seen.refused:
            context.log.warning(f"{refusal.key}: not ingested: {refusal.reason}")
        context.update_cursor(json.dumps(sorted(seen.reported)))
        used = runs_by_key(context.instance, [batch.run_key for batch in seen.ready])
        requested, skipped = 0, []
        for batch in seen.ready:
            partition = feed_partition(batch.spec, batch.batch_id)
            if batch.spec.feed and partition is None:
                context.log.warning(
                    f"{batch.key}: not ingested: it holds no hour of the feed since {batch.spec.feed.start}"
                )
                continue
            if batch.run_key in used:
                skipped.append(f"{batch.key}: {waiting(used[batch.run_key])}")
                context.log.info(skipped[-1])
                continue
            requested += 1
            yield run_request(batch, partition)
        if not requested:
            refused = f"no new ready batch; {len(seen.reported)} refused batch(es) wait for a fix"
            yield dg.SkipReason("; ".join([*skipped, refused]))

    return custody_dropzone


def streams_sensor(specs: SpecSet) -> dg.SensorDefinition | None:
    """None when no spec lands a topic. It ticks twice in the most eager spec's `land_every`
    (between STREAMS_EVERY_SECONDS' bounds), so that a landing due `land_every` after the last
    version waits half a period at most for the tick that requests it, and requests a landing of
    each asset whose records wait past its `land_after` or `land_every`, for the service account
    the daemon runs as."""
    streamed = [spec for spec in specs if spec.reads_topic]
    if not streamed:
        return None
    every = min(spec.stream_source.period for spec in streamed if spec.stream_source)
    low, high = STREAMS_EVERY_SECONDS

    @dg.sensor(
        name=STREAMS_SENSOR,
        asset_selection=[dg.AssetKey([s.key.domain, s.key.name]) for s in streamed],
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=int(min(max(every / 2, low), high)),
        required_resource_keys={"custody"},
        description="Lands each streamed asset's waiting records once `land_after` of them wait, or "
        "`land_every` has passed since its last version while any wait, as the directory's service "
        "account Dagster's daemon runs as; each asset's count of records waiting is observed on it.",
    )
    def custody_streams(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        from governance.errors import CustodyError
        from governance.streams.broker import KafkaAdmin
        from governance.streams.lag import lags
        from governance.streams.settings import KafkaSettings

        custody: CustodyResource = context.resources.custody
        try:
            found = lags(custody.catalog, KafkaAdmin(KafkaSettings.from_env()), streamed, datetime.now(UTC))
        except CustodyError as err:
            context.log.warning(f"the topics were not read: {err}")
            return dg.SensorResult(skip_reason=f"the topics were not read: {err}")
        reported = json.loads(context.cursor) if context.cursor else {}
        observed = [
            dg.AssetObservation(
                dg.AssetKey([lag.key.domain, lag.key.name]),
                metadata={WAITING: dg.MetadataValue.int(lag.waiting), "custody/topic": lag.topic},
            )
            for lag in found
            if reported.get(str(lag.key)) != lag.waiting
        ]
        context.update_cursor(json.dumps({str(lag.key): lag.waiting for lag in found}))
        held = held_back(context.instance, {str(spec.key): spec for spec in streamed}, datetime.now(UTC))
        due = [lag for lag in found if lag.due and str(lag.key) not in held]
        said = [f"{lag.key}: {held.get(str(lag.key), lag.why) if lag.due else lag.why}" for lag in found]
        return dg.SensorResult(
            run_requests=[stream_request(due)] if due else [],
            asset_events=observed,
            skip_reason=None if due else "; ".join(said),
        )

    return custody_streams


def stream_request(due: "list[Lag]") -> dg.RunRequest:
    """One landing of the records waiting of every asset `due`: one run, whose in-process executor
    starts Spark once for all of them, and lands each apart (one that fails stops no other). No run
    key: a landing that failed is tried again, once `held_back` lets it, even if no record came since."""
    return dg.RunRequest(
        asset_selection=[dg.AssetKey([lag.key.domain, lag.key.name]) for lag in due],
        tags={STREAM_TAG: " ".join(str(lag.key) for lag in due)},
    )


def held_back(instance: dg.DagsterInstance, streamed: "dict[str, Spec]", now: datetime) -> dict[str, str]:
    """The streamed assets not to land now, and why: a landing the sensor requested has not
    finished, or the last one failed less than its `land_every` (STREAMS_RETRY_SECONDS at least) ago."""
    records = instance.get_run_records(filters=dg.RunsFilter(tags={SENSOR_NAME_TAG: STREAMS_SENSOR}), limit=1000)
    why: dict[str, str] = {}
    for record in records:  # newest first: each asset's newest run decides
        run = record.dagster_run
        for key in run.tags.get(STREAM_TAG, "").split():
            if key in why or key not in streamed:
                continue
            if run.status in UNFINISHED:
                why[key] = f"its run {run.run_id} lands it"
            elif _failed_to_land(instance, record, key):
                source = streamed[key].stream_source
                wait = max(source.period if source else 0, STREAMS_RETRY_SECONDS)
                ago = now.timestamp() - (record.end_time or 0)
                if ago < wait:
                    why[key] = (
                        f"its run {run.run_id} failed {ago:.0f} s ago (see its log); tried again after {wait:.0f} s"
                    )
            why.setdefault(key, "")
    return {key: said for key, said in why.items() if said}


def _failed_to_land(instance: dg.DagsterInstance, record: dg.RunRecord, key: str) -> bool:
    """Whether a run that ended in failure did not land `key`: others of its assets may have failed."""
    if record.dagster_run.status != dg.DagsterRunStatus.FAILURE or record.end_time is None:
        return False
    landed = instance.get_latest_materialization_event(dg.AssetKey(key.split("/")))
    return landed is None or landed.run_id != record.dagster_run.run_id


def automation_sensor(specs: SpecSet, *, every_seconds: int) -> dg.AutomationConditionSensorDefinition | None:
    """None when no spec declares its automation. Running by default: an owner who declares
    automation means it to run; the daemon's service account still needs the asset's roles."""
    automated = [dg.AssetKey([spec.key.domain, spec.key.name]) for spec in specs if spec.body.automation]
    if not automated:
        return None
    return dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR,
        target=automated,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=every_seconds,
        description="Materializes the assets whose spec declares `automation` when their condition holds, "
        "as the directory's service account Dagster's daemon runs as (the os_users setting maps it).",
    )


def run_request(batch: "ReadyBatch", partition: str | None) -> dg.RunRequest:
    key = batch.spec.key
    return dg.RunRequest(
        run_key=batch.run_key,
        asset_selection=[dg.AssetKey([key.domain, key.name])],
        run_config={"ops": {f"{key.domain}__{key.name}": {"config": {"batch": batch.batch_id}}}},
        tags={REQUESTED_BY_TAG: batch.requested_by, BATCH_TAG: batch.batch_id},
        partition_key=partition,
    )


def runs_by_key(instance: dg.DagsterInstance, run_keys: list[str]) -> dict[str, dg.DagsterRun]:
    """The newest run the sensor launched for each of these run keys. Dagster launches no second
    run for a key, and says so only in the daemon's log: the tick says it instead."""
    if not run_keys:
        return {}
    runs = instance.get_runs(filters=dg.RunsFilter(tags={SENSOR_NAME_TAG: SENSOR, RUN_KEY_TAG: run_keys}))
    newest: dict[str, dg.DagsterRun] = {}
    for run in runs:  # newest first
        newest.setdefault(run.tags[RUN_KEY_TAG], run)
    return newest


def waiting(run: dg.DagsterRun) -> str:
    """Why a batch its run has not ingested is not requested again."""
    if not run.is_finished:
        return f"its run {run.run_id} is {run.status.value}"
    return (
        f"its run {run.run_id} ended {run.status.value} (see its log); fix the batch, then touch "
        "_READY to ingest it again"
    )


def feed_partition(spec: Spec, batch_id: str) -> str | None:
    """The hourly partition a feed's batch lands in; None for other assets, or an hour before the feed's first."""
    from governance.feeds.hours import hour_of_batch

    if spec.feed is None:
        return None
    hour = hour_of_batch(batch_id)
    if hour is None or hour < spec.feed.first_hour:
        return None
    return hour.strftime(PARTITION_FORMAT)


def feeds_sensor(specs: SpecSet) -> dg.SensorDefinition | None:
    """None when no spec declares a feed."""
    feeds = [spec for spec in specs if spec.feed]
    if not feeds:
        return None

    @dg.sensor(
        name=FEEDS_SENSOR,
        minimum_interval_seconds=FEEDS_EVERY_SECONDS,
        required_resource_keys={"custody"},
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Merges the feeds' archives of each ended hour, drops each complete hour into the DropZone "
        "(the DropZone sensor then ingests it), and shows each feed's collectors on its asset.",
    )
    def custody_feeds(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        from governance.feeds.collector import utc_now
        from governance.feeds.replicas import replicas
        from governance.feeds.store import FeedStore
        from governance.feeds.tend import record_refusal, tend

        custody: CustodyResource = context.resources.custody
        settings = custody.settings()
        store = FeedStore(settings.feeds_store)
        reported, shown = feeds_cursor(context.cursor)
        try:
            done = tend(
                store,
                feeds,
                settings.feeds_workspace / "consolidating",
                utc_now(),
                lake=custody.lake,
                catalog=custody.catalog,
            )
            for refused in done.refused:
                context.log.warning(f"{refused.feed} {refused.hour:%Y-%m-%dT%H}: left as it is: {refused.reason}")
                if refused.reason not in reported:
                    reported.add(refused.reason)
                    record_refusal(custody.catalog, f"sensor {FEEDS_SENSOR}", refused.reason, feed=refused.feed)
        finally:
            custody.catalog.checkpoint()
        for dropped in done.dropped:
            context.log.info(f"{dropped.feed}: hour {dropped.hour:%Y-%m-%dT%H} dropped as batch {dropped.batch_id}")
        now = utc_now()
        seen = replicas(store, now)
        events, showing = [], {}
        for spec in feeds:
            health, last = collector_health(spec, seen), shown.get(str(spec.key))
            fresh = due(last, health, now)
            showing[str(spec.key)] = fresh or last
            if fresh:
                events.append(
                    dg.AssetObservation(asset_key=dg.AssetKey([spec.key.domain, spec.key.name]), metadata=health)
                )
        return dg.SensorResult(asset_events=events, cursor=json.dumps({"reported": sorted(reported), "shown": showing}))

    return custody_feeds


def feeds_cursor(cursor: str | None) -> tuple[set[str], dict[str, dict]]:
    """The refusals already recorded, and the health last shown on each feed's asset."""
    saved = json.loads(cursor) if cursor else {}
    if isinstance(saved, list):  # written before the health was kept in it
        return set(saved), {}
    return set(saved.get("reported", [])), dict(saved.get("shown", {}))


def due(last: dict | None, health: dict[str, int | str], now: datetime) -> dict | None:
    """What a feed's asset is to show from now, when it is due: at once when its state changed
    (collectors, the last error, a first download), and at most every HEALTH_EVERY when only its
    counts moved. An observation a minute would bury the asset's materializations."""
    state = _digest({key: health[key] for key in STATE}, health["custody/last_download"] != "never")
    counts = _digest(health)
    if (
        last
        and last.get("state") == state
        and (last.get("counts") == counts or now - datetime.fromisoformat(last["at"]) < HEALTH_EVERY)
    ):
        return None
    return {"state": state, "counts": counts, "at": now.isoformat()}


def _digest(*values: object) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def collector_health(spec: Spec, seen: list[dict]) -> dict[str, int | str]:
    """A feed's collection as its replicas last wrote it: when it last downloaded, and its failures."""
    from governance.feeds.names import feed_id

    counts = [
        (replica, replica["feeds"][feed_id(spec.key)])
        for replica in seen
        if feed_id(spec.key) in replica.get("feeds", {})
    ]
    running = [replica["replica"] for replica, _ in counts if replica["running"]]
    last = max((c.get("last_download") or "" for _, c in counts), default="")
    errors = [c["last_error"] for _, c in counts if c.get("last_error")]
    return {
        "custody/collectors_running": len(running),
        "custody/replicas": ", ".join(running) or "none running",
        "custody/last_download": last or "never",
        "custody/downloads": sum(c.get("downloads", 0) for _, c in counts),
        "custody/failed_downloads": sum(c.get("failed_ticks", 0) for _, c in counts),
        "custody/last_error": max(errors, default="none"),
    }
