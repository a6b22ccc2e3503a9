"""Runs of the code location as the webserver knows it (location `custody` of workspace.yaml). The CLI
executes them in its own process, on the definitions it has built, as `execute_in_process` does, but
creates each run with the origins a run of the webserver has: the UI can then re-execute it."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

from assets.dagster_internals import (
    ExecuteRunWithPlanIterable,
    ExecutionPlan,
    InMemoryJob,
    LoadableTargetOrigin,
    ManagedGrpcPythonEnvCodeLocationOrigin,
    PlanOrchestrationContextManager,
    ReconstructableRepository,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
    create_execution_plan,
    job_execution_iterator,
    orchestration_context_event_generator,
)
from governance.errors import NotFound

MODULE, ATTRIBUTE = "assets.definitions", "defs"
LOCATION = "custody"
REPOSITORY = "__repository__"
ASSET_JOB = "__ASSET_JOB"


class PlannedRun:
    """A run created for a subset of the asset job, and how to execute it here."""

    def __init__(self, job: InMemoryJob, plan: ExecutionPlan, run: dg.DagsterRun, run_config: Mapping[str, object]):
        self.job, self.plan, self.run, self.run_config = job, plan, run, run_config

    def execute(self, instance: dg.DagsterInstance) -> None:
        """Execute the run as it now stands in the instance (admitted, tagged, starting)."""
        run = instance.get_run_by_id(self.run.run_id)
        if run is None:
            raise NotFound(f"run {self.run.run_id} was deleted before it started")
        manager = PlanOrchestrationContextManager(
            context_event_generator=orchestration_context_event_generator,
            job=self.job,
            execution_plan=self.plan,
            dagster_run=run,
            instance=instance,
            run_config=self.run_config,
            executor_defs=None,
            output_capture=None,
            raise_on_error=False,
        )
        for _ in ExecuteRunWithPlanIterable(
            execution_plan=self.plan, iterator=job_execution_iterator, execution_context_manager=manager
        ):
            pass


def plan_run(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    keys: Sequence[dg.AssetKey],
    run_config: Mapping[str, object],
    tags: Mapping[str, str],
    run_id: str,
) -> PlannedRun:
    """A not yet started run of `keys` and their checks, with both origins the UI needs."""
    selected = frozenset(keys)
    job_def = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=selected)
    job = InMemoryJob(job_def)
    plan = create_execution_plan(job, run_config=run_config, instance_ref=instance.get_ref())
    code_origin = ReconstructableRepository.for_module(MODULE, ATTRIBUTE, working_directory=str(Path.cwd()))
    run = instance.create_run_for_job(
        job_def=job_def,
        execution_plan=plan,
        run_id=run_id,
        run_config=run_config,
        tags={**job_def.run_tags, **tags},
        asset_selection=selected,
        remote_job_origin=remote_origin(),
        job_code_origin=code_origin.get_reconstructable_job(ASSET_JOB)
        .get_subset(asset_selection=selected)
        .get_python_origin(),
    )
    return PlannedRun(job, plan, run, run_config)


def remote_origin() -> RemoteJobOrigin:
    target = LoadableTargetOrigin(executable_path=sys.executable, module_name=MODULE, working_directory=str(Path.cwd()))
    location = ManagedGrpcPythonEnvCodeLocationOrigin(loadable_target_origin=target, location_name=LOCATION)
    return RemoteJobOrigin(
        repository_origin=RemoteRepositoryOrigin(code_location_origin=location, repository_name=REPOSITORY),
        job_name=ASSET_JOB,
    )
