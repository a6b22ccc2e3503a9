"""The contract of assets/dagster_internals.py: each private Dagster name Custody uses, held to what
Custody relies on. A Dagster release that moves, renames or reshapes one fails here, by name."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

import assets.dagster_internals as internals


def parameters(made: Callable[..., Any]) -> set[str]:
    """What `made` takes by name: a record's fields, else its signature's parameters (a class's
    `__init__`'s when its own signature hides them)."""
    fields = getattr(made, "_fields", None)
    if fields is not None:
        return set(fields)
    found = set(inspect.signature(made).parameters)
    if found <= {"args", "kwargs"} and inspect.isclass(made):
        found = set(inspect.signature(made.__init__).parameters) - {"self"}
    return found


# What the adapter defines itself, on the storage's methods.
POOL_FUNCTIONS = {"free_pool_slots", "pool_limit", "set_pool_limit"}


def test_every_name_the_adapter_lists_comes_from_the_module_it_names():
    assert sorted(set(internals.__all__) - POOL_FUNCTIONS) == sorted(internals.WHERE)
    for name, (module, attribute) in internals.WHERE.items():
        assert getattr(internals, name) is getattr(importlib.import_module(module), attribute), name


def test_no_module_of_custody_or_its_tests_imports_dagster_s_private_modules_but_the_adapter():
    from tests.conftest import ROOT

    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("assets", "resources", "governance", "tests", "benchmarks")
        for path in (ROOT / folder).rglob("*.py")
        if path.name not in ("dagster_internals.py", "test_dagster_internals.py")
        and any(
            line.lstrip().startswith(
                ("from dagster._", "import dagster._", "from dagster_graphql", "from dagster_webserver")
            )
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []


def test_the_code_location_loads_the_webserver_and_the_run_storage_only_when_asked():
    code = (
        "import sys\nimport assets.definitions, assets.sensors\n"
        "print(sorted(m for m in ('dagster_webserver', 'dagster_graphql') if m in sys.modules))"
    )
    import subprocess

    from tests.conftest import ROOT

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_the_run_tags_dagster_sets_keep_the_names_its_documentation_gives():
    import dagster._core.storage.tags as dagster_tags

    import assets.tags

    named = [name for name in dir(assets.tags) if name.endswith("_TAG")]
    assert len(named) == 9
    for name in named:
        assert getattr(assets.tags, name) == getattr(dagster_tags, name), name


def test_the_events_and_log_records_the_console_reads():
    assert "RUN_FAILURE" in dg.DagsterEventType.__members__
    assert isinstance(internals.LOG_RECORD_METADATA_ATTR, str)


def test_the_event_log_table_of_planned_checks_has_the_column_a_refusal_deletes_by():
    assert "run_id" in set(internals.AssetCheckExecutionsTable.c.keys())
    assert hasattr(internals.SqlEventLogStorage, "index_connection")


def test_a_translation_is_resolved_from_the_template_vars_the_component_gives():
    assert "template_vars_for_translation_fn" in parameters(internals.TranslationFnResolver)


def test_the_queue_s_config_takes_what_the_coordinator_gives():
    assert {"max_concurrent_runs", "tag_concurrency_limits"} <= set(internals.RunQueueConfig._fields)


def test_a_pool_s_limit_is_set_read_and_its_slots_freed_through_the_instance_s_storage(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        assert instance.event_log_storage.supports_global_concurrency_limits
        assert internals.pool_limit(instance, "sales/clients") is None
        internals.set_pool_limit(instance, "sales/clients", 2)
        assert internals.pool_limit(instance, "sales/clients") == 2
        assert instance.event_log_storage.claim_concurrency_slot("sales/clients", "r1", "step").is_claimed
        internals.free_pool_slots(instance, "r1")
        assert instance.event_log_storage.get_concurrency_info("sales/clients").claimed_slots == []


def test_a_tick_and_a_backfill_hold_what_the_coordinator_reads_of_them():
    assert {"instigator_name", "instigator_type", "status", "timestamp", "reserved_run_ids"} <= set(
        internals.TickData._fields
    )
    assert {"backfill_id", "backfill_timestamp", "tags"} <= parameters(internals.PartitionBackfill)
    with dg.instance_for_test() as instance:
        assert hasattr(instance.schedule_storage, "get_ticks_by_ids")


def test_a_refusal_reaches_the_launchpad_as_graphql_s_python_error():
    info = internals.SerializableErrorInfo("refused", stack=[], cls_name=None)
    error = internals.GraphenePythonError(info)
    assert internals.UserFacingGraphQLError(error).error is error
    assert {"message", "stack", "cls_name"} <= parameters(internals.SerializableErrorInfo)


def test_the_cli_s_in_process_runs_build_their_origin_and_plan_as_before():
    assert {"executable_path", "module_name", "working_directory"} <= parameters(internals.LoadableTargetOrigin)
    assert {"loadable_target_origin", "location_name"} <= parameters(internals.ManagedGrpcPythonEnvCodeLocationOrigin)
    assert {"code_location_origin", "repository_name"} <= parameters(internals.RemoteRepositoryOrigin)
    assert {"repository_origin", "job_name"} <= parameters(internals.RemoteJobOrigin)
    assert {"run_config", "instance_ref"} <= parameters(internals.create_execution_plan)
    assert {"context_event_generator", "job", "execution_plan"} <= parameters(internals.PlanOrchestrationContextManager)
    assert {"execution_plan", "iterator", "execution_context_manager"} <= parameters(
        internals.ExecuteRunWithPlanIterable
    )
    assert callable(internals.job_execution_iterator) and callable(internals.orchestration_context_event_generator)
    assert hasattr(internals.ReconstructableRepository, "for_module")
    assert inspect.isclass(internals.InMemoryJob) and inspect.isclass(internals.ExecutionPlan)


def test_the_webserver_app_is_built_from_a_workspace_of_files():
    assert "paths" in parameters(internals.WorkspaceFileTarget)
    assert inspect.isclass(internals.WorkspaceProcessContext) and inspect.isclass(internals.WorkspaceRequestContext)
    assert parameters(internals.create_app_from_workspace_process_context) >= {"workspace_process_context"}
    assert isinstance(internals.webserver_version, str)
    assert hasattr(internals.AssetGraph, "get_all_asset_keys")
    assert inspect.isclass(internals.ConfigurableClassData)


def test_the_instance_s_sensor_and_schedule_controls_take_what_custody_s_instance_passes_on(tmp_path):
    controls = {
        "start_sensor": ["remote_sensor"],
        "stop_sensor": ["instigator_origin_id", "selector_id", "remote_sensor"],
        "reset_sensor": ["remote_sensor"],
        "start_schedule": ["remote_schedule"],
        "stop_schedule": ["schedule_origin_id", "schedule_selector_id", "remote_schedule"],
        "reset_schedule": ["remote_schedule"],
    }
    for name, taken in controls.items():
        assert list(inspect.signature(getattr(dg.DagsterInstance, name)).parameters)[1:] == taken, name
    assert internals.CompoundID(remote_origin_id="origin", selector_id="selector").to_string() == "origin::selector"
    assert {"storage", "run_coordinator", "scheduler"} <= set(internals.InstanceRef.config_defaults(str(tmp_path)))
    assert hasattr(internals.RemoteSensor, "name") and hasattr(internals.RemoteSchedule, "name")
    assert hasattr(internals.InstigatorState, "instigator_name")


def test_dagster_s_graphql_changes_a_sensor_s_or_schedule_s_state_only_through_the_methods_custody_s_instance_holds():
    """Besides start, stop and reset (which CustodyInstance decides), Dagster's GraphQL writes a
    sensor's state only to move its cursor: a release that adds another way fails here."""
    import ast

    import dagster_graphql

    writes = {"add_instigator_state", "update_instigator_state", "delete_instigator_state", "wipe_all_schedules"}
    found = set()
    package = Path(dagster_graphql.__file__).parent
    for source in package.rglob("*.py"):
        for function in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef):
                continue
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in writes:
                    found.add((source.relative_to(package).as_posix(), function.name, call.func.attr))
    assert found == {
        ("implementation/fetch_sensors.py", "set_sensor_cursor", "add_instigator_state"),
        ("implementation/fetch_sensors.py", "set_sensor_cursor", "update_instigator_state"),
    }


def test_the_instance_class_dagster_yaml_names_is_the_one_every_process_opens(tmp_path):
    from assets.instance import CustodyInstance
    from assets.launch import INSTANCE_YAML

    (tmp_path / "dagster.yaml").write_text(INSTANCE_YAML.read_text(encoding="utf-8"), encoding="utf-8")
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    assert type(instance) is CustodyInstance
    assert type(dg.DagsterInstance.from_ref(instance.get_ref())) is CustodyInstance


def test_a_name_the_adapter_does_not_have_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        internals.NoSuchName  # noqa: B018
