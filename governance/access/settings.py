"""Policy settings pinned in the catalog.

The directory (and, for LDAP, where it searches and whom it trusts), the admin and auditor groups
and the classifications that need a verified identity decide who may do what. Taken from each
process's environment, anyone could point them at a YAML file, a subtree or a group of their own
and make themselves an admin. So they are pinned in the catalog the first time they are used,
decisions take them from there, an admin changes them with a ledger entry, and a process whose
environment says otherwise is refused, with the setting named.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from governance import ledger
from governance.access.directory import Directory, checked_name, open_directory
from governance.access.guard import enforce, ledger_actor
from governance.access.local import os_users_value, parse_os_users
from governance.access.policy import Decision, Identity, Policy, Verb, parse_classifications
from governance.catalog import Catalog, utc_from, utcnow
from governance.catalog.jsonrows import json_array_sql
from governance.catalog.models import PolicySetting
from governance.config import OFF, ON, POLICY_VARIABLES, Settings
from governance.errors import (
    CatalogReadOnly,
    DirectoryUnavailable,
    InvalidInput,
    InvalidName,
    SettingDisagrees,
    error_summary,
    shown,
)
from governance.locks import advisory_lock
from governance.runs import Assurance, os_user

KEYS = tuple(POLICY_VARIABLES)
ROW_COLUMNS = ("key", "value", "set_by", "assurance", "set_at")
# What the directory is: an admin moving any of them could lose their admin group.
DIRECTORY_KEYS = ("directory", "ldap_base_dn", "ldap_ca_file", "ldap_starttls")
# Opens a directory: its setting, and the environment to take the rest from (secrets included).
Opener = Callable[[str, Mapping[str, str]], Directory]


@dataclass(frozen=True)
class PinnedSetting:
    key: str
    value: str
    set_by: str
    assurance: str
    set_at: str


@dataclass(frozen=True)
class PolicySettings:
    """The pinned values, one per key."""

    pinned: Mapping[str, PinnedSetting]

    def __getitem__(self, key: str) -> str:
        return self.pinned[key].value

    def values(self) -> dict[str, str]:
        return {key: setting.value for key, setting in self.pinned.items()}


@dataclass(frozen=True)
class Disagreement:
    """A policy setting this process was given that is not the pinned one."""

    key: str
    given: str
    pinned: str


def normalized(key: str, value: str) -> str:
    """The one spelling a setting is pinned and compared in; InvalidInput names the setting."""
    if key not in POLICY_VARIABLES:
        raise InvalidInput(f"unknown policy setting {shown(key)}: use one of {', '.join(KEYS)}")
    value = value.strip()
    where = f"{POLICY_VARIABLES[key]}={shown(value, 200)!r}"
    try:
        if key == "directory":
            return _directory_value(value, where)
        if key in ("admin_group", "auditor_group", "lineage_group"):
            return checked_name(value, "group")
        if key == "require_verified":
            return ",".join(sorted(c.value for c in parse_classifications(value, POLICY_VARIABLES[key]))) or "none"
        if key == "ldap_ca_file":
            return str(Path(value).resolve()) if value else ""
        if key in ("ldap_starttls", "specs_approval"):
            return _switch(value.lower(), where)
        if key == "os_users":
            return os_users_value(parse_os_users(value, POLICY_VARIABLES[key]))
    except InvalidName as err:
        raise InvalidInput(f"{where}: {err}") from err
    return value  # ldap_base_dn: a DN, taken as it is written


def _directory_value(value: str, where: str) -> str:
    if value.startswith("file:"):
        return f"file:{Path(value.removeprefix('file:')).resolve()}"
    if value.startswith(("ldap://", "ldaps://")):
        return value.rstrip("/")
    raise InvalidInput(f"{where}: use file:PATH, ldap://… or ldaps://…")


def _switch(value: str, where: str) -> str:
    if value in ON:
        return "on"
    if value in OFF:
        return "off"
    raise InvalidInput(f"{where}: use on or off")


def directory_environ(values: Mapping[str, str], environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """`environ` with the directory's pinned settings in place of its own: only the service
    account and its password still come from the environment. A file directory is kept in `home`."""
    pinned = {POLICY_VARIABLES[key]: values[key] for key in DIRECTORY_KEYS if key != "directory"}
    return {**environ, **pinned, "CUSTODY_HOME": str(home)}


def pinned_settings(
    catalog: Catalog,
    settings: Settings,
    environ: Mapping[str, str],
    *,
    directories: Opener = open_directory,
    refuse: bool = True,
) -> PolicySettings:
    """The pinned policy settings. The first time a key is asked for, the value this process has
    (given or default) is pinned, with a ledger entry, once the directory it describes opens (a
    directory that cannot be read, pinned, would leave no admin to change it). With `refuse`, a
    value the process was given that disagrees with the pinned one is refused, and recorded."""
    with catalog.reading() as session:
        found = _read_pinned(session)
    if any(key not in found for key in KEYS):
        values = {key: found[key].value if key in found else _first_value(key, settings, found) for key in KEYS}
        if any(key not in found for key in DIRECTORY_KEYS):
            directories(values["directory"], directory_environ(values, environ, settings.home))
        found = {key: _pinned(row) for key, row in _pin_missing(catalog, values).items()}
    pinned = PolicySettings({key: found[key] for key in KEYS})
    if refuse:
        _refuse_disagreement(catalog, settings, pinned)
    return pinned


def _first_value(key: str, settings: Settings, rows: Mapping[str, PinnedSetting]) -> str:
    """What a key is first pinned as: the process's value in a new catalog. In a catalog pinned
    before the key existed, its default: an admin changes it from there, and a process whose
    environment says otherwise is refused, rather than pinning a value of its own."""
    if not rows:
        return normalized(key, getattr(settings, key))
    default = next(f.default for f in fields(Settings) if f.name == key)
    return normalized(key, default if isinstance(default, str) else getattr(settings, key))


def pinned_view(catalog: Catalog, settings: Settings, environ: Mapping[str, str]) -> dict[str, Any]:
    """The pinned settings, each with who set it and when, and those `settings` were given otherwise:
    what `custody settings show --json` prints. Nothing is refused."""
    pinned = pinned_settings(catalog, settings, environ, refuse=False)
    return {
        "settings": {key: asdict(value) for key, value in pinned.pinned.items()},
        "disagreements": [asdict(found) for found in disagreements(settings, pinned)],
    }


def disagreements(settings: Settings, pinned: PolicySettings) -> list[Disagreement]:
    given = {key: normalized(key, getattr(settings, key)) for key in sorted(settings.explicit)}
    return [Disagreement(key, value, pinned[key]) for key, value in given.items() if value != pinned[key]]


def open_policy(
    catalog: Catalog, settings: Settings, environ: Mapping[str, str], directories: Opener = open_directory
) -> Policy:
    """The policy the pinned settings describe, over their directory."""
    values = pinned_settings(catalog, settings, environ, directories=directories).values()
    return policy_of(values, environ, settings.home, directories)


def pinned_os_users(catalog: Catalog) -> dict[str, str]:
    """The pinned `os_users` mapping, read without opening the directory, to name an OS user where
    nothing is decided by it; before it is pinned, each OS user is the directory user of that name."""
    with catalog.reading() as session:
        found = _read_pinned(session).get("os_users")
    return parse_os_users(found.value) if found else {}


def policy_of(
    values: Mapping[str, str], environ: Mapping[str, str], home: Path, directories: Opener = open_directory
) -> Policy:
    return Policy(
        directory=directories(values["directory"], directory_environ(values, environ, home)),
        admin_group=values["admin_group"],
        require_verified=parse_classifications(values["require_verified"]),
        source=values["directory"],
        auditor_group=values["auditor_group"],
        lineage_group=values["lineage_group"],
        specs_approval=values["specs_approval"] == "on",
        os_users=parse_os_users(values["os_users"]),
    )


def _rows(session: Session) -> dict[str, PolicySetting]:
    return {row.key: row for row in session.exec(select(PolicySetting))}


def _read_pinned(session: Session) -> dict[str, PinnedSetting]:
    """The settings pinned now, read in one row: every decision reads them."""
    connection = session.connection()
    rows = json.loads(connection.exec_driver_sql(_pinned_sql(connection.dialect.name)).scalar_one())
    return {
        row["key"]: PinnedSetting(
            row["key"], row["value"], row["set_by"], row["assurance"], _when(utc_from(row["set_at"]))
        )
        for row in rows
    }


@cache
def _pinned_sql(dialect: str) -> str:
    columns = ", ".join(f'"{column}"' for column in ROW_COLUMNS)
    return json_array_sql(
        dialect, f"SELECT {columns} FROM {PolicySetting.__tablename__} ORDER BY key", ROW_COLUMNS, "key"
    )


def _pinned(row: PolicySetting) -> PinnedSetting:
    return PinnedSetting(row.key, row.value, row.set_by, row.assurance, _when(row.set_at))


def _when(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


@contextmanager
def _written(what: str) -> Iterator[None]:
    """Say what could not be written, should the catalog refuse this process's writes: a process that
    only reads may still have to pin the settings, or record their refusal."""
    try:
        yield
    except CatalogReadOnly as err:
        raise CatalogReadOnly(f"{what} could not be written: {err}") from err


def _pin_missing(catalog: Catalog, values: Mapping[str, str]) -> dict[str, PolicySetting]:
    actor = os_user()
    with _written("the policy settings, which their first use pins in the catalog,"), catalog.session() as session:
        advisory_lock(session, "custody.settings")
        rows = _rows(session)  # again, under the lock: another process may have pinned them
        added = {key: values[key] for key in KEYS if key not in rows}
        for key, value in added.items():
            rows[key] = PolicySetting(
                key=key, value=value, set_by=actor, assurance=Assurance.SYSTEM.value, set_at=utcnow()
            )
            session.add(rows[key])
        if added:
            ledger.append(
                session,
                actor=ledger_actor(actor),
                action=ledger.Action.SETTINGS_PINNED,
                assurance=Assurance.SYSTEM,
                details={"settings": added},
            )
    return rows


def _refuse_disagreement(catalog: Catalog, settings: Settings, pinned: PolicySettings) -> None:
    found = disagreements(settings, pinned)
    if not found:
        return
    first = found[0]
    given = f"{POLICY_VARIABLES[first.key]}={shown(getattr(settings, first.key), 200)}"
    with (
        _written(f"the refusal of {given}, which disagrees with the pinned {first.key},"),
        catalog.session() as session,
    ):
        ledger.append(
            session,
            actor=ledger_actor(os_user()),
            action=ledger.Action.SETTINGS_REFUSED,
            assurance=Assurance.ASSERTED,
            details={"setting": first.key, "given": first.given, "pinned": first.pinned},
        )
    raise SettingDisagrees(
        f"{given} disagrees with the {first.key} pinned in the catalog ({first.pinned}), so no decision is made: "
        f"unset it, or have an admin change the pinned one with `custody settings set {first.key} VALUE --by ADMIN`"
    )


@dataclass(frozen=True)
class SettingChange:
    key: str
    before: str
    after: str
    by: str

    @property
    def changed(self) -> bool:
        return self.before != self.after


def change_setting(
    catalog: Catalog,
    settings: Settings,
    environ: Mapping[str, str],
    identity: Identity,
    key: str,
    value: str,
    directories: Opener = open_directory,
    details: Mapping[str, str] | None = None,
    held: Mapping[str, str] | None = None,
) -> SettingChange:
    """Pin a new value for `key` if `identity` is a verified admin, the key is not `held` (the
    reason why, by key) and the change would not lock every admin out; the decision (with `details`
    of how it was asked), and the change, are recorded. Settings changed by someone else meanwhile
    refuse the change rather than override."""
    after = normalized(key, value)
    current = pinned_settings(catalog, settings, environ, directories=directories).values()
    policy = policy_of(current, environ, settings.home, directories)
    decision = policy.decide(identity, Verb.SETTINGS, None)
    if decision.allowed and held and key in held:
        said = f"{identity.user} may not change {key} through the service: {held[key]}; an admin changes it there"
        decision = _denied(decision, policy, said)
    if decision.allowed:
        decision = _refuse_lockout(
            decision, policy, current, {**current, key: after}, environ, directories, settings.home
        )
    enforce(catalog, decision, details={**(details or {}), "setting": key, "to": after})
    with catalog.session() as session:
        advisory_lock(session, "custody.settings")
        rows = _rows(session)
        if {k: row.value for k, row in rows.items()} != current:
            raise InvalidInput(f"the policy settings changed while {key} was being changed; run the command again")
        change = SettingChange(key, rows[key].value, after, identity.user)
        if change.changed:
            row = rows[key]
            row.value, row.set_by, row.assurance, row.set_at = after, identity.user, identity.assurance.value, utcnow()
            session.add(row)
            ledger.append(
                session,
                actor=identity.user,
                action=ledger.Action.SETTINGS_CHANGED,
                assurance=identity.assurance,
                details={"setting": key, "from": change.before, "to": after},
            )
    return change


def held_by_the_host(settings: Settings) -> dict[str, str]:
    """The settings a client of the service may not change, and why: the directory, which is found
    on the service's host, and those the service's environment sets, since a pinned value that
    disagrees with it would refuse every later decision of the service, one to undo it included."""
    held = {key: "the directory is chosen on the service's host" for key in DIRECTORY_KEYS}
    for key in sorted(settings.explicit & set(KEYS)):
        held[key] = f"the service's environment sets {POLICY_VARIABLES[key]}"
    return held


def _denied(decision: Decision, policy: Policy, reason: str) -> Decision:
    return Decision(decision.identity, Verb.SETTINGS, None, False, reason, directory=policy.source)


def _refuse_lockout(
    decision: Decision,
    policy: Policy,
    current: Mapping[str, str],
    after: Mapping[str, str],
    environ: Mapping[str, str],
    directories: Opener,
    home: Path,
) -> Decision:
    """An admin may not move the directory or the admin group to one in which they are no admin:
    no one might be left who could change it back. A directory that cannot be asked denies."""
    user = decision.identity.user
    try:
        directory = policy.directory
        if any(after[key] != current[key] for key in DIRECTORY_KEYS):
            directory = directories(after["directory"], directory_environ(after, environ, home))
        groups = directory.groups_of(user)
    except (DirectoryUnavailable, InvalidInput) as err:
        return _denied(decision, policy, f"the directory after this change cannot be asked: {error_summary(err)}")
    if after["admin_group"] in groups:
        return decision
    return _denied(
        decision,
        policy,
        f"{user} is not in the admin group {after['admin_group']} of the directory "
        f"{after['directory']}: after this change no one known to be an admin could "
        "change it back",
    )
