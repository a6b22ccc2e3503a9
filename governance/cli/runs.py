"""Commands that produce versions, through the Dagster code location as a run from the UI would."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from governance import render
from governance.cli.common import (
    AsUser,
    JsonOption,
    PasswordStdin,
    State,
    app,
    emit_json,
    err_console,
    load_settings,
    open_catalog,
    open_custody,
    progress_printer,
    read_password,
    service_client,
)
from governance.config import Settings
from governance.errors import printable
from governance.runtime import require_java
from governance.zones import AssetKey, Lake, VersionRef

if TYPE_CHECKING:
    from rich.console import Console

    from governance.api import Custody
    from governance.catalog import Catalog
    from governance.catalog.models import VersionRow
    from governance.runs import RunOutcome
    from governance.service.client import ServiceClient

# How often a run asked of the service is looked at until it ends.
FOLLOW_SECONDS = 1.0


@app.command()
def ingest(
    asset: Annotated[str, typer.Argument(help="Landing asset, DOMAIN/NAME.")],
    requested_by: AsUser = None,
    batch: Annotated[str | None, typer.Option(help="Batch id in the DropZone (default: the oldest ready one).")] = None,
    force: Annotated[bool, typer.Option(help="Ingest a batch again even if its content was ingested before.")] = False,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Governed ingestion of a ready DropZone batch, as a Dagster run (needs the producer or owner role)."""
    key = AssetKey.parse(asset)
    remote = service_client()
    if remote is not None:
        _remote_run(remote, requested_by, as_json, {"assets": [str(key)], "batch": batch, "force": force})
        return
    config = {"batch": batch, "force": force}
    password = read_password(password_stdin)
    _run(load_settings(), [key], requested_by, as_json, ingest_config={key: config}, password=password)


@app.command()
def materialize(
    requested_by: AsUser = None,
    selection: Annotated[
        str,
        typer.Argument(
            help="Dagster asset selection, e.g. 'key:sales/product_summary' or '+key:sales/product_summary'."
        ),
    ] = "tag:custody/zone=integration",
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Materialize assets (Dagster selection syntax; default: every integration asset).

    Each asset needs the producer or owner role, and the right to read its inputs.
    """
    remote = service_client()
    if remote is not None:
        _remote_run(remote, requested_by, as_json, {"selection": selection})
        return
    _run(load_settings(), selection, requested_by, as_json, password=read_password(password_stdin))


def _remote_run(remote: ServiceClient, requested_by: str | None, as_json: bool, asked: dict[str, object]) -> None:
    """Ask the service for the run, then follow it until it ends: the daemon of the service's
    Dagster instance runs it."""
    from governance.runs import RunOutcome, StepFailure

    remote.acting_as(requested_by, "--as")
    run_id = remote.send("POST", "/runs", asked)["run_id"]
    progress, said = progress_printer(), None
    progress(f"run {run_id} submitted to {remote.url}")
    while not (state := remote.get(f"/runs/{run_id}"))["finished"]:
        if state["status"] != said:
            said = state["status"]
            progress(f"run {run_id}: {said.lower()}")
        time.sleep(FOLLOW_SECONDS)
    outcome = RunOutcome(
        run_id,
        state["success"],
        tuple(state["versions"]),
        tuple(StepFailure(**failure) for failure in state["failures"]),
    )
    _report(outcome, as_json)


def _run(
    settings: Settings,
    selection,
    requested_by: str | None,
    as_json: bool,
    ingest_config=None,
    password: str | None = None,
) -> None:
    # The orchestrator (Dagster's code location) is loaded only by the commands that run assets.
    from governance.orchestration import orchestrator

    require_java()
    run_id = str(uuid.uuid4())
    # The identity is established here, for this run id; the run's own access check finds it.
    identity = open_custody(settings).identity(requested_by, password, run_id)
    outcome = orchestrator().launch(
        settings,
        selection,
        identity.user,
        ingest_config=ingest_config,
        on_progress=progress_printer(),
        run_id=run_id,
        verbose=State["verbose"],
    )
    _report(outcome, as_json)


def _report(outcome: RunOutcome, as_json: bool) -> None:
    if as_json:
        emit_json(asdict(outcome))
    else:
        for version in outcome.versions:
            render.stdout_console().print(f"committed {version}  (run {outcome.run_id})", markup=False)
    if not outcome.success:
        for failure in outcome.failures:
            err_console.print(
                printable(f"error: {failure.asset.replace('__', '/')}: {failure.message}", keep="\n"), markup=False
            )
        raise typer.Exit(max((f.exit_code for f in outcome.failures), default=1))


# Clicks the streaming demo sends in each run, one in a hundred of them not JSON.
STREAMED_CLICKS = 300


@app.command()
def demo(
    as_user: Annotated[str, typer.Option("--as", help="Requester of the demo runs.", metavar="USER")] = "bob",
    streams: Annotated[
        bool,
        typer.Option(
            "--streams",
            help="The streaming demo, on the specs of assets/streaming and a Kafka cluster (`make demo-streams`).",
        ),
    ] = False,
) -> None:
    """Drop sample batches, run the whole pipeline through Dagster, show the summary's provenance.

    Also where its revenue column comes from. The demo's users prove who they are with the passwords
    the demo directory documents. With --streams: bob is given his Kafka password and sends clicks
    to sales.clicks, which land as a version, joined with the product catalogue in sales/product_clicks.
    """
    settings = load_settings()
    if streams:
        _streams_demo(settings, as_user)
        return
    from governance.demo import (
        CLIENTS,
        NAMES_AND_PRODUCTS,
        PRODUCT_SUMMARY,
        PRODUCTS,
        drop_demo_batches,
    )

    require_java()
    _apply_demo_specs(open_custody(settings))
    dropped = drop_demo_batches(Lake(settings.lake))
    integration = [NAMES_AND_PRODUCTS, PRODUCT_SUMMARY]
    steps = [
        ([PRODUCTS], {PRODUCTS: {"batch": dropped.products_batch}}),
        ([CLIENTS], {CLIENTS: {"batch": dropped.client_batches[0]}}),
        (integration, None),
        ([CLIENTS], {CLIENTS: {"batch": dropped.client_batches[1]}}),
        (integration, None),
    ]
    catalog, latest, console = _demo_runs(settings, steps, as_user, PRODUCT_SUMMARY)
    from governance.lake import open_lake
    from governance.lineage.column_trace import origins

    console.print()
    revenue = origins(catalog, VersionRef(PRODUCT_SUMMARY, latest.number), "revenue", direct_only=True)
    console.print(
        render.origins_tree({"version": latest.ref, "column": "revenue", "origins": [o.to_dict() for o in revenue]})
    )
    console.print()
    _demo_reads(open_custody(settings), latest.ref, console)
    _demo_table(open_lake(settings), latest, console)


def _streams_demo(settings: Settings, as_user: str) -> None:
    from governance.demo import PRODUCER, PRODUCTS, demo_password, drop_products
    from governance.errors import InvalidInput
    from governance.streams.broker import KafkaAdmin
    from governance.streams.credentials import issue
    from governance.streams.demo import CLICKS, PRODUCT_CLICKS, demo_clicks, send
    from governance.streams.settings import KafkaSettings

    require_java()
    kafka = KafkaSettings.from_env()
    custody = open_custody(settings)
    spec = custody.specs.get(CLICKS)
    if spec is None or spec.topic is None:
        raise InvalidInput(
            f"{settings.specs} holds no streamed {CLICKS}: the streaming demo's specs are in assets/streaming "
            "(`make demo-streams` sets CUSTODY_SPECS to it)"
        )
    _apply_demo_specs(custody)
    said = progress_printer()
    password = issue(custody.store, KafkaAdmin(kafka), custody.identity(PRODUCER, demo_password(PRODUCER)))
    clicks = demo_clicks(STREAMED_CLICKS)
    send(kafka, spec.topic, PRODUCER, password, clicks)
    said(f"{PRODUCER} sent {len(clicks)} clicks to {spec.topic}, signed in with the Kafka password Custody issued him")
    products = drop_products(Lake(settings.lake))
    runs = [([PRODUCTS], {PRODUCTS: {"batch": products}}), ([CLICKS], None), ([PRODUCT_CLICKS], None)]
    _demo_runs(settings, runs, as_user, PRODUCT_CLICKS)


def _demo_runs(
    settings: Settings, runs: list[tuple[list[AssetKey], dict | None]], as_user: str, shown: AssetKey
) -> tuple[Catalog, VersionRow, Console]:
    """Each run of the demo's, then the provenance of `shown`'s newest version; the catalog, that
    version and the console it was printed on."""
    from governance.demo import demo_password
    from governance.lineage.graph import provenance as provenance_of

    for keys, config in runs:
        _run(settings, keys, as_user, False, ingest_config=config, password=demo_password(as_user))
    catalog = open_catalog(settings)
    latest = catalog.latest(shown)
    console = render.stdout_console()
    console.print()
    console.print(render.lineage_tree(provenance_of(catalog, VersionRef(shown, latest.number))))
    return catalog, latest, console


def _demo_table(lake: Lake, latest: VersionRow, console) -> None:
    """Where other engines read the same version: its Iceberg table's tag."""
    if lake.tables is None:
        return
    key = AssetKey.parse(latest.asset_key)
    if latest.number not in lake.tables.tables.tags(key):
        return
    from governance.lake.iceberg import tag_of

    table, tag = lake.tables.tables.table_name(key), tag_of(latest.number)
    console.print()
    console.print(f"{latest.ref} in other engines (through the service: custody tables conf):", markup=False)
    console.print(f"    SELECT * FROM {table} VERSION AS OF '{tag}'", markup=False, soft_wrap=True)


def _apply_demo_specs(custody: Custody) -> None:
    """The demo's owner puts its specs in force, as an owner does before the first runs."""
    from governance.approval import apply
    from governance.demo import OWNER, demo_password

    # Applying needs a verified owner: the demo's gives the password the demo directory documents.
    applied = apply(custody.store, custody.policy, custody.identity(OWNER, demo_password(OWNER)), custody.specs)
    if applied:
        progress_printer()(f"{OWNER} applied the specs of {', '.join(str(done.key) for done in applied)}")


def _demo_reads(custody: Custody, ref: str, console) -> None:
    """carol, a consumer, reads the summary; eve, who holds no role, is denied; both are in the
    ledger, which dave, an auditor, reads."""
    from governance import ledger
    from governance.demo import demo_password
    from governance.errors import AccessDenied

    custody.read(ref, as_user="carol", password=demo_password("carol"), limit=3)
    with contextlib.suppress(AccessDenied):  # the denial is what the demo shows, from the ledger
        custody.read(ref, as_user="eve", password=demo_password("eve"), limit=3)
    asset, _, number = ref.partition("@")
    where = ledger.LedgerFilter(asset=asset, version=int(number), action="read")
    reads = custody.ledger_entries(where, as_user="dave", password=demo_password("dave"))
    console.print(f"Reads of {ref} (custody ledger show --action read --as dave)", markup=False)
    for line in render.ledger_lines(ledger.entry_dict(entry) for entry in reads):
        console.print(line, markup=False, soft_wrap=True)
