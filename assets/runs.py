"""Runs the CLI launches hold a lock for their life; a run whose lock nobody holds lost its process.

Dagster's run monitoring cannot tell: the default run launcher has no run worker health check, and a
run executed in process is no worker of any launcher. So each launch takes an exclusive `flock` on
`<run id>.lock` under `$CUSTODY_HOME/run-locks/<host>/` before its run exists and holds it until the
run has finished; the lock dies with the process. A lock file nobody holds, for a run still in
progress, is certain proof that the process that ran it is gone (a reused pid cannot fool it). Runs
launched by the Dagster webserver or daemon have no lock file, so they are left to Dagster; nor do
they keep a CLI run's process tags, which a re-execution copies (the run coordinator drops them).
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import dagster as dg

from assets.dagster_internals import free_pool_slots
from governance.config import Settings
from governance.locks import take_if_free

LEFT_AFTER_SECONDS = 60


@dataclass(frozen=True)
class GoneRun:
    run_id: str
    host: str
    pid: str

    def __str__(self) -> str:
        return f"run {self.run_id} (its process, pid {self.pid} on {self.host}, is gone)"

    @property
    def message(self) -> str:
        return (
            f"Marked failed by Custody: the process that ran it (pid {self.pid} on {self.host}) is gone, "
            "killed or crashed before the run finished."
        )


def locks_dir(settings: Settings) -> Path:
    """This host's locks only: a lock on a shared file system says nothing about another host's processes."""
    return settings.home / "run-locks" / quote(socket.gethostname(), safe="")


@contextmanager
def held_for_run(settings: Settings, instance: dg.DagsterInstance, run_id: str) -> Iterator[None]:
    """Hold the run's lock while the run executes."""
    folder = locks_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
    path = folder / f"{run_id}.lock"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{socket.gethostname()} {os.getpid()}".encode())
        # Renamed only once locked, so a sweep never sees the lock file of a live run unheld.
        os.rename(temporary, path)
        yield
        # A run this process could not finish keeps its lock file, for the next sweep to mark failed.
        if _unfinished(instance, run_id) is None:
            path.unlink()
    finally:
        os.close(fd)


def fail_runs_of_gone_processes(settings: Settings, instance: dg.DagsterInstance) -> list[GoneRun]:
    """Mark failed the runs of this host whose launching process is gone; return them."""
    folder = locks_dir(settings)
    if not folder.is_dir():
        return []
    marked = []
    for path in sorted(folder.glob("*.lock")):
        fd = take_if_free(path)
        if fd is None:
            continue
        try:
            run = _unfinished(instance, path.stem)
            if run is not None:
                marked.append(_mark_failed(instance, run, os.pread(fd, 1024, 0).decode(errors="replace")))
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
    for path in folder.glob("*.tmp"):
        _remove_if_left(path)
    return marked


def _remove_if_left(path: Path) -> None:
    """A lock file a process created but died before renaming into place. A live process holds its
    own a moment after creating it, hence the age."""
    fd = take_if_free(path)
    if fd is None:
        return
    try:
        if time.time() - os.fstat(fd).st_mtime > LEFT_AFTER_SECONDS:
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _unfinished(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun | None:
    """The run while it is in progress; None once it finished, or if its process died before creating it."""
    run = instance.get_run_by_id(run_id)
    return None if run is None or run.is_finished else run


def _mark_failed(instance: dg.DagsterInstance, run: dg.DagsterRun, process: str) -> GoneRun:
    """`process`: the lock file's `host pid`. The slot of the asset's pool its step held is freed:
    no step of the dead process will."""
    host, _, pid = process.partition(" ")
    gone = GoneRun(run.run_id, host or "?", pid or "?")
    instance.report_run_failed(run, gone.message)
    free_pool_slots(instance, run.run_id)
    return gone
