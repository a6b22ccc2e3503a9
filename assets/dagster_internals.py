"""Every name from Dagster's private modules (and its webserver's and GraphQL packages') that Custody
uses, imported here and nowhere else. Dagster's public API has no equivalent for these: the run
coordinator's queue and its writes to the run storage, serving the webserver's app in Custody's own
ASGI server, executing a run in the CLI's process, reading Dagster's own log records, and the
instance's methods that start, stop and reset sensors and schedules.

tests/test_dagster_internals.py holds each name to what Custody relies on (its kind, the values of
constants, the parameters Custody passes, the columns it reads), so that a Dagster release that
moves or changes one fails there, by name, before anything else does.

Each name is imported when it is first asked for (`from assets.dagster_internals import RunsTable`):
the code location, which needs two run tags, does not load the webserver or the run storage.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster._core.definitions.asset_health.asset_freshness_health import AssetFreshnessHealthState
    from dagster._core.definitions.asset_health.asset_health import AssetHealthStatus
    from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
    from dagster._core.definitions.data_version import CachingStaleStatusResolver
    from dagster._core.definitions.freshness_evaluator import TimeWindowFreshnessPolicyEvaluator
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.definitions.metadata import RawMetadataValue
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.definitions.run_request import InstigatorType
    from dagster._core.events import DagsterEvent, DagsterEventType
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
    from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES, RunsFilter
    from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
    from dagster._core.storage.runs.schema import RunsTable, RunTagsTable
    from dagster._core.storage.runs.sql_run_storage import SqlRunStorage
    from dagster._core.storage.tags import (
        AUTOMATION_CONDITION_TAG,
        BACKFILL_ID_TAG,
        PARENT_RUN_ID_TAG,
        PARTITION_NAME_TAG,
        RUN_KEY_TAG,
        SCHEDULE_NAME_TAG,
        SCHEDULED_EXECUTION_TIME_TAG,
        SENSOR_NAME_TAG,
        TICK_ID_TAG,
    )
    from dagster._core.test_utils import freeze_time
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext, WorkspaceRequestContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster._serdes import ConfigurableClassData, serialize_value
    from dagster._utils.error import SerializableErrorInfo
    from dagster._utils.tags import TagConcurrencyLimitsCounter
    from dagster_graphql.implementation.utils import UserFacingGraphQLError
    from dagster_graphql.schema.errors import GraphenePythonError
    from dagster_webserver.app import create_app_from_workspace_process_context
    from dagster_webserver.version import __version__ as webserver_version

# Each name, and the module and name it comes from.
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
    "AssetCheckExecutionsTable": ("dagster._core.storage.event_log.schema", "AssetCheckExecutionsTable"),
    "AssetGraph": ("dagster._core.definitions.assets.graph.asset_graph", "AssetGraph"),
    "BACKFILL_ID_TAG": ("dagster._core.storage.tags", "BACKFILL_ID_TAG"),
    "BulkActionStatus": ("dagster._core.execution.backfill", "BulkActionStatus"),
    "CompoundID": ("dagster._core.remote_representation.handle", "CompoundID"),
    "ConfigurableClassData": ("dagster._serdes", "ConfigurableClassData"),
    "DagsterEvent": ("dagster._core.events", "DagsterEvent"),
    "DagsterEventType": ("dagster._core.events", "DagsterEventType"),
    "ExecuteRunWithPlanIterable": ("dagster._core.execution.api", "ExecuteRunWithPlanIterable"),
    "ExecutionPlan": ("dagster._core.execution.plan.plan", "ExecutionPlan"),
    "GraphenePythonError": ("dagster_graphql.schema.errors", "GraphenePythonError"),
    "IN_PROGRESS_RUN_STATUSES": ("dagster._core.storage.dagster_run", "IN_PROGRESS_RUN_STATUSES"),
    "InMemoryJob": ("dagster._core.definitions.job_base", "InMemoryJob"),
    "InstanceRef": ("dagster._core.instance.ref", "InstanceRef"),
    "InstigatorState": ("dagster._core.scheduler.instigation", "InstigatorState"),
    "InstigatorType": ("dagster._core.definitions.run_request", "InstigatorType"),
    "LOG_RECORD_METADATA_ATTR": ("dagster._core.log_manager", "LOG_RECORD_METADATA_ATTR"),
    "LoadableTargetOrigin": ("dagster._core.types.loadable_target_origin", "LoadableTargetOrigin"),
    "ManagedGrpcPythonEnvCodeLocationOrigin": ("dagster._core.remote_origin", "ManagedGrpcPythonEnvCodeLocationOrigin"),
    "PartitionBackfill": ("dagster._core.execution.backfill", "PartitionBackfill"),
    "PARENT_RUN_ID_TAG": ("dagster._core.storage.tags", "PARENT_RUN_ID_TAG"),
    "PARTITION_NAME_TAG": ("dagster._core.storage.tags", "PARTITION_NAME_TAG"),
    "PlanOrchestrationContextManager": (
        "dagster._core.execution.context_creation_job",
        "PlanOrchestrationContextManager",
    ),
    "RUN_KEY_TAG": ("dagster._core.storage.tags", "RUN_KEY_TAG"),
    "AUTOMATION_CONDITION_TAG": ("dagster._core.storage.tags", "AUTOMATION_CONDITION_TAG"),
    "RawMetadataValue": ("dagster._core.definitions.metadata", "RawMetadataValue"),
    "ReconstructableRepository": ("dagster._core.definitions.reconstruct", "ReconstructableRepository"),
    "RemoteSchedule": ("dagster._core.remote_representation.external", "RemoteSchedule"),
    "RemoteSensor": ("dagster._core.remote_representation.external", "RemoteSensor"),
    "RemoteJobOrigin": ("dagster._core.remote_origin", "RemoteJobOrigin"),
    "RemoteRepositoryOrigin": ("dagster._core.remote_origin", "RemoteRepositoryOrigin"),
    "RunQueueConfig": ("dagster._core.run_coordinator.queued_run_coordinator", "RunQueueConfig"),
    "RunTagsTable": ("dagster._core.storage.runs.schema", "RunTagsTable"),
    "RunsFilter": ("dagster._core.storage.dagster_run", "RunsFilter"),
    "RunsTable": ("dagster._core.storage.runs.schema", "RunsTable"),
    "SCHEDULE_NAME_TAG": ("dagster._core.storage.tags", "SCHEDULE_NAME_TAG"),
    "SCHEDULED_EXECUTION_TIME_TAG": ("dagster._core.storage.tags", "SCHEDULED_EXECUTION_TIME_TAG"),
    "SENSOR_NAME_TAG": ("dagster._core.storage.tags", "SENSOR_NAME_TAG"),
    "SerializableErrorInfo": ("dagster._utils.error", "SerializableErrorInfo"),
    "SqlEventLogStorage": ("dagster._core.storage.event_log.sql_event_log", "SqlEventLogStorage"),
    "SqlRunStorage": ("dagster._core.storage.runs.sql_run_storage", "SqlRunStorage"),
    "TICK_ID_TAG": ("dagster._core.storage.tags", "TICK_ID_TAG"),
    "TagConcurrencyLimitsCounter": ("dagster._utils.tags", "TagConcurrencyLimitsCounter"),
    "TickData": ("dagster._core.scheduler.instigation", "TickData"),
    "TickStatus": ("dagster._core.scheduler.instigation", "TickStatus"),
    "UserFacingGraphQLError": ("dagster_graphql.implementation.utils", "UserFacingGraphQLError"),
    "WorkspaceFileTarget": ("dagster._core.workspace.load_target", "WorkspaceFileTarget"),
    "WorkspaceProcessContext": ("dagster._core.workspace.context", "WorkspaceProcessContext"),
    "WorkspaceRequestContext": ("dagster._core.workspace.context", "WorkspaceRequestContext"),
    "create_app_from_workspace_process_context": ("dagster_webserver.app", "create_app_from_workspace_process_context"),
    "create_execution_plan": ("dagster._core.execution.api", "create_execution_plan"),
    "job_execution_iterator": ("dagster._core.execution.api", "job_execution_iterator"),
    "orchestration_context_event_generator": (
        "dagster._core.execution.context_creation_job",
        "orchestration_context_event_generator",
    ),
    "serialize_value": ("dagster._serdes", "serialize_value"),
    "webserver_version": ("dagster_webserver.version", "__version__"),
}
__all__ = [
    "AUTOMATION_CONDITION_TAG",
    "BACKFILL_ID_TAG",
    "IN_PROGRESS_RUN_STATUSES",
    "LOG_RECORD_METADATA_ATTR",
    "PARENT_RUN_ID_TAG",
    "PARTITION_NAME_TAG",
    "RUN_KEY_TAG",
    "SCHEDULED_EXECUTION_TIME_TAG",
    "SCHEDULE_NAME_TAG",
    "SENSOR_NAME_TAG",
    "TICK_ID_TAG",
    "AssetCheckExecutionsTable",
    "AssetFreshnessHealthState",
    "AssetGraph",
    "AssetHealthStatus",
    "BulkActionStatus",
    "CachingStaleStatusResolver",
    "CompoundID",
    "ConfigurableClassData",
    "DagsterEvent",
    "DagsterEventType",
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
    "RunTagsTable",
    "RunsFilter",
    "RunsTable",
    "SerializableErrorInfo",
    "SqlEventLogStorage",
    "SqlRunStorage",
    "TagConcurrencyLimitsCounter",
    "TickData",
    "TickStatus",
    "TimeWindowFreshnessPolicyEvaluator",
    "UserFacingGraphQLError",
    "WorkspaceFileTarget",
    "WorkspaceProcessContext",
    "WorkspaceRequestContext",
    "create_app_from_workspace_process_context",
    "create_execution_plan",
    "freeze_time",
    "job_execution_iterator",
    "orchestration_context_event_generator",
    "serialize_value",
    "webserver_version",
]


if not TYPE_CHECKING:  # type checkers see the imports above, and so catch a name that is not here

    def __getattr__(name: str) -> Any:
        if name not in WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module, attribute = WHERE[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
