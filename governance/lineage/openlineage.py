"""OpenLineage export: a START, then a COMPLETE or FAIL RunEvent for every ingestion and materialization.

Datasets are named from the lake paths (namespace `file`, name the asset's folder) and carry the
version, schema and ownership facets, and outputs the columnLineage facet; the run carries the
Dagster run as its parent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard
from uuid import UUID

from governance.catalog.models import VersionRow
from governance.errors import InvalidInput
from governance.runs import Progress, RunRequest, quiet
from governance.zones import AssetKey, Lake, Zone

if TYPE_CHECKING:
    from governance.lineage.columns import Edge
    from governance.lineage.versioned import VersionColumns

NAMESPACE = "custody"
DAGSTER_NAMESPACE = "dagster"
DATASET_NAMESPACE = "file"
OFF = "off"


@cache
def producer() -> str:
    try:
        release = version("custody")
    except PackageNotFoundError:
        release = "unknown"
    return f"urn:custody:{release}"


def transport_config(setting: str, home: Path, api_key: str | None = None) -> dict[str, Any] | None:
    """The client's transport for `CUSTODY_OPENLINEAGE`: file (default), file:PATH, console, an http(s) URL, or off."""
    value = setting.strip() or "file"
    if value == OFF:
        return None
    if value == "console":
        return {"type": "console"}
    if value == "file" or value.startswith("file:"):
        path = value.removeprefix("file").removeprefix(":") or str(home / "openlineage" / "events.jsonl")
        return {"type": "file", "log_file_path": str(Path(path).absolute()), "append": True}
    if value.startswith(("http://", "https://")):
        # One quick try: an unreachable endpoint costs a run a few seconds, not the client's default retries.
        config: dict[str, Any] = {
            "type": "http",
            "url": value,
            "timeout": 5,
            "retry": {"total": 1, "backoff_factor": 0.2},
        }
        if api_key:
            config["auth"] = {"type": "api_key", "apiKey": api_key}
        return config
    raise InvalidInput(
        f"CUSTODY_OPENLINEAGE={setting!r} is not a transport: use file, file:PATH, console, an http(s) URL, or off"
    )


@dataclass(frozen=True)
class ColumnInput:
    """`column` of a dataset (None: every column) depends on `field` of the input dataset at `path`."""

    column: str | None
    path: str
    field: str
    edge: Edge
    namespace: str = DATASET_NAMESPACE


@dataclass(frozen=True)
class Dataset:
    """A dataset as OpenLineage sees it: a lake folder at one version, or a database's table."""

    path: str
    version: str
    schema_json: str | None = None
    roles: dict[str, str] = field(default_factory=dict)
    columns: tuple[ColumnInput, ...] = ()
    namespace: str = DATASET_NAMESPACE


def dataset_of(lake: Lake, row: VersionRow, roles: dict[str, str], columns: tuple[ColumnInput, ...] = ()) -> Dataset:
    """A committed version as an OpenLineage dataset: its asset's folder, at its version number."""
    return Dataset(
        lake.asset_uri(Zone(row.zone), AssetKey.parse(row.asset_key)), str(row.number), row.table_schema, roles, columns
    )


def column_inputs(columns: VersionColumns | None, inputs: Mapping[int | None, Dataset]) -> tuple[ColumnInput, ...]:
    """A version's column lineage over its input datasets, keyed by input version id (None: the DropZone batch)."""
    if columns is None:
        return ()
    return tuple(
        ColumnInput(dep.column, inputs[key].path, dep.input_column, dep.edge, inputs[key].namespace)
        for dep in columns.deps
        if (key := dep.source.id if dep.source is not None else None) in inputs
    )


@dataclass(frozen=True)
class JobRun:
    """What an event says about the job and its run."""

    asset: str
    job_type: str
    request: RunRequest
    inputs: Sequence[Dataset]


class Emitter:
    """Sends RunEvents through the configured transport; an event that cannot be built or sent is reported, never fatal."""

    def __init__(self, transport: dict[str, Any] | None):
        self.transport = transport
        self._client = None

    @classmethod
    def off(cls) -> Emitter:
        return cls(None)

    @property
    def enabled(self) -> bool:
        return self.transport is not None

    @contextmanager
    def running(self, job: JobRun, progress: Progress = quiet) -> Iterator[Outputs]:
        """START now; COMPLETE with the outputs recorded in the block, or FAIL with its error."""
        outputs = Outputs()
        if not self.enabled:
            yield outputs
            return
        from openlineage.client.uuid import generate_new_uuid

        run_id = str(generate_new_uuid())
        self._emit("START", lambda: _event("START", run_id, job, []), job, progress)
        try:
            yield outputs
        except BaseException as err:
            failure = err
            self._emit("FAIL", lambda: _event("FAIL", run_id, job, outputs.datasets, error=failure), job, progress)
            raise
        self._emit("COMPLETE", lambda: _event("COMPLETE", run_id, job, outputs.datasets), job, progress)

    def _emit(self, state: str, build: Callable[[], Any], job: JobRun, progress: Progress) -> None:
        try:
            self._ensure_client().emit(build())
        except Exception as err:  # noqa: BLE001 (lineage export must not undo a committed version)
            progress(f"warning: OpenLineage {state} event for {job.asset} not sent: {err}")

    def _ensure_client(self):
        if self._client is None:
            from openlineage.client import OpenLineageClient

            if self.transport.get("type") == "file":
                Path(self.transport["log_file_path"]).parent.mkdir(parents=True, exist_ok=True)
            self._client = OpenLineageClient(config={"transport": self.transport})
        return self._client


@dataclass
class Outputs:
    """The datasets a run produced, filled in by the block before it ends."""

    datasets: list[Dataset] = field(default_factory=list)

    def add(self, dataset: Dataset) -> None:
        self.datasets.append(dataset)


def _event(state: str, run_id: str, job: JobRun, outputs: Sequence[Dataset], error: BaseException | None = None):
    from openlineage.client.event_v2 import (
        InputDataset,
        Job,
        OutputDataset,
        Run,
        RunEvent,
        RunState,
    )
    from openlineage.client.facet_v2 import error_message_run, job_type_job, parent_run

    made_by = producer()
    run_facets: dict[str, Any] = {}
    if _is_uuid(job.request.run_id):
        run_facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=job.request.run_id),
            job=parent_run.Job(namespace=DAGSTER_NAMESPACE, name=job.request.job_name or "__ASSET_JOB"),
            producer=made_by,
        )
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=str(error)[:2000] or type(error).__name__, programmingLanguage="python", producer=made_by
        )
    job_type = job_type_job.JobTypeJobFacet(
        processingType="BATCH", integration="CUSTODY", jobType=job.job_type, producer=made_by
    )
    return RunEvent(
        eventType=RunState[state],
        eventTime=datetime.now(UTC).isoformat(),
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=NAMESPACE, name=job.asset, facets={"jobType": job_type}),
        producer=made_by,
        inputs=[InputDataset(namespace=d.namespace, name=d.path, facets=_facets(d, made_by)) for d in job.inputs],
        outputs=[OutputDataset(namespace=d.namespace, name=d.path, facets=_facets(d, made_by)) for d in outputs],
    )


def _facets(dataset: Dataset, made_by: str) -> dict[str, Any]:
    from openlineage.client.facet_v2 import (
        dataset_version_dataset,
        ownership_dataset,
        schema_dataset,
    )

    facets: dict[str, Any] = {
        "version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=dataset.version, producer=made_by)
    }
    if dataset.schema_json:
        fields = json.loads(dataset.schema_json).get("fields", [])
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[
                schema_dataset.SchemaDatasetFacetFields(name=f["name"], type=_type_name(f["type"])) for f in fields
            ],
            producer=made_by,
        )
    if dataset.columns:
        facets["columnLineage"] = _column_lineage(dataset.columns, made_by)
    if dataset.roles:
        facets["ownership"] = ownership_dataset.OwnershipDatasetFacet(
            owners=[ownership_dataset.Owner(name=f"group:{group}", type=role) for role, group in dataset.roles.items()],
            producer=made_by,
        )
    return facets


def _column_lineage(columns: tuple[ColumnInput, ...], made_by: str):
    from openlineage.client.facet_v2 import column_lineage_dataset as facet

    fields: dict[str, dict[tuple[str, str, str], list]] = {}
    every: dict[tuple[str, str, str], list] = {}
    for each in columns:
        target = every if each.column is None else fields.setdefault(each.column, {})
        target.setdefault((each.namespace, each.path, each.field), []).append(_transformation(each.edge))

    def inputs(found: dict[tuple[str, str, str], list]) -> list:
        return [
            facet.InputField(namespace=namespace, name=path, field=name, transformations=transformations)
            for (namespace, path, name), transformations in found.items()
        ]

    return facet.ColumnLineageDatasetFacet(
        fields={column: facet.Fields(inputFields=inputs(found)) for column, found in fields.items()},
        dataset=inputs(every),
        producer=made_by,
    )


def _transformation(edge: Edge):
    from openlineage.client.facet_v2 import column_lineage_dataset as facet

    from governance.lineage.columns import Transformation

    # OpenLineage has no word for a step nobody can see into (a Python UDF, an operation without a
    # rule): it is a TRANSFORMATION, described as unknown.
    known = edge.transformation is not Transformation.UNKNOWN
    return facet.Transformation(
        type=edge.kind.value,
        subtype=edge.transformation.value if known else Transformation.TRANSFORMATION.value,
        description=None if known else "unknown transformation",
        masking=edge.masking,
    )


def _is_uuid(value: str | None) -> TypeGuard[str]:
    try:
        UUID(value or "")
    except ValueError:
        return False
    return True


def _type_name(spark_type: Any) -> str:
    return spark_type if isinstance(spark_type, str) else str(spark_type.get("type", "struct"))
