"""Who runs this process: the OS user, as the directory knows them.

In process, the operating system vouches for the user a command runs as, which no flag can change.
The `os_users` policy setting maps OS user names to directory users (`root=alice,ci=svc-custody`);
a name it does not list is the directory user of the same name. Acting for anyone else takes that
user's password.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from governance.access.directory import checked_name
from governance.access.guard import ledger_actor, record
from governance.access.policy import OS_USER, Decision, Identity, Policy, Verb
from governance.catalog import Catalog
from governance.errors import AccessDenied, InvalidInput, InvalidName, shown
from governance.runs import Assurance, os_user


@dataclass(frozen=True)
class LocalUser:
    """The OS user of this process, the directory user it maps to, and where it runs."""

    os_user: str
    user: str
    host: str
    pid: int

    @property
    def origin(self) -> str:
        return f"OS user {self.os_user} on {self.host}, process {self.pid}"

    def identity(self, channel: str) -> Identity:
        return Identity(self.user, Assurance.VERIFIED, OS_USER, channel, self.origin)


@dataclass(frozen=True)
class DaemonLaunch:
    """What of Dagster's daemon launched a run (`kind`: a schedule, a sensor, an automation
    condition), the channel the ledger names, and which one (`via`: `schedule NAME`, `sensor NAME`)."""

    kind: str
    channel: str
    via: str


def local_user(os_users: Mapping[str, str]) -> LocalUser:
    name = os_user()
    return LocalUser(name, os_users.get(name, name), socket.gethostname(), os.getpid())


def record_local(catalog: Catalog, policy: Policy, local: LocalUser, channel: str, run_id: str) -> None:
    """The local user established for a run, as an `authenticate` entry its steps find by run id."""
    reason = f"{local.os_user} runs this process, which is {local.user} in the directory"
    decision = Decision(local.identity(channel), Verb.AUTHENTICATE, None, True, reason, directory=policy.source or None)
    record(catalog, decision, run_id)


def refuse_acting_as(
    catalog: Catalog,
    policy: Policy,
    local: LocalUser,
    user: str,
    channel: str,
    run_id: str | None = None,
    why: str = "needs {named}'s password (--password-stdin or CUSTODY_PASSWORD)",
) -> NoReturn:
    """Refuse, and record as the local user's attempt, a request made for `user` without `user`'s
    password (or for the reason `why` gives)."""
    named = ledger_actor(user)
    reason = (
        f"{local.os_user} runs this process, which is {local.user} in the directory: acting as {named} "
        + why.format(named=named)
    )
    decision = Decision(local.identity(channel), Verb.ACT_AS, None, False, reason, directory=policy.source or None)
    record(catalog, decision, run_id, details={"as": named})
    raise AccessDenied(f"denied: {reason}")


def daemon_launched(
    catalog: Catalog, policy: Policy, run_id: str, tagged: str | None, launch: DaemonLaunch
) -> Identity:
    """Who a run a tick of Dagster's daemon launched is for: the directory's service account that the
    OS user running the daemon maps to (`os_users`), verified so, recorded as an `authenticate` entry
    of the run. A requester tag may only name that account: a schedule, a sensor or an automation
    condition acts for nobody else."""
    local = local_user(policy.os_users)
    if tagged and tagged != local.user:
        why = f"is refused: {launch.kind}'s runs are for the account its daemon runs as"
        refuse_acting_as(catalog, policy, local, tagged, launch.channel, run_id, why)
    identity = local.identity(launch.channel)
    reason = (
        f"{local.os_user} runs Dagster's daemon, which is {local.user} in the directory: "
        f"a tick of {launch.via} launched the run"
    )
    decision = Decision(identity, Verb.AUTHENTICATE, None, True, reason, directory=policy.source or None)
    record(catalog, decision, run_id, details={"via": launch.via})
    return identity


def parse_os_users(value: str, variable: str = "CUSTODY_OS_USERS") -> dict[str, str]:
    """`OS_USER=DIRECTORY_USER` pairs separated by commas; empty for none (each OS user is the
    directory user of the same name)."""
    mapping: dict[str, str] = {}
    for pair in (part.strip() for part in value.split(",")):
        if not pair:
            continue
        name, equals, user = (side.strip() for side in pair.partition("="))
        where = f"{variable}: {shown(pair, 200)!r}"
        if not equals:
            raise InvalidInput(f"{where}: use OS_USER=DIRECTORY_USER, pairs separated by commas")
        if name in mapping:
            raise InvalidInput(f"{where}: OS user {name} is mapped twice")
        try:
            mapping[checked_name(name, "OS user")] = checked_name(user)
        except InvalidName as err:
            raise InvalidInput(f"{where}: {err}") from err
    return mapping


def os_users_value(mapping: Mapping[str, str]) -> str:
    """The one spelling a mapping is pinned in."""
    return ",".join(f"{name}={user}" for name, user in sorted(mapping.items()))
