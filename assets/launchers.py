"""Who launched a run the coordinator decides, from what the launching process holds, never from
text a user typed: a tag names whom a run is for only once a launch has proved it.

- The webserver submits a run in answer to a request, which carries a header the Custody service
  signed for that one request: its user, signed in (governance.service.principal). The header is taken
  once, and only while its session lasts.
- Dagster's daemon submits the runs of a backfill, a schedule or a sensor. A backfill's are for whoever
  last launched or re-executed it signed in, as the service recorded under the backfill's id
  when the webserver answered them (governance.service.mutations). A schedule's are for the service
  account the daemon's OS user maps to, and a sensor's for the owner of the DropZone batch it
  ingests, each only when the instance holds the tick that launched the run: one the daemon is
  evaluating, of that schedule, or one of that sensor that reserved the run's id.
- The CLI establishes its user for the run before it submits it (an `authenticate` entry).

Any other run names nobody and is refused. What establishes a run's user is recorded under its id,
so that its steps find it again (governance.access.guard.run_identity).
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import dagster as dg

from assets.dagster_internals import (
    InstigatorType,
    TickStatus,
    WorkspaceRequestContext,
)
from assets.factory import BATCH_TAG, REQUESTED_BY_TAG
from assets.tags import (
    AUTOMATION_CONDITION_TAG,
    BACKFILL_ID_TAG,
    PARENT_RUN_ID_TAG,
    SCHEDULE_NAME_TAG,
    SCHEDULED_EXECUTION_TIME_TAG,
    SENSOR_NAME_TAG,
    TICK_ID_TAG,
)
from governance.access.guard import ANONYMOUS, enforce, launcher_of, record, run_identity
from governance.access.local import DaemonLaunch
from governance.access.policy import Decision, Identity, Policy, Verb
from governance.catalog import Catalog
from governance.errors import AccessDenied, CustodyError, NotSignedIn, shown
from governance.runs import Assurance
from governance.service.once import take
from governance.service.principal import PRINCIPAL_HEADER, Signed, signed_for
from governance.service.sessions import Principal, ended
from governance.spec import Spec
from governance.zones import Lake

# How long a backfill's run waits for the service to record who launched the backfill: the service
# records it as soon as the webserver has answered, which the daemon may be quicker than.
BACKFILL_WAIT_SECONDS = 10.0
BACKFILL_POLL_SECONDS = 0.25
# The channel of a refusal of what the daemon submitted.
DAEMON_CHANNEL = "daemon"
NOT_SIGNED_IN = (
    "the Dagster UI launches runs only for a signed-in user: open it through `custody serve` (`make ui`) and sign in"
)


@dataclass(frozen=True)
class SignedLaunch:
    """A run submitted by the webserver, for the request whose signed header vouches for it."""

    signed: Signed
    request: object

    @property
    def principal(self) -> Principal:
        return self.signed.principal


# Who launched a run being submitted: a signed request to the webserver; a request to the webserver
# that carries no header signed for it; or None, a process that is no webserver: the daemon (a
# backfill, a schedule or a sensor) or the CLI.
Launcher = SignedLaunch | NotSignedIn | None


def launched_by(context: dg.SubmitRunContext) -> Launcher:
    """Who launched the run `context` submits. Only the webserver submits in answer to a request;
    the daemon's submissions answer none. A run is launched only by a request as the gate passes one
    on: a POST of a JSON body, with no query, signed for that body."""
    if not isinstance(context.workspace, WorkspaceRequestContext) or context.workspace.source is None:
        return None
    source = context.workspace.source
    body = _body(source)
    if body is None:
        return NotSignedIn(NOT_SIGNED_IN)
    signed = signed_for(context.get_request_header(PRINCIPAL_HEADER), "POST", body)
    return NotSignedIn(NOT_SIGNED_IN) if signed is None else SignedLaunch(signed, source)


def _body(source: object) -> bytes | None:
    """The body of the request the webserver answers, as its GraphQL endpoint read it, when that is
    all the webserver read the query from: a POST of JSON with no query string. Starlette keeps what
    a request's body was once read (tests/test_ui_adapter.py holds it to that)."""
    body = getattr(source, "_body", None)
    url = getattr(source, "url", None)
    headers = getattr(source, "headers", {})
    plain = getattr(source, "method", "") == "POST" and url is not None and not url.query
    json_body = headers.get("content-type", "") == "application/json"
    return body if isinstance(body, bytes) and plain and json_body else None


class Taken:
    """The signed requests this process has taken, so that the runs of one request (a launch of
    several) all count as that request's, while another request carrying its header is refused."""

    def __init__(self) -> None:
        self._requests: dict[str, weakref.ref[Any]] = {}
        self._lock = threading.Lock()

    def take(self, catalog: Catalog, launch: SignedLaunch) -> bool:
        """Whether the launch's request may use its header: taken now, or by the same request before."""
        with self._lock:
            kept = self._requests.get(launch.signed.nonce)
            if kept is not None:
                return kept() is launch.request
            if not take(catalog, launch.signed.nonce):
                return False
            self._requests = {nonce: ref for nonce, ref in self._requests.items() if ref() is not None}
            self._requests[launch.signed.nonce] = weakref.ref(launch.request)
            return True


def signed_in(catalog: Catalog, run: dg.DagsterRun, launch: SignedLaunch, taken: Taken) -> Identity:
    """The signed-in user the run is for, verified, recorded as a `session` decision of the run. A
    header replayed, or whose session has ended, is refused; so is a requester tag that names someone
    else, but on a re-execution, which copied its parent's."""
    principal = launch.principal
    identity, details = principal.identity(), principal.recorded()
    refusal = None
    if not taken.take(catalog, launch):
        refusal = f"a request signed for {principal.user} was sent again: a signed request launches once"
    elif (over := ended(catalog, principal)) is not None:
        refusal = f"{over}: sign in again"
    tagged = run.tags.get(REQUESTED_BY_TAG)
    if refusal is None and tagged and tagged != principal.user and PARENT_RUN_ID_TAG not in run.tags:
        refusal = (
            f"the run's {REQUESTED_BY_TAG} tag names {shown(tagged)}, but {principal.user} launched it: "
            "a run is for the signed-in user who launches it"
        )
    if refusal is not None:
        enforce(catalog, Decision(identity, Verb.SESSION, None, False, refusal), run.run_id, details)
    where = "signed in to the UI" if principal.channel == "ui" else f"through the {principal.channel}"
    reason = f"{principal.user} launched the run {where} ({principal.method})"
    enforce(catalog, Decision(identity, Verb.SESSION, None, True, reason), run.run_id, details)
    return identity


def refuse_unsigned(catalog: Catalog, run: dg.DagsterRun, refusal: CustodyError, channel: str = "ui") -> NoReturn:
    """Record the refusal of a run launched without a proven user, as anonymous, with the channel it
    came by: the name its tag claims is only kept beside; then raise it."""
    reason = str(refusal).removeprefix("denied: ")
    decision = Decision(Identity(ANONYMOUS, Assurance.NONE), Verb.SESSION, None, False, reason)
    claimed = run.tags.get(REQUESTED_BY_TAG)
    record(catalog, decision, run.run_id, {"channel": channel, **({"claimed": shown(claimed)} if claimed else {})})
    raise refusal


@dataclass(frozen=True)
class Deciding:
    """What a run submitted outside the webserver is decided with."""

    instance: dg.DagsterInstance
    catalog: Catalog
    policy: Policy
    lake: Lake


def established(deciding: Deciding, run: dg.DagsterRun, landing: Spec | None) -> Identity:
    """Who a run submitted outside the webserver is for (see the module's words), recorded under the
    run's id; a run nobody's launch proved is refused, and the refusal recorded. A re-execution the
    daemon submits (a retry of a failed run) proves nobody, whoever its parent was for."""
    tags = run.tags
    found = run_identity(deciding.catalog, run.run_id, tags.get(REQUESTED_BY_TAG))
    if found.assurance is Assurance.VERIFIED:
        return found
    if PARENT_RUN_ID_TAG not in tags:
        backfill = tags.get(BACKFILL_ID_TAG)
        if backfill:
            return _of_backfill(deciding, run, backfill)
        launch = _daemon_launch(deciding.instance, run)
        if launch is not None and launch.channel == "sensor" and landing is not None and tags.get(BATCH_TAG):
            from governance.dropzone import sensed_batch

            return sensed_batch(
                deciding.catalog,
                deciding.lake,
                deciding.policy,
                landing,
                tags[BATCH_TAG],
                run.run_id,
                tags.get(REQUESTED_BY_TAG),
            )
        if launch is not None:
            from governance.access.local import daemon_launched

            return daemon_launched(deciding.catalog, deciding.policy, run.run_id, tags.get(REQUESTED_BY_TAG), launch)
    refuse_unsigned(
        deciding.catalog,
        run,
        AccessDenied(
            "denied: no launch proves whom this run is for: a run comes from a signed-in user, the CLI, "
            "a backfill one of them launched, or a tick of a schedule or sensor; its tags alone, and a "
            "retry of another run, prove nobody"
        ),
        DAEMON_CHANNEL,
    )


def _of_backfill(deciding: Deciding, run: dg.DagsterRun, backfill: str) -> Identity:
    """A backfill's run, for whoever last launched or re-executed the backfill signed in. A backfill
    made a moment ago may be recorded a moment after the daemon takes it up: its run waits for that."""
    made = deciding.instance.get_backfill(backfill)
    launcher = launcher_of(deciding.catalog, backfill) if made is not None else None
    deadline = (made.backfill_timestamp if made is not None else 0) + BACKFILL_WAIT_SECONDS
    while launcher is None and made is not None and time.time() < deadline:
        time.sleep(BACKFILL_POLL_SECONDS)
        launcher = launcher_of(deciding.catalog, backfill)
    if launcher is None:
        refuse_unsigned(
            deciding.catalog,
            run,
            AccessDenied(
                f"denied: no signed-in user launched backfill {shown(backfill)}: a backfill launched or "
                "re-executed other than through `custody serve` launches nothing"
            ),
            DAEMON_CHANNEL,
        )
    reason = f"a run of backfill {backfill}, which {launcher.user} launched ({launcher.method})"
    details = {"channel": launcher.channel, "method": launcher.method, "backfill": backfill}
    enforce(deciding.catalog, Decision(launcher, Verb.SESSION, None, True, reason), run.run_id, details)
    return launcher


def _tick(instance: dg.DagsterInstance, run: dg.DagsterRun, kind: Any, name_tag: str) -> Any | None:
    """The tick the run's tag names, as the instance holds it, when it is a tick of kind `kind` of
    the schedule or sensor `name_tag` names; None else."""
    storage = instance.schedule_storage
    tick_id, name = run.tags.get(TICK_ID_TAG, ""), run.tags.get(name_tag)
    if storage is None or not tick_id.isdigit() or name is None:
        return None
    found = storage.get_ticks_by_ids([int(tick_id)])
    tick = found[0] if found else None
    return tick if tick is not None and tick.instigator_type == kind and tick.instigator_name == name else None


def _daemon_launch(instance: dg.DagsterInstance, run: dg.DagsterRun) -> DaemonLaunch | None:
    """What of the daemon launched the run, when the instance holds the tick that did: a tick of the
    schedule the run names, in progress, for the time the run says it was scheduled for; or a tick of
    the sensor it names (an automation condition's sensor too) that reserved the run's id."""
    schedule = _tick(instance, run, InstigatorType.SCHEDULE, SCHEDULE_NAME_TAG)
    if (
        schedule is not None
        and schedule.status == TickStatus.STARTED
        and run.tags.get(SCHEDULED_EXECUTION_TIME_TAG) == _scheduled_for(schedule.timestamp)
    ):
        return DaemonLaunch("a schedule", "schedule", f"schedule {schedule.instigator_name}")
    sensor = _tick(instance, run, InstigatorType.SENSOR, SENSOR_NAME_TAG)
    if sensor is None or run.run_id not in (sensor.tick_data.reserved_run_ids or ()):
        return None
    via = f"sensor {sensor.instigator_name}"
    if run.tags.get(AUTOMATION_CONDITION_TAG) == "true":
        return DaemonLaunch("an automation condition", "automation", via)
    return DaemonLaunch("a sensor", "sensor", via)


def _scheduled_for(timestamp: float) -> str:
    """A tick's time as the daemon tags the runs it schedules."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat()
