"""Questions about versions: which exist, where one came from, what depends on it, and its rows."""

from __future__ import annotations

from typing import Annotated

import typer

from governance import render
from governance.cli.common import (
    AsUser,
    DepthOption,
    JsonOption,
    PasswordStdin,
    app,
    emit_json,
    load_settings,
    open_catalog,
    open_custody,
    read_password,
    show,
    stream_json,
)
from governance.errors import NotFound
from governance.lineage.graph import SUMMARY_OVER, Direction, LineageSummary, explore, lineage
from governance.zones import AssetKey, VersionRef

PAGE = 50


@app.command()
def versions(
    asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")],
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many versions, the newest.")] = PAGE,
    before: Annotated[
        int | None,
        typer.Option(
            "--before", min=1, metavar="N", help="Only versions numbered below N: the page before one that starts at N."
        ),
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every version, oldest first (JSON is streamed).")] = False,
    as_json: JsonOption = False,
) -> None:
    """List the versions of an asset, a page at a time: the newest 50 unless told otherwise."""
    key = AssetKey.parse(asset)
    catalog = open_catalog(load_settings())
    if everything and before is not None:
        raise typer.BadParameter("--all lists every version; leave out --before", param_hint="--all")
    total = catalog.version_count(key)
    if not total and not catalog.has_asset(key):
        raise NotFound(f"unknown asset {key}: no version and no spec registered")
    if as_json:
        stream_json(
            row.model_dump()
            for row in (catalog.iter_versions(key) if everything else catalog.versions_page(key, limit, before))
        )
        return
    rows = list(catalog.iter_versions(key)) if everything else catalog.versions_page(key, limit, before)
    console = render.stdout_console()
    console.print(render.versions_table(str(key), rows, total, width=console.width))


AllNodes = Annotated[
    bool,
    typer.Option(
        "--all",
        help=f"The whole tree even past {SUMMARY_OVER:,} versions (else a summary: versions per asset and depth).",
    ),
]


@app.command()
def provenance(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    depth: DepthOption = None,
    everything: AllNodes = False,
    as_json: JsonOption = False,
) -> None:
    """The upstream tree of a version: inputs, runs, code versions, requesters, source files."""
    _show_lineage(VersionRef.parse(version), Direction.UPSTREAM, depth, everything, as_json)


@app.command()
def impact(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    depth: DepthOption = None,
    everything: AllNodes = False,
    as_json: JsonOption = False,
) -> None:
    """Every version built from this one, transitively: what a bad input version would have touched."""
    _show_lineage(VersionRef.parse(version), Direction.DOWNSTREAM, depth, everything, as_json)


def _show_lineage(ref: VersionRef, direction: Direction, depth: int | None, everything: bool, as_json: bool) -> None:
    catalog = open_catalog(load_settings())
    found = lineage(catalog, ref, direction, depth) if everything else explore(catalog, ref, direction, depth)
    if isinstance(found, LineageSummary):
        show(found.to_dict(), as_json, lambda: render.lineage_summary(found))
    else:
        show(found.to_dict(), as_json, lambda: render.lineage_tree(found))


@app.command()
def read(
    target: Annotated[
        str, typer.Argument(help="DOMAIN/NAME@N, or DOMAIN/NAME for its newest version.", metavar="ASSET[@N]")
    ],
    as_user: AsUser,
    limit: Annotated[int, typer.Option(min=0, help="At most this many rows.")] = 20,
    columns: Annotated[
        list[str] | None, typer.Option("--column", "-c", help="Only this column (repeat for more).", show_default=False)
    ] = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Rows of a version, for a consumer, producer or owner of the asset.

    Every read, allowed or denied, is in the ledger: `custody ledger show --action read`.
    """
    from governance.access.reads import read_table

    custody = open_custody(load_settings())
    row = custody.open(target, as_user=as_user, password=read_password(password_stdin))
    table = read_table(custody.lake, row, limit=limit, columns=columns)
    if as_json:
        emit_json({"version": row.ref, "rows": table.to_pylist()})
    else:
        render.stdout_console().print(render.rows_table(row.ref, table, row.rows))
