"""Policy settings pinned in the catalog.

The directory, the admin and auditor groups and the classifications that need a verified identity
decide who may do what. Taken from each process's environment, anyone could point them at a YAML
file or a group of their own and make themselves an admin. So they are pinned in the catalog the
first time they are used, decisions take them from there, an admin changes them with a ledger entry,
and a process whose environment says otherwise is refused, with the setting named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlmodel import Session, select

from governance import ledger
from governance.access.directory import Directory, checked_name, open_directory
from governance.access.guard import enforce, ledger_actor
from governance.access.policy import Decision, Identity, Policy, Verb, parse_classifications
from governance.catalog import Catalog, utcnow
from governance.catalog.models import PolicySetting
from governance.config import POLICY_VARIABLES, Settings
from governance.errors import AccessDenied, InvalidInput, InvalidName, shown
from governance.runs import Assurance, os_user

SETTINGS_LOCK_ID = 0x637573746F6470  # arbitrary constant naming the settings' advisory lock
KEYS = tuple(POLICY_VARIABLES)


class SettingDisagrees(AccessDenied):
    """The environment names a policy setting other than the one pinned in the catalog."""


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


def normalized(key: str, value: str) -> str:
    """The one spelling a setting is pinned and compared in; InvalidInput names the setting."""
    where = f"{POLICY_VARIABLES[key]}={value!r}" if key in POLICY_VARIABLES else repr(key)
    try:
        if key == "directory":
            return _directory_value(value)
        if key in ("admin_group", "auditor_group"):
            return checked_name(value.strip(), "group")
        if key == "require_verified":
            names = sorted(c.value for c in parse_classifications(value, POLICY_VARIABLES[key]))
            return ",".join(names) or "none"
    except InvalidName as err:
        raise InvalidInput(f"{where}: {err}") from err
    raise InvalidInput(f"unknown policy setting {shown(key)}: use one of {', '.join(KEYS)}")


def _directory_value(value: str) -> str:
    value = value.strip()
    if value.startswith("file:"):
        return f"file:{Path(value.removeprefix('file:')).resolve()}"
    if value.startswith(("ldap://", "ldaps://")):
        return value.rstrip("/")
    raise InvalidInput(f"CUSTODY_DIRECTORY={value!r}: use file:PATH, ldap://… or ldaps://…")


def pinned_settings(catalog: Catalog, settings: Settings, directories: Callable[[str], Directory]) -> PolicySettings:
    """The pinned policy settings; the first time a key is asked for, the value this process has
    (given or default) is pinned, with a ledger entry, once `directories` opens a directory to pin
    (a directory that cannot be read pinned would leave no admin to change it). A value the process
    was given explicitly that disagrees with the pinned one is refused, and the refusal recorded."""
    with catalog.session() as session:
        rows = _rows(session)
    if any(key not in rows for key in KEYS):
        if "directory" not in rows:
            directories(normalized("directory", settings.directory))
        rows = _pin_missing(catalog, settings)
    pinned = PolicySettings({key: _pinned(rows[key]) for key in KEYS})
    _refuse_disagreement(catalog, settings, pinned)
    return pinned


def open_policy(catalog: Catalog, settings: Settings, environ: Mapping[str, str],
                directories: Callable[[str], Directory] | None = None) -> Policy:
    """The policy the pinned settings describe, over their directory (opened by `directories`, or
    with the CUSTODY_LDAP_* variables of `environ`)."""
    directories = directories or (lambda setting: open_directory(setting, environ))
    pinned = pinned_settings(catalog, settings, directories)
    directory = directories(pinned["directory"])
    return Policy(
        directory=directory,
        admin_group=pinned["admin_group"],
        require_verified=parse_classifications(pinned["require_verified"]),
        source=pinned["directory"],
    )


def _rows(session: Session) -> dict[str, PolicySetting]:
    return {row.key: row for row in session.exec(select(PolicySetting))}


def _pinned(row: PolicySetting) -> PinnedSetting:
    return PinnedSetting(row.key, row.value, row.set_by, row.assurance, row.set_at.isoformat(timespec="seconds"))


def _pin_missing(catalog: Catalog, settings: Settings) -> dict[str, PolicySetting]:
    values = {key: normalized(key, getattr(settings, key)) for key in KEYS}
    actor = os_user()
    with catalog.session() as session:
        _lock(session)
        rows = _rows(session)  # again, under the lock: another process may have pinned them
        added = {key: values[key] for key in KEYS if key not in rows}
        for key, value in added.items():
            rows[key] = PolicySetting(key=key, value=value, set_by=actor, assurance=Assurance.SYSTEM.value, set_at=utcnow())
            session.add(rows[key])
        if added:
            ledger.append(session, actor=ledger_actor(actor), action=ledger.Action.SETTINGS_PINNED,
                          assurance=Assurance.SYSTEM, details={"settings": added})
    return rows


def _lock(session: Session) -> None:
    """SQLite transactions already begin with the write lock; PostgreSQL takes an advisory lock."""
    if session.get_bind().dialect.name == "postgresql":
        session.exec(text("SELECT pg_advisory_xact_lock(:id)").bindparams(id=SETTINGS_LOCK_ID))


def _refuse_disagreement(catalog: Catalog, settings: Settings, pinned: PolicySettings) -> None:
    for key in sorted(settings.explicit):
        given = normalized(key, getattr(settings, key))
        if given == pinned[key]:
            continue
        with catalog.session() as session:
            ledger.append(session, actor=ledger_actor(os_user()), action=ledger.Action.SETTINGS_REFUSED,
                          assurance=Assurance.ASSERTED,
                          details={"setting": key, "given": given, "pinned": pinned[key]})
        raise SettingDisagrees(
            f"{POLICY_VARIABLES[key]}={getattr(settings, key)} disagrees with the {key} pinned in the catalog "
            f"({pinned[key]}), so no decision is made: unset it, or have an admin change the pinned one with "
            f"`custody settings set {key} VALUE --by ADMIN`"
        )


@dataclass(frozen=True)
class SettingChange:
    key: str
    before: str
    after: str
    by: str


def change_setting(
    catalog: Catalog, policy: Policy, identity: Identity, key: str, value: str,
    directories: Callable[[str], Directory],
) -> SettingChange:
    """Pin a new value for `key` if `identity` is an admin (verified, when the directory can check
    passwords), and the change would not lock them out; the decision and the change are recorded."""
    if key not in KEYS:
        raise InvalidInput(f"unknown policy setting {shown(key)}: use one of {', '.join(KEYS)}")
    after = normalized(key, value)
    decision = policy.decide(identity, Verb.SETTINGS, None)
    if decision.allowed and policy.directory.verifies_passwords and identity.assurance is not Assurance.VERIFIED:
        decision = Decision(identity, Verb.SETTINGS, None, False,
                            f"changing a policy setting needs a verified identity (--password-stdin or CUSTODY_PASSWORD); "
                            f"{identity.user}'s is {identity.assurance}", directory=policy.source)
    if decision.allowed:
        decision = _refuse_lockout(decision, policy, key, after, directories)
    enforce(catalog, decision, details={"setting": key, "to": after})
    with catalog.session() as session:
        _lock(session)
        row = session.get(PolicySetting, key)
        before = row.value
        row.value, row.set_by, row.assurance, row.set_at = after, identity.user, identity.assurance.value, utcnow()
        session.add(row)
        ledger.append(session, actor=identity.user, action=ledger.Action.SETTINGS_CHANGED, assurance=identity.assurance,
                      details={"setting": key, "from": before, "to": after})
    return SettingChange(key, before, after, identity.user)


def _refuse_lockout(decision: Decision, policy: Policy, key: str, after: str, directories: Callable[[str], Directory]) -> Decision:
    """An admin may not change the directory or the admin group to one in which they are no admin:
    nobody might be left who could change it back."""
    if key not in ("directory", "admin_group"):
        return decision
    directory = directories(after) if key == "directory" else policy.directory
    group = after if key == "admin_group" else policy.admin_group
    user = decision.identity.user
    if group in directory.groups_of(user):
        return decision
    where = f"the directory {after}" if key == "directory" else "the directory"
    return Decision(decision.identity, Verb.SETTINGS, None, False,
                    f"{user} is not in the admin group {group} of {where}: after this change no one "
                    "known to be an admin could change it back", directory=policy.source)
