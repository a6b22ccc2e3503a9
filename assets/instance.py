"""Custody's Dagster instance: Dagster's own, which starts, stops or resets a sensor or schedule only
as Custody's gate decided it (governance.service.controls). The instance's dagster.yaml names it
(`instance_class`), so every process of the instance uses it: the webserver, whoever reaches it, and
Dagster's CLI. Dagster's daemon never calls these methods: it changes no sensor's or schedule's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import dagster as dg

from assets.coordinator import Refusal
from assets.dagster_internals import CompoundID, InstanceRef, InstigatorState, RemoteSchedule, RemoteSensor
from governance.errors import CustodyError
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
        """The catalog of the process's CUSTODY_* environment, opened on first use."""
        return CustodyResource()

    def start_sensor(self, remote_sensor: RemoteSensor) -> InstigatorState:
        self._decided("startSensor", remote_sensor.name, {remote_sensor.name})
        return super().start_sensor(remote_sensor)

    def stop_sensor(
        self, instigator_origin_id: str, selector_id: str, remote_sensor: RemoteSensor | None = None
    ) -> InstigatorState:
        name = self._name(instigator_origin_id, selector_id, remote_sensor)
        self._decided("stopSensor", name, _ids(instigator_origin_id, selector_id))
        return super().stop_sensor(instigator_origin_id, selector_id, remote_sensor)

    def reset_sensor(self, remote_sensor: RemoteSensor) -> InstigatorState:
        self._decided("resetSensor", remote_sensor.name, {remote_sensor.name})
        return super().reset_sensor(remote_sensor)

    def start_schedule(self, remote_schedule: RemoteSchedule) -> InstigatorState:
        self._decided("startSchedule", remote_schedule.name, {remote_schedule.name})
        return super().start_schedule(remote_schedule)

    def stop_schedule(
        self, schedule_origin_id: str, schedule_selector_id: str, remote_schedule: RemoteSchedule | None = None
    ) -> InstigatorState:
        name = self._name(schedule_origin_id, schedule_selector_id, remote_schedule)
        self._decided("stopRunningSchedule", name, _ids(schedule_origin_id, schedule_selector_id))
        return super().stop_schedule(schedule_origin_id, schedule_selector_id, remote_schedule)

    def reset_schedule(self, remote_schedule: RemoteSchedule) -> InstigatorState:
        self._decided("resetSchedule", remote_schedule.name, {remote_schedule.name})
        return super().reset_schedule(remote_schedule)

    def _decided(self, mutation: str, name: str, names: set[str]) -> None:
        """Take the gate's decision for `mutation` on the sensor or schedule `names` names, or refuse
        the change and record the refusal; a catalog that cannot be asked refuses it too."""
        from governance.service.controls import refuse, take

        catalog = self.custody.catalog
        try:
            if not take(catalog, mutation, names):
                refuse(catalog, mutation, name)
        except CustodyError as err:
            raise Refusal(str(err)) from err
        finally:
            catalog.checkpoint()

    def _name(self, origin_id: str, selector_id: str, remote: RemoteSensor | RemoteSchedule | None) -> str:
        if remote is not None:
            return remote.name
        stored = self.get_instigator_state(origin_id, selector_id)
        return stored.instigator_name if stored is not None else selector_id


def _ids(origin_id: str, selector_id: str) -> set[str]:
    """The ids Dagster's UI may name a sensor or schedule by, as the gate records them."""
    return {origin_id, selector_id, CompoundID(remote_origin_id=origin_id, selector_id=selector_id).to_string()}
