"""The orchestrator that runs assets, as the CLI and the service ask it. Custody's is Dagster, in the
project's `assets` package, which depends on this core: the core finds it through the
`custody.orchestrator` entry point the package's installation declares, and never imports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from governance.config import Settings
from governance.errors import EnvironmentProblem
from governance.zones import AssetKey

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from governance.catalog import Catalog
    from governance.runs import RunOutcome
    from governance.service.principal import UiKeys
    from governance.service.runs import RunDesk

GROUP = "custody.orchestrator"


@dataclass(frozen=True)
class RepairedRun:
    """A run a repair dealt with, and the line that says what it did."""

    run_id: str
    said: str
    version: str | None = None


@dataclass(frozen=True)
class RunsRepaired:
    """What a repair did to the orchestrator's runs: those it marked failed, their launching process
    gone, and the versions such runs committed that it recorded as materializations."""

    failed: tuple[RepairedRun, ...]
    recorded: tuple[RepairedRun, ...]


class Orchestrator(Protocol):
    def launch(
        self,
        settings: Settings,
        selection: str | Sequence[AssetKey],
        requested_by: str,
        *,
        ingest_config: Mapping[AssetKey, Mapping[str, object]] | None = None,
        on_progress: Callable[[str], None] = ...,
        run_id: str | None = None,
        verbose: bool = False,
    ) -> RunOutcome:
        """Run the selected assets in one run, in this process, for `requested_by`, whose identity
        the caller established and recorded under `run_id`."""
        ...

    def repair(self, settings: Settings, catalog: Catalog) -> RunsRepaired: ...

    def ui(self, settings: Settings, workspace: Path, *, daemon: bool) -> AbstractContextManager[ASGIApp]:
        """The orchestrator's UI, served in this process while the block runs (its daemon beside it)."""
        ...

    def runs(self, settings: Settings, ui: ASGIApp, keys: UiKeys | None = None) -> RunDesk:
        """The service's run requests, put to `ui` (another process's when `keys` sign for it)."""
        ...


@cache
def orchestrator() -> Orchestrator:
    """The installed orchestrator: the one `custody.orchestrator` entry point."""
    found = list(entry_points(group=GROUP))
    if len(found) != 1:
        names = ", ".join(sorted(point.value for point in found)) or "none"
        raise EnvironmentProblem(
            f"Custody runs assets through the one orchestrator its installation declares (entry point group "
            f"{GROUP}), found {names}: install the project with `make setup`"
        )
    made: Orchestrator = found[0].load()()
    return made
