"""Every name from Dagster's private modules (and its webserver's and GraphQL packages') that Custody
uses, imported here and nowhere else. Dagster's public API has no equivalent for these: the run
coordinator's queue, its deletion of a refused run's planned checks and its pools' limits, a
component's translation, serving the webserver's app in Custody's own ASGI server, executing a run
in the CLI's process, reading Dagster's own log records, and the instance's methods that start, stop
and reset sensors and schedules.

tests/test_dagster_internals.py holds each name to what Custody relies on (its kind, the values of
constants, the parameters Custody passes, the columns it reads), so that a Dagster release that
moves or changes one fails there, by name, before anything else does.

Each name is imported when it is first asked for (`from assets.dagster_internals import AssetGraph`):
the code location, which needs two run tags, does not load the webserver or the run storage.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster import DagsterInstance
    from dagster._core.definitions.asset_health.asset_freshness_health import AssetFreshnessHealthState
    from dagster._core.definitions.asset_health.asset_health import AssetHealthStatus
    from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
    from dagster._core.definitions.data_version import CachingStaleStatusResolver
    from dagster._core.definitions.freshness_evaluator import TimeWindowFreshnessPolicyEvaluator
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.definitions.metadata import RawMetadataValue
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.definitions.run_request import InstigatorType
    from dagster._core.execution.api import (
        ExecuteRunWithPlanIterable,
        create_execution_plan,
        job_execution_iterator,
    )
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
    from dagster._core.execution.context_creation_job import (
        PlanOrchestrationContextManager,
        orchestration_context_event_generator,
    )
    from dagster._core.execution.plan.plan import ExecutionPlan
    from dagster._core.instance.ref import InstanceRef
    from dagster._core.loader import LoadingContextForTest
    from dagster._core.log_manager import LOG_RECORD_METADATA_ATTR
    from dagster._core.remote_origin import (
        ManagedGrpcPythonEnvCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.remote_representation.external import RemoteSchedule, RemoteSensor
    from dagster._core.remote_representation.handle import CompoundID
    from dagster._core.run_coordinator.queued_run_coordinator import RunQueueConfig
    from dagster._core.scheduler.instigation import InstigatorState, TickData, TickStatus
    from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
    from dagster._core.test_utils import freeze_time
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext, WorkspaceRequestContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster._serdes import ConfigurableClassData
    from dagster._utils.error import SerializableErrorInfo
    from dagster.components.utils.translation import TranslationFn, TranslationFnResolver
    from dagster_graphql.implementation.utils import UserFacingGraphQLError
    from dagster_graphql.schema.errors import GraphenePythonError
    from dagster_webserver.app import create_app_from_workspace_process_context
    from dagster_webserver.version import __version__ as webserver_version

# Each name, and the module and name it comes from; grouped by what has no public equivalent.
WHERE: dict[str, tuple[str, str]] = {
    # The tests' own: a tick and a backfill as the daemon and the webserver write them; Dagster's
    # freshness evaluation and health model on a frozen clock, and staleness.
    "AssetFreshnessHealthState": (
        "dagster._core.definitions.asset_health.asset_freshness_health",
        "AssetFreshnessHealthState",
    ),
    "AssetHealthStatus": ("dagster._core.definitions.asset_health.asset_health", "AssetHealthStatus"),
    "CachingStaleStatusResolver": ("dagster._core.definitions.data_version", "CachingStaleStatusResolver"),
    "LoadingContextForTest": ("dagster._core.loader", "LoadingContextForTest"),
    "TimeWindowFreshnessPolicyEvaluator": (
        "dagster._core.definitions.freshness_evaluator",
        "TimeWindowFreshnessPolicyEvaluator",
    ),
    "freeze_time": ("dagster._core.test_utils", "freeze_time"),
    "BulkActionStatus": ("dagster._core.execution.backfill", "BulkActionStatus"),
    "PartitionBackfill": ("dagster._core.execution.backfill", "PartitionBackfill"),
    "TickData": ("dagster._core.scheduler.instigation", "TickData"),
    # The run coordinator: a QueuedRunCoordinator subclass takes its config as ConfigurableClassData
    # and extends the queue's settings (RunQueueConfig) with the domains' shares.
    "ConfigurableClassData": ("dagster._serdes", "ConfigurableClassData"),
    "RunQueueConfig": ("dagster._core.run_coordinator.queued_run_coordinator", "RunQueueConfig"),
    # A refused run is deleted; `delete_run` leaves the asset checks its creation planned, which the
    # event log storage's table alone holds.
    "AssetCheckExecutionsTable": ("dagster._core.storage.event_log.schema", "AssetCheckExecutionsTable"),
    "SqlEventLogStorage": ("dagster._core.storage.event_log.sql_event_log", "SqlEventLogStorage"),
    # A refusal in the UI's own error dialog, without the webserver's stack.
    "GraphenePythonError": ("dagster_graphql.schema.errors", "GraphenePythonError"),
    "SerializableErrorInfo": ("dagster._utils.error", "SerializableErrorInfo"),
    "UserFacingGraphQLError": ("dagster_graphql.implementation.utils", "UserFacingGraphQLError"),
    # Who launched a run the coordinator decides: the webserver's request, or a tick the daemon holds.
    "WorkspaceRequestContext": ("dagster._core.workspace.context", "WorkspaceRequestContext"),
    "InstigatorType": ("dagster._core.definitions.run_request", "InstigatorType"),
    "TickStatus": ("dagster._core.scheduler.instigation", "TickStatus"),
    # The CLI's runs, executed in its process on the definitions it built for them, with the origins
    # of the webserver's runs, so that the UI can re-execute them (`execute_in_process` gives none).
    "ExecuteRunWithPlanIterable": ("dagster._core.execution.api", "ExecuteRunWithPlanIterable"),
    "ExecutionPlan": ("dagster._core.execution.plan.plan", "ExecutionPlan"),
    "InMemoryJob": ("dagster._core.definitions.job_base", "InMemoryJob"),
    "LoadableTargetOrigin": ("dagster._core.types.loadable_target_origin", "LoadableTargetOrigin"),
    "ManagedGrpcPythonEnvCodeLocationOrigin": ("dagster._core.remote_origin", "ManagedGrpcPythonEnvCodeLocationOrigin"),
    "PlanOrchestrationContextManager": (
        "dagster._core.execution.context_creation_job",
        "PlanOrchestrationContextManager",
    ),
    "ReconstructableRepository": ("dagster._core.definitions.reconstruct", "ReconstructableRepository"),
    "RemoteJobOrigin": ("dagster._core.remote_origin", "RemoteJobOrigin"),
    "RemoteRepositoryOrigin": ("dagster._core.remote_origin", "RemoteRepositoryOrigin"),
    "create_execution_plan": ("dagster._core.execution.api", "create_execution_plan"),
    "job_execution_iterator": ("dagster._core.execution.api", "job_execution_iterator"),
    "orchestration_context_event_generator": (
        "dagster._core.execution.context_creation_job",
        "orchestration_context_event_generator",
    ),
    # A component's `translation:`, resolved as Dagster's integration components (dagster-dbt's,
    # dagster-sling's) resolve theirs: the package exports neither name.
    "TranslationFn": ("dagster.components.utils.translation", "TranslationFn"),
    "TranslationFnResolver": ("dagster.components.utils.translation", "TranslationFnResolver"),
    # The webserver's app, served in `custody serve`'s own ASGI server behind its login.
    "WorkspaceFileTarget": ("dagster._core.workspace.load_target", "WorkspaceFileTarget"),
    "WorkspaceProcessContext": ("dagster._core.workspace.context", "WorkspaceProcessContext"),
    "create_app_from_workspace_process_context": ("dagster_webserver.app", "create_app_from_workspace_process_context"),
    "webserver_version": ("dagster_webserver.version", "__version__"),
    # The instance's methods that start, stop and reset sensors and schedules, which Custody's
    # instance decides: what they are called with.
    "CompoundID": ("dagster._core.remote_representation.handle", "CompoundID"),
    "InstanceRef": ("dagster._core.instance.ref", "InstanceRef"),
    "InstigatorState": ("dagster._core.scheduler.instigation", "InstigatorState"),
    "RemoteSchedule": ("dagster._core.remote_representation.external", "RemoteSchedule"),
    "RemoteSensor": ("dagster._core.remote_representation.external", "RemoteSensor"),
    # A run's record on the console: where Dagster's log records keep its run id and event.
    "LOG_RECORD_METADATA_ATTR": ("dagster._core.log_manager", "LOG_RECORD_METADATA_ATTR"),
    # Types only: the graph `Definitions.resolve_asset_graph` returns, and a metadata value as given.
    "AssetGraph": ("dagster._core.definitions.assets.graph.asset_graph", "AssetGraph"),
    "RawMetadataValue": ("dagster._core.definitions.metadata", "RawMetadataValue"),
}

__all__ = [
    "LOG_RECORD_METADATA_ATTR",
    "AssetCheckExecutionsTable",
    "AssetFreshnessHealthState",
    "AssetGraph",
    "AssetHealthStatus",
    "BulkActionStatus",
    "CachingStaleStatusResolver",
    "CompoundID",
    "ConfigurableClassData",
    "ExecuteRunWithPlanIterable",
    "ExecutionPlan",
    "GraphenePythonError",
    "InMemoryJob",
    "InstanceRef",
    "InstigatorState",
    "InstigatorType",
    "LoadableTargetOrigin",
    "LoadingContextForTest",
    "ManagedGrpcPythonEnvCodeLocationOrigin",
    "PartitionBackfill",
    "PlanOrchestrationContextManager",
    "RawMetadataValue",
    "ReconstructableRepository",
    "RemoteJobOrigin",
    "RemoteRepositoryOrigin",
    "RemoteSchedule",
    "RemoteSensor",
    "RunQueueConfig",
    "SerializableErrorInfo",
    "SqlEventLogStorage",
    "TickData",
    "TickStatus",
    "TimeWindowFreshnessPolicyEvaluator",
    "TranslationFn",
    "TranslationFnResolver",
    "UserFacingGraphQLError",
    "WorkspaceFileTarget",
    "WorkspaceProcessContext",
    "WorkspaceRequestContext",
    "create_app_from_workspace_process_context",
    "create_execution_plan",
    "free_pool_slots",
    "freeze_time",
    "job_execution_iterator",
    "orchestration_context_event_generator",
    "pool_limit",
    "set_pool_limit",
    "webserver_version",
]


# Dagster sets a pool's limit from its UI and `dagster instance concurrency set`, both through the
# event log storage's methods, and frees the slots a finished run still holds from its daemon; the
# instance has no public method for either. The storage is the instance's public attribute.


def pool_limit(instance: DagsterInstance, pool: str) -> int | None:
    """The pool's limit set in the instance; None when none was."""
    info = instance.event_log_storage.get_concurrency_info(pool)
    return None if info.using_default_limit else info.slot_count


def set_pool_limit(instance: DagsterInstance, pool: str, limit: int) -> None:
    instance.event_log_storage.set_concurrency_slots(pool, limit)


def free_pool_slots(instance: DagsterInstance, run_id: str) -> None:
    """Free the slots of a run whose process died holding them."""
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)


if not TYPE_CHECKING:  # type checkers see the imports above, and so catch a name that is not here

    def __getattr__(name: str) -> Any:
        if name not in WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module, attribute = WHERE[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
