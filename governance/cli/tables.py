"""`custody tables`: each version as a snapshot of its asset's Apache Iceberg table, for other engines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from governance import render
from governance.cli.common import (
    JsonOption,
    emit_json,
    err_console,
    group,
    load_settings,
    open_catalog,
    service_client,
)
from governance.config import fetched_jars
from governance.errors import InvalidInput, printable
from governance.lake import lake_spark_conf, open_lake
from governance.lake.engines import EngineName, engine_conf

if TYPE_CHECKING:
    from governance.config import Settings
    from governance.lake.iceberg import IcebergTables

tables_app = group(
    "tables",
    "Each committed version as a snapshot of its asset's Iceberg table, tagged custody-v<N>: list them, "
    "or print what Spark, PyIceberg or DuckDB needs to read them through the Custody service.",
)


def _tables(settings: Settings) -> IcebergTables:
    lake = open_lake(settings)
    if lake.tables is None:
        raise InvalidInput("CUSTODY_TABLES=off: versions are not kept as table snapshots")
    return lake.tables.tables


@tables_app.command("list")
def tables_list(as_json: JsonOption = False) -> None:
    """Every asset's table in the `custody` catalog, with its tagged versions; the newest is the
    table's current snapshot. `custody repair` makes a snapshot that is missing. A table that cannot
    be read is named, with why, after the others (exit 1)."""
    remote = service_client()
    if remote is not None:
        listed = remote.get("/tables")
    else:
        from governance.lake.snapshots import table_listing

        settings = load_settings()
        listed = table_listing(open_catalog(settings), _tables(settings))
    broken = [entry for entry in listed if entry.get("problem")]
    if as_json:
        emit_json(listed)
    else:
        shown = Table("table", "current", "tagged versions", box=None)
        for entry in listed:
            tagged = "unreadable" if entry.get("problem") else _spans(entry["versions"])
            shown.add_row(entry["table"], entry["current"] or "-", tagged)
        render.stdout_console().print(shown)
        for entry in broken:
            err_console.print(printable(f"error: {entry['problem']}"), markup=False)
    if broken:
        raise typer.Exit(1)


def _spans(numbers: list[int]) -> str:
    """`1-3, 5`: consecutive version numbers as ranges."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and spans[-1][1] == number - 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "none"


EngineOption = Annotated[EngineName, typer.Option("--engine", help="The engine to configure.", case_sensitive=False)]


@tables_app.command("conf")
def tables_conf(
    engine: EngineOption = EngineName.SPARK,
    with_token: Annotated[
        bool, typer.Option("--with-token", help="Print your token (from `custody login`) in place of a placeholder.")
    ] = False,
) -> None:
    """What an engine needs to read the tables through the Custody service at CUSTODY_URL: its
    Iceberg REST catalog and your token, no database address and no lake key. Each table load is
    decided for you and recorded. Spark: spark-defaults.conf lines; PyIceberg: ~/.pyiceberg.yaml;
    DuckDB: the statements that attach the catalog. Then, e.g. in Spark,
    `SELECT * FROM custody.sales.clients VERSION AS OF 'custody-v3'`."""
    client = service_client()
    if client is None:
        raise InvalidInput(
            "CUSTODY_URL is not set: engines read the tables through the Custody service's catalog, at its "
            "address; an operator holding the catalog's credentials prints Iceberg's own recipe with "
            "`custody tables spark-conf --jdbc`"
        )
    jars = fetched_jars() if engine is EngineName.SPARK else ()
    token = client.token() if with_token else None
    _print(engine_conf(engine, client.url, token, jars))


@tables_app.command("spark-conf")
def tables_spark_conf(
    jdbc: Annotated[
        bool,
        typer.Option(
            "--jdbc",
            help="Iceberg's JDBC catalog on the catalog database, for an operator holding its and the lake's "
            "credentials: every asset's every version, nothing decided or recorded.",
        ),
    ] = False,
) -> None:
    """The spark-defaults.conf lines that let a Spark session read the tables: through the Custody
    service at CUSTODY_URL (as `custody tables conf --engine spark`), or with --jdbc, the operators'
    recipe, e.g. `SELECT * FROM custody.sales.clients VERSION AS OF 'custody-v3'`. A PostgreSQL
    catalog's password is left out of the latter: give it as spark.sql.catalog.custody.jdbc.password."""
    if not jdbc:
        tables_conf(EngineName.SPARK, with_token=False)
        return
    from governance.lake.iceberg import CATALOG_NAME, spark_conf

    settings = load_settings()
    tables = _tables(settings)
    conf = spark_conf(settings.catalog_url, tables.warehouse, settings.table_jars(), lake_spark_conf(settings))
    lines = [f"{key} {value}" for key, value in conf.items()]
    if f"spark.sql.catalog.{CATALOG_NAME}.jdbc.user" in conf:
        lines.append(f"# spark.sql.catalog.{CATALOG_NAME}.jdbc.password <the catalog database's password>")
    _print(lines)


def _print(lines: list[str]) -> None:
    console = render.stdout_console()
    for line in lines:
        console.print(line, markup=False, soft_wrap=True, highlight=False)
