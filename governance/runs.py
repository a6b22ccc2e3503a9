"""Who asked for a run and which run it is; attempts that record their own failure."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from governance import ledger
from governance.catalog import Catalog, utcnow
from governance.errors import CommitUnknown, EnvironmentProblem, NotFound, reason_of
from governance.zones import AssetKey, Lake, Staging, new_attempt_id

if TYPE_CHECKING:
    from governance.catalog.models import VersionRow

Progress = Callable[[str], None]


def os_user() -> str:
    """Who runs this process, as the operating system knows its user (not as the environment's
    LOGNAME or USER say): the actor of housekeeping."""
    return user_name(os.geteuid())


def user_name(uid: int) -> str:
    """The name of an OS user id, as the passwd database has it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a user id without a passwd entry, as in some containers
        return f"uid {uid}"


def quiet(_message: str) -> None:
    """A progress callback that says nothing."""


@dataclass(frozen=True)
class StepFailure:
    asset: str
    message: str
    exit_code: int


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: the versions it committed and each step's failure."""

    run_id: str
    success: bool
    versions: tuple[str, ...]
    failures: tuple[StepFailure, ...]


class Assurance(StrEnum):
    """How the requester's identity was established."""

    VERIFIED = "verified"
    ASSERTED = "asserted"
    SYSTEM = "system"
    NONE = "none"


@dataclass(frozen=True)
class RunRequest:
    """The run a version is produced in, and the person it is produced for."""

    requested_by: str
    run_id: str | None = None
    started_at: datetime = field(default_factory=utcnow)
    code_version: str = ""
    assurance: Assurance = Assurance.ASSERTED
    job_name: str | None = None


@contextmanager
def attempt(
    catalog: Catalog,
    lake: Lake,
    key: AssetKey,
    request: RunRequest,
    failed_action: str,
    details: Mapping[str, Any] | None = None,
    inputs: Sequence[VersionRow] = (),
) -> Iterator[tuple[str, Staging]]:
    """A locked staging folder and an attempt row naming the `inputs` it reads, which no purge
    removes while it runs; a failure is recorded in the ledger, with `details`, then re-raised. A
    write that finds the lake's file system full fails as StorageFull."""
    # Imported here: it brings in PySpark, which the catalog's commands that import this module never use.
    from governance.spark.errors import writing

    attempt_id = new_attempt_id()
    with _started(catalog, lake, key, request, failed_action, details, inputs, attempt_id) as stage:
        try:
            with writing(lake.name):
                yield attempt_id, stage
        except CommitUnknown:
            raise  # committed or not, it is not failed: repair finds out which, and says so
        except BaseException as err:
            _fail_attempt(catalog, attempt_id, key, request, failed_action, err, details or {})
            raise


@contextmanager
def _started(
    catalog: Catalog,
    lake: Lake,
    key: AssetKey,
    request: RunRequest,
    failed_action: str,
    details: Mapping[str, Any] | None,
    inputs: Sequence[VersionRow],
    attempt_id: str,
) -> Iterator[Staging]:
    """The attempt's staging folder, locked, and its row. A lake it cannot be staged in, or an
    input purged meanwhile, is recorded as the request's failure, as a failure after it would be."""
    started = False
    try:
        with lake.staging(attempt_id) as stage:
            catalog.start_attempt(attempt_id, key, request.run_id, request.requested_by, inputs)
            started = True
            yield stage
    except (EnvironmentProblem, NotFound) as err:
        if not started:
            record_failure(catalog, key, request, failed_action, err, details)
        raise


def _fail_attempt(
    catalog: Catalog,
    attempt_id: str,
    key: AssetKey,
    request: RunRequest,
    action: str,
    err: BaseException,
    details: Mapping[str, Any],
) -> None:
    with catalog.session() as session:
        catalog.finish_attempt(session, attempt_id, "failed", error=reason_of(err))
        _append_failure(session, key, request, action, err, {"attempt": attempt_id, **details})


def record_failure(
    catalog: Catalog,
    key: AssetKey,
    request: RunRequest,
    action: str,
    err: BaseException,
    details: Mapping[str, Any] | None = None,
) -> None:
    """A request that failed before it had an attempt: a ledger entry with its reason."""
    with catalog.session() as session:
        _append_failure(session, key, request, action, err, details or {})


def _append_failure(
    session, key: AssetKey, request: RunRequest, action: str, err: BaseException, details: Mapping[str, Any]
) -> None:
    ledger.append(
        session,
        actor=request.requested_by,
        action=action,
        asset=str(key),
        run_id=request.run_id,
        assurance=request.assurance,
        details={"error": reason_of(err), "error_type": type(err).__name__, **details},
    )
