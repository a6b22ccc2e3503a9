"""Feeds in Dagster: hourly partitions, each partition's materialization landing its hour, and the
custody_feeds sensor merging, dropping and showing the collectors' health."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from assets.definitions import definitions_for
from assets.factory import build_assets
from assets.sensors import FEEDS_SENSOR, SENSOR, feeds_cursor
from governance.batches import ready_batches
from governance.feeds.replicas import beat, new_lease
from governance.feeds.store import FeedStore
from tests.test_feeds import (
    FEED,
    HOUR_START,
    KEY,
    feed_spec,
    land,
    load,
    make_download,
    upload_archive,
)

ASSET = dg.AssetKey(["market", "prices"])
PARTITION = "2026-11-23-14:00"


@pytest.fixture
def feed_specs(tmp_path: Path):
    return load(feed_spec(tmp_path / "specs", "https://user:pw@prices.example/v1/list?key=${KEY}"))


@pytest.fixture
def store(settings) -> FeedStore:
    return FeedStore(settings.feeds_store)


def archive_hour(tmp_path: Path, store: FeedStore, hour: datetime = HOUR_START) -> None:
    bodies = [b'{"tick": %d, "price": %d}' % (i, 100 + i) for i in range(3)]
    upload_archive(tmp_path, store, hour, [make_download(hour + timedelta(minutes=i), body) for i, body in enumerate(bodies)])


def materialize(feed_specs, resources, partition: str) -> dg.ExecuteInProcessResult:
    with dg.instance_for_test() as instance:
        return dg.materialize(build_assets(feed_specs), resources=resources, instance=instance, partition_key=partition,
                              tags={"custody/requested_by": "bob"}, raise_on_error=False)


def test_a_feed_asset_is_hourly_partitioned_from_its_first_hour(feed_specs):
    asset = definitions_for(feed_specs).resolve_assets_def(ASSET)
    assert isinstance(asset.partitions_def, dg.HourlyPartitionsDefinition)
    assert asset.partitions_def.get_first_partition_key() == "2026-11-01-00:00"
    assert asset.specs_by_key[ASSET].metadata["custody/feed"].value == "every 200ms from https://prices.example"


def test_materializing_a_partition_lands_that_hours_batch_as_a_version(tmp_path: Path, feed_specs, resources, store, catalog, lake):
    archive_hour(tmp_path, store)
    land(store, lake, catalog, feed_specs[KEY], HOUR_START + timedelta(hours=2))
    result = materialize(feed_specs, resources, PARTITION)
    assert result.success
    [event] = result.asset_materializations_for_node("market__prices")
    assert event.partition == PARTITION
    assert (event.metadata["label"].value, event.metadata["rows_landed"].value) == ("2026-11-23T14", 3)


def test_a_partition_whose_hour_has_no_ready_batch_fails_saying_why(feed_specs, resources):
    result = materialize(feed_specs, resources, "2026-11-23-15:00")
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "no ready batch of market/prices for the hour 2026-11-23T15" in failure.step_failure_data.user_failure_data.description


def test_the_feeds_sensor_drops_complete_hours_the_dropzone_sensor_requests_their_partition(
        tmp_path: Path, feed_specs, resources, store, lake):
    archive_hour(tmp_path, store)
    beat(store, new_lease("east", "one"), datetime.now(UTC), {FEED: {"downloads": 7, "failed_ticks": 1,
                                                                    "last_download": "2026-11-23T14:59:59.000+00:00",
                                                                    "last_error": "HTTP 500"}})
    definitions = definitions_for(feed_specs)
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources=resources, definitions=definitions)
        result = definitions.resolve_sensor_def(FEEDS_SENSOR).evaluate_tick(context)
        [batch] = ready_batches(lake, KEY)
        [observation] = result.asset_events
        assert observation.asset_key == ASSET
        assert observation.metadata["custody/downloads"].value == 7
        assert observation.metadata["custody/collectors_running"].value == 1
        assert observation.metadata["custody/last_error"].value == "HTTP 500"
        context = dg.build_sensor_context(instance=instance, resources=resources, definitions=definitions)
        [request] = definitions.resolve_sensor_def(SENSOR).evaluate_tick(context).run_requests
    assert (request.partition_key, request.run_key) == (PARTITION, f"market/prices/{batch}")


def test_the_feeds_sensor_records_a_feeds_health_again_only_when_it_changed(feed_specs, resources, store):
    definitions = definitions_for(feed_specs)
    sensor = definitions.resolve_sensor_def(FEEDS_SENSOR)
    lease = new_lease("east", "one")

    def tick(instance, cursor, downloads):
        beat(store, lease, datetime.now(UTC), {FEED: {"downloads": downloads, "last_download": "2026-11-23T14:59:59.000+00:00"}})
        context = dg.build_sensor_context(instance=instance, resources=resources, definitions=definitions, cursor=cursor)
        return sensor.evaluate_tick(context)

    with dg.instance_for_test() as instance:
        first = tick(instance, None, 7)
        same = tick(instance, first.cursor, 7)
        more = tick(instance, same.cursor, 8)
    assert [len(result.asset_events) for result in (first, same, more)] == [1, 0, 1]
    assert more.asset_events[0].metadata["custody/downloads"].value == 8


def test_a_feeds_sensor_cursor_from_before_keeps_its_recorded_refusals():
    assert feeds_cursor('["a refusal"]') == ({"a refusal"}, {})
