"""Watching the DropZone: which ready batches to ingest, as whom, and which to report as refused."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from governance import ledger
from governance.access.guard import ANONYMOUS, record
from governance.access.policy import Decision, Identity, Policy, Verb
from governance.batches import batch_meta, batch_stamp, ready_batches
from governance.catalog import Catalog
from governance.errors import BatchError, NotFound
from governance.runs import Assurance, RunRequest, record_failure
from governance.spec import Spec
from governance.zones import Lake


@dataclass(frozen=True)
class ReadyBatch:
    """A batch to ingest, for the requester its `_batch.yaml` names."""

    spec: Spec
    batch_id: str
    requested_by: str
    # What its `_READY` and `_batch.yaml` were when it was seen (`batch_stamp`).
    stamp: str

    @property
    def key(self) -> str:
        return f"{self.spec.key}/{self.batch_id}"

    @property
    def run_key(self) -> str:
        """One run per batch as its producer marked it ready: touching `_READY` after a failed run
        asks for another."""
        return f"{self.key}@{self.stamp}"


@dataclass(frozen=True)
class Refusal:
    """A batch that cannot be ingested as it stands, and why."""

    key: str
    reason: str


@dataclass(frozen=True)
class Watch:
    ready: tuple[ReadyBatch, ...]
    refused: tuple[Refusal, ...]
    # The refused batches, each with the stamp it had: reported once, again only once it changes.
    reported: frozenset[str]


def watch(
    catalog: Catalog, lake: Lake, policy: Policy, specs: Iterable[Spec], reported: frozenset[str], via: str
) -> Watch:
    """Every ready batch of the landing `specs` not yet ingested. A batch whose `_batch.yaml` cannot be
    read, names nobody, or names a user who may not ingest it is refused, and the refusal goes to the
    ledger, unless `reported` holds it as it stands. A batch that disappears meanwhile is left out."""
    ready: list[ReadyBatch] = []
    refused: list[Refusal] = []
    still: set[str] = set()
    for spec in (s for s in specs if s.takes_batches):
        done = catalog.ingested_batch_ids(spec.key)
        for batch_id in ready_batches(lake, spec.key):
            if batch_id in done:
                continue
            try:
                found = batch_stamp(lake, spec.key, batch_id)
            except NotFound:
                continue
            stamp = f"{spec.key}/{batch_id}@{found}"
            if stamp in reported:
                still.add(stamp)
                continue
            decision = _decide(lake, policy, spec, batch_id)
            if decision.allowed:
                ready.append(ReadyBatch(spec, batch_id, decision.identity.user, found))
                continue
            record(catalog, decision, details={"batch": batch_id, "via": via})
            refused.append(Refusal(f"{spec.key}/{batch_id}", decision.reason))
            still.add(stamp)
    return Watch(tuple(ready), tuple(refused), frozenset(still))


def _decide(lake: Lake, policy: Policy, spec: Spec, batch_id: str) -> Decision:
    """May the user the batch names ingest it? Whoever a `_batch.yaml` names is asserted, not proven."""
    try:
        meta = batch_meta(lake, spec.key, batch_id)
    except BatchError as err:
        return Decision(
            Identity(ANONYMOUS, Assurance.NONE),
            Verb.INGEST,
            str(spec.key),
            False,
            str(err),
            directory=policy.source or None,
        )
    named = meta.requested_by
    return policy.decide(
        Identity(named or ANONYMOUS, Assurance.ASSERTED if named else Assurance.NONE), Verb.INGEST, spec
    )


def next_batch(catalog: Catalog, lake: Lake, spec: Spec) -> str:
    """The oldest ready batch of `spec` not yet ingested."""
    done = catalog.ingested_batch_ids(spec.key)
    pending = [b for b in ready_batches(lake, spec.key) if b not in done]
    if not pending:
        raise NotFound(f"no ready batch of {spec.key} in {lake.drop_dir(spec.key)}")
    return pending[0]


def require_ready_batch(
    catalog: Catalog, lake: Lake, spec: Spec, request: RunRequest, details: Mapping[str, Any]
) -> None:
    """A run about to ingest the oldest ready batch of `spec` is refused when there is none, as its
    step would refuse it, but before any Spark work starts; the refusal is an `ingestion.failed` entry."""
    try:
        next_batch(catalog, lake, spec)
    except NotFound as err:
        record_failure(catalog, spec.key, request, ledger.Action.INGESTION_FAILED, err, details)
        raise
