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
)
from governance.errors import NotFound
from governance.lineage.graph import impact as impact_of
from governance.lineage.graph import provenance as provenance_of
from governance.zones import AssetKey, VersionRef


@app.command()
def versions(asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")], as_json: JsonOption = False) -> None:
    """List the committed versions of an asset."""
    key = AssetKey.parse(asset)
    catalog = open_catalog(load_settings())
    rows = catalog.versions(key)
    if not rows and not catalog.has_asset(key):
        raise NotFound(f"unknown asset {key}: no version and no spec registered")
    if as_json:
        emit_json([row.model_dump() for row in rows])
    else:
        render.stdout_console().print(render.versions_table(str(key), rows))


@app.command()
def provenance(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    depth: DepthOption = None,
    as_json: JsonOption = False,
) -> None:
    """The upstream tree of a version: inputs, runs, code versions, requesters, source files."""
    _show_lineage(provenance_of(open_catalog(load_settings()), VersionRef.parse(version), depth), as_json)


@app.command()
def impact(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    depth: DepthOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every version built from this one, transitively: what a bad input version would have touched."""
    _show_lineage(impact_of(open_catalog(load_settings()), VersionRef.parse(version), depth), as_json)


def _show_lineage(lineage, as_json: bool) -> None:
    show(lineage.to_dict(), as_json, lambda: render.lineage_tree(lineage))


@app.command()
def read(
    target: Annotated[str, typer.Argument(help="DOMAIN/NAME@N, or DOMAIN/NAME for its newest version.", metavar="ASSET[@N]")],
    as_user: AsUser,
    limit: Annotated[int, typer.Option(min=0, help="At most this many rows.")] = 20,
    columns: Annotated[list[str] | None, typer.Option("--column", "-c", help="Only this column (repeat for more).", show_default=False)] = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Rows of a version, for a consumer, producer or owner of the asset.

    Every read, allowed or denied, is in the ledger: `custody ledger show --action read`.
    """
    from governance.access.reads import read_table

    custody = open_custody(load_settings())
    row = custody.open(target, as_user=as_user, password=read_password(password_stdin))
    table = read_table(row, limit=limit, columns=columns)
    if as_json:
        emit_json({"version": row.ref, "rows": table.to_pylist()})
    else:
        render.stdout_console().print(render.rows_table(row.ref, table, row.rows))
