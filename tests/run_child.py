"""Run a real `custody ingest` and hold it mid-ingestion until it is killed, for tests/test_abandoned_runs.py.

Usage: run_child.py ASSET BATCH [after-commit], with CUSTODY_HOME and the other settings in the
environment. The ingestion stops where it would commit (or, with after-commit, once it has committed)
and sleeps; the test kills it or lets it live.
"""

from __future__ import annotations

import os
import sys
import time

import governance.ingest as ingest_module
from governance.api import PASSWORD_VARIABLE
from governance.cli import run
from governance.demo import demo_password


def hold(*args, **kwargs) -> None:
    time.sleep(600)


def commit_then_hold(*args, **kwargs) -> None:
    committing(*args, **kwargs)
    hold()


committing = ingest_module.commit


def main() -> None:
    asset, batch = sys.argv[1], sys.argv[2]
    ingest_module.commit = commit_then_hold if sys.argv[3:] == ["after-commit"] else hold
    os.environ[PASSWORD_VARIABLE] = demo_password("bob")
    sys.exit(run(["ingest", asset, "--batch", batch, "--as", "bob"]))


if __name__ == "__main__":
    main()
