"""Ledger housekeeping as a Dagster job, run every night by a schedule."""

# No `from __future__ import annotations` here: Dagster reads the op's annotations at runtime.

from dataclasses import asdict

import dagster as dg

from resources import CustodyResource

NIGHTLY = "30 2 * * *"


@dg.op(description="Roll old ledger entries over into segments, then age off what the retention lets go.")
def maintain_ledger(context: dg.OpExecutionContext, custody: CustodyResource) -> dg.Output[None]:
    # Imported in the step: loading the code location does not need the catalog's tables.
    from assets.factory import requester
    from governance.maintenance import maintain

    # The schedule's runs are for the service account the daemon runs as; one launched from the UI
    # is for whoever launched it.
    identity = requester(custody.catalog, custody.lake, custody.policy(), context.run_id, context.run.tags, None)
    report = maintain(
        custody.catalog,
        custody.settings().ledger_segments,
        custody.ledger_retention(),
        actor=identity.user,
        assurance=identity.assurance,
        run_id=context.run_id,
        progress=context.log.info,
        how=identity.recorded(),
    )
    custody.catalog.checkpoint()
    aged = asdict(report.age_off) if report.age_off is not None else {}
    return dg.Output(
        None,
        metadata={
            "custody/rolled_over_entries": report.rollover.entries,
            "custody/new_segments": dg.MetadataValue.json(report.rollover.segments),
            "custody/aged_off_entries": aged.get("entries", 0),
            "custody/aged_off_segments": dg.MetadataValue.json(aged.get("segments", [])),
            "custody/ledger_begins_after": aged.get("horizon"),
        },
    )


@dg.job(
    name="custody_ledger_maintenance", description="Ledger rollover and age-off, as the CUSTODY_LEDGER_* settings say."
)
def ledger_maintenance() -> None:
    maintain_ledger()


nightly_ledger_maintenance = dg.ScheduleDefinition(
    name="custody_ledger_maintenance_nightly",
    job=ledger_maintenance,
    cron_schedule=NIGHTLY,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Every night: entries older than CUSTODY_LEDGER_ROLLOVER_DAYS go into segments; segments past "
    "CUSTODY_LEDGER_RETENTION_DAYS or beyond CUSTODY_LEDGER_MAX_BYTES are aged off.",
)
