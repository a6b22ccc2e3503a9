"""Ledger checkpoints outside the database: written at a ledger's first append, every N entries,
once the last is M seconds old, and at the end of every run, command and Python API call that
appended, HMAC-signed with CUSTODY_LEDGER_KEY; together with the hash chain they name the first bad
entry of any edit, deletion, insertion, reorder, truncation or rewrite. Writers in several
processes append without gaps, duplicates or lock errors."""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import random
import re
import shutil
import time
from pathlib import Path

import pytest
from sqlmodel import col, select

from governance import ledger
from governance.catalog import Catalog, make_engine
from governance.catalog.models import LedgerEntry
from governance.checkpoints import Checkpoints
from governance.config import Settings
from governance.errors import AccessDenied, InvalidInput
from tests.conftest import ROOT, catalog_in_home
from tests.helpers import execute, given_password, named_password, run_proven, verify_ledger

ENTRIES, EVERY = 40, 5
SEEDS = range(12)


@pytest.fixture
def checkpoints(tmp_path) -> Checkpoints:
    return checkpoints_in(tmp_path)


def checkpoints_in(folder: Path) -> Checkpoints:
    return Checkpoints(folder / "ledger" / "checkpoints.jsonl", every=EVERY, seconds=3600)


@pytest.fixture
def book(settings, checkpoints, tmp_path, prepared) -> Catalog:
    """A catalog whose ledger holds ENTRIES entries, checkpointed every EVERY."""
    if not catalog_in_home(settings):
        return written(Catalog(make_engine(settings.catalog_url), checkpoints))
    prepared.files("checkpointed-book", tmp_path, write_book)
    return Catalog(make_engine(settings.catalog_url), checkpoints)


def write_book(folder: Path) -> None:
    """The book of a SQLite catalog, made in `folder` as in a test's tmp_path."""
    book = written(Catalog(make_engine(Settings.under(folder / "home").catalog_url), checkpoints_in(folder)))
    book.engine.dispose()


def written(catalog: Catalog) -> Catalog:
    for i in range(ENTRIES):
        append(catalog, i)
    return catalog


def append(catalog: Catalog, i: int) -> None:
    with catalog.session() as session:
        ledger.append(session, actor="bob", action="read", asset="t/people", version=i % 3 + 1, details={"i": i})


def test_a_checkpoint_is_written_at_the_first_entry_and_every_n_entries(book, checkpoints):
    assert [c.seq for c in checkpoints.read().checkpoints] == [1, *range(EVERY, ENTRIES + 1, EVERY)]
    assert verify_ledger(book).ok and verify_ledger(book).checkpoints == 1 + ENTRIES // EVERY


def test_a_checkpoint_is_written_once_the_last_is_older_than_the_interval(settings, tmp_path):
    path = tmp_path / "ledger" / "checkpoints.jsonl"
    catalog = Catalog(make_engine(settings.catalog_url), Checkpoints(path, every=1000, seconds=60))
    for i in range(3):
        append(catalog, i)
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    append(catalog, 3)
    assert [c.seq for c in Checkpoints(path).read().checkpoints] == [1, 4]


def test_a_bad_checkpoint_interval_is_named(tmp_path):
    message = "CUSTODY_LEDGER_CHECKPOINT_SECONDS='soon': expected a number of seconds, 0 or more"
    with pytest.raises(InvalidInput, match=re.escape(message)):
        Checkpoints.under(tmp_path, {"CUSTODY_LEDGER_CHECKPOINT_SECONDS": "soon"})


def test_one_transaction_across_a_multiple_of_n_checkpoints_its_last_entry(settings, checkpoints):
    catalog = Catalog(make_engine(settings.catalog_url), checkpoints)
    with catalog.session() as session:
        for i in range(7):
            ledger.append(session, actor="bob", action="read", details={"i": i})
    assert [c.seq for c in checkpoints.read().checkpoints] == [7]


def test_a_run_ends_with_a_checkpoint(book, checkpoints):
    append(book, 99)
    book.checkpoint()
    book.checkpoint()
    assert [c.seq for c in checkpoints.read().checkpoints][-2:] == [ENTRIES, ENTRIES + 1]


def rehash_from(catalog: Catalog, seq: int) -> None:
    """What someone who can write the catalog does to hide an edit: recompute every hash after it."""
    with catalog.session() as session:
        rows = list(session.exec(select(LedgerEntry).where(LedgerEntry.seq >= seq - 1).order_by(col(LedgerEntry.seq))))
        prev = rows[0].hash if seq > 1 else ledger.GENESIS
        for row in rows[1:] if seq > 1 else rows:
            row.prev_hash = prev
            row.hash = prev = ledger.entry_hash(prev, row)
            session.add(row)


def edit(catalog, k):
    execute(catalog, f"UPDATE ledger SET details = '{{\"i\":-1}}' WHERE seq = {k}")
    return k


def delete(catalog, k):
    execute(catalog, f"DELETE FROM ledger WHERE seq = {k}")
    return k


def insert(catalog, k):
    execute(
        catalog,
        f"UPDATE ledger SET seq = -seq - 1 WHERE seq >= {k}",
        "UPDATE ledger SET seq = -seq WHERE seq < 0",
        f"INSERT INTO ledger (seq, ts, actor, action, details, prev_hash, hash) "
        f"SELECT {k}, ts, 'mallory', 'read', '{{}}', prev_hash, hash FROM ledger WHERE seq = {k + 1}",
    )
    return k


def reorder(catalog, k):
    execute(
        catalog,
        f"UPDATE ledger SET seq = -1 WHERE seq = {k}",
        f"UPDATE ledger SET seq = {k} WHERE seq = {k + 1}",
        f"UPDATE ledger SET seq = {k + 1} WHERE seq = -1",
    )
    return k


def truncate(catalog, k):
    execute(catalog, f"DELETE FROM ledger WHERE seq >= {k}")
    return k


def rewrite(catalog, k):
    edit(catalog, k)
    rehash_from(catalog, k)
    # the first checkpoint at or after the edit is where it shows
    return min(c.seq for c in catalog.checkpoints.read().checkpoints if c.seq >= k)


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("tamper", [edit, delete, insert, reorder, truncate, rewrite])
def test_tampering_is_detected_at_its_first_bad_entry(book, tamper, seed):
    k = random.Random(seed).randrange(1, ENTRIES - EVERY)
    first_bad = tamper(book, k)
    result = verify_ledger(book)
    assert not result.ok and result.first_bad_seq == first_bad, (k, result)


def test_the_chain_alone_misses_a_rewrite_that_the_checkpoints_catch(book):
    rewrite(book, 12)
    with book.session() as session:
        assert ledger.verify(session).ok
    result = verify_ledger(book)
    assert result.first_bad_seq == 15 and "differs from the checkpoint" in result.reason


def test_a_cut_tail_is_named_from_the_last_checkpoint(book):
    truncate(book, 33)
    result = verify_ledger(book)
    assert result.first_bad_seq == 33 and result.reason == "entries from 33 on are missing: a checkpoint names entry 40"


def test_signed_checkpoints_cannot_be_forged_without_the_key(settings, tmp_path):
    path = tmp_path / "signed.jsonl"
    signed = Checkpoints(path, key=b"k3y", every=EVERY, seconds=3600)
    catalog = Catalog(make_engine(settings.catalog_url), signed)
    for i in range(10):
        append(catalog, i)
    assert verify_ledger(catalog).ok and verify_ledger(catalog).checkpoints == 3
    forge_line(path, {"kind": "checkpoint", "seq": 10, "hash": "f" * 64, "mac": "0" * 64})
    forge_line(path, {"kind": "checkpoint", "seq": 11, "hash": "e" * 64})
    problems = verify_ledger(catalog).problems
    assert len(problems) == 2 and "signature does not match" in problems[0] and "not signed" in problems[1]
    assert not verify_ledger(Catalog(catalog.engine, Checkpoints(path, key=b"other"))).ok


def forge_line(path, body: dict) -> None:
    """A line numbered and linked as a real one is, its fields chosen by whoever writes it."""
    before = path.read_bytes().splitlines(keepends=True)
    line = {
        "n": len(before) + 1,
        "prev": hashlib.sha256(before[-1]).hexdigest(),
        "ts": "2026-01-01T00:00:00.000000Z",
        **body,
    }
    with path.open("ab") as out:
        out.write((json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n").encode())


def test_a_torn_last_line_is_reported(book, checkpoints):
    with checkpoints.path.open("a") as out:
        out.write('{"seq": 45, "hash"')
    result = verify_ledger(book)
    assert not result.ok and result.problems and "torn last line" in result.problems[0]


def test_the_key_never_shows(checkpoints):
    assert "s3cret" not in repr(Checkpoints(checkpoints.path, key=b"s3cret"))


def write_entries(url: str, checkpoints: Path, writer: int, count: int, start) -> None:
    catalog = Catalog.from_url(url, Checkpoints(checkpoints, key=b"k3y", every=7, seconds=0))
    start.wait(timeout=120)  # every writer has started: they append at the same time
    for i in range(count):
        with catalog.session() as session:
            ledger.append(session, actor=f"writer{writer}", action="read", details={"i": i})


@pytest.mark.both_backends
def test_writers_in_several_processes_append_and_checkpoint_without_gaps_or_lock_errors(settings, tmp_path):
    make_engine(settings.catalog_url)
    path = tmp_path / "ledger" / "checkpoints.jsonl"
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(4)
    writers = [context.Process(target=write_entries, args=(settings.catalog_url, path, w, 50, start)) for w in range(4)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=300)
    assert [p.exitcode for p in writers] == [0, 0, 0, 0]
    catalog = Catalog.from_url(settings.catalog_url)
    with catalog.session() as session:
        found = ledger.entries(session)
        result = ledger.verify(session, Checkpoints(path, key=b"k3y"))
    assert [e.seq for e in found] == list(range(1, 201))
    assert len(list(itertools.groupby(e.actor for e in found))) > 4  # the writers took turns
    assert result.ok and result.checkpoints_verified and result.checkpoints > 0, result


def test_ledger_show_pages_by_seq_and_filters_a_time_range(cli_env, capsys):
    from governance.cli import run

    catalog = Catalog.from_url(cli_env.catalog_url)
    for i in range(6):
        append(catalog, i)
    execute(catalog, "UPDATE ledger SET ts = '2026-01-0' || seq || 'T12:00:00.000000Z'")
    assert (
        run_proven(["ledger", "show", "--since", "2026-01-02", "--until", "2026-01-05T00:00", "--json", "--as", "dave"])
        == 0
    )
    assert [e["seq"] for e in json.loads(capsys.readouterr().out)] == [2, 3, 4]
    assert (
        run_proven(
            ["ledger", "show", "--from-seq", "3", "--limit", "2", "--asset", "t/people", "--json", "--as", "dave"]
        )
        == 0
    )
    assert [e["seq"] for e in json.loads(capsys.readouterr().out)] == [3, 4]
    assert run(["ledger", "show", "--since", "yesterday"]) == 2
    assert "not an ISO 8601 date or time" in capsys.readouterr().err


def test_verify_uses_the_checkpoints_under_custody_home(cli_env, capsys, monkeypatch):
    from governance.cli import run

    environ = {
        "CUSTODY_LEDGER_CHECKPOINT_EVERY": "2",
        "CUSTODY_LEDGER_CHECKPOINT_SECONDS": "3600",
        "CUSTODY_LEDGER_KEY": "k3y",
    }
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    catalog = Catalog.from_settings(cli_env, environ)
    for i in range(6):
        append(catalog, i)
    assert run(["ledger", "verify"]) == 0
    assert "ledger ok: 6 entries, chain intact, 4 checkpoint(s) matched" in capsys.readouterr().out
    truncate(catalog, 5)
    assert run(["ledger", "verify", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["first_bad_seq"] == 5 and "ledger broken at seq 5: entries from 5 on are missing" in err


def test_every_run_ends_with_a_checkpoint_of_its_last_entry(cli_env, spark, capsys):
    from governance.demo import drop_demo_batches
    from governance.zones import Lake

    drop_demo_batches(Lake(cli_env.lake))
    assert run_proven(["ingest", "sales/products", "--as", "bob"]) == 0
    assert run_proven(["ingest", "sales/products", "--as", "eve"]) == 3
    written = Checkpoints.under(cli_env.checkpoint_folder, {}).read().checkpoints
    with Catalog.from_url(cli_env.catalog_url).session() as session:
        last = ledger.last_entry(session)
    assert written[-1].seq == last.seq and written[-1].hash == last.hash


@pytest.fixture
def quiet_ledger(cli_env, monkeypatch, tmp_path):
    """One entry, checkpointed; the interval is an hour, so only the end of a command checkpoints again."""
    directory = tmp_path / "directory.yaml"
    shutil.copy(ROOT / "assets" / "directory.yaml", directory)
    monkeypatch.setenv("CUSTODY_DIRECTORY", f"file:{directory}")
    monkeypatch.setenv("CUSTODY_LEDGER_CHECKPOINT_SECONDS", "3600")
    append(Catalog.from_settings(cli_env, os.environ), 0)
    return cli_env


def assert_last_entry_checkpointed(settings) -> None:
    with Catalog.from_url(settings.catalog_url).session() as session:
        last = ledger.last_entry(session)
    written = Checkpoints.under(settings.checkpoint_folder, {}).read().checkpoints
    assert last.seq > 1 and (written[-1].seq, written[-1].hash) == (last.seq, last.hash)


@pytest.mark.parametrize(
    ("command", "code", "proven"),
    [
        (["read", "sales/products@9", "--as", "carol"], 4, True),  # allowed, then there is no such version
        (["read", "sales/products@9", "--as", "eve"], 3, True),
        (["read", "sales/products@9", "--as", "eve"], 3, False),  # refused: eve's password is not given
        (["access", "grant", "consumer", "sales/products", "eve", "--by", "alice"], 0, True),
        (["status", "sales/products@9", "critical", "--by", "bob"], 3, True),
    ],
)
def test_every_command_that_appends_ends_with_a_checkpoint_of_its_last_entry(quiet_ledger, command, code, proven):
    from governance.cli import run

    with given_password(named_password(command) if proven else None):
        assert run(command) == code
    assert_last_entry_checkpointed(quiet_ledger)


def test_the_python_api_ends_with_a_checkpoint_of_its_last_entry(quiet_ledger):
    from governance.api import Custody
    from governance.config import Settings

    with pytest.raises(AccessDenied):
        Custody(Settings.from_env()).open("sales/products@9", as_user="eve")
    assert_last_entry_checkpointed(quiet_ledger)
