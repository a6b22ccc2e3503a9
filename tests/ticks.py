"""Ticks of schedules and sensors, as Dagster's daemon writes them to an instance before it submits the
runs they launch, and a run submitted for one as the daemon submits it: decided by Custody's run
coordinator's rules (assets/launchers.py), then executed here."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import dagster as dg

from assets.dagster_internals import InstigatorType, TickData, TickStatus
from assets.factory import REQUESTED_BY_TAG
from assets.launchers import Deciding, established
from governance.spec import Spec
from resources import CustodyResource

SCHEDULED_AT = datetime(2026, 12, 2, 2, 30, tzinfo=UTC)


def tick(
    instance: dg.DagsterInstance,
    name: str,
    kind: InstigatorType,
    status: TickStatus = TickStatus.STARTED,
    reserved: Sequence[str] = (),
) -> str:
    """The id of a new tick of the schedule or sensor `name`, reserving the runs `reserved`."""
    made = instance.create_tick(
        TickData(
            instigator_origin_id=f"{name}-origin",
            instigator_name=name,
            instigator_type=kind,
            status=status,
            timestamp=SCHEDULED_AT.timestamp(),
            selector_id=f"{name}-selector",
            run_ids=[],
            reserved_run_ids=list(reserved),
        )
    )
    return str(made.tick_id)


def scheduled_tags(tick_id: str, name: str, at: datetime = SCHEDULED_AT) -> dict[str, str]:
    """The tags the daemon gives a run a tick of schedule `name` launched."""
    return {"dagster/schedule_name": name, "dagster/tick": tick_id, ".dagster/scheduled_execution_time": at.isoformat()}


def submitted_for_tick(
    instance: dg.DagsterInstance,
    custody: CustodyResource,
    tags: Mapping[str, str],
    landing: Spec | None = None,
    run_id: str | None = None,
) -> tuple[str, dict[str, str]]:
    """A run with `tags`, decided as the daemon submits it: its id, and its tags once the coordinator
    has named whom it is for (which is recorded under its id)."""
    run = dg.DagsterRun(job_name="__ASSET_JOB", run_id=run_id or str(uuid.uuid4()), tags=dict(tags))
    identity = established(Deciding(instance, custody.catalog, custody.policy(), custody.lake), run, landing)
    return run.run_id, {**tags, REQUESTED_BY_TAG: identity.user}
