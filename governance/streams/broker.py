"""What Custody asks of a Kafka cluster, as its own principal: topics, ACLs and SCRAM credentials.
Every failure is one message naming the cluster and what was asked; none is retried here."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from governance.errors import AccessDenied, EnvironmentProblem, InvalidInput, SourceUnavailable
from governance.streams.settings import KafkaSettings

TIMEOUT_SECONDS = 15.0
SCRAM_ITERATIONS = 8192
# librdkafka's own lines (a broker's connection closed, retried) go to Python's logging, not stderr.
LOG = logging.getLogger("custody.kafka")


@dataclass(frozen=True, order=True)
class Acl:
    """One ACL entry, in Kafka's words lowercased: `user` is allowed (or denied) `operation` on the
    topic or group (`resource`) named `name` (`pattern` literal) or whose name begins with it (prefixed)."""

    user: str
    resource: str
    name: str
    pattern: str
    operation: str
    permission: str = "allow"
    host: str = "*"

    def __str__(self) -> str:
        place = f"{self.resource} {self.name}{'*' if self.pattern == 'prefixed' else ''}"
        deny = "" if self.permission == "allow" else " (denied)"
        return f"{self.user}: {self.operation} on {place}{deny}"


@dataclass(frozen=True)
class TopicState:
    """A topic as the cluster has it."""

    name: str
    partitions: int
    retention_ms: int | None
    cleanup_policy: str = "delete"

    @property
    def compacted(self) -> bool:
        """Whether Kafka keeps only each key's newest record: offsets that are no history."""
        return "compact" in self.cleanup_policy


class KafkaAdmin:
    """Custody's administrative client of one cluster."""

    def __init__(self, settings: KafkaSettings):
        self.settings = settings
        config: dict[str, Any] = {**settings.client_config(), "logger": LOG}
        self.client = self._wait(lambda: AdminClient(config), "set up a client (CUSTODY_KAFKA_*)")

    @property
    def where(self) -> str:
        return f"Kafka at {self.settings.bootstrap}"

    def reachable(self) -> None:
        """Return once the cluster answers Custody's principal; fail naming it otherwise."""
        self._wait(lambda: self.client.list_topics(timeout=TIMEOUT_SECONDS), "reach it")

    def topic(self, name: str) -> TopicState | None:
        """The topic `name`, or None when the cluster has none of that name."""
        metadata = self._wait(lambda: self.client.list_topics(topic=name, timeout=TIMEOUT_SECONDS), f"describe {name}")
        found = metadata.topics.get(name)
        if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return None
        if found.error is not None:
            raise self._failure(f"describe topic {name}", KafkaException(found.error))
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        configs = self._result(self.client.describe_configs([resource]), f"read topic {name}'s settings")[resource]
        retention, cleanup = configs.get("retention.ms"), configs.get("cleanup.policy")
        return TopicState(
            name,
            len(found.partitions),
            int(retention.value) if retention else None,
            cleanup.value if cleanup and cleanup.value else "delete",
        )

    def watermarks(self, name: str, partitions: int) -> dict[int, tuple[int, int]]:
        """Each partition's first offset Kafka still holds and its last stable offset: the end of
        what committed transactions (and producers without one) wrote, where an open transaction's
        records, which may yet be aborted, begin."""
        ends: dict[int, list[int]] = {partition: [] for partition in range(partitions)}
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
            asked = {TopicPartition(name, partition): spec for partition in range(partitions)}
            listed = self.client.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED)
            for place, info in self._result(listed, f"read {name}'s offsets").items():
                ends[place.partition].append(info.offset)
        return {partition: (low, high) for partition, (low, high) in ends.items()}

    def create_topic(self, name: str, partitions: int, retention_ms: int) -> None:
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=-1, config={"retention.ms": str(retention_ms)}
        )
        self._result(self.client.create_topics([topic], operation_timeout=TIMEOUT_SECONDS), f"create topic {name}")

    def grow_topic(self, name: str, partitions: int) -> None:
        self._result(self.client.create_partitions([NewPartitions(name, partitions)]), f"add partitions to {name}")

    def set_retention(self, name: str, retention_ms: int) -> None:
        entry = ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[entry])
        self._result(self.client.incremental_alter_configs([resource]), f"set {name}'s retention")

    def acls(self, resource: str, name: str) -> set[Acl]:
        """Every entry that applies to the topic or group `name`: on that name, on a prefix of it
        (prefixed), or on every name (`*`)."""
        query = _matching(ResourceType[resource.upper()], name, ResourcePatternType.MATCH)
        bindings = self._wait(lambda: self.client.describe_acls(query).result(), f"read ACLs of {name}")
        return {acl for binding in bindings if (acl := _acl(binding)) is not None}

    def add_acls(self, acls: Iterable[Acl]) -> None:
        bindings = [_binding(acl) for acl in acls]
        if bindings:
            self._result(self.client.create_acls(bindings), "add ACLs")

    def remove_acls(self, acls: Iterable[Acl]) -> None:
        filters = [_filter(acl) for acl in acls]
        if filters:
            self._result(self.client.delete_acls(filters), "remove ACLs")

    def set_password(self, user: str, password: str) -> None:
        """Give `user` a SCRAM credential for `password`; the cluster keeps only its salted hash."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        upsert = UserScramCredentialUpsertion(user, info, password.encode())
        self._result(self.client.alter_user_scram_credentials([upsert]), f"set {user}'s credential")

    def remove_password(self, user: str) -> None:
        deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
        self._result(self.client.alter_user_scram_credentials([deletion]), f"remove {user}'s credential")

    def users_with_passwords(self) -> set[str]:
        # Asked of every user, the answer is one future rather than one per user.
        answer = cast(Future, self.client.describe_user_scram_credentials())
        return set(self._wait(answer.result, "list SCRAM users"))

    def _result(self, futures: Mapping[Any, Any], what: str) -> dict[Any, Any]:
        return {key: self._wait(future.result, what) for key, future in futures.items()}

    def _wait(self, call: Any, what: str) -> Any:
        try:
            return call()
        except KafkaException as err:
            raise self._failure(what, err) from err

    def _failure(self, what: str, err: KafkaException) -> Exception:
        error = err.args[0] if err.args and isinstance(err.args[0], KafkaError) else None
        code = error.code() if error is not None else None
        reason = error.str() if error is not None else str(err)
        message = f"{self.where}: cannot {what}: {reason}"
        if code in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            KafkaError._AUTHENTICATION,
            KafkaError.SASL_AUTHENTICATION_FAILED,
        ):
            return AccessDenied(f"{message} (CUSTODY_KAFKA_USER must be a super user of the cluster)")
        if code in (KafkaError.INVALID_PARTITIONS, KafkaError.INVALID_CONFIG, KafkaError.INVALID_REQUEST):
            return InvalidInput(message)
        if code in (
            KafkaError._TRANSPORT,
            KafkaError._TIMED_OUT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError.REQUEST_TIMED_OUT,
        ):
            return SourceUnavailable(message)
        return EnvironmentProblem(message)


def _matching(resource: ResourceType, name: str | None, pattern: ResourcePatternType) -> AclBindingFilter:
    """A filter of every entry on `resource` `name` (any, for None) of `pattern`, whoever it is for."""
    # The stubs type the name, principal and host as str: None matches any, as Kafka's API has it.
    anyone = cast(str, None)
    return AclBindingFilter(resource, cast(str, name), pattern, anyone, anyone, AclOperation.ANY, AclPermissionType.ANY)


def _word(value: Enum | str | int) -> str:
    return value.name.lower() if isinstance(value, Enum) else str(value).lower()


def _acl(binding: AclBinding) -> Acl | None:
    if not binding.principal.startswith("User:"):
        return None
    return Acl(
        binding.principal.removeprefix("User:"),
        _word(binding.restype),
        binding.name,
        _word(binding.resource_pattern_type),
        _word(binding.operation),
        _word(binding.permission_type),
        binding.host,
    )


def _binding(acl: Acl) -> AclBinding:
    return AclBinding(*_parts(acl))


def _filter(acl: Acl) -> AclBindingFilter:
    return AclBindingFilter(*_parts(acl))


def _parts(
    acl: Acl,
) -> tuple[ResourceType, str, ResourcePatternType, str, str, AclOperation, AclPermissionType]:
    return (
        ResourceType[acl.resource.upper()],
        acl.name,
        ResourcePatternType[acl.pattern.upper()],
        f"User:{acl.user}",
        acl.host,
        AclOperation[acl.operation.upper()],
        AclPermissionType[acl.permission.upper()],
    )
