"""Access decisions: who may do what to an asset, from the roles its spec names and the directory.

Deny by default: a user holds a role only as a member of the group the spec names for it, and a
directory that cannot be asked denies. Every decision says why, in words an auditor can read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from governance.access.directory import Directory, checked_name
from governance.errors import DirectoryUnavailable, InvalidInput, InvalidName, SpecProblem
from governance.runs import Assurance
from governance.spec import Classification, Spec, sensitive_inputs


class Role(StrEnum):
    OWNER = "owner"
    PRODUCER = "producer"
    CONSUMER = "consumer"


class Verb(StrEnum):
    """What a user asks to do; also the ledger action of the decision."""

    READ = "read"
    INGEST = "ingest"
    MATERIALIZE = "materialize"
    GRANT = "grant"
    REVOKE = "revoke"
    STATUS = "status"
    PURGE = "purge"
    AUTHENTICATE = "authenticate"
    # A login refused unchecked, for coming before the delay after failed ones had passed.
    AUTHENTICATE_DELAYED = "authenticate.delayed"
    SETTINGS = "settings"
    APPLY = "spec.apply"
    FEED_DELETE = "feed.delete"
    SET_PASSWORD = "password.set"
    # A request made in a signed-in session of the service: a run launched from the UI, for its user.
    SESSION = "session"
    # The ledger read, which only auditors and admins may.
    LEDGER_READ = "ledger.read"
    # A command given for another user than the one running it, without that user's password: refused.
    ACT_AS = "act-as"
    # OpenLineage events posted to the service by a tool Custody does not run.
    LINEAGE_REPORT = "lineage.report"
    # A change asked of Dagster through its UI that is no launch: a sensor or schedule started or
    # stopped, runs terminated, Dagster's records of runs or assets changed.
    CONTROL = "control"


ROLES_FOR: Mapping[Verb, tuple[Role, ...]] = {
    Verb.READ: (Role.CONSUMER, Role.PRODUCER, Role.OWNER),
    Verb.INGEST: (Role.PRODUCER, Role.OWNER),
    Verb.MATERIALIZE: (Role.PRODUCER, Role.OWNER),
    Verb.GRANT: (Role.OWNER,),
    Verb.REVOKE: (Role.OWNER,),
    Verb.STATUS: (Role.OWNER,),
    Verb.APPLY: (Role.OWNER,),
}


PHRASES: Mapping[Verb, str] = {
    Verb.STATUS: "change the status of",
    Verb.GRANT: "grant roles on",
    Verb.REVOKE: "revoke roles on",
    Verb.SETTINGS: "change the policy settings",
    Verb.APPLY: "apply the spec of",
    Verb.FEED_DELETE: "delete feed archives",
    Verb.CONTROL: "change what Dagster runs or keeps",
}
# What only the admin group may do.
ADMIN_VERBS = frozenset({Verb.PURGE, Verb.SETTINGS, Verb.FEED_DELETE, Verb.CONTROL})
# What changes who may do what, or deletes: never on a name given without proof, whatever the
# classification. Each with the words a refusal uses.
VERIFIED_ALWAYS: Mapping[Verb, str] = {
    Verb.PURGE: "purging",
    Verb.SETTINGS: "changing a policy setting",
    Verb.FEED_DELETE: "deleting feed archives",
    Verb.GRANT: "granting a role",
    Verb.REVOKE: "revoking a role",
    Verb.STATUS: "changing a version's status",
    Verb.APPLY: "applying a spec",
    Verb.CONTROL: "changing what Dagster runs or keeps",
    Verb.LEDGER_READ: "reading the ledger",
}


# What establishes a verified identity, as a refusal says it.
VERIFIED_BY = "a command run as yourself, a password the directory checks, or a signed-in session"
# The method of an identity the operating system established: the OS user running the process.
OS_USER = "os-user"


@dataclass(frozen=True)
class Identity:
    """A user and how we know it is them: the assurance, the method that established it (a password,
    an LDAP bind, a gateway, the OS user running the process), the channel the request came by (cli,
    python, ui, api, sensor, schedule) and, for a local process, where it runs."""

    user: str
    assurance: Assurance
    method: str = ""
    channel: str = ""
    origin: str = ""

    @classmethod
    def asserted(cls, user: str) -> Identity:
        return cls(user, Assurance.ASSERTED)

    def recorded(self) -> dict[str, str]:
        """How the identity was established, as each ledger entry of its decisions keeps it."""
        return {name: value for name in ("method", "channel", "origin") if (value := getattr(self, name))}


@dataclass(frozen=True)
class Decision:
    """The answer to one request, with the reason an auditor reads."""

    identity: Identity
    verb: Verb
    asset: str | None
    allowed: bool
    reason: str
    version: int | None = None
    role: str | None = None
    directory: str | None = None  # which directory answered, as pinned

    @property
    def result(self) -> str:
        return "allowed" if self.allowed else "denied"


@dataclass(frozen=True)
class Policy:
    """The directory, the admin and auditor groups, and which classifications need a verified
    identity; `source` names the directory as the catalog pins it."""

    directory: Directory
    admin_group: str = "custody-admins"
    require_verified: frozenset[Classification] = frozenset({Classification.RESTRICTED})
    source: str = ""
    auditor_group: str = "auditors"
    # Whose service accounts may post OpenLineage events to the service.
    lineage_group: str = "lineage-reporters"
    # Runs use only the specs an owner applied.
    specs_approval: bool = True
    # OS user names and the directory users they are; an OS user not listed is the user of the same name.
    os_users: Mapping[str, str] = field(default_factory=dict)

    def decide(
        self,
        identity: Identity,
        verb: Verb,
        spec: Spec | None,
        version: int | None = None,
        touching: Iterable[Spec] = (),
    ) -> Decision:
        """Whether `identity` may `verb` the asset of `spec` (a purge: the assets it is `touching`)."""
        asset = str(spec.key) if spec else None

        def answer(allowed: bool, reason: str, role: str | None = None) -> Decision:
            return Decision(identity, verb, asset, allowed, reason, version, role, self.source or None)

        try:
            checked_name(identity.user)
        except InvalidName as err:
            return answer(False, str(err))
        if identity.assurance is Assurance.NONE:
            return answer(False, "the request names no user: say who asks (custody/requested_by run tag, --as or --by)")
        unverified = self._needs_verified(identity, [spec] if spec else list(touching))
        if unverified:
            return answer(
                False,
                f"{unverified.key} is {unverified.body.classification}: {verb} needs a verified identity "
                f"({VERIFIED_BY}); {identity.user}'s is {identity.assurance}",
            )
        decision = self._decide_role(identity, verb, spec, answer)
        if decision.allowed and verb in VERIFIED_ALWAYS and identity.assurance is not Assurance.VERIFIED:
            return answer(
                False,
                f"{decision.reason}, but {VERIFIED_ALWAYS[verb]} needs a verified identity ({VERIFIED_BY}); "
                f"{identity.user}'s is {identity.assurance}",
            )
        return decision

    def _decide_role(self, identity: Identity, verb: Verb, spec: Spec | None, answer) -> Decision:
        asset = str(spec.key) if spec else None
        if verb in ADMIN_VERBS:
            return self._admin(identity, verb, answer)
        if verb is Verb.LEDGER_READ:
            return self._auditor(identity, answer)
        if spec is None:
            return answer(False, "no spec declares the asset, so no one holds a role on it")
        try:
            groups = self.directory.groups_of(identity.user)
        except DirectoryUnavailable as err:
            return answer(False, str(err))
        held = roles_held(spec, groups)
        for role in ROLES_FOR[verb]:
            if role in held:
                return answer(True, f"{identity.user} is in {group_of(spec, role)}, {role} of {asset}", role.value)
        needed = " or ".join(f"{role} ({group_of(spec, role)})" for role in ROLES_FOR[verb])
        return answer(False, f"{identity.user} may not {PHRASES.get(verb, verb)} {asset}: it needs {needed}")

    def holds_role(self, identity: Identity, verb: Verb, spec: Spec | None) -> Decision:
        """Whether `identity` holds a role `verb` needs on the asset of `spec`, whatever its
        assurance: what another tool's report that `identity` read the asset is held to."""

        def answer(allowed: bool, reason: str, role: str | None = None) -> Decision:
            return Decision(
                identity, verb, str(spec.key) if spec else None, allowed, reason, None, role, self.source or None
            )

        try:
            checked_name(identity.user)
        except InvalidName as err:
            return answer(False, str(err))
        return self._decide_role(identity, verb, spec, answer)

    def decide_apply(self, identity: Identity, in_force: Spec | None, spec: Spec) -> Decision:
        """Whether `identity` may put `spec` in force: an owner of the definition in force, or for a
        new asset, an owner it names or an admin."""
        decision = self.decide(identity, Verb.APPLY, in_force or spec)
        if decision.allowed or in_force is not None or self._needs_verified(identity, [spec]):
            return decision
        admin = self.decide(identity, Verb.SETTINGS, None)
        if not admin.allowed:
            return replace(decision, reason=f"{decision.reason}, or for a new asset the admin group {self.admin_group}")
        return replace(
            decision, verb=Verb.APPLY, allowed=True, reason=f"{admin.reason}, and {spec.key} is new", role="admin"
        )

    def _needs_verified(self, identity: Identity, specs: Iterable[Spec]) -> Spec | None:
        """The first asset whose classification asks for a verified identity that this one lacks."""
        if identity.assurance is Assurance.VERIFIED:
            return None
        return next((s for s in specs if s.body.classification in self.require_verified), None)

    def _admin(self, identity: Identity, verb: Verb, answer) -> Decision:
        try:
            groups = self.directory.groups_of(identity.user)
        except DirectoryUnavailable as err:
            return answer(False, str(err))
        if self.admin_group in groups:
            return answer(True, f"{identity.user} is in {self.admin_group}, the admin group", "admin")
        return answer(
            False, f"{identity.user} may not {PHRASES.get(verb, verb)}: it needs the admin group {self.admin_group}"
        )

    def _auditor(self, identity: Identity, answer) -> Decision:
        try:
            groups = self.directory.groups_of(identity.user)
        except DirectoryUnavailable as err:
            return answer(False, str(err))
        member = next((group for group in (self.auditor_group, self.admin_group) if group in groups), None)
        if member is not None:
            return answer(True, f"{identity.user} reads the ledger as a member of {member}")
        return answer(
            False,
            f"{identity.user} may not read the ledger: it needs the auditor group ({self.auditor_group}) "
            f"or the admin group ({self.admin_group})",
        )


def group_of(spec: Spec, role: Role) -> str:
    return getattr(spec.body.roles, role.value)


def roles_held(spec: Spec, groups: frozenset[str]) -> tuple[Role, ...]:
    return tuple(role for role in Role if group_of(spec, role) in groups)


def parse_classifications(value: str | None, variable: str = "CUSTODY_REQUIRE_VERIFIED") -> frozenset[Classification]:
    """A comma-separated list of classifications; `none` or the empty string for none."""
    names = [part.strip() for part in (value or "").split(",") if part.strip() and part.strip() != "none"]
    known = {c.value for c in Classification}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InvalidInput(
            f"{variable}={value!r}: unknown classification {', '.join(unknown)}; use {', '.join(known)} or none"
        )
    return frozenset(Classification(name) for name in names)


ROLES = ("owner", "producer", "consumer")


def missing_groups(specs: Iterable[Spec], directory: Directory) -> list[SpecProblem]:
    """Each role of the specs that names a group the directory does not have (a typo names nobody,
    and would be applied as a role no one holds); the directory asked once a group."""
    known: dict[str, bool] = {}
    problems = []
    for spec in specs:
        for role in ROLES:
            group = getattr(spec.body.roles, role)
            if group not in known:
                known[group] = directory.has_group(group)
            if not known[group]:
                field = f"roles.{role}"
                said = f"{group}: the directory has no such group"
                problems.append(SpecProblem(str(spec.file), field, said, spec.line_of(field)))
    return problems


def coverage_problems(spec: Spec, inputs: Iterable[Spec], directory: Directory) -> list[SpecProblem]:
    """Everyone who may read `spec` may read each of its pii or higher inputs: its consumer group's
    members are all in each such input's consumer group (the same group covers itself)."""
    mine = spec.body.roles.consumer
    problems = []
    for source in sensitive_inputs(spec, inputs):
        theirs = source.body.roles.consumer
        if theirs == mine:
            continue
        uncovered = sorted(directory.members_of(mine) - directory.members_of(theirs))
        if uncovered:
            why = "pii" if source.body.pii else source.body.classification.value
            problems.append(
                SpecProblem(
                    str(spec.file),
                    "roles.consumer",
                    f"{mine} is not covered by {theirs}, consumer group of {source.key} ({why}): "
                    f"{', '.join(uncovered)} could read what {source.key} does not let them",
                )
            )
    return problems
