"""The API's run requests: ingest a DropZone batch, or materialize assets, as a run submitted to the
Dagster instance through the webserver this service serves, as the UI's Materialize submits it.
Custody's run coordinator decides the run for the token's user, verified, and records it with
channel `api`; Dagster's daemon then takes it off the queue. A run's state says whether it ended,
the versions it committed, and why a step failed."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from governance.errors import ServiceUnavailable
from governance.runs import StepFailure
from governance.service.api import Caller, answer
from governance.service.context import service_of
from governance.service.sessions import Principal
from governance.zones import AssetKey

router = APIRouter(prefix="/api/v1")


class RunAsked(BaseModel):
    """Assets by key, or a Dagster selection; a batch (and `force`) only to ingest one landing asset."""

    model_config = ConfigDict(extra="forbid")

    assets: list[str] = Field(default_factory=list, max_length=1000, description="DOMAIN/NAME each.")
    selection: str | None = Field(
        None, max_length=2000, description="A Dagster asset selection, e.g. 'tag:custody/zone=integration'."
    )
    batch: str | None = Field(
        None, max_length=256, description="The DropZone batch to ingest (default: the oldest ready one)."
    )
    force: bool = Field(False, description="Ingest the batch even if its content was ingested before.")

    @model_validator(mode="after")
    def one_way_to_select(self) -> RunAsked:
        if bool(self.assets) == bool(self.selection):
            raise ValueError("give the assets to run or a selection, not both and not neither")
        if (self.batch or self.force) and len(self.assets) != 1:
            raise ValueError("batch and force ingest one landing asset: name it alone in assets")
        return self

    def keys(self) -> list[AssetKey]:
        return [AssetKey.parse(name) for name in self.assets]


@dataclass(frozen=True)
class RunState:
    run_id: str
    status: str
    requested_by: str | None
    finished: bool
    success: bool
    versions: tuple[str, ...] = ()
    failures: tuple[StepFailure, ...] = ()


class RunDesk(Protocol):
    """What the service asks of Dagster to take run requests (assets/api_runs.py answers it)."""

    async def submit(self, asked: RunAsked, principal: Principal) -> str:
        """The id of the run submitted for `principal`; AccessDenied when Custody refused it."""
        ...

    def state(self, run_id: str) -> RunState: ...

    def requested_by(self, run_id: str) -> str | None:
        """Whom the run is for, as it was decided; None for a run the instance does not hold."""
        ...


def desk_of(request: Request) -> RunDesk:
    desk = service_of(request).runs
    if desk is None:
        raise ServiceUnavailable(
            "this service takes no run requests: it was started without the Dagster UI (`custody serve --no-ui`)"
        )
    return desk


@router.post("/runs", status_code=202, tags=["runs"], response_class=JSONResponse)
async def request_run(principal: Caller, request: Request, asked: RunAsked) -> Response:
    """Ask for a run: ingest a ready DropZone batch of a landing asset (its producer or owner), or
    materialize assets (their producer or owner, who may read their inputs). Decided at submission,
    as a UI launch is; a refused run is not created. The run is queued: GET /runs/{run_id} follows it."""
    run_id = await desk_of(request).submit(asked, principal)
    return answer({"run_id": run_id, "requested_by": principal.user}, status_code=202)


@router.get("/runs/{run_id}", tags=["runs"], response_class=JSONResponse)
def run_state(principal: Caller, request: Request, run_id: str) -> Response:
    """A run's status; once it has ended, the versions it committed and each step's failure."""
    return answer(asdict(desk_of(request).state(run_id)))
