"""Foreign runs grouped as their users think of them: a version read by a thousand runs of one job
is read by that job, whose runs are counted by state, with its last run and its last failure; a
job's runs whose parent facet names another job's run (an Airflow DAG run and its tasks, a Spark
application and its actions) sit under that job, however deep. Plain values, built from a
lineage's run nodes, which the CLI also has from the service's answers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from governance.foreign.events import moment
from governance.foreign.nodes import ForeignDatasetNode, ForeignRunNode

FAILED = ("FAIL", "ABORT")


@dataclass
class WrittenGroup:
    """A dataset (by namespace and name) the runs of a job wrote, and the jobs whose runs read it."""

    namespace: str
    name: str
    versions: set[str] = field(default_factory=set)
    writers: int = 0
    # The column lineage the newest run that wrote it reported.
    columns: dict[str, Any] | None = None
    read_by: list[JobGroup | ParentGroup] = field(default_factory=list)


@dataclass
class JobGroup:
    """The runs of one job at one place in a lineage, the earliest started first."""

    job: str
    runs: list[ForeignRunNode]
    outputs: list[WrittenGroup] = field(default_factory=list)

    @property
    def states(self) -> list[tuple[str, int]]:
        """How many runs are in each state, the most first."""
        return Counter(run.state for run in self.runs).most_common()

    @property
    def last(self) -> ForeignRunNode:
        return self.runs[-1]

    @property
    def last_failure(self) -> ForeignRunNode | None:
        return next((run for run in reversed(self.runs) if run.state in FAILED), None)

    @property
    def parent_job(self) -> str | None:
        """The job the runs' parent runs are of, when they all name one (and not this job)."""
        parents = {run.parent_job for run in self.runs}
        parent = parents.pop() if len(parents) == 1 else None
        return parent if parent != self.job else None

    @property
    def expanded_elsewhere(self) -> bool:
        return all(run.expanded_elsewhere for run in self.runs)


@dataclass
class ParentGroup:
    """A job whose runs are the parents of the runs of `jobs` (an Airflow DAG and its tasks, a Spark
    application and its actions; a task may head a Spark application in turn); `own`: its own
    runs, where they are at the same place."""

    job: str
    jobs: list[JobGroup | ParentGroup] = field(default_factory=list)
    own: JobGroup | None = None

    @property
    def parent_runs(self) -> int:
        """How many of its runs are parents here."""
        children = (item if isinstance(item, JobGroup) else item.own for item in self.jobs)
        return len({run.parent_run_id for child in children if child is not None for run in child.runs})


Grouped = JobGroup | ParentGroup


def grouped(runs: Sequence[ForeignRunNode]) -> list[Grouped]:
    """`runs` (the foreign runs at one place of a lineage: those that read a version, or a dataset)
    as jobs, the jobs of one parent job under it, however deep, each job's outputs and their
    readers grouped so in turn."""
    by_job: dict[str, list[ForeignRunNode]] = {}
    for run in sorted(runs, key=run_order):
        by_job.setdefault(run.job, []).append(run)
    jobs = [JobGroup(job, found, _outputs(found)) for job, found in by_job.items()]
    heads: dict[str, ParentGroup] = {}
    for group in jobs:
        if (parent := group.parent_job) is not None:
            heads.setdefault(parent, ParentGroup(parent))
    # Each job is one item: the group it heads, if its runs are parents here, else its own.
    items: dict[str, Grouped] = {}
    parent_of: dict[str, str | None] = {}
    for group in jobs:
        parent = group.parent_job
        if parent is not None and parent not in by_job and parent not in items:
            # A parent whose own runs are not here (a DAG run reads nothing) stands where its first child does.
            items[parent], parent_of[parent] = heads[parent], None
        if group.job in heads:
            heads[group.job].own = group
        items[group.job] = heads.get(group.job, group)
        parent_of[group.job] = parent
    for job, head in heads.items():
        items.setdefault(job, head)
        parent_of.setdefault(job, None)
    placed: list[Grouped] = []
    for job, item in items.items():
        parent = parent_of[job]
        if parent is not None and parent in heads and not _above(job, parent, parent_of):
            heads[parent].jobs.append(item)
        else:
            placed.append(item)
    return placed


def _above(job: str, parent: str, parent_of: dict[str, str | None]) -> bool:
    """Whether `job` is `parent` or above it already: placing it under `parent` would make a circle."""
    seen: set[str] = set()
    at: str | None = parent
    while at is not None and at not in seen:
        if at == job:
            return True
        seen.add(at)
        at = parent_of.get(at)
    return False


def _outputs(runs: Iterable[ForeignRunNode]) -> list[WrittenGroup]:
    written: dict[tuple[str, str], WrittenGroup] = {}
    readers: dict[tuple[str, str], dict[str, ForeignRunNode]] = {}
    for run in runs:
        for output in run.outputs:
            key = (output.namespace, output.name)
            group = written.setdefault(key, WrittenGroup(output.namespace, output.name))
            group.writers += 1
            group.versions.update([output.version] if output.version else [])
            group.columns = output.columns or group.columns
            readers.setdefault(key, {}).update((reader.run_id, reader) for reader in output.read_by)
    for key, group in written.items():
        group.read_by = grouped(list(readers[key].values()))
    return sorted(written.values(), key=lambda group: (group.namespace, group.name))


def run_order(run: ForeignRunNode) -> tuple[str, str]:
    """Runs in the order they started (else ended), as a job's last run is found."""
    return (run.started_at or run.ended_at or "", run.run_id)


def duration(run: ForeignRunNode) -> str | None:
    """How long the run took, from its start to its end, as `3.2 s`, `4 min 5 s` or `2 h 3 min`."""
    if not run.started_at or not run.ended_at:
        return None
    seconds = (moment(run.ended_at) - moment(run.started_at)).total_seconds()
    if seconds < 0:  # the clocks of its start and its end disagree
        return None
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def dataset_of(group: WrittenGroup) -> ForeignDatasetNode:
    """The written dataset as a node, its versions left out when the runs wrote several."""
    version = next(iter(group.versions)) if len(group.versions) == 1 else None
    return ForeignDatasetNode(group.namespace, group.name, version, columns=group.columns)
