"""The directory: group membership from a YAML file or a real OpenLDAP server, nested groups
resolved, names that could widen a lookup refused, and a directory that cannot be asked failing closed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from governance.access.directory import FileDirectory, LdapDirectory, LdapSettings, open_directory
from governance.cli import run
from governance.errors import DirectoryUnavailable, InvalidInput, InvalidName, NotFound
from tests.helpers import alias_bomb
from tests.ldap_server import LdapServer, admin, make_ca, password_of, populated_slapd
from tests.ports import echo_server, refusing_port

CANARY = "canary-b1nd-Pa55w0rd"
INJECTIONS = [
    "*",
    "*)(uid=*",
    ")(|(cn=*",
    "alice)(|(uid=*)",
    "\\",
    "ali\x00ce",
    "alicé",
    "",
    "a" * 65,
    "alice,ou=people",
]


@pytest.fixture(scope="module")
def ldap(tmp_path_factory) -> LdapServer:
    with populated_slapd(tmp_path_factory.mktemp("slapd"), CANARY) as server:
        yield server


def settings(server: LdapServer, **changes) -> LdapSettings:
    base = LdapSettings(
        url=server.url,
        base_dn=server.base_dn,
        bind_dn=server.bind_dn,
        password=server.password,
        ca_file=str(server.ca_file),
    )
    return dataclasses.replace(base, **changes)


def test_ldap_gives_a_user_s_groups(ldap):
    directory = LdapDirectory(settings(ldap))
    assert directory.groups_of("alice") == {"sales-owners", "custody-admins"}
    assert directory.groups_of("eve") == frozenset()
    assert directory.groups_of("nobody") == frozenset()


def test_ldap_resolves_nested_groups(ldap):
    assert LdapDirectory(settings(ldap)).groups_of("dave") == {"auditors", "sales-consumers"}


@pytest.mark.parametrize("name", INJECTIONS)
def test_ldap_refuses_names_that_could_widen_a_lookup(ldap, name):
    with pytest.raises(InvalidName, match="invalid user name"):
        LdapDirectory(settings(ldap)).groups_of(name)


def test_ldap_with_another_ca_fails_closed_without_the_password(ldap, tmp_path):
    other_ca, _, _ = make_ca(tmp_path / "other")
    with pytest.raises(DirectoryUnavailable, match="could not be asked, so access is denied") as caught:
        LdapDirectory(settings(ldap, ca_file=str(other_ca))).groups_of("alice")
    assert CANARY not in str(caught.value) and CANARY not in repr(caught.value.__cause__)


def test_ldap_with_a_name_the_certificate_does_not_hold_fails(ldap):
    with pytest.raises(DirectoryUnavailable):
        LdapDirectory(settings(ldap, url=ldap.url.replace("localhost", "127.0.0.1"))).groups_of("alice")


def test_a_directory_that_is_down_means_denied(ldap):
    with refusing_port() as port, pytest.raises(DirectoryUnavailable, match="could not be asked"):
        LdapDirectory(settings(ldap, url=f"ldap://127.0.0.1:{port}", timeout_seconds=1)).groups_of("alice")


def test_a_directory_that_answers_other_than_ldap_means_denied(ldap):
    with echo_server() as echo, pytest.raises(DirectoryUnavailable, match="could not be asked.*answer is not LDAP"):
        LdapDirectory(settings(ldap, url=f"ldap://127.0.0.1:{echo.port}", timeout_seconds=1)).groups_of("alice")


def test_a_connection_to_a_directory_that_answers_other_than_ldap_is_closed(ldap):
    with echo_server() as echo:
        with pytest.raises(DirectoryUnavailable):
            LdapDirectory(settings(ldap, url=f"ldap://127.0.0.1:{echo.port}", timeout_seconds=1)).groups_of("alice")
        assert echo.hung_up.wait(timeout=5)


def test_a_wrong_bind_password_means_denied_and_is_not_repeated(ldap):
    with pytest.raises(DirectoryUnavailable) as caught:
        LdapDirectory(settings(ldap, password="wrong-" + CANARY)).groups_of("alice")
    assert CANARY not in str(caught.value)


def test_cleartext_ldap_is_refused(ldap):
    with pytest.raises(InvalidInput, match="cleartext LDAP is refused"):
        LdapDirectory(settings(ldap, starttls=False))


def test_the_password_is_never_shown(ldap):
    directory = LdapDirectory(settings(ldap))
    assert CANARY not in repr(directory) and CANARY not in repr(directory.settings)


def test_memberships_are_cached_for_the_ttl(ldap):
    cached, fresh = LdapDirectory(settings(ldap, ttl_seconds=60)), LdapDirectory(settings(ldap, ttl_seconds=0))
    assert cached.groups_of("eve") == fresh.groups_of("eve") == frozenset()
    connection = admin(ldap)
    group = f"cn=sales-producers,ou=groups,{ldap.base_dn}"
    eve = f"uid=eve,ou=people,{ldap.base_dn}"
    from ldap3 import MODIFY_ADD, MODIFY_DELETE

    connection.modify(group, {"member": [(MODIFY_ADD, [eve])]})
    try:
        assert cached.groups_of("eve") == frozenset()
        assert fresh.groups_of("eve") == {"sales-producers"}
    finally:
        connection.modify(group, {"member": [(MODIFY_DELETE, [eve])]})
        connection.unbind()


def test_ldap_answers_at_once_only_for_a_user_whose_groups_it_holds_fresh(ldap):
    cached, fresh = LdapDirectory(settings(ldap, ttl_seconds=60)), LdapDirectory(settings(ldap, ttl_seconds=0))
    assert not cached.answers_at_once("carol")
    cached.groups_of("carol")
    fresh.groups_of("carol")
    assert cached.answers_at_once("carol")
    assert not cached.answers_at_once("dave")
    assert not fresh.answers_at_once("carol")


def test_open_directory_reads_ldap_settings_from_the_environment(ldap):
    environ = {
        "CUSTODY_LDAP_BASE_DN": ldap.base_dn,
        "CUSTODY_LDAP_BIND_DN": ldap.bind_dn,
        "CUSTODY_LDAP_BIND_PASSWORD": ldap.password,
        "CUSTODY_LDAP_CA_FILE": str(ldap.ca_file),
    }
    assert open_directory(ldap.url, environ).groups_of("bob") == {"sales-producers"}
    with pytest.raises(InvalidInput, match="needs CUSTODY_LDAP_BIND_PASSWORD"):
        open_directory(ldap.url, {k: v for k, v in environ.items() if k != "CUSTODY_LDAP_BIND_PASSWORD"})


def test_the_file_directory_gives_groups_and_resolves_nesting(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text("users: {alice: {}, dave: {}}\ngroups:\n  auditors: [dave]\n  readers: [auditors, alice]\n")
    directory = open_directory(f"file:{path}", {"CUSTODY_HOME": str(tmp_path / "home")})
    assert directory.groups_of("dave") == {"auditors", "readers"}
    assert directory.groups_of("alice") == {"readers"}
    assert directory.groups_of("zoe") == frozenset()


@pytest.mark.parametrize("name", INJECTIONS)
def test_the_file_directory_refuses_bad_names_too(name):
    with pytest.raises(InvalidName):
        FileDirectory.load(Path("assets/directory.yaml")).groups_of(name)


def test_a_file_directory_naming_an_unknown_member_is_refused_with_the_file(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text("users: {alice: {}}\ngroups:\n  owners: [alice, mallory]\n")
    with pytest.raises(InvalidInput, match=r"directory.yaml: groups.owners: 'mallory' is neither a user nor a group"):
        open_directory(f"file:{path}", {"CUSTODY_HOME": str(tmp_path / "home")})


NOT_A_DIRECTORY = "expected `users:` and `groups:` mappings"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(
            "root:x:0:0:root:/root:/bin/bash\nbin:x:2:2:bin:/bin:/usr/sbin/nologin\n", NOT_A_DIRECTORY, id="passwd"
        ),
        pytest.param("- alice\n- bob\n", NOT_A_DIRECTORY, id="list"),
        pytest.param("alice\n", NOT_A_DIRECTORY, id="scalar"),
        pytest.param("users: [alice]\ngroups: {owners: [alice]}\n", NOT_A_DIRECTORY, id="users-list"),
        pytest.param("users: {alice: {}}\ngroups: [alice]\n", NOT_A_DIRECTORY, id="groups-list"),
        pytest.param(
            "users: {alice: {}}\ngroups:\n  owners: [alice, {name: bob}]\n",
            "groups.owners: expected names of users and groups, found {'name': 'bob'}",
            id="member-mapping",
        ),
        pytest.param(
            "users: {alice: {}}\ngroups:\n  owners: [alice, ~]\n",
            "groups.owners: expected names of users and groups, found None",
            id="member-null",
        ),
        pytest.param(
            "users: {alice: {}}\ngroups:\n  the owners: [alice]\n",
            "groups: invalid group name 'the owners': use letters, digits, '.', '_' or '-' (at most 64)",
            id="group-name",
        ),
        pytest.param(
            "users: {alice: {}}\ngroups:\n  owners: [alice\n",
            "not valid YAML: line 4: did not find expected ',' or ']'",
            id="syntax",
        ),
        pytest.param(
            "users: {alice: {}}\n" + alias_bomb("groups"),
            "line 4: YAML aliases (*name) are not accepted: write the value out",
            id="aliases",
        ),
        pytest.param(
            "users: {caf\xe9: {}}\n",
            "cannot read the directory file: 'utf-8' codec can't decode byte "
            "0xe9 in position 11: invalid continuation byte",
            id="not-utf8",
        ),
    ],
)
def test_a_file_that_is_not_a_directory_is_refused_in_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "directory.yaml"
    path.write_text(content, encoding="latin-1")  # the same bytes as UTF-8, but for the one case that is not
    with pytest.raises(InvalidInput) as raised:
        open_directory(f"file:{path}", {"CUSTODY_HOME": str(tmp_path / "home")})
    assert str(raised.value) == f"{path}: {message}"


def test_the_cli_names_a_directory_file_it_cannot_use_in_one_line(cli_env, monkeypatch, capsys):
    monkeypatch.setenv("CUSTODY_DIRECTORY", "file:/etc/passwd")
    assert run(["access", "show", "sales/clients"]) == 1
    assert capsys.readouterr().err == f"error: /etc/passwd: {NOT_A_DIRECTORY}\n"


def test_the_demo_directory_loads(tmp_path):
    directory = open_directory("file:assets/directory.yaml", {"CUSTODY_HOME": str(tmp_path)})
    assert directory.groups_of("alice") == {"sales-owners", "custody-admins"}


def test_ldap_lists_a_group_s_members_through_nested_groups(ldap):
    directory = LdapDirectory(settings(ldap))
    assert directory.members_of("sales-consumers") == {"carol", "dave"}
    assert directory.members_of("no-such-group") == frozenset()


def test_ldap_says_which_groups_it_has(ldap):
    directory = LdapDirectory(settings(ldap))
    assert directory.has_group("sales-consumers") and directory.has_group("auditors")
    assert not directory.has_group("sales-consumrs")
    with pytest.raises(InvalidName, match="invalid group name"):
        directory.has_group("*")


def test_ldap_says_which_users_it_has_in_groups_or_none_and_by_their_exact_name(ldap):
    directory = LdapDirectory(settings(ldap))
    assert directory.has_user("carol") and directory.has_user("eve")
    assert not directory.has_user("mallory") and not directory.has_user("CAROL")


def test_the_file_directory_has_a_user_in_no_group_and_not_one_only_named_in_a_group(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text("users: {alice: {}, bob: {}}\ngroups:\n  readers: [alice]\n  admins: [readers]\n")
    directory = open_directory(f"file:{path}", {"CUSTODY_HOME": str(tmp_path / "home")})
    assert directory.has_user("alice") and directory.has_user("bob")
    assert not directory.has_user("readers") and not directory.has_user("carol")


def test_the_file_directory_has_a_group_without_members_and_not_a_misspelt_one(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text("users: {alice: {}}\ngroups:\n  readers: [alice]\n  empty: []\n")
    directory = open_directory(f"file:{path}", {"CUSTODY_HOME": str(tmp_path / "home")})
    assert directory.has_group("readers") and directory.has_group("empty")
    assert not directory.has_group("reader")


def test_ldap_adds_and_removes_a_member_and_forgets_cached_answers(ldap):
    directory = LdapDirectory(settings(ldap, ttl_seconds=60))
    assert directory.groups_of("eve") == frozenset()
    assert directory.add_member("sales-producers", "eve") is True
    try:
        assert directory.groups_of("eve") == {"sales-producers"}
        assert directory.add_member("sales-producers", "eve") is False
    finally:
        assert directory.remove_member("sales-producers", "eve") is True
    assert directory.groups_of("eve") == frozenset()
    assert directory.remove_member("sales-producers", "eve") is False


def test_ldap_changes_name_the_unknown_user_or_group(ldap):
    directory = LdapDirectory(settings(ldap))
    with pytest.raises(NotFound, match="no user 'zoe'"):
        directory.add_member("sales-producers", "zoe")
    with pytest.raises(NotFound, match="no group 'nobody-group'"):
        directory.add_member("nobody-group", "eve")


def test_ldap_refuses_to_empty_a_group(ldap):
    with pytest.raises(InvalidInput, match="bob is the last member of sales-producers"):
        LdapDirectory(settings(ldap)).remove_member("sales-producers", "bob")


def test_ldap_names_are_matched_exactly_so_no_user_has_two_names(ldap):
    directory = LdapDirectory(settings(ldap))
    assert directory.groups_of("ALICE") == frozenset()
    assert directory.authenticate("Alice", password_of("alice")) is False


def test_ldap_authenticates_a_user_by_their_own_password(ldap):
    directory = LdapDirectory(settings(ldap))
    assert directory.authenticate("carol", password_of("carol")) is True
    assert directory.authenticate("carol", password_of("bob")) is False
    assert directory.authenticate("carol", "") is False
    assert directory.authenticate("zoe", "anything") is False


@pytest.mark.parametrize("name", INJECTIONS)
def test_ldap_authentication_refuses_names_that_could_widen_a_lookup(ldap, name):
    with pytest.raises(InvalidName):
        LdapDirectory(settings(ldap)).authenticate(name, password_of("alice"))


def test_the_file_directory_lists_members_and_changes_the_file_keeping_its_header(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text(
        "# who is who\nusers: {alice: {}, dave: {}, eve: {}}\ngroups:\n  auditors: [dave]\n  readers: [auditors, alice]\n"
    )
    directory, other_process = FileDirectory.load(path), FileDirectory.load(path)
    assert directory.members_of("readers") == {"alice", "dave"}
    assert directory.add_member("auditors", "eve") is True
    assert directory.add_member("auditors", "eve") is False
    assert directory.groups_of("eve") == other_process.groups_of("eve") == {"auditors", "readers"}
    assert path.read_text().startswith("# who is who\n")
    assert other_process.remove_member("auditors", "eve") is True
    assert directory.groups_of("eve") == frozenset()
    with pytest.raises(NotFound, match="no user 'zoe'"):
        directory.add_member("auditors", "zoe")


def test_a_file_directory_without_passwords_says_how_to_set_them(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text("users: {alice: {}}\ngroups: {owners: [alice]}\n")
    directory = FileDirectory.load(path)
    assert not directory.verifies_passwords
    with pytest.raises(InvalidInput, match="holds no passwords: set them with `custody directory set-password USER`"):
        directory.authenticate("alice", "secret")


def test_a_connection_the_server_closed_is_opened_again(tmp_path):
    import time

    with populated_slapd(tmp_path / "slapd", CANARY, idle_timeout=1) as server:
        directory = LdapDirectory(settings(server, ttl_seconds=0))
        assert directory.groups_of("bob") == {"sales-producers"}
        time.sleep(2.5)  # past the idle timeout: slapd has closed the kept connection
        assert directory.groups_of("bob") == {"sales-producers"}
