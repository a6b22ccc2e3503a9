"""A sensor or schedule changes state only with the gate's decision for that very change, taken once
(governance.service.controls, assets/instance.py); without one, the instance refuses and records it."""

from __future__ import annotations

import threading
from pathlib import Path

import dagster as dg
import pytest

from assets.coordinator import Refusal
from assets.instance import _identified
from assets.launch import INSTANCE_YAML
from governance.access.guard import record
from governance.access.policy import Decision, Identity, Verb
from governance.catalog import Catalog
from governance.config import Settings
from governance.runs import Assurance
from governance.service import controls
from tests.helpers import recorded

DROPZONE = {"repositoryLocationName": "custody", "repositoryName": "__repository__", "sensorName": "custody_dropzone"}
NAMED = {"location": "custody", "repository": "__repository__", "name": "custody_dropzone"}
ALICE = Identity("alice", Assurance.VERIFIED, "password", "ui")


def decided(catalog: Catalog, mutation: str, named: dict[str, str], allowed: bool = True) -> None:
    """The gate's decision on `mutation`, naming `named`, as it records one."""
    decision = Decision(ALICE, Verb.CONTROL, None, allowed, "alice is in custody-admins, the admin group")
    record(catalog, decision, None, {"channel": "ui", "mutation": mutation, "instigator": named})


def is_the_dropzone(named) -> bool:
    return dict(named) == NAMED


def test_the_gate_names_a_sensor_or_schedule_as_dagster_reads_the_mutation_s_arguments():
    assert controls.instigator("startSensor", {"sensorSelector": DROPZONE}) == NAMED
    assert controls.instigator("stopSensor", {"id": "o::s"}) == {"id": "o::s"}
    assert controls.instigator("stopRunningSchedule", {"scheduleOriginId": "o", "scheduleSelectorId": "s"}) == {
        "origin": "o",
        "selector": "s",
    }
    assert controls.instigator("startSensor", {"sensorSelector": "custody_dropzone"}) is None
    assert controls.instigator("setSensorCursor", {"sensorSelector": DROPZONE}) is None


def test_an_allowed_decision_for_the_same_change_is_taken_once(catalog):
    decided(catalog, "startSensor", NAMED)
    assert controls.take(catalog, "startSensor", is_the_dropzone)
    assert not controls.take(catalog, "startSensor", is_the_dropzone)


def test_a_denied_decision_another_mutation_s_or_another_sensor_s_is_not_taken(catalog):
    decided(catalog, "startSensor", NAMED, allowed=False)
    decided(catalog, "resetSensor", NAMED)
    decided(catalog, "startSensor", {**NAMED, "location": "elsewhere"})
    assert not controls.take(catalog, "startSensor", is_the_dropzone)


def test_a_decision_older_than_the_grant_is_not_taken(catalog, monkeypatch):
    decided(catalog, "startSensor", NAMED)
    monkeypatch.setattr(controls, "GRANT_SECONDS", 0)
    assert not controls.take(catalog, "startSensor", is_the_dropzone)


def test_requests_racing_for_one_decision_take_it_once(catalog):
    decided(catalog, "startSensor", NAMED)
    taken: list[bool] = []
    threads = [
        threading.Thread(target=lambda: taken.append(controls.take(catalog, "startSensor", is_the_dropzone)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == [False] * 7 + [True]


def test_a_stop_is_held_to_the_ids_dagster_stops_by():
    stops = _identified("origin", "selector")
    assert stops({"id": "origin::selector"}) and stops({"origin": "origin::selector"})
    assert stops({"origin": "origin", "selector": "selector"})
    assert not stops({"id": "origin::other"}) and not stops({"origin": "origin", "selector": "other"})
    assert not stops({"selector": "selector"})


@pytest.fixture
def instance(cli_env: Settings, tmp_path: Path) -> dg.DagsterInstance:
    """Custody's Dagster instance, as dagster.yaml names it, on the test's home."""
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML.read_text(encoding="utf-8"), encoding="utf-8")
    return dg.DagsterInstance.from_config(str(home))


def test_a_stop_asked_without_the_gate_s_decision_is_refused_and_recorded(instance):
    with pytest.raises(Refusal, match="stopSensor of selector was asked of Dagster without Custody's decision"):
        instance.stop_sensor("origin", "selector", None)
    with pytest.raises(Refusal, match="wipeAllSchedules of every sensor and schedule was asked"):
        instance.wipe_all_schedules()
    refused = [(e["actor"], e["details"]["result"], e["details"]["channel"]) for e in recorded(action="control")]
    assert refused == [("anonymous", "denied", "dagster")] * 2
