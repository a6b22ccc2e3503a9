#!/usr/bin/env python
"""One collector polling many feeds against a local server: throughput, CPU and lag behind the schedule.

Starts a feed server on a loopback port whose every answer differs from the last (so each download
is kept), declares `--feeds` feeds polled every `--every`, and runs one collector for `--seconds`
into a folder store. It prints downloads per second, the collector's CPU share, each tick's lag
behind its due time (median, 99th percentile, worst) and ticks missed. The goal: no feed drifts
more than one period, i.e. the worst lag stays under the period and no tick is missed.

    .venv/bin/python benchmarks/feeds.py                          # 100 feeds, every 1s, 10 minutes
    .venv/bin/python benchmarks/feeds.py --seconds 20             # smoke run
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml

from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.feeds.collector import Collector, plan_feeds
from governance.feeds.store import FeedStore
from governance.feeds.workspace import Workspace
from governance.spec import load_specs
from tests.feed_server import running_feed_server


def serve(port: multiprocessing.Value, stop: multiprocessing.Event) -> None:
    """The feed server in a process of its own, so that it takes nothing of the collector's GIL."""
    with running_feed_server() as server:
        port.value = server.port
        stop.wait()


def write_specs(folder: Path, url: str, feeds: int, every: str) -> None:
    (folder / "bench").mkdir(parents=True)
    for index in range(feeds):
        body = {
            "description": "Benchmark feed.",
            "zone": "landing",
            "roles": {"owner": "bench-owners", "producer": "bench-producers", "consumer": "bench-consumers"},
            "source": {
                "format": "json",
                "feed": {
                    "url": f"{url}?feed={index}",
                    "every": every,
                    "requested_by": "bench",
                    "start": "2026-01-01T00",
                },
            },
        }
        (folder / "bench" / f"feed_{index:03d}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--feeds", type=int, default=100)
    parser.add_argument("--every", default="1s")
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()

    port, done = multiprocessing.Value("i", 0), multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(port, done), daemon=True)
    server.start()
    while not port.value:
        time.sleep(0.05)
    with tempfile.TemporaryDirectory(prefix="feeds-bench-") as tmp:
        work = Path(tmp)
        write_specs(work / "specs", f"http://127.0.0.1:{port.value}/changing", args.feeds, args.every)
        specs = load_specs(work / "specs", transform_packages=DEFAULT_TRANSFORM_PACKAGES)
        collector = Collector(
            plan_feeds(list(specs), {}),
            Workspace(work / "ws"),
            FeedStore((work / "store").as_uri()),
            workers=args.workers,
            keep_lags=True,
        )
        period = next(iter(specs)).feed.period
        stop = threading.Event()
        threading.Timer(args.seconds, stop.set).start()
        cpu, started = cpu_seconds(), time.monotonic()
        collector.run(stop)
        elapsed, cpu = time.monotonic() - started, cpu_seconds() - cpu
    done.set()
    server.join()

    status = collector.status()
    downloads = sum(c["downloads"] for c in status.values())
    missed = sum(c["missed"] for c in status.values())
    failed = sum(c["failed_ticks"] for c in status.values())
    lags = sorted(lag for state in collector.feeds for lag in state.lags)
    worst = max(lags)
    print(
        f"{args.feeds} feeds every {args.every} for {args.seconds:.0f}s, {args.workers} download threads; "
        f"packing and uploading at the stop took {elapsed - args.seconds:.1f}s"
    )
    print(
        f"downloads kept {downloads:,} ({downloads / args.seconds:.1f}/s over the collection; expected {args.feeds / period:.0f}/s), "
        f"missed ticks {missed}, failed ticks {failed}"
    )
    print(f"collector CPU {cpu:.1f}s = {100 * cpu / elapsed:.0f}% of one core (the server runs in another process)")
    print(
        f"lag behind schedule: median {1000 * statistics.median(lags):.1f} ms, "
        f"p99 {1000 * lags[int(0.99 * (len(lags) - 1))]:.1f} ms, worst {1000 * worst:.1f} ms"
    )
    met = worst < period and missed == 0
    print(f"goal (no feed drifts more than one period, {period:g}s): {'met' if met else 'missed'}")


if __name__ == "__main__":
    main()
