"""Streams (seed 003): Kafka topics whose ACLs follow their asset's roles, and landing of an offset
range as one immutable version, committed with its offsets."""
