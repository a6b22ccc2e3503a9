#!/usr/bin/env python
"""Kill -9 at random moments of ingest, materialize, purge and repair's own work, each a `custody`
command in a process group of its own on one home (the demo's specs, a folder lake, the SQLite
catalog), then `custody repair`, timed, and the checks of a consistent home: `repair --verify`
finds nothing damaged and no table out of line, the ledger's chain is intact, no batch landed twice,
and no Dagster run is left in progress. Goal: every kill leaves a consistent home.

    .venv/bin/python -m benchmarks.kill_storm                 # 100 kills
    .venv/bin/python -m benchmarks.kill_storm --kills 12 --seed 7
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from assets.launch import instance_for
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.zones import Lake

ROOT = Path(__file__).resolve().parent.parent
CUSTODY = str(Path(sys.executable).with_name("custody"))
# When to kill each kind of work, in seconds after it starts: a command that starts Spark runs for
# ten or more; purge and repair for a few.
WINDOWS = {"ingest": (0.5, 16.0), "materialize": (0.5, 18.0), "purge": (0.1, 2.0), "repair": (0.2, 5.0)}


@dataclass(frozen=True)
class Kill:
    operation: str
    after: float
    mid_operation: bool
    repair_seconds: float
    problems: tuple[str, ...]


def environ(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CUSTODY_HOME": str(home),
        "CUSTODY_SPECS": str(ROOT / "assets" / "specs"),
        "CUSTODY_SPECS_APPROVAL": "off",
        "PYTHONPATH": str(ROOT),
    }


def custody(home: Path, *args: str, user: str | None = None) -> subprocess.CompletedProcess:
    env = environ(home) | ({"CUSTODY_PASSWORD": demo_password(user)} if user else {})
    return subprocess.run([CUSTODY, *args], env=env, cwd=ROOT, capture_output=True, text=True, check=False)


def command(home: Path, operation: str, rng: random.Random) -> tuple[list[str], str]:
    """The command of one kind of work, and its user; new batches are dropped for an ingestion."""
    if operation == "ingest":
        drop_demo_batches(Lake(home / "lake"))
        return ["ingest", rng.choice(["sales/clients", "sales/products"]), "--as", "bob"], "bob"
    if operation == "materialize":
        return ["materialize", "sales/names_and_products", "--as", "alice"], "alice"
    if operation == "purge":
        oldest = oldest_committed(home, "sales/clients")
        return (["purge", oldest, "--by", "alice"] if oldest else ["purge", "--dry-run"]), "alice"
    return ["repair"], "admin"


def oldest_committed(home: Path, asset: str) -> str | None:
    """The oldest committed version of `asset` but its newest: a purge may take it."""
    with sqlite3.connect(home / "catalog.db") as database:
        numbers = [
            n
            for (n,) in database.execute(
                "SELECT number FROM version WHERE asset_key = ? AND status = 'committed' ORDER BY number", (asset,)
            )
        ]
    return f"{asset}@{numbers[0]}" if len(numbers) > 1 else None


def killed(home: Path, operation: str, rng: random.Random) -> tuple[float, bool]:
    """Start the work, kill its process group at a random moment; whether it was still running."""
    args, user = command(home, operation, rng)
    env = environ(home) | {"CUSTODY_PASSWORD": demo_password(user)}
    child = subprocess.Popen(
        [CUSTODY, *args],
        env=env,
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = rng.uniform(*WINDOWS[operation])
    try:
        child.wait(timeout=after)
        return after, False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        return after, True


def problems(home: Path) -> tuple[str, ...]:
    """What makes the home inconsistent, after a repair: nothing, when it is whole."""
    found = []
    verified = custody(home, "repair", "--verify")
    said = verified.stdout + verified.stderr
    if verified.returncode != 0 or "damaged" in said or "not aligned" in said or "rolled back" in said:
        found.append(f"repair --verify: {said.strip()[:300]}")
    chain = custody(home, "ledger", "verify")
    if "chain intact" not in chain.stdout:
        found.append(f"ledger verify: {(chain.stdout + chain.stderr).strip()[:300]}")
    with sqlite3.connect(home / "catalog.db") as database:
        twice = database.execute(
            "SELECT asset_key, fingerprint FROM batch GROUP BY asset_key, fingerprint HAVING COUNT(*) > 1"
        ).fetchall()
    found.extend(f"batch landed twice: {asset} {fingerprint[:12]}" for asset, fingerprint in twice)
    instance = instance_for(Settings.from_env(environ(home)))
    running = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    found.extend(f"run {run.run_id} left STARTED" for run in running)
    return tuple(found)


def storm(kills: int, seed: int) -> list[Kill]:
    rng = random.Random(seed)
    home = Path(tempfile.mkdtemp(prefix="custody-kills-")) / "home"
    drop_demo_batches(Lake(home / "lake"))
    for asset in ("sales/products", "sales/clients"):
        assert custody(home, "ingest", asset, "--as", "bob", user="bob").returncode == 0
    done = []
    for number in range(1, kills + 1):
        operation = rng.choice(list(WINDOWS))
        after, mid = killed(home, operation, rng)
        started = time.perf_counter()
        repaired = custody(home, "repair")
        seconds = time.perf_counter() - started
        found = problems(home)
        if repaired.returncode != 0:
            found = (f"repair exit {repaired.returncode}: {repaired.stderr.strip()[:300]}", *found)
        done.append(Kill(operation, after, mid, seconds, found))
        state = "consistent" if not found else "INCONSISTENT: " + "; ".join(found)
        print(
            f"{number:3d} {operation:<11} killed after {after:5.1f} s, {'mid-operation' if mid else 'after it ended'};"
            f" repair {seconds:4.1f} s; {state}",
            flush=True,
        )
    print(f"home kept for a look: {home}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=61)
    options = parser.parse_args()
    done = storm(options.kills, options.seed)
    consistent = sum(not kill.problems for kill in done)
    mid = sum(kill.mid_operation for kill in done)
    by_kind = {kind: sum(kill.operation == kind for kill in done) for kind in WINDOWS}
    print(
        f"{len(done)} kills ({', '.join(f'{n} {kind}' for kind, n in by_kind.items())}), {mid} mid-operation; "
        f"{consistent} consistent; median repair {statistics.median(k.repair_seconds for k in done):.2f} s"
    )
    print("goal: all consistent:", "MET" if consistent == len(done) else "MISSED")


if __name__ == "__main__":
    main()
