"""`custody lineage`: column lineage of versions, down to the DropZone fields."""

from __future__ import annotations

from typing import Annotated

import typer

from governance import render
from governance.cli.common import JsonOption, group, load_settings, open_catalog, show
from governance.zones import VersionRef

lineage_app = group("lineage", "Column lineage of versions, down to the DropZone fields.")


@lineage_app.command("columns")
def lineage_columns(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    column: Annotated[str | None, typer.Argument(help="Follow this column back, version by version.")] = None,
    origins: Annotated[bool, typer.Option("--origins", help="Only where COLUMN's values begin: DropZone fields and their files.")] = False,
    direct: Annotated[bool, typer.Option("--direct", help="Only DIRECT dependencies: where the values flow from, not what filters, joins or groups them.")] = False,
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
        show({"version": str(ref), "column": column, "origins": [o.to_dict() for o in begins]}, as_json,
               lambda: render.origins_tree(str(ref), column, begins))
    else:
        tree = column_trace.column_tree(catalog, ref, column, direct_only=direct)
        show(tree.to_dict(), as_json, lambda: render.column_tree(tree))

