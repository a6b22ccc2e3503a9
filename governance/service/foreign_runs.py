"""The API's runs and jobs of other tools, as OpenLineage reported them (see governance.foreign.history):
a run by its id, with its events as received for auditors; the jobs; a job's runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from governance.catalog import Catalog
from governance.errors import shown
from governance.foreign.history import dataset_detail, job_runs, jobs, run_detail
from governance.foreign.nodes import MOST_LISTED
from governance.service.api import Caller, answer, ledger_read
from governance.service.context import service_of

router = APIRouter(prefix="/api/v1")
Listed = Annotated[int, Query(ge=1, le=MOST_LISTED, description="At most this many.")]


@router.get("/lineage/runs/{run_id}", tags=["lineage"], response_class=JSONResponse)
async def foreign_run(
    principal: Caller,
    request: Request,
    run_id: str,
    events: Annotated[
        bool,
        Query(description="Also the run's facets and its events as received: for auditors and admins, recorded."),
    ] = False,
) -> Response:
    """A run of another tool's job by its id, or the beginning of it (8 characters or more; a parent
    run that reported nothing itself, by its whole id): its state, times, user, error and parent
    run, what it read (the Custody versions among it) and wrote, and the runs it is the parent of."""
    if events:
        await ledger_read(request, principal, run=shown(run_id, 80), read="foreign run events")
    store = service_of(request).custody.store
    return answer(await run_in_threadpool(_run, store, run_id, events))


@router.get("/lineage/jobs", tags=["lineage"], response_class=JSONResponse)
def foreign_jobs(principal: Caller, request: Request, limit: Listed = 100) -> Response:
    """The jobs other tools reported runs or job events of, the last active first, each with its runs
    counted by state, its last run, and what its last job event declared it reads and writes."""
    with service_of(request).custody.store.reading() as session:
        return answer({"jobs": jobs(session, limit)})


@router.get("/lineage/runs", tags=["lineage"], response_class=JSONResponse)
def foreign_job_runs(
    principal: Caller,
    request: Request,
    namespace: Annotated[str, Query(description="The job's namespace, as its events give it.")],
    job: Annotated[str, Query(description="The job's name, as its events give it.")],
    limit: Listed = 100,
) -> Response:
    """The runs of one job of another tool, the last started first."""
    with service_of(request).custody.store.reading() as session:
        return answer({"namespace": namespace, "job": job, "runs": job_runs(session, namespace, job, limit)})


def _run(store: Catalog, run_id: str, events: bool) -> dict:
    with store.reading() as session:
        return run_detail(session, run_id, events)


@router.get("/lineage/datasets", tags=["lineage"], response_class=JSONResponse)
def foreign_dataset(
    principal: Caller,
    request: Request,
    namespace: Annotated[str, Query(description="The dataset's namespace, as events give it.")],
    name: Annotated[str, Query(description="The dataset's name, as events give it.")],
) -> Response:
    """A dataset other tools named: the facets their dataset events gave it, and how many runs read and wrote it."""
    with service_of(request).custody.store.reading() as session:
        return answer(dataset_detail(session, namespace, name))
