"""Who may set a password of the file directory, and the change itself, both in the ledger.

A user sets their own, proven by the current one; a verified admin sets anyone's. A directory that
holds no password yet takes its first ones from the operator of the home (who could write its file
anyway); from then on, that operator needs a password like everyone else.
"""

from __future__ import annotations

from governance import ledger
from governance.access.directory import FileDirectory, checked_name
from governance.access.guard import enforce, ledger_actor
from governance.access.passwords import hashed
from governance.access.policy import Decision, Identity, Policy, Verb
from governance.catalog import Catalog
from governance.errors import InvalidInput, NotFound
from governance.runs import Assurance


def set_password(catalog: Catalog, policy: Policy, identity: Identity, user: str, password: str) -> None:
    """Give `user` a new password, if `identity` may; the decision is recorded either way. An unknown
    user or a password too short or too long is refused before any decision, and changes nothing."""
    checked_name(user)
    directory = policy.directory
    if not isinstance(directory, FileDirectory):
        raise InvalidInput(f"{policy.source} keeps its own passwords: change {user}'s there")
    if user not in directory.users:
        raise NotFound(f"{directory.path}: no user {user!r} in the directory")
    digest = hashed(password, user)
    allowed, reason = _may_set(policy, directory, identity, user)
    enforce(
        catalog,
        Decision(identity, Verb.SET_PASSWORD, None, allowed, reason, directory=policy.source or None),
        details={"user": user},
    )
    directory.set_password_hash(user, digest)
    with catalog.session() as session:
        ledger.append(
            session,
            actor=ledger_actor(identity.user),
            action=ledger.Action.PASSWORD_CHANGED,
            assurance=identity.assurance,
            details={"user": user, "directory": policy.source},
        )


def _may_set(policy: Policy, directory: FileDirectory, identity: Identity, user: str) -> tuple[bool, str]:
    if identity.assurance is Assurance.VERIFIED and identity.user == user:
        return True, f"{user} changes their own password, proven by the current one"
    if identity.assurance is Assurance.VERIFIED and policy.admin_group in directory.groups_of(identity.user):
        return True, f"{identity.user} is a verified admin ({policy.admin_group})"
    if identity.assurance is Assurance.SYSTEM and not directory.verifies_passwords:
        return True, f"the directory holds no password yet: {identity.user}, who runs this home, sets the first ones"
    return False, (
        f"setting {user}'s password needs {user}'s current password, or a verified admin "
        f"({policy.admin_group}): {identity.user}'s identity is {identity.assurance}"
    )
