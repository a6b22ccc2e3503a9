"""`custody lineage`: column lineage of versions down to the DropZone fields, and lineage graphs to look at or export."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer

from governance import render
from governance.cli.common import (
    DepthOption,
    JsonOption,
    err_console,
    group,
    load_settings,
    open_catalog,
    service_client,
    show,
)
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
    max_nodes: Annotated[int, typer.Option(min=1, help="Refuse a larger graph.")] = 5_000,
    force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists.")] = False,
) -> None:
    """Write a version's lineage as a picture (svg, png) or for graph tools (dot, graphml, json).

    Versions are boxes coloured by zone, critical ones outlined in red, protected ones doubled,
    purged ones grey; DropZone files are leaves with their sha256. Nodes carry asset, version,
    label, zone, data_version, requester, status and criticality; edges the run and code version
    that made the output. yEd, Gephi and Cytoscape read GraphML.
    """
    from governance.lineage.pictures import bounded, save, writable, write_whole

    kind = graph_format.value if graph_format else output.suffix.lstrip(".").lower()
    if kind not in {f.value for f in GraphFormat}:
        raise typer.BadParameter(f"cannot tell the format from {output.name!r}: give --format", param_hint="--format")
    ref = VersionRef.parse(version)
    remote = service_client()
    if remote is not None:
        writable(output, force)
        asked = {"format": kind, "impact": impact or None, "column": column, "depth": depth, "max_nodes": max_nodes}
        drawing = remote.fetch(f"/versions/{ref.key}/{ref.number}/graph", asked)
        written = write_whole(output, drawing.content)
        nodes, edges = int(drawing.headers["X-Custody-Nodes"]), int(drawing.headers["X-Custody-Edges"])
        said = f"{nodes:,} nodes, {edges:,} edges"
    else:
        from governance.lineage.pictures import lineage_graph as build

        drawn = build(open_catalog(load_settings()), ref, impact=impact, column=column, depth=depth)
        written = save(bounded(drawn, max_nodes, "--max-nodes", "--depth K"), output, kind, force=force)
        said = f"{len(drawn):,} nodes, {len(drawn.edges):,} edges"
    err_console.print(f"wrote {output} ({kind}, {said}, {written:,} bytes)")
