"""The `custody` command.

Query commands read the catalog directly. Commands that produce versions (`ingest`, `materialize`,
`demo`) hand off to the Dagster code location, the same path a run launched from the UI takes.
"""

from __future__ import annotations

import contextlib
import getpass
import inspect
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from governance import ledger, render
from governance.catalog import Catalog
from governance.catalog.models import Criticality
from governance.config import Settings
from governance.errors import CustodyError, IntegrityError, InvalidInput, NotFound, SpecError
from governance.lineage.graph import impact as impact_of
from governance.lineage.graph import provenance as provenance_of
from governance.retention import purge as purge_versions
from governance.retention import set_status
from governance.runs import Assurance
from governance.runtime import require_java
from governance.spec import Spec, check_specs, load_specs
from governance.zones import AssetKey, Lake, VersionRef

if TYPE_CHECKING:
    from governance.access.policy import Identity
    from governance.api import Custody
    from governance.rollover import AgeOffReport, RolloverReport

app = typer.Typer(
    name="custody",
    help="Data-asset governance on Dagster and PySpark: governed ingestion, immutable versions, lineage, ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
specs_app = typer.Typer(help="Validate asset specs.", no_args_is_help=True)
access_app = typer.Typer(help="Who may do what to an asset: explain, grant, revoke.", no_args_is_help=True)
ledger_app = typer.Typer(help="Read and verify the audit ledger.", no_args_is_help=True)
lineage_app = typer.Typer(help="Column lineage of versions, down to the DropZone fields.", no_args_is_help=True)
app.add_typer(specs_app, name="specs")
app.add_typer(ledger_app, name="ledger")
app.add_typer(lineage_app, name="lineage")
app.add_typer(access_app, name="access")

err_console = Console(stderr=True, highlight=False, soft_wrap=True)
State = {"verbose": False}

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
AsUser = Annotated[str, typer.Option("--as", help="The user the request is made for (recorded in the ledger).", metavar="USER")]
PasswordStdin = Annotated[bool, typer.Option(
    "--password-stdin",
    help="Read the user's directory password from stdin and verify it (or set CUSTODY_PASSWORD): "
         "the ledger then records a verified identity instead of an asserted one.",
)]


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show full tracebacks on errors.")] = False) -> None:
    State["verbose"] = verbose


def _settings() -> Settings:
    return Settings.from_env()


def _catalog(settings: Settings) -> Catalog:
    return Catalog.from_settings(settings, os.environ)


def _custody(settings: Settings) -> Custody:
    # Access control is imported by the commands that use it: the others start faster without it.
    from governance.api import Custody

    return Custody(settings)


def _password(from_stdin: bool) -> str | None:
    """The password piped on stdin, with its line end removed; None without --password-stdin."""
    if not from_stdin:
        return None
    line = sys.stdin.readline()
    password = line[:-1] if line.endswith("\n") else line
    if not password:
        raise InvalidInput("--password-stdin: no password on stdin (pipe it in, one line)")
    return password


def _identity(custody: Custody, user: str, password_stdin: bool, run_id: str | None = None) -> Identity:
    return custody.identity(user, _password(password_stdin), run_id)


def _spec(custody: Custody, key: AssetKey) -> Spec:
    spec = custody.specs.get(key)
    if spec is None:
        raise NotFound(f"unknown asset {key}: no spec in {custody.settings.specs} declares it")
    return spec


def _emit_json(data: Any) -> None:
    # Indented for a person at a terminal; compact for programs, where Python's fast encoder applies
    # (indenting takes the pure-Python one, ten times slower on a large provenance tree).
    indent = 2 if sys.stdout.isatty() else None
    typer.echo(json.dumps(data, indent=indent, default=str))


@specs_app.command("check")
def specs_check(
    folder: Annotated[Path | None, typer.Argument(help="Folder of specs (default: CUSTODY_SPECS).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Validate every spec; list every problem with its file, line and field."""
    settings = _settings()
    root = folder or settings.specs
    problems = check_specs(root, settings.cache_dir)
    if not problems:
        problems = _consumer_coverage(_custody(settings), load_specs(root, settings.cache_dir))
    if as_json:
        _emit_json({"ok": not problems, "problems": [asdict(p) for p in problems]})
    elif not problems:
        render.stdout_console().print(f"specs in {root}: ok")
    if problems:
        if not as_json:
            err_console.print(str(SpecError(problems)), markup=False)
        raise typer.Exit(1)


def _consumer_coverage(custody: Custody, specs) -> list:
    """The gate that needs the directory: who may read an asset may read its pii or higher inputs."""
    from governance.access.policy import coverage_problems
    from governance.spec import sensitive_inputs

    gated = [(spec, [specs[key] for key in spec.inputs]) for spec in specs]
    gated = [(spec, inputs) for spec, inputs in gated
             if any(i.body.roles.consumer != spec.body.roles.consumer for i in sensitive_inputs(spec, inputs))]
    problems = []
    for spec, inputs in gated:  # only these need the directory
        problems.extend(coverage_problems(spec, inputs, custody.policy.directory))
    return problems


@app.command()
def ingest(
    asset: Annotated[str, typer.Argument(help="Landing asset, DOMAIN/NAME.")],
    requested_by: AsUser,
    batch: Annotated[str | None, typer.Option(help="Batch id in the DropZone (default: the oldest ready one).")] = None,
    force: Annotated[bool, typer.Option(help="Ingest a batch again even if its content was ingested before.")] = False,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Governed ingestion of a ready DropZone batch, as a Dagster run (needs the producer or owner role)."""
    key = AssetKey.parse(asset)
    config = {"batch": batch, "force": force}
    _run(_settings(), [key], requested_by, as_json, ingest_config={key: config}, password_stdin=password_stdin)


@app.command()
def materialize(
    requested_by: AsUser,
    selection: Annotated[str, typer.Argument(help="Dagster asset selection, e.g. 'key:sales/product_summary' or '+key:sales/product_summary'.")] = "tag:custody/zone=integration",
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Materialize assets (Dagster selection syntax; default: every integration asset).

    Each asset needs the producer or owner role, and the right to read its inputs.
    """
    _run(_settings(), selection, requested_by, as_json, password_stdin=password_stdin)


def _run(settings: Settings, selection, requested_by: str, as_json: bool, ingest_config=None, password_stdin: bool = False) -> None:
    # The Dagster code location is loaded only by the commands that run assets.
    from assets.launch import launch

    require_java()
    run_id = str(uuid.uuid4())
    # A verified identity is established here, for this run id; the run's own access check finds it.
    _identity(_custody(settings), requested_by, password_stdin, run_id)
    outcome = launch(settings, selection, requested_by, ingest_config=ingest_config, on_progress=_progress_printer(), run_id=run_id)
    if as_json:
        _emit_json(asdict(outcome))
    else:
        for version in outcome.versions:
            render.stdout_console().print(f"committed {version}  (run {outcome.run_id})")
    if not outcome.success:
        for failure in outcome.failures:
            err_console.print(f"error: {failure.asset.replace('__', '/')}: {failure.message}", markup=False)
        raise typer.Exit(max((f.exit_code for f in outcome.failures), default=1))


def _progress_printer() -> Callable[[str], None]:
    """Progress as timestamped lines on stderr: readable in logs, unharmed by Spark writing there too."""
    started = time.monotonic()

    def report(message: str) -> None:
        err_console.print(Text.assemble((f"{time.monotonic() - started:6.1f}s ", "dim"), message))

    return report


@app.command()
def versions(asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")], as_json: JsonOption = False) -> None:
    """List the committed versions of an asset."""
    key = AssetKey.parse(asset)
    catalog = _catalog(_settings())
    rows = catalog.versions(key)
    if not rows and not catalog.has_asset(key):
        raise NotFound(f"unknown asset {key}: no version and no spec registered")
    if as_json:
        _emit_json([row.model_dump() for row in rows])
    else:
        render.stdout_console().print(render.versions_table(str(key), rows))


DepthOption = Annotated[int | None, typer.Option(min=0, help="How many levels to show (default: all, up to 100).")]
ByUser = Annotated[str, typer.Option("--by", help="The user making the change (recorded in the ledger).", metavar="USER")]


@app.command()
def provenance(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    depth: DepthOption = None,
    as_json: JsonOption = False,
) -> None:
    """The upstream tree of a version: inputs, runs, code versions, requesters, source files."""
    _show_lineage(provenance_of(_catalog(_settings()), VersionRef.parse(version), depth), as_json)


@app.command()
def impact(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    depth: DepthOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every version built from this one, transitively: what a bad input version would have touched."""
    _show_lineage(impact_of(_catalog(_settings()), VersionRef.parse(version), depth), as_json)


def _show_lineage(lineage, as_json: bool) -> None:
    _print(lineage.to_dict(), as_json, lambda: render.lineage_tree(lineage))


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

    catalog, ref = _catalog(_settings()), VersionRef.parse(version)
    if column is None:
        if origins or direct:
            raise typer.BadParameter("--origins and --direct need a COLUMN to follow", param_hint="COLUMN")
        found = column_trace.overview(catalog, ref)
        _print(found.to_dict(), as_json, lambda: render.column_overview(found))
    elif origins:
        begins = column_trace.origins(catalog, ref, column, direct_only=direct)
        _print({"version": str(ref), "column": column, "origins": [o.to_dict() for o in begins]}, as_json,
               lambda: render.origins_tree(str(ref), column, begins))
    else:
        tree = column_trace.column_tree(catalog, ref, column, direct_only=direct)
        _print(tree.to_dict(), as_json, lambda: render.column_tree(tree))


def _print(data: Any, as_json: bool, shown: Callable[[], Any]) -> None:
    if as_json:
        _emit_json(data)
    else:
        render.stdout_console().print(shown())


@app.command()
def status(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    value: Annotated[str, typer.Argument(help="critical or normal", metavar="critical|normal")],
    by: ByUser,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Mark a version critical (protected from purge, with everything upstream) or normal; needs the owner role."""
    ref, status_value = VersionRef.parse(version), Criticality.parse(value)
    custody = _custody(_settings())
    identity = _identity(custody, by, password_stdin)
    from governance.access.guard import authorize
    from governance.access.policy import Verb

    authorize(custody.catalog, custody.policy, identity, Verb.STATUS, custody.specs.get(ref.key), version=ref.number,
              details={"to": status_value.value})
    change = set_status(custody.catalog, ref, status_value, by, identity.assurance)
    if as_json:
        _emit_json(asdict(change))
        return
    console = render.stdout_console()
    console.print(f"{change.ref}: {change.before} -> {change.after}", markup=False)
    if change.after == Criticality.CRITICAL:
        console.print(f"protected: {change.ref} and {change.protected_upstream} version(s) upstream of it", markup=False)
    if change.purged_upstream:
        err_console.print(f"warning: already purged upstream, cannot be protected: {', '.join(change.purged_upstream)}", markup=False)


@app.command()
def purge(
    versions: Annotated[list[str] | None, typer.Argument(help="DOMAIN/NAME@N to purge now (default: what each spec's retention lets go).", show_default=False)] = None,
    by: Annotated[str | None, typer.Option("--by", help="The user running the purge (recorded in the ledger).", metavar="USER")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be purged; change nothing.")] = False,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Apply retention: delete expired versions' files, never a protected one; needs the admin group.

    Retention is each spec's keep_versions and max_age_days; the admin group is CUSTODY_ADMIN_GROUP.
    """
    if not dry_run and not by:
        raise typer.BadParameter("say who runs the purge with --by USER (or use --dry-run)", param_hint="--by")
    settings = _settings()
    refs = [VersionRef.parse(v) for v in versions or []]
    custody = _custody(settings)
    retention = {} if refs else {spec.key: spec.body.retention for spec in custody.specs}
    assurance = None
    if by and not dry_run:
        identity = _identity(custody, by, password_stdin)
        touching = [custody.specs[r.key] for r in refs if custody.specs.get(r.key)] if refs else list(custody.specs)
        from governance.access.guard import authorize
        from governance.access.policy import Verb

        authorize(custody.catalog, custody.policy, identity, Verb.PURGE, None, touching=touching,
                  details={"versions": versions or "by retention"})
        assurance = identity.assurance
    report = purge_versions(
        _catalog(settings), Lake(settings.lake), retention, by or "dry-run", explicit=refs, dry_run=dry_run,
        progress=_progress_printer(), assurance=assurance,
    )
    if as_json:
        _emit_json(asdict(report))
        return
    console = render.stdout_console()
    verb = "would purge" if dry_run else "purged"
    for candidate in report.purged:
        console.print(f"{verb} {candidate.ref}: {candidate.reason} ({candidate.bytes:,} B)", markup=False)
    for ref in report.finished:
        console.print(f"{'would finish' if dry_run else 'finished'} the interrupted purge of {ref}", markup=False)
    for ref in report.kept_protected:
        console.print(f"kept {ref}: expired but protected by critical lineage", markup=False)
    for ref in report.already_purged:
        console.print(f"{ref} was purged already", markup=False)
    if not (report.purged or report.finished or report.kept_protected or report.already_purged):
        console.print("nothing to purge", markup=False)


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

    custody = _custody(_settings())
    row = custody.open(target, as_user=as_user, password=_password(password_stdin))
    table = read_table(row, limit=limit, columns=columns)
    if as_json:
        _emit_json({"version": row.ref, "rows": table.to_pylist()})
    else:
        render.stdout_console().print(render.rows_table(row.ref, table, row.rows))


@access_app.command("show")
def access_show(asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")], as_json: JsonOption = False) -> None:
    """Each role on the asset: its group, its members (through nested groups too), what it may do."""
    from governance.access.grants import show

    custody = _custody(_settings())
    view = show(custody.policy, _spec(custody, AssetKey.parse(asset)))
    _print(asdict(view), as_json, lambda: render.access_table(view))


@access_app.command("check")
def access_check(
    asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")],
    as_user: AsUser,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """What USER may do to the asset, and why. Nothing is changed or recorded, except a password check."""
    from governance.access.grants import check

    custody = _custody(_settings())
    spec = _spec(custody, AssetKey.parse(asset))
    decisions = check(custody.policy, spec, _identity(custody, as_user, password_stdin))
    data = [{"action": d.verb.value, "result": d.result, "reason": d.reason} for d in decisions]
    _print({"asset": str(spec.key), "user": as_user, "decisions": data}, as_json, lambda: render.decisions_table(str(spec.key), as_user, decisions))


def _change_role(verb: str, role: str, asset: str, user: str, by: str, password_stdin: bool, as_json: bool) -> None:
    from governance.access.grants import change_role, parse_role
    from governance.access.policy import Verb

    custody = _custody(_settings())
    spec = _spec(custody, AssetKey.parse(asset))
    change = change_role(custody.catalog, custody.policy, _identity(custody, by, password_stdin), Verb(verb),
                         parse_role(role), spec, user, custody.specs)
    if as_json:
        _emit_json(asdict(change))
        return
    console = render.stdout_console()
    for line in render.membership_lines(change):
        console.print(line, markup=False)


RoleArgument = Annotated[str, typer.Argument(help="owner, producer or consumer", metavar="ROLE")]
UserArgument = Annotated[str, typer.Argument(help="The user who gets or loses the role.", metavar="USER")]


@access_app.command("grant")
def access_grant(
    role: RoleArgument, asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")], user: UserArgument,
    by: ByUser, password_stdin: PasswordStdin = False, as_json: JsonOption = False,
) -> None:
    """Give USER a role on the asset: add them to the role's group in the directory. Needs the owner role."""
    _change_role("grant", role, asset, user, by, password_stdin, as_json)


@access_app.command("revoke")
def access_revoke(
    role: RoleArgument, asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")], user: UserArgument,
    by: ByUser, password_stdin: PasswordStdin = False, as_json: JsonOption = False,
) -> None:
    """Take a role away: remove USER from the role's group in the directory. Needs the owner role."""
    _change_role("revoke", role, asset, user, by, password_stdin, as_json)


@ledger_app.command("show")
def ledger_show(
    asset: Annotated[str | None, typer.Option(help="Only entries about DOMAIN/NAME.")] = None,
    version: Annotated[int | None, typer.Option(help="Only entries about this version number.")] = None,
    actor: Annotated[str | None, typer.Option(help="Only entries by this user.")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action, or this family: read, ingestion, ingestion.committed…")] = None,
    run: Annotated[str | None, typer.Option(help="Only entries of this run id.")] = None,
    since: Annotated[str | None, typer.Option(help="Only entries at or after this time (ISO 8601, UTC unless it says; a date means its midnight).", metavar="TIME")] = None,
    until: Annotated[str | None, typer.Option(help="Only entries before this time (ISO 8601).", metavar="TIME")] = None,
    from_seq: Annotated[int, typer.Option(min=1, help="Start at this sequence number.")] = 1,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many entries.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Ledger entries in sequence order; page with --from-seq and --limit."""
    if asset:
        AssetKey.parse(asset)
    where = ledger.LedgerFilter(asset=asset, version=version, actor=actor, action=action, run_id=run,
                                since=_moment(since, "--since"), until=_moment(until, "--until"), from_seq=from_seq, limit=limit)
    with _catalog(_settings()).session() as session:
        found = ledger.entries(session, where)
    if as_json:
        _emit_json([{**e.model_dump(), "details": json.loads(e.details)} for e in found])
    else:
        console = render.stdout_console()
        for line in render.ledger_lines(found):
            console.print(line, markup=False, soft_wrap=True)


def _moment(value: str | None, option: str) -> str | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as err:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 date or time, e.g. 2026-11-22 or 2026-11-22T09:30", param_hint=option) from err
    return ledger.timestamp(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


@ledger_app.command("verify")
def ledger_verify(as_json: JsonOption = False) -> None:
    """Recompute the hash chain and hold it against the checkpoints; name the first entry that does not fit.

    The checkpoints are kept outside the database, in $CUSTODY_HOME/ledger/checkpoints.jsonl (signed
    with CUSTODY_LEDGER_KEY when it is set): they reveal a rewritten chain or a cut tail.
    """
    from governance.rollover import leftovers

    settings = _settings()
    catalog = _catalog(settings)
    written = catalog.checkpoints.read()
    with catalog.session() as session:
        result = ledger.verify(session, written)
    unfinished = [path.name for path in leftovers(catalog, settings.ledger_segments)]
    if unfinished:
        err_console.print(f"notice: an interrupted rollover left {len(unfinished)} file(s) in {settings.ledger_segments} "
                          f"({', '.join(unfinished)}); the ledger reads right without them, and the next "
                          "`custody ledger rollover` or `maintain` finishes or removes them", markup=False)
    if as_json:
        _emit_json({"ok": result.ok, "entries": result.entries, "first_bad_seq": result.first_bad_seq,
                    "reason": result.reason, "checkpoints": result.checkpoints, "problems": list(result.problems),
                    "unfinished_rollover": unfinished})
    elif result.ok:
        render.stdout_console().print(
            f"ledger ok: {result.entries} entries, chain intact, {result.checkpoints} checkpoint(s) matched")
    for problem in result.problems:
        err_console.print(f"checkpoint problem: {problem}", markup=False)
    if result.first_bad_seq is not None:
        raise IntegrityError(f"ledger broken at seq {result.first_bad_seq}: {result.reason}")
    if result.problems:
        raise IntegrityError(f"{len(result.problems)} checkpoint(s) cannot be trusted: {result.problems[0]}")


@ledger_app.command("rollover")
def ledger_rollover(
    older_than: Annotated[float | None, typer.Option("--older-than", min=0, help="Move entries older than this many days (default: CUSTODY_LEDGER_ROLLOVER_DAYS, else 30).", metavar="DAYS")] = None,
    as_json: JsonOption = False,
) -> None:
    """Move old entries out of the hot table into compressed segment files; show and verify still read them.

    Segments are kept in $CUSTODY_HOME/ledger/segments, one per range of sequence numbers. An
    interrupted rollover is finished or undone first.
    """
    from governance.maintenance import rollover_age
    from governance.rollover import rollover

    settings = _settings()
    after = timedelta(days=older_than) if older_than is not None else rollover_age(os.environ)
    report = rollover(_catalog(settings), settings.ledger_segments, after, progress=_progress_printer())
    if as_json:
        _emit_json(asdict(report))
        return
    _print_rollover(report)


@ledger_app.command("age-off")
def ledger_age_off(
    older_than: Annotated[float | None, typer.Option("--older-than", min=0, help="Delete segments whose entries are all older than this many days (default: CUSTODY_LEDGER_RETENTION_DAYS).", metavar="DAYS")] = None,
    max_bytes: Annotated[int | None, typer.Option("--max-bytes", min=1, help="Keep the segments within this size: beyond it, delete the oldest down to 90 % (default: CUSTODY_LEDGER_MAX_BYTES).", metavar="BYTES")] = None,
    as_json: JsonOption = False,
) -> None:
    """Delete the oldest ledger segments past the retention age or beyond a size budget; the rest stays verifiable.

    A checkpoint marked aged-off (signed with CUSTODY_LEDGER_KEY when set) records the last entry
    deleted, and `custody ledger verify` starts after it. Each deleted segment is a `ledger.aged_off`
    entry. Only rolled-over entries are aged off.
    """
    from governance.maintenance import LedgerRetention
    from governance.rollover import age_off

    if older_than is None and max_bytes is None:
        retention = LedgerRetention.from_environ(os.environ)
        if not retention.ages_off:
            raise typer.BadParameter("say how much to keep: --older-than DAYS, --max-bytes BYTES, or both "
                                     "(or set CUSTODY_LEDGER_RETENTION_DAYS, CUSTODY_LEDGER_MAX_BYTES)", param_hint="--older-than")
        keep_for, max_bytes = retention.keep_for, retention.max_bytes
    else:
        keep_for = timedelta(days=older_than) if older_than is not None else None
    settings = _settings()
    report = age_off(_catalog(settings), settings.ledger_segments, older_than=keep_for, max_bytes=max_bytes,
                     actor=_os_user(), assurance=Assurance.ASSERTED, progress=_progress_printer())
    if as_json:
        _emit_json(asdict(report))
        return
    _print_age_off(report)


@ledger_app.command("maintain")
def ledger_maintain(as_json: JsonOption = False) -> None:
    """Roll over, then age off, as the CUSTODY_LEDGER_* settings say: what the daily schedule runs.

    CUSTODY_LEDGER_ROLLOVER_DAYS (default 30) keeps entries in the hot table; CUSTODY_LEDGER_RETENTION_DAYS
    and CUSTODY_LEDGER_MAX_BYTES (unset: nothing is deleted) bound the segments.
    """
    from governance.maintenance import LedgerRetention, maintain

    retention = LedgerRetention.from_environ(os.environ)
    settings = _settings()
    catalog = _catalog(settings)
    report = maintain(catalog, settings.ledger_segments, retention, actor=_os_user(), assurance=Assurance.ASSERTED,
                      progress=_progress_printer())
    catalog.checkpoint()
    if as_json:
        _emit_json(asdict(report))
        return
    _print_rollover(report.rollover)
    if report.age_off is not None:
        _print_age_off(report.age_off)
    else:
        render.stdout_console().print("no age-off: neither CUSTODY_LEDGER_RETENTION_DAYS nor CUSTODY_LEDGER_MAX_BYTES is set", markup=False)


def _os_user() -> str:
    """Who runs a housekeeping command, as the operating system names them: the ledger's actor for it."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in the environment and no passwd entry
        return "unknown"


def _print_rollover(report: RolloverReport) -> None:
    console = render.stdout_console()
    for name in report.adopted:
        console.print(f"finished an interrupted rollover: {name}", markup=False)
    for name in report.removed:
        console.print(f"removed what an interrupted rollover left: {name}", markup=False)
    console.print(f"rolled {report.entries:,} entries into {len(report.segments)} segment(s)", markup=False)


def _print_age_off(report: AgeOffReport) -> None:
    where = f"; the ledger now begins after entry {report.horizon}" if report.horizon else ""
    render.stdout_console().print(
        f"aged off {len(report.segments)} segment(s), {report.entries:,} entries, {report.bytes:,} B{where}", markup=False)


@app.command()
def repair(
    verify: Annotated[bool, typer.Option("--verify", help="Also re-hash every committed version's files.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Roll back interrupted attempts and remove folders no committed version owns."""
    settings = _settings()
    from governance.repair import repair as repair_lake

    report = repair_lake(_catalog(settings), Lake(settings.lake), actor="custody-repair", thorough=True, verify_files=verify)
    if as_json:
        _emit_json(asdict(report))
    else:
        console = render.stdout_console()
        for label, items in (("rolled back", report.rolled_back), ("removed", report.removed), ("damaged", report.damaged)):
            for item in items:
                console.print(f"{label}: {item}", markup=False)
        if report.clean:
            console.print("nothing to repair")
    if report.damaged:
        raise typer.Exit(1)


@app.command()
def demo(as_user: Annotated[str, typer.Option("--as", help="Requester of the demo runs.", metavar="USER")] = "bob") -> None:
    """Drop sample batches, run the whole pipeline through Dagster, show the summary's provenance.

    Also where its revenue column comes from.
    """
    settings = _settings()
    from governance.demo import (
        CLIENTS,
        NAMES_AND_PRODUCTS,
        PRODUCT_SUMMARY,
        PRODUCTS,
        drop_demo_batches,
    )

    require_java()
    dropped = drop_demo_batches(Lake(settings.lake))
    integration = [NAMES_AND_PRODUCTS, PRODUCT_SUMMARY]
    steps = [
        ([PRODUCTS], {PRODUCTS: {"batch": dropped.products_batch}}),
        ([CLIENTS], {CLIENTS: {"batch": dropped.client_batches[0]}}),
        (integration, None),
        ([CLIENTS], {CLIENTS: {"batch": dropped.client_batches[1]}}),
        (integration, None),
    ]
    for keys, config in steps:
        _run(settings, keys, as_user, False, ingest_config=config)
    catalog = _catalog(settings)
    latest = catalog.latest(PRODUCT_SUMMARY)
    console = render.stdout_console()
    console.print()
    console.print(render.lineage_tree(provenance_of(catalog, VersionRef(PRODUCT_SUMMARY, latest.number))))
    from governance.lineage.column_trace import origins

    console.print()
    revenue = origins(catalog, VersionRef(PRODUCT_SUMMARY, latest.number), "revenue", direct_only=True)
    console.print(render.origins_tree(latest.ref, "revenue", revenue))
    console.print()
    _demo_reads(_custody(settings), latest.ref, console)


def _demo_reads(custody: Custody, ref: str, console) -> None:
    """carol, a consumer, reads the summary; eve, who holds no role, is denied; both are in the ledger."""
    from governance.errors import AccessDenied

    custody.read(ref, as_user="carol", limit=3)
    with contextlib.suppress(AccessDenied):  # the denial is what the demo shows, from the ledger
        custody.read(ref, as_user="eve", limit=3)
    asset, _, number = ref.partition("@")
    where = ledger.LedgerFilter(asset=asset, version=int(number), action="read")
    with custody.catalog.session() as session:
        reads = ledger.entries(session, where)
    console.print(f"Reads of {ref} (custody ledger show --action read)", markup=False)
    for line in render.ledger_lines(reads):
        console.print(line, markup=False, soft_wrap=True)


def _unwrapped(doc: str) -> str:
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in doc.split("\n\n"))


def _wrap_help_paragraphs() -> None:
    """Typer's rich help keeps a docstring's line breaks; joined, its paragraphs wrap to the terminal."""
    for group in (app, specs_app, access_app, ledger_app, lineage_app):
        for command in group.registered_commands:
            if command.help is None and command.callback is not None and command.callback.__doc__:
                command.help = _unwrapped(inspect.cleandoc(command.callback.__doc__))


_wrap_help_paragraphs()


def run(args: list[str] | None = None) -> int:
    """Run the CLI and return its exit code: errors become one line on stderr."""
    try:
        result = app(args=args, prog_name="custody", standalone_mode=False)
    except typer.TyperException as err:
        err.show()
        return getattr(err, "exit_code", 2)
    except typer.Abort:
        err_console.print("aborted")
        return 1
    except CustodyError as err:
        if State["verbose"]:
            err_console.print_exception()
        err_console.print(f"error: {err}", markup=False)
        return err.exit_code
    return result if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run())
