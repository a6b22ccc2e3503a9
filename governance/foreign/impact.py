"""What foreign runs built from Custody's versions: the runs that read a version, the datasets they
wrote, the runs that read those, and so on. A dataset read is the one written when both have the
same namespace and name and their versions agree (either gives none, or both give the same). And
upstream, the foreign runs that wrote what a landing version was ingested from, with what they read."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from sqlmodel import Session, col, select

from governance.catalog.byids import ByIds, chunked
from governance.catalog.models import ForeignDataset, ForeignIO, ForeignRun, VersionRow
from governance.foreign.columns import WrittenColumns, written_columns
from governance.foreign.datasets import ENDED, INPUT, OUTPUT
from governance.foreign.nodes import ForeignDatasetNode, ForeignRunNode

# As deep as a version's own lineage is walked.
MAX_DEPTH = 100


@dataclass(frozen=True)
class _Output:
    run_id: str
    dataset: ForeignDataset


def foreign_readers(
    session: Session, version_ids: Sequence[int], claimed: set[str] | None = None
) -> dict[int, list[ForeignRunNode]]:
    """For each version that foreign runs read, those runs, each with what it wrote and who read
    that, transitively; each run expanded once, where it is nearest a version. `claimed`: the runs
    expanded already (by an earlier call of the same walk), which this one adds to."""
    first = _readers_of_versions(session, version_ids)
    if not first:
        return {}
    depth_of: dict[str, int] = {}
    frontier = sorted({run for runs in first.values() for run in runs})
    outputs: dict[str, list[_Output]] = {}
    readers: dict[int, list[str]] = {}
    level = 0
    while frontier and level <= MAX_DEPTH:
        for run in frontier:
            depth_of.setdefault(run, level)
        written = _outputs_of(session, frontier)
        for output in written:
            outputs.setdefault(output.run_id, []).append(output)
        found = _readers_of_datasets(session, [output.dataset for output in written])
        readers.update(found)
        frontier = sorted({run for runs in found.values() for run in runs} - depth_of.keys())
        level += 1
    runs = _runs(session, list(depth_of))
    nodes = {run_id: _node(run, depth_of[run_id]) for run_id, run in runs.items()}
    lineage = written_columns(session, [(o.run_id, o.dataset.id or 0) for found in outputs.values() for o in found])
    claimed = set() if claimed is None else claimed
    return {
        version_id: [_tree(run, nodes, outputs, readers, lineage, claimed) for run in _in_order(run_ids, nodes)]
        for version_id, run_ids in sorted(first.items())
    }


def _in_order(run_ids: Iterable[str], nodes: dict[str, ForeignRunNode]) -> list[str]:
    """The runs known, the earliest started first."""
    known = [run for run in run_ids if run in nodes]
    return sorted(known, key=lambda run: (nodes[run].started_at or "", nodes[run].job, run))


def batch_locations(paths: Iterable[str]) -> list[str]:
    """Where a foreign run may have written a landing version's DropZone batch: its files and their folders."""
    files = set(paths)
    return sorted(files | {str(PurePosixPath(path).parent) for path in files})


def written_at(session: Session, locations: dict[int, list[str]]) -> dict[int, dict[str, list[ForeignDataset]]]:
    """For each version, the foreign runs that wrote one of its `locations`, with what each wrote there."""
    wanted = {location: vid for vid, found in locations.items() for location in found}
    written: dict[int, dict[str, list[ForeignDataset]]] = {}
    for chunk in chunked(list(wanted)):
        query = (
            select(ForeignIO.run_id, ForeignDataset)
            .join(ForeignDataset, col(ForeignDataset.id) == col(ForeignIO.dataset_id))
            .where(col(ForeignIO.direction) == OUTPUT, col(ForeignDataset.location).in_(chunk))
        )
        for run_id, dataset in session.exec(query):
            written.setdefault(wanted[dataset.location or ""], {}).setdefault(run_id, []).append(dataset)
    return written


def foreign_writers(session: Session, locations: dict[int, list[str]]) -> dict[int, list[ForeignRunNode]]:
    """For each version, the foreign runs that wrote one of its `locations` (its DropZone files and
    their batch folder), each with what it wrote there and what it read."""
    written = written_at(session, locations)
    run_ids = sorted({run for runs in written.values() for run in runs})
    runs, reads = _runs(session, run_ids), _inputs_of(session, run_ids)
    lineage = written_columns(
        session, [(run, d.id or 0) for by_run in written.values() for run, found in by_run.items() for d in found]
    )
    found: dict[int, list[ForeignRunNode]] = {}
    for vid, by_run in sorted(written.items()):
        known = sorted((run for run in by_run if run in runs), key=lambda run: (runs[run].started_at or "", run))
        for run_id in known:
            node = _node(runs[run_id], 1)
            node.outputs = [_written(run_id, d, lineage) for d in by_run[run_id]]
            node.inputs = reads.get(run_id, [])
            found.setdefault(vid, []).append(node)
    return found


def written_lineage(session: Session, locations: dict[int, list[str]]) -> dict[int, list[tuple[str, WrittenColumns]]]:
    """For each version, the column lineage foreign runs reported for what they wrote at its
    `locations`, each with the job that wrote it (namespace/name)."""
    written = written_at(session, locations)
    pairs = [(run, d.id or 0) for by_run in written.values() for run, found in by_run.items() for d in found]
    lineage = written_columns(session, pairs)
    runs = _runs(session, sorted({run for run, _ in pairs}))
    return {
        vid: [
            (f"{runs[run].job_namespace}/{runs[run].job_name}", lineage[(run, d.id or 0)])
            for run, found in sorted(by_run.items())
            for d in found
            if run in runs and (run, d.id or 0) in lineage
        ]
        for vid, by_run in written.items()
    }


def _inputs_of(session: Session, run_ids: list[str]) -> dict[str, list[ForeignDatasetNode]]:
    """What each run read: datasets, each with the Custody version it is, if one."""
    reads: dict[str, list[ForeignDatasetNode]] = {}
    for chunk in chunked(run_ids):
        query = (
            select(ForeignIO.run_id, ForeignDataset, VersionRow.asset_key, VersionRow.number)
            .join(ForeignDataset, col(ForeignDataset.id) == col(ForeignIO.dataset_id))
            .outerjoin(VersionRow, col(VersionRow.id) == col(ForeignIO.version_id))
            .where(col(ForeignIO.direction) == INPUT, col(ForeignIO.run_id).in_(chunk))
        )
        for run_id, dataset, asset, number in session.exec(query):
            custody = f"{asset}@{number}" if asset is not None else None
            node = ForeignDatasetNode(dataset.namespace, dataset.name, dataset.version or None, custody=custody)
            reads.setdefault(run_id, []).append(node)
    return {run: sorted(found, key=lambda d: (d.namespace, d.name)) for run, found in reads.items()}


def _tree(
    run_id: str,
    nodes: dict[str, ForeignRunNode],
    outputs: dict[str, list[_Output]],
    readers: dict[int, list[str]],
    lineage: dict[tuple[str, int], WrittenColumns],
    claimed: set[str],
) -> ForeignRunNode:
    if run_id in claimed:
        return replace(nodes[run_id], outputs=[], expanded_elsewhere=True)
    claimed.add(run_id)
    node = nodes[run_id]
    for output in sorted(outputs.get(run_id, ()), key=lambda o: (o.dataset.namespace, o.dataset.name)):
        written = _written(run_id, output.dataset, lineage)
        for reader in _in_order(readers.get(output.dataset.id or 0, ()), nodes):
            if reader != run_id:
                written.read_by.append(_tree(reader, nodes, outputs, readers, lineage, claimed))
        node.outputs.append(written)
    return node


def _written(
    run_id: str, dataset: ForeignDataset, lineage: dict[tuple[str, int], WrittenColumns]
) -> ForeignDatasetNode:
    columns = lineage.get((run_id, dataset.id or 0))
    return ForeignDatasetNode(
        dataset.namespace, dataset.name, dataset.version or None, columns=columns.to_dict() if columns else None
    )


def _readers_of_versions(session: Session, version_ids: Sequence[int]) -> dict[int, list[str]]:
    """The runs that read each version: asked once for a whole level of a walk, which may hold a
    hundred thousand versions."""
    found: dict[int, list[str]] = {}
    reads = ByIds(session, "version_id, run_id", ForeignIO.__tablename__, "version_id", f"direction = '{INPUT}'")
    with closing(reads):
        for version_id, run_id in reads.rows(list(version_ids)):
            found.setdefault(int(version_id), []).append(run_id)
    return {vid: sorted(set(runs)) for vid, runs in found.items()}


def _outputs_of(session: Session, run_ids: list[str]) -> list[_Output]:
    written: list[_Output] = []
    for chunk in chunked(run_ids):
        query = (
            select(ForeignIO.run_id, ForeignDataset)
            .join(ForeignDataset, col(ForeignDataset.id) == col(ForeignIO.dataset_id))
            .where(col(ForeignIO.direction) == OUTPUT, col(ForeignIO.run_id).in_(chunk))
        )
        written += [_Output(run_id, dataset) for run_id, dataset in session.exec(query)]
    return written


def _readers_of_datasets(session: Session, datasets: list[ForeignDataset]) -> dict[int, list[str]]:
    """For each dataset written, the runs that read it: the same namespace and name, versions agreeing."""
    by_ident: dict[str, list[ForeignDataset]] = {}
    for dataset in datasets:
        by_ident.setdefault(dataset.ident, []).append(dataset)
    found: dict[int, set[str]] = {}
    for chunk in chunked(list(by_ident)):
        query = (
            select(ForeignIO.run_id, ForeignDataset.ident, ForeignDataset.version)
            .join(ForeignDataset, col(ForeignDataset.id) == col(ForeignIO.dataset_id))
            .where(col(ForeignIO.direction) == INPUT, col(ForeignDataset.ident).in_(chunk))
        )
        for run_id, read_ident, read_version in session.exec(query):
            for written in by_ident[read_ident]:
                if not written.version or not read_version or written.version == read_version:
                    found.setdefault(written.id or 0, set()).add(run_id)
    return {dataset_id: sorted(runs) for dataset_id, runs in found.items()}


def _runs(session: Session, run_ids: list[str]) -> dict[str, ForeignRun]:
    runs: dict[str, ForeignRun] = {}
    for chunk in chunked(run_ids):
        runs.update(
            (run.run_id, run) for run in session.exec(select(ForeignRun).where(col(ForeignRun.run_id).in_(chunk)))
        )
    return runs


def _node(run: ForeignRun, depth: int) -> ForeignRunNode:
    return ForeignRunNode(
        run_id=run.run_id,
        job_namespace=run.job_namespace,
        job_name=run.job_name,
        state=run.state,
        started_at=run.started_at,
        user=run.user,
        producer=run.producer,
        reporter=run.reporter,
        depth=depth,
        ended_at=run.state_time if run.state in ENDED else None,
        error=run.error,
        parent_run_id=run.parent_run_id,
        parent_job=f"{run.parent_job_namespace}/{run.parent_job_name}" if run.parent_run_id else None,
    )
