"""`custody catalog`: every asset with its roles, classification and newest version; one asset whole."""

from __future__ import annotations

from typing import Annotated

import typer

from governance import render
from governance.catalog.entries import AssetEntry, Filters
from governance.cli.common import JsonOption, app, emit_json, load_settings, open_catalog, service_client
from governance.errors import InvalidInput
from governance.spec import Classification
from governance.zones import AssetKey


@app.command()
def catalog(
    asset: Annotated[
        str | None, typer.Argument(help="Show this asset whole instead of the list.", metavar="ASSET")
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            help="Only assets whose name, description, a column name or a tag contains TEXT (any case).", metavar="TEXT"
        ),
    ] = None,
    domain: Annotated[str | None, typer.Option(help="Only the assets of this domain.")] = None,
    classification: Annotated[
        Classification | None, typer.Option(help="Only assets of this classification.", case_sensitive=False)
    ] = None,
    owner: Annotated[str | None, typer.Option(help="Only assets this group owns.", metavar="GROUP")] = None,
    as_json: JsonOption = False,
) -> None:
    """List the catalog's assets: zone, owner, producer and consumer groups, classification, newest version.

    Retired assets are listed too, with their versions. With ASSET, that asset whole: the spec in
    force with its hash, its columns, every version, its inputs and the assets built from it.
    """
    if asset is not None and (search or domain or classification or owner):
        raise typer.BadParameter(
            "--search, --domain, --classification and --owner narrow the list: give no ASSET with them",
            param_hint="ASSET",
        )
    remote = service_client()
    if remote is not None:
        if asset is not None:
            if not as_json:
                raise InvalidInput("through the service (CUSTODY_URL), `custody catalog ASSET` answers with --json")
            emit_json(remote.get(f"/assets/{AssetKey.parse(asset)}"))
            return
        params = {"search": search, "domain": domain, "owner": owner}
        listed = remote.get("/catalog", {**params, "classification": classification.value if classification else None})
        if as_json:
            emit_json(listed)
        else:
            render.stdout_console().print(render.catalog_listing([AssetEntry.from_dict(entry) for entry in listed]))
        return
    # Only here: a client of the service loads no database library, and starts in half the time.
    from governance.catalog.listing import detail, listing

    store = open_catalog(load_settings())
    if asset is not None:
        found = detail(store, AssetKey.parse(asset))
        if as_json:
            emit_json(found.to_dict())
        else:
            console = render.stdout_console()
            console.print(render.asset_detail(found, console.width))
        return
    entries = listing(store, Filters(search, domain, classification.value if classification else None, owner))
    if as_json:
        emit_json([entry.to_dict() for entry in entries])
    else:
        render.stdout_console().print(render.catalog_listing(entries))
