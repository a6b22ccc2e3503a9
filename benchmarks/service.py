#!/usr/bin/env python
"""The Custody service next to in-process answers, on a catalog of 100,000 versions (the "assets"
shape of benchmarks.provenance: 1,000 assets in 50 layers, each materialized 100 times).

1. Provenance of the version whose closure has the median size among 200 drawn with a fixed seed,
   200 times each way, in turn, after a warm-up:
     in process    explore(catalog, ref, upstream).to_dict() and json_bytes: what the API computes
                   and sends
     the service   GET /api/v1/versions/<asset>/<n>/provenance from `custody serve` on loopback, on a
                   kept-alive connection, JSON parsed; computed for every request
                   (CUSTODY_SERVICE_CACHE_SECONDS=0), and as the service answers by default, from
                   the answer it keeps a moment
   p50/p95 of each and what the service adds, computing; goal: at most 10 ms added at p95.
2. Load: 50 connections at once for 60 s on loopback, each asking in turn for the catalog, that
   provenance and a page of 100 ledger entries (as dave, an auditor: each page is a recorded
   decision), the next request as soon as the last is answered, on the service as it answers by
   default: requests/s, p50/p95/p99 of all requests, errors (an answer with a status of 400 or
   more, a failed or timed-out connection). Goal: no error, p95 at most 100 ms. The load comes
   from wrk (Debian's package `wrk`), a second process on the same machine: a load generator of
   Python threads would measure its own threads waiting for their interpreter as much as the
   service. Then the same load on `custody serve --workers 2` (--workers).

    .venv/bin/python -m benchmarks.service
    .venv/bin/python -m benchmarks.service --versions 10000 --seconds 10 --samples 50   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import build_catalog, draw_sample, generate_assets, sql_closure, typical
from governance.catalog import Catalog
from governance.config import Settings
from governance.jsontext import json_bytes
from governance.lineage.graph import explore
from governance.lineage.terms import Direction
from governance.zones import AssetKey, VersionRef

CUSTODY = Path(sys.executable).with_name("custody")
SERVES = re.compile(r"Custody serves on http://[^:]+:(\d+) ")
WARM_UP = 20
WARM_UP_SECONDS = 10
ADDED_GOAL_MS = 10
LOAD_GOAL_MS = 100
SEED = 7


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def milliseconds(values: list[float]) -> str:
    return f"p50 {percentile(values, 50) * 1000:7.2f} ms   p95 {percentile(values, 95) * 1000:7.2f} ms"


def median_version(catalog: Catalog, n: int, samples: int) -> tuple[VersionRef, int]:
    sample = draw_sample(n, samples, SEED)
    sizes = [len(sql_closure(catalog, vid, Direction.UPSTREAM)[0].depth_of) for vid in sample]
    vid, size = typical(sample, sizes)
    with catalog.session() as session:
        row = session.connection().exec_driver_sql("SELECT asset_key, number FROM version WHERE id = ?", (vid,)).one()
    return VersionRef(AssetKey.parse(row[0]), row[1]), size


def in_process(catalog: Catalog, ref: VersionRef) -> float:
    """What the API computes and sends for the provenance of `ref`, in this process: seconds."""
    started = time.perf_counter()
    json_bytes(explore(catalog, ref, Direction.UPSTREAM).to_dict())
    return time.perf_counter() - started


def side_by_side(
    catalog: Catalog, api: str, headers: dict[str, str], ref: VersionRef, runs: int
) -> tuple[list[float], list[float]]:
    """Timings of the provenance of `ref` in process and through the service, taken in turn, so
    that whatever else the machine does weighs on both alike."""
    http = requests.Session()
    local, remote = [], []
    for run in range(WARM_UP + runs):
        here, there = in_process(catalog, ref), asked(http, api, headers, ref)
        if run >= WARM_UP:
            local.append(here)
            remote.append(there)
    return local, remote


def start_service(env: dict[str, str], workers: int = 1) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen(
        [str(CUSTODY), "serve", "--no-ui", "--port", "0", "--workers", str(workers)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert server.stdout is not None
    said = []
    while (line := server.stdout.readline()) and not (found := SERVES.search(line)):
        said.append(line)
    if not line:
        raise SystemExit(f"custody serve exited: {''.join(said)}")
    threading.Thread(target=server.stdout.read, daemon=True).start()
    return server, f"http://127.0.0.1:{found.group(1)}/api/v1"


def token(api: str, user: str) -> dict[str, str]:
    answer = requests.post(f"{api}/tokens", json={"user": user, "password": f"{user}-demo"}, timeout=60)
    answer.raise_for_status()
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def asked(http: requests.Session, api: str, headers: dict[str, str], ref: VersionRef) -> float:
    """The provenance of `ref` asked of the service, its answer parsed: seconds."""
    started = time.perf_counter()
    answer = http.get(f"{api}/versions/{ref.key}/{ref.number}/provenance", headers=headers, timeout=60)
    answer.raise_for_status()
    answer.json()
    return time.perf_counter() - started


def through_service(api: str, headers: dict[str, str], ref: VersionRef, runs: int) -> list[float]:
    http = requests.Session()
    timings = [asked(http, api, headers, ref) for _ in range(WARM_UP + runs)]
    return timings[WARM_UP:]


# Each of wrk's threads asks for the paths in turn.
WRK_SCRIPT = """
local paths = {%s}
local turn = 0
request = function()
  turn = turn + 1
  return wrk.format("GET", paths[(turn %% #paths) + 1])
end
"""
# What every load script ends with: wrk's summary, as one line of JSON.
SUMMARY = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "micros": %d, "errors": %d, "p50": %d, "p95": %d, "p99": %d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


def load(api: str, headers: dict[str, str], ref: VersionRef, clients: int, seconds: float) -> dict[str, float]:
    """wrk's `clients` connections asking for the catalog, a provenance and a ledger page in turn."""
    paths = ["/catalog", f"/versions/{ref.key}/{ref.number}/provenance", "/ledger?limit=100"]
    prefix = urlsplit(api).path
    return load_with(
        WRK_SCRIPT % ", ".join(json.dumps(prefix + path) for path in paths), api, headers, clients, seconds
    )


def load_with(lua: str, url: str, headers: dict[str, str], clients: int, seconds: float) -> dict[str, float]:
    """wrk's `clients` connections, on as many threads as there are cores, sending the requests the
    `lua` script makes until the time is up: its summary."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("the load test needs wrk: apt-get install wrk")
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(lua + SUMMARY)
        script.flush()
        ran = subprocess.run(
            [
                wrk,
                f"-t{min(os.cpu_count() or 1, clients)}",
                f"-c{clients}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "30s",
                "-s",
                script.name,
                *[f"-H{name}: {value}" for name, value in headers.items()],
                url,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if ran.returncode != 0:
        raise SystemExit(f"wrk failed ({ran.returncode}): {ran.stderr.strip() or ran.stdout.strip()}")
    return json.loads(ran.stdout.strip().splitlines()[-1])


def report_load(label: str, summary: dict[str, float], clients: int) -> None:
    elapsed = summary["micros"] / 1e6
    print(
        f"\nload on {label}: {clients} connections of wrk for {elapsed:.0f} s, catalog, provenance and ledger in turn"
    )
    print(
        f"  {summary['requests']:,} answered, {summary['requests'] / elapsed:.0f} requests/s, {summary['errors']} errors"
    )
    print(
        f"  p50 {summary['p50'] / 1000:7.2f} ms   p95 {summary['p95'] / 1000:7.2f} ms   p99 {summary['p99'] / 1000:7.2f} ms"
        f" (goal: no error, p95 at most {LOAD_GOAL_MS} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=200, help="timed provenance requests, each way")
    parser.add_argument("--clients", type=int, default=50, help="wrk's connections")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2, help="the load again on `custody serve --workers N`; 1: not")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="custody-service-bench-") as folder:
        home = Path(folder) / "home"
        settings = Settings.under(home)
        catalog_path = Path(settings.catalog_url.removeprefix("sqlite:///"))
        catalog_path.parent.mkdir(parents=True, exist_ok=True)
        built = time.perf_counter()
        catalog = build_catalog(f"sqlite:///{catalog_path}", generate_assets(args.versions, SEED), SEED)
        print(f"catalog: {args.versions:,} versions built in {time.perf_counter() - built:.1f} s")
        ref, size = median_version(catalog, args.versions, 200)
        print(f"median version: {ref} (its provenance holds {size} versions)")

        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))},
            "CUSTODY_HOME": str(home),
            "CUSTODY_CATALOG_URL": settings.catalog_url,
        }
        server, api = start_service({**env, "CUSTODY_SERVICE_CACHE_SECONDS": "0"})
        try:
            local, remote = side_by_side(catalog, api, token(api, "dave"), ref, args.samples)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        server, api = start_service(env)
        try:
            headers = token(api, "dave")
            kept = through_service(api, headers, ref, args.samples)
            print(f"\nprovenance of {ref}, {args.samples} requests each way")
            print(f"  in process              {milliseconds(local)}")
            print(f"  the service, computing  {milliseconds(remote)}")
            print(f"  the service, as kept    {milliseconds(kept)}")
            added = (percentile(remote, 95) - percentile(local, 95)) * 1000
            print(f"  added at p95, computing {added:.2f} ms (goal: at most {ADDED_GOAL_MS} ms)")

            report_load("one process", load(api, headers, ref, args.clients, args.seconds), args.clients)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        if args.workers > 1:
            server, api = start_service({**env, "CUSTODY_SESSION_SECRET": secrets.token_urlsafe(32)}, args.workers)
            try:
                headers = token(api, "dave")
                load(api, headers, ref, args.clients, WARM_UP_SECONDS)  # every worker up and warm
                report_load(
                    f"--workers {args.workers}", load(api, headers, ref, args.clients, args.seconds), args.clients
                )
            finally:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(timeout=30)


if __name__ == "__main__":
    main()
