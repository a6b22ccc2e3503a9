"""Custody's Dagster instance: Dagster's own, which starts, stops or resets a sensor or schedule only
as Custody's gate decided it (governance.service.controls). The instance's dagster.yaml names it
(`instance_class`), so every process of the instance uses it: the webserver, whoever reaches it, and
Dagster's CLI. Dagster's daemon never calls these methods: it changes no sensor's or schedule's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

import dagster as dg

from assets.dagster_internals import CompoundID, InstanceRef

if TYPE_CHECKING:
    from assets.dagster_internals import InstigatorState, RemoteSchedule, RemoteSensor
    from governance.service.controls import Named
    from governance.service.refusals import Refusals
    from resources import CustodyResource


class CustodyInstance(dg.DagsterInstance):
    """Dagster's instance, whose sensors and schedules change state only as Custody's gate decided."""

    @classmethod
    def config_schema(cls) -> dict[str, Any]:
        """Settings of its own beside the instance's: none."""
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> Mapping[str, Any]:
        """What the instance's dagster.yaml leaves unsaid: Dagster's own defaults."""
        return InstanceRef.config_defaults(base_dir)

    @cached_property
    def custody(self) -> CustodyResource:
        """The catalog of the process's CUSTODY_* environment, opened on first use: the processes
        that never change a sensor's or schedule's state (a run's, a code server's) load none of it."""
        from resources import CustodyResource

        return CustodyResource()

    @cached_property
    def refusals(self) -> Refusals:
        """This process's refusals, recorded in the catalog, their repeats counted."""
        from governance.service.controls import recorder

        return recorder(self.custody.catalog)

    def start_sensor(self, remote_sensor: RemoteSensor) -> InstigatorState:
        self._decided("startSensor", remote_sensor.name, _selected(remote_sensor))
        return super().start_sensor(remote_sensor)

    def stop_sensor(
        self, instigator_origin_id: str, selector_id: str, remote_sensor: RemoteSensor | None = None
    ) -> InstigatorState:
        name = self._name(instigator_origin_id, selector_id, remote_sensor)
        self._decided("stopSensor", name, _identified(instigator_origin_id, selector_id))
        return super().stop_sensor(instigator_origin_id, selector_id, remote_sensor)

    def reset_sensor(self, remote_sensor: RemoteSensor) -> InstigatorState:
        self._decided("resetSensor", remote_sensor.name, _selected(remote_sensor))
        return super().reset_sensor(remote_sensor)

    def start_schedule(self, remote_schedule: RemoteSchedule) -> InstigatorState:
        self._decided("startSchedule", remote_schedule.name, _selected(remote_schedule))
        return super().start_schedule(remote_schedule)

    def stop_schedule(
        self, schedule_origin_id: str, schedule_selector_id: str, remote_schedule: RemoteSchedule | None = None
    ) -> InstigatorState:
        name = self._name(schedule_origin_id, schedule_selector_id, remote_schedule)
        self._decided("stopRunningSchedule", name, _identified(schedule_origin_id, schedule_selector_id))
        return super().stop_schedule(schedule_origin_id, schedule_selector_id, remote_schedule)

    def reset_schedule(self, remote_schedule: RemoteSchedule) -> InstigatorState:
        self._decided("resetSchedule", remote_schedule.name, _selected(remote_schedule))
        return super().reset_schedule(remote_schedule)

    def wipe_all_schedules(self) -> None:
        """No mutation of the gate's asks for it (`dagster schedule wipe` does): refused, always."""
        self._decided("wipeAllSchedules", "every sensor and schedule", lambda named: False)

    def _decided(self, mutation: str, name: str, matches: Callable[[Named], bool]) -> None:
        """Take the gate's decision for `mutation` on the sensor or schedule `matches` recognises, or
        refuse the change and record the refusal. Whatever keeps it from being decided refuses it."""
        from assets.coordinator import Refusal
        from governance.errors import error_summary
        from governance.service.controls import CHANNEL, refusal, take

        catalog = self.custody.catalog
        try:
            if take(catalog, mutation, matches):
                return
            decision, details = refusal(mutation, name)
            self.refusals.refused(CHANNEL, decision, details)
            catalog.checkpoint()
        except Exception as err:  # the change is refused, with what kept it from being decided
            raise Refusal(f"{mutation} of {name} could not be decided: {error_summary(err)}") from err
        raise Refusal(decision.reason)

    def _name(self, origin_id: str, selector_id: str, remote: RemoteSensor | RemoteSchedule | None) -> str:
        if remote is not None:
            return remote.name
        stored = self.get_instigator_state(origin_id, selector_id)
        return stored.instigator_name if stored is not None else selector_id


def _selected(remote: RemoteSensor | RemoteSchedule) -> Callable[[Named], bool]:
    """Whether a decision names `remote` by its selector, as Dagster found it."""
    selector = remote.selector
    named = {"location": selector.location_name, "repository": selector.repository_name, "name": selector.name}
    return lambda decided: dict(decided) == named


def _identified(origin_id: str, selector_id: str) -> Callable[[Named], bool]:
    """Whether a decision names the state of these ids as Dagster reads a stop's arguments: by its
    compound id (as `id`, or as the origin), else by its origin and selector ids."""
    compound = CompoundID(remote_origin_id=origin_id, selector_id=selector_id).to_string()

    def matches(decided: Named) -> bool:
        if "id" in decided:
            return decided["id"] == compound
        if decided.get("origin") == compound:
            return True
        return (decided.get("origin"), decided.get("selector")) == (origin_id, selector_id)

    return matches
