"""Protecting versions, letting expired ones go, and reconciling the lake after a crash."""

from __future__ import annotations

import os
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from governance import render
from governance.catalog.states import Criticality
from governance.cli.common import (
    ByUser,
    JsonOption,
    PasswordStdin,
    app,
    emit_json,
    err_console,
    identify,
    load_settings,
    open_catalog,
    open_custody,
    progress_printer,
    service_client,
)
from governance.errors import CustodyError, error_summary
from governance.zones import Lake, VersionRef

if TYPE_CHECKING:
    from governance.config import Settings
    from governance.foreign.waiting import Ready, Waiting
    from governance.retention.reports import StatusChange


@app.command()
def status(
    version: Annotated[str, typer.Argument(help="DOMAIN/NAME@N")],
    value: Annotated[str, typer.Argument(help="critical or normal", metavar="critical|normal")],
    by: ByUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Mark a version critical (protected from purge, with everything upstream) or normal; needs the owner role."""
    from governance.retention.reports import StatusChange

    ref, status_value = VersionRef.parse(version), Criticality.parse(value)
    remote = service_client()
    if remote is not None:
        remote.acting_as(by, "--by")
        sent = remote.send("PUT", f"/versions/{ref.key}/{ref.number}/status", {"status": status_value.value})
        change = StatusChange(**{**sent, "purged_upstream": tuple(sent["purged_upstream"])})
    else:
        change = _set_status(ref, status_value, by, password_stdin)
    if as_json:
        emit_json(asdict(change))
        return
    console = render.stdout_console()
    console.print(f"{change.ref}: {change.before} -> {change.after}", markup=False)
    if change.after == Criticality.CRITICAL:
        console.print(
            f"protected: {change.ref} and {change.protected_upstream} version(s) upstream of it", markup=False
        )
    if change.purged_upstream:
        err_console.print(
            f"warning: already purged upstream, cannot be protected: {', '.join(change.purged_upstream)}", markup=False
        )


def _set_status(ref: VersionRef, value: Criticality, by: str | None, password_stdin: bool) -> StatusChange:
    from governance.retention.purge import change_status

    custody = open_custody(load_settings())
    identity = identify(custody, by, password_stdin)
    return change_status(custody.store, custody.policy, identity, custody.specs.get(ref.key), ref, value)


@app.command()
def purge(
    versions: Annotated[
        list[str] | None,
        typer.Argument(
            help="DOMAIN/NAME@N to purge now (default: what each spec's retention lets go).", show_default=False
        ),
    ] = None,
    by: ByUser = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be purged; change nothing.")] = False,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Apply retention: delete expired versions' files, never a protected one; needs the admin group.

    Retention is each spec's keep_versions and max_age_days; the admin group is the one pinned in the
    catalog (`custody settings show`).
    """
    from governance.retention.reports import PurgeReport

    refs = [VersionRef.parse(v) for v in versions or []]
    remote = service_client()
    if remote is not None:
        remote.acting_as(by, "--by")
        sent = remote.send("POST", "/purge", {"versions": [str(ref) for ref in refs], "dry_run": dry_run})
        report = PurgeReport.from_dict(sent)
    else:
        from governance.lake import open_lake
        from governance.retention.purge import governed_purge

        settings = load_settings()
        custody = open_custody(settings)
        report = governed_purge(
            custody.store,
            open_lake(settings),
            custody.policy,
            None if dry_run else identify(custody, by, password_stdin),
            custody.specs,
            refs,
            dry_run=dry_run,
            progress=progress_printer(),
        )
    if as_json:
        emit_json(asdict(report))
        return
    console = render.stdout_console()
    verb = "would purge" if dry_run else "purged"
    for candidate in report.purged:
        console.print(f"{verb} {candidate.ref}: {candidate.reason} ({candidate.bytes:,} B)", markup=False)
    for ref in report.finished:
        console.print(f"{'would finish' if dry_run else 'finished'} the interrupted purge of {ref}", markup=False)
    for ref in report.kept_protected:
        console.print(f"kept {ref}: expired but protected by critical lineage", markup=False)
    for held in report.kept_in_use:
        console.print(f"kept {held}", markup=False)
    for ref in report.already_purged:
        console.print(f"{ref} was purged already", markup=False)
    if not (report.purged or report.finished or report.kept_protected or report.kept_in_use or report.already_purged):
        console.print("nothing to purge", markup=False)


def _join_waiting_reads(settings: Settings) -> tuple[list[Ready], list[Waiting], str | None]:
    """Other tools' reads of versions committed since they were reported, joined; the versions
    others wait for; and why the joining stopped, if it failed (the other repairs stand)."""
    from governance.foreign.judge import reader_judge
    from governance.foreign.waiting import MOST_AT_ONCE, join_waiting, still_waiting

    custody = open_custody(settings)
    judge = partial(reader_judge, specs=lambda: custody.specs)
    joined: list[Ready] = []
    try:
        while True:
            done = custody.deciding(lambda policy, pinned: join_waiting(custody.store, judge(policy), pinned))
            joined.extend(done)
            if len(done) < MOST_AT_ONCE:
                break
    except CustodyError as err:
        return joined, [], error_summary(err)
    return joined, still_waiting(custody.store), None


def _topics_in_step(settings: Settings) -> tuple[list[str], str | None]:
    """The governed topics made what their specs and the directory call for (ACLs nobody granted on
    them removed), each change said in a line, and the entries wider than a topic that let someone
    in, said, not removed; and why that stopped, if it failed."""
    from governance.streams.credentials import remove_departed
    from governance.streams.settings import BOOTSTRAP
    from governance.streams.topics import admin_for, covering, governing, keep_in_step

    if not os.environ.get(BOOTSTRAP):
        return [], None  # no cluster: a spec that names a topic is refused when applied
    custody = open_custody(settings)
    try:
        streamed = governing(custody.store, custody.policy, custody.specs)
        admin = admin_for(streamed)
        if admin is None:
            return [], None
        changes = keep_in_step(
            custody.store,
            admin,
            custody.policy.directory,
            streamed,
            actor="custody-repair",
            assurance=None,
            because="repair",
        )
        wider = {change.topic: sorted(covering(admin, change.topic)) for change in changes}
        departed = remove_departed(
            custody.store, admin, custody.policy.directory, actor="custody-repair", assurance=None
        )
    except CustodyError as err:
        return [], error_summary(err)
    lines = [f"topic created: {change.topic} ({change.asset})" for change in changes if change.created]
    lines += [f"Kafka credential removed: {user} (no longer in the directory)" for user in departed]
    for change in changes:
        lines += [f"ACL added: {acl}" for acl in change.added] + [f"ACL removed: {acl}" for acl in change.removed]
        # Wider than the topic, they are others' to remove: said at every repair until they go.
        lines += [f"ACL wider than {change.topic}, left: {acl}" for acl in wider[change.topic]]
    return lines, None


@app.command()
def repair(
    verify: Annotated[bool, typer.Option("--verify", help="Also re-hash every committed version's files.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Roll back interrupted attempts, remove folders no committed version owns or no live feed merge or drop
    uses, fail runs whose process is gone, record in Dagster the versions such runs committed, and join other
    tools' reads of versions committed since they were reported (saying which versions reads still wait for), and
    bring governed Kafka topics' ACLs in step with their roles, removing entries nobody granted and the Kafka
    credentials Custody issued to users the directory no longer has."""
    settings = load_settings()
    from governance.feeds.tend import remove_abandoned_work
    from governance.lake import open_lake
    from governance.orchestration import orchestrator
    from governance.repair import repair as repair_lake

    report = repair_lake(
        open_catalog(settings), open_lake(settings), actor="custody-repair", thorough=True, verify_files=verify
    )
    left = remove_abandoned_work(settings.feeds_workspace / "consolidating", Lake(settings.lake))
    report.removed.extend(str(path) for path in left)
    repaired = orchestrator().repair(settings, open_catalog(settings))
    gone_runs, told = repaired.failed, repaired.recorded
    joined, waiting, unjoined = _join_waiting_reads(settings)
    topics, topics_failed = _topics_in_step(settings)
    if as_json:
        emit_json(
            {
                **asdict(report),
                "failed_runs": [run.run_id for run in gone_runs],
                "recorded_in_dagster": [{"version": done.version, "run_id": done.run_id} for done in told],
                "joined_reads": [{"run_id": read.run_id, "version": read.ref} for read in joined],
                "waiting_reads": [{"version": wait.ref, "runs": wait.runs} for wait in waiting],
                "reads_not_joined": unjoined,
                "topics": topics,
                "topics_not_in_step": topics_failed,
            }
        )
    else:
        console = render.stdout_console()
        for label, items in (
            ("rolled back", report.rolled_back),
            ("removed", report.removed),
            ("damaged", report.damaged),
            ("table", report.tables),
            ("table not aligned", report.table_problems),
            ("lineage", report.lineage),
            ("finished an interrupted purge", report.purged),
        ):
            for item in items:
                console.print(f"{label}: {item}", markup=False)
        for run in gone_runs:
            console.print(f"marked failed: {run.said}", markup=False)
        for done in told:
            console.print(f"recorded in Dagster: {done.said}", markup=False)
        for read in joined:
            console.print(f"joined: run {read.run_id}'s read of {read.ref}", markup=False)
        if unjoined is not None:
            console.print(f"reads waiting for versions not joined: {unjoined}", markup=False)
        for line in topics:
            console.print(line, markup=False, soft_wrap=True)
        if topics_failed is not None:
            console.print(f"topics not in step: {topics_failed}", markup=False, soft_wrap=True)
        quiet = not (gone_runs or told or joined or topics) and unjoined is None and topics_failed is None
        if report.clean and quiet:
            console.print("nothing to repair")
        for wait in waiting:
            runs = f"{wait.runs} run" + ("s" if wait.runs != 1 else "")
            console.print(f"waiting for {wait.ref}: read by {runs}, not committed yet", markup=False)
    if report.damaged or report.table_problems or unjoined is not None or topics_failed is not None:
        raise typer.Exit(1)
