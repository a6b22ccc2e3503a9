"""The DropZone sensor: one ingestion run per ready batch, for the requester its `_batch.yaml` names."""

# No `from __future__ import annotations` here: Dagster reads the sensor function's annotations at runtime.

import json
from collections.abc import Iterator

import dagster as dg

from assets.factory import REQUESTED_BY_TAG
from governance.spec import SpecSet
from resources import CustodyResource

SENSOR = "custody_dropzone"
BATCH_TAG = "custody/batch"
EVERY_SECONDS = 30


def dropzone_sensor(specs: SpecSet, *, running: bool = True) -> dg.SensorDefinition | None:
    """None when no spec is a landing asset: there is no DropZone to watch. `running` is its state
    until someone starts or stops it in the UI (CUSTODY_DROPZONE_SENSOR=off: stopped)."""
    landing = [spec for spec in specs if spec.takes_batches]
    if not landing:
        return None

    @dg.sensor(
        name=SENSOR, asset_selection=[dg.AssetKey([s.key.domain, s.key.name]) for s in landing],
        default_status=dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED, minimum_interval_seconds=EVERY_SECONDS,
        required_resource_keys={"custody"},
        description="One ingestion run per ready DropZone batch, as the user its _batch.yaml names; "
                    "a batch that user may not ingest is refused in the ledger and reported once.",
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
        for batch in seen.ready:
            yield dg.RunRequest(
                run_key=batch.key,
                asset_selection=[dg.AssetKey([batch.spec.key.domain, batch.spec.key.name])],
                run_config={"ops": {f"{batch.spec.key.domain}__{batch.spec.key.name}": {"config": {"batch": batch.batch_id}}}},
                tags={REQUESTED_BY_TAG: batch.requested_by, BATCH_TAG: batch.batch_id},
            )
        if not seen.ready:
            yield dg.SkipReason(f"no new ready batch; {len(seen.reported)} refused batch(es) wait for a fix")

    return custody_dropzone
