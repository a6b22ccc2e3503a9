"""Questions about versions: which exist, where one came from, what depends on it, and its rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

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
    service_client,
    show,
    stream_json,
)
from governance.command import collector_paused
from governance.errors import NotFound
from governance.lineage.nodes import Lineage, LineageSummary
from governance.lineage.terms import SUMMARY_OVER, Direction
from governance.zones import LARGEST_NUMBER, AssetKey, VersionRef

if TYPE_CHECKING:
    from governance.service.client import ServiceClient

PAGE = 50


@app.command()
def versions(
    asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")],
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=LARGEST_NUMBER, help="Show at most this many versions, the newest.")
    ] = PAGE,
    before: Annotated[
        int | None,
        typer.Option(
            "--before",
            min=1,
            max=LARGEST_NUMBER,
            metavar="N",
            help="Only versions numbered below N: the page before one that starts at N.",
        ),
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Every version, oldest first (JSON is streamed).")] = False,
    as_json: JsonOption = False,
) -> None:
    """List the versions of an asset, a page at a time: the newest 50 unless told otherwise."""
    key = AssetKey.parse(asset)
    if everything and before is not None:
        raise typer.BadParameter("--all lists every version; leave out --before", param_hint="--all")
    remote = service_client()
    if remote is not None:
        _remote_versions(remote, key, limit, before, everything, as_json)
        return
    catalog = open_catalog(load_settings())
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


def _remote_versions(
    remote: ServiceClient, key: AssetKey, limit: int, before: int | None, everything: bool, as_json: bool
) -> None:
    """The versions as the service pages them; with --all, every page, oldest first."""
    first = remote.fetch(f"/assets/{key}/versions", {"limit": limit, "before": before})
    pages, found = [], first.json()
    # A service of an earlier release does not say how many there are: the table then does not either.
    total = int(first.headers["X-Custody-Versions"]) if "X-Custody-Versions" in first.headers else None
    while everything and found:
        pages.append(found)
        found = remote.get(f"/assets/{key}/versions", {"limit": 1000, "before": min(v["number"] for v in found)})
    listed = sorted((v for page in pages for v in page), key=lambda v: v["number"]) if everything else found
    if as_json:
        emit_json(listed)
        return
    from governance.catalog.entries import VersionLine

    console = render.stdout_console()
    lines = [VersionLine.from_dict(v) for v in listed]
    console.print(render.versions_table(str(key), lines, total, width=console.width))


AllNodes = Annotated[
    bool,
    typer.Option(
        "--all",
        help=f"The whole lineage even past {SUMMARY_OVER:,} versions (else a summary: versions per asset and depth); "
        "with --json, streamed as it is walked: an array of every version once, nearest first, each naming its "
        "next hops by ref.",
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
    with_readers: Annotated[
        bool,
        typer.Option(
            "--readers",
            help="Instead, everyone who read the version or one built from it, through any channel (the CLI, "
            "the API, Python, an engine through the Iceberg catalog): who must be told. For auditors and admins; "
            "recorded.",
        ),
    ] = False,
    every_run: Annotated[
        bool,
        typer.Option(
            "--runs", help="Show each run of other tools' jobs, rather than each job with its runs counted by state."
        ),
    ] = False,
    as_user: AsUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Every version built from this one, transitively: what a bad input version would have touched.

    Other tools' jobs that read a version (reported through OpenLineage) are shown with it, each
    with its runs counted by state, its last run and last failure, and the jobs of one parent (an
    Airflow DAG, a Spark application) together; --runs shows each run, --json has them all.
    """
    ref = VersionRef.parse(version)
    if with_readers:
        _show_readers(ref, depth, as_user, read_password(password_stdin), as_json)
        return
    _show_lineage(ref, Direction.DOWNSTREAM, depth, everything, as_json, every_run)


def _show_readers(ref: VersionRef, depth: int | None, as_user: str | None, password: str | None, as_json: bool) -> None:
    remote = service_client()
    if remote is not None:
        remote.acting_as(as_user, "--as")
        found = remote.get(f"/versions/{ref.key}/{ref.number}/readers", {"depth": depth})
    else:
        custody = open_custody(load_settings())
        found = [reader.to_dict() for reader in custody.reader_list(str(ref), depth, as_user, password)]
    show(found, as_json, lambda: render.readers_table(found))


def _show_lineage(
    ref: VersionRef, direction: Direction, depth: int | None, everything: bool, as_json: bool, every_run: bool = False
) -> None:
    remote = service_client()
    if remote is not None:
        if everything:
            raise typer.BadParameter(
                "the service answers with a summary past its size: leave out --all", param_hint="--all"
            )
        path = f"/versions/{ref.key}/{ref.number}/{'provenance' if direction is Direction.UPSTREAM else 'impact'}"
        _show_found(Lineage.from_dict(remote.get(path, {"depth": depth}), direction), as_json, every_run)
        return
    # Only here: a client of the service loads no database library, and starts in half the time.
    with collector_paused():
        from governance.lineage.graph import explore, lineage, stream

    catalog = open_catalog(load_settings())
    if everything and as_json:
        stream_json(stream(catalog, ref, direction, depth))
        return
    found = lineage(catalog, ref, direction, depth) if everything else explore(catalog, ref, direction, depth)
    _show_found(found, as_json, every_run)


def _show_found(found: Lineage | LineageSummary, as_json: bool, every_run: bool) -> None:
    if isinstance(found, LineageSummary):
        show(found.to_dict(), as_json, lambda: render.lineage_summary(found))
    else:
        show(found.to_dict(), as_json, lambda: render.lineage_tree(found, every_run))


@app.command()
def read(
    target: Annotated[
        str, typer.Argument(help="DOMAIN/NAME@N, or DOMAIN/NAME for its newest version.", metavar="ASSET[@N]")
    ],
    as_user: AsUser = None,
    limit: Annotated[int, typer.Option(min=0, max=LARGEST_NUMBER, help="At most this many rows.")] = 20,
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
    from governance.jsontext import json_value

    remote = service_client()
    if remote is not None:
        _remote_read(remote, target, as_user, limit, columns, as_json)
        return
    custody = open_custody(load_settings())
    row = custody.open(target, as_user=as_user, password=read_password(password_stdin))
    table = read_table(custody.lake, row, limit=limit, columns=columns)
    if as_json:
        emit_json({"version": row.ref, "rows": json_value(table.to_pylist())})
    else:
        render.stdout_console().print(render.rows_table(row.ref, table, row.rows))


def _remote_read(
    remote: ServiceClient, target: str, as_user: str | None, limit: int, columns: list[str] | None, as_json: bool
) -> None:
    """Rows through the service, for the user its token names: --as, if given, must name them too."""
    from governance.access.reads import Target
    from governance.jsontext import json_value

    parsed = Target.parse(target)
    remote.acting_as(as_user, "--as")
    ref, total, table = remote.rows(str(parsed.key), parsed.number, limit, columns)
    if as_json:
        emit_json({"version": ref, "rows": json_value(table.to_pylist())})
    else:
        render.stdout_console().print(render.rows_table(ref, table, total))
