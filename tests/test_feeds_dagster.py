"""Feeds in Dagster: hourly partitions, each partition's materialization landing its hour, and the
custody_feeds sensor merging, dropping and showing the collectors' health."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from assets.definitions import definitions_for
from assets.factory import build_assets
from assets.sensors import FEEDS_SENSOR, SENSOR, feeds_cursor
from governance.batches import batch_stamp, ready_batches
from governance.feeds.replicas import beat, new_lease
from governance.feeds.store import FeedStore
from tests.helpers import os_user_is
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
    upload_archive(
        tmp_path, store, hour, [make_download(hour + timedelta(minutes=i), body) for i, body in enumerate(bodies)]
    )


def materialize(feed_specs, resources, partition: str) -> dg.ExecuteInProcessResult:
    with dg.instance_for_test() as instance:
        return dg.materialize(
            build_assets(feed_specs),
            resources=resources,
            instance=instance,
            partition_key=partition,
            tags={"custody/requested_by": "bob"},
            raise_on_error=False,
        )


def test_a_feed_asset_is_hourly_partitioned_from_its_first_hour(feed_specs):
    asset = definitions_for(feed_specs).resolve_assets_def(ASSET)
    assert isinstance(asset.partitions_def, dg.HourlyPartitionsDefinition)
    assert asset.partitions_def.get_first_partition_key() == "2026-11-01-00:00"
    assert asset.specs_by_key[ASSET].metadata["custody/feed"].value == "every 200ms from https://prices.example"


def test_materializing_a_partition_lands_that_hours_batch_as_a_version(
    tmp_path: Path, feed_specs, resources, store, catalog, lake
):
    archive_hour(tmp_path, store)
    land(store, lake, catalog, feed_specs[KEY], HOUR_START + timedelta(hours=2))
    result = materialize(feed_specs, resources, PARTITION)
    assert result.success
    [event] = result.asset_materializations_for_node("market__prices")
    assert event.partition == PARTITION
    assert (event.metadata["custody/label"].value, event.metadata["custody/rows_landed"].value) == ("2026-11-23T14", 3)


def test_a_partition_whose_hour_has_no_ready_batch_fails_saying_why(feed_specs, resources):
    result = materialize(feed_specs, resources, "2026-11-23-15:00")
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert (
        "no ready batch of market/prices for the hour 2026-11-23T15"
        in failure.step_failure_data.user_failure_data.description
    )


def test_the_feeds_sensor_drops_complete_hours_the_dropzone_sensor_requests_their_partition(
    tmp_path: Path, feed_specs, resources, store, lake, settings
):
    os_user_is(settings, "bob")  # who runs the feeds' landing owns the hours' folders: bob, the feed's producer
    archive_hour(tmp_path, store)
    beat(
        store,
        new_lease("east", "one"),
        datetime.now(UTC),
        {
            FEED: {
                "downloads": 7,
                "failed_ticks": 1,
                "last_download": "2026-11-23T14:59:59.000+00:00",
                "last_error": "HTTP 500",
            }
        },
    )
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
    assert (request.partition_key, request.run_key) == (
        PARTITION,
        f"market/prices/{batch}@{batch_stamp(lake, KEY, batch)}",
    )


@pytest.fixture
def health_tick(feed_specs, resources, store):
    """One custody_feeds tick after the collector east/one wrote `counts` for the feed."""
    definitions = definitions_for(feed_specs)
    sensor = definitions.resolve_sensor_def(FEEDS_SENSOR)
    lease = new_lease("east", "one")
    with dg.instance_for_test() as instance:

        def tick(cursor: str | None, **counts) -> dg.SensorResult:
            beat(store, lease, datetime.now(UTC), {FEED: {"last_download": "2026-11-23T14:59:59.000+00:00", **counts}})
            context = dg.build_sensor_context(
                instance=instance, resources=resources, definitions=definitions, cursor=cursor
            )
            return sensor.evaluate_tick(context)

        yield tick


def aged(cursor: str, minutes: int) -> str:
    """The cursor as if the health it holds had been shown `minutes` earlier."""
    saved = json.loads(cursor)
    for shown in saved["shown"].values():
        shown["at"] = (datetime.fromisoformat(shown["at"]) - timedelta(minutes=minutes)).isoformat()
    return json.dumps(saved)


def test_a_feeds_counts_reach_its_asset_at_most_every_15_minutes(health_tick):
    first = health_tick(None, downloads=7)
    same = health_tick(first.cursor, downloads=7)
    more = health_tick(same.cursor, downloads=8)
    later = health_tick(aged(more.cursor, 16), downloads=9)
    assert [len(result.asset_events) for result in (first, same, more, later)] == [1, 0, 0, 1]
    assert later.asset_events[0].metadata["custody/downloads"].value == 9


def test_a_new_error_reaches_the_feeds_asset_at_the_next_tick(health_tick):
    first = health_tick(None, downloads=7)
    failing = health_tick(first.cursor, downloads=7, failed_ticks=1, last_error="HTTP 503")
    [observation] = failing.asset_events
    assert observation.metadata["custody/last_error"].value == "HTTP 503"


def test_a_feeds_sensor_cursor_from_before_keeps_its_recorded_refusals():
    assert feeds_cursor('["a refusal"]') == ({"a refusal"}, {})
