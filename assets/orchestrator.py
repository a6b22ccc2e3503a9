"""Dagster as the orchestrator the CLI and the service ask to run assets (governance.orchestration):
the project's installation names this class as its `custody.orchestrator` entry point."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from governance.config import Settings
from governance.orchestration import RepairedRun, RunsRepaired
from governance.zones import AssetKey

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from governance.catalog import Catalog
    from governance.runs import RunOutcome
    from governance.service.principal import UiKeys
    from governance.service.runs import RunDesk


class DagsterOrchestrator:
    """Runs in the code location's instance, the webserver and the daemon; each part of Dagster is
    imported when first asked for, so a command that runs nothing loads none of it."""

    def launch(
        self,
        settings: Settings,
        selection: str | Sequence[AssetKey],
        requested_by: str,
        *,
        ingest_config: Mapping[AssetKey, Mapping[str, object]] | None = None,
        on_progress: Callable[[str], None] = lambda _: None,
        run_id: str | None = None,
        verbose: bool = False,
    ) -> RunOutcome:
        from assets.launch import launch

        return launch(
            settings,
            selection,
            requested_by,
            ingest_config=ingest_config,
            on_progress=on_progress,
            run_id=run_id,
            verbose=verbose,
        )

    def repair(self, settings: Settings, catalog: Catalog) -> RunsRepaired:
        from assets.launch import instance_for
        from assets.reconcile import record_committed_versions
        from assets.runs import fail_runs_of_gone_processes

        instance = instance_for(settings)
        gone = fail_runs_of_gone_processes(settings, instance)
        told = record_committed_versions(catalog, instance)
        return RunsRepaired(
            tuple(RepairedRun(run.run_id, str(run)) for run in gone),
            tuple(RepairedRun(done.run_id, str(done), done.ref) for done in told),
        )

    @contextmanager
    def ui(self, settings: Settings, workspace: Path, *, daemon: bool) -> Iterator[ASGIApp]:
        from assets.lander import resident_lander, wanted
        from assets.ui import dagster_daemon, dagster_ui

        with ExitStack() as stack:
            if daemon:
                stack.enter_context(dagster_daemon(settings, workspace))
                if wanted():
                    stack.enter_context(resident_lander(settings))
            yield stack.enter_context(dagster_ui(settings, workspace))

    def runs(self, settings: Settings, ui: ASGIApp, keys: UiKeys | None = None) -> RunDesk:
        from assets.api_runs import ApiRuns

        return ApiRuns(settings, ui, keys)
