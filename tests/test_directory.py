"""The directory: group membership from a YAML file or a real OpenLDAP server, nested groups
resolved, names that could widen a lookup refused, and a directory that cannot be asked failing closed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from governance.access.directory import FileDirectory, LdapDirectory, LdapSettings, open_directory
from governance.errors import DirectoryUnavailable, InvalidInput, InvalidName
from tests.ldap_server import LdapServer, make_ca, start_slapd

CANARY = "canary-b1nd-Pa55w0rd"
PEOPLE = ("alice", "bob", "carol", "dave", "eve")
GROUPS = {  # group -> direct members (users, or groups written as "group:NAME")
    "sales-owners": ["alice"],
    "sales-producers": ["bob"],
    "auditors": ["dave"],
    "sales-consumers": ["carol", "group:auditors"],
}
INJECTIONS = ["*", "*)(uid=*", ")(|(cn=*", "alice)(|(uid=*)", "\\", "ali\x00ce", "alicé", "", "a" * 65, "alice,ou=people"]


@pytest.fixture(scope="module")
def ldap(tmp_path_factory) -> LdapServer:
    server = start_slapd(tmp_path_factory.mktemp("slapd"), CANARY)
    populate(server)
    yield server
    server.stop()


def populate(server: LdapServer) -> None:
    connection = admin(server)
    base = server.base_dn
    connection.add(base, ["dcObject", "organization"], {"o": "Custody", "dc": "custody"})
    for unit in ("people", "groups"):
        connection.add(f"ou={unit},{base}", ["organizationalUnit"], {"ou": unit})
    for uid in PEOPLE:
        connection.add(f"uid={uid},ou=people,{base}", ["inetOrgPerson"], {"uid": uid, "cn": uid.title(), "sn": uid.title()})
    for group, members in GROUPS.items():
        dns = [f"cn={m.removeprefix('group:')},ou=groups,{base}" if m.startswith("group:") else f"uid={m},ou=people,{base}" for m in members]
        connection.add(f"cn={group},ou=groups,{base}", ["groupOfNames"], {"cn": group, "member": dns})
    connection.unbind()


def admin(server: LdapServer):
    import ssl

    from ldap3 import Connection, Server, Tls

    tls = Tls(ca_certs_file=str(server.ca_file), validate=ssl.CERT_REQUIRED)
    connection = Connection(Server(server.url, tls=tls), server.bind_dn, server.password, raise_exceptions=True)
    connection.open()
    connection.start_tls()
    connection.bind()
    return connection


def settings(server: LdapServer, **changes) -> LdapSettings:
    base = LdapSettings(url=server.url, base_dn=server.base_dn, bind_dn=server.bind_dn, password=server.password,
                        ca_file=str(server.ca_file))
    return dataclasses.replace(base, **changes)


def test_ldap_gives_a_user_s_groups(ldap):
    directory = LdapDirectory(settings(ldap))
    assert directory.groups_of("alice") == {"sales-owners"}
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
    from tests.ldap_server import free_port

    with pytest.raises(DirectoryUnavailable, match="could not be asked"):
        LdapDirectory(settings(ldap, url=f"ldap://localhost:{free_port()}", timeout_seconds=1)).groups_of("alice")


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


def test_open_directory_reads_ldap_settings_from_the_environment(ldap):
    environ = {"CUSTODY_LDAP_BASE_DN": ldap.base_dn, "CUSTODY_LDAP_BIND_DN": ldap.bind_dn,
               "CUSTODY_LDAP_BIND_PASSWORD": ldap.password, "CUSTODY_LDAP_CA_FILE": str(ldap.ca_file)}
    assert open_directory(ldap.url, environ).groups_of("bob") == {"sales-producers"}
    with pytest.raises(InvalidInput, match="needs CUSTODY_LDAP_BIND_PASSWORD"):
        open_directory(ldap.url, {k: v for k, v in environ.items() if k != "CUSTODY_LDAP_BIND_PASSWORD"})


def test_the_file_directory_gives_groups_and_resolves_nesting(tmp_path):
    path = tmp_path / "directory.yaml"
    path.write_text("users: {alice: {}, dave: {}}\ngroups:\n  auditors: [dave]\n  readers: [auditors, alice]\n")
    directory = open_directory(f"file:{path}", {})
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
        open_directory(f"file:{path}", {})


def test_the_demo_directory_loads():
    directory = open_directory("file:assets/directory.yaml", {})
    assert directory.groups_of("alice") == {"sales-owners", "custody-admins"}
