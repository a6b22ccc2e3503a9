"""A topic's ACLs follow its asset's roles. Kafka has no group principals, so each member of the
producer group is allowed to write the topic, each member of the consumer group to read it (and to
use consumer groups named `<topic>-…`), Custody's landing account to read it, and nobody else
anything. Custody keeps these per-user entries in step with the directory at every apply, grant,
revoke and repair; each entry it adds or removes is a ledger entry, in the transaction that
records why."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlmodel import Session, col, select

from governance import ledger
from governance.access.directory import Directory
from governance.access.policy import Policy, Role, group_of
from governance.catalog import Catalog
from governance.catalog.api import utcnow
from governance.catalog.models import StreamTopicRow
from governance.errors import InvalidInput
from governance.spec import Spec
from governance.streams.broker import Acl, KafkaAdmin, TopicState
from governance.streams.settings import SCRAM, KafkaSettings

# What each role may do on its asset's topic.
TOPIC_OPERATIONS = {Role.PRODUCER: ("write", "describe"), Role.CONSUMER: ("read", "describe")}
GROUP_SEPARATOR = "-"
# How many unknown entries a refusal names.
SHOWN = 5


def governing(catalog: Catalog, policy: Policy, specs: Iterable[Spec]) -> list[Spec]:
    """The definitions of `specs` that land a topic, as the broker follows them: with approval on,
    those in force (an edit not applied yet changes no ACL); otherwise the files."""
    from governance.approval import in_force, spec_in_force

    specs = list(specs)
    if not policy.specs_approval:
        return [spec for spec in specs if spec.topic]
    rows = in_force(catalog, [spec.key for spec in specs])
    forced = (spec_in_force(rows[spec.key], spec.file) for spec in specs if spec.key in rows)
    return [spec for spec in forced if spec.topic]


def admin_for(specs: Iterable[Spec]) -> KafkaAdmin | None:
    """Custody's client of the Kafka cluster (CUSTODY_KAFKA_*), when any of `specs` lands a topic."""
    return KafkaAdmin(KafkaSettings.from_env()) if any(spec.topic for spec in specs) else None


def consumer_groups(topic: str) -> str:
    """The prefix of the consumer groups a topic's consumers may use."""
    return f"{topic}{GROUP_SEPARATOR}"


def wanted(spec: Spec, directory: Directory, lander: str) -> frozenset[Acl]:
    """The entries the asset's roles call for on its topic, as the directory has its groups now."""
    topic = spec.topic
    if topic is None:
        return frozenset()
    acls = {Acl(lander, "topic", topic, "literal", operation) for operation in ("read", "describe")}
    for role, operations in TOPIC_OPERATIONS.items():
        for user in directory.members_of(group_of(spec, role)):
            acls |= {Acl(user, "topic", topic, "literal", operation) for operation in operations}
            if role is Role.CONSUMER:
                acls.add(Acl(user, "group", consumer_groups(topic), "prefixed", "read"))
    return frozenset(acls)


def present(admin: KafkaAdmin, topic: str) -> frozenset[Acl]:
    """The entries the cluster has on the topic and on its consumers' groups."""
    return frozenset(acl for acl in _applying(admin, topic) if acl.name in (topic, consumer_groups(topic)))


def covering(admin: KafkaAdmin, topic: str) -> frozenset[Acl]:
    """The ALLOW entries on a prefix of the topic's name (or its groups'), or on every name: wider
    than the topic, so not its asset's to remove, yet they let someone in."""
    return frozenset(
        acl
        for acl in _applying(admin, topic)
        if acl.name not in (topic, consumer_groups(topic)) and acl.permission == "allow"
    )


def _applying(admin: KafkaAdmin, topic: str) -> set[Acl]:
    return admin.acls("topic", topic) | admin.acls("group", consumer_groups(topic))


@dataclass(frozen=True)
class TopicChange:
    """What keeping one topic in step changed on the cluster."""

    asset: str
    topic: str
    created: bool
    added: tuple[Acl, ...]
    removed: tuple[Acl, ...]

    @property
    def changed(self) -> bool:
        return self.created or bool(self.added or self.removed)


def keep_in_step(
    catalog: Catalog,
    admin: KafkaAdmin,
    directory: Directory,
    specs: Sequence[Spec],
    *,
    actor: str,
    assurance: str | None,
    because: str,
) -> list[TopicChange]:
    """Create each spec's topic when missing, set its partitions and retention, and make its ACLs
    what its roles call for. Every spec is checked before anything changes: a topic that is another
    asset's, that exists with entries its roles do not call for while Custody does not govern it
    yet, or that has more partitions than declared, is refused, naming why. Then each topic's
    changes are made and recorded, one topic at a time: a failure leaves the topics before it done
    and recorded."""
    lander = admin.settings.lander
    plans = [(spec, wanted(spec, directory, lander)) for spec in specs if spec.topic is not None]
    if not plans:
        return []
    with catalog.reading() as session:
        states = {spec.key: _checked(session, admin, spec, acls) for spec, acls in plans}
    _lander_credential(catalog, admin, actor=actor, assurance=assurance, because=because)
    changes = []
    for spec, acls in plans:
        with catalog.session() as session:
            change = _step(session, admin, spec, states[spec.key], acls)
            _record(session, [change], actor=actor, assurance=assurance, because=because)
        changes.append(change)
    return changes


def _checked(session: Session, admin: KafkaAdmin, spec: Spec, acls: frozenset[Acl]) -> TopicState | None:
    """The spec's topic as the cluster has it, once it is known the spec may govern it."""
    source, topic = spec.stream_source, spec.topic
    assert source is not None and topic is not None  # only streamed specs come here
    row = session.get(StreamTopicRow, topic)
    if row is not None and row.asset_key != str(spec.key):
        raise InvalidInput(
            f"{spec.file}: source.topic: topic {topic} is {row.asset_key}'s: a topic belongs to one asset"
        )
    state = admin.topic(topic)
    if state is None:
        return None
    if state.compacted:
        raise InvalidInput(f"{spec.file}: source.topic: {compacted(state, admin)}")
    if state.partitions > source.partitions:
        raise InvalidInput(
            f"{spec.file}: source.partitions: topic {topic} has {state.partitions} partitions; "
            "Kafka cannot take partitions away: declare at least as many"
        )
    foreign = sorted((present(admin, topic) - acls) | covering(admin, topic)) if row is None else []
    if foreign:
        named = "; ".join(str(acl) for acl in foreign[:SHOWN]) + ("; …" if len(foreign) > SHOWN else "")
        raise InvalidInput(
            f"{spec.file}: source.topic: topic {topic} exists on {admin.where} with ACLs its roles do not call "
            f"for ({named}): remove them, or name another topic"
        )
    return state


def compacted(state: TopicState, admin: KafkaAdmin) -> str:
    """Why a compacted topic is refused, at apply and at landing alike."""
    return (
        f"topic {state.name} on {admin.where} is compacted (cleanup.policy={state.cleanup_policy}): Kafka keeps "
        "only each key's newest record, so its offsets are no history to land once each; name a topic with "
        "cleanup.policy=delete"
    )


def _lander_credential(catalog: Catalog, admin: KafkaAdmin, *, actor: str, assurance: str | None, because: str) -> None:
    """The landing account's SCRAM credential, from CUSTODY_KAFKA_LANDER_PASSWORD, set once when the
    cluster has none, and recorded."""
    lander = admin.settings.lander
    if lander in admin.users_with_passwords():
        return
    with catalog.session() as session:
        details = {"user": lander, "mechanism": SCRAM, "cluster": admin.settings.bootstrap, "because": because}
        ledger.append(
            session, actor=actor, action=ledger.Action.STREAM_CREDENTIAL_SET, assurance=assurance, details=details
        )
        admin.set_password(lander, admin.settings.lander_password)


def _step(
    session: Session, admin: KafkaAdmin, spec: Spec, state: TopicState | None, acls: frozenset[Acl]
) -> TopicChange:
    source, topic = spec.stream_source, spec.topic
    assert source is not None and topic is not None  # only streamed specs come here
    if state is None:
        admin.create_topic(topic, source.partitions, source.retention_ms)
    else:
        if state.partitions < source.partitions:
            admin.grow_topic(topic, source.partitions)
        if state.retention_ms != source.retention_ms:
            admin.set_retention(topic, source.retention_ms)
    have = present(admin, topic)
    # A DENY entry someone set narrows access: it is left alone.
    removed = tuple(sorted(acl for acl in have - acls if acl.permission == "allow"))
    added = tuple(sorted(acls - have))
    admin.add_acls(added)
    admin.remove_acls(removed)
    if session.get(StreamTopicRow, topic) is None:
        session.add(StreamTopicRow(topic=topic, asset_key=str(spec.key), created_at=utcnow(), created=state is None))
    return TopicChange(str(spec.key), topic, state is None, added, removed)


def stale_topics(catalog: Catalog, now: Mapping[str, str | None]) -> list[StreamTopicRow]:
    """The topics Custody governs for the assets `now` names that are no longer theirs: `now` gives
    each asset's topic as its definition has it (None: retired, or no longer streamed)."""
    with catalog.reading() as session:
        rows = session.exec(select(StreamTopicRow).where(col(StreamTopicRow.asset_key).in_(list(now)))).all()
    return [row for row in rows if now[row.asset_key] != row.topic]


def let_go(
    catalog: Catalog,
    admin: KafkaAdmin,
    rows: Sequence[StreamTopicRow],
    *,
    actor: str,
    assurance: str | None,
    because: str,
) -> list[TopicChange]:
    """Remove every ALLOW entry on topics their asset no longer lands (retired, renamed), so that no
    one's access outlives the definition that granted it; the topics and their records stay."""
    changes = []
    for row in rows:
        removed = tuple(sorted(acl for acl in present(admin, row.topic) if acl.permission == "allow"))
        admin.remove_acls(removed)
        change = TopicChange(row.asset_key, row.topic, False, (), removed)
        with catalog.session() as session:
            _record(session, [change], actor=actor, assurance=assurance, because=because)
        changes.append(change)
    return changes


def _record(
    session: Session, changes: Iterable[TopicChange], *, actor: str, assurance: str | None, because: str
) -> None:
    events = []
    for change in changes:
        if change.created:
            events.append(
                ledger.Event(
                    actor,
                    ledger.Action.STREAM_TOPIC_CREATED,
                    change.asset,
                    None,
                    None,
                    {"topic": change.topic, "because": because},
                    assurance,
                )
            )
        for action, acls in (
            (ledger.Action.STREAM_ACL_ADDED, change.added),
            (ledger.Action.STREAM_ACL_REMOVED, change.removed),
        ):
            events += [
                ledger.Event(
                    actor, action, change.asset, None, None, {**_described(acl), "because": because}, assurance
                )
                for acl in acls
            ]
    if events:
        ledger.append_many(session, events)


def _described(acl: Acl) -> dict[str, str]:
    return {
        "user": acl.user,
        "resource": acl.resource,
        "name": acl.name,
        "pattern": acl.pattern,
        "operation": acl.operation,
        "permission": acl.permission,
    }
