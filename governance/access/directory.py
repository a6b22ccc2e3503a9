"""Who is in which group: a YAML file (the embedded default) or an LDAP directory, through ldap3.

Group members may be groups themselves (nested groups); a user is in every group that contains them
directly or through other groups. A directory that cannot be asked raises DirectoryUnavailable, so
every access decision built on it fails closed.
"""

from __future__ import annotations

import re
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from governance.errors import DirectoryUnavailable, InvalidInput, InvalidName, error_summary

# Directory user and group names: letters, digits and . _ - only. Anything else (LDAP filter or DN
# syntax, NUL, non-ASCII, the empty string) is refused before any lookup, so it can never widen one.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_NESTING = 10
DEFAULT_TTL_SECONDS = 60.0


def checked_name(name: str, what: str = "user") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidName(f"invalid {what} name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    return name


class Directory(Protocol):
    def groups_of(self, user: str) -> frozenset[str]:
        """Every group `user` belongs to, directly or through nested groups; empty for an unknown user."""
        ...


@dataclass(frozen=True)
class FileDirectory:
    """Users and groups from a YAML file: `users: {name: {...}}`, `groups: {group: [member, ...]}`."""

    path: Path
    users: frozenset[str]
    groups: Mapping[str, tuple[str, ...]]

    @classmethod
    def load(cls, path: Path) -> FileDirectory:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as err:
            raise InvalidInput(f"{path}: cannot read the directory file: {error_summary(err)}") from err
        users, groups = data.get("users") or {}, data.get("groups") or {}
        if not isinstance(users, dict) or not isinstance(groups, dict):
            raise InvalidInput(f"{path}: expected `users:` and `groups:` mappings")
        for group, members in groups.items():
            checked_name(str(group), "group")
            if not isinstance(members, list):
                raise InvalidInput(f"{path}: groups.{group}: expected a list of members")
            for member in members:
                if str(member) not in users and str(member) not in groups:
                    raise InvalidInput(f"{path}: groups.{group}: {member!r} is neither a user nor a group")
        return cls(Path(path), frozenset(map(str, users)), {str(g): tuple(map(str, m)) for g, m in groups.items()})

    def groups_of(self, user: str) -> frozenset[str]:
        checked_name(user)
        if user not in self.users:
            return frozenset()
        return _closure({user}, lambda members: {g for g, inside in self.groups.items() if members & set(inside)})


@dataclass(frozen=True)
class LdapSettings:
    """Where the directory is and how Custody binds to it. `password` comes from the environment only."""

    url: str
    base_dn: str
    bind_dn: str
    password: str
    ca_file: str | None = None
    starttls: bool = True
    ttl_seconds: float = DEFAULT_TTL_SECONDS
    timeout_seconds: int = 5

    def __repr__(self) -> str:
        return f"LdapSettings(url={self.url!r}, base_dn={self.base_dn!r}, bind_dn={self.bind_dn!r}, password=***)"


class LdapDirectory:
    """Group membership from LDAP: users are `inetOrgPerson` entries found by `uid`, groups are
    `groupOfNames` whose `member` names users or other groups. Answers are cached for `ttl_seconds`."""

    def __init__(self, settings: LdapSettings):
        if settings.url.startswith("ldap://") and not settings.starttls:
            raise InvalidInput(f"{settings.url}: cleartext LDAP is refused; use ldaps:// or StartTLS")
        if not settings.url.startswith(("ldap://", "ldaps://")):
            raise InvalidInput(f"{settings.url!r} is not an ldap:// or ldaps:// URL")
        self.settings = settings
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LdapDirectory({self.settings!r})"

    def groups_of(self, user: str) -> frozenset[str]:
        checked_name(user)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(user)
        if cached and cached[0] > now:
            return cached[1]
        groups = self._ask(user)
        with self._lock:
            self._cache[user] = (now + self.settings.ttl_seconds, groups)
        return groups

    def _ask(self, user: str) -> frozenset[str]:
        from ldap3.core.exceptions import LDAPException
        from ldap3.utils.conv import escape_filter_chars

        try:
            with self._connection() as connection:
                found = self._search(connection, f"(&(objectClass=inetOrgPerson)(uid={escape_filter_chars(user)}))", [])
                if len(found) != 1:
                    return frozenset()
                names: dict[str, str] = {}
                frontier = {found[0][0]}
                for _ in range(MAX_NESTING):
                    member_of = "".join(f"(member={escape_filter_chars(dn)})" for dn in sorted(frontier))
                    groups = self._search(connection, f"(&(objectClass=groupOfNames)(|{member_of}))", ["cn"])
                    frontier = {dn for dn, _ in groups if dn not in names}
                    names.update((dn, cn) for dn, cn in groups)
                    if not frontier:
                        break
                return frozenset(names.values())
        except LDAPException as err:
            raise DirectoryUnavailable(
                f"directory {self.settings.url} could not be asked, so access is denied: {type(err).__name__}: {error_summary(err)}"
            ) from err

    def _connection(self):
        from ldap3 import Connection, Server, Tls

        tls = Tls(ca_certs_file=self.settings.ca_file, validate=ssl.CERT_REQUIRED, version=ssl.PROTOCOL_TLS_CLIENT)
        server = Server(self.settings.url, use_ssl=self.settings.url.startswith("ldaps://"), tls=tls,
                        connect_timeout=self.settings.timeout_seconds)
        connection = Connection(server, self.settings.bind_dn, self.settings.password, raise_exceptions=True,
                                receive_timeout=self.settings.timeout_seconds)
        connection.open()
        if self.settings.url.startswith("ldap://"):
            connection.start_tls()
        connection.bind()
        return connection

    def _search(self, connection, query: str, attributes: list[str]) -> list[tuple[str, str]]:
        from ldap3 import SUBTREE

        connection.search(self.settings.base_dn, query, search_scope=SUBTREE, attributes=attributes)
        return [(entry.entry_dn, str(entry["cn"].value) if attributes else "") for entry in connection.entries]


def _closure(start: set[str], parents_of) -> frozenset[str]:
    found: set[str] = set()
    frontier = set(start)
    for _ in range(MAX_NESTING):
        frontier = parents_of(frontier) - found
        if not frontier:
            break
        found |= frontier
    return frozenset(found)


def open_directory(setting: str, environ: Mapping[str, str]) -> Directory:
    """The directory `CUSTODY_DIRECTORY` names: `file:PATH`, or an `ldap://`/`ldaps://` URL with the
    CUSTODY_LDAP_* variables (the bind password only ever from CUSTODY_LDAP_BIND_PASSWORD)."""
    if setting.startswith("file:"):
        return FileDirectory.load(Path(setting.removeprefix("file:")))
    if not setting.startswith(("ldap://", "ldaps://")):
        raise InvalidInput(f"CUSTODY_DIRECTORY={setting!r}: use file:PATH, ldap://… or ldaps://…")
    missing = [name for name in ("CUSTODY_LDAP_BASE_DN", "CUSTODY_LDAP_BIND_DN", "CUSTODY_LDAP_BIND_PASSWORD") if not environ.get(name)]
    if missing:
        raise InvalidInput(f"CUSTODY_DIRECTORY={setting} needs {', '.join(missing)}")
    return LdapDirectory(LdapSettings(
        url=setting, base_dn=environ["CUSTODY_LDAP_BASE_DN"], bind_dn=environ["CUSTODY_LDAP_BIND_DN"],
        password=environ["CUSTODY_LDAP_BIND_PASSWORD"], ca_file=environ.get("CUSTODY_LDAP_CA_FILE") or None,
        starttls=(environ.get("CUSTODY_LDAP_STARTTLS") or "on").lower() not in ("off", "false", "0", "no"),
        ttl_seconds=_seconds(environ.get("CUSTODY_LDAP_CACHE_SECONDS")),
    ))


def _seconds(value: str | None) -> float:
    if not value:
        return DEFAULT_TTL_SECONDS
    try:
        seconds = float(value)
    except ValueError as err:
        raise InvalidInput(f"CUSTODY_LDAP_CACHE_SECONDS={value!r}: expected a number of seconds") from err
    if seconds < 0:
        raise InvalidInput(f"CUSTODY_LDAP_CACHE_SECONDS={value!r}: expected a number of seconds")
    return seconds
