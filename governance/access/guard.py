"""Decisions enforced and recorded: each one is a ledger entry, allowed or denied, before anything happens."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from math import ceil
from typing import Any

from sqlmodel import col, select

from governance import ledger
from governance.access.directory import NAME
from governance.access.passwords import DEFAULT_DELAY_SECONDS
from governance.access.policy import Decision, Identity, Policy, Verb, coverage_problems
from governance.access.throttle import claim, device_budget, device_reference, succeeded, unclaimed, user_budget
from governance.catalog import Catalog
from governance.catalog.models import LedgerEntry
from governance.errors import AccessDenied, DirectoryUnavailable, InvalidInput, bounded_reason, error_summary
from governance.runs import Assurance
from governance.spec import Spec, SpecSet

ANONYMOUS = "anonymous"
CHECKS_ONLY = "asset checks only: they read counts, schemas and file hashes, never a row"


def ledger_actor(user: str) -> str:
    """The user as the ledger keeps it: a name that breaks the naming rules is kept escaped and cut
    short, so an attempt is recorded without carrying control characters into the catalog."""
    return user if NAME.fullmatch(user or "") else ascii(user)[:80]


Details = Mapping[str, Any] | None


def record(catalog: Catalog, decision: Decision, run_id: str | None = None, details: Details = None) -> None:
    record_all(catalog, [(decision, details)], run_id)


def record_all(
    catalog: Catalog,
    decisions: Sequence[tuple[Decision, Details]],
    run_id: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> None:
    """The decisions of one request, in one transaction (which other threads' may share). With
    `settings` (those they were made under), only if an admin has not changed them meanwhile: else
    SettingsChanged, and none is recorded."""
    catalog.record(decision_entries(decisions, run_id), settings)


def decision_entries(decisions: Sequence[tuple[Decision, Details]], run_id: str | None = None) -> list[ledger.Event]:
    """The ledger entries of `decisions`, each with its details."""
    return [
        ledger.Event(
            actor=ledger_actor(decision.identity.user),
            action=decision.verb.value,
            asset=decision.asset,
            version=decision.version,
            run_id=run_id,
            assurance=decision.identity.assurance,
            details={
                "result": decision.result,
                "reason": bounded_reason(decision.reason),
                "role": decision.role,
                **decision.identity.recorded(),
                **(details or {}),
                **({"directory": decision.directory} if decision.directory else {}),
            },
        )
        for decision, details in decisions
    ]


def enforce(
    catalog: Catalog,
    decision: Decision,
    run_id: str | None = None,
    details: Details = None,
    settings: Mapping[str, str] | None = None,
) -> Decision:
    """Record the decision (see record_all for `settings`); a denial then raises AccessDenied with its reason."""
    return enforce_all(catalog, [(decision, details)], run_id, settings)


def enforce_all(
    catalog: Catalog,
    decisions: Sequence[tuple[Decision, Details]],
    run_id: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> Decision:
    """Record the decisions up to the first denial, which then raises; else return the first."""
    denied = next((i for i, (decision, _) in enumerate(decisions) if not decision.allowed), None)
    record_all(catalog, decisions if denied is None else decisions[: denied + 1], run_id, settings)
    if denied is not None:
        raise AccessDenied(f"denied: {decisions[denied][0].reason}")
    return decisions[0][0]


def authorize(
    catalog: Catalog,
    policy: Policy,
    identity: Identity,
    verb: Verb,
    spec: Spec | None,
    *,
    version: int | None = None,
    run_id: str | None = None,
    details: Mapping[str, Any] | None = None,
    touching: Sequence[Spec] = (),
    settings: Mapping[str, str] | None = None,
) -> Decision:
    """Decide, record (see record_all for `settings`), and raise AccessDenied unless allowed."""
    return enforce(catalog, policy.decide(identity, verb, spec, version, touching), run_id, details, settings)


def authorize_step(
    catalog: Catalog,
    policy: Policy,
    identity: Identity,
    spec: Spec,
    inputs: Sequence[Spec] | None,
    run_id: str | None,
    versions: Mapping[str, int] | None = None,
    details: Details = None,
) -> None:
    """A run's step as it starts, in one transaction: ingesting `spec` (no `inputs`) or
    materializing it from `inputs` at their pinned `versions` (by asset), and only as its
    definition in force. Recorded up to the first denial, which raises AccessDenied."""
    if inputs is None:
        decisions = [(policy.decide(identity, Verb.INGEST, spec), details)]
    else:
        decisions = materialization_decisions(policy, identity, spec, inputs, versions, details)
    enforce_all(catalog, [*decisions, *in_force_denials(catalog, policy, identity, [spec], details)], run_id)


def materialization_decisions(
    policy: Policy,
    identity: Identity,
    spec: Spec,
    inputs: Sequence[Spec],
    versions: Mapping[str, int] | None = None,
    details: Details = None,
) -> list[tuple[Decision, Details]]:
    decision = policy.decide(identity, Verb.MATERIALIZE, spec)
    if decision.allowed:
        try:
            problems = [problem.message for problem in coverage_problems(spec, inputs, policy.directory)]
        except DirectoryUnavailable as err:
            problems = [error_summary(err)]
        if problems:
            reason = "; ".join(problems)
            decision = Decision(
                identity, Verb.MATERIALIZE, str(spec.key), False, reason, directory=policy.source or None
            )
    reads = [
        (
            policy.decide(identity, Verb.READ, source, (versions or {}).get(str(source.key))),
            {"for": str(spec.key), **(details or {})},
        )
        for source in inputs
    ]
    return [(decision, details), *reads]


def authorize_run(
    catalog: Catalog,
    policy: Policy,
    identity: Identity,
    specs: SpecSet,
    writes: Sequence[Spec],
    checks: Sequence[Spec],
    run_id: str,
    details: Details = None,
) -> None:
    """A run as it is submitted, all its assets at once: each landing asset it `writes` ingested,
    each integration asset materialized from its inputs. A run that only `checks` assets is an audit
    anyone may ask for: the checks read counts, schemas and file hashes, never a row. Recorded up to
    the first denial, which raises AccessDenied."""
    details = {"at": "submission", **(details or {})}
    decisions: list[tuple[Decision, Details]] = []
    for spec in writes:
        if spec.is_landing:
            decisions.append((policy.decide(identity, Verb.INGEST, spec), details))
        else:
            inputs = [specs[key] for key in spec.inputs]
            decisions.extend(materialization_decisions(policy, identity, spec, inputs, details=details))
    decisions.extend(in_force_denials(catalog, policy, identity, writes, details))
    decisions.extend(
        (Decision(identity, Verb.READ, str(spec.key), True, CHECKS_ONLY, directory=policy.source or None), details)
        for spec in checks
    )
    if decisions:
        enforce_all(catalog, decisions, run_id)


def in_force_denials(
    catalog: Catalog, policy: Policy, identity: Identity, writes: Sequence[Spec], details: Details = None
) -> list[tuple[Decision, Details]]:
    """With approval on, a denial for each spec to be written whose file is not the definition in force."""
    if not policy.specs_approval or not writes:
        return []
    from governance.approval import in_force, not_in_force
    from governance.inforce import pending_reason

    pending = not_in_force(writes, in_force(catalog, [spec.key for spec in writes]))
    return [
        (
            Decision(
                identity,
                Verb.INGEST if spec.is_landing else Verb.MATERIALIZE,
                str(spec.key),
                False,
                pending_reason(spec.key, pending[spec.key]),
                directory=policy.source or None,
            ),
            details,
        )
        for spec in writes
        if spec.key in pending
    ]


def authenticate(
    catalog: Catalog,
    policy: Policy,
    user: str,
    password: str,
    run_id: str | None = None,
    delay: float = DEFAULT_DELAY_SECONDS,
    details: Details = None,
    *,
    device: str | None = None,
    refusals: Callable[[Decision, Mapping[str, Any]], None] | None = None,
) -> Identity:
    """Check the password with the policy's directory; the attempt is a ledger entry either way,
    with `details` (the channel, a session). After failed checks in a row from the same budget (the
    client's own when it holds a `device` token of `user`'s, else the one all other clients share:
    governance.access.throttle), the next is refused unchecked until its delay has passed. A refusal
    goes to `refusals` when given (the service's, which records a flood's repeats as one entry),
    else to the ledger at once; either way it raises AccessDenied."""
    said = {**(details or {}), **({"device": device_reference(device)} if device else {})}
    how = (policy.directory.method, str(said.get("channel", "")), str(said.get("origin", "")))
    budget = device_budget(device) if device else user_budget(user)

    def decided(allowed: bool, reason: str, verb: Verb = Verb.AUTHENTICATE) -> Identity:
        identity = Identity(user, Assurance.VERIFIED if allowed else Assurance.NONE, *how)
        decision = Decision(identity, verb, None, allowed, reason, directory=policy.source or None)
        if allowed or refusals is None:
            enforce(catalog, decision, run_id, said)
        else:
            refusals(decision, said)
            raise AccessDenied(f"denied: {reason}")
        return identity  # a denial has raised

    wait = claim(catalog, budget, delay)
    if wait > 0:
        reason = f"{ledger_actor(user)}: too many failed logins in a row; try again in {ceil(wait)} s"
        return decided(False, reason, Verb.AUTHENTICATE_DELAYED)
    try:
        verified = policy.directory.authenticate(user, password)
    except (DirectoryUnavailable, InvalidInput) as err:  # a bad name, or a directory that holds no passwords
        unclaimed(catalog, budget)
        return decided(False, error_summary(err))
    if verified:
        succeeded(catalog, budget)
    reason = "password checked by the directory" if verified else "unknown user or wrong password"
    return decided(verified, f"{ledger_actor(user)}: {reason}")


def run_identity(catalog: Catalog, run_id: str | None, requested_by: str | None) -> Identity:
    """Who a run is for, and how we know: verified when the CLI established them for this very run
    (an `authenticate` entry with its run id: a password, or the OS user running it) or they
    launched it signed in to the UI or through the API (a `session` entry), else asserted by the
    run's tag. A verified identity keeps the method and channel that established it."""
    if not requested_by:
        return Identity(ANONYMOUS, Assurance.NONE)
    found = _verified_for_run(catalog, run_id, requested_by) if run_id else None
    if found is not None:
        return Identity(
            requested_by, Assurance.VERIFIED, *(str(found.get(k, "")) for k in ("method", "channel", "origin"))
        )
    return Identity(requested_by, Assurance.ASSERTED)


def launcher_of(catalog: Catalog, key: str) -> Identity | None:
    """Who the newest allowed, verified `session` entry recorded under `key` names, as it verified
    them: the signed-in user who last launched or re-executed the backfill `key`."""
    with catalog.reading() as session:
        found = session.exec(
            select(LedgerEntry)
            .where(
                LedgerEntry.run_id == key,
                LedgerEntry.action == Verb.SESSION.value,
                LedgerEntry.assurance == Assurance.VERIFIED.value,
            )
            .order_by(col(LedgerEntry.seq).desc())
        )
        allowed = ((entry.actor, json.loads(entry.details)) for entry in found)
        newest = next(
            (
                (actor, details)
                for actor, details in allowed
                if details.get("result") == "allowed" and details.get("backfill") == key
            ),
            None,
        )
    if newest is None:
        return None
    actor, details = newest
    return Identity(actor, Assurance.VERIFIED, *(str(details.get(k, "")) for k in ("method", "channel", "origin")))


def _verified_for_run(catalog: Catalog, run_id: str, user: str) -> dict[str, Any] | None:
    """The details of the entry that verified `user` for the run, if one did."""
    with catalog.reading() as session:
        found = session.exec(
            select(LedgerEntry)
            .where(
                LedgerEntry.run_id == run_id,
                LedgerEntry.actor == user,
                col(LedgerEntry.action).in_([Verb.AUTHENTICATE.value, Verb.SESSION.value]),
                LedgerEntry.assurance == Assurance.VERIFIED.value,
            )
            .order_by(col(LedgerEntry.seq))
        )
        allowed = (json.loads(entry.details) for entry in found)
        return next((details for details in allowed if details.get("result") == "allowed"), None)
