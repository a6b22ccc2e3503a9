"""Watching the DropZone: which ready batches to ingest, as whom, and which to report as refused.

A batch is ingested for the OS user who owns its folder, as the `os_users` policy setting maps it to
the directory: a producer can drop a batch only as themselves. So that the owner is also who wrote
its files, every file of the batch must be theirs, writable by them alone, and unchanged since the
batch was marked ready (`batch_owner`). `requested_by` in `_batch.yaml` may name the owner too, and
a batch where it names someone else is refused."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from governance import ledger
from governance.access.guard import ANONYMOUS, enforce, record
from governance.access.policy import Decision, Identity, Policy, Verb
from governance.batches import batch_meta, batch_owner, batch_stamp, ready_batches
from governance.catalog import Catalog
from governance.errors import BatchError, NotFound
from governance.runs import Assurance, RunRequest, record_failure
from governance.spec import Spec
from governance.zones import Lake

# How a batch's requester is known: the owner of its folder; and the channel of the sensor's runs.
FOLDER_OWNER = "folder-owner"
SENSOR_CHANNEL = "sensor"


@dataclass(frozen=True)
class ReadyBatch:
    """A batch to ingest, for the owner of its folder."""

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
    read or names someone other than the owner of its folder, whose files are not all its owner's
    alone or changed after it was marked ready, or whose owner may not ingest it, is refused, and the
    refusal goes to the ledger, unless `reported` holds it as it stands. A batch that disappears
    meanwhile is left out."""
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
            try:
                decision = _decide(lake, policy, spec, batch_id)
            except NotFound:
                continue
            if decision.allowed:
                ready.append(ReadyBatch(spec, batch_id, decision.identity.user, found))
                continue
            record(catalog, decision, details={"batch": batch_id, "via": via})
            refused.append(Refusal(f"{spec.key}/{batch_id}", decision.reason))
            still.add(stamp)
    return Watch(tuple(ready), tuple(refused), frozenset(still))


def _decide(lake: Lake, policy: Policy, spec: Spec, batch_id: str) -> Decision:
    """May the batch's requester ingest it? The requester is the owner of the batch's folder, which
    the producer cannot make anyone else: `_batch.yaml` can only agree with it."""
    try:
        meta = batch_meta(lake, spec.key, batch_id)
        identity = batch_requester(lake, policy, spec, batch_id)
    except BatchError as err:
        anonymous = Identity(ANONYMOUS, Assurance.NONE, channel=SENSOR_CHANNEL)
        return Decision(anonymous, Verb.INGEST, str(spec.key), False, str(err), directory=policy.source or None)
    named = meta.requested_by
    if named is not None and named != identity.user:
        reason = (
            f"the batch names {named}, but its folder belongs to {identity.origin.removeprefix('folder of ')}, "
            f"{identity.user} in the directory: a batch is ingested for the owner of its folder"
        )
        return Decision(identity, Verb.INGEST, str(spec.key), False, reason, directory=policy.source or None)
    return policy.decide(identity, Verb.INGEST, spec)


def batch_requester(lake: Lake, policy: Policy, spec: Spec, batch_id: str) -> Identity:
    """Who a batch is ingested for: the OS user owning its folder and every file in it, as the
    `os_users` setting maps it; BatchError when its files break that rule (`batch_owner`)."""
    owner = batch_owner(lake, spec.key, batch_id)
    user = policy.os_users.get(owner, owner)
    return Identity(user, Assurance.VERIFIED, FOLDER_OWNER, SENSOR_CHANNEL, f"folder of OS user {owner}")


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


def sensed_batch(
    catalog: Catalog, lake: Lake, policy: Policy, spec: Spec, batch_id: str, run_id: str, tagged: str | None
) -> Identity:
    """Who a run that a tick of the DropZone sensor launched for a batch of `spec` is for: the owner
    of the batch's folder, as `batch_requester` establishes it now, recorded as an `authenticate`
    entry of the run. A batch that establishes nobody any more, or whose owner the run's requester
    tag does not name, is refused, and the refusal recorded."""
    try:
        identity = batch_requester(lake, policy, spec, batch_id)
    except (BatchError, NotFound) as err:
        anonymous = Identity(ANONYMOUS, Assurance.NONE, channel=SENSOR_CHANNEL)
        enforce(catalog, Decision(anonymous, Verb.AUTHENTICATE, str(spec.key), False, str(err)), run_id)
        raise
    if tagged != identity.user:
        reason = (
            f"the run names {tagged or 'nobody'}, but batch {batch_id}'s folder belongs to "
            f"{identity.origin.removeprefix('folder of ')}, {identity.user} in the directory"
        )
        enforce(catalog, Decision(identity, Verb.AUTHENTICATE, str(spec.key), False, reason), run_id)
    reason = (
        f"batch {batch_id}'s folder belongs to {identity.origin.removeprefix('folder of ')}, {identity.user} "
        "in the directory: a tick of the DropZone sensor launched the run"
    )
    decision = Decision(identity, Verb.AUTHENTICATE, str(spec.key), True, reason, directory=policy.source or None)
    enforce(catalog, decision, run_id, {"batch": batch_id})
    return identity
