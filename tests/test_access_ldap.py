"""Access against a real OpenLDAP: verified identities, grants that change LDAP groups, a directory
that is down denying, and passwords that never reach logs, run config, the catalog or the ledger."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from assets.launch import instance_for
from governance.access.directory import open_directory
from governance.cli import run
from governance.demo import drop_demo_batches
from governance.zones import Lake
from tests.helpers import recorded
from tests.ldap_server import LdapServer, environment, password_of, populated_slapd
from tests.ports import refusing_port

CANARY = "canary-Bind-5ecret-7f3a"


@pytest.fixture(scope="module")
def ldap(tmp_path_factory) -> LdapServer:
    with populated_slapd(tmp_path_factory.mktemp("slapd"), CANARY) as server:
        yield server


@pytest.fixture
def ldap_env(cli_env, ldap, monkeypatch):
    """The CLI pointed at the LDAP server, the demo batches dropped."""
    for name, value in environment(ldap).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CUSTODY_PASSWORD", raising=False)
    drop_demo_batches(Lake(cli_env.lake))
    return cli_env


def cli(capsys, monkeypatch, *args, stdin: str | None = None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_password_checked_by_ldap_makes_a_verified_run(ldap_env, spark, capsys, monkeypatch):
    code, _, err = cli(
        capsys,
        monkeypatch,
        "ingest",
        "sales/products",
        "--as",
        "bob",
        "--password-stdin",
        stdin=password_of("bob") + "\n",
    )
    assert code == 0, err
    [login] = recorded(action="authenticate")
    at_submission, at_start = recorded(action="ingest")
    assert (login["actor"], login["assurance"], login["details"]["result"]) == ("bob", "verified", "allowed")
    assert at_submission["details"]["at"] == "submission" and "at" not in at_start["details"]
    for decision in (at_submission, at_start):
        assert (decision["assurance"], decision["details"]["result"], decision["run_id"]) == (
            "verified",
            "allowed",
            login["run_id"],
        )
    code, out, _ = cli(capsys, monkeypatch, "versions", "sales/products", "--json")
    assert json.loads(out)[0]["assurance"] == "verified"


def test_a_wrong_password_is_denied_recorded_and_launches_nothing(ldap_env, capsys, monkeypatch):
    code, _, err = cli(
        capsys, monkeypatch, "ingest", "sales/products", "--as", "bob", "--password-stdin", stdin="guess\n"
    )
    assert code == 3 and err.strip() == "error: denied: bob: unknown user or wrong password"
    [login] = recorded(action="authenticate")
    assert (login["actor"], login["assurance"], login["details"]["result"]) == ("bob", "none", "denied")
    assert instance_for(ldap_env).get_runs() == []


def test_acting_as_another_user_needs_their_password_which_an_ldap_bind_checks(ldap_env, spark, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_REQUIRE_VERIFIED", "internal")
    code, _, err = cli(capsys, monkeypatch, "ingest", "sales/products", "--as", "bob")
    assert code == 3 and "acting as bob needs bob's password" in err
    monkeypatch.setenv("CUSTODY_PASSWORD", password_of("bob"))
    code, _, err = cli(capsys, monkeypatch, "ingest", "sales/products", "--as", "bob")
    assert code == 0, err


def test_a_grant_adds_the_user_to_the_ldap_group_and_a_revoke_removes_them(ldap_env, ldap, capsys, monkeypatch):
    directory = open_directory(ldap.url, environment(ldap))
    code, out, _ = cli(
        capsys,
        monkeypatch,
        "access",
        "grant",
        "producer",
        "sales/products",
        "eve",
        "--by",
        "alice",
        "--password-stdin",
        stdin=password_of("alice"),
    )
    assert code == 0 and "eve added to sales-producers" in out
    assert directory.groups_of("eve") == {"sales-producers"}
    code, out, _ = cli(
        capsys,
        monkeypatch,
        *("access", "revoke", "producer", "sales/products", "eve", "--by", "alice", "--password-stdin"),
        stdin=password_of("alice"),
    )
    assert code == 0 and "eve removed from sales-producers" in out
    assert open_directory(ldap.url, environment(ldap)).groups_of("eve") == frozenset()


def test_access_show_resolves_nested_ldap_groups(ldap_env, capsys, monkeypatch):
    code, out, _ = cli(capsys, monkeypatch, "access", "show", "sales/products", "--json")
    consumer = next(r for r in json.loads(out)["roles"] if r["role"] == "consumer")
    assert code == 0 and consumer["members"] == ["carol", "dave"]


def test_a_directory_that_is_down_denies_reads_and_runs(ldap_env, spark, capsys, monkeypatch):
    with refusing_port() as port:
        monkeypatch.setenv("CUSTODY_DIRECTORY", f"ldap://127.0.0.1:{port}")
        # Asked by the OS user running the tests, whom no password proves: the directory is asked for groups only.
        code, _, err = cli(capsys, monkeypatch, "read", "sales/products")
        assert code == 3 and "could not be asked, so access is denied" in err
        code, _, err = cli(capsys, monkeypatch, "ingest", "sales/products")
        assert code == 3 and f"error: denied: directory ldap://127.0.0.1:{port}" in err
        assert instance_for(ldap_env).get_runs() == []
        decided = [e for e in recorded() if e["action"] in ("read", "ingest")]
        assert [e["details"]["result"] for e in decided] == ["denied", "denied"]


def test_no_password_reaches_logs_run_config_catalog_or_ledger(ldap_env, ldap, spark, capsys, monkeypatch):
    said = []
    for args, stdin in [
        (("ingest", "sales/products", "--as", "bob", "--password-stdin"), password_of("bob")),
        (("ingest", "sales/products", "--as", "bob", "--password-stdin"), "wrong-" + password_of("bob")),
        (("read", "sales/products", "--as", "carol", "--password-stdin"), password_of("carol")),
        (
            ("access", "grant", "consumer", "sales/products", "eve", "--by", "alice", "--password-stdin"),
            password_of("alice"),
        ),
        (("access", "show", "sales/products"), None),
    ]:
        said.append(cli(capsys, monkeypatch, *args, stdin=stdin))
    monkeypatch.setenv("CUSTODY_LDAP_BIND_PASSWORD", "wrong-" + CANARY)
    said.append(cli(capsys, monkeypatch, "read", "sales/products"))
    said.append(cli(capsys, monkeypatch, "--verbose", "ingest", "sales/products"))
    assert [code for code, _, _ in said] == [0, 3, 0, 0, 0, 3, 3]

    secrets = [CANARY, password_of("bob"), password_of("carol"), password_of("alice")]
    text = "".join(out + err for _, out, err in said)
    runs = instance_for(ldap_env).get_runs()
    text += "".join(json.dumps(r.run_config) + json.dumps(r.tags) for r in runs)
    stored = b"".join(path.read_bytes() for path in Path(ldap_env.home).rglob("*") if path.is_file())
    # The search covers what was written: the ledger's denials are in it.
    assert b"unknown user or wrong password" in stored and b"could not be asked, so access is denied" in stored
    assert (
        len(runs) == 1
    )  # the wrong user password stopped its run before launch, the directory's refusal at submission
    for secret in secrets:
        assert secret not in text
        assert secret.encode() not in stored


def test_changing_a_policy_setting_needs_a_verified_identity_when_the_directory_checks_passwords(
    ldap_env, capsys, monkeypatch
):
    args = ("settings", "set", "require_verified", "restricted,confidential", "--by", "alice")
    code, _, err = cli(capsys, monkeypatch, *args)
    assert code == 3 and "acting as alice needs alice's password" in err
    code, out, _ = cli(capsys, monkeypatch, *args, "--password-stdin", stdin=password_of("alice"))
    assert code == 0 and "require_verified: restricted -> confidential,restricted (by alice)" in out
    changed = recorded(action="settings.changed")
    assert [(e["actor"], e["assurance"]) for e in changed] == [("alice", "verified")]


def test_a_directory_other_than_the_pinned_one_is_refused(ldap_env, capsys, monkeypatch):
    assert cli(capsys, monkeypatch, "access", "show", "sales/products")[0] == 0
    monkeypatch.setenv("CUSTODY_DIRECTORY", "file:assets/directory.yaml")
    code, _, err = cli(capsys, monkeypatch, "access", "show", "sales/products")
    assert code == 3 and "disagrees with the directory pinned in the catalog (ldap://" in err


def test_an_ldap_base_dn_other_than_the_pinned_one_is_refused(ldap_env, capsys, monkeypatch):
    """Someone who may create groups in another subtree could otherwise point the search there."""
    assert cli(capsys, monkeypatch, "access", "show", "sales/products")[0] == 0
    monkeypatch.setenv("CUSTODY_LDAP_BASE_DN", "ou=theirs,dc=custody,dc=test")
    code, _, err = cli(capsys, monkeypatch, "access", "show", "sales/products")
    assert (
        code == 3 and "CUSTODY_LDAP_BASE_DN=ou=theirs,dc=custody,dc=test disagrees with the ldap_base_dn pinned" in err
    )


def test_a_password_check_names_the_directory_that_answered(ldap_env, ldap, capsys, monkeypatch):
    assert (
        cli(
            capsys,
            monkeypatch,
            "access",
            "check",
            "sales/products",
            "--as",
            "carol",
            "--password-stdin",
            stdin=password_of("carol"),
        )[0]
        == 0
    )
    [checked] = recorded(action="authenticate")
    assert checked["details"]["result"] == "allowed" and checked["details"]["directory"] == ldap.url
