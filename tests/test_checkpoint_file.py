"""The checkpoint file is tamper-evident itself: each line carries its number and the sha256 of the
line before, the first names the ledger it belongs to, and the catalog keeps the file's head (its
line count, last line and size, signed with CUSTODY_LEDGER_KEY). A missing, emptied, cut, swapped or
edited file is named, and never appended to; without the key, verify says that the checkpoints are
not verified."""

from __future__ import annotations

import hashlib
import hmac
import json
import os

import pytest
from sqlmodel import col, select

from governance import ledger
from governance.catalog import Catalog, closing_checkpoint, make_engine
from governance.catalog.models import LedgerEntry
from governance.checkpoints import Checkpoints
from governance.cli import run
from governance.errors import IntegrityError
from governance.ingest import ingest
from governance.runs import RunRequest
from governance.zones import AssetKey, Lake
from tests.conftest import DATA, drop
from tests.helpers import execute, verify_ledger

pytestmark = pytest.mark.both_backends

KEY = "k3y-for-the-tests"
ENTRIES, EVERY = 12, 4
NOT_VERIFIED = "checkpoints are not verified: CUSTODY_LEDGER_KEY is not set"


def keyed(settings, key: str | None = KEY) -> Checkpoints:
    return Checkpoints(
        settings.home / "ledger" / "checkpoints.jsonl", key=key.encode() if key else None, every=EVERY, seconds=3600
    )


@pytest.fixture
def signed(settings) -> Catalog:
    """ENTRIES entries, one per transaction, checkpointed at the first and every EVERY: signed."""
    catalog = Catalog(make_engine(settings.catalog_url), keyed(settings))
    for i in range(ENTRIES):
        append(catalog, i)
    return catalog


def append(catalog: Catalog, i: int) -> None:
    with catalog.session() as session:
        ledger.append(session, actor="bob", action="read", asset="t/people", details={"i": i})


def lines(catalog: Catalog) -> list[bytes]:
    return catalog.checkpoints.path.read_bytes().splitlines(keepends=True)


def keep_lines(catalog: Catalog, count: int) -> None:
    catalog.checkpoints.path.write_bytes(b"".join(lines(catalog)[:count]))


def head(catalog: Catalog) -> tuple:
    with catalog.session() as session:
        return tuple(
            session.connection()
            .exec_driver_sql("SELECT ledger_id, lines, last_line, mac, file_bytes FROM ledger_head")
            .one()
        )


def set_head(catalog: Catalog, row: tuple) -> None:
    execute(
        catalog,
        f"UPDATE ledger_head SET ledger_id = '{row[0]}', lines = {row[1]}, last_line = '{row[2]}', "
        f"mac = {'NULL' if row[3] is None else repr(row[3])}, file_bytes = {'NULL' if row[4] is None else row[4]}",
    )


def rehash_from(catalog: Catalog, seq: int) -> None:
    """What someone who can write the catalog does to hide an edit: recompute every hash after it."""
    with catalog.session() as session:
        rows = list(session.exec(select(LedgerEntry).where(LedgerEntry.seq >= seq - 1).order_by(col(LedgerEntry.seq))))
        prev = rows[0].hash
        for row in rows[1:]:
            row.prev_hash = prev
            row.hash = prev = ledger.entry_hash(prev, row)
            session.add(row)


def edit_and_rehash(catalog: Catalog, seq: int) -> None:
    execute(catalog, f"UPDATE ledger SET details = '{{\"i\":-1}}' WHERE seq = {seq}")
    rehash_from(catalog, seq)


def entry_hash(catalog: Catalog, seq: int) -> str:
    with catalog.session() as session:
        return session.get(LedgerEntry, seq).hash


def forge_line(catalog: Catalog, **body: object) -> None:
    """A line written without the key: numbered and linked as a real one is, but not signed."""
    before = lines(catalog)
    line = {
        "n": len(before) + 1,
        "prev": hashlib.sha256(before[-1]).hexdigest(),
        "ts": "2026-01-01T00:00:00.000000Z",
        **body,
    }
    with catalog.checkpoints.path.open("ab") as out:
        out.write((json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n").encode())


def follow_with_head(catalog: Catalog) -> None:
    """The head an attacker without the key writes for the file as it now is."""
    now = lines(catalog)
    size = catalog.checkpoints.path.stat().st_size
    set_head(catalog, (head(catalog)[0], len(now), hashlib.sha256(now[-1]).hexdigest(), None, size))


def test_the_file_is_numbered_linked_and_begins_with_the_ledger_it_belongs_to(signed):
    written = [json.loads(line) for line in lines(signed)]
    assert [line["n"] for line in written] == [1, 2, 3, 4, 5]
    assert written[0]["kind"] == "genesis" and written[0]["ledger"] == head(signed)[0]
    assert [line["seq"] for line in written[1:]] == [1, 4, 8, 12]
    assert all(
        line["prev"] == hashlib.sha256(before).hexdigest()
        for before, line in zip(lines(signed), written[1:], strict=False)
    )
    assert head(signed)[1:3] == (5, hashlib.sha256(lines(signed)[-1]).hexdigest())
    result = verify_ledger(signed)
    assert result.ok and result.checkpoints_verified and result.checkpoints == 4


def test_a_deleted_file_with_the_chain_recomputed_after_an_edit_fails(signed):
    edit_and_rehash(signed, 6)
    signed.checkpoints.path.unlink()
    result = verify_ledger(signed)
    assert not result.ok and result.problems[0] == (
        f"{signed.checkpoints.path} is missing: the catalog recorded 5 checkpoint line(s)"
    )


def test_no_checkpoint_is_written_over_a_file_the_catalog_does_not_recognise(signed):
    signed.checkpoints.path.unlink()
    with pytest.raises(IntegrityError, match="does not write over a checkpoint file the catalog does not recognise"):
        signed.checkpoint()
    assert not signed.checkpoints.path.exists() and not verify_ledger(signed).ok


def test_an_emptied_file_fails(signed):
    signed.checkpoints.path.write_bytes(b"")
    result = verify_ledger(signed)
    assert (
        not result.ok
        and result.problems[0] == f"{signed.checkpoints.path} is empty: the catalog recorded 5 checkpoint line(s)"
    )


def test_a_file_cut_at_its_tail_is_named_with_the_count_the_catalog_recorded(signed):
    keep_lines(signed, 3)
    result = verify_ledger(signed)
    assert not result.ok and result.problems[0] == (
        f"{signed.checkpoints.path} holds 3 line(s), but the catalog recorded 5: its tail was cut"
    )


def test_a_line_removed_from_the_middle_is_named(signed):
    kept = lines(signed)
    signed.checkpoints.path.write_bytes(b"".join(kept[:2] + kept[3:]))
    problems = verify_ledger(signed).problems
    assert problems[0].startswith(f"{signed.checkpoints.path}:3: the checkpoint of entry 8: it says it is line 4")


def test_no_checkpoint_is_appended_to_a_file_a_middle_line_was_removed_from(signed):
    kept = lines(signed)
    signed.checkpoints.path.write_bytes(b"".join(kept[:2] + kept[3:]))
    append(signed, ENTRIES)
    tampered = signed.checkpoints.path.read_bytes()

    with pytest.raises(IntegrityError, match="does not write over a checkpoint file the catalog does not recognise"):
        signed.checkpoint()

    assert signed.checkpoints.path.read_bytes() == tampered


def test_no_checkpoint_is_appended_to_a_file_whose_chain_is_broken_before_its_last_line(signed):
    kept = lines(signed)
    edited = json.loads(kept[2])
    edited["seq"] = 3
    signed.checkpoints.path.write_bytes(b"".join(kept[:2] + [json.dumps(edited).encode() + b"\n"] + kept[3:]))
    append(signed, ENTRIES)
    tampered = signed.checkpoints.path.read_bytes()

    with pytest.raises(IntegrityError, match=f"cannot checkpoint the ledger: {signed.checkpoints.path}:3: "):
        signed.checkpoint()

    assert signed.checkpoints.path.read_bytes() == tampered


def test_cutting_the_ledger_and_the_file_at_their_tails_together_fails(signed):
    execute(signed, "DELETE FROM ledger WHERE seq > 8")
    keep_lines(signed, 4)  # the genesis and the checkpoints of 1, 4 and 8
    result = verify_ledger(signed)
    assert not result.ok and "holds 4 line(s), but the catalog recorded 5: its tail was cut" in result.problems[0]


def test_a_cut_backed_by_a_copy_of_the_head_taken_before_passes_as_the_threat_model_says(settings):
    catalog = Catalog(make_engine(settings.catalog_url), keyed(settings))
    for i in range(8):
        append(catalog, i)
    copied = head(catalog)
    for i in range(8, ENTRIES):
        append(catalog, i)
    execute(catalog, "DELETE FROM ledger WHERE seq > 8")
    keep_lines(catalog, copied[1])
    set_head(catalog, copied)
    assert verify_ledger(catalog).ok


def test_a_file_swapped_in_from_another_ledger_is_named(signed, settings, tmp_path):
    other = Catalog(
        make_engine(f"sqlite:///{tmp_path / 'other.db'}"),
        Checkpoints(tmp_path / "other.jsonl", key=KEY.encode(), every=EVERY, seconds=3600),
    )
    for i in range(ENTRIES):
        append(other, i)
    signed.checkpoints.path.write_bytes(other.checkpoints.path.read_bytes())
    problems = verify_ledger(signed).problems
    assert (
        f"{signed.checkpoints.path} belongs to ledger {head(other)[0]}, not to this catalog's ledger {head(signed)[0]}"
        in problems
    )


def test_a_deleted_head_record_is_named(signed):
    execute(signed, "DELETE FROM ledger_head")
    problems = verify_ledger(signed).problems
    assert problems and "the catalog keeps no record of" in problems[0]


def test_wiping_the_head_and_the_file_then_letting_custody_write_again_is_named(signed):
    edit_and_rehash(signed, 6)
    execute(signed, "DELETE FROM ledger_head")
    signed.checkpoints.path.unlink()
    append(signed, 99)  # Custody starts a new file: all it can pin is the chain as it now is
    problems = verify_ledger(signed).problems
    assert problems and f"{signed.checkpoints.path} begins at entry 13, but the ledger began before it" in problems[0]


def test_an_unsigned_line_names_the_entry_it_claims(signed):
    forge_line(signed, kind="checkpoint", seq=12, hash=entry_hash(signed, 12))
    result = verify_ledger(signed)
    assert not result.ok and result.problems == (
        f"{signed.checkpoints.path}:6: the checkpoint of entry 12: not signed, though CUSTODY_LEDGER_KEY is set",
    )


def test_an_edited_head_is_named_with_the_key(signed):
    forge_line(signed, kind="checkpoint", seq=12, hash=entry_hash(signed, 12))
    follow_with_head(signed)
    problems = verify_ledger(signed).problems
    assert (
        f"the catalog's record of {signed.checkpoints.path} is not signed, though CUSTODY_LEDGER_KEY is set" in problems
    )


def test_a_crash_between_the_file_line_and_the_head_still_verifies(signed):
    before = head(signed)
    for i in range(ENTRIES, ENTRIES + EVERY):
        append(signed, i)  # the last one writes a checkpoint line, then the head
    set_head(signed, before)  # as if the process died between the two
    assert len(lines(signed)) == before[1] + 1 and verify_ledger(signed).ok
    for i in range(ENTRIES + EVERY, ENTRIES + 2 * EVERY):
        append(signed, i)
    assert head(signed)[1] == before[1] + 2 and verify_ledger(signed).ok


def test_a_file_of_the_earlier_format_still_verifies_and_continues_in_the_new_one(settings):
    catalog = Catalog(make_engine(settings.catalog_url))
    for i in range(10):
        append(catalog, i)
    execute(catalog, "DROP TABLE ledger_head")  # a catalog of the earlier release
    catalog = Catalog(make_engine(settings.catalog_url), keyed(settings))
    legacy = [legacy_line(seq, entry_hash(catalog, seq)) for seq in (5, 10)]
    catalog.checkpoints.path.parent.mkdir(parents=True)
    catalog.checkpoints.path.write_bytes(b"".join(legacy))
    assert verify_ledger(catalog).ok and verify_ledger(catalog).checkpoints == 2
    append(catalog, 10)
    catalog.checkpoint()
    written = lines(catalog)
    assert written[:2] == legacy and json.loads(written[2])["prev"] == hashlib.sha256(b"".join(legacy)).hexdigest()
    assert verify_ledger(catalog).ok and verify_ledger(catalog).checkpoints == 3
    catalog.checkpoints.path.write_bytes(b"".join(written[1:]))
    assert not verify_ledger(catalog).ok


def legacy_line(seq: int, entry: str) -> bytes:
    """A checkpoint as the earlier release wrote it: its own fields and a signature over them."""
    ts = "2026-01-01T00:00:00.000000Z"
    mac = hmac.new(KEY.encode(), f"{seq}\n{entry}\n{ts}".encode(), hashlib.sha256).hexdigest()
    return (
        json.dumps({"hash": entry, "mac": mac, "seq": seq, "ts": ts}, sort_keys=True, separators=(",", ":")) + "\n"
    ).encode()


@pytest.fixture
def aged_off_forged(cli_env, monkeypatch, request):
    """The first five entries deleted, and an aged-off record naming entry 5 added without the key.
    The honest writers had the key when the fixture's parameter says so."""
    key = request.param
    if key:
        monkeypatch.setenv("CUSTODY_LEDGER_KEY", key)
    catalog = Catalog.from_settings(cli_env, os.environ)
    for i in range(ENTRIES):
        append(catalog, i)
    catalog.checkpoint()
    fifth = entry_hash(catalog, 5)
    execute(catalog, "DELETE FROM ledger WHERE seq <= 5")
    forge_line(catalog, kind="aged_off", seq=5, hash=fifth)
    follow_with_head(catalog)
    return catalog


@pytest.mark.parametrize("aged_off_forged", [None], indirect=True)
def test_without_the_key_verify_says_the_checkpoints_are_not_verified_and_exits_5(aged_off_forged, capsys):
    assert run(["ledger", "verify"]) == 5
    out, err = capsys.readouterr()
    assert "ledger ok" not in out and "chain intact" in out and NOT_VERIFIED in out + err
    assert run(["ledger", "verify", "--json"]) == 5
    report = json.loads(capsys.readouterr().out)
    assert report["checkpoints_verified"] is False and report["entries"] == ENTRIES - 5


@pytest.mark.parametrize("aged_off_forged", [KEY], indirect=True)
def test_with_the_key_a_forged_aged_off_record_fails_naming_the_entry_it_claims(aged_off_forged, capsys):
    assert run(["ledger", "verify"]) == 1
    err = capsys.readouterr().err
    [error] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "the aged-off record of entry 5: not signed, though CUSTODY_LEDGER_KEY is set" in error


def test_with_the_key_an_intact_ledger_verifies_with_exit_0(cli_env, monkeypatch, capsys):
    monkeypatch.setenv("CUSTODY_LEDGER_KEY", KEY)
    catalog = Catalog.from_settings(cli_env, os.environ)
    for i in range(ENTRIES):
        append(catalog, i)
    catalog.checkpoint()
    assert run(["ledger", "verify", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["checkpoints_verified"] is True


def test_a_checkpoint_that_cannot_be_written_never_undoes_what_its_transaction_committed(settings, spark, test_specs):
    """The ingestion's commit brings the ledger to entry EVERY, so a checkpoint is due; the file was
    cut, so it cannot be written. The version stays whole in the catalog and the lake, and the
    failure is raised where the next work begins."""
    catalog = Catalog(make_engine(settings.catalog_url), keyed(settings))
    lake = Lake(settings.lake)
    append(catalog, 0)
    keep_lines(catalog, 1)
    drop(lake, "t/people", "b1", {"p.csv": (DATA / "batches/csv/good.csv").read_bytes()})
    version = ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], RunRequest("bob"), batch_id="b1")
    assert lake.at(version.path).is_dir() and lake.read_manifest(lake.at(version.path))["version"] == 1
    with pytest.raises(IntegrityError, match="does not write over a checkpoint file the catalog does not recognise"):
        catalog.versions(AssetKey.parse("t/people"))
    assert [v.number for v in Catalog(catalog.engine).versions(AssetKey.parse("t/people"))] == [1]


def test_a_checkpoint_that_could_not_be_written_fails_the_command_that_made_it_due(settings):
    catalog = Catalog(make_engine(settings.catalog_url), keyed(settings))
    for i in range(EVERY - 1):
        append(catalog, i)
    keep_lines(catalog, 1)
    refused = pytest.raises(
        IntegrityError, match="does not write over a checkpoint file the catalog does not recognise"
    )
    with refused, closing_checkpoint():
        append(catalog, EVERY)  # the ledger's entry EVERY: a checkpoint is due, and cannot be written
