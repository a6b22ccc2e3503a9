"""A real Apache Kafka broker for tests: `governance.streams.local`'s single node (KRaft, SCRAM,
ACLs) in a temporary folder, on loopback ports of its own. Its jars come from `make setup`; without
them the fixture fails, it never skips."""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer

from governance.streams.local import LocalBroker, running
from governance.streams.settings import KafkaSettings
from tests.ports import free_port

LANDER_PASSWORD = "lander-" + secrets.token_urlsafe(12)


@contextmanager
def running_kafka() -> Iterator[LocalBroker]:
    folder = Path(tempfile.mkdtemp(prefix="custody-kafka-"))
    broker = LocalBroker(folder / "kafka", free_port(), free_port(), "custody", secrets.token_urlsafe(18))
    try:
        with running(broker):
            yield broker
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def kafka_environment(broker: LocalBroker) -> dict[str, str]:
    """CUSTODY_KAFKA_* for Custody's clients of `broker`, the landing account's password among them."""
    return {**broker.environment, "CUSTODY_KAFKA_LANDER_PASSWORD": LANDER_PASSWORD}


def settings_of(broker: LocalBroker) -> KafkaSettings:
    return KafkaSettings.from_env(kafka_environment(broker))


def produce(
    broker: LocalBroker, user: str, password: str, topic: str, values: list[bytes], at: list[datetime] | None = None
) -> list[str]:
    """Send `values` to `topic` as `user`, with the record times `at` if given (else now); each
    refusal's error name, none when all were written."""
    producer = Producer({**settings_of(broker).client_config(user, password), "message.timeout.ms": 8000})
    errors: list[str] = []
    for value, when in zip(values, at or [None] * len(values), strict=True):
        producer.produce(
            topic,
            value,
            timestamp=int(when.timestamp() * 1000) if when else 0,
            on_delivery=lambda err, _: errors.append(err.name()) if err else None,
        )
    assert producer.flush(15) == 0, "records still unsent after 15 s"
    return errors


def produce_json(broker: LocalBroker, user: str, password: str, topic: str, records: list[dict]) -> list[str]:
    return produce(broker, user, password, topic, [json.dumps(record).encode() for record in records])


def consume(
    broker: LocalBroker, user: str, password: str, topic: str, group: str, count: int, seconds: float = 15
) -> list[bytes] | str:
    """Up to `count` records of `topic` from its beginning, read as `user` in `group`; the error's
    name when the broker refuses."""
    config = {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    consumer = Consumer({**settings_of(broker).client_config(user, password), **config})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                return error.name()
            got.append(message.value())
        return got
    finally:
        consumer.close()
