"""Many hosts, one ledger and one lake: the places every host must share are settings, and a place
that is not a POSIX path is refused at start, naming its scheme."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from sqlmodel import select

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.models import LedgerSegmentRow
from governance.config import Settings
from governance.errors import InvalidInput

KEY = {"CUSTODY_LEDGER_KEY": "k3y", "CUSTODY_LEDGER_CHECKPOINT_EVERY": "2"}


@pytest.fixture
def shared(cli_env, tmp_path, monkeypatch) -> Path:
    """A checkpoint folder outside CUSTODY_HOME, as a mount every host shares."""
    folder = tmp_path / "shared" / "checkpoints"
    for name, value in {**KEY, "CUSTODY_LEDGER_CHECKPOINTS": str(folder)}.items():
        monkeypatch.setenv(name, value)
    return folder


def write_entries(settings: Settings, count: int) -> None:
    catalog = Catalog.from_settings(settings, {**KEY, "CUSTODY_LEDGER_CHECKPOINTS": str(settings.checkpoint_folder)})
    for i in range(count):
        with catalog.session() as session:
            ledger.append(session, actor="bob", action="read", asset="t/people", version=1, details={"i": i})
    catalog.checkpoint()


def another_host(cli_env, tmp_path, monkeypatch) -> None:
    """The same catalog seen from a host with its own CUSTODY_HOME."""
    monkeypatch.setenv("CUSTODY_HOME", str(tmp_path / "other-host"))


def test_checkpoints_go_to_the_shared_folder_and_verify_names_it(cli_env, shared, capsys):
    from governance.cli import run

    write_entries(Settings.from_env(), 4)
    assert (shared / "checkpoints.jsonl").is_file()
    assert not (cli_env.home / "ledger" / "checkpoints.jsonl").exists()
    assert run(["ledger", "verify", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["checkpoint_file"] == str(shared / "checkpoints.jsonl") and report["checkpoints"] == 3


def test_a_verifier_on_another_host_reads_the_same_checkpoints(cli_env, shared, tmp_path, monkeypatch, capsys):
    from governance.cli import run

    write_entries(Settings.from_env(), 4)
    another_host(cli_env, tmp_path, monkeypatch)
    assert run(["ledger", "verify"]) == 0
    assert "ledger ok: 4 entries, chain intact, 3 checkpoint(s) matched" in capsys.readouterr().out


def test_a_verifier_that_finds_no_checkpoints_where_the_catalog_has_entries_fails(
    cli_env, shared, tmp_path, monkeypatch, capsys
):
    from governance.cli import run

    write_entries(Settings.from_env(), 4)
    another_host(cli_env, tmp_path, monkeypatch)
    monkeypatch.delenv("CUSTODY_LEDGER_CHECKPOINTS")
    assert run(["ledger", "verify"]) == 1
    missing = tmp_path / "other-host" / "ledger" / "checkpoints.jsonl"
    assert f"error: checkpoints cannot be trusted: {missing} is missing" in capsys.readouterr().err


def test_segments_go_to_the_shared_folder(cli_env, tmp_path, monkeypatch, capsys):
    from governance.cli import run

    folder = tmp_path / "shared" / "segments"
    monkeypatch.setenv("CUSTODY_LEDGER_SEGMENTS", str(folder))
    write_entries(Settings.from_env(), 5)
    assert run(["ledger", "rollover", "--older-than", "0", "--json"]) == 0
    catalog = Catalog.from_settings(Settings.from_env(), {})
    with catalog.session() as session:
        [segment] = session.exec(select(LedgerSegmentRow))
    assert (folder / segment.path).is_file()


@pytest.mark.parametrize(
    ("variable", "scheme"),
    [("CUSTODY_LAKE", "gs"), ("CUSTODY_LEDGER_CHECKPOINTS", "s3a"), ("CUSTODY_LEDGER_SEGMENTS", "s3a")],
)
def test_an_object_store_uri_is_refused_naming_its_scheme(variable, scheme):
    with pytest.raises(
        InvalidInput, match=rf"^{variable}: the scheme {scheme}:// is not supported; give a POSIX path"
    ) as refused:
        Settings.from_env({variable: f"{scheme}://KEY:s3cret@bucket/lake"})
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize("secret", ["s3cret", "wJal/K7MDENG/bPxRfiCY"])
def test_a_lake_uri_holding_credentials_is_refused_without_them(secret):
    with pytest.raises(InvalidInput, match="^CUSTODY_LAKE: credentials may not be part of the URI") as refused:
        Settings.from_env({"CUSTODY_LAKE": f"s3a://AKIAEXAMPLE:{secret}@bucket/lake"})
    assert not any(part in str(refused.value) for part in ("AKIAEXAMPLE", *secret.split("/")))


def test_a_file_uri_names_a_folder(tmp_path):
    assert Settings.from_env({"CUSTODY_LAKE": f"file://{tmp_path}/lake"}).lake == tmp_path / "lake"
    with pytest.raises(InvalidInput, match="a file URI names an absolute path"):
        Settings.from_env({"CUSTODY_LAKE": "file://host/lake"})


def test_the_cli_refuses_a_lake_in_an_unsupported_store_in_one_line(cli_env, monkeypatch, capsys):
    from governance.cli import run

    monkeypatch.setenv("CUSTODY_LAKE", "gs://bucket/lake")
    assert run(["versions", "sales/clients"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the scheme gs:// is not supported" in err
    assert not (Path.cwd() / "gs:").exists()


def test_the_default_places_are_under_custody_home(tmp_path):
    settings = Settings.under(tmp_path)
    assert (settings.checkpoint_folder, settings.ledger_segments) == (
        tmp_path / "ledger",
        tmp_path / "ledger" / "segments",
    )
    assert replace(settings, ledger_checkpoints_at=tmp_path / "x").checkpoint_folder == tmp_path / "x"
