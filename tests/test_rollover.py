"""Rollover: old ledger entries move into segment files; show and verify read across segments and
the hot table without the user noticing; a rollover or an append killed at any moment is finished
or undone, with no acknowledged entry lost and no gap."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from sqlalchemy import Engine
from sqlmodel import select

from assets.dagster_internals import InstigatorType
from assets.definitions import build_definitions
from governance import ledger
from governance.catalog import Catalog, make_engine
from governance.catalog.models import ArchivedEntry, LedgerEntry, LedgerSegmentRow
from governance.checkpoints import Checkpoints
from governance.config import Settings
from governance.errors import IntegrityError, InvalidInput
from governance.maintenance import (
    MAX_BYTES,
    RETENTION_DAYS,
    ROLLOVER_DAYS,
    LedgerRetention,
    maintain,
)
from governance.rollover import age_off, recover, rollover
from governance.segments import write_segment
from resources import CustodyResource
from tests.conftest import ROOT, catalog_in_home
from tests.helpers import run_proven
from tests.ticks import scheduled_tags, submitted_for_tick, tick

pytestmark = pytest.mark.both_backends

OLD, NEW = 700, 60


@pytest.fixture
def book(settings, tmp_path, prepared) -> Catalog:
    """OLD entries dated 2020, then NEW entries of today."""
    if not catalog_in_home(settings):
        return written(settings.catalog_url, tmp_path)
    prepared.files("dated-book", tmp_path, write_book)
    return kept_in(make_engine(settings.catalog_url), tmp_path)


def write_book(folder: Path) -> None:
    """The book of a SQLite catalog, made in `folder` as in a test's tmp_path."""
    written(Settings.under(folder / "home").catalog_url, folder).engine.dispose()


def written(catalog_url: str, folder: Path) -> Catalog:
    catalog = Catalog(make_engine(catalog_url))
    with catalog.session() as session:
        ledger.append_many(session, [event(i) for i in range(OLD)])
        session.connection().exec_driver_sql("UPDATE ledger SET ts = '2020-01-01T00:00:00.000000Z'")
    # The dates were changed after hashing: hash again, as if written in 2020.
    with catalog.session() as session:
        prev = ledger.GENESIS
        for entry in session.exec(select(LedgerEntry).order_by(LedgerEntry.seq)):
            entry.prev_hash, entry.hash = prev, ledger.entry_hash(prev, entry)
            prev = entry.hash
            session.add(entry)
    catalog = kept_in(catalog.engine, folder)
    catalog.checkpoint()
    for i in range(OLD, OLD + NEW):
        with catalog.session() as session:
            ledger.append_many(session, [event(i)])
    return catalog


def kept_in(engine: Engine, folder: Path) -> Catalog:
    """The catalog with its checkpoints and segments in `folder`."""
    return Catalog(engine, Checkpoints(folder / "checkpoints.jsonl", every=50), folder / "segments")


def event(i: int) -> ledger.Event:
    return ledger.Event(
        actor=f"user{i % 3}",
        action=("read", "ingestion.committed")[i % 2],
        asset=f"t/asset_{i % 5}",
        version=i % 4 + 1,
        details={"i": i, "pad": "x" * 50},
    )


def everything(catalog: Catalog, where: ledger.LedgerFilter | None = None) -> list[dict]:
    where = where or ledger.LedgerFilter()
    with catalog.session() as session:
        return [e.model_dump() for e in ledger.entries(session, where)]


def verify(catalog: Catalog) -> ledger.Verification:
    with catalog.session() as session:
        return ledger.verify(session, catalog.checkpoints)


def test_old_entries_move_to_segments_and_read_as_before(book, tmp_path):
    before = everything(book)
    report = rollover(book, tmp_path / "segments", timedelta(days=30), per_segment=300)
    assert report.segments == [
        f"{1:012d}-{300:012d}.segment",
        f"{301:012d}-{600:012d}.segment",
        f"{601:012d}-{700:012d}.segment",
    ]
    assert report.entries == OLD
    with book.session() as session:
        assert len(list(session.exec(select(LedgerEntry)))) == NEW
        assert len(list(session.exec(select(ArchivedEntry)))) == OLD
    assert everything(book) == before
    assert verify(book).ok and verify(book).entries == OLD + NEW


@pytest.mark.parametrize(
    "where",
    [
        ledger.LedgerFilter(asset="t/asset_2"),
        ledger.LedgerFilter(asset="t/asset_2", version=3),
        ledger.LedgerFilter(action="ingestion", actor="user1"),
        ledger.LedgerFilter(from_seq=650, limit=100),
        ledger.LedgerFilter(from_seq=10, limit=5),
        ledger.LedgerFilter(since="2021-01-01T00:00:00.000000Z"),
        ledger.LedgerFilter(until="2021-01-01T00:00:00.000000Z", asset="t/asset_1", limit=7),
    ],
)
def test_filters_and_pages_give_the_same_entries_across_segments_and_hot_table(book, tmp_path, where):
    before = everything(book, where)
    rollover(book, tmp_path / "segments", timedelta(days=30), per_segment=300)
    assert everything(book, where) == before and before
    with book.reading() as session:
        page = ledger.entries_json(session, where)
        found = ledger.entries(session, where)
        assert json.loads(page.json) == [ledger.entry_dict(entry) for entry in found]
        assert page.entries == len(found)


def test_appends_continue_the_chain_after_everything_rolled(book, tmp_path):
    rollover(book, tmp_path / "segments", timedelta(days=-1))
    with book.session() as session:
        assert list(session.exec(select(LedgerEntry))) == []
        assert ledger.append(session, actor="bob", action="read").seq == OLD + NEW + 1
    assert verify(book).ok


def test_a_torn_segment_is_named_by_verify(book, tmp_path):
    rollover(book, tmp_path / "segments", timedelta(days=30), per_segment=300)
    second = tmp_path / "segments" / f"{301:012d}-{600:012d}.segment"
    second.write_bytes(second.read_bytes()[:-40])
    result = verify(book)
    assert result.first_bad_seq == 301 and "cut short" in result.reason and second.name in result.reason


def test_verify_names_an_entry_whose_searchable_copy_was_changed_after_rollover(book, tmp_path):
    rollover(book, tmp_path / "segments", timedelta(days=30), per_segment=300)
    with book.session() as session:
        session.connection().exec_driver_sql("UPDATE ledger_archive SET actor = 'user0' WHERE actor = 'user1'")
    found = verify(book)
    assert (found.ok, found.first_bad_seq) == (False, 2)
    assert found.reason == "ledger_archive says actor 'user0' for entry 2, its segment says 'user1'"


def test_verify_names_a_rolled_over_entry_whose_searchable_copy_was_deleted(book, tmp_path):
    rollover(book, tmp_path / "segments", timedelta(days=30), per_segment=300)
    with book.session() as session:
        session.connection().exec_driver_sql("DELETE FROM ledger_archive WHERE seq = 400")
    assert verify(book).reason == "ledger_archive has no searchable copy of entry 400"


def test_a_filter_refuses_entries_its_searchable_copy_chose_but_their_segment_contradicts(book, tmp_path):
    rollover(book, tmp_path / "segments", timedelta(days=30), per_segment=300)
    with book.session() as session:
        session.connection().exec_driver_sql("UPDATE ledger_archive SET actor = 'user0' WHERE actor = 'user1'")
    with pytest.raises(IntegrityError, match="searchable copy of entry 2 does not match its segment"):
        everything(book, ledger.LedgerFilter(actor="user0"))


def test_recovery_adopts_a_whole_segment_the_catalog_never_recorded(book, tmp_path):
    folder = tmp_path / "segments"
    with book.session() as session:
        rows = [
            e.model_dump()
            for e in session.exec(select(LedgerEntry).where(LedgerEntry.seq <= 100).order_by(LedgerEntry.seq))
        ]
    write_segment(folder, rows)  # the crash came before the catalog transaction
    report = recover(book, folder)
    assert report.adopted == [f"{1:012d}-{100:012d}.segment"]
    with book.session() as session:
        assert session.get(LedgerEntry, 1) is None and session.get(ArchivedEntry, 100) is not None
    assert verify(book).ok


def test_recovery_removes_a_torn_or_half_written_segment_and_keeps_the_hot_entries(book, tmp_path):
    folder = tmp_path / "segments"
    with book.session() as session:
        rows = [
            e.model_dump()
            for e in session.exec(select(LedgerEntry).where(LedgerEntry.seq <= 100).order_by(LedgerEntry.seq))
        ]
    torn = write_segment(folder, rows).path
    torn.write_bytes(torn.read_bytes()[:500])
    (folder / ".writing-abc.segment").write_bytes(b"partial")
    report = recover(book, folder)
    assert sorted(report.removed) == sorted([torn.name, ".writing-abc.segment"]) and report.adopted == []
    assert list(folder.glob("*.segment")) == [] and verify(book).ok


def killed_at(
    script: str, catalog_url: str, folder: Path, delay: float, *, after_an_entry: bool = False
) -> subprocess.CompletedProcess:
    """Run `tests/crash_ledger.py script`, SIGKILL it `delay` seconds into its work (or after the first
    entry it acknowledged), return what it printed after `ready`."""
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "crash_ledger.py"), script, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CUSTODY_CATALOG_URL": catalog_url},
    )
    assert child.stdout.readline().strip() == "ready"
    # On a busy machine the first commit alone can outlast a short delay.
    first = child.stdout.readline() if after_an_entry else ""
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    return subprocess.CompletedProcess(child.args, child.returncode, first + out)


@pytest.mark.parametrize("delay", [0.05, 0.15, 0.25, 0.35])  # the whole rollover takes about 0.5 s
def test_a_rollover_killed_at_any_moment_is_finished_or_undone(book, settings, tmp_path, delay):
    before = everything(book)
    folder = tmp_path / "segments"
    killed = killed_at("rollover", settings.catalog_url, folder, delay)
    assert killed.returncode == -signal.SIGKILL
    recover(book, folder)
    assert everything(book) == before
    assert verify(book).ok
    rollover(book, folder, timedelta(days=30), per_segment=100)
    assert everything(book) == before and verify(book).ok


@pytest.mark.parametrize("delay", [0.1, 0.3, 0.6])
def test_an_append_killed_at_any_moment_loses_no_acknowledged_entry(book, settings, tmp_path, delay):
    killed = killed_at("append", settings.catalog_url, tmp_path, delay, after_an_entry=True)
    acknowledged = [int(line) for line in killed.stdout.split()]
    assert killed.returncode == -signal.SIGKILL and acknowledged
    with book.session() as session:
        seqs = [e.seq for e in ledger.entries(session)]
        assert ledger.append(session, actor="bob", action="after").seq == seqs[-1] + 1
    assert seqs == list(range(1, len(seqs) + 1)) and set(acknowledged) <= set(seqs)
    assert verify(book).ok


def test_rollover_cli_moves_entries_and_show_reads_across(cli_env, capsys):
    from governance.cli import run

    catalog = Catalog.from_settings(cli_env, {})
    with catalog.session() as session:
        ledger.append_many(session, [event(i) for i in range(20)])
    assert run(["ledger", "rollover", "--older-than", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["entries"] == 20 and report["segments"] == [f"{1:012d}-{20:012d}.segment"]
    assert run_proven(["ledger", "show", "--asset", "t/asset_1", "--json", "--as", "dave"]) == 0
    assert [e["seq"] for e in json.loads(capsys.readouterr().out)] == [2, 7, 12, 17]
    assert run(["ledger", "verify"]) == 5  # chain intact, checkpoints unsigned
    with catalog.session() as session:
        [segment] = session.exec(select(LedgerSegmentRow))
    assert (cli_env.home / "ledger" / "segments" / segment.path).is_file()


def rolled(book: Catalog, folder: Path, per_segment: int = 100) -> Path:
    rollover(book, folder, timedelta(days=30), per_segment=per_segment)
    return folder


def test_age_off_deletes_expired_segments_and_the_rest_stays_verifiable(book, tmp_path):
    folder = rolled(book, tmp_path / "segments")
    with book.session() as session:
        session.connection().exec_driver_sql(
            "UPDATE ledger_segment SET last_ts = '2019-06-01T00:00:00.000000Z' WHERE first_seq <= 201"
        )
    report = age_off(book, folder, older_than=timedelta(days=30), now=datetime(2019, 12, 1, tzinfo=UTC))
    assert report.horizon == 300 and report.entries == 300 and len(report.segments) == 3
    assert len(list(folder.glob("*.segment"))) == 4
    with book.session() as session:
        assert [e.seq for e in ledger.entries(session, ledger.LedgerFilter(limit=2))] == [301, 302]
        recorded = ledger.entries(session, ledger.LedgerFilter(action="ledger.aged_off"))
    assert [json.loads(e.details)["last_seq"] for e in recorded] == [100, 200, 300]
    assert [e.seq for e in recorded] == [OLD + NEW + 1, OLD + NEW + 2, OLD + NEW + 3]
    assert {(e.actor, e.assurance) for e in recorded} == {("custody-maintenance", "system")}
    result = verify(book)
    assert result.ok and result.entries == OLD + NEW - 300 + 3
    with book.session() as session:
        assert ledger.append(session, actor="bob", action="read").seq == OLD + NEW + 4


def test_age_off_by_size_deletes_the_oldest_down_to_90_percent_of_the_budget(book, tmp_path):
    folder = rolled(book, tmp_path / "segments")
    sizes = [p.stat().st_size for p in sorted(folder.glob("*.segment"))]
    budget = sum(sizes) - sizes[0] // 2
    report = age_off(book, folder, max_bytes=budget)
    kept = sum(p.stat().st_size for p in folder.glob("*.segment"))
    last_deleted = sizes[len(report.segments) - 1]
    assert kept <= budget * 0.9 < kept + last_deleted  # no more deleted than needed
    assert report.bytes == sum(sizes) - kept and verify(book).ok


def test_everything_aged_off_still_continues_the_chain(book, tmp_path):
    folder = tmp_path / "segments"
    rollover(book, folder, timedelta(days=-1))
    age_off(book, folder, max_bytes=1)
    with book.session() as session:
        assert [e.action for e in ledger.entries(session)] == ["ledger.aged_off"]
        assert ledger.append(session, actor="bob", action="read").seq == OLD + NEW + 2
    assert verify(book).ok and verify(book).entries == 2


def test_deleting_old_entries_without_a_signed_age_off_record_is_detected(settings, tmp_path):
    signed = Checkpoints(tmp_path / "signed.jsonl", key=b"k3y", every=50)
    catalog = Catalog(make_engine(settings.catalog_url), signed, tmp_path / "segments")
    with catalog.session() as session:
        ledger.append_many(session, [event(i) for i in range(120)])
    folder = tmp_path / "segments"
    rollover(catalog, folder, timedelta(days=-1), per_segment=60)
    age_off(catalog, folder, max_bytes=folder.joinpath(f"{61:012d}-{120:012d}.segment").stat().st_size + 1)
    assert verify(catalog).ok
    forged = Catalog(catalog.engine, Checkpoints(signed.path, every=50))  # without the key
    forged.record_checkpoint(120, "f" * 64, aged_off=True)
    result = verify(catalog)
    assert not result.ok and any("not signed" in p for p in result.problems)


def test_an_age_off_interrupted_after_its_record_is_finished_by_the_next(book, tmp_path):
    folder = rolled(book, tmp_path / "segments")
    with book.session() as session:
        first = session.exec(select(LedgerSegmentRow).order_by(LedgerSegmentRow.first_seq)).first()
    book.record_checkpoint(first.last_seq, first.last_hash, aged_off=True)  # the crash came right after
    assert verify(book).ok
    report = age_off(book, folder, max_bytes=sum(p.stat().st_size for p in folder.glob("*.segment")) - 1)
    assert report.segments[0] == first.path and verify(book).ok


def test_age_off_cli_needs_a_limit_and_reports_the_new_start(cli_env, capsys):
    from governance.cli import run

    catalog = Catalog.from_settings(cli_env, {})
    with catalog.session() as session:
        ledger.append_many(session, [event(i) for i in range(30)])
    assert run(["ledger", "rollover", "--older-than", "0"]) == 0
    assert run(["ledger", "age-off"]) == 2
    capsys.readouterr()
    assert run(["ledger", "age-off", "--max-bytes", "1"]) == 0
    assert "the ledger now begins after entry 30" in capsys.readouterr().out
    assert run(["ledger", "verify"]) == 5  # chain intact, checkpoints unsigned


def test_maintenance_rolls_over_then_ages_off_as_the_retention_says(book, tmp_path):
    folder = tmp_path / "segments"
    retention = LedgerRetention.from_environ({ROLLOVER_DAYS: "30", RETENTION_DAYS: "365"})
    report = maintain(book, folder, retention, run_id="r-nightly")
    assert report.rollover.entries == OLD and report.age_off.entries == OLD and report.age_off.horizon == OLD
    with book.session() as session:
        [recorded] = ledger.entries(session, ledger.LedgerFilter(action="ledger.aged_off"))
        assert [e.seq for e in ledger.entries(session, ledger.LedgerFilter(limit=1))] == [OLD + 1]
    assert recorded.run_id == "r-nightly" and json.loads(recorded.details)["older_than_days"] == 365
    assert verify(book).ok


def test_maintenance_deletes_nothing_unless_a_retention_is_set(book, tmp_path):
    report = maintain(book, tmp_path / "segments", LedgerRetention.from_environ({}))
    assert report.rollover.entries == OLD and report.age_off is None
    assert len(everything(book)) == OLD + NEW


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({ROLLOVER_DAYS: "soon"}, "CUSTODY_LEDGER_ROLLOVER_DAYS='soon': expected a number of days, 0 or more"),
        ({RETENTION_DAYS: "-1"}, "CUSTODY_LEDGER_RETENTION_DAYS='-1': expected a number of days, 0 or more"),
        ({RETENTION_DAYS: "nan"}, "CUSTODY_LEDGER_RETENTION_DAYS='nan': expected a number of days, 0 or more"),
        ({MAX_BYTES: "10GB"}, "CUSTODY_LEDGER_MAX_BYTES='10GB': expected a whole number of bytes, at least 1"),
        ({MAX_BYTES: "²"}, "CUSTODY_LEDGER_MAX_BYTES='²': expected a whole number of bytes, at least 1"),
        (
            {ROLLOVER_DAYS: "60", RETENTION_DAYS: "45"},
            "CUSTODY_LEDGER_RETENTION_DAYS=45 is shorter than the rollover age (CUSTODY_LEDGER_ROLLOVER_DAYS, 60 days)",
        ),
        (
            {RETENTION_DAYS: "7"},
            "CUSTODY_LEDGER_RETENTION_DAYS=7 is shorter than the rollover age (CUSTODY_LEDGER_ROLLOVER_DAYS, 30 days)",
        ),
    ],
)
def test_a_bad_retention_setting_is_named(environ, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        LedgerRetention.from_environ(environ)


def test_ledger_maintain_cli_follows_the_settings(cli_env, capsys, monkeypatch):
    from governance.cli import run

    catalog = Catalog.from_settings(cli_env, {})
    with catalog.session() as session:
        ledger.append_many(session, [event(i) for i in range(30)])
    monkeypatch.setenv(ROLLOVER_DAYS, "0")
    assert run(["ledger", "maintain"]) == 0
    out = capsys.readouterr().out
    # The 31st: the policy settings pinned at the catalog's first use, which says who the operator is.
    assert "rolled 31 entries into 1 segment(s)" in out and "no age-off: neither" in out
    monkeypatch.setenv(MAX_BYTES, "1")
    assert run(["ledger", "age-off", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["horizon"] == 31
    assert run(["ledger", "verify"]) == 5  # chain intact, checkpoints unsigned
    with catalog.session() as session:
        [recorded] = ledger.entries(session, ledger.LedgerFilter(action="ledger.aged_off"))
    assert (recorded.actor, recorded.assurance, recorded.run_id) == (getpass.getuser(), "verified", None)
    assert {k: json.loads(recorded.details)[k] for k in ("method", "channel")} == {
        "method": "os-user",
        "channel": "cli",
    }


def test_the_nightly_schedule_runs_the_maintenance_job(cli_env, monkeypatch):
    catalog = Catalog.from_settings(cli_env, {})
    with catalog.session() as session:
        ledger.append_many(session, [event(i) for i in range(30)])
    monkeypatch.setenv(ROLLOVER_DAYS, "0")
    monkeypatch.setenv(MAX_BYTES, "1")
    defs = build_definitions(cli_env.specs, transform_packages=cli_env.transform_packages)
    schedule = defs.resolve_schedule_def("custody_ledger_maintenance_nightly")
    assert schedule.cron_schedule == "30 2 * * *" and schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    with dg.instance_for_test() as instance:
        [request] = schedule.evaluate_tick(dg.build_schedule_context(instance=instance)).run_requests
        job = defs.resolve_job_def(schedule.job_name)
        # The daemon tags each run a schedule launches with the schedule's name, its tick and time.
        tags = {**request.tags, **scheduled_tags(tick(instance, schedule.name, InstigatorType.SCHEDULE), schedule.name)}
        run_id, tags = submitted_for_tick(instance, CustodyResource(), tags)
        result = job.execute_in_process(instance=instance, run_config=request.run_config, tags=tags, run_id=run_id)
    assert result.success
    [output] = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    figures = output.step_output_data.metadata
    # The 31st: the policy settings pinned at the catalog's first use; the 32nd: whom the schedule's
    # tick launched the run for, recorded as it was submitted.
    assert figures["custody/rolled_over_entries"].value == 32 and figures["custody/aged_off_entries"].value == 32
    with catalog.session() as session:
        [recorded] = ledger.entries(session, ledger.LedgerFilter(action="ledger.aged_off"))
    assert (recorded.run_id, recorded.actor, recorded.assurance) == (result.run_id, getpass.getuser(), "verified")
    assert json.loads(recorded.details)["channel"] == "schedule"


def test_verify_notices_what_an_interrupted_rollover_left_until_the_next_rollover(cli_env, capsys):
    from governance.cli import run

    catalog = Catalog.from_settings(cli_env, {})
    with catalog.session() as session:
        ledger.append_many(session, [event(i) for i in range(30)])
        rows = [
            e.model_dump()
            for e in session.exec(select(LedgerEntry).where(LedgerEntry.seq <= 10).order_by(LedgerEntry.seq))
        ]
    unrecorded = write_segment(cli_env.ledger_segments, rows).path  # killed before the catalog recorded it
    (cli_env.ledger_segments / ".writing-abc.segment").write_bytes(b"partial")
    assert run(["ledger", "verify", "--json"]) == 5
    captured = capsys.readouterr()
    assert json.loads(captured.out)["unfinished_rollover"] == [".writing-abc.segment", unrecorded.name]
    assert "notice: an interrupted rollover left 2 file(s)" in captured.err
    assert run(["ledger", "rollover", "--older-than", "365"]) == 0
    assert "finished an interrupted rollover: " + unrecorded.name in capsys.readouterr().out
    assert run(["ledger", "verify"]) == 5  # chain intact, checkpoints unsigned
    assert "interrupted rollover" not in capsys.readouterr().err
