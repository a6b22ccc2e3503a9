"""Spec -> software-defined asset. Thin glue: the work happens in governance."""

# No `from __future__ import annotations` here: Dagster reads the asset functions' annotations at runtime.
#
# What only runs inside a step (ingestion, transforms, the catalog) is imported there. The code
# location is loaded again for every run and every reload of the UI, and each object those modules
# leave on the heap makes Python's collector slower while Dagster builds the assets: importing them
# up front cost about a third more load time at thousands of specs.

import functools
import inspect
import json
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from governance.checks import DESCRIPTIONS, Check, checks_for
from governance.errors import (
    BatchError,
    CatalogUnavailable,
    CommitUnknown,
    CustodyError,
    IntegrityError,
    NotFound,
    RemoteFailure,
    SpecProblem,
)
from governance.sources import Place
from governance.spec import Spec, SpecSet, code_version, lag
from resources import CustodyResource, SparkResource

if TYPE_CHECKING:
    from assets.dagster_internals import RawMetadataValue
    from governance.access.policy import Identity, Policy
    from governance.catalog import Catalog
    from governance.catalog.models import VersionRow
    from governance.lineage.versioned import VersionColumns
    from governance.runs import RunRequest
    from governance.zones import AssetKey, Lake

REQUESTED_BY_TAG = "custody/requested_by"
PARTITION_FORMAT = "%Y-%m-%d-%H:%M"
# The DropZone batch a sensor's run ingests.
BATCH_TAG = "custody/batch"
KINDS = {"spark", "parquet"}
INGEST_RETRY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL)
TRANSIENT = (ConnectionError, TimeoutError)
# Resources by key and one shared config schema: with typed parameters, Dagster re-inspects every
# asset function's signature many times, which dominates load time at thousands of specs.
RESOURCE_KEYS = {"custody", "spark"}
AUDIT_VERSION = dg.Field(
    dg.Noneable(int),
    default_value=None,
    description="When only the asset's checks run: the version they audit (default: the newest).",
)
AUDIT_CONFIG_SCHEMA = {"audit_version": AUDIT_VERSION}
INGEST_CONFIG_SCHEMA = {
    "batch": dg.Field(
        dg.Noneable(str),
        default_value=None,
        description="Which DropZone batch to ingest (default: the oldest ready one).",
    ),
    "force": dg.Field(
        bool, default_value=False, description="Ingest a batch again even if its content was ingested before."
    ),
    "audit_version": AUDIT_VERSION,
}


PENDING_TAG = "custody/approval"
# The version's number among the asset's, in its materialization's metadata.
VERSION_NUMBER = "custody/version_number"
INVALID_TAG = "custody/spec"


def build_assets(
    specs: SpecSet, pending: "Mapping[AssetKey, str] | None" = None, keys: "Collection[AssetKey] | None" = None
) -> list[dg.AssetsDefinition]:
    """Every spec as an asset (of `keys` alone, when given); those `pending` an owner's approval say
    why in their description."""
    pending = pending or {}
    return [
        landing_asset(spec, pending.get(spec.key))
        if spec.is_landing
        else integration_asset(spec, specs, pending.get(spec.key))
        for spec in specs
        if keys is None or spec.key in keys
    ]


def broken_asset(key: "AssetKey", problems: "tuple[SpecProblem, ...]", shown: Spec | None = None) -> dg.AssetSpec:
    """An asset whose spec cannot be loaded: shown with its problems, never run. With `shown` (its
    definition in force, or its own file where that was read), it keeps that spec's inputs, owners
    and kinds, so its lineage stays on the graph while the owner fixes it."""
    listed = "\n".join(f"- `{problem}`" for problem in problems)
    description = (
        f"**Invalid spec:** this asset cannot run until its owner fixes it (`custody specs check`).\n\n{listed}"
    )
    if shown is None:
        return dg.AssetSpec(
            key=dg.AssetKey([key.domain, key.name]),
            group_name=key.domain,
            tags={INVALID_TAG: "invalid"},
            description=description,
        )
    kept = _asset_spec(shown, [dg.AssetKey([source.domain, source.name]) for source in shown.inputs])
    return kept.replace_attributes(
        automation_condition=None,
        tags={**kept.tags, INVALID_TAG: "invalid"},
        description=f"{description}\n\nInputs, owners and kinds as spec `{shown.hash[:12]}` declares them.",
    )


def asset_key(spec: Spec) -> dg.AssetKey:
    return dg.AssetKey([spec.key.domain, spec.key.name])


def pool_of(key: "AssetKey") -> str:
    """The asset's own pool of Dagster's: the steps that write it run at most its limit at once."""
    return str(key)


def real_path(file: Path) -> str:
    """The file's path as Dagster's UI links it, its folder's symlinks resolved once for all its files."""
    return os.path.join(_real_folder(file.parent), file.name)


# A process builds the code location once: Dagster starts a new one for each reload.
@functools.lru_cache(maxsize=1024)
def _real_folder(folder: Path) -> str:
    return os.path.realpath(folder)


def _asset_spec(spec: Spec, deps: "list[dg.AssetKey] | None" = None, pending: str | None = None) -> dg.AssetSpec:
    tags = {
        "custody/zone": spec.body.zone,
        "custody/classification": spec.body.classification.value,
        "custody/pii": str(spec.body.pii).lower(),
        **spec.body.tags,
        **({PENDING_TAG: "pending"} if pending else {}),
    }
    description = f"**Pending approval:** {pending}\n\n{spec.body.description}" if pending else spec.body.description
    metadata: dict[str, RawMetadataValue] = {
        "custody/spec": dg.MetadataValue.path(str(spec.file)),
        # The UI's link to the code: the spec's own file, before the defs.yaml that loads its folder.
        "dagster/code_references": dg.CodeReferencesMetadataValue(
            code_references=[dg.LocalFileCodeReference(file_path=real_path(spec.file), line_number=1)]
        ),
    }
    if spec.feed:
        metadata["custody/feed"] = dg.MetadataValue.text(f"every {spec.feed.every} from {feed_origin(spec.feed.url)}")
    if spec.reads_database:
        place = Place.of(spec.database_source)
        metadata["custody/source"] = dg.MetadataValue.text(f"{place.namespace} {place.name}")
    if spec.topic:
        metadata["custody/source"] = dg.MetadataValue.text(f"kafka topic {spec.topic}")
    if spec.body.columns:
        metadata["dagster/column_schema"] = column_schema_from_spec(spec)
    return dg.AssetSpec(
        key=asset_key(spec),
        deps=deps or (),
        group_name=spec.key.domain,
        owners=[f"team:{spec.body.roles.owner}"],
        kinds=KINDS | {"postgres"} if spec.reads_database else KINDS | {"kafka"} if spec.reads_topic else KINDS,
        tags=tags,
        description=description,
        code_version=code_version(spec),
        metadata=metadata,
        freshness_policy=freshness_policy(spec),
        automation_condition=automation_condition(spec),
    )


def freshness_policy(spec: Spec) -> "dg.FreshnessPolicy | None":
    """The spec's freshness as Dagster's time-window policy, which its health folds in."""
    freshness = spec.body.freshness
    if freshness is None:
        return None
    warn = lag(freshness.warn_lag) if freshness.warn_lag else None
    return dg.FreshnessPolicy.time_window(fail_window=lag(freshness.max_lag), warn_window=warn)


def automation_condition(spec: Spec) -> "dg.AutomationCondition | None":
    """The spec's automation as Dagster's own condition, which the custody_automation sensor evaluates."""
    automation = spec.body.automation
    if automation is None:
        return None
    if automation.on_cron:
        return dg.AutomationCondition.on_cron(automation.on_cron)
    return dg.AutomationCondition.eager() if automation.eager else dg.AutomationCondition.on_missing()


def _check_specs(spec: Spec) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(check.value, asset=asset_key(spec), description=DESCRIPTIONS[check])
        for check in checks_for(spec)
    ]


def _asset_args(spec: Spec, deps: "list[dg.AssetKey] | None" = None, pending: str | None = None) -> dict:
    """One asset, its checks in the same step (run with each materialization, or alone on demand)."""
    return {
        "specs": [_asset_spec(spec, deps, pending)],
        "check_specs": _check_specs(spec),
        "can_subset": True,
        "name": f"{spec.key.domain}__{spec.key.name}",
        "required_resource_keys": RESOURCE_KEYS,
        "retry_policy": INGEST_RETRY,
        "partitions_def": feed_partitions(spec) if spec.feed else None,
        "pool": pool_of(spec.key),
    }


def feed_partitions(spec: Spec) -> dg.HourlyPartitionsDefinition:
    """A feed's hours from its first: each partition's materialization lands that hour as a version."""
    return dg.HourlyPartitionsDefinition(
        start_date=spec.declared_feed.first_hour.strftime(PARTITION_FORMAT), timezone="UTC", fmt=PARTITION_FORMAT
    )


def partition_hour(key: str) -> datetime:
    return datetime.strptime(key, PARTITION_FORMAT).replace(tzinfo=UTC)


def feed_origin(url: str) -> str:
    """Where a feed is read from, for the UI: the scheme and host of its URL template, nothing after
    them, where a template may have put a secret."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0].rsplit('@', 1)[-1]}"


# The asset functions have no docstring: Dagster parses an op's docstring for every asset it builds,
# a measurable share of load time at thousands of specs, and the description shown is the spec's.
# The factories say what each asset does. Nor do they declare what they yield: Dagster would resolve
# a type for each output that annotation covers, the asset's and each check's (a third more load time).


# What every asset function takes. Dagster inspects an asset function's signature about 16 times
# while it builds the asset, and Python works it out from the function's code each time; one that
# carries its signature is read at once (about a tenth of load time at thousands of specs).
STEP_SIGNATURE = inspect.Signature(
    [inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=dg.AssetExecutionContext)]
)


def step_signature(fn: "Callable[..., Any]") -> "Callable[..., Any]":
    """`fn`, carrying the signature every asset function has (tests/test_assets.py checks it is fn's)."""
    fn.__signature__ = STEP_SIGNATURE  # type: ignore[attr-defined]
    return fn


def landing_asset(spec: Spec, pending: str | None = None) -> dg.AssetsDefinition:
    """Ingest one ready DropZone batch (or read its database table) as the asset's next version, then check it."""

    @dg.multi_asset(**_asset_args(spec, pending=pending), config_schema=INGEST_CONFIG_SCHEMA)
    @step_signature
    def _landing(context: dg.AssetExecutionContext):
        config = context.op_config
        custody: CustodyResource = context.resources.custody
        if not context.selected_asset_keys:
            yield from audited(context, custody, spec, config["audit_version"])
            return
        from governance.ingest import ingest

        spark: SparkResource = context.resources.spark
        with governed(custody):
            row = landed_by_lander(context, custody, spec) if spec.reads_topic else None
            if row is None:
                request, _ = checked_request(context, custody, spec)
                batch = hour_batch(context, custody, spec, config["batch"]) if spec.feed else config["batch"]
                row = ingest(
                    spark.session(context.log.info),
                    custody.catalog,
                    custody.lake,
                    spec,
                    request,
                    batch_id=batch,
                    force=config["force"],
                    progress=context.log.info,
                    events=custody.events(),
                    column_lineage=custody.column_options(),
                )
        with committed(custody, row.ref):
            # Only a database asset's versions have a read to show: a batch's would cost a query for nothing.
            read = database_read(custody, row) if spec.reads_database else None
            result = materialize_result(
                row,
                lineage_table=lineage_table(custody, row),
                read=read,
                checks=check_results(context, custody, spec, row, thorough=False),
                table=table_snapshot(custody, row),
            )
        yield result

    return _landing


def landed_by_lander(context: dg.AssetExecutionContext, custody: CustodyResource, spec: Spec) -> "VersionRow | None":
    """The version the resident lander landed for this run (governance.streams.lander), which
    decides for whoever the run is for as this step would; None when no lander listens, or the run
    does not name its assets (the lander lands only an asset a run selects)."""
    from governance.streams.lander import Ask, ask_lander, socket_path

    if asset_key(spec) not in (context.run.asset_selection or ()):
        return None
    # A step retried after the lander committed and was lost before it answered: landed already.
    of_run = custody.catalog.versions_of_run
    before = next((row for row in of_run(context.run_id) if row.asset_key == str(spec.key)), None)
    if before is not None:
        return before
    path = socket_path(custody.settings().home)
    landed = ask_lander(path, Ask(context.run_id, str(spec.key)), context.log.info)
    if landed is None:
        context.log.info(f"no lander takes landings at {path}: landing in this run's own Spark")
        return None
    row = next((row for row in of_run(context.run_id) if row.id == landed), None)
    if row is None:
        raise IntegrityError(
            f"the lander at {path} landed version id {landed} for run {context.run_id}, which this run's catalog "
            "does not hold: the lander and the run are configured with different catalogs"
        )
    return row


def hour_batch(context: dg.AssetExecutionContext, custody: CustodyResource, spec: Spec, named: str | None) -> str:
    """The batch a feed asset's partition lands: the one named, if it holds that hour, else the
    hour's newest ready batch."""
    from governance.errors import InvalidInput
    from governance.feeds.hours import hour_of_batch, ready_batch_for
    from governance.feeds.names import hour_label

    hour = partition_hour(context.partition_key)
    if named is None:
        return ready_batch_for(custody.lake, custody.catalog, spec, hour)
    if hour_of_batch(named) != hour:
        raise InvalidInput(
            f"batch {named} does not hold the hour {hour_label(hour)} of partition {context.partition_key}"
        )
    return named


def integration_asset(spec: Spec, specs: SpecSet, pending: str | None = None) -> dg.AssetsDefinition:
    """Run the spec's transform on input versions pinned when the run starts, then check the result."""
    deps = [dg.AssetKey([key.domain, key.name]) for key in spec.inputs]
    inputs = tuple(specs[key] for key in spec.inputs)

    @dg.multi_asset(**_asset_args(spec, deps, pending), config_schema=AUDIT_CONFIG_SCHEMA)
    @step_signature
    def _integration(context: dg.AssetExecutionContext):
        custody: CustodyResource = context.resources.custody
        if not context.selected_asset_keys:
            yield from audited(context, custody, spec, context.op_config["audit_version"])
            return
        from governance.integrate import materialize

        spark: SparkResource = context.resources.spark
        with governed(custody):
            request, pins = checked_request(context, custody, spec, inputs)
            done = materialize(
                spark.session(context.log.info),
                custody.catalog,
                custody.lake,
                spec,
                request,
                pins,
                progress=context.log.info,
                events=custody.events(),
                column_lineage=custody.column_options(),
            )
        with committed(custody, done.version.ref):
            result = materialize_result(
                done.version,
                done.inputs,
                done.observation.unread,
                done.columns,
                lineage_table(custody, done.version),
                check_results(context, custody, spec, done.version, thorough=False),
                unchanged=done.unchanged,
                table=table_snapshot(custody, done.version),
            )
        yield result

    return _integration


def audited(
    context: dg.AssetExecutionContext, custody: CustodyResource, spec: Spec, number: int | None
) -> Iterator[dg.AssetCheckResult]:
    """The asset's selected checks, run alone on a committed version: its files are hashed again."""
    from governance.audit import version_to_audit

    try:
        version = version_to_audit(custody.catalog, spec, number)
    except NotFound as err:
        for key in context.selected_asset_check_keys:
            yield dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=False, description=str(err))
        return
    yield from check_results(context, custody, spec, version, thorough=True)


def check_results(
    context: dg.AssetExecutionContext, custody: CustodyResource, spec: Spec, version: "VersionRow", *, thorough: bool
) -> list[dg.AssetCheckResult]:
    from governance.audit import audit

    selected = tuple(Check(key.name) for key in sorted(context.selected_asset_check_keys, key=lambda k: k.name))
    findings = audit(custody.catalog, custody.lake, spec, version, selected, thorough=thorough)
    for finding in findings:
        if not finding.passed:
            context.log.warning(f"check {finding.check} failed: {finding.description}")
    return [
        dg.AssetCheckResult(
            asset_key=asset_key(spec),
            check_name=finding.check.value,
            passed=finding.passed,
            description=finding.description,
            metadata={"custody/version": version.ref, **finding.metadata},
        )
        for finding in findings
    ]


def checked_request(
    context: dg.AssetExecutionContext, custody: CustodyResource, spec: Spec, inputs: "tuple[Spec, ...] | None" = None
) -> "tuple[RunRequest, dict[AssetKey, VersionRow]]":
    """Who the run is for, allowed to ingest (or materialize, reading `inputs`) before any Spark
    work starts, and the input versions it reads; the decision is in the ledger either way."""
    from governance.access.guard import authorize_step
    from governance.integrate import pinnable

    tags = context.run.tags
    landing = spec if inputs is None else None
    policy = custody.policy()
    identity = requester(custody.catalog, custody.lake, policy, context.run_id, tags, landing)
    request = run_request(context.instance, context.run_id, context.job_name, spec, identity)
    pins = pinnable(custody.catalog, spec, request) if inputs is not None else {}
    authorize_step(
        custody.catalog,
        policy,
        identity,
        spec,
        inputs,
        context.run_id,
        {str(key): row.number for key, row in pins.items()},
        channel(tags),
    )
    return request, pins


def requester(
    catalog: "Catalog", lake: "Lake", policy: "Policy", run_id: str, tags: "Mapping[str, str]", landing: Spec | None
) -> "Identity":
    """Who a run is for: whoever the launch that submitted it established, as recorded under the
    run's own id (the CLI's check of its user, a signed-in session, the launcher of a backfill, a
    schedule's tick, the owner of a batch the DropZone sensor saw: assets/launchers.py). A run
    executed without being submitted is as its tag asserts. A batch's owner is established again,
    for the batch as it is now: one that is someone else's now is refused, and one that establishes
    nobody is left for its ingestion to refuse, with the reason, when it opens it."""
    from governance.access.guard import enforce, run_identity
    from governance.access.policy import Decision, Verb
    from governance.dropzone import FOLDER_OWNER, batch_requester

    found = run_identity(catalog, run_id, tags.get(REQUESTED_BY_TAG))
    batch = tags.get(BATCH_TAG)
    if landing is None or not batch or found.method != FOLDER_OWNER:
        return found
    try:
        now = batch_requester(lake, policy, landing, batch)
    except (BatchError, NotFound):  # the ingestion refuses the batch, and records why, as it opens it
        return found
    if now.user != found.user:
        reason = (
            f"batch {batch} of {landing.key} was seen as {found.user}'s, but it is now "
            f"{now.origin.removeprefix('folder of ')}'s, {now.user} in the directory"
        )
        enforce(catalog, Decision(found, Verb.INGEST, str(landing.key), False, reason), run_id, channel(tags))
    return found


def channel(tags: "Mapping[str, str]") -> dict[str, str]:
    """How a run reached us, for the ledger, when a sensor, an automation condition or a schedule
    launched it (who it is for was established as it was submitted: assets/launchers.py); a run
    launched by a person keeps the channel of the identity established for it (cli, ui, api)."""
    from assets.tags import AUTOMATION_CONDITION_TAG, SCHEDULE_NAME_TAG, SENSOR_NAME_TAG

    if SENSOR_NAME_TAG in tags:
        automated = tags.get(AUTOMATION_CONDITION_TAG) == "true"
        return {"channel": "automation" if automated else "sensor", "via": f"sensor {tags[SENSOR_NAME_TAG]}"}
    if SCHEDULE_NAME_TAG in tags:
        return {"channel": "schedule", "via": f"schedule {tags[SCHEDULE_NAME_TAG]}"}
    return {}


def run_request(
    instance: dg.DagsterInstance, run_id: str, job_name: str, spec: Spec, identity: "Identity"
) -> "RunRequest":
    from governance.runs import RunRequest

    record = instance.get_run_record_by_id(run_id)
    started = record.start_time if record and record.start_time else None
    started_at = datetime.fromtimestamp(started, UTC) if started else datetime.now(UTC)
    return RunRequest(
        requested_by=identity.user,
        run_id=run_id,
        started_at=started_at,
        code_version=code_version(spec),
        assurance=identity.assurance,
        job_name=job_name,
    )


@contextmanager
def governed(custody: CustodyResource) -> Iterator[None]:
    """Failures up to the commit end the step with one line. Only transient ones are retried: Custody's
    own (`retryable`) and a connection that dropped or timed out. Anything else, bad input or a Spark
    context that died on it, would fail the same way again. A failing step's ledger entries are
    checkpointed, as `committed` checkpoints a succeeding one's, so every run ends with one."""
    try:
        yield
    except CommitUnknown as err:
        _checkpoint_failing(custody)
        raise failure(str(err), err, retry=False) from err
    except CatalogUnavailable as err:
        _checkpoint_failing(custody)
        raise failure(f"{err}; nothing was committed; custody repair rolls the attempt back", err) from err
    except CustodyError as err:
        _checkpoint_failing(custody)
        raise failure(str(err), err) from err
    except TRANSIENT:
        _checkpoint_failing(custody)
        raise
    except Exception as err:
        _checkpoint_failing(custody)
        # Its words may quote data (a value that did not convert): the run's log has them.
        raise failure(f"{type(err).__name__}, unexpected: the run's log has what it said and where", err) from err


@contextmanager
def committed(custody: CustodyResource, ref: str) -> Iterator[None]:
    """What follows a commit. A failure names the version, which stands, and is never retried: the
    step run again would ingest the next batch, or build the asset again."""
    try:
        yield
        custody.catalog.checkpoint()
    except CatalogUnavailable as err:
        raise failure(
            f"{ref} was committed; the catalog became unreachable afterwards: {err}", err, retry=False
        ) from err
    except CustodyError as err:
        raise failure(f"{ref} was committed; then: {err}", err, retry=False) from err
    except Exception as err:
        raise failure(
            f"{ref} was committed; then {type(err).__name__}, unexpected: the run's log has what it said and where",
            err,
            retry=False,
        ) from err


def failure(description: str, err: Exception, *, retry: bool = True) -> dg.Failure:
    """The step's failure, retried if `retry` allows it and `err` is a retryable Custody error."""
    known = err if isinstance(err, CustodyError) else None
    kind = err.kind if isinstance(err, RemoteFailure) else type(err).__name__
    return dg.Failure(
        description=description,
        metadata={"custody/error": kind, "custody/exit_code": known.exit_code if known else 1},
        allow_retries=retry and known is not None and known.retryable,
    )


def _checkpoint_failing(custody: CustodyResource) -> None:
    """A failing step's checkpoint. A catalog that cannot be reached takes none, and needs none: the
    next run's checkpoint pins this one's entries too. The step's own failure says what happened."""
    with suppress(CatalogUnavailable):
        custody.catalog.checkpoint()


def lineage_table(custody: CustodyResource, row: "VersionRow") -> str:
    """The committed version's column lineage as Markdown, as the catalog recorded it."""
    from governance.lineage.column_trace import overview
    from governance.render import column_markdown
    from governance.zones import VersionRef

    return column_markdown(overview(custody.catalog, VersionRef.parse(row.ref)).to_dict())


def database_read(custody: CustodyResource, row: "VersionRow") -> "dict[str, object] | None":
    """What a landing version read from a database (where, what, the snapshot, the marks), if it did."""
    from governance.catalog.models import described_read

    read = custody.catalog.reads_of([row.stored_id]).get(row.stored_id)
    return described_read(read) if read else None


def table_snapshot(custody: CustodyResource, row: "VersionRow") -> str:
    """The Iceberg table whose snapshot tagged for this version exists, or "" when none does."""
    tables = custody.lake.tables
    if tables is None:
        return ""
    from governance.errors import TableSnapshotError
    from governance.zones import AssetKey

    key = AssetKey.parse(row.asset_key)
    try:
        tagged = row.number in tables.tables.tags(key)
    except TableSnapshotError:
        return ""  # the run's log and the ledger already say the snapshot was not made
    return tables.tables.table_name(key) if tagged else ""


def materialize_result(
    row: "VersionRow",
    inputs: "tuple[VersionRow, ...] | None" = None,
    unread: tuple[str, ...] = (),
    columns: "VersionColumns | None" = None,
    lineage_table: str = "",
    checks: "list[dg.AssetCheckResult] | None" = None,
    read: "dict[str, object] | None" = None,
    unchanged: bool = False,
    table: str = "",
) -> dg.MaterializeResult:
    metadata: dict[str, RawMetadataValue] = {
        "custody/version": row.ref,
        VERSION_NUMBER: dg.MetadataValue.int(row.number),
        "custody/data_version": row.data_version,
        "custody/label": row.label or "",
        "dagster/row_count": dg.MetadataValue.int(row.rows),
        "custody/rows_landed": dg.MetadataValue.int(row.rows),
        "custody/rows_quarantined": dg.MetadataValue.int(row.rows_quarantined),
        "custody/bytes": dg.MetadataValue.int(row.bytes),
        "custody/path": dg.MetadataValue.path(row.path),
        "custody/requested_by": row.requested_by,
        "custody/identity": row.assurance,
        "custody/provenance": dg.MetadataValue.md(f"`custody provenance {row.ref}`"),
        "dagster/column_schema": column_schema_from_spark(row.table_schema),
    }
    if lineage_table:
        metadata["custody/column_lineage"] = dg.MetadataValue.md(
            f"{lineage_table}\n\nEvery column back to where it was read: `custody lineage columns {row.ref} COLUMN`"
        )
    if table:
        metadata["dagster/table_name"] = table
        metadata["custody/table_snapshot"] = dg.MetadataValue.md(
            f"Also Iceberg's `{table}`, tagged `custody-v{row.number}`: "
            f"`SELECT * FROM {table} VERSION AS OF 'custody-v{row.number}'`"
        )
    if read:
        metadata["custody/read"] = dg.MetadataValue.json(read)
    if unchanged:
        metadata["custody/unchanged"] = dg.MetadataValue.md(
            f"Made again from the same input versions and code, with the same data: no new version, {row.ref} stands."
        )
    if row.quarantine_path:
        metadata["custody/quarantine_path"] = dg.MetadataValue.path(row.quarantine_path)
    if row.label_from:
        metadata["custody/label_from"] = row.label_from
    if inputs is not None:
        metadata["custody/input_versions"] = dg.MetadataValue.json({v.asset_key: v.number for v in inputs})
        metadata["custody/input_data_versions"] = dg.MetadataValue.json({v.asset_key: v.data_version for v in inputs})
    if unread:
        metadata["custody/unread_inputs"] = dg.MetadataValue.md(
            "**Warning:** declared but not read by the transform: " + ", ".join(f"`{ref}`" for ref in unread)
        )
    if columns is not None:
        metadata.update(column_lineage_metadata(columns))
    return dg.MaterializeResult(
        metadata=metadata, data_version=dg.DataVersion(row.data_version), check_results=checks or []
    )


def column_lineage_metadata(columns: "VersionColumns") -> "dict[str, RawMetadataValue]":
    """Dagster's own column lineage (each column's input assets' columns; a landing asset's come from
    DropZone files, which Dagster does not know), and what the extraction approximated."""
    metadata: dict[str, RawMetadataValue] = {}
    by_column = columns.by_column()
    if by_column:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(
            deps_by_column={
                column: [
                    dg.TableColumnDep(asset_key=dg.AssetKey(row.asset_key.split("/")), column_name=name)
                    for row, name in deps
                ]
                for column, deps in by_column.items()
            }
        )
    if columns.fallbacks:
        metadata["custody/column_lineage_fallbacks"] = dg.MetadataValue.md(
            "**Approximate:** every output column is taken to depend on every input column of "
            + ", ".join(f"`{name}`" for name in columns.fallbacks)
        )
    if columns.notes:
        metadata["custody/column_lineage_notes"] = dg.MetadataValue.md("\n".join(f"- {note}" for note in columns.notes))
    return metadata


def column_schema_from_spec(spec: Spec) -> dg.TableSchema:
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=c.name,
                type=c.type,
                description=c.description or None,
                constraints=dg.TableColumnConstraints(nullable=c.nullable),
            )
            for c in spec.body.columns
        ]
    )


def column_schema_from_spark(schema_json: str) -> dg.TableSchema:
    fields = json.loads(schema_json).get("fields", [])
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=f["name"],
                type=f["type"] if isinstance(f["type"], str) else f["type"].get("type", "struct"),
                constraints=dg.TableColumnConstraints(nullable=f.get("nullable", True)),
            )
            for f in fields
        ]
    )
