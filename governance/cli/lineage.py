"""`custody lineage`: column lineage of versions down to the DropZone fields, and lineage graphs to look at or export."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer

from governance import render
from governance.cli.common import (
    AsUser,
    DepthOption,
    JsonOption,
    PasswordStdin,
    err_console,
    group,
    load_settings,
    open_catalog,
    open_custody,
    read_password,
    service_client,
    show,
)
from governance.foreign.nodes import MOST_LISTED
from governance.zones import VersionRef

lineage_app = group(
    "lineage", "Lineage of versions as pictures and for graph tools; column lineage down to the DropZone fields."
)


@lineage_app.command("columns")
def lineage_columns(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    column: Annotated[str | None, typer.Argument(help="Follow this column back, version by version.")] = None,
    origins: Annotated[
        bool, typer.Option("--origins", help="Only where COLUMN's values begin: DropZone fields and their files.")
    ] = False,
    direct: Annotated[
        bool,
        typer.Option(
            "--direct",
            help="Only DIRECT dependencies: where the values flow from, not what filters, joins or groups them.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Which input columns each column of a version derives from, DIRECT or INDIRECT, and how.

    With COLUMN, the whole way back through every version to the DropZone fields and files.
    """
    if column is None and (origins or direct):
        raise typer.BadParameter("--origins and --direct need a COLUMN to follow", param_hint="COLUMN")
    ref = VersionRef.parse(version)
    remote = service_client()
    if remote is not None:
        path = f"/versions/{ref.key}/{ref.number}/columns" + (f"/{quote(column, safe='')}" if column else "")
        found = remote.get(path, {"origins": origins or None, "direct": direct or None})
    else:
        from governance.lineage.column_trace import column_lineage

        catalog = open_catalog(load_settings())
        found = column_lineage(catalog, ref, column, origins_only=origins, direct_only=direct)
    drawn = render.column_overview if column is None else render.origins_tree if origins else render.column_tree
    show(found, as_json, lambda: drawn(found))


class GraphFormat(StrEnum):
    SVG = "svg"
    PNG = "png"
    DOT = "dot"
    GRAPHML = "graphml"
    JSON = "json"


@lineage_app.command("graph")
def lineage_graph(
    version: Annotated[str, typer.Argument(help="The version: DOMAIN/NAME@N.", metavar="ASSET@N")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write.", metavar="FILE")],
    graph_format: Annotated[
        GraphFormat | None, typer.Option("--format", help="What to write (default: FILE's suffix).")
    ] = None,
    impact: Annotated[
        bool, typer.Option("--impact", help="Every version built from it, instead of those it was built from.")
    ] = False,
    column: Annotated[
        str | None,
        typer.Option("--columns", help="The lineage of this column, back to its DropZone fields.", metavar="COLUMN"),
    ] = None,
    depth: DepthOption = None,
    every_run: Annotated[
        bool, typer.Option("--runs", help="With --impact: a node for each run of other tools' jobs, not each job.")
    ] = False,
    max_nodes: Annotated[int, typer.Option(min=1, help="Refuse a larger graph.")] = 5_000,
    force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists.")] = False,
) -> None:
    """Write a version's lineage as a picture (svg, png) or for graph tools (dot, graphml, json).

    Versions are boxes coloured by zone, critical ones outlined in red, protected ones doubled,
    purged ones grey; DropZone files are leaves with their sha256. Nodes carry asset, version,
    label, zone, data_version, requester, status and criticality; edges the run and code version
    that made the output. Other tools' jobs are dashed, one node a job with its runs counted
    (--runs: one a run). yEd, Gephi and Cytoscape read GraphML.
    """
    from governance.lineage.pictures import bounded, save, writable, write_whole

    kind = graph_format.value if graph_format else output.suffix.lstrip(".").lower()
    if kind not in {f.value for f in GraphFormat}:
        raise typer.BadParameter(f"cannot tell the format from {output.name!r}: give --format", param_hint="--format")
    ref = VersionRef.parse(version)
    remote = service_client()
    if remote is not None:
        writable(output, force)
        asked = {
            "format": kind,
            "impact": impact or None,
            "column": column,
            "depth": depth,
            "max_nodes": max_nodes,
            "runs": every_run or None,
        }
        drawing = remote.fetch(f"/versions/{ref.key}/{ref.number}/graph", asked)
        written = write_whole(output, drawing.content)
        nodes, edges = int(drawing.headers["X-Custody-Nodes"]), int(drawing.headers["X-Custody-Edges"])
        said = f"{nodes:,} nodes, {edges:,} edges"
    else:
        from governance.lineage.pictures import lineage_graph as build

        drawn = build(
            open_catalog(load_settings()), ref, impact=impact, column=column, depth=depth, every_run=every_run
        )
        written = save(bounded(drawn, max_nodes, "--max-nodes", "--depth K"), output, kind, force=force)
        said = f"{len(drawn):,} nodes, {len(drawn.edges):,} edges"
    err_console.print(f"wrote {output} ({kind}, {said}, {written:,} bytes)")


@lineage_app.command("run")
def lineage_run(
    run_id: Annotated[
        str,
        typer.Argument(
            help="The run's id, or its beginning as printed (8 or more characters); a parent run that reported "
            "nothing itself, its whole id."
        ),
    ],
    events: Annotated[
        bool,
        typer.Option(
            "--events", help="Also its facets and events as received (--json): for auditors and admins, recorded."
        ),
    ] = False,
    as_user: AsUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """A run of another tool's job, as OpenLineage reported it: state, times, user, error, parent run,
    what it read (the Custody versions among it, or those it waits for) and wrote, and the runs it
    is the parent of (an Airflow DAG run's tasks, a Spark application's actions)."""
    remote = service_client()
    if remote is not None:
        remote.acting_as(as_user, "--as")
        found = remote.get(f"/lineage/runs/{quote(run_id, safe='')}", {"events": events or None})
    else:
        custody = open_custody(load_settings())
        found = custody.foreign_run(run_id, events=events, as_user=as_user, password=read_password(password_stdin))
    show(found, as_json, lambda: render.foreign_run(found))


@lineage_app.command("jobs")
def lineage_jobs(
    limit: Annotated[int, typer.Option(min=1, max=MOST_LISTED, help="At most this many jobs.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """Other tools' jobs that reported runs, the last active first, with their runs counted by state and their last run."""
    remote = service_client()
    if remote is not None:
        found = remote.get("/lineage/jobs", {"limit": limit})["jobs"]
    else:
        from governance.foreign.history import jobs

        with open_catalog(load_settings()).reading() as session:
            found = jobs(session, limit)
    show(found, as_json, lambda: render.foreign_jobs(found))


@lineage_app.command("runs")
def lineage_runs(
    namespace: Annotated[str, typer.Option("--namespace", help="The job's namespace, as its events give it.")],
    job: Annotated[str, typer.Option("--job", help="The job's name, as its events give it.")],
    limit: Annotated[int, typer.Option(min=1, max=MOST_LISTED, help="At most this many runs.")] = 20,
    as_json: JsonOption = False,
) -> None:
    """The runs of one of other tools' jobs, the last started first (`custody lineage jobs` names the jobs)."""
    remote = service_client()
    if remote is not None:
        found = remote.get("/lineage/runs", {"namespace": namespace, "job": job, "limit": limit})["runs"]
    else:
        from governance.foreign.history import job_runs

        with open_catalog(load_settings()).reading() as session:
            found = job_runs(session, namespace, job, limit)
    show(found, as_json, lambda: render.foreign_job_runs(found))


@lineage_app.command("dataset")
def lineage_dataset(
    namespace: Annotated[str, typer.Option("--namespace", help="The dataset's namespace, as events give it.")],
    name: Annotated[str, typer.Option("--name", help="The dataset's name, as events give it.")],
    as_json: JsonOption = False,
) -> None:
    """A dataset other tools named: the facets their dataset events gave it, and how many runs read and wrote it."""
    remote = service_client()
    if remote is not None:
        found = remote.get("/lineage/datasets", {"namespace": namespace, "name": name})
    else:
        from governance.foreign.history import dataset_detail

        with open_catalog(load_settings()).reading() as session:
            found = dataset_detail(session, namespace, name)
    show(found, as_json, lambda: render.foreign_dataset(found))
