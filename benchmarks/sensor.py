#!/usr/bin/env python
"""Time from a DropZone batch's `_READY` to its committed version, through the `custody_dropzone` sensor.

Starts Dagster's daemon (as `make ui` does, on a fresh instance under a temporary CUSTODY_HOME with the
demo specs), then --batches times drops one products batch, marks it ready and waits for its version.
Each time is the version's `created_at` in the catalog less the moment `_READY` was written: the wait
for the sensor's next tick (every 30 s, the sensor's default), the queue, the run worker's start
(a new process, which starts its own Spark), the ingestion and the commit. Prints each time, how the
runs spent it (launch after `_READY`, start after launch, commit after start), and the median.

    .venv/bin/python -m benchmarks.sensor
    .venv/bin/python -m benchmarks.sensor --batches 2    # smoke run
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
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assets.launch import instance_for
from governance.api import Custody
from governance.approval import apply
from governance.batches import BatchMeta, drop_batch
from governance.catalog import Catalog
from governance.config import Settings
from governance.demo import OWNER, PRODUCTS, demo_password
from governance.zones import Lake

DAEMON = Path(sys.executable).with_name("dagster-daemon")
TIMEOUT_SECONDS = 300


def products_csv(round_number: int) -> bytes:
    rows = [f"P{i:03d},product {i},catalogue,{i + round_number}.50" for i in range(1, 21)]
    return ("product_id,product_name,category,unit_price\n" + "\n".join(rows) + "\n").encode()


def wait_for_version(catalog: Catalog, number: int, daemon: subprocess.Popen):
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while True:
        if daemon.poll() is not None:
            raise SystemExit("the Dagster daemon exited")
        if time.monotonic() > deadline:
            raise SystemExit(f"no version {number} of {PRODUCTS} within {TIMEOUT_SECONDS} s")
        latest = catalog.latest(PRODUCTS) if catalog.versions(PRODUCTS) else None
        if latest is not None and latest.number >= number:
            return latest
        time.sleep(0.2)


def stamp(value: datetime) -> float:
    return value.replace(tzinfo=UTC).timestamp() if value.tzinfo is None else value.timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=5, help="batches dropped one after the other")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sensor-") as tmp:
        settings = Settings.under(Path(tmp) / "home", specs=ROOT / "assets" / "specs")
        env = {
            **os.environ,
            "CUSTODY_HOME": str(settings.home),
            "CUSTODY_SPECS": str(settings.specs),
            "DAGSTER_HOME": str(settings.dagster_home),
            "CUSTODY_DROPZONE_SENSOR": "on",
        }
        os.environ.update(env)
        instance = instance_for(settings)
        catalog = Catalog.from_settings(settings, os.environ)
        custody = Custody(settings)
        # As `make demo` does: the demo's owner, proven by the password the demo directory documents.
        apply(catalog, custody.policy, custody.identity(OWNER, demo_password(OWNER)), custody.specs)
        daemon = subprocess.Popen(
            [str(DAEMON), "run", "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rows = []
        try:
            for i in range(args.batches):
                batch = f"bench-{i + 1:03d}"
                drop_batch(
                    Lake(settings.lake),
                    PRODUCTS,
                    batch,
                    {"products.csv": products_csv(i)},
                    BatchMeta(requested_by="bob", note="sensor benchmark"),
                )
                ready = time.time()
                version = wait_for_version(catalog, i + 1, daemon)
                record = instance.get_run_record_by_id(version.run_id)
                run = record.dagster_run
                launched = record.create_timestamp.timestamp()
                started = record.start_time or launched
                committed = stamp(version.created_at)
                rows.append(
                    (batch, committed - ready, launched - ready, started - launched, committed - started, run.tags)
                )
                print(
                    f"{batch}: committed {version.ref} {committed - ready:5.1f} s after _READY  (launched after "
                    f"{launched - ready:4.1f} s, started {started - launched:4.1f} s later, committed "
                    f"{committed - started:4.1f} s after its start)",
                    flush=True,
                )
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=60)
    times = [row[1] for row in rows]
    keys = {row[5].get("dagster/run_key") for row in rows}
    print(
        f"\n{len(rows)} batches, one run each ({len(keys)} run keys), requester "
        f"{sorted({row[5].get('custody/requested_by') for row in rows})}"
    )
    print(
        f"_READY -> committed version: median {statistics.median(times):.1f} s, min {min(times):.1f} s, "
        f"max {max(times):.1f} s (sensor tick: every 30 s)"
    )
    print(
        f"of which, medians: waiting for the tick and the queue {statistics.median(r[2] for r in rows):.1f} s, "
        f"run worker start {statistics.median(r[3] for r in rows):.1f} s, "
        f"ingestion and commit {statistics.median(r[4] for r in rows):.1f} s"
    )


if __name__ == "__main__":
    main()
