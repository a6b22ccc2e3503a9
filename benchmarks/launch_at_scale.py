#!/usr/bin/env python
"""`custody ingest` of one asset among 10,000 specs vs. the same among the demo's 4: how long from the
command's start to Spark's first job, and to its end; and the run coordinator's cost at each size.

Each size is a folder of the demo's specs (sales/…) and, for the large one, --specs more generated as
benchmarks/definitions_load.py generates them (landing assets and integration assets reading 1-2
earlier ones). Each measurement is a `custody ingest sales/products` process of its own, on a fresh
home with the demo's batches dropped (its first use, so with no spec cache) and Spark's event log
on: Spark's first job is the submission time of the log's first SparkListenerJobStart, against the
time the process was started. The sizes alternate, --repeat times; prints each measurement, the
medians, and the goal: the large folder within 1 s of the small one to Spark's first job.

The coordinator, in a process of its own at each size, on a home where sales/products was ingested:
its decision of a run of sales/product_summary as the webserver or the daemon submits one (the
requester established first, as the CLI does; the decisions and their ledger entries included), and
the queue's settings it gives the daemon at each dequeue, with 10 runs queued; medians of 20, against
the goals of 50 ms and 5 ms.

    .venv/bin/python benchmarks/launch_at_scale.py                     # 10,000 specs, 3 repeats
    .venv/bin/python benchmarks/launch_at_scale.py --specs 1000 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.definitions_load import generate
from governance.config import Settings
from governance.demo import drop_demo_batches
from governance.zones import Lake

CUSTODY = ROOT / ".venv" / "bin" / "custody"
DEMO_SPECS = ROOT / "assets" / "specs"
GOAL_SECONDS = 1.0


def folder(root: Path, extra: int) -> Path:
    """The demo's specs, and `extra` generated ones beside them."""
    made = root / f"specs-{extra}"
    if extra:
        generate(made, extra)
        specs = made / "specs"
    else:
        specs = made / "specs"
        specs.mkdir(parents=True)
    shutil.copytree(DEMO_SPECS / "sales", specs / "sales")
    return specs


def ingest(root: Path, specs: Path, run: int) -> tuple[dict[str, float], Path]:
    """One `custody ingest sales/products` on a fresh home: seconds to Spark's first job, and to its
    end; and the home."""
    home = Path(tempfile.mkdtemp(prefix=f"home-{run}-", dir=root))
    events = home / "spark-events"
    events.mkdir()
    env = {
        **os.environ,
        "CUSTODY_HOME": str(home),
        "CUSTODY_SPECS": str(specs),
        "CUSTODY_SPECS_APPROVAL": "off",
        "CUSTODY_TRANSFORM_PACKAGES": "assets.transforms,benchmarks.bench_transforms",
        "CUSTODY_OS_USERS": f"{getpass.getuser()}=bob",
        "CUSTODY_SPARK_CONF": (
            f"spark.eventLog.enabled=true,spark.eventLog.compress=false,spark.eventLog.dir=file://{events}"
        ),
    }
    env.pop("CUSTODY_URL", None)
    drop_demo_batches(Lake(Settings.under(home).lake))
    started = time.time()
    done = subprocess.run(
        [str(CUSTODY), "ingest", "sales/products"], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"custody ingest failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"first_job": first_job(events) - started, "total": ended - started}, home


def first_job(events: Path) -> float:
    """The submission time of the first job in Spark's event log, in seconds since the epoch."""
    for log in sorted(events.rglob("events_*")):
        for line in log.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerJobStart":
                return event["Submission Time"] / 1000
    raise SystemExit(f"no Spark job in the event log under {events}")


def coordinator(specs: Path, home: Path) -> dict[str, float]:
    """Milliseconds the coordinator takes to decide one run, and to give the queue's settings."""
    done = subprocess.run(
        [sys.executable, __file__, "--coordinator", str(specs), str(home)],
        env=os.environ.copy(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the coordinator's measurement failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_coordinator(specs: Path, home: Path) -> None:
    import uuid

    import dagster as dg

    from assets.factory import REQUESTED_BY_TAG
    from assets.launch import instance_for
    from assets.origin import ASSET_JOB, remote_origin
    from governance.api import Custody

    os.environ.update(
        {
            "CUSTODY_HOME": str(home),
            "CUSTODY_SPECS": str(specs),
            "CUSTODY_SPECS_APPROVAL": "off",
            "CUSTODY_TRANSFORM_PACKAGES": "assets.transforms,benchmarks.bench_transforms",
            "CUSTODY_OS_USERS": f"{getpass.getuser()}=bob",
        }
    )
    settings = Settings.from_env()
    instance = instance_for(settings)
    custody = Custody(settings)
    coordinator = instance.run_coordinator
    for _ in range(10):
        queued = dg.DagsterRun(
            job_name=ASSET_JOB,
            run_id=str(uuid.uuid4()),
            status=dg.DagsterRunStatus.QUEUED,
            remote_job_origin=remote_origin(),
            tags={"custody/domain/sales": "1"},
        )
        instance.add_run(queued)
    decisions, dequeues = [], []
    for _ in range(20):
        run_id = str(uuid.uuid4())
        identity = custody.identity(None, None, run_id)
        run = instance.add_run(
            dg.DagsterRun(
                job_name=ASSET_JOB,
                run_id=run_id,
                asset_selection=frozenset({dg.AssetKey(["sales", "product_summary"])}),
                tags={REQUESTED_BY_TAG: identity.user},
            )
        )
        started = time.perf_counter()
        coordinator.admit(run)
        decisions.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        coordinator.get_run_queue_config()
        dequeues.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"submission_ms": statistics.median(decisions), "dequeue_ms": statistics.median(dequeues)}))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--coordinator":
        measure_coordinator(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specs", type=int, default=10_000, help="generated specs beside the demo's (default 10,000)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="launch-at-scale-"))
    try:
        sizes = {4: folder(root, 0), 4 + args.specs: folder(root, args.specs)}
        found: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
        homes: dict[int, Path] = {}
        for run in range(args.repeat):
            for size, specs in sizes.items():
                measured, homes[size] = ingest(root, specs, run)
                found[size].append(measured)
                print(
                    f"{size:>6} specs: Spark's first job {measured['first_job']:6.2f} s, done {measured['total']:6.2f} s"
                )
        small, large = (
            {key: statistics.median(m[key] for m in found[size]) for key in ("first_job", "total")} for size in sizes
        )
        gap = large["first_job"] - small["first_job"]
        print()
        for size, specs in sizes.items():
            cost = coordinator(specs, homes[size])
            print(
                f"{size:>6} specs: coordinator {cost['submission_ms']:6.1f} ms a submission (goal <= 50: "
                f"{'met' if cost['submission_ms'] <= 50 else 'MISSED'}), {cost['dequeue_ms']:5.2f} ms a dequeue "
                f"(goal <= 5: {'met' if cost['dequeue_ms'] <= 5 else 'MISSED'})"
            )
        print(
            f"\nmedians: {min(sizes)} specs {small['first_job']:.2f} s to the first job ({small['total']:.2f} s in all); "
            f"{max(sizes)} specs {large['first_job']:.2f} s ({large['total']:.2f} s)"
        )
        print(
            f"gap to Spark's first job: {gap:+.2f} s (goal <= {GOAL_SECONDS:.0f} s): {'met' if gap <= GOAL_SECONDS else 'MISSED'}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
