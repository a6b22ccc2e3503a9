"""`custody lineage`: column lineage of versions down to the DropZone fields, and lineage graphs to look at or export."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from governance import render
from governance.cli.common import (
    DepthOption,
    JsonOption,
    err_console,
    group,
    load_settings,
    open_catalog,
    show,
)
from governance.errors import InvalidInput
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
    from governance.lineage import column_trace

    catalog, ref = open_catalog(load_settings()), VersionRef.parse(version)
    if column is None:
        if origins or direct:
            raise typer.BadParameter("--origins and --direct need a COLUMN to follow", param_hint="COLUMN")
        found = column_trace.overview(catalog, ref)
        show(found.to_dict(), as_json, lambda: render.column_overview(found))
    elif origins:
        begins = column_trace.origins(catalog, ref, column, direct_only=direct)
        show(
            {"version": str(ref), "column": column, "origins": [o.to_dict() for o in begins]},
            as_json,
            lambda: render.origins_tree(str(ref), column, begins),
        )
    else:
        tree = column_trace.column_tree(catalog, ref, column, direct_only=direct)
        show(tree.to_dict(), as_json, lambda: render.column_tree(tree))


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
    from governance.lineage.pictures import lineage_graph as build
    from governance.lineage.pictures import save

    kind = graph_format.value if graph_format else output.suffix.lstrip(".").lower()
    if kind not in {f.value for f in GraphFormat}:
        raise typer.BadParameter(f"cannot tell the format from {output.name!r}: give --format", param_hint="--format")
    drawn = build(open_catalog(load_settings()), VersionRef.parse(version), impact=impact, column=column, depth=depth)
    if len(drawn) > max_nodes:
        raise InvalidInput(
            f"the {drawn.title} has {len(drawn):,} nodes, more than --max-nodes {max_nodes:,}: "
            "draw fewer levels with --depth K, or raise --max-nodes"
        )
    written = save(drawn, output, kind, force=force)
    err_console.print(f"wrote {output} ({kind}, {len(drawn):,} nodes, {len(drawn.edges):,} edges, {written:,} bytes)")
