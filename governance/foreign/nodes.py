"""Foreign runs and the datasets they wrote, as a lineage shows them: plain values, which the CLI
also builds from the service's answers without loading a database library."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# The most jobs, or runs of a job, one answer lists.
MOST_LISTED = 1_000


@dataclass
class ForeignDatasetNode:
    """A dataset a foreign run wrote, and the foreign runs that read it."""

    namespace: str
    name: str
    version: str | None
    read_by: list[ForeignRunNode] = field(default_factory=list)
    # The Custody version it is (asset@N), for a dataset a foreign run read from the lake.
    custody: str | None = None
    # For a dataset written: the column lineage its writer reported (WrittenColumns.to_dict).
    columns: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "version": self.version,
            "custody": self.custody,
            "columns": self.columns,
            "read_by": [run.to_dict() for run in self.read_by],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ForeignDatasetNode:
        readers = [ForeignRunNode.from_dict(run) for run in data.get("read_by", ())]
        return cls(
            data["namespace"], data["name"], data.get("version"), readers, data.get("custody"), data.get("columns")
        )


@dataclass
class ForeignRunNode:
    """A run of a job Custody does not run, as its OpenLineage events told it."""

    run_id: str
    job_namespace: str
    job_name: str
    state: str
    started_at: str | None
    user: str | None
    producer: str
    reporter: str
    depth: int
    outputs: list[ForeignDatasetNode] = field(default_factory=list)
    # Provenance only: what the run read.
    inputs: list[ForeignDatasetNode] = field(default_factory=list)
    expanded_elsewhere: bool = False
    # When it ended (COMPLETE, FAIL or ABORT), and the error its events gave, if any.
    ended_at: str | None = None
    error: str | None = None
    # The run its parent facet names (an Airflow DAG run, a Spark application) and its job.
    parent_run_id: str | None = None
    parent_job: str | None = None

    @property
    def job(self) -> str:
        return f"{self.job_namespace}/{self.job_name}"

    def walk(self) -> Iterable[ForeignRunNode]:
        yield self
        for output in self.outputs:
            for reader in output.read_by:
                yield from reader.walk()

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("outputs", "inputs")}
        out["outputs"] = [dataset.to_dict() for dataset in self.outputs]
        out["inputs"] = [dataset.to_dict() for dataset in self.inputs]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ForeignRunNode:
        # What a newer service adds, a client that does not know it leaves out.
        fields = {k: v for k, v in data.items() if k in RUN_FIELDS and k not in ("outputs", "inputs")}
        return cls(
            **fields,
            outputs=[ForeignDatasetNode.from_dict(d) for d in data.get("outputs", ())],
            inputs=[ForeignDatasetNode.from_dict(d) for d in data.get("inputs", ())],
        )


RUN_FIELDS = frozenset(ForeignRunNode.__dataclass_fields__)
