"""`custody feeds`: collect feeds into hourly archives, merge replicas' archives, get hours back out."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from governance import render
from governance.cli.common import (
    ByUser,
    JsonOption,
    PasswordStdin,
    emit_json,
    err_console,
    group,
    identify,
    load_settings,
    open_custody,
    progress_printer,
)
from governance.errors import EnvironmentProblem, InvalidInput, NotFound, printable
from governance.render import escape
from governance.zones import AssetKey

feeds_app = group("feeds", "Feeds: sources downloaded on a period, kept in hourly archives, landed hour by hour.")

FeedArgs = Annotated[
    list[str] | None, typer.Argument(help="Feed assets as DOMAIN/NAME (default: every feed).", show_default=False)
]
FromOption = Annotated[
    str, typer.Option("--from", help="Start: ISO 8601 UTC, rounded down to the hour.", metavar="TIME")
]
ToOption = Annotated[str, typer.Option("--to", help="End: ISO 8601 UTC, rounded up to the hour.", metavar="TIME")]
STATUS_EVERY = 10.0
# How `collect` words each of its events for a person; `--json` prints them as they are.
HUMAN = {
    "started": "replica {replica} collecting {feeds} into {store}; Ctrl-C stops",
    "status": "{downloads:,} downloads kept, {unchanged:,} unchanged, {failed_ticks:,} failed, {missed:,} missed, "
    "{archives:,} archives uploaded; max lag {max_lag_seconds:.3f}s",
    "failed": "{feed}: download failed: {error}",
    "uploaded": "{feed}: uploaded {archive} ({downloads:,} downloads)",
    "store_error": "{during} failed, tried again next time: {error}",
    "refused": "{feed}: hour {hour:.13} left as it is: {reason}",
    "consolidated": "{feed}: {hour:.13} merged into {archive}",
    "stopped": "stopped: {downloads:,} downloads kept, {archives:,} archives uploaded",
}


def _feed_specs(custody, names: list[str] | None):
    feeds = {spec.key: spec for spec in custody.specs if spec.feed}
    if not names:
        if not feeds:
            raise NotFound(f"no spec in {custody.settings.specs} declares a feed (source.feed)")
        return list(feeds.values())
    chosen = []
    for name in names:
        key = AssetKey.parse(name)
        if key not in feeds:
            raise NotFound(f"{key} is not a feed: no spec in {custody.settings.specs} gives it a source.feed")
        chosen.append(feeds[key])
    return chosen


def _store(settings):
    from governance.feeds.store import FeedStore

    return FeedStore(settings.feeds_store)


@feeds_app.command("collect")
def feeds_collect(
    feeds: FeedArgs = None,
    replica: Annotated[
        str,
        typer.Option(
            "--replica", help="This collector's name in the store (default: the host's name).", metavar="NAME"
        ),
    ] = "",
    workers: Annotated[int, typer.Option(min=1, max=256, help="Downloads in progress at once.")] = 16,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON lines on stdout: events and a status line every 10s.")
    ] = False,
) -> None:
    """Download each feed on its period until stopped, pack every finished hour into an archive and
    upload it to the feed store, and each minute merge the archives replicas uploaded for an ended
    hour. A collector needs only the store: landing complete hours is the custody_feeds sensor's
    work (or `custody feeds consolidate`'s), where the lake is.

    SIGTERM or Ctrl-C stops it cleanly: downloads in progress finish, and every hour in the
    workspace, the current one too, is packed and uploaded before it exits.
    """
    import socket

    from governance.feeds.collector import Collector, plan_feeds, utc_now
    from governance.feeds.replicas import beat, claim, new_lease
    from governance.feeds.tend import tend
    from governance.feeds.workspace import Workspace

    settings = load_settings()
    custody = open_custody(settings)
    specs = _feed_specs(custody, feeds)
    name = replica or socket.gethostname().split(".")[0]
    try:
        plans = plan_feeds(specs, os.environ)
        store = _store(settings)
        lease = new_lease(name, uuid.uuid4().hex)
        workspace_lock = _lock_workspace(settings.feeds_workspace)
        claim(store, lease, utc_now(), {})
    except (InvalidInput, EnvironmentProblem) as err:
        _refused(custody, name, str(err))
        raise
    workspace = Workspace(settings.feeds_workspace)
    say = _printer(as_json)
    stop = threading.Event()
    reported: set[str] = set()

    def tend_now() -> None:
        done = tend(store, specs, settings.feeds_workspace / "consolidating", utc_now())
        for refused in done.refused:
            say({"event": "refused", "feed": refused.feed, "hour": refused.hour.isoformat(), "reason": refused.reason})
            if refused.reason not in reported:
                reported.add(refused.reason)
                _refused(custody, name, refused.reason)
        for merged in done.consolidated:
            say(
                {
                    "event": "consolidated",
                    "feed": merged.feed,
                    "hour": merged.hour.isoformat(),
                    "rounds": merged.rounds,
                    "archive": merged.archive.archive.name if merged.archive else None,
                }
            )

    collector = Collector(plans, workspace, store, emit=say, workers=workers, every_minute=tend_now)

    def on_beat() -> None:
        status = collector.status()
        beat(store, lease, utc_now(), status)
        say({"event": "status", "replica": name, **_totals(status)})

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    say({"event": "started", "replica": name, "feeds": [plan[0] for plan in plans], "store": settings.feeds_store})
    try:
        collector.run(stop, on_beat=on_beat, beat_every=STATUS_EVERY)
        tend_now()
    finally:
        beat(store, lease, utc_now(), collector.status(), stopped=True)
        os.close(workspace_lock)
    say({"event": "stopped", "replica": name, **_totals(collector.status())})


def _lock_workspace(folder: Path) -> int:
    """One collector per workspace: a second one would pack the first one's hours under it."""
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder / ".collector.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as err:
        os.close(descriptor)
        raise EnvironmentProblem(f"another collector is running in {folder}; give each its own CUSTODY_HOME") from err
    return descriptor


def _refused(custody, replica: str, reason: str, command: str = "feeds collect") -> None:
    from governance.feeds.tend import record_refusal
    from governance.runs import os_user

    record_refusal(custody.store, os_user(), reason, replica=replica, command=command)


def _totals(status: dict[str, dict]) -> dict[str, Any]:
    keys = (
        "downloads",
        "unchanged",
        "empty",
        "failed_attempts",
        "failed_ticks",
        "missed",
        "paused",
        "bytes",
        "archives",
    )
    totals = {key: sum(counts[key] for counts in status.values()) for key in keys}
    totals["max_lag_seconds"] = round(max((c["max_lag_seconds"] for c in status.values()), default=0.0), 3)
    return totals


def _printer(as_json: bool):
    if as_json:

        def line(event: dict) -> None:
            sys.stdout.write(json.dumps(event, sort_keys=True) + "\n")
            sys.stdout.flush()

        return line
    report = progress_printer()

    def human(event: dict) -> None:
        shown = {**event, "feeds": ", ".join(event.get("feeds", ()))}
        report(HUMAN[event["event"]].format_map(shown))

    return human


@feeds_app.command("consolidate")
def feeds_consolidate(feeds: FeedArgs = None, as_json: JsonOption = False) -> int:
    """Once, what a collector does every minute: merge each ended hour's archives into one, and drop
    each complete hour into the DropZone. Safe beside running collectors. An hour with a bad archive
    is left as it is, reported and recorded in the ledger (exit 1); the others go on."""
    from governance.feeds.collector import utc_now
    from governance.feeds.tend import tend
    from governance.lake import open_lake

    settings = load_settings()
    custody = open_custody(settings)
    specs = _feed_specs(custody, feeds)
    done = tend(
        _store(settings),
        specs,
        settings.feeds_workspace / "consolidating",
        utc_now(),
        lake=open_lake(settings),
        catalog=custody.store,
    )
    merged: list[dict[str, Any]] = [
        {
            "feed": m.feed,
            "hour": m.hour.isoformat(),
            "archive": m.archive.archive.name if m.archive else None,
            "rounds": m.rounds,
            "bytes_read": m.bytes_read,
            "bytes_written": m.bytes_written,
            "deleted": m.deleted,
        }
        for m in done.consolidated
    ]
    dropped: list[dict[str, Any]] = [
        {"feed": d.feed, "hour": d.hour.isoformat(), "batch": d.batch_id, "files": d.files} for d in done.dropped
    ]
    refused = [{"feed": r.feed, "hour": r.hour.isoformat(), "reason": r.reason} for r in done.refused]
    removed = [str(path) for path in done.removed]
    for item in refused:
        _refused(custody, "", item["reason"], command="feeds consolidate")
    if as_json:
        emit_json({"consolidated": merged, "dropped": dropped, "refused": refused, "removed": removed})
        return 1 if refused else 0
    for path in removed:
        typer.echo(f"removed {path}: left by a merge or drop whose process was killed")
    for merge in merged:
        typer.echo(
            f"{merge['feed']} {merge['hour'][:13]}: merged into {merge['archive']} in {merge['rounds']} round(s), "
            f"{merge['deleted']} archive(s) deleted"
        )
    for drop in dropped:
        typer.echo(f"{drop['feed']} {drop['hour'][:13]}: dropped as batch {drop['batch']} ({drop['files']:,} files)")
    for item in refused:
        err_console.print(
            printable(f"error: {item['feed']} {item['hour'][:13]} left as it is: {item['reason']}"), markup=False
        )
    if not merged and not dropped and not refused and not removed:
        typer.echo("nothing to merge or drop")
    return 1 if refused else 0


@feeds_app.command("retrieve")
def feeds_retrieve(
    feed: Annotated[str, typer.Argument(help="The feed asset, DOMAIN/NAME.")],
    start: FromOption,
    end: ToOption,
    to_dir: Annotated[Path | None, typer.Option("--to-dir", help="Where to unpack (default: ./<feed>-<from>).")] = None,
    collapse: Annotated[
        bool, typer.Option("--collapse", help="All downloads in one folder, not one per hour.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Unpack the archives of a time range into a folder: one folder per hour (<feed>/yyyy/mm/dd/hh),
    or all together with --collapse."""
    from governance.feeds.names import feed_id, parse_moment
    from governance.feeds.retrieve import retrieve

    settings = load_settings()
    custody = open_custody(settings)
    spec = _feed_specs(custody, [feed])[0]
    since, until = parse_moment(start, "--from"), parse_moment(end, "--to")
    if until <= since:
        raise InvalidInput(f"--to {end} is not after --from {start}")
    target = to_dir or Path(f"{feed_id(spec.key)}-{since.strftime('%Y%m%dT%H')}")
    got = retrieve(_store(settings), feed_id(spec.key), since, until, target.absolute(), collapse=collapse)
    if as_json:
        emit_json(
            {
                "feed": str(spec.key),
                "hours": got.hours,
                "archives": got.archives,
                "files": got.files,
                "bytes": got.bytes,
                "target": str(got.target),
            }
        )
        return
    typer.echo(f"{got.files:,} downloads ({got.bytes:,} bytes) of {got.hours} hour(s) in {got.target}")


@feeds_app.command("delete")
def feeds_delete(
    feed: Annotated[str, typer.Argument(help="The feed asset, DOMAIN/NAME.")],
    start: FromOption,
    end: ToOption,
    by: ByUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Delete a time range's archives from the feed store (admin group); the ledger records it, or
    the refusal. Versions already landed from those hours are not touched."""
    from governance import ledger
    from governance.access.guard import enforce
    from governance.access.policy import Verb
    from governance.feeds.names import feed_id, parse_moment
    from governance.feeds.retrieve import delete

    settings = load_settings()
    custody = open_custody(settings)
    spec = _feed_specs(custody, [feed])[0]
    since, until = parse_moment(start, "--from"), parse_moment(end, "--to")
    if until <= since:
        raise InvalidInput(f"--to {end} is not after --from {start}")
    identity = identify(custody, by, password_stdin)
    decision = custody.policy.decide(identity, Verb.FEED_DELETE, None)
    enforce(
        custody.store, decision, details={"feed": str(spec.key), "from": since.isoformat(), "to": until.isoformat()}
    )
    removed: list = []
    try:
        removed += delete(_store(settings), feed_id(spec.key), since, until)
    finally:
        # Recorded even when the store fails part-way: what went is in the ledger.
        with custody.store.session() as session:
            ledger.append(
                session,
                actor=identity.user,
                action=ledger.Action.FEED_DELETED,
                asset=str(spec.key),
                assurance=identity.assurance.value,
                details={
                    "from": since.isoformat(),
                    "to": until.isoformat(),
                    "archives": [s.archive.name for s in removed],
                    "bytes": sum(s.bytes for s in removed),
                },
            )
    if as_json:
        emit_json({"feed": str(spec.key), "deleted": [s.archive.name for s in removed]})
        return
    typer.echo(f"deleted {len(removed)} archive(s) of {spec.key} ({sum(s.bytes for s in removed):,} bytes)")


@feeds_app.command("status")
def feeds_status(as_json: JsonOption = False) -> None:
    """Each feed: its period, its last download (by any replica), hours archived, and the store's size;
    then each replica, when it last wrote, and whether it is running."""
    from governance.feeds.collector import utc_now
    from governance.feeds.names import feed_id
    from governance.feeds.replicas import replicas

    settings = load_settings()
    custody = open_custody(settings)
    store = _store(settings)
    seen = replicas(store, utc_now())
    rows = []
    for spec in _feed_specs(custody, None):
        name = feed_id(spec.key)
        last = max((r["feeds"].get(name, {}).get("last_download") or "" for r in seen), default="") or None
        failed = sum(r["feeds"].get(name, {}).get("failed_ticks", 0) for r in seen)
        hours = store.hours(name)
        rows.append(
            {
                "feed": str(spec.key),
                "every": spec.feed.every,
                "last_download": last,
                "failed_ticks": failed,
                "hours_archived": len(hours),
                "last_hour": hours[-1].isoformat() if hours else None,
                "store_bytes": store.size(name),
            }
        )
    if as_json:
        emit_json({"store": settings.feeds_store, "feeds": rows, "replicas": seen})
        return
    table = Table(title=f"Feeds in {settings.feeds_store}", title_justify="left")
    for column in ("feed", "every", "last download (UTC)", "failed", "hours", "last hour", "bytes"):
        table.add_column(column, no_wrap=column != "feed")
    for row in rows:
        table.add_row(
            escape(row["feed"]),
            row["every"],
            (row["last_download"] or "-")[:23].replace("T", " "),
            str(row["failed_ticks"]),
            str(row["hours_archived"]),
            (row["last_hour"] or "-")[:13],
            f"{row['store_bytes']:,}",
        )
    render.stdout_console().print(table)
    for replica in seen:
        state = "running" if replica["running"] else "stopped" if replica.get("stopped") else "silent (not running)"
        typer.echo(
            printable(f"replica {replica['replica']} on {replica['host']}: {state}, last wrote {replica['seen'][:19]}")
        )
