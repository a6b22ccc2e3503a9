"""A person's or service account's own SCRAM credential on the Kafka cluster, issued by Custody to
that user alone, once their identity is verified. The cluster keeps only a salted hash; Custody
keeps nothing and shows the password once. A new one replaces the old at once, and one whose user
has left the directory is removed by `custody repair`."""

from __future__ import annotations

import secrets

from governance import ledger
from governance.access.directory import Directory
from governance.access.guard import ledger_actor
from governance.access.policy import Identity
from governance.catalog import Catalog
from governance.catalog.ledgerfilter import LedgerFilter
from governance.errors import AccessDenied
from governance.runs import Assurance
from governance.streams.broker import KafkaAdmin
from governance.streams.local import CONTROLLER_USER
from governance.streams.settings import SCRAM

PASSWORD_BYTES = 32


def issue(catalog: Catalog, admin: KafkaAdmin, identity: Identity) -> str:
    """A new password for `identity`'s own principal, `User:<name>`; the decision is recorded. A
    credential Custody did not issue (a super user's, an operator's) is never replaced."""
    user = identity.user
    reason = None
    if identity.assurance is not Assurance.VERIFIED:
        reason = (
            "a Kafka credential is issued to a verified user only: run the command as yourself, or give your password"
        )
    elif user in (admin.settings.user, admin.settings.lander, CONTROLLER_USER):
        reason = f"{user} is an account of the cluster's or Custody's own; its credential comes from the environment"
    elif user in admin.users_with_passwords() and not _issued_before(catalog, user):
        reason = f"{user} has a credential on the cluster that Custody did not issue: an operator's to remove first"
    details = {"user": user, "mechanism": SCRAM, "cluster": admin.settings.bootstrap, **identity.recorded()}
    if reason is not None:
        with catalog.session() as session:
            ledger.append(
                session,
                actor=ledger_actor(user),
                action=ledger.Action.STREAM_CREDENTIAL_REFUSED,
                assurance=identity.assurance,
                details={**details, "allowed": False, "reason": reason},
            )
        raise AccessDenied(f"{ledger_actor(user)}: {reason}")
    password = secrets.token_urlsafe(PASSWORD_BYTES)
    with catalog.session() as session:
        ledger.append(
            session,
            actor=user,
            action=ledger.Action.STREAM_CREDENTIAL_SET,
            assurance=identity.assurance,
            details={**details, "allowed": True},
        )
        admin.set_password(user, password)
    return password


def issued(catalog: Catalog, admin: KafkaAdmin, identity: Identity) -> dict[str, str]:
    """`issue`'s password with what a client needs beside it to sign in."""
    return {
        "user": identity.user,
        "password": issue(catalog, admin, identity),
        "bootstrap": admin.settings.bootstrap,
        "security_protocol": admin.settings.security_protocol,
        "sasl_mechanism": SCRAM,
    }


def remove_departed(
    catalog: Catalog, admin: KafkaAdmin, directory: Directory, *, actor: str, assurance: str | None
) -> list[str]:
    """Remove every credential Custody issued whose user the directory no longer has, each removal
    recorded: who left can no longer sign in to the cluster, ACLs or none. Credentials Custody did
    not issue, and its own accounts', are left alone."""
    own = {admin.settings.user, admin.settings.lander, CONTROLLER_USER}
    departed = [
        user
        for user in sorted(admin.users_with_passwords() - own)
        if not directory.has_user(user) and _issued_before(catalog, user)
    ]
    for user in departed:
        with catalog.session() as session:
            ledger.append(
                session,
                actor=actor,
                action=ledger.Action.STREAM_CREDENTIAL_REMOVED,
                assurance=assurance,
                details={
                    "user": user,
                    "mechanism": SCRAM,
                    "cluster": admin.settings.bootstrap,
                    "because": "no longer in the directory",
                },
            )
            admin.remove_password(user)
    return departed


def _issued_before(catalog: Catalog, user: str) -> bool:
    """Whether Custody issued `user` a credential before: a ledger entry of theirs says so (the
    landing account's, set by whoever applied a spec, names its user in its details only)."""
    asked = LedgerFilter.asked(actor=user, action=ledger.Action.STREAM_CREDENTIAL_SET)
    with catalog.reading() as session:
        return any(ledger.entry_dict(entry)["details"].get("user") == user for entry in ledger.entries(session, asked))
