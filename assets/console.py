"""What `make ui`'s console says about runs: one line for each run the coordinator refuses and for each
run that fails, and Dagster's own lines for runs of the UI, a sensor or a schedule only when
CUSTODY_VERBOSE is 1 (`make ui VERBOSE=1`).

Dagster logs a run on the console of its run worker with its default console logger, at the
instance's `python_logs.python_log_level`. That level also drops the run's own messages below it
from the event log, so it cannot be what quiets the console: `RunConsole` is a handler the instance's
`python_logs.dagster_handler_config` names (assets/dagster.yaml) instead.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import dagster as dg

from assets.dagster_internals import LOG_RECORD_METADATA_ATTR

VERBOSE_ENV = "CUSTODY_VERBOSE"
# The runs the CLI executes in this process, whose console the CLI keeps itself.
_EXECUTED_HERE: set[str] = set()


@contextmanager
def executed_here(run_id: str) -> Iterator[None]:
    """The run is the CLI's, in this process, while the block runs: RunConsole leaves it alone."""
    _EXECUTED_HERE.add(run_id)
    try:
        yield
    finally:
        _EXECUTED_HERE.discard(run_id)


def say(line: str) -> None:
    """One line on the process's console, worded as Dagster's own lines are."""
    stamp = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
    print(f"{stamp} - custody - {' '.join(line.split())}", file=sys.stderr, flush=True)


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def step_failure_message(event: dg.DagsterEvent) -> str:
    """What a failed step says: its Failure's description, else its error's message."""
    data = event.step_failure_data
    user = data.user_failure_data
    if user and user.description:
        return user.description
    return data.error.message.strip() if data.error else "failed"


def run_failure_reason(event: dg.DagsterEvent) -> str:
    data = event.job_failure_data
    step = data.first_step_failure_event
    if step is not None:
        return f"{(step.step_key or '?').replace('__', '/')}: {step_failure_message(step)}"
    return data.error.message.strip() if data.error else event.message or "failed"


class RunConsole(logging.Handler):
    """Sees each of a run's records before Dagster's console logger does. It says one line when a run
    fails and, unless CUSTODY_VERBOSE=1, leaves the record below every level so that logger drops it;
    the event log has already stored it. The CLI's runs are left alone: the CLI says their failures
    itself, and its --verbose chooses its console's level."""

    def __init__(self) -> None:
        super().__init__()
        self.verbose = verbose()

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, LOG_RECORD_METADATA_ATTR, None)
        if not isinstance(meta, dict) or meta.get("run_id") in _EXECUTED_HERE:
            return
        event = meta.get("dagster_event")
        if isinstance(event, dg.DagsterEvent) and event.event_type == dg.DagsterEventType.RUN_FAILURE:
            say(f"run {meta.get('run_id')} failed: {run_failure_reason(event)}")
        if not self.verbose:
            record.levelno = logging.NOTSET
