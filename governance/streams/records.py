"""The columns every landed record of a topic keeps beside its own fields: where in the topic it
was, and when Kafka took it."""

from __future__ import annotations

# Each column, the field of Spark's Kafka source it comes from, and its type as Spark names it.
KEPT_FROM = (
    ("kafka_partition", "partition", "integer"),
    ("kafka_offset", "offset", "long"),
    ("kafka_timestamp", "timestamp", "timestamp"),
)
KAFKA_COLUMNS = tuple(name for name, _, _ in KEPT_FROM)
KAFKA_TYPES = {name: kind for name, _, kind in KEPT_FROM}
TIMESTAMP = "kafka_timestamp"
