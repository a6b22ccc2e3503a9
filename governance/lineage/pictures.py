"""Lineage as a graph to look at or to hand to graph tools: versions (or columns) as nodes with what
an auditor asks about them, edges with the run and code that made the output.

Graphviz lays out the pictures (its `dot` program draws them); networkx writes GraphML, which yEd,
Gephi and Cytoscape read. DOT, GraphML and JSON need no program outside Python.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from governance.catalog import Catalog
from governance.errors import EnvironmentProblem, InvalidInput
from governance.foreign.groups import Grouped, JobGroup, dataset_of, grouped, run_order
from governance.foreign.nodes import ForeignDatasetNode, ForeignRunNode
from governance.lineage import graph
from governance.lineage.column_trace import ColumnNode, column_tree
from governance.lineage.nodes import Lineage, VersionNode
from governance.lineage.terms import Direction
from governance.zones import VersionRef

if TYPE_CHECKING:
    import networkx as nx

    from governance.frames import Frame

PICTURES = ("svg", "png")
FORMATS = (*PICTURES, "dot", "graphml", "json")
INSTALL_DOT = (
    "drawing lineage needs Graphviz's dot program: apt-get install graphviz (or your system's graphviz package)"
)
ZONE_FILL = {"landing": "#dbeafe", "integration": "#dcfce7", "quarantine": "#fef3c7"}
PURGED_FILL = "#e5e7eb"
# What jobs Custody does not run read and wrote, as their OpenLineage events told it.
FOREIGN_FILL = "#fae8ff"
FOREIGN_LINE = "#a21caf"
HASH_SHOWN = 12
LEGEND = (
    '<<table border="0" cellborder="1" cellspacing="0" cellpadding="3">'
    f'<tr><td bgcolor="{ZONE_FILL["landing"]}">landing</td><td bgcolor="{ZONE_FILL["integration"]}">integration</td>'
    f'<td bgcolor="{PURGED_FILL}">purged</td><td color="#b91c1c">critical</td><td color="#b45309">protected</td>'
    f'<td bgcolor="{FOREIGN_FILL}" color="{FOREIGN_LINE}">not run by Custody</td></tr>'
    "</table>>"
)


@dataclass(frozen=True)
class LineageGraph:
    """Nodes by id with their attributes, and edges (source, target, attributes) in the direction data flows."""

    title: str
    nodes: dict[str, dict[str, Any]]
    edges: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "nodes": [{"id": node_id, **attributes} for node_id, attributes in self.nodes.items()],
            "edges": [{"source": source, "target": target, **attributes} for source, target, attributes in self.edges],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineageGraph:
        """The graph `to_dict` gave, as the service sends it."""
        nodes = {node["id"]: {k: v for k, v in node.items() if k != "id"} for node in data["nodes"]}
        edges = [
            (edge["source"], edge["target"], {k: v for k, v in edge.items() if k not in ("source", "target")})
            for edge in data["edges"]
        ]
        return cls(data["title"], nodes, edges)

    def to_frame(self) -> Frame:
        """One row per node, its id first; the attributes a node kind lacks are empty."""
        from governance.frames import typed

        return typed(
            ({"id": node_id, **attributes} for node_id, attributes in self.nodes.items()),
            times=["created_at"] if any("created_at" in a for a in self.nodes.values()) else [],
        )

    def to_networkx(self) -> nx.DiGraph:
        """A networkx DiGraph; attributes without a value are left out, as GraphML has no null."""
        import networkx as nx

        graph: nx.DiGraph[str] = nx.DiGraph(name=self.title)
        graph.add_nodes_from((node_id, _present(attributes)) for node_id, attributes in self.nodes.items())
        graph.add_edges_from((source, target, _present(attributes)) for source, target, attributes in self.edges)
        return graph

    def to_graphml(self, path: str | Path) -> None:
        """Write GraphML to `path`, replacing the file if there is one."""
        save(self, Path(path), "graphml", force=True)

    def to_dot(self) -> str:
        return self._digraph().source

    def render(self, kind: str) -> bytes:
        """The picture as `svg` or `png` bytes, laid out by Graphviz's dot."""
        if kind not in PICTURES:
            raise ValueError(f"a picture is one of {', '.join(PICTURES)}, not {kind}")
        if shutil.which("dot") is None:
            raise EnvironmentProblem(INSTALL_DOT)
        return self._digraph().pipe(format=kind)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        """Jupyter shows the picture, or says how to get one when Graphviz is missing."""
        text = f"{self.title}: {len(self.nodes)} nodes, {len(self.edges)} edges"
        if shutil.which("dot") is None:
            return {"text/plain": f"{text} ({INSTALL_DOT})"}
        return {"image/svg+xml": self.render("svg").decode(), "text/plain": text}

    def _digraph(self):
        import graphviz

        picture = graphviz.Digraph(
            name="lineage",
            graph_attr={
                "rankdir": "LR",
                "label": self.title,
                "labelloc": "t",
                "fontname": "Helvetica",
                "fontsize": "14",
            },
            node_attr={"fontname": "Helvetica", "fontsize": "10"},
            edge_attr={"fontname": "Helvetica", "fontsize": "8", "color": "#6b7280"},
        )
        # DOT reads a colon in a node's name as a port: the picture names its nodes n0, n1, …
        names = {node_id: f"n{index}" for index, node_id in enumerate(self.nodes)}
        for node_id, attributes in self.nodes.items():
            look = _look(attributes)
            # Names and paths come from the data: a backslash in them is a character, not DOT's escape.
            look.update(label=graphviz.escape(look["label"]), tooltip=graphviz.escape(look["tooltip"]))
            picture.node(names[node_id], **look)
        if any(attributes["kind"] in ("version", "column") for attributes in self.nodes.values()):
            picture.node("legend", label=LEGEND, shape="plaintext", fontsize="9")
        for source, target, attributes in self.edges:
            # INDIRECT dependencies (filters, joins, groupings) are dashed: the values flow along solid edges.
            # What a job Custody does not run read or wrote is drawn in its colour.
            indirect = attributes.get("direct") is False
            foreign = {"color": FOREIGN_LINE} if attributes.get("foreign") else {}
            picture.edge(
                names[source],
                names[target],
                label=attributes.get("how", ""),
                tooltip=graphviz.escape(_edge_tooltip(attributes)),
                style="dashed" if indirect or foreign else "solid",
                **foreign,
            )
        return picture


def lineage_graph(
    catalog: Catalog,
    ref: VersionRef,
    *,
    impact: bool = False,
    column: str | None = None,
    depth: int | None = None,
    every_run: bool = False,
) -> LineageGraph:
    """The provenance of `ref` (or its impact), or with `column` the lineage of that column back to
    the DropZone; `depth` cuts a version graph that many hops from `ref`. Other tools' runs of an
    impact are drawn as one node a job, or with `every_run`, one a run."""
    if column is not None:
        if impact or depth is not None:
            raise InvalidInput(
                "a column's lineage is drawn whole, back to its DropZone fields: --columns takes neither --impact nor --depth"
            )
        return column_graph(column_tree(catalog, ref, column))
    return version_graph((graph.impact if impact else graph.provenance)(catalog, ref, depth), every_run)


def save(drawn: LineageGraph, path: Path, kind: str, *, force: bool = False) -> int:
    """Write the graph to `path` as `kind` (one of FORMATS), all or nothing; the bytes written.
    An existing file is replaced only with `force`."""
    if kind not in FORMATS:
        raise InvalidInput(f"unknown format {kind!r}: use one of {', '.join(FORMATS)}")
    writable(path, force)
    return write_whole(path, content(drawn, kind))


def writable(path: Path, force: bool) -> None:
    """Refuse a file that cannot be written, or that exists when it may not be replaced."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise InvalidInput(f"cannot write {path}: {folder} is not a writable folder")
    if path.exists() and not force:
        raise InvalidInput(f"{path} exists: give --force to replace it")


def write_whole(path: Path, data: bytes) -> int:
    """`data` in `path`, all or nothing; the bytes written."""
    folder = path.parent if str(path.parent) else Path(".")
    # Opened by name, not by mkstemp: the file gets the permissions the umask gives, as any other would.
    temporary = folder / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(temporary, "xb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return len(data)


def bounded(drawn: LineageGraph, max_nodes: int, limit: str, depth: str) -> LineageGraph:
    """The graph, if it has at most `max_nodes` nodes; else what to ask instead, naming the options
    `limit` and `depth` of the caller's interface."""
    if len(drawn) > max_nodes:
        raise InvalidInput(
            f"the {drawn.title} has {len(drawn):,} nodes, more than {limit} {max_nodes:,}: "
            f"draw fewer levels with {depth}, or raise {limit}"
        )
    return drawn


def content(drawn: LineageGraph, kind: str) -> bytes:
    """The graph as a file of `kind` holds it."""
    if kind in PICTURES:
        return drawn.render(kind)
    if kind == "dot":
        return drawn.to_dot().encode()
    if kind == "json":
        return json.dumps(drawn.to_dict(), indent=2).encode()
    import networkx as nx

    return "\n".join(nx.generate_graphml(drawn.to_networkx())).encode()


def version_graph(lineage: Lineage, every_run: bool = False) -> LineageGraph:
    """Provenance or impact as a graph; a provenance's landing versions lead back to their DropZone files."""
    nodes: dict[str, dict[str, Any]] = {}
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    upstream = lineage.direction is Direction.UPSTREAM
    writers: list[tuple[ForeignRunNode, VersionNode]] = []
    for node in lineage.root.walk():
        nodes.setdefault(node.ref, _version_attributes(node))
        if node.truncated:
            nodes[node.ref]["truncated"] = True
        for link in node.links:
            source, target = (link, node) if upstream else (node, link)
            edges[(source.ref, target.ref)] = _made_by(target)
        if upstream and node.read and not node.expanded_elsewhere:
            table_id = f"table:{node.read['namespace']}/{node.read['name']}@{node.read['snapshot_at']}"
            nodes.setdefault(
                table_id,
                {
                    "kind": "table",
                    "namespace": node.read["namespace"],
                    "name": node.read["name"],
                    "snapshot_at": node.read["snapshot_at"],
                },
            )
            edges[(table_id, node.ref)] = _made_by(node)
        if not upstream and not every_run:
            _add_jobs(grouped(node.foreign), node.ref, nodes, edges)
        for run in () if upstream or not every_run else node.foreign:
            _add_foreign(run, node.ref, nodes, edges)
        if upstream and node.zone == "landing" and not node.expanded_elsewhere:
            for source_file in node.sources:
                file_id = f"file:{source_file.sha256}"
                nodes.setdefault(
                    file_id,
                    {
                        "kind": "file",
                        "path": source_file.path,
                        "bytes": source_file.bytes,
                        "sha256": source_file.sha256,
                        "batch": node.batch or "",
                    },
                )
                edges[(file_id, node.ref)] = _made_by(node)
            writers += [(run, node) for run in node.foreign]
    # Once every version is drawn: a version a writer read is joined to its node when it has one.
    for run, landing in writers:
        _add_writer(run, landing, nodes, edges)
    for attributes in nodes.values():
        attributes.pop(RUNS_MET, None)
    what = "provenance" if upstream else "impact"
    return LineageGraph(f"{what} of {lineage.root.ref}", nodes, [(s, t, a) for (s, t), a in edges.items()])


def _add_foreign(
    run: ForeignRunNode, read: str, nodes: dict[str, dict[str, Any]], edges: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """A foreign run that read `read` (a node's id), the datasets it wrote and the runs that read those."""
    run_id = _add_job(run, nodes)
    edges[(read, run_id)] = {"run": run.run_id, "code_version": "", "foreign": True}
    for output in run.outputs:
        dataset_id = _add_dataset(output, nodes)
        edges[(run_id, dataset_id)] = {"run": run.run_id, "code_version": "", "foreign": True}
        for reader in output.read_by:
            _add_foreign(reader, dataset_id, nodes, edges)


# Where a job's node keeps the runs met so far while its graph is drawn; taken away once it is.
RUNS_MET = "_runs_met"


def _add_jobs(
    groups: Sequence[Grouped],
    read: str,
    nodes: dict[str, dict[str, Any]],
    edges: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """Other tools' jobs whose runs read `read` (a node's id), one node a job, the datasets they
    wrote and the jobs that read those. A job met at several places is one node, whose runs are
    those of every place, each counted once."""
    for job in _each_job(groups):
        job_id = _add_job_group(job, nodes)
        edges[(read, job_id)] = _ran(job)
        for output in job.outputs:
            dataset_id = _add_dataset(dataset_of(output), nodes)
            edges[(job_id, dataset_id)] = _ran(job)
            _add_jobs(output.read_by, dataset_id, nodes, edges)


def _each_job(groups: Sequence[Grouped]) -> Iterator[JobGroup]:
    """The jobs of `groups`, a parent job's own runs and its children's, however deep."""
    for group in groups:
        if isinstance(group, JobGroup):
            yield group
            continue
        if group.own is not None:
            yield group.own
        yield from _each_job(group.jobs)


def _ran(job: JobGroup) -> dict[str, Any]:
    return {"run": job.last.run_id, "runs": len(job.runs), "code_version": "", "foreign": True}


def _add_job_group(job: JobGroup, nodes: dict[str, dict[str, Any]]) -> str:
    job_id = f"job:{job.job}"
    known = nodes.get(job_id)
    runs = {run.run_id: run for run in job.runs}
    if known is not None:
        runs.update((run_id, run) for run_id, run in known.pop(RUNS_MET).items())
    merged = JobGroup(job.job, sorted(runs.values(), key=run_order))
    nodes[job_id] = {
        **_run_attributes(merged.last),
        "runs": len(merged.runs),
        "states": ", ".join(f"{count} {state}" for state, count in merged.states),
        "parent": merged.parent_job or "",
        RUNS_MET: runs,
    }
    return job_id


def _add_job(run: ForeignRunNode, nodes: dict[str, dict[str, Any]]) -> str:
    run_id = f"job:{run.run_id}"
    nodes.setdefault(run_id, _run_attributes(run))
    return run_id


def _run_attributes(run: ForeignRunNode) -> dict[str, Any]:
    """A foreign job's node, as its run (or its last run) shows it."""
    return {
        "kind": "foreign_job",
        "job": run.job,
        "run": run.run_id,
        "state": run.state,
        "user": run.user or "",
        "reporter": run.reporter,
        "started_at": run.started_at or "",
    }


def _add_dataset(dataset: ForeignDatasetNode, nodes: dict[str, dict[str, Any]]) -> str:
    """A dataset of a foreign run (a Custody version not drawn otherwise is named by its reference)."""
    name, version = (dataset.custody, "") if dataset.custody else (dataset.name, dataset.version or "")
    dataset_id = f"dataset:{dataset.namespace}/{name}@{version}"
    nodes.setdefault(
        dataset_id, {"kind": "foreign_dataset", "namespace": dataset.namespace, "name": name, "version": version}
    )
    return dataset_id


def _add_writer(
    run: ForeignRunNode,
    landing: VersionNode,
    nodes: dict[str, dict[str, Any]],
    edges: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """A foreign run that wrote a landing version's DropZone files (a file it names, or every file of
    the batch folder it names), and what it read: a Custody version by its node, anything else as a
    foreign dataset."""
    run_id = _add_job(run, nodes)
    named = [f for f in landing.sources if any(o.name.endswith(f"/{f.path}") for o in run.outputs)]
    for source_file in named or landing.sources:
        edges[(run_id, f"file:{source_file.sha256}")] = {"run": run.run_id, "code_version": "", "foreign": True}
    for read in run.inputs:
        read_id = read.custody if read.custody in nodes else _add_dataset(read, nodes)
        edges[(read_id, run_id)] = {"run": run.run_id, "code_version": "", "foreign": True}


def column_graph(root: ColumnNode) -> LineageGraph:
    """A column's lineage back to the DropZone fields, one node per column of a version."""
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[tuple[str, str, dict[str, Any]]] = []

    def visit(node: ColumnNode) -> str:
        node_id = f"{node.version.ref}.{node.column}"
        version = node.version
        nodes.setdefault(
            node_id,
            {
                "kind": "column",
                "asset": version.asset_key,
                "version": version.number,
                "column": node.column,
                "zone": version.zone,
                "data_version": version.data_version,
                "requested_by": version.requested_by,
                "status": version.status,
                "criticality": version.criticality,
                "recorded": node.recorded,
            },
        )
        if node.expanded_elsewhere:
            return node_id
        for child in node.inputs:
            edges.append(
                (
                    visit(child),
                    node_id,
                    {**_how(child.edges), "run": version.run_id or "", "code_version": version.code_version},
                )
            )
        for dropped in node.fields:
            if dropped.table is not None:
                table = dropped.table
                field_id = f"table:{table.namespace}/{table.name}@{table.snapshot_at}:{dropped.field}"
                nodes.setdefault(
                    field_id,
                    {
                        "kind": "table_column",
                        "field": dropped.field,
                        "namespace": table.namespace,
                        "name": table.name,
                        "snapshot_at": table.snapshot_at,
                    },
                )
                edges.append(
                    (
                        field_id,
                        node_id,
                        {**_how(dropped.edges), "run": version.run_id or "", "code_version": version.code_version},
                    )
                )
                continue
            batch = dropped.batch.batch_id if dropped.batch else ""
            field_id = f"dropzone:{version.asset_key}:{batch}:{dropped.field}"
            nodes.setdefault(
                field_id,
                {
                    "kind": "dropzone_field",
                    "field": dropped.field,
                    "batch": batch,
                    "files": ", ".join(f.path for f in dropped.batch.files) if dropped.batch else "",
                },
            )
            edges.append(
                (
                    field_id,
                    node_id,
                    {**_how(dropped.edges), "run": version.run_id or "", "code_version": version.code_version},
                )
            )
        return node_id

    top = visit(root)
    return LineageGraph(f"column lineage of {top}", nodes, edges)


def _version_attributes(node: VersionNode) -> dict[str, Any]:
    return {
        "kind": "version",
        "asset": node.asset,
        "version": node.version,
        "label": node.label or "",
        "zone": node.zone,
        "data_version": node.data_version,
        "requested_by": node.requested_by,
        "assurance": node.assurance,
        "status": node.status,
        "criticality": node.criticality,
        "protected": node.protected,
        "rows": node.rows,
        "created_at": node.created_at,
        "run": node.run_id or "",
        "code_version": node.code_version,
    }


def _made_by(output: VersionNode) -> dict[str, Any]:
    return {"run": output.run_id or "", "code_version": output.code_version}


def _how(edges) -> dict[str, Any]:
    return {
        "how": ", ".join(edge.label for edge in edges),
        "direct": any(edge.kind.value == "DIRECT" for edge in edges),
    }


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in attributes.items() if value is not None}


def _look(attributes: dict[str, Any]) -> dict[str, str]:
    kind = attributes["kind"]
    if kind == "foreign_job":
        user = attributes["user"] or "no user reported"
        runs = attributes.get("runs", 1)
        last = f"last run {attributes['run'][:8]}" if runs > 1 else f"run {attributes['run'][:8]}"
        counted = f"\n{runs:,} runs: {attributes['states']}" if runs > 1 else ""
        return {
            "shape": "component",
            "style": "filled,dashed",
            "fillcolor": FOREIGN_FILL,
            "color": FOREIGN_LINE,
            "label": f"{attributes['job']}{counted}\n{attributes['state']}, for {user}\n{last}",
            "tooltip": f"run {attributes['run']} reported by {attributes['reporter']}",
        }
    if kind == "foreign_dataset":
        version = f"\nversion {attributes['version']}" if attributes["version"] else ""
        return {
            "shape": "cylinder",
            "style": "filled,dashed",
            "fillcolor": FOREIGN_FILL,
            "color": FOREIGN_LINE,
            "label": f"{attributes['name']}{version}",
            "tooltip": f"{attributes['namespace']}/{attributes['name']}",
        }
    if kind == "file":
        return {
            "shape": "note",
            "style": "filled",
            "fillcolor": "#f9fafb",
            "label": f"{Path(attributes['path']).name}\nsha256 {attributes['sha256'][:HASH_SHOWN]}",
            "tooltip": attributes["path"],
        }
    if kind in ("table", "table_column"):
        column = f"\ncolumn {attributes['field']}" if kind == "table_column" else ""
        return {
            "shape": "cylinder",
            "style": "filled",
            "fillcolor": "#f9fafb",
            "label": f"{attributes['name']}{column}\nas of {attributes['snapshot_at'][:19]}",
            "tooltip": f"{attributes['namespace']}/{attributes['name']}",
        }
    if kind == "dropzone_field":
        return {
            "shape": "note",
            "style": "filled",
            "fillcolor": "#f9fafb",
            "label": f"DropZone field {attributes['field']}\nbatch {attributes['batch']}",
            "tooltip": attributes["files"],
        }
    purged = attributes["status"] != "committed"
    ref = f"{attributes['asset']}@{attributes['version']}"
    if kind == "column":
        label = f"{ref}\n{attributes['column']}"
    else:
        label = ref + (f" ({attributes['label']})" if attributes["label"] else "")
        rows = attributes["rows"]
        label += f"\n{rows:,} row{'' if rows == 1 else 's'}, for {attributes['requested_by']}\ndata {attributes['data_version'][:HASH_SHOWN]}"
    if purged:
        label += f"\n{attributes['status']}"
    if attributes["criticality"] == "critical":
        label += "\ncritical"
    look = {
        "shape": "box",
        "style": "rounded,filled" + (",dashed" if purged else ""),
        "label": label,
        "fillcolor": PURGED_FILL if purged else ZONE_FILL.get(attributes["zone"], "#ffffff"),
        "fontcolor": "#6b7280" if purged else "#111827",
        "tooltip": ref,
    }
    if attributes["criticality"] == "critical":
        look.update(color="#b91c1c", penwidth="2.5")
    elif attributes.get("protected"):
        look.update(color="#b45309", peripheries="2")
    if attributes.get("truncated"):
        look["label"] += "\n… more beyond --depth"
    return look


def _edge_tooltip(attributes: dict[str, Any]) -> str:
    return f"run {attributes.get('run') or '-'}, code {attributes.get('code_version', '')[:HASH_SHOWN]}"
