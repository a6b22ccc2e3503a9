#!/usr/bin/env python
"""How long the `custody` command takes to start: `custody --help`, and commands that touch neither
Spark nor Dagster, each in a fresh process (stdout to a pipe), on a home with the demo's specs and
an empty catalog. Beside them, the floor this machine gives such a command: the interpreter alone,
with the CLI's own libraries (typer and rich), and with the catalog's (pydantic, SQLAlchemy and
SQLModel), which every command that reads the catalog loads. Then the same reads as a client of the
Custody service (`custody serve` on loopback, CUSTODY_URL set, signed in as the demo's auditor),
which loads no database library. Goal: <= 0.3 s each.

    .venv/bin/python -m benchmarks.cli_start
    .venv/bin/python -m benchmarks.cli_start --runs 21
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from governance.runs import os_user

ROOT = Path(__file__).resolve().parent.parent
CUSTODY = Path(sys.executable).with_name("custody")
GOAL_SECONDS = 0.3

COMMANDS: tuple[tuple[str, list[str]], ...] = (
    ("python -c pass (floor)", [sys.executable, "-c", "pass"]),
    ("python: import typer, rich (floor)", [sys.executable, "-c", "import typer, rich.console, rich.table"]),
    (
        "python: + pydantic, sqlalchemy, sqlmodel (floor)",
        [sys.executable, "-c", "import typer, rich.console, pydantic, sqlalchemy.orm, sqlmodel"],
    ),
    ("custody --help", [str(CUSTODY), "--help"]),
    ("custody specs schema", [str(CUSTODY), "specs", "schema"]),
    ("custody catalog --json", [str(CUSTODY), "catalog", "--json"]),
    ("custody ledger show --limit 10 --json", [str(CUSTODY), "ledger", "show", "--limit", "10", "--json"]),
    ("custody settings show", [str(CUSTODY), "settings", "show"]),
)

THROUGH_SERVICE: tuple[tuple[str, list[str]], ...] = (
    ("custody catalog --json (service)", [str(CUSTODY), "catalog", "--json"]),
    ("custody ledger show --limit 10 --json (service)", [str(CUSTODY), "ledger", "show", "--limit", "10", "--json"]),
    ("custody settings show (service)", [str(CUSTODY), "settings", "show"]),
    ("custody tables list (service)", [str(CUSTODY), "tables", "list"]),
    ("custody access show sales/products (service)", [str(CUSTODY), "access", "show", "sales/products"]),
)
AUDITOR = "dave"  # the demo's auditor


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode(errors='replace')[-500:]}")
    return elapsed


@contextmanager
def service(env: dict[str, str], config: Path) -> Iterator[dict[str, str]]:
    """`custody serve` on the home, and the environment of a client signed in to it as the auditor."""
    from benchmarks.service import start_service
    from governance.demo import demo_password

    server, api = start_service(env)
    try:
        client = {**env, "CUSTODY_URL": api.removesuffix("/api/v1"), "XDG_CONFIG_HOME": str(config)}
        login = subprocess.run(
            [str(CUSTODY), "login", AUDITOR, "--password-stdin"],
            env=client,
            input=f"{demo_password(AUDITOR)}\n",
            text=True,
            capture_output=True,
            check=False,
        )
        if login.returncode != 0:
            raise SystemExit(f"custody login {AUDITOR} failed: {login.stderr[-500:]}")
        yield client
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def report(name: str, command: list[str], env: dict[str, str], runs: int) -> None:
    times = [timed(command, env) for _ in range(runs)][1:]
    met = "" if "floor" in name else ("  met" if statistics.median(times) <= GOAL_SECONDS else "  NOT met")
    print(f"{name:50} {statistics.median(times):7.3f}s {min(times):7.3f}s {max(times):7.3f}s{met}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11, help="fresh processes per command (the first is a warm-up)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder) / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))}
        # In process, the OS user running the benchmark is the auditor, who may read the ledger.
        env.update(
            CUSTODY_HOME=str(home),
            CUSTODY_SPECS=str(ROOT / "assets" / "specs"),
            CUSTODY_SPECS_APPROVAL="off",
            CUSTODY_OS_USERS=f"{os_user()}={AUDITOR}",
        )
        timed([str(CUSTODY), "catalog", "--json"], env)  # the catalog made and migrated once, before timing
        print(f"{'command':50} {'median':>8} {'min':>8} {'max':>8}  goal <= {GOAL_SECONDS:.1f} s")
        for name, command in COMMANDS:
            report(name, command, env, args.runs)
        with service(env, Path(folder) / "config") as client:
            for name, command in THROUGH_SERVICE:
                report(name, command, client, args.runs)


if __name__ == "__main__":
    main()
