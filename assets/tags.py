"""The run tags Dagster sets on the runs it launches, by the names its documentation gives them.
tests/test_dagster_internals.py holds each to Dagster's own constant."""

from __future__ import annotations

BACKFILL_ID_TAG = "dagster/backfill"
PARENT_RUN_ID_TAG = "dagster/parent_run_id"
PARTITION_NAME_TAG = "dagster/partition"
RUN_KEY_TAG = "dagster/run_key"
SCHEDULE_NAME_TAG = "dagster/schedule_name"
SENSOR_NAME_TAG = "dagster/sensor_name"
TICK_ID_TAG = "dagster/tick"
AUTOMATION_CONDITION_TAG = "dagster/from_automation_condition"
# When a schedule's tick was due, as the daemon tags the run it launches.
SCHEDULED_EXECUTION_TIME_TAG = ".dagster/scheduled_execution_time"
