"""Who is in which group: a YAML file (the embedded default) or an LDAP directory, through ldap3.

Group members may be groups themselves (nested groups); a user is in every group that contains them
directly or through other groups. A directory that cannot be asked raises DirectoryUnavailable, so
every access decision built on it fails closed.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import re
import ssl
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

import yaml
from argon2 import Parameters

from governance.access.passwords import checked_hash, matches, usual_parameters
from governance.config import env_amount, home_of
from governance.errors import (
    DirectoryUnavailable,
    EnvironmentProblem,
    InvalidInput,
    InvalidName,
    NotFound,
    UnsafeYaml,
    error_summary,
    shown,
)
from governance.locks import file_lock
from governance.yamlsource import safe_load, yaml_problem

# Directory user and group names: letters, digits and . _ - only. Anything else (LDAP filter or DN
# syntax, NUL, non-ASCII, the empty string) is refused before any lookup, so it can never widen one.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_NESTING = 10
DEFAULT_TTL_SECONDS = 60.0
DIRECTORY_SHAPE = "expected `users:` and `groups:` mappings"
# What ldap3's decoder raises on bytes that are not an LDAP message.
UNREADABLE = (KeyError, IndexError, ValueError, TypeError)


def checked_name(name: str, what: str = "user") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidName(f"invalid {what} name {name!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    return name


class Directory(Protocol):
    def groups_of(self, user: str) -> frozenset[str]:
        """Every group `user` belongs to, directly or through nested groups; empty for an unknown user."""
        ...

    def members_of(self, group: str) -> frozenset[str]:
        """Every user in `group`, directly or through nested groups; empty for an unknown group."""
        ...

    def has_group(self, group: str) -> bool:
        """Whether the directory has `group`, with members or none."""
        ...

    def has_user(self, user: str) -> bool:
        """Whether the directory has `user`, in groups or none."""
        ...

    def answers_at_once(self, user: str) -> bool:
        """Whether `groups_of(user)` would answer from what this process holds, asking no server."""
        ...

    def add_member(self, group: str, user: str) -> bool:
        """Make `user` a direct member of `group`; False when they already were."""
        ...

    def remove_member(self, group: str, user: str) -> bool:
        """Remove `user` from the direct members of `group`; False when they were not one."""
        ...

    def authenticate(self, user: str, password: str) -> bool:
        """Whether `password` is `user`'s own, as the directory checks it."""
        ...

    @property
    def verifies_passwords(self) -> bool:
        """Whether `authenticate` can establish a verified identity here."""
        ...

    @property
    def method(self) -> str:
        """How `authenticate` checks a password, as the ledger names it."""
        ...


@dataclass(frozen=True)
class _Members:
    users: frozenset[str]
    groups: Mapping[str, tuple[str, ...]]
    passwords: Mapping[str, str]  # user -> argon2id hash

    @cached_property
    def usual(self) -> Parameters | None:
        """The parameters most of the file's hashes were made with: a decoy check's."""
        return usual_parameters(self.passwords.values())


class FileDirectory:
    """Users and groups from a YAML file: `users: {name: {password: <argon2id hash>, ...}}`,
    `groups: {group: [member, ...]}`.

    The file is read again whenever it changes, so a grant, revoke or new password made by another
    process (or by this one) counts from the next question on.
    """

    method = "password"

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._members = _Members(frozenset(), {}, {})

    def __repr__(self) -> str:
        return f"FileDirectory({str(self.path)!r})"

    @classmethod
    def load(cls, path: Path) -> FileDirectory:
        """The directory in `path`, read and checked now: a bad file is refused naming it."""
        directory = cls(path)
        directory._current()
        return directory

    @property
    def users(self) -> frozenset[str]:
        return self._current().users

    @property
    def groups(self) -> Mapping[str, tuple[str, ...]]:
        return self._current().groups

    @property
    def verifies_passwords(self) -> bool:
        return bool(self._current().passwords)

    def _current(self) -> _Members:
        try:
            stat = self.path.stat()
        except OSError as err:
            raise InvalidInput(f"{self.path}: cannot read the directory file: {error_summary(err)}") from err
        seen = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        with self._lock:
            if seen != self._seen:
                self._members, self._seen = _parse(self.path), seen
                # The decoy is made as the file is read, not by the first check of a user it lacks.
                _ = self._members.usual
            return self._members

    def groups_of(self, user: str) -> frozenset[str]:
        checked_name(user)
        now = self._current()
        if user not in now.users:
            return frozenset()
        return _closure({user}, lambda members: {g for g, inside in now.groups.items() if members & set(inside)})

    def answers_at_once(self, user: str) -> bool:
        return True  # a look at the file's stamp: read again only when it changed

    def members_of(self, group: str) -> frozenset[str]:
        checked_name(group, "group")
        now = self._current()
        if group not in now.groups:
            return frozenset()
        inside = _closure({group}, lambda found: {m for g in found for m in now.groups.get(g, ())}) | {group}
        return frozenset(inside & now.users)

    def has_group(self, group: str) -> bool:
        checked_name(group, "group")
        return group in self._current().groups

    def has_user(self, user: str) -> bool:
        checked_name(user)
        return user in self._current().users

    def add_member(self, group: str, user: str) -> bool:
        return self._change(group, user, lambda members: members + [user] if user not in members else None)

    def remove_member(self, group: str, user: str) -> bool:
        return self._change(group, user, lambda members: [m for m in members if m != user] if user in members else None)

    def authenticate(self, user: str, password: str) -> bool:
        checked_name(user)
        now = self._current()
        if not now.passwords:
            raise InvalidInput(
                f"{self.path} holds no passwords: set them with `custody directory set-password USER`, "
                "or use an LDAP directory (CUSTODY_DIRECTORY=ldap://… or ldaps://…)"
            )
        return matches(now.passwords.get(user), password, now.usual)

    def set_password_hash(self, user: str, digest: str) -> None:
        """Keep the hash of `user`'s new password in the file; the password itself is never written."""
        checked_name(user)
        with self._editing() as data:
            users = data.get("users") or {}
            if user not in users:
                raise NotFound(f"{self.path}: no user {user!r} in the directory")
            users[user] = {**(users[user] or {}), "password": digest}

    def _change(self, group: str, user: str, edit: Callable[[list[str]], list[str] | None]) -> bool:
        """Edit one group's member list in the file, under a lock, written whole or not at all."""
        checked_name(group, "group")
        checked_name(user)
        with self._editing() as data:
            if user not in (data.get("users") or {}):
                raise NotFound(f"{self.path}: no user {user!r} in the directory")
            groups = data.get("groups") or {}
            if group not in groups:
                raise NotFound(f"{self.path}: no group {group!r} in the directory")
            changed = edit([str(m) for m in groups[group]])
            if changed is not None:
                groups[group] = changed
        return changed is not None

    @contextlib.contextmanager
    def _editing(self) -> Iterator[dict]:
        """The file's data to edit in place, under a lock; written whole, and only if it changed."""
        with file_lock(self.path.with_name(self.path.name + ".lock")):
            data = safe_load(self.path.read_text(encoding="utf-8")) or {}
            before = copy.deepcopy(data)
            yield data
            if data != before:
                _write_keeping_header(self.path, data)


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

    verifies_passwords = True
    method = "ldap-bind"

    def __init__(self, settings: LdapSettings):
        if settings.url.startswith("ldap://") and not settings.starttls:
            raise InvalidInput(f"{settings.url}: cleartext LDAP is refused; use ldaps:// or StartTLS")
        if not settings.url.startswith(("ldap://", "ldaps://")):
            raise InvalidInput(f"{settings.url!r} is not an ldap:// or ldaps:// URL")
        self.settings = settings
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}
        self._generation = 0
        self._lock = threading.Lock()
        self._service = None
        self._service_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LdapDirectory({self.settings!r})"

    def groups_of(self, user: str) -> frozenset[str]:
        checked_name(user)
        return self._cached(f"user:{user}", lambda: self._ask(self._groups_of, user))

    def answers_at_once(self, user: str) -> bool:
        with self._lock:
            cached = self._cache.get(f"user:{user}")
        return cached is not None and cached[0] > time.monotonic()

    def members_of(self, group: str) -> frozenset[str]:
        checked_name(group, "group")
        return self._cached(f"group:{group}", lambda: self._ask(self._members_of, group))

    def has_group(self, group: str) -> bool:
        checked_name(group, "group")
        # Kept as the set of the one group found, or none, beside the other answers it is cached with.
        return bool(self._cached(f"has:{group}", lambda: self._ask(self._group_found, group)))

    def has_user(self, user: str) -> bool:
        checked_name(user)
        return bool(self._cached(f"is:{user}", lambda: self._ask(self._user_found, user)))

    def add_member(self, group: str, user: str) -> bool:
        return self._change(group, user, add=True)

    def remove_member(self, group: str, user: str) -> bool:
        return self._change(group, user, add=False)

    def authenticate(self, user: str, password: str) -> bool:
        """Bind as the user over the same verified TLS; an empty password is refused, since LDAP
        would take it as an anonymous bind that succeeds."""
        from ldap3.core.exceptions import LDAPBindError, LDAPException, LDAPInvalidCredentialsResult

        checked_name(user)
        if not password:
            return False
        user_dn = self._ask(lambda connection, name: self._dn(connection, "inetOrgPerson", "uid", name), user)
        if user_dn is None:
            return False
        try:
            self._connection(user_dn, password).unbind()
        except (LDAPInvalidCredentialsResult, LDAPBindError):
            return False
        except (LDAPException, *UNREADABLE) as err:
            raise self._unavailable(_ldap_failure(err)) from err
        return True

    def _cached(self, key: str, ask: Callable[[], frozenset[str]]) -> frozenset[str]:
        now = time.monotonic()
        with self._lock:
            cached, generation = self._cache.get(key), self._generation
        if cached and cached[0] > now:
            return cached[1]
        answer = ask()
        with self._lock:
            # An answer asked for before a change made here is not kept: it may predate the change.
            if generation == self._generation:
                self._cache[key] = (now + self.settings.ttl_seconds, answer)
        return answer

    def _ask(self, question, name: str):
        """Run `question(connection, name)` on the service connection; any LDAP failure denies.

        The connection is kept between questions: opening one (TCP, StartTLS, bind) costs tens of
        milliseconds where a search costs one. A kept connection the server has closed is opened
        again once; a second failure denies.
        """
        from ldap3.core.exceptions import LDAPException

        with self._service_lock:
            reused = self._service is not None
            try:
                return question(self._open_service(), name)
            except (LDAPException, *UNREADABLE) as err:
                self._drop_service()  # first: a connection half read is never asked again
                failure = _ldap_failure(err)
                if not reused:
                    raise self._unavailable(failure) from err
            try:
                return question(self._open_service(), name)
            except (LDAPException, *UNREADABLE) as err:
                self._drop_service()
                failure = _ldap_failure(err)
                raise self._unavailable(failure) from err

    def _open_service(self):
        if self._service is None:
            self._service = self._connection()
        return self._service

    def _drop_service(self) -> None:
        from ldap3.core.exceptions import LDAPException

        service, self._service = self._service, None
        if service is not None:
            with contextlib.suppress(LDAPException):  # it is being discarded because it failed
                service.unbind()

    def _unavailable(self, failure: str) -> DirectoryUnavailable:
        return DirectoryUnavailable(f"directory {self.settings.url} could not be asked, so access is denied: {failure}")

    def _groups_of(self, connection, user: str) -> frozenset[str]:
        from ldap3.utils.conv import escape_filter_chars

        user_dn = self._dn(connection, "inetOrgPerson", "uid", user)
        if user_dn is None:
            return frozenset()
        names: dict[str, str] = {}
        frontier = {user_dn}
        for _ in range(MAX_NESTING):
            member_of = "".join(f"(member={escape_filter_chars(dn)})" for dn in sorted(frontier))
            groups = self._search(connection, f"(&(objectClass=groupOfNames)(|{member_of}))", ["cn"])
            frontier = {dn for dn, _ in groups if dn not in names}
            names.update((dn, cn) for dn, cn in groups)
            if not frontier:
                break
        return frozenset(names.values())

    def _group_found(self, connection, group: str) -> frozenset[str]:
        return frozenset() if self._dn(connection, "groupOfNames", "cn", group) is None else frozenset({group})

    def _user_found(self, connection, user: str) -> frozenset[str]:
        return frozenset() if self._dn(connection, "inetOrgPerson", "uid", user) is None else frozenset({user})

    def _members_of(self, connection, group: str) -> frozenset[str]:
        from ldap3 import BASE

        group_dn = self._dn(connection, "groupOfNames", "cn", group)
        if group_dn is None:
            return frozenset()
        users: set[str] = set()
        seen, frontier = {group_dn}, [group_dn]
        for _ in range(MAX_NESTING):
            members: list[str] = []
            for dn in frontier:
                connection.search(dn, "(objectClass=groupOfNames)", search_scope=BASE, attributes=["member"])
                members.extend(str(m) for entry in connection.entries for m in entry["member"].values)
            frontier = []
            for dn in sorted(set(members) - seen):
                seen.add(dn)
                kind = self._kind(connection, dn)
                if kind == "group":
                    frontier.append(dn)
                elif kind is not None:
                    users.add(kind)
            if not frontier:
                break
        return frozenset(users)

    def _kind(self, connection, dn: str) -> str | None:
        """ "group" for a group entry, the uid for a user entry, None for anything else (or nothing)."""
        from ldap3 import BASE
        from ldap3.core.exceptions import LDAPNoSuchObjectResult

        try:
            connection.search(
                dn,
                "(|(objectClass=groupOfNames)(objectClass=inetOrgPerson))",
                search_scope=BASE,
                attributes=["objectClass", "uid"],
            )
        except LDAPNoSuchObjectResult:
            return None
        for entry in connection.entries:
            if "groupOfNames" in entry["objectClass"].values:
                return "group"
            uid = entry["uid"].value
            return str(uid[0] if isinstance(uid, list) else uid) if uid else None
        return None

    def _change(self, group: str, user: str, *, add: bool) -> bool:
        from ldap3 import BASE, MODIFY_ADD, MODIFY_DELETE
        from ldap3.core.exceptions import LDAPObjectClassViolationResult

        checked_name(group, "group")
        checked_name(user)

        def change(connection, _name: str) -> bool:
            group_dn = self._dn(connection, "groupOfNames", "cn", group)
            if group_dn is None:
                raise NotFound(f"no group {group!r} in the directory {self.settings.url}")
            user_dn = self._dn(connection, "inetOrgPerson", "uid", user)
            if user_dn is None:
                raise NotFound(f"no user {user!r} in the directory {self.settings.url}")
            connection.search(group_dn, "(objectClass=groupOfNames)", search_scope=BASE, attributes=["member"])
            current = {str(m).lower() for entry in connection.entries for m in entry["member"].values}
            if (user_dn.lower() in current) == add:
                return False
            try:
                connection.modify(group_dn, {"member": [(MODIFY_ADD if add else MODIFY_DELETE, [user_dn])]})
            except LDAPObjectClassViolationResult as err:
                raise InvalidInput(f"{user} is the last member of {group}, and an LDAP group cannot be empty") from err
            return True

        try:
            return self._ask(change, group)
        finally:
            with self._lock:
                self._cache.clear()
                self._generation += 1

    def _dn(self, connection, object_class: str, attribute: str, value: str) -> str | None:
        """The one entry whose `attribute` is exactly `value`. LDAP matches uid and cn ignoring case;
        Custody does not, so that `ALICE` is not a second name for alice in the ledger."""
        from ldap3 import SUBTREE
        from ldap3.utils.conv import escape_filter_chars

        query = f"(&(objectClass={object_class})({attribute}={escape_filter_chars(value)}))"
        connection.search(self.settings.base_dn, query, search_scope=SUBTREE, attributes=[attribute])
        found = [entry.entry_dn for entry in connection.entries if value in entry[attribute].values]
        return found[0] if len(found) == 1 else None

    def _connection(self, bind_dn: str | None = None, password: str | None = None):
        from ldap3 import Connection, Server, Tls
        from ldap3.core.exceptions import LDAPException

        tls = Tls(ca_certs_file=self.settings.ca_file, validate=ssl.CERT_REQUIRED, version=ssl.PROTOCOL_TLS_CLIENT)
        server = Server(
            self.settings.url,
            use_ssl=self.settings.url.startswith("ldaps://"),
            tls=tls,
            connect_timeout=self.settings.timeout_seconds,
        )
        if bind_dn is None:
            bind_dn, password = self.settings.bind_dn, self.settings.password
        connection = Connection(
            server, bind_dn, password, raise_exceptions=True, receive_timeout=self.settings.timeout_seconds
        )
        try:
            # Opening reads the server's description: an answer that is not LDAP fails it with the socket open.
            connection.open()
            if self.settings.url.startswith("ldap://"):
                connection.start_tls()
            connection.bind()
        except BaseException:
            # Unbinding writes to the peer, which may be gone: the socket is closed whatever it says.
            with contextlib.suppress(LDAPException):
                connection.unbind()
            if not connection.closed:
                connection.strategy.close()
            raise
        return connection

    def _search(self, connection, query: str, attributes: list[str]) -> list[tuple[str, str]]:
        from ldap3 import SUBTREE

        connection.search(self.settings.base_dn, query, search_scope=SUBTREE, attributes=attributes)
        return [(entry.entry_dn, str(entry["cn"].value) if attributes else "") for entry in connection.entries]


def _ldap_failure(err: BaseException) -> str:
    """What went wrong asking the directory, when ldap3 raised `err`: an LDAP error, or its decoder's
    on an answer that is not LDAP (whatever listens on the port, or the client's own request echoed
    back when a connection to a port nobody holds joins itself). Any other error is a fault here and
    is raised again as it is."""
    from ldap3.core.exceptions import LDAPException

    if isinstance(err, LDAPException):
        return f"{type(err).__name__}: {error_summary(err)}"
    # ldap3 never calls back into Custody: an error that passed through its frames was raised in it.
    frames = traceback.walk_tb(err.__traceback__)
    if not any(frame.f_globals.get("__name__", "").partition(".")[0] == "ldap3" for frame, _ in frames):
        raise err
    return "its answer is not LDAP"


def _parse(path: Path) -> _Members:
    """The file's users and groups; anything else in it is refused in one line naming the file."""
    try:
        data = safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput(f"{path}: cannot read the directory file: {error_summary(err)}") from err
    except UnsafeYaml as err:
        raise InvalidInput(f"{path}: {err}") from err
    except yaml.YAMLError as err:
        raise InvalidInput(f"{path}: not valid YAML: {yaml_problem(err)}") from err
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: {DIRECTORY_SHAPE}")
    users, groups = data.get("users") or {}, data.get("groups") or {}
    if not isinstance(users, dict) or not isinstance(groups, dict):
        raise InvalidInput(f"{path}: {DIRECTORY_SHAPE}")
    for group, members in groups.items():
        try:
            checked_name(str(group), "group")
        except InvalidName as err:
            raise InvalidInput(f"{path}: groups: {err}") from err
        if not isinstance(members, list):
            raise InvalidInput(f"{path}: groups.{group}: expected a list of members")
        for member in members:
            if not isinstance(member, str):
                raise InvalidInput(
                    f"{path}: groups.{group}: expected names of users and groups, found {shown(repr(member), 80)}"
                )
            if member not in users and member not in groups:
                raise InvalidInput(f"{path}: groups.{group}: {shown(repr(member), 80)} is neither a user nor a group")
    return _Members(frozenset(map(str, users)), {str(g): tuple(m) for g, m in groups.items()}, _passwords(path, users))


def _passwords(path: Path, users: Mapping) -> dict[str, str]:
    found = {}
    for user, entry in users.items():
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise InvalidInput(f"{path}: users.{user}: expected a mapping of the user's attributes")
        if "password" in entry:
            found[str(user)] = checked_hash(entry["password"], f"{path}: users.{user}.password")
    return found


def _write_keeping_header(path: Path, data: dict) -> None:
    """Rewrite the file atomically; its leading comment block, which explains it to people, is kept."""
    original = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = "".join(line for line in _leading_comments(original))
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, allow_unicode=True)
    _write_atomically(path, header + body, path.stat().st_mode & 0o777)


def _write_atomically(path: Path, text: str, mode: int) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def _leading_comments(lines: list[str]) -> Iterator[str]:
    for line in lines:
        if not line.startswith("#"):
            return
        yield line


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
        return FileDirectory.load(home_copy(Path(setting.removeprefix("file:")), home_of(environ)))
    if not setting.startswith(("ldap://", "ldaps://")):
        raise InvalidInput(f"CUSTODY_DIRECTORY={setting!r}: use file:PATH, ldap://… or ldaps://…")
    missing = [
        name
        for name in ("CUSTODY_LDAP_BASE_DN", "CUSTODY_LDAP_BIND_DN", "CUSTODY_LDAP_BIND_PASSWORD")
        if not environ.get(name)
    ]
    if missing:
        raise InvalidInput(f"CUSTODY_DIRECTORY={setting} needs {', '.join(missing)}")
    return LdapDirectory(
        LdapSettings(
            url=setting,
            base_dn=environ["CUSTODY_LDAP_BASE_DN"],
            bind_dn=environ["CUSTODY_LDAP_BIND_DN"],
            password=environ["CUSTODY_LDAP_BIND_PASSWORD"],
            ca_file=environ.get("CUSTODY_LDAP_CA_FILE") or None,
            starttls=(environ.get("CUSTODY_LDAP_STARTTLS") or "on").lower() not in ("off", "false", "0", "no"),
            ttl_seconds=_seconds(environ),
        )
    )


def home_copy(seed: Path, home: Path) -> Path:
    """The file directory a home keeps, copied from `seed` the first time it is asked for, so that
    grants, revokes and passwords change the home's copy and never a file of the source tree. The
    copy is named after the seed's full path, as the policy settings pin it: another seed gets a
    copy of its own, and a home restored elsewhere keeps finding its copy."""
    seed = seed.resolve()
    name = f"{seed.stem}.{hashlib.sha256(str(seed).encode()).hexdigest()[:12]}.yaml"
    copy_at = home / "directory" / name
    if copy_at.exists():
        return copy_at
    _parse(seed)  # a bad seed is refused, naming it, before anything is copied
    try:
        copy_at.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(copy_at.with_name(copy_at.name + ".lock")):
            if not copy_at.exists():
                header = (
                    f"# This home's file directory, first copied from {seed}.\n"
                    "# Grants, revokes and passwords change this copy; the file it came from is never written.\n"
                )
                _write_atomically(copy_at, header + seed.read_text(encoding="utf-8"), 0o600)
    except PermissionError as err:
        raise EnvironmentProblem(
            f"{copy_at.parent}: this process may not write the home's copy of the file directory {seed} ({err.strerror})"
        ) from err
    return copy_at


def _seconds(environ: Mapping[str, str]) -> float:
    seconds = env_amount(environ, "CUSTODY_LDAP_CACHE_SECONDS", "seconds")
    return DEFAULT_TTL_SECONDS if seconds is None else seconds
