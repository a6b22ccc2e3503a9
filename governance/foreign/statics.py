"""Dataset and job events (OpenLineage's static lineage: what a dataset or a job is, said apart
from any run), kept as received, each once, in the transaction that keeps the run events of the
same requests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from governance.foreign.datasets import ident
from governance.foreign.events import StaticEvent
from governance.foreign.join import Sql, firsts, received_now

STORE = "INSERT INTO foreign_static_event {rows} ON CONFLICT DO NOTHING RETURNING kind, ident, event_time"
KINDS = {"dataset": "DatasetEvent", "job": "JobEvent"}


@dataclass(frozen=True)
class StaticReceived:
    """What became of one dataset or job event: stored, or already stored."""

    kind: str
    namespace: str
    name: str
    stored: bool
    # Dataset and job events are never refused once valid: said so to the endpoint, as a run event's answer is.
    refused: None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "eventType": KINDS[self.kind],
            self.kind: {"namespace": self.namespace, "name": self.name},
            "received": "stored" if self.stored else "already stored",
        }


def keep(db: Sql, events: Sequence[StaticEvent], reporter: str) -> list[StaticReceived]:
    """Keep the events not kept yet; what became of each, in order."""
    now = received_now()
    rows = [
        {
            "kind": event.kind,
            "namespace": event.namespace,
            "name": event.name,
            "ident": ident(event.namespace, event.name),
            "event_time": event.event_time,
            "received_at": now,
            "reporter": reporter,
            "body": json.dumps(event.body, separators=(",", ":")),
        }
        for event in events
    ]
    inserted = {tuple(row) for row in db.rows(STORE, rows)} if rows else set()
    new = firsts([(row["kind"], row["ident"], row["event_time"]) for row in rows], inserted)
    return [
        StaticReceived(event.kind, event.namespace, event.name, stored)
        for event, stored in zip(events, new, strict=True)
    ]
