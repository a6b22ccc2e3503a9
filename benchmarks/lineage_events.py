#!/usr/bin/env python
"""Other tools' OpenLineage events received by `custody serve`, on a catalog of 10,000 versions (the
"assets" shape of benchmarks.provenance).

1. Load: 8 connections of wrk for 60 s on loopback, each posting one run event at a time to
   POST /api/v1/lineage with the token of the demo's service account `lineage-bot`, the next as
   soon as the last is answered: a START of a new run (a random run id) that read one landing
   version, named by its folder in the lake, and wrote a table. Each is validated against the
   specification's JSON Schema, decided (`lineage.report`, in the ledger), kept and joined to the
   version it read. Events accepted per second, p50/p95/p99, errors (an answer of 400 or more, a
   failed or timed-out connection). Goal: at least 1,000 events/s, p95 at most 50 ms, no error.
   wrk (Debian's package `wrk`) runs as a second process on the same machine.
2. Impact: 1,000 foreign runs of 20 jobs (each run an Airflow task's, under a DAG run), posted in
   lists of 100, read one landing version; `custody impact <version>` in a process of its own, end
   to end (start, catalog, the tree, JSON or text): in process on the catalog, and as a client of
   the service (`CUSTODY_URL`, signed in as carol), with the service's own answer timed apart and
   the printed tree's size, by job and with `--runs`. Goal: at most 1 s end to end, both ways.

    .venv/bin/python -m benchmarks.lineage_events
    .venv/bin/python -m benchmarks.lineage_events --seconds 10 --readers 200   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests
from sqlmodel import select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import build_catalog, generate_assets
from benchmarks.service import load_with, start_service, token
from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.models import VersionRow
from governance.config import Settings
from governance.lineage.graph import impact
from governance.zones import VersionRef

CUSTODY = Path(sys.executable).with_name("custody")
SEED = 7
EVENTS_GOAL = 1_000
P95_GOAL_MS = 50
IMPACT_GOAL_S = 1.0
PRODUCER = "https://example.com/benchmarks/lineage_events"
EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"

PARENT_FACET = "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet"
ERROR_FACET = "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
# The jobs the impact's readers are runs of.
JOBS = 20

# Each request a START of a new run; wrk's threads each seed their own random run ids.
WRK_SCRIPT = """
local paths = {%s}
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end
function init(args)
  math.randomseed(os.time() * 1000 + id)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
local function uuid()
  return (string.gsub("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", "[xy]", function(c)
    return string.format("%%x", c == "x" and math.random(0, 15) or math.random(8, 11))
  end))
end
local batch = %d
request = function()
  local events = {}
  for i = 1, batch do
    events[i] = string.format(%s, uuid(), paths[math.random(#paths)])
  end
  local body = batch == 1 and events[1] or "[" .. table.concat(events, ",") .. "]"
  return wrk.format(nil, nil, nil, body)
end
"""


def event(run_id: str, read: str, state: str = "START") -> dict:
    return {
        "eventType": state,
        "eventTime": "2026-11-27T05:00:00+00:00",
        "producer": PRODUCER,
        "schemaURL": EVENT_SCHEMA,
        "run": {"runId": run_id},
        "job": {"namespace": "bench://scheduler", "name": "reports.daily"},
        "inputs": [{"namespace": "file", "name": read}],
        "outputs": [{"namespace": "postgres://warehouse:5432", "name": "reports.public.daily"}],
    }


def lua_template() -> str:
    """The event as a Lua format string, its run id and input path left as %s."""
    text = json.dumps(event("RUNID", "READ"), separators=(",", ":"))
    return json.dumps(text.replace("%", "%%").replace("RUNID", "%s").replace("READ", "%s"))


def landing_paths(catalog: Catalog, lake: Path, count: int) -> list[str]:
    with catalog.session() as session:
        rows = session.exec(select(VersionRow.path).where(VersionRow.zone == "landing").limit(count)).all()
    return [str(lake / path) for path in rows]


def post_readers(api: str, headers: dict[str, str], read: str, readers: int) -> None:
    """`readers` runs that read `read`: each its START, then its COMPLETE (one in ten a FAIL with
    its error), the tasks of 20 jobs under a DAG run for each 20 of them."""
    events = [each for i in range(readers) for each in task_events(i, read)]
    for start in range(0, len(events), 100):
        answer = requests.post(f"{api}/lineage", json=events[start : start + 100], headers=headers, timeout=120)
        answer.raise_for_status()


def task_events(i: int, read: str) -> list[dict]:
    dag_run = str(uuid.UUID(int=i // JOBS + 1))
    run_id = str(uuid.uuid4())
    facets = {
        "parent": {
            "_producer": PRODUCER,
            "_schemaURL": PARENT_FACET,
            "run": {"runId": dag_run},
            "job": {"namespace": "bench://scheduler", "name": "reports"},
        }
    }
    failed = i % 10 == 9
    ended = {
        "errorMessage": {
            "_producer": PRODUCER,
            "_schemaURL": ERROR_FACET,
            "message": f"task {i} failed",
            "programmingLanguage": "python",
        }
    }
    started, end = event(run_id, read), event(run_id, read, "FAIL" if failed else "COMPLETE")
    for said, extra in ((started, {}), (end, ended if failed else {})):
        said["run"]["facets"] = {**facets, **extra}
        said["job"]["name"] = f"reports.task_{i % JOBS:02d}"
    end["eventTime"] = "2026-11-27T05:00:07+00:00"
    return [started, end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8, help="wrk's connections")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument(
        "--readers", type=int, default=1_000, help="foreign runs reading the version whose impact is timed"
    )
    parser.add_argument("--batch", type=int, default=1, help="events per request (a list past 1)")
    parser.add_argument("--workers", type=int, default=1, help="processes of `custody serve` (--workers)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="custody-lineage-bench-") as folder:
        home = Path(folder) / "home"
        settings = Settings.under(home)
        database = Path(settings.catalog_url.removeprefix("sqlite:///"))
        database.parent.mkdir(parents=True, exist_ok=True)
        build_catalog(f"sqlite:///{database}", generate_assets(args.versions, SEED), SEED)
        catalog = Catalog(make_engine(settings.catalog_url))
        with catalog.session() as session:  # locations relative to the lake, as the catalog keeps them
            session.connection().exec_driver_sql("UPDATE version SET path = substr(path, 7) WHERE path LIKE '/lake/%'")
        lake = settings.lake.resolve()
        *paths, unread = landing_paths(catalog, lake, 201)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))},
            "CUSTODY_HOME": str(home),
            "CUSTODY_CATALOG_URL": settings.catalog_url,
        }
        if args.workers > 1:
            env["CUSTODY_SESSION_SECRET"] = secrets.token_urlsafe(32)
        server, api = start_service(env, args.workers)
        try:
            headers = token(api, "lineage-bot")
            post_readers(api, headers, paths[0], 1)  # one event as the load sends them, answered 200
            script = WRK_SCRIPT % (", ".join(json.dumps(path) for path in paths), args.batch, lua_template())
            load_with(script, api + "/lineage", headers, args.clients, 5)  # warm
            summary = load_with(script, api + "/lineage", headers, args.clients, args.seconds)
            elapsed = summary["micros"] / 1e6
            events = summary["requests"] * args.batch
            print(
                f"\nevents posted by {args.clients} connections of wrk for {elapsed:.0f} s, {args.batch} per request,"
                f" to {args.workers} process{'es' if args.workers > 1 else ''}"
            )
            print(f"  {events:,} accepted, {events / elapsed:.0f} events/s, {summary['errors']} errors")
            print(
                f"  p50 {summary['p50'] / 1000:6.2f} ms   p95 {summary['p95'] / 1000:6.2f} ms   p99 {summary['p99'] / 1000:6.2f} ms"
                f" (goal: at least {EVENTS_GOAL:,} events/s, p95 at most {P95_GOAL_MS} ms, no error)"
            )

            read = random.Random(SEED).choice(paths)
            post_readers(api, headers, read, args.readers)
            with catalog.session() as session:
                row = session.exec(select(VersionRow).where(VersionRow.path == str(Path(read).relative_to(lake)))).one()
            with catalog.session() as session:
                alone = session.exec(
                    select(VersionRow).where(VersionRow.path == str(Path(unread).relative_to(lake)))
                ).one()
            through_the_service(api, row.ref, alone.ref, Path(folder))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)

        ref = row.ref
        timings, baseline = ended(env, ref, "--json"), ended(env, alone.ref, "--json")
        jobs = len(
            json.loads(
                subprocess.run(
                    [str(CUSTODY), "impact", ref, "--json"], env=env, capture_output=True, text=True, check=True
                ).stdout
            )["foreign_jobs"]
        )
        started = time.perf_counter()
        tree = impact(catalog, VersionRef.parse(ref))
        in_process = time.perf_counter() - started
        print(f"\nimpact of {ref}, read by {jobs:,} foreign runs")
        print(
            f"  custody impact --json, end to end: median {statistics.median(timings):.2f} s of 5 "
            f"(goal: at most {IMPACT_GOAL_S:.0f} s); the tree in process {in_process * 1000:.0f} ms "
            f"({len(tree.root.foreign):,} runs)"
        )
        print(
            f"  the same command on {alone.ref}, which no run read (the command's own start and walk): "
            f"median {statistics.median(baseline):.2f} s; the runs add {statistics.median(timings) - statistics.median(baseline):.2f} s"
        )


def ended(env: dict[str, str], ref: str, *extra: str) -> list[float]:
    """`custody impact REF EXTRA` end to end, five times: seconds each."""
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([str(CUSTODY), "impact", ref, *extra], env=env, capture_output=True, text=True, check=True)
        timings.append(time.perf_counter() - started)
    return timings


def through_the_service(api: str, ref: str, alone: str, folder: Path) -> None:
    """`custody impact REF` as a client of the service, end to end, its text by job and with --runs,
    and --json, beside the same of ALONE, which no run read; the service's answer alone."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))},
        "CUSTODY_URL": api.removesuffix("/api/v1"),
        "CUSTODY_HOME": str(folder / "client-home"),
        "XDG_CONFIG_HOME": str(folder / "client-config"),
        "COLUMNS": "200",
    }
    subprocess.run(
        [str(CUSTODY), "login", "carol", "--password-stdin"], env=env, input="carol-demo\n", check=True, text=True
    )
    print(f"\nimpact of {ref} through the service (custody impact as its client, median of 5)")
    for extra in ((), ("--runs",), ("--json",)):
        timings, baseline = ended(env, ref, *extra), ended(env, alone, *extra)
        printed = subprocess.run([str(CUSTODY), "impact", ref, *extra], env=env, capture_output=True, check=True).stdout
        shown = " ".join(extra) or "(by job)"
        print(
            f"  {shown:9} {statistics.median(timings):.2f} s end to end, {len(printed):,} bytes printed "
            f"(goal: at most {IMPACT_GOAL_S:.0f} s); of {alone}, read by no run, {statistics.median(baseline):.2f} s"
        )
    headers = token(api, "carol")
    key, number = ref.split("@")
    asked = []
    with requests.Session() as http:
        for _ in range(5):
            started = time.perf_counter()
            http.get(f"{api}/versions/{key}/{number}/impact", headers=headers, timeout=60).raise_for_status()
            asked.append(time.perf_counter() - started)
    print(f"  the service's answer alone: median {statistics.median(asked) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
