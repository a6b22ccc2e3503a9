"""The service's run requests, put to the Dagster webserver it serves as the UI's launchRun
mutation, with the requester's principal signed as the gate signs a browser's: Custody's run
coordinator decides them exactly as it decides a launch from the UI. A run's state comes from the
instance."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import dagster as dg
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message

from assets.coordinator import REFUSED
from assets.factory import REQUESTED_BY_TAG
from assets.launch import instance_for, run_outcome, selected
from assets.origin import ASSET_JOB, LOCATION, REPOSITORY
from governance.config import Settings
from governance.errors import AccessDenied, InvalidInput, NotFound, ServiceUnavailable, error_summary, shown
from governance.service.principal import PRINCIPAL_HEADER, UiKeys, signed_principal
from governance.service.runs import RunAsked, RunState
from governance.service.sessions import Principal

LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on Error { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
# How long the webserver may take to answer a launch: it loads the code location's job, not the run.
LAUNCH_SECONDS = 120


class ApiRuns:
    """Run requests of the API, on the instance of `settings`, through the webserver `ui`, its
    principal signed with `keys` when `ui` is another process's."""

    def __init__(self, settings: Settings, ui: ASGIApp, keys: UiKeys | None = None):
        self.settings = settings
        self.ui = ui
        self.keys = keys
        self.instance = instance_for(settings)

    async def submit(self, asked: RunAsked, principal: Principal) -> str:
        params = await run_in_threadpool(self._params, asked)
        body = json.dumps({"query": LAUNCH, "variables": {"params": params}}).encode()
        try:
            status, said = await asyncio.wait_for(
                _post(self.ui, "/graphql", body, signed_principal(principal, self.keys, method="POST", body=body)),
                LAUNCH_SECONDS,
            )
        except TimeoutError as err:
            raise ServiceUnavailable(f"Dagster's webserver did not answer the launch in {LAUNCH_SECONDS} s") from err
        launched = _launched(status, said)
        kind = launched["__typename"]
        if kind == "LaunchRunSuccess":
            return str(launched["run"]["runId"])
        if kind == "RunConfigValidationInvalid":
            raise InvalidInput("; ".join(error["message"] for error in launched["errors"]))
        message = str(launched.get("message", kind))
        if message.startswith(REFUSED):
            raise AccessDenied(message.removeprefix(REFUSED))
        if kind == "PythonError":
            raise ServiceUnavailable(f"Dagster's webserver failed to launch the run: {shown(message, 500)}")
        raise InvalidInput(message)

    def _params(self, asked: RunAsked) -> dict[str, object]:
        """launchRun's variables, as the Launchpad sends them, for the assets asked and their batch."""
        keys = asked.keys()
        config = {keys[0]: {"batch": asked.batch, "force": asked.force}} if asked.batch or asked.force else {}
        chosen = selected(self.settings, asked.selection or keys, config)
        return {
            "selector": {
                "repositoryLocationName": LOCATION,
                "repositoryName": REPOSITORY,
                "jobName": ASSET_JOB,
                "assetSelection": [{"path": list(key.path)} for key in chosen.keys],
            },
            "runConfigData": chosen.run_config,
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in chosen.tags.items()]},
        }

    def state(self, run_id: str) -> RunState:
        try:
            uuid.UUID(run_id)
        except ValueError as err:
            raise InvalidInput(f"{shown(run_id)!r} is not a run id") from err
        instance = self.instance
        run = instance.get_run_by_id(run_id)
        if run is None:
            raise NotFound(f"no run {run_id} in the Dagster instance")
        outcome = run_outcome(instance, run_id) if run.is_finished else None
        return RunState(
            run_id=run_id,
            status=run.status.value,
            requested_by=run.tags.get(REQUESTED_BY_TAG),
            finished=run.is_finished,
            success=run.status == dg.DagsterRunStatus.SUCCESS,
            versions=outcome.versions if outcome else (),
            failures=outcome.failures if outcome else (),
        )

    def requested_by(self, run_id: str) -> str | None:
        run = self.instance.get_run_by_id(run_id)
        return run.tags.get(REQUESTED_BY_TAG) if run is not None else None


def _launched(status: int, said: bytes) -> dict[str, Any]:
    """The launchRun mutation's answer, or why there is none."""
    try:
        answered = json.loads(said)
        launched = (answered.get("data") or {}).get("launchRun")
    except (ValueError, AttributeError) as err:
        raise ServiceUnavailable(
            f"Dagster's webserver answered {status}: {shown(said.decode(errors='replace'), 200)}"
        ) from err
    if not isinstance(launched, dict):
        errors = answered.get("errors") or [{"message": f"status {status}"}]
        raise ServiceUnavailable(f"Dagster's webserver refused the launch: {shown(str(errors[0].get('message')), 500)}")
    return launched


async def _post(app: ASGIApp, path: str, body: bytes, principal: str) -> tuple[int, bytes]:
    """What the ASGI `app` answers a POST of `body` to `path` from this process: its status and body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (PRINCIPAL_HEADER.encode(), principal.encode()),
        ],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }
    answered = asyncio.Event()
    asked = False
    status, chunks = 500, []

    async def receive() -> Message:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # the one request has no more body: the client leaves once answered
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                answered.set()

    try:
        await app(scope, receive, send)
    except Exception as err:  # the webserver answered 500 and raised it again, as ASGI servers expect
        raise ServiceUnavailable(f"Dagster's webserver failed: {error_summary(err)}") from err
    return status, b"".join(chunks)
