"""A sensor or schedule of Dagster's is started, stopped or reset only as the gate decided it.

Dagster's webserver changes a sensor's or schedule's state for whoever reaches it. The gate decides
each such request for a verified admin and records the decision with what names the sensor or
schedule (`instigator`: its name, or the ids Dagster's UI gives). Custody's Dagster instance
(assets/instance.py) then makes the change only when it takes one of those decisions: allowed, of the
same mutation, naming that sensor or schedule, recorded in the last GRANT_SECONDS and never taken
before. A change asked on the webserver's own port, or with Dagster's own CLI, has none: it is
refused, and the refusal recorded.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from governance import ledger
from governance.access.guard import ANONYMOUS, record
from governance.access.policy import Decision, Identity, Verb
from governance.catalog import Catalog
from governance.errors import AccessDenied
from governance.runs import Assurance
from governance.service import once

# As long as a signed header is good for: the webserver acts on the request it came with well within.
GRANT_SECONDS = 120
# What a change asked of the instance other than through the gate is recorded as coming by.
CHANNEL = "dagster"
# Each mutation that starts, stops or resets a sensor or schedule, and the arguments that name it.
INSTIGATOR_CONTROLS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "startSensor": (("sensorSelector", "sensorName"),),
    "resetSensor": (("sensorSelector", "sensorName"),),
    "stopSensor": (("id",), ("jobOriginId",), ("jobSelectorId",)),
    "startSchedule": (("scheduleSelector", "scheduleName"),),
    "resetSchedule": (("scheduleSelector", "scheduleName"),),
    "stopRunningSchedule": (("id",), ("scheduleOriginId",), ("scheduleSelectorId",)),
}


def instigator(mutation: str, arguments: Mapping[str, Any]) -> list[str]:
    """What the arguments of `mutation` name its sensor or schedule by: its name, or its ids."""
    found = []
    for path in INSTIGATOR_CONTROLS.get(mutation, ()):
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, str) and value:
            found.append(value)
    return found


def take(catalog: Catalog, mutation: str, names: Collection[str]) -> bool:
    """Whether an allowed decision of the gate for `mutation` on the sensor or schedule one of
    `names` names, recorded in the last GRANT_SECONDS and not taken before, is taken now."""
    since = datetime.now(UTC) - timedelta(seconds=GRANT_SECONDS)
    with catalog.reading() as session:
        decided = ledger.entries(session, ledger.LedgerFilter.asked(action=Verb.CONTROL.value, since=since))
    for entry in decided:
        details = json.loads(entry.details)
        if details.get("result") != "allowed" or details.get("mutation") != mutation:
            continue
        if set(details.get("instigator") or ()) & set(names) and once.take(catalog, f"control:{entry.seq}"):
            return True
    return False


def refuse(catalog: Catalog, mutation: str, name: str) -> NoReturn:
    """Record, as anonymous, the refusal of `mutation` on the sensor or schedule `name` asked
    without the gate's decision; then raise it."""
    reason = (
        f"{mutation} of {name} was asked of Dagster without Custody's decision: sensors and schedules are "
        "started, stopped or reset by an admin, through Custody's UI"
    )
    decision = Decision(Identity(ANONYMOUS, Assurance.NONE), Verb.CONTROL, None, False, reason)
    record(catalog, decision, None, {"channel": CHANNEL, "mutation": mutation, "instigator": [name]})
    raise AccessDenied(f"denied: {reason}")
