"""Integration assets: a PySpark transform over exact, pinned input versions, committed as a new version."""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.errors import TransformError
from governance.runs import Progress, RunRequest, attempt, quiet
from governance.spec import Spec, resolve_transform
from governance.versions import Draft, commit, seal
from governance.zones import AssetKey, Lake, Zone


def pin_inputs(catalog: Catalog, spec: Spec, request: RunRequest) -> dict[AssetKey, VersionRow]:
    """The exact version of each input this run reads."""
    return {key: catalog.pinned(key, request.run_id, request.started_at) for key in spec.inputs}


def materialize(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    request: RunRequest,
    *,
    progress: Progress = quiet,
) -> VersionRow:
    """Run the spec's transform on its pinned inputs and commit the result as the next version."""
    pins = pin_inputs(catalog, spec, request)
    catalog.register_spec(spec, request.requested_by, request.run_id)
    with catalog.session() as session:
        ledger.append(
            session, actor=request.requested_by, action=ledger.Action.MATERIALIZATION_REQUESTED,
            asset=str(spec.key), run_id=request.run_id,
            details={"inputs": [v.ref for v in pins.values()], "transform": spec.body.transform},
        )
    with attempt(catalog, lake, spec.key, request, ledger.Action.MATERIALIZATION_FAILED) as (attempt_id, stage):
        progress(f"running {spec.body.transform} on {', '.join(v.ref for v in pins.values())}")
        result = _run_transform(spark, spec, pins)
        result.write.mode("errorifexists").parquet(str(stage.data))
        data = seal(stage.data, ".parquet")
        label_from = spec.body.version_label_from
        draft = Draft(
            key=spec.key, zone=Zone.INTEGRATION, attempt_id=attempt_id, run_id=request.run_id,
            requested_by=request.requested_by, code_version=request.code_version, spec_hash=spec.hash,
            table_schema=result.schema.json(), data=data, rows_read=data.rows,
            label=pins[AssetKey.parse(label_from)].label if label_from else None,
            inputs=list(pins.values()),
            details={"transform": spec.body.transform, "label_from": label_from},
        )
        progress(f"committing {data.rows} rows")
        return commit(catalog, lake, stage, draft)


def _run_transform(spark: SparkSession, spec: Spec, pins: dict[AssetKey, VersionRow]) -> DataFrame:
    function = resolve_transform(spec.body.transform)
    frames = {key.name: spark.read.parquet(pins[key].path) for key in spec.inputs}
    try:
        result = function(spark, **frames)
    except AnalysisException as err:
        raise TransformError(f"transform {spec.body.transform} of {spec.key} is invalid: {_first_line(err)}") from err
    if not isinstance(result, DataFrame):
        raise TransformError(
            f"transform {spec.body.transform} of {spec.key} returned {type(result).__name__}, not a Spark DataFrame"
        )
    return result


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
