"""Spec -> software-defined asset. Thin glue: the work happens in governance."""

# No `from __future__ import annotations` here: Dagster reads the asset functions' annotations at runtime.
#
# What only runs inside a step (ingestion, transforms, the catalog) is imported there. The code
# location is loaded again for every run and every reload of the UI, and each object those modules
# leave on the heap makes Python's collector slower while Dagster builds the assets: importing them
# up front cost about a third more load time at thousands of specs.

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import dagster as dg

from governance.errors import CustodyError
from governance.spec import Spec, SpecSet, code_version
from resources import CustodyResource, SparkResource

if TYPE_CHECKING:
    from governance.access.policy import Identity
    from governance.catalog.models import VersionRow
    from governance.lineage.versioned import VersionColumns
    from governance.runs import RunRequest

REQUESTED_BY_TAG = "custody/requested_by"
# Runs a schedule launched: their requester is established by the system. A sensor's runs are for
# the user a batch names, which is asserted: the sensor is the channel the ledger records.
SYSTEM_TAGS = ("dagster/schedule_name",)
SENSOR_TAG = "dagster/sensor_name"
KINDS = {"spark", "parquet"}
INGEST_RETRY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL)
TRANSIENT = (ConnectionError, TimeoutError)
# Resources by key and one shared config schema: with typed parameters, Dagster re-inspects every
# asset function's signature many times, which dominates load time at thousands of specs.
RESOURCE_KEYS = {"custody", "spark"}


class IngestConfig(dg.Config):
    """Which DropZone batch to ingest."""

    batch: str | None = None
    force: bool = False


INGEST_CONFIG_SCHEMA = IngestConfig.to_config_schema()


def build_assets(specs: SpecSet) -> list[dg.AssetsDefinition]:
    return [landing_asset(spec) if spec.is_landing else integration_asset(spec, specs) for spec in specs]


def _asset_args(spec: Spec) -> dict:
    tags = {
        "custody/zone": spec.body.zone,
        "custody/classification": spec.body.classification.value,
        "custody/pii": str(spec.body.pii).lower(),
        **spec.body.tags,
    }
    metadata = {"custody/spec": dg.MetadataValue.path(str(spec.file))}
    if spec.body.columns:
        metadata["dagster/column_schema"] = column_schema_from_spec(spec)
    return dict(
        key=dg.AssetKey([spec.key.domain, spec.key.name]),
        group_name=spec.key.domain,
        owners=[f"team:{spec.body.roles.owner}"],
        kinds=KINDS,
        tags=tags,
        description=spec.body.description,
        code_version=code_version(spec),
        metadata=metadata,
    )


# The asset functions have no docstring: Dagster parses an op's docstring for every asset it builds,
# a measurable share of load time at thousands of specs, and the description shown is the spec's.
# The factories say what each asset does.


def landing_asset(spec: Spec) -> dg.AssetsDefinition:
    """Ingest one ready DropZone batch as the asset's next version."""

    @dg.asset(**_asset_args(spec), config_schema=INGEST_CONFIG_SCHEMA, required_resource_keys=RESOURCE_KEYS, retry_policy=INGEST_RETRY)
    def _landing(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from governance.ingest import ingest

        config = IngestConfig(**context.op_config)
        custody: CustodyResource = context.resources.custody
        spark: SparkResource = context.resources.spark
        with governed(custody):
            request = checked_request(context, custody, spec)
            row = ingest(
                spark.session(context.log.info), custody.catalog, custody.lake, spec, request,
                batch_id=config.batch, force=config.force, progress=context.log.info, events=custody.events(),
                column_lineage=custody.column_options(),
            )
        return materialize_result(row, lineage_table=lineage_table(custody, row))

    return _landing


def integration_asset(spec: Spec, specs: SpecSet) -> dg.AssetsDefinition:
    """Run the spec's transform on input versions pinned when the run starts."""
    deps = [dg.AssetKey([key.domain, key.name]) for key in spec.inputs]
    inputs = tuple(specs[key] for key in spec.inputs)

    @dg.asset(**_asset_args(spec), deps=deps, required_resource_keys=RESOURCE_KEYS, retry_policy=INGEST_RETRY)
    def _integration(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from governance.integrate import materialize

        custody: CustodyResource = context.resources.custody
        spark: SparkResource = context.resources.spark
        with governed(custody):
            request = checked_request(context, custody, spec, inputs)
            done = materialize(
                spark.session(context.log.info), custody.catalog, custody.lake, spec, request,
                progress=context.log.info, events=custody.events(), column_lineage=custody.column_options(),
            )
        return materialize_result(done.version, done.inputs, done.observation.unread, done.columns,
                                  lineage_table(custody, done.version))

    return _integration


def checked_request(
    context: dg.AssetExecutionContext, custody: CustodyResource, spec: Spec, inputs: "tuple[Spec, ...] | None" = None
) -> "RunRequest":
    """Who the run is for, allowed to ingest (or materialize, reading `inputs`) before any Spark
    work starts; the decision is in the ledger either way."""
    from governance.access.guard import authorize, authorize_materialization, run_identity
    from governance.access.policy import Verb
    from governance.integrate import pinned_numbers

    tags = context.run.tags
    identity = run_identity(custody.catalog, context.run_id, tags.get(REQUESTED_BY_TAG),
                            system=any(tag in tags for tag in SYSTEM_TAGS))
    request = run_request(context, spec, identity)
    if inputs is None:
        authorize(custody.catalog, custody.policy(), identity, Verb.INGEST, spec, run_id=context.run_id,
                  details=channel(tags))
    else:
        authorize_materialization(custody.catalog, custody.policy(), identity, spec, inputs, context.run_id,
                                  pinned_numbers(custody.catalog, spec, request))
    return request


def channel(tags: "Mapping[str, str]") -> dict[str, str]:
    """How a run reached us, for the ledger: named only when a sensor launched it."""
    return {"via": f"sensor {tags[SENSOR_TAG]}"} if SENSOR_TAG in tags else {}


def run_request(context: dg.AssetExecutionContext, spec: Spec, identity: "Identity") -> "RunRequest":
    from governance.runs import RunRequest

    record = context.instance.get_run_record_by_id(context.run_id)
    started = record.start_time if record and record.start_time else None
    started_at = datetime.fromtimestamp(started, UTC) if started else datetime.now(UTC)
    return RunRequest(
        requested_by=identity.user,
        run_id=context.run_id,
        started_at=started_at,
        code_version=code_version(spec),
        assurance=identity.assurance,
        job_name=context.job_name,
    )


@contextmanager
def governed(custody: CustodyResource) -> Iterator[None]:
    """Failures end the step with one line. Only transient ones are retried: Custody's own
    (`retryable`) and a connection that dropped or timed out. Anything else, bad input or a Spark
    context that died on it, would fail the same way again. Either way the step ends with a ledger
    checkpoint, so every run ends with one."""
    try:
        yield
    except CustodyError as err:
        raise dg.Failure(
            description=str(err),
            metadata={"custody/error": type(err).__name__, "custody/exit_code": err.exit_code},
            allow_retries=err.retryable,
        ) from err
    except TRANSIENT:
        raise
    except Exception as err:
        raise dg.Failure(
            # Its words may quote data (a value that did not convert): the run's log has them.
            description=f"{type(err).__name__}, unexpected: the run's log has what it said and where",
            metadata={"custody/error": type(err).__name__, "custody/exit_code": 1},
            allow_retries=False,
        ) from err
    finally:
        custody.catalog.checkpoint()


def lineage_table(custody: CustodyResource, row: "VersionRow") -> str:
    """The committed version's column lineage as Markdown, as the catalog recorded it."""
    from governance.lineage.column_trace import overview
    from governance.render import column_markdown
    from governance.zones import VersionRef

    return column_markdown(overview(custody.catalog, VersionRef.parse(row.ref)))


def materialize_result(
    row: "VersionRow",
    inputs: "tuple[VersionRow, ...] | None" = None,
    unread: tuple[str, ...] = (),
    columns: "VersionColumns | None" = None,
    lineage_table: str = "",
) -> dg.MaterializeResult:
    metadata: dict[str, object] = {
        "custody/version": row.ref,
        "version": dg.MetadataValue.int(row.number),
        "data_version": row.data_version,
        "label": row.label or "",
        "dagster/row_count": dg.MetadataValue.int(row.rows),
        "rows_landed": dg.MetadataValue.int(row.rows),
        "rows_quarantined": dg.MetadataValue.int(row.rows_quarantined),
        "bytes": dg.MetadataValue.int(row.bytes),
        "path": dg.MetadataValue.path(row.path),
        "requested_by": row.requested_by,
        "identity": row.assurance,
        "provenance": dg.MetadataValue.md(f"`custody provenance {row.ref}`"),
        "dagster/column_schema": column_schema_from_spark(row.table_schema),
    }
    if lineage_table:
        metadata["custody/column_lineage"] = dg.MetadataValue.md(
            f"{lineage_table}\n\nEvery column back to the DropZone: `custody lineage columns {row.ref} COLUMN`")
    if row.quarantine_path:
        metadata["quarantine_path"] = dg.MetadataValue.path(row.quarantine_path)
    if row.label_from:
        metadata["label_from"] = row.label_from
    if inputs is not None:
        metadata["input_versions"] = dg.MetadataValue.json({v.asset_key: v.number for v in inputs})
        metadata["input_data_versions"] = dg.MetadataValue.json({v.asset_key: v.data_version for v in inputs})
    if unread:
        metadata["custody/unread_inputs"] = dg.MetadataValue.md(
            "**Warning:** declared but not read by the transform: " + ", ".join(f"`{ref}`" for ref in unread)
        )
    if columns is not None:
        metadata.update(column_lineage_metadata(columns))
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(row.data_version))


def column_lineage_metadata(columns: "VersionColumns") -> dict[str, object]:
    """Dagster's own column lineage (each column's input assets' columns; a landing asset's come from
    DropZone files, which Dagster does not know), and what the extraction approximated."""
    metadata: dict[str, object] = {}
    by_column = columns.by_column()
    if by_column:
        metadata["dagster/column_lineage"] = dg.TableColumnLineage(
            deps_by_column={
                column: [dg.TableColumnDep(asset_key=dg.AssetKey(row.asset_key.split("/")), column_name=name) for row, name in deps]
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
                name=c.name, type=c.type, description=c.description or None,
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
