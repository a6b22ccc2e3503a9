"""Passwords of the file directory: the demo users log in, a user changes their own, an admin sets
anyone's, failed logins slow down, and the home keeps its own copy of the directory."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from governance.access.directory import FileDirectory
from governance.api import Custody
from governance.errors import AccessDenied, InvalidInput
from governance.runs import Assurance, os_user
from tests.helpers import cli, recorded

DEMO_DIRECTORY = Path("assets/directory.yaml")
DEMO_USERS = ("alice", "bob", "carol", "dave", "eve", "lineage-bot")


def logins(action: str = "authenticate") -> list[tuple[str, str, str]]:
    return [
        (e["actor"], e["assurance"], e["details"]["result"]) for e in recorded(action=action) if e["action"] == action
    ]


def set_password(capsys, monkeypatch, user: str, new: str, *args: str, proof: str | None = None):
    """`custody directory set-password USER ARGS`, the new password piped in, the proof in CUSTODY_PASSWORD."""
    monkeypatch.setattr("sys.stdin", io.StringIO(new + "\n"))
    return cli(capsys, "directory", "set-password", user, *args, password=proof)


def test_each_demo_user_logs_in_with_the_password_the_directory_documents(cli_env, capsys):
    custody = Custody(cli_env)
    for user in DEMO_USERS:
        assert custody.identity(user, f"{user}-demo").assurance is Assurance.VERIFIED
    assert logins() == [(user, "verified", "allowed") for user in DEMO_USERS]


def test_a_wrong_password_is_denied_and_recorded(cli_env, capsys):
    with pytest.raises(AccessDenied, match="alice: unknown user or wrong password"):
        Custody(cli_env).identity("alice", "bob-demo")
    with pytest.raises(AccessDenied, match="mallory: unknown user or wrong password"):
        Custody(cli_env).identity("mallory", "mallory-demo")
    assert logins() == [("alice", "none", "denied"), ("mallory", "none", "denied")]


def test_failed_logins_in_a_row_slow_down_and_the_user_gets_in_once_the_delay_has_passed(cli_env, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_LOGIN_DELAY_SECONDS", "0.2")
    custody = Custody(cli_env)
    refusals = []
    for _ in range(100):
        with pytest.raises(AccessDenied) as refused:
            custody.identity("bob", "guess-again")
        refusals.append(str(refused.value))
    assert "denied: bob: too many failed logins in a row; try again in 1 s" in refusals
    deadline = time.monotonic() + 30
    while True:
        try:
            assert custody.identity("bob", "bob-demo").assurance is Assurance.VERIFIED
            break
        except AccessDenied as err:
            assert "too many failed logins" in str(err) and time.monotonic() < deadline
            time.sleep(0.5)
    checked, delayed = logins(), logins("authenticate.delayed")
    assert checked[-1] == ("bob", "verified", "allowed") and set(checked[:-1]) == {("bob", "none", "denied")}
    assert 3 <= len(checked) - 1 <= 12 and len(checked) - 1 + len(delayed) >= 100  # every wrong one recorded
    assert set(delayed) == {("bob", "none", "denied")}


def test_a_user_changes_their_own_password_with_the_current_one(cli_env, capsys, monkeypatch):
    seed = DEMO_DIRECTORY.read_bytes()
    code, out, err = set_password(capsys, monkeypatch, "bob", "a-new-secret", proof="bob-demo")
    assert (code, out, err) == (0, "bob's password is set\n", "")
    custody = Custody(cli_env)
    assert custody.identity("bob", "a-new-secret").assurance is Assurance.VERIFIED
    with pytest.raises(AccessDenied):
        custody.identity("bob", "bob-demo")
    [copy] = (cli_env.home / "directory").glob("*.yaml")
    assert "a-new-secret" not in copy.read_text() and copy.stat().st_mode & 0o777 == 0o600
    assert DEMO_DIRECTORY.read_bytes() == seed
    assert [(e["action"], e["actor"], e["assurance"], e["details"]["user"]) for e in recorded(action="password")] == [
        ("password.set", "bob", "verified", "bob"),
        ("password.changed", "bob", "verified", "bob"),
    ]


def test_nobody_sets_another_user_s_password_without_being_a_verified_admin(cli_env, capsys, monkeypatch):
    code, _, err = set_password(capsys, monkeypatch, "bob", "taken-over", proof="eve-demo")
    assert code == 3 and "bob: unknown user or wrong password" in err
    code, _, err = set_password(capsys, monkeypatch, "bob", "taken-over", "--by", "eve", proof="eve-demo")
    assert code == 3 and "setting bob's password needs bob's current password, or a verified admin" in err
    assert "eve's identity is verified" in err
    code, _, err = set_password(capsys, monkeypatch, "bob", "taken-over", "--by", "alice")
    assert code == 3 and "alice's identity is asserted" in err
    code, _, err = set_password(capsys, monkeypatch, "bob", "taken-over")
    assert code == 3 and f"{os_user()}'s identity is system" in err
    assert Custody(cli_env).identity("bob", "bob-demo").assurance is Assurance.VERIFIED


def test_a_verified_admin_sets_anyone_s_password(cli_env, capsys, monkeypatch):
    code, out, _ = set_password(capsys, monkeypatch, "eve", "given-by-alice", "--by", "alice", proof="alice-demo")
    assert (code, out) == (0, "eve's password is set\n")
    assert Custody(cli_env).identity("eve", "given-by-alice").assurance is Assurance.VERIFIED


def test_a_directory_without_passwords_takes_its_first_from_whoever_runs_the_home(
    cli_env, capsys, monkeypatch, tmp_path
):
    seed = tmp_path / "people.yaml"
    seed.write_text("users: {alice: {}, bob: {}}\ngroups: {custody-admins: [alice], sales-owners: [alice]}\n")
    monkeypatch.setenv("CUSTODY_DIRECTORY", f"file:{seed}")
    assert set_password(capsys, monkeypatch, "alice", "first-secret")[0] == 0
    code, _, err = set_password(capsys, monkeypatch, "bob", "second-secret")
    assert code == 3 and f"{os_user()}'s identity is system" in err
    assert set_password(capsys, monkeypatch, "bob", "second-secret", "--by", "alice", proof="first-secret")[0] == 0
    assert [(e["actor"], e["assurance"], e["details"]["result"]) for e in recorded(action="password.set")] == [
        (os_user(), "system", "allowed"),
        (os_user(), "system", "denied"),
        ("alice", "verified", "allowed"),
    ]
    assert "password" not in seed.read_text()


def test_a_new_password_too_short_or_for_an_unknown_user_changes_nothing(cli_env, capsys, monkeypatch):
    code, _, err = set_password(capsys, monkeypatch, "bob", "short", proof="bob-demo")
    assert code == 1 and "the password for bob must have 8 to 1024 characters" in err
    code, _, err = set_password(capsys, monkeypatch, "zoe", "long-enough", "--by", "alice", proof="alice-demo")
    assert code == 4 and "no user 'zoe' in the directory" in err
    assert logins("password.set") == [] and logins("password.changed") == []
    assert Custody(cli_env).identity("bob", "bob-demo").assurance is Assurance.VERIFIED


def test_a_stored_password_that_is_not_an_argon2id_hash_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text("users:\n  alice: {password: hunter2}\ngroups: {}\n")
    with pytest.raises(InvalidInput, match=r"directory.yaml: users.alice.password: expected an argon2id hash"):
        FileDirectory.load(path)


def test_a_home_restored_elsewhere_keeps_its_passwords(cli_env, capsys, monkeypatch, tmp_path):
    assert set_password(capsys, monkeypatch, "carol", "carols-own", proof="carol-demo")[0] == 0
    restored = tmp_path / "restored"
    cli_env.home.rename(restored)
    monkeypatch.setenv("CUSTODY_HOME", str(restored))
    monkeypatch.setenv("CUSTODY_CATALOG_URL", f"sqlite:///{restored / 'catalog.db'}")
    custody = Custody.from_env()
    assert custody.identity("carol", "carols-own").assurance is Assurance.VERIFIED
