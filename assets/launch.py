"""Launch asset runs on Custody's Dagster instance, as the UI does, and follow their progress."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from assets.definitions import build_definitions
from assets.factory import REQUESTED_BY_TAG
from assets.runs import fail_runs_of_gone_processes, held_for_run
from governance.config import Settings
from governance.errors import InvalidInput, NotFound
from governance.zones import AssetKey

INSTANCE_YAML = "telemetry:\n  enabled: false\n"
QUIET_CONSOLE = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class StepFailure:
    asset: str
    message: str
    exit_code: int


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    success: bool
    versions: tuple[str, ...]
    failures: tuple[StepFailure, ...]


def instance_for(settings: Settings) -> dg.DagsterInstance:
    """The Dagster instance under CUSTODY_HOME that `make ui` shows too."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_YAML, encoding="utf-8")
    return dg.DagsterInstance.from_config(str(home))


def asset_key(key: AssetKey) -> dg.AssetKey:
    return dg.AssetKey([key.domain, key.name])


def resolve_selection(defs: dg.Definitions, selection: str) -> list[dg.AssetKey]:
    graph = defs.resolve_asset_graph()
    try:
        keys = dg.AssetSelection.from_string(selection).resolve(graph)
    except (dg.DagsterError, ValueError) as err:
        raise InvalidInput(f"invalid selection {selection!r}: {err}") from err
    if not keys:
        raise NotFound(f"selection {selection!r} matches no asset")
    return sorted(keys, key=lambda k: k.to_user_string())


def launch(
    settings: Settings,
    selection: str | Sequence[AssetKey],
    requested_by: str,
    *,
    ingest_config: Mapping[AssetKey, Mapping[str, object]] | None = None,
    on_progress: Callable[[str], None] = lambda _: None,
    run_id: str | None = None,
) -> RunOutcome:
    """Run the selected assets in one Dagster run on the shared instance."""
    defs = build_definitions(settings.specs, settings.cache_dir,
                             transform_packages=settings.transform_packages)
    if isinstance(selection, str):
        keys = resolve_selection(defs, selection)
    else:
        keys = [asset_key(k) for k in selection]
        _check_known(defs, keys)
    _check_ingestible(defs, ingest_config or {})
    ops = {"__".join(asset_key(k).path): {"config": dict(cfg)} for k, cfg in (ingest_config or {}).items()}
    run_config = {**QUIET_CONSOLE, "ops": ops} if ops else QUIET_CONSOLE
    instance = instance_for(settings)
    for gone in fail_runs_of_gone_processes(settings, instance):
        on_progress(f"marked failed: {gone}")
    run_id = run_id or str(uuid.uuid4())
    follower = _Follower(instance, run_id, on_progress)
    follower.start()
    try:
        with held_for_run(settings, instance, run_id) as process_tags:
            result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
                run_config=run_config, instance=instance, asset_selection=keys, run_id=run_id,
                tags={REQUESTED_BY_TAG: requested_by, "custody/launched_from": "cli", **process_tags},
                raise_on_error=False,
            )
    finally:
        follower.stop()
    return _outcome(result)


def _check_known(defs: dg.Definitions, keys: Sequence[dg.AssetKey]) -> None:
    known = defs.resolve_asset_graph().get_all_asset_keys()
    for key in keys:
        if key not in known:
            raise NotFound(f"unknown asset {key.to_user_string()}: no spec declares it")


def _check_ingestible(defs: dg.Definitions, ingest_config: Mapping[AssetKey, object]) -> None:
    graph = defs.resolve_asset_graph()
    for key in ingest_config:
        if graph.get(asset_key(key)).tags.get("custody/zone") != "landing":
            raise InvalidInput(f"{key} is an integration asset: it is built from its inputs, not ingested; use `custody materialize`")


def _outcome(result: dg.ExecuteInProcessResult) -> RunOutcome:
    versions = tuple(
        str(event.materialization.metadata["custody/version"].value)
        for event in result.get_asset_materialization_events()
    )
    failures = []
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        data = event.step_failure_data
        user = data.user_failure_data
        metadata = user.metadata if user else {}
        code = metadata.get("custody/exit_code")
        message = user.description if user and user.description else data.error.message.strip() if data.error else "failed"
        failures.append(StepFailure(event.step_key or "?", message, int(code.value) if code else 1))
    return RunOutcome(result.run_id, result.success, versions, tuple(failures))


class _Follower(threading.Thread):
    """Reads the run's event log while it executes and reports what each step says."""

    def __init__(self, instance: dg.DagsterInstance, run_id: str, report: Callable[[str], None]):
        super().__init__(daemon=True)
        self.instance, self.run_id, self.report = instance, run_id, report
        self.done = threading.Event()
        self.seen = 0

    def run(self) -> None:
        while not self.done.wait(POLL_SECONDS):
            self._poll()

    def stop(self) -> None:
        self.done.set()
        self.join()
        self._poll()

    def _poll(self) -> None:
        try:
            entries = self.instance.all_logs(self.run_id)
        except dg.DagsterError:
            return
        for entry in entries[self.seen:]:
            step = entry.step_key.replace("__", "/") if entry.step_key else ""
            if entry.is_dagster_event and entry.dagster_event.event_type_value == "STEP_START":
                self.report(f"{step}: started")
            elif not entry.is_dagster_event and entry.user_message:
                self.report(f"{step}: {entry.user_message}")
        self.seen = len(entries)
