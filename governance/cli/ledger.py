"""`custody ledger`: read, verify and maintain the audit ledger."""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from governance import render
from governance.catalog.ledgerfilter import LedgerFilter, moment
from governance.cli.common import (
    AsUser,
    JsonOption,
    PasswordStdin,
    emit_json,
    err_console,
    group,
    load_settings,
    open_catalog,
    open_custody,
    progress_printer,
    read_password,
    service_client,
)
from governance.errors import IntegrityError, InvalidInput
from governance.zones import LARGEST_NUMBER, AssetKey

if TYPE_CHECKING:
    from governance.rollover import AgeOffReport, RolloverReport

ledger_app = group("ledger", "Read and verify the audit ledger.")


@ledger_app.command("show")
def ledger_show(
    asset: Annotated[str | None, typer.Option(help="Only entries about DOMAIN/NAME.")] = None,
    version: Annotated[
        int | None, typer.Option(min=1, max=LARGEST_NUMBER, help="Only entries about this version number.")
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Only entries by this user.")] = None,
    action: Annotated[
        str | None, typer.Option(help="Only this action, or this family: read, ingestion, ingestion.committed…")
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(help="Only entries of this run: its id, or its beginning as printed (8 or more characters)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only entries at or after this time: ISO 8601 (UTC unless it says; a date means its midnight), "
            "or a time ago such as 30m, 2h or 7d.",
            metavar="TIME",
        ),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only entries before this time (ISO 8601, or a time ago).", metavar="TIME")
    ] = None,
    from_seq: Annotated[int, typer.Option(min=1, max=LARGEST_NUMBER, help="Start at this sequence number.")] = 1,
    limit: Annotated[int | None, typer.Option(min=1, max=LARGEST_NUMBER, help="At most this many entries.")] = None,
    as_user: AsUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Ledger entries in sequence order; page with --from-seq and --limit.

    For the auditor and admin groups: each request, allowed or denied, is itself a `ledger.read`
    entry, for the user running the command (as `os_users` maps them) or the one --as names.
    """
    if asset:
        AssetKey.parse(asset)
    where = LedgerFilter(
        asset=asset,
        version=version,
        actor=actor,
        action=action,
        run_id=run,
        since=_moment(since, "--since"),
        until=_moment(until, "--until"),
        from_seq=from_seq,
        limit=limit,
    )
    remote = service_client()
    if remote is not None:
        remote.acting_as(as_user, "--as")
        found = remote.ledger(where)
    else:
        # Only here: a client of the service loads no database library, and starts in half the time.
        from governance import ledger

        custody = open_custody(load_settings())
        entries = custody.ledger_entries(where, as_user=as_user, password=read_password(password_stdin))
        found = [ledger.entry_dict(entry) for entry in entries]
    if as_json:
        emit_json(found)
    else:
        console = render.stdout_console()
        for line in render.ledger_lines(found):
            console.print(line, markup=False, soft_wrap=True)


def _moment(value: str | None, option: str) -> str | None:
    if value is None:
        return None
    try:
        return moment(value)
    except InvalidInput as err:
        raise typer.BadParameter(str(err), param_hint=option) from err


UNVERIFIED = 5  # exit code: the chain is intact, the checkpoints could not be verified


@ledger_app.command("verify")
def ledger_verify(as_json: JsonOption = False) -> int:
    """Recompute the hash chain and hold it against the checkpoints; name the first entry that does not fit.

    The checkpoints are kept outside the database, in checkpoints.jsonl in CUSTODY_LEDGER_CHECKPOINTS
    (default $CUSTODY_HOME/ledger), a file the catalog keeps the head of: they reveal a rewritten
    chain or a cut tail, and the file's own changes. Every host that writes or verifies must share
    that folder; the file used is named in the output. Only with CUSTODY_LEDGER_KEY set can they be
    told from forgeries: without it, an intact chain exits with code 5, not 0.
    """
    from governance import ledger
    from governance.rollover import leftovers

    settings = load_settings()
    catalog = open_catalog(settings)
    checkpoints = catalog.checkpoint_file()
    with catalog.reading() as session:
        result = ledger.verify(session, checkpoints)
    unfinished = tuple(path.name for path in leftovers(catalog, settings.ledger_segments))
    report = render.LedgerReport(result, checkpoints.path, settings.ledger_segments, unfinished)
    if as_json:
        emit_json(
            {
                "ok": result.ok,
                "checkpoint_file": str(report.checkpoint_file),
                "checkpoints_verified": result.checkpoints_verified,
                "entries": result.entries,
                "first_bad_seq": result.first_bad_seq,
                "reason": result.reason,
                "checkpoints": result.checkpoints,
                "problems": list(result.problems),
                "unfinished_rollover": list(unfinished),
            }
        )
    _print_report(report, as_json)
    failure = report.failure()
    if failure:
        raise IntegrityError(failure)
    return 0 if result.checkpoints_verified else UNVERIFIED


def _print_report(report: render.LedgerReport, as_json: bool) -> None:
    """What held on standard output (unless --json), what could not be verified on standard error."""
    held = report.held()
    if held and not as_json:
        render.stdout_console().print(held, markup=False)
    for notice in report.notices():
        err_console.print(f"notice: {notice}", markup=False)


@ledger_app.command("rollover")
def ledger_rollover(
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than",
            min=0,
            help="Move entries older than this many days (default: CUSTODY_LEDGER_ROLLOVER_DAYS, else 30).",
            metavar="DAYS",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Move old entries out of the hot table into compressed segment files; show and verify still read them.

    Segments are kept in $CUSTODY_HOME/ledger/segments, one per range of sequence numbers. An
    interrupted rollover is finished or undone first.
    """
    from governance.maintenance import rollover_age
    from governance.rollover import rollover

    settings = load_settings()
    after = timedelta(days=older_than) if older_than is not None else rollover_age(os.environ)
    report = rollover(open_catalog(settings), settings.ledger_segments, after, progress=progress_printer())
    if as_json:
        emit_json(asdict(report))
        return
    _print_rollover(report)


@ledger_app.command("age-off")
def ledger_age_off(
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than",
            min=0,
            help="Delete segments whose entries are all older than this many days (default: CUSTODY_LEDGER_RETENTION_DAYS).",
            metavar="DAYS",
        ),
    ] = None,
    max_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-bytes",
            min=1,
            help="Keep the segments within this size: beyond it, delete the oldest down to 90 % (default: CUSTODY_LEDGER_MAX_BYTES).",
            metavar="BYTES",
        ),
    ] = None,
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
            raise typer.BadParameter(
                "say how much to keep: --older-than DAYS, --max-bytes BYTES, or both "
                "(or set CUSTODY_LEDGER_RETENTION_DAYS, CUSTODY_LEDGER_MAX_BYTES)",
                param_hint="--older-than",
            )
        keep_for, max_bytes = retention.keep_for, retention.max_bytes
    else:
        keep_for = timedelta(days=older_than) if older_than is not None else None
    settings = load_settings()
    operator = open_custody(settings).local.identity("cli")
    report = age_off(
        open_catalog(settings),
        settings.ledger_segments,
        older_than=keep_for,
        max_bytes=max_bytes,
        actor=operator.user,
        assurance=operator.assurance,
        progress=progress_printer(),
        how=operator.recorded(),
    )
    if as_json:
        emit_json(asdict(report))
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
    settings = load_settings()
    operator = open_custody(settings).local.identity("cli")
    report = maintain(
        open_catalog(settings),
        settings.ledger_segments,
        retention,
        actor=operator.user,
        assurance=operator.assurance,
        progress=progress_printer(),
        how=operator.recorded(),
    )
    if as_json:
        emit_json(asdict(report))
        return
    _print_rollover(report.rollover)
    if report.age_off is not None:
        _print_age_off(report.age_off)
    else:
        render.stdout_console().print(
            "no age-off: neither CUSTODY_LEDGER_RETENTION_DAYS nor CUSTODY_LEDGER_MAX_BYTES is set", markup=False
        )


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
        f"aged off {len(report.segments)} segment(s), {report.entries:,} entries, {report.bytes:,} B{where}",
        markup=False,
    )
