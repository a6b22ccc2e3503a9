"""Owners approve membership: a role on an asset is membership of the group its spec names, so a
grant or a revoke changes that group in the directory, and both the decision and the change are in
the ledger. Also the explanations of who may do what, and why."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from governance import ledger
from governance.access.directory import Directory, checked_name
from governance.access.guard import enforce, ledger_actor
from governance.access.policy import ROLES_FOR, Decision, Identity, Policy, Role, Verb, group_of
from governance.access.views import AccessView, MembershipChange, RoleView
from governance.catalog import Catalog
from governance.errors import CustodyError, EnvironmentProblem, InvalidInput
from governance.spec import Spec

if TYPE_CHECKING:
    from governance.streams.broker import KafkaAdmin


def parse_role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError as err:
        raise InvalidInput(f"unknown role {value!r}: use owner, producer or consumer") from err


def change_role(
    catalog: Catalog,
    policy: Policy,
    identity: Identity,
    verb: Verb,
    role: Role,
    spec: Spec,
    user: str,
    specs: Iterable[Spec],
) -> MembershipChange:
    """Grant or revoke `role` on `spec` to `user`, as the owner `identity`. The group may hold roles
    on other assets too: the change is only allowed to someone who owns every one of them. The
    topics of the assets the group holds roles on follow at once."""
    from governance.streams.topics import admin_for, governing  # Kafka's client, for streams alone

    checked_name(user)
    group = group_of(spec, role)
    details = {"role": role.value, "group": group, "user": user}
    others = [s for s in specs if group in _groups(s) and s.key != spec.key]
    decision = policy.decide(identity, verb, spec)
    if decision.allowed:
        decision = _wider_than_owned(policy, decision, group, others) or decision
    enforce(catalog, decision, details=details)
    directory = policy.directory
    streamed = governing(catalog, policy, (spec, *others))
    kafka = admin_for(streamed)
    if kafka is not None:
        kafka.reachable()  # before the directory changes: a cluster that cannot follow changes nothing
    if verb is Verb.REVOKE and role is Role.OWNER and directory.members_of(group) == {user}:
        raise InvalidInput(
            f"{user} is the only owner of {spec.key} (group {group}): grant the role to another owner first"
        )
    if verb is Verb.GRANT:
        changed = directory.add_member(group, user)
    else:
        changed = directory.remove_member(group, user)
    shared = tuple(sorted(str(s.key) for s in others))
    with catalog.session() as session:
        ledger.append(
            session,
            actor=ledger_actor(identity.user),
            assurance=identity.assurance,
            asset=str(spec.key),
            action=ledger.Action.MEMBER_ADDED if verb is Verb.GRANT else ledger.Action.MEMBER_REMOVED,
            details={**details, "changed": changed, "also_affects": list(shared)},
        )
    if kafka is not None:
        _topics_follow(catalog, kafka, directory, streamed, identity, f"{verb.value} {role.value} {user}")
    still = verb is Verb.REVOKE and user in directory.members_of(group)
    return MembershipChange(verb.value, role.value, str(spec.key), group, user, changed, shared, still)


def _topics_follow(
    catalog: Catalog, kafka: KafkaAdmin, directory: Directory, streamed: list[Spec], identity: Identity, because: str
) -> None:
    """The topics' ACLs after a membership change, at once: a revoked consumer's next fetch is
    refused by the broker itself. A cluster that fails now leaves the directory changed: said so."""
    from governance.streams.topics import keep_in_step

    try:
        keep_in_step(
            catalog,
            kafka,
            directory,
            streamed,
            actor=ledger_actor(identity.user),
            assurance=identity.assurance,
            because=because,
        )
    except CustodyError as err:
        raise EnvironmentProblem(
            f"the directory changed ({because}), but the topics' ACLs did not: {err}; `custody repair` brings them in step"
        ) from err


def _wider_than_owned(policy: Policy, decision: Decision, group: str, others: list[Spec]) -> Decision | None:
    """A denial when changing `group` would reach beyond what the requester owns."""
    identity = decision.identity

    def denied(reason: str) -> Decision:
        return Decision(identity, decision.verb, decision.asset, False, reason)

    if group == policy.admin_group:
        return denied(f"{group} is the admin group: its members are managed in the directory, not by asset owners")
    for other in others:
        if not policy.decide(identity, decision.verb, other).allowed:
            return denied(
                f"{group} also holds a role on {other.key}, which {identity.user} does not own: "
                f"only an owner of every asset the group serves may change it"
            )
    return None


def _groups(spec: Spec) -> set[str]:
    return {group_of(spec, role) for role in Role}


def show(policy: Policy, spec: Spec) -> AccessView:
    directory = policy.directory
    verbs = [verb for verb in ROLES_FOR if _applies(verb, spec)]
    roles = tuple(
        RoleView(
            role.value,
            group_of(spec, role),
            tuple(sorted(directory.members_of(group_of(spec, role)))),
            tuple(verb.value for verb in verbs if role in ROLES_FOR[verb]),
        )
        for role in Role
    )
    return AccessView(
        str(spec.key),
        spec.body.classification.value,
        spec.body.pii,
        spec.body.classification in policy.require_verified,
        roles,
        policy.admin_group,
        tuple(sorted(directory.members_of(policy.admin_group))),
        policy.auditor_group,
        tuple(sorted(directory.members_of(policy.auditor_group))),
    )


def check(policy: Policy, spec: Spec, identity: Identity) -> list[Decision]:
    """What `identity` may do to the asset, each answer with its reason; nothing is recorded."""
    verbs = [verb for verb in ROLES_FOR if _applies(verb, spec)] + [Verb.PURGE]
    return [policy.decide(identity, verb, spec) for verb in verbs]


def explained(policy: Policy, spec: Spec, identity: Identity) -> dict[str, Any]:
    """`check`'s answers as `custody access check --json` and the API give them."""
    decisions = check(policy, spec, identity)
    data = [{"action": d.verb.value, "result": d.result, "reason": d.reason} for d in decisions]
    return {"asset": str(spec.key), "user": identity.user, "decisions": data}


def _applies(verb: Verb, spec: Spec) -> bool:
    if verb is Verb.INGEST:
        return spec.is_landing
    if verb is Verb.MATERIALIZE:
        return not spec.is_landing
    return True
