"""The `custody` command: the CLI imported with Python's collector paused."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def main() -> None:
    with collector_paused():
        from governance.cli import run
    sys.exit(run())


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's collector paused while a command loads its libraries, and what they built frozen.

    Importing the CLI, or the catalog's libraries (SQLAlchemy, SQLModel, pydantic), builds a few
    hundred thousand objects, none of them garbage; the collector would walk them again and again,
    a quarter of a short command's time. Frozen, they stay out of the collections the command
    itself triggers. Nothing is frozen when no module was loaded (a process that runs commands
    again and again, as tests do), since what is frozen is never collected."""
    loaded, collecting = len(sys.modules), gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) > loaded:
            gc.freeze()
        if collecting:
            gc.enable()
