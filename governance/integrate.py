"""Integration assets: a PySpark transform over exact, pinned input versions, committed as a new version."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.errors import NotFound, TransformError, error_summary
from governance.lineage.observed import Observation, observe
from governance.lineage.openlineage import Dataset, Emitter, JobRun, column_inputs, dataset_of
from governance.lineage.versioned import (
    DEFAULT_COLUMNS,
    ColumnOptions,
    VersionColumns,
    integration_columns,
    warn_about,
)
from governance.pools import kept, settled
from governance.runs import Progress, RunRequest, attempt, quiet
from governance.spec import Spec, resolve_transform
from governance.versions import Draft, Sealed, commit, missing_files, require_files, seal, version_frame
from governance.zones import AssetKey, Lake, Zone

# Each run a process has at once extracts its column lineage on a thread of its own, up to four.
LINEAGE_THREADS = 4


@dataclass(frozen=True)
class Materialized:
    """A committed integration version, the versions it was built from, and what its plan read."""

    version: VersionRow
    inputs: tuple[VersionRow, ...]
    observation: Observation
    columns: VersionColumns | None = None
    # The newest version was made again, the same: no version was committed.
    unchanged: bool = False


def pin_inputs(
    catalog: Catalog, spec: Spec, request: RunRequest, pinned: Mapping[AssetKey, VersionRow] | None = None
) -> dict[AssetKey, VersionRow]:
    """The exact version of each input this run reads: those already `pinned`, and the others'."""
    pinned = pinned or {}
    return {key: pinned.get(key) or catalog.pinned(key, request.run_id, request.started_at) for key in spec.inputs}


def pinnable(catalog: Catalog, spec: Spec, request: RunRequest) -> dict[AssetKey, VersionRow]:
    """The version each input would be pinned to; an input without one is left out (pinning it
    fails later, once access is decided)."""
    pins = {}
    for key in spec.inputs:
        try:
            pins[key] = catalog.pinned(key, request.run_id, request.started_at)
        except NotFound:
            continue
    return pins


def materialize(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    request: RunRequest,
    pinned: Mapping[AssetKey, VersionRow] | None = None,
    *,
    progress: Progress = quiet,
    events: Emitter | None = None,
    column_lineage: ColumnOptions | None = DEFAULT_COLUMNS,
) -> Materialized:
    """Run the spec's transform on its inputs (at the versions already `pinned`, the others pinned
    now), check what it read, and commit the next version with its column lineage (unless
    `column_lineage` is None)."""
    events = events or Emitter.off()
    pins = pin_inputs(catalog, spec, request, pinned)
    with catalog.session() as session:
        catalog.register_spec(session, spec, request.requested_by, request.run_id, request.assurance)
        ledger.append(
            session,
            actor=request.requested_by,
            action=ledger.Action.MATERIALIZATION_REQUESTED,
            asset=str(spec.key),
            run_id=request.run_id,
            assurance=request.assurance,
            details={"inputs": [v.ref for v in pins.values()], "transform": spec.body.transform},
        )
    inputs = _input_datasets(catalog, lake, pins) if events.enabled else {}
    job = JobRun(str(spec.key), "TRANSFORMATION", request, list(inputs.values()))
    with (
        events.running(job, progress) as outputs,
        attempt(catalog, lake, spec.key, request, ledger.Action.MATERIALIZATION_FAILED, inputs=list(pins.values())) as (
            attempt_id,
            stage,
        ),
    ):
        result = _run_transform(spark, lake, spec, pins)
        observation = observe(result, lake, spec.key, pins, catalog.version_at)
        # Inputs are read without asking Spark for their files; the plan found those it reads.
        require_files(lake, (row for row in pins.values() if row.ref in observation.unread))
        for ref in observation.unread:
            progress(f"warning: declared input {ref} was not read by {spec.body.transform}")
        data, columns = _written(result, stage.data, lake, pins, column_lineage)
        warn_about(columns, progress)
        same = made_again(catalog, spec.key, request.code_version, pins, data)
        if same is not None:
            progress(f"unchanged: the same inputs and code made {same.ref} again; no new version")
            record_unchanged(catalog, attempt_id, request, same, pins)
            outputs.add(dataset_of(lake, same, spec.body.roles.model_dump(), column_inputs(columns, inputs)))
            return Materialized(same, tuple(pins.values()), observation, columns, unchanged=True)
        label_from = AssetKey.parse(spec.body.version_label_from) if spec.body.version_label_from else None
        draft = Draft(
            key=spec.key,
            zone=Zone.INTEGRATION,
            attempt_id=attempt_id,
            run_id=request.run_id,
            requested_by=request.requested_by,
            code_version=request.code_version,
            spec_hash=spec.hash,
            table_schema=result.schema.json(),
            data=data,
            rows_read=data.rows,
            label=pins[label_from].label if label_from else None,
            label_from=pins[label_from].ref if label_from else None,
            assurance=request.assurance,
            inputs=list(pins.values()),
            details={
                "transform": spec.body.transform,
                "inputs_read": list(observation.read),
                "inputs_unread": list(observation.unread),
            },
            columns=columns,
        )
        row = commit(catalog, lake, stage, draft, progress)
        outputs.add(dataset_of(lake, row, spec.body.roles.model_dump(), column_inputs(columns, inputs)))
    return Materialized(row, tuple(pins.values()), observation, columns)


def made_again(
    catalog: Catalog, key: AssetKey, code_version: str, pins: Mapping[AssetKey, VersionRow], data: Sealed
) -> VersionRow | None:
    """The newest committed version, when this run made exactly it: from the same input versions,
    by the same code version, with the same data_version. A new number would say something changed."""
    newest = catalog.newest_committed(key)
    if newest is None or (newest.code_version, newest.data_version) != (code_version, data.data_version):
        return None
    return newest if catalog.input_ids(newest.id) == {row.id for row in pins.values()} else None


def record_unchanged(
    catalog: Catalog, attempt_id: str, request: RunRequest, same: VersionRow, pins: Mapping[AssetKey, VersionRow]
) -> None:
    """The attempt ends without a version of its own (its staged files go with its staging folder),
    and the ledger says which version the run made again."""
    with catalog.session() as session:
        catalog.finish_attempt(session, attempt_id, "unchanged", version=same.number)
        ledger.append(
            session,
            actor=request.requested_by,
            action=ledger.Action.MATERIALIZATION_UNCHANGED,
            asset=same.asset_key,
            version=same.number,
            run_id=request.run_id,
            assurance=request.assurance,
            details={
                "inputs": [row.ref for row in pins.values()],
                "code_version": same.code_version,
                "data_version": same.data_version,
            },
        )


def _written(
    result: DataFrame,
    folder: PurePath,
    lake: Lake,
    pins: dict[AssetKey, VersionRow],
    column_lineage: ColumnOptions | None,
) -> tuple[Sealed, VersionColumns | None]:
    """Write the result and seal it. Its column lineage only reads the plan, so a thread extracts it
    while the driver waits on Spark's write."""
    columns = (
        kept("column-lineage", LINEAGE_THREADS).submit(integration_columns, result, column_lineage, lake, pins)
        if column_lineage
        else None
    )
    try:
        result.write.mode("errorifexists").parquet(lake.uri(folder))
        return seal(lake, folder, ".parquet"), columns.result() if columns else None
    finally:
        settled([columns])


def _input_datasets(catalog: Catalog, lake: Lake, pins: dict[AssetKey, VersionRow]) -> dict[int | None, Dataset]:
    roles = catalog.roles_of(list(pins))
    return {row.id: dataset_of(lake, row, roles.get(key, {})) for key, row in pins.items()}


def _run_transform(spark: SparkSession, lake: Lake, spec: Spec, pins: dict[AssetKey, VersionRow]) -> DataFrame:
    if spec.body.transform is None:
        raise TransformError(f"{spec.key} names no transform")
    function = resolve_transform(spec.body.transform)
    frames = {key.name: version_frame(spark, lake, pins[key]) for key in spec.inputs}
    try:
        result = function(spark, **frames)
    except AnalysisException as err:
        raise TransformError(f"transform {spec.body.transform} of {spec.key} is invalid: {error_summary(err)}") from err
    except Exception as err:
        # Its inputs were read without asking Spark for their files: one read as empty because they
        # are gone may be what it failed on, and that is what to say.
        if (gone := missing_files(lake, pins.values())) is not None:
            raise gone from err
        raise
    if not isinstance(result, DataFrame):
        raise TransformError(
            f"transform {spec.body.transform} of {spec.key} returned {type(result).__name__}, not a Spark DataFrame"
        )
    return result
