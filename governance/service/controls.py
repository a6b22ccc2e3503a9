"""A sensor or schedule of Dagster's is started, stopped or reset only as the gate decided it.

Dagster's webserver changes a sensor's or schedule's state for whoever reaches it. The gate decides
each such request for a verified admin and records the decision with the sensor or schedule it
names, as Dagster reads the request's arguments (`instigator`: a selector's location, repository and
name, or the ids of its state). Custody's Dagster instance (assets/instance.py) then makes the
change only when it takes one of those decisions: allowed, of the same mutation, naming exactly that
sensor or schedule, recorded in the last GRANT_SECONDS and never taken before. A change asked on the
webserver's own port, or with Dagster's own CLI, has none: it is refused, and the refusal recorded
(repeats counted in windows, as the service's are: governance.service.refusals).
"""

from __future__ import annotations

import atexit
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from governance import ledger
from governance.access.guard import ANONYMOUS, record_all
from governance.access.policy import Decision, Identity, Verb
from governance.catalog import Catalog
from governance.runs import Assurance
from governance.service import once
from governance.service.refusals import Flusher, Refusals

# The gate records a decision as it passes the request on: the webserver takes it at once.
GRANT_SECONDS = 30
# What a change asked of the instance other than through the gate is recorded as coming by.
CHANNEL = "dagster"
# The mutations that name a sensor or schedule by a selector: the argument, and its name's key.
SELECTED: Mapping[str, tuple[str, str]] = {
    "startSensor": ("sensorSelector", "sensorName"),
    "resetSensor": ("sensorSelector", "sensorName"),
    "startSchedule": ("scheduleSelector", "scheduleName"),
    "resetSchedule": ("scheduleSelector", "scheduleName"),
}
# The mutations that name one by the ids of its state: the arguments for its id, origin and selector.
IDENTIFIED: Mapping[str, tuple[str, str, str]] = {
    "stopSensor": ("id", "jobOriginId", "jobSelectorId"),
    "stopRunningSchedule": ("id", "scheduleOriginId", "scheduleSelectorId"),
}

Named = Mapping[str, str]


def instigator(mutation: str, arguments: Mapping[str, Any]) -> dict[str, str] | None:
    """The sensor or schedule the arguments of `mutation` name: `location`, `repository` and `name`
    from a selector; `id`, `origin` and `selector` (those given) from the ids of its state."""
    if mutation in SELECTED:
        argument, name = SELECTED[mutation]
        selector = arguments.get(argument)
        if not isinstance(selector, Mapping):
            return None
        keys = {"location": "repositoryLocationName", "repository": "repositoryName", "name": name}
        return {key: str(selector.get(given, "")) for key, given in keys.items()}
    if mutation in IDENTIFIED:
        given = dict(zip(("id", "origin", "selector"), IDENTIFIED[mutation], strict=True))
        return {key: value for key, name in given.items() if isinstance(value := arguments.get(name), str) and value}
    return None


def take(catalog: Catalog, mutation: str, matches: Callable[[Named], bool]) -> bool:
    """Whether an allowed decision of the gate for `mutation`, on the sensor or schedule `matches`
    holds to be the one changed, recorded in the last GRANT_SECONDS and not taken before, is taken now."""
    since = datetime.now(UTC) - timedelta(seconds=GRANT_SECONDS)
    with catalog.reading() as session:
        decided = ledger.entries(session, ledger.LedgerFilter.asked(action=Verb.CONTROL.value, since=since))
    for entry in decided:
        details = json.loads(entry.details)
        named = details.get("instigator")
        if details.get("result") != "allowed" or details.get("mutation") != mutation or not isinstance(named, dict):
            continue
        if matches(named) and once.take(catalog, f"control:{entry.seq}"):
            return True
    return False


def refusal(mutation: str, name: str) -> tuple[Decision, dict[str, Any]]:
    """The refusal, as anonymous, of `mutation` on the sensor or schedule `name` asked without the
    gate's decision."""
    reason = (
        f"{mutation} of {name} was asked of Dagster without Custody's decision: sensors and schedules are "
        "started, stopped or reset by an admin, through Custody's UI"
    )
    decision = Decision(Identity(ANONYMOUS, Assurance.NONE), Verb.CONTROL, None, False, reason)
    return decision, {"channel": CHANNEL, "mutation": mutation, "instigator": {"name": name}}


def recorder(catalog: Catalog) -> Refusals:
    """The refusals of this process, recorded in `catalog`: their repeats as their windows end, and
    as the process exits."""
    refusals = Refusals(lambda decisions: record_all(catalog, decisions))
    flusher = Flusher(refusals)
    flusher.start()
    atexit.register(flusher.stop)
    return refusals
