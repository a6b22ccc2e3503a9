"""A streamed asset lands its topic exactly once, on a real broker and Spark: each version holds the
records since the one before, its offset ranges committed with it; bad records are quarantined
naming their partition and offset; offsets Kafka deleted before they were landed are a recorded gap."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from datetime import time as clock
from itertools import pairwise
from pathlib import Path
from random import Random

import dagster as dg
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from sqlmodel import select

from assets.definitions import definitions_for
from assets.factory import REQUESTED_BY_TAG
from assets.sensors import STREAMS_SENSOR, held_back, stream_request, streams_sensor
from assets.tags import SENSOR_NAME_TAG
from governance.access.reads import read_table
from governance.audit import audit
from governance.catalog import Catalog
from governance.catalog.models import ColumnLineageRow, StreamRead
from governance.checks import Check, checks_for
from governance.config import Settings
from governance.errors import InvalidInput, SourceUnavailable
from governance.lake import open_lake
from governance.lineage.graph import provenance
from governance.repair import version_problem
from governance.runs import RunRequest
from governance.spec import SpecSet, load_specs
from governance.streams.broker import KafkaAdmin
from governance.streams.demo import CLICKS, PRODUCT_CLICKS
from governance.streams.demo import main as demo_producer
from governance.streams.lag import Lag
from governance.streams.landing import land_topic
from governance.versions import read_dataframe
from governance.zones import AssetKey, VersionRef
from resources import CustodyResource
from tests.conftest import ROOT, STREAM_SPEC
from tests.helpers import all_versions, cli, iceberg, recorded
from tests.kafka_server import kafka_environment, produce, produce_json, settings_of


def land(spark, catalog, lake, kafka, spec):
    return land_topic(spark, catalog, lake, spec, RunRequest("svc-custody"), settings=settings_of(kafka))


def send(kafka, topic: str, records: list[dict]) -> None:
    settings = settings_of(kafka)
    assert produce_json(kafka, settings.user, settings.password, topic, records) == []


def reads(catalog, version_id: int) -> list[StreamRead]:
    with catalog.reading() as session:
        return list(
            session.exec(select(StreamRead).where(StreamRead.version_id == version_id).order_by(StreamRead.partition))
        )


def test_three_landings_are_three_contiguous_versions_whose_counts_add_up(spark, catalog, lake, kafka, stream):
    spec, topic = stream()
    produced = 0
    rows = []
    for batch in (5, 7, 3):
        send(kafka, topic, [{"page": f"/p/{produced + i}", "n": produced + i} for i in range(batch)])
        produced += batch
        rows.append(land(spark, catalog, lake, kafka, spec))
    assert [row.number for row in rows] == [1, 2, 3]
    assert all(finding.passed for row in rows for finding in audit(catalog, lake, spec, row, checks_for(spec)))
    assert [row.rows for row in rows] == [5, 7, 3] and sum(row.rows for row in rows) == produced
    ranges = [reads(catalog, row.stored_id) for row in rows]
    for before, after in pairwise(ranges):
        assert [r.end_offset for r in before] == [r.start_offset for r in after] == [r.follows for r in after]
    assert all(r.start_offset == 0 and r.follows == 0 for r in ranges[0])
    landed = spark.read.parquet(*[str(lake.root / row.path) for row in rows])
    assert sorted(r.n for r in landed.select("n").collect()) == list(range(produced))
    assert set(landed.columns) >= {"page", "n", "kafka_partition", "kafka_offset", "kafka_timestamp"}
    with catalog.reading() as session:
        edges = session.exec(select(ColumnLineageRow).where(ColumnLineageRow.version_id == rows[0].stored_id))
        depends = {(edge.output_column, edge.input_version_id, edge.input_column) for edge in edges}
    assert {("page", None, "page"), ("n", None, "n")} <= depends


def test_a_landing_with_nothing_new_is_refused_and_lands_nothing(spark, catalog, lake, kafka, stream):
    spec, topic = stream()
    send(kafka, topic, [{"page": "/"}])
    land(spark, catalog, lake, kafka, spec)
    with pytest.raises(InvalidInput, match="no record of topic .* since its last version: nothing to land"):
        land(spark, catalog, lake, kafka, spec)
    assert catalog.versions(spec.key)[-1].number == 1


def test_a_topic_made_compacted_after_it_was_applied_is_refused_and_lands_nothing(spark, catalog, lake, kafka, stream):
    spec, topic = stream()
    send(kafka, topic, [{"page": "/"}])
    admin = KafkaAdmin(settings_of(kafka))
    entry = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin.client.incremental_alter_configs([resource])[resource].result()
    with pytest.raises(InvalidInput, match=f"topic {topic} .* is compacted"):
        land(spark, catalog, lake, kafka, spec)
    assert catalog.versions(spec.key) == []
    assert recorded(catalog, action="ingestion.failed")


def test_a_broker_that_cannot_be_reached_fails_the_landing_naming_it_and_lands_nothing(
    spark, catalog, lake, kafka, stream
):
    spec, topic = stream()
    send(kafka, topic, [{"page": "/"}])
    away = replace(settings_of(kafka), bootstrap="127.0.0.1:1")
    with pytest.raises(SourceUnavailable, match="Kafka at 127.0.0.1:1: cannot describe"):
        land_topic(spark, catalog, lake, spec, RunRequest("svc-custody"), settings=away)
    assert catalog.newest_committed(spec.key) is None
    [failed] = recorded(catalog, action="ingestion.failed")
    assert failed["asset_key"] == "sales/clicks" and "Kafka at 127.0.0.1:1" in failed["details"]["error"]


def test_bad_records_are_quarantined_naming_their_partition_and_offset(spark, catalog, lake, kafka, stream):
    spec, topic = stream(partitions=1)
    settings = settings_of(kafka)
    values = [
        json.dumps({"page": "/a"}).encode(),
        b"not json",
        "é".encode("latin-1"),  # another encoding
        json.dumps({"page": "/b"}).encode(),
        ("[" * 1200 + "]" * 1200).encode(),  # deeper than any record may nest
        None,  # a key, and no value
        b"  ",
        json.dumps({"page": "/c"}, indent=2).encode(),  # one record over several lines
        b'{"page": "/d\n"}',  # a raw line break within a string
    ]
    assert produce(kafka, settings.user, settings.password, topic, values) == []
    row = land(spark, catalog, lake, kafka, spec)
    assert (row.rows, row.rows_quarantined) == (3, 6)
    by_offset = quarantined(lake, row)
    assert set(by_offset) == {f"{topic} partition 0 offset {n}" for n in (1, 2, 4, 5, 6, 8)}
    assert by_offset[f"{topic} partition 0 offset 5"] == "the record has no value, only a key"
    assert by_offset[f"{topic} partition 0 offset 2"] == "the value is not UTF-8 text"
    assert by_offset[f"{topic} partition 0 offset 6"] == "the value is empty"
    assert "JSON" in by_offset[f"{topic} partition 0 offset 1"]
    assert "nested deeper than" in by_offset[f"{topic} partition 0 offset 4"]
    assert "JSON" in by_offset[f"{topic} partition 0 offset 8"]
    assert all(finding.passed for finding in audit(catalog, lake, spec, row, (Check.ROWS_ADD_UP,)))


def quarantined(lake, row, field: str = "reason") -> dict[str, str]:
    """Each record the version quarantined, by its place, with the reason (or another `field`)."""
    found = [
        json.loads(line)
        for file in (lake.root / row.quarantine_path).glob("part-*.json")
        for line in file.read_text().splitlines()
    ]
    return {q["file"]: q[field] for q in found}


def test_records_with_fields_that_cannot_land_are_quarantined_and_those_after_them_land(
    spark, catalog, lake, kafka, stream
):
    spec, topic = stream(partitions=1)
    records = [{"page": "/a"}, {"Page": "/b"}, {"a": {"b": 1}}, {"a__b": 2}, {"a": {"b": 3}}, {"x\u0007": 1}]
    send(kafka, topic, [*records, {"page": "/c"}, {"Kafka_Offset": 70}])
    row = land(spark, catalog, lake, kafka, spec)
    assert quarantined(lake, row) == {
        f"{topic} partition 0 offset 1": "field Page would land in one column with field page of other records",
        f"{topic} partition 0 offset 3": "field a__b would land in one column with field a.b of other records",
        f"{topic} partition 0 offset 5": "field x\\x07 holds a control character",
        f"{topic} partition 0 offset 7": "field Kafka_Offset would land in column kafka_offset, which Custody adds",
    }
    kept = quarantined(lake, row, "record")
    assert kept[f"{topic} partition 0 offset 3"] == json.dumps({"a__b": 2})  # the record as it came
    landed = read_dataframe(spark, lake, row)
    assert sorted(landed.columns) == ["a__b", "kafka_offset", "kafka_partition", "kafka_timestamp", "page"]
    assert sorted((r.kafka_offset, r.page, r.a__b) for r in landed.collect()) == [
        (0, "/a", None),
        (2, None, 1),
        (4, None, 3),
        (6, "/c", None),
    ]


def test_a_field_the_spec_does_not_declare_is_quarantined_and_one_no_record_holds_is_null(
    spark, catalog, lake, kafka, stream
):
    columns = "[{name: page, type: string}, {name: ms, type: long}, {name: referrer_id, type: long}]"
    spec, topic = stream(partitions=1, more=f"columns: {columns}\n")
    send(kafka, topic, [{"page": "/a", "ms": 5}, {"page": "/b", "ms": 1, "referrer": "/"}, {"page": "/c"}])
    row = land(spark, catalog, lake, kafka, spec)
    assert quarantined(lake, row) == {
        f"{topic} partition 0 offset 1": "field referrer is not a column the spec declares"
    }
    landed = read_dataframe(spark, lake, row).collect()
    assert sorted((r.page, r.ms, r.referrer_id) for r in landed) == [("/a", 5, None), ("/c", None, None)]
    [schema] = audit(catalog, lake, spec, row, (Check.SCHEMA_MATCHES_SPEC,))
    assert schema.passed, schema.summary


def test_a_record_over_the_topic_s_size_limit_is_refused_to_its_producer_and_one_under_it_lands(
    spark, catalog, lake, kafka, stream
):
    spec, topic = stream(partitions=1)
    # The client's own limit raised, so that the broker's is the one met.
    producer = Producer({**settings_of(kafka).client_config(), "message.max.bytes": 4_000_000})
    outcomes: list[str] = []
    for size in (900_000, 2_000_000):
        record = json.dumps({"page": "/", "blob": "x" * size}).encode()
        producer.produce(topic, record, on_delivery=lambda err, _: outcomes.append(err.name() if err else "written"))
        assert producer.flush(15) == 0
    assert outcomes == ["written", "MSG_SIZE_TOO_LARGE"]
    row = land(spark, catalog, lake, kafka, spec)
    assert (row.rows, row.rows_quarantined) == (1, 0)


def test_offsets_kafka_deleted_before_they_were_landed_are_a_recorded_gap(spark, catalog, lake, kafka, stream):
    spec, topic = stream(partitions=1)
    send(kafka, topic, [{"n": n} for n in range(5)])
    land(spark, catalog, lake, kafka, spec)
    send(kafka, topic, [{"n": n} for n in range(5, 10)])
    # What retention does to old segments, done at once: offsets 5, 6 and 7 are gone.
    admin = KafkaAdmin(settings_of(kafka))
    admin.client.delete_records([TopicPartition(topic, 0, 8)])[TopicPartition(topic, 0, 8)].result()
    row = land(spark, catalog, lake, kafka, spec)
    assert row.rows == 2
    [read] = reads(catalog, row.stored_id)
    assert (read.follows, read.start_offset, read.end_offset) == (5, 8, 10)
    [finding] = audit(catalog, lake, spec, row, (Check.STREAM_CONTIGUOUS,))
    assert not finding.passed and "missing: 3 in partition 0" in finding.description
    [gap] = recorded(catalog, action="stream.gap")
    assert gap["version"] == 2 and gap["details"] == {
        "topic": topic,
        "partition": 0,
        "from": 5,
        "to": 8,
        "offsets_lost": 3,
    }


def test_a_streamed_version_s_provenance_names_its_ranges_times_and_who_could_write_them(
    spark, catalog, lake, kafka, stream
):
    spec, topic = stream(partitions=1)
    send(kafka, topic, [{"n": n} for n in range(4)])
    row = land(spark, catalog, lake, kafka, spec)
    node = provenance(catalog, VersionRef.parse(row.ref)).to_dict()
    stream_of = node["stream"]
    assert stream_of["topic"] == topic and stream_of["writers"] == ["bob"]
    [part] = stream_of["partitions"]
    assert (part["partition"], part["start_offset"], part["end_offset"], part["records"]) == (0, 0, 4, 4)
    assert part["first_record_at"] <= part["last_record_at"]


def test_the_streams_sensor_ticks_twice_in_the_most_eager_spec_s_period(tmp_path):
    folder = tmp_path / "specs" / "sales"
    folder.mkdir(parents=True)
    for name, every in (("clicks", "10s"), ("views", "1m")):
        body = STREAM_SPEC.replace("TOPIC", f"sales.{name}").replace("PARTITIONS", "1").replace("RECORDS", "json")
        body = body.replace("land_after: LAND_AFTER", f"land_after: 100, land_every: {every}")
        (folder / f"{name}.yaml").write_text(body, encoding="utf-8")
    sensor = streams_sensor(load_specs(folder.parent, transform_packages=("assets.transforms",)))
    assert sensor is not None and sensor.minimum_interval_seconds == 5


def test_the_sensor_requests_a_landing_of_waiting_records_and_observes_the_lag(
    spark, catalog, lake, kafka, stream, settings, monkeypatch
):
    spec, topic = stream(land_after=1)
    for name, value in kafka_environment(kafka).items():
        monkeypatch.setenv(name, value)
    definitions = definitions_for(SpecSet(spec.file.parent.parent, {spec.key: spec}))
    sensor = definitions.resolve_sensor_def(STREAMS_SENSOR)
    custody = CustodyResource(home=str(settings.home), catalog_url=settings.catalog_url, specs_approval="off")
    instance = dg.DagsterInstance.ephemeral()

    def evaluated(cursor: str | None = None):
        context = dg.build_sensor_context(
            instance=instance, resources={"custody": custody}, cursor=cursor, definitions=definitions
        )
        result = sensor.evaluate_tick(context)
        return result, result.cursor

    send(kafka, topic, [{"n": n} for n in range(3)])
    first, cursor = evaluated()
    [request] = first.run_requests
    assert request.asset_selection == [dg.AssetKey(["sales", "clicks"])]
    assert request.tags["custody/stream"] == "sales/clicks"
    assert REQUESTED_BY_TAG not in request.tags  # the run is for the daemon's service account
    [observed] = first.asset_events
    assert observed.metadata["custody/records_waiting"] == dg.MetadataValue.int(3)

    land(spark, catalog, lake, kafka, spec)
    after, cursor = evaluated(cursor)
    assert not after.run_requests and "sales/clicks: no record waits" in after.skip_message
    assert [event.metadata["custody/records_waiting"] for event in after.asset_events] == [dg.MetadataValue.int(0)]
    again, _ = evaluated(cursor)
    assert again.asset_events == []  # an unchanged count is not observed again

    send(kafka, topic, [{"n": 3}])
    landing = dg.DagsterRun(job_name="__ASSET_JOB", tags={SENSOR_NAME_TAG: STREAMS_SENSOR, **request.tags})
    instance.add_run(landing)
    busy, _ = evaluated(cursor)
    assert not busy.run_requests and f"its run {landing.run_id} lands it" in busy.skip_message
    instance.report_run_failed(instance.get_run_by_id(landing.run_id))
    failed, _ = evaluated(cursor)
    assert not failed.run_requests and f"its run {landing.run_id} failed" in failed.skip_message


def test_one_run_lands_every_due_asset_and_a_failure_holds_back_only_the_assets_it_did_not_land(stream):
    spec, _ = stream(partitions=1)
    due = [Lag(AssetKey("sales", name), "t", 5, ((0, 5),), None, True, "") for name in ("a", "b")]
    request = stream_request(due)
    assert request.asset_selection == [dg.AssetKey(["sales", "a"]), dg.AssetKey(["sales", "b"])]

    @dg.asset(key=["sales", "a"])
    def landed() -> None:
        """Lands."""

    @dg.asset(key=["sales", "b"])
    def failing() -> None:
        """Fails."""
        raise RuntimeError("the topic is gone")

    instance = dg.DagsterInstance.ephemeral()
    tags = {SENSOR_NAME_TAG: STREAMS_SENSOR, **request.tags}
    run = dg.materialize([landed, failing], instance=instance, tags=tags, raise_on_error=False)
    assert not run.success
    held = held_back(instance, {"sales/a": spec, "sales/b": spec}, datetime.now(UTC))
    assert list(held) == ["sales/b"] and f"its run {run.run_id} failed" in held["sales/b"]


def test_records_deleted_before_the_first_landing_are_a_gap_too(spark, catalog, lake, kafka, stream):
    spec, topic = stream(partitions=1)
    send(kafka, topic, [{"n": n} for n in range(4)])
    admin = KafkaAdmin(settings_of(kafka))
    admin.client.delete_records([TopicPartition(topic, 0, 3)])[TopicPartition(topic, 0, 3)].result()
    row = land(spark, catalog, lake, kafka, spec)
    assert row.rows == 1
    [gap] = recorded(catalog, action="stream.gap")
    assert (gap["details"]["from"], gap["details"]["to"]) == (0, 3)


def test_a_record_s_own_partition_offset_and_timestamp_fields_land_beside_kafka_s(spark, catalog, lake, kafka, stream):
    spec, topic = stream(partitions=1)
    send(kafka, topic, [{"partition": "p7", "offset": 70, "timestamp": "noon"}])
    row = land(spark, catalog, lake, kafka, spec)
    [landed] = spark.read.parquet(str(lake.root / row.path)).collect()
    assert (landed.partition, landed.offset, landed.timestamp) == ("p7", 70, "noon")
    assert (landed.kafka_partition, landed.kafka_offset) == (0, 0)


def test_text_records_land_as_one_value_column(spark, catalog, lake, kafka, stream):
    spec, topic = stream(partitions=1, records="text")
    settings = settings_of(kafka)
    assert produce(kafka, settings.user, settings.password, topic, [b"GET /", b"GET /about"]) == []
    row = land(spark, catalog, lake, kafka, spec)
    landed = spark.read.parquet(str(lake.root / row.path))
    assert sorted((r.value, r.kafka_offset) for r in landed.collect()) == [("GET /", 0), ("GET /about", 1)]


def test_a_version_s_files_each_hold_one_day_and_its_table_is_partitioned_by_the_day(
    spark, catalog, settings, kafka, stream
):
    spec, topic = stream(partitions=1)
    midnight = datetime.combine(datetime.now(UTC).date(), clock(), UTC)
    at = [midnight - timedelta(minutes=2), midnight - timedelta(minutes=1), midnight + timedelta(minutes=1)]
    values = [json.dumps({"page": f"/p{number}"}).encode() for number in range(3)]
    credentials = settings_of(kafka)
    assert produce(kafka, credentials.user, credentials.password, topic, values, at) == []
    lake = open_lake(settings)
    row = land(spark, catalog, lake, kafka, spec)
    table = iceberg(settings).load_table(("sales", "clicks"))
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("kafka_timestamp_day", "day")]
    files = table.inspect.files().to_pylist()
    held = sorted((f["partition"]["kafka_timestamp_day"], f["record_count"]) for f in files)
    assert held == [(midnight.date() - timedelta(days=1), 2), (midnight.date(), 1)]
    for file in files:
        days = {r.kafka_timestamp.date() for r in spark.read.parquet(file["file_path"]).collect()}
        assert days == {file["partition"]["kafka_timestamp_day"]}
    today = table.scan(row_filter=f"kafka_timestamp >= '{midnight.isoformat()}'")
    assert [task.file.record_count for task in today.plan_files()] == [1]
    assert row.rows == 3


KILLS = 20
# Seconds from Spark being up in the child to its landing's end, about: each kill falls in them.
LANDING_SECONDS = 6.0


def kill_landing(settings: Settings, specs: Path, kafka, after: float) -> bool:
    """Start a landing in a process of its own and SIGKILL it `after` seconds into the landing;
    whether it was still landing then (else it had committed and ended)."""
    env = {
        **os.environ,
        **kafka_environment(kafka),
        "CUSTODY_CATALOG_URL": settings.catalog_url,
        "PYTHONPATH": str(ROOT),
    }
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "stream_crash_child.py"), str(settings.home), str(specs)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started, deadline = settings.home / "started", time.monotonic() + 240
    while not started.exists():
        if child.poll() is not None:
            raise AssertionError(f"the landing ended before it began: {child.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, "the landing's Spark never started"
        time.sleep(0.05)
    started.unlink()
    try:
        child.wait(after)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        return True
    assert child.returncode == 0, child.stderr.read()[-2000:]
    return False


def test_landings_killed_at_random_moments_land_every_record_once(spark, catalog, settings, kafka, stream):
    spec, topic = stream(partitions=2)
    lake = open_lake(settings)
    sent, interrupted = 0, 0
    for seed in range(KILLS):
        send(kafka, topic, [{"seed": seed, "n": n} for n in range(25)])
        sent += 25
        interrupted += kill_landing(
            settings, settings.home.parent / "specs", kafka, Random(seed).uniform(0, LANDING_SECONDS)
        )
    send(kafka, topic, [{"seed": KILLS, "n": 0}])
    last = land(spark, catalog, lake, kafka, spec)
    versions = sorted(
        (row for row in all_versions(catalog) if row.asset_key == "sales/clicks"), key=lambda row: row.number
    )
    assert [row.number for row in versions] == list(range(1, last.number + 1))
    for partition in (0, 1):
        held = [
            (r.start_offset, r.end_offset)
            for row in versions
            for r in reads(catalog, row.id)
            if r.partition == partition
        ]
        assert held[0][0] == 0 and all(end == start for (_, end), (start, _) in pairwise(held)), held
    landed = [
        (r.kafka_partition, r.kafka_offset) for row in versions for r in read_dataframe(spark, lake, row).collect()
    ]
    assert len(landed) == len(set(landed)) == sent + 1
    assert all(version_problem(lake, lake.at(row.path), row.data_version) is None for row in versions)
    assert recorded(catalog, action="stream.gap") == []
    assert interrupted >= KILLS // 2, f"only {interrupted} of {KILLS} kills fell in a landing"


def test_the_streaming_demo_lands_bob_s_clicks_and_joins_them_with_the_catalogue(
    cli_env, spark, kafka, capsys, monkeypatch
):
    monkeypatch.setenv("CUSTODY_SPECS", str(ROOT / "assets" / "streaming"))
    for name, value in kafka_environment(kafka).items():
        monkeypatch.setenv(name, value)
    code, out, err = cli(capsys, "demo", "--streams")
    assert code == 0, err
    assert "bob sent 300 clicks to sales.clicks" in err
    assert "committed sales/clicks@1" in out and "committed sales/product_clicks@1" in out
    assert "topic sales.clicks" in out and "could write it then bob" in out
    catalog = Catalog.from_url(cli_env.catalog_url)
    [clicks] = catalog.versions(CLICKS)
    assert (clicks.rows, clicks.rows_quarantined) == (297, 3)
    lake = open_lake(cli_env)
    clicks_of = {r["product_id"]: r["clicks"] for r in read_table(lake, catalog.latest(PRODUCT_CLICKS)).to_pylist()}
    landed = read_dataframe(spark, lake, clicks).groupBy("product_id").count().collect()
    assert clicks_of == {r.product_id: r["count"] for r in landed if r.product_id is not None}


def test_the_demo_producer_is_refused_by_the_broker_for_a_user_without_the_producer_role(
    kafka, stream, monkeypatch, capsys
):
    _, topic = stream(partitions=1)
    settings = settings_of(kafka)
    monkeypatch.setenv("CUSTODY_KAFKA_BOOTSTRAP", settings.bootstrap)
    KafkaAdmin(settings).set_password("eve", "eve-kafka")
    monkeypatch.setattr("sys.stdin", io.StringIO("eve-kafka\n"))
    assert demo_producer(["eve", "--count", "3", "--topic", topic]) == 2
    assert f"error: eve may not write {topic}" in capsys.readouterr().err
    assert KafkaAdmin(settings).watermarks(topic, 1) == {0: (0, 0)}
