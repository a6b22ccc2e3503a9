#!/usr/bin/env python
"""`custody versions` of an asset with a long history, a page at a time.

A fresh SQLite catalog holds one asset with --versions versions.
Times, a fresh process each run (stdout to a pipe), next to `custody --help` for the start-up
alone: the first page as a table and as JSON, a page from the middle (`--before`), and every version
streamed as JSON (`--all --json`). Goal: the first page within 0.3 s of the start-up.

    .venv/bin/python -m benchmarks.versions
    .venv/bin/python -m benchmarks.versions --versions 10000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.catalog import build_listing_catalog, environment
from benchmarks.provenance import run_cli

GOAL_ADDED_SECONDS = 0.3
ASSET = "domain00/asset00000"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=100_000, help="versions of the measured asset")
    parser.add_argument("--runs", type=int, default=5, help="runs of each command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="versions-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        path = folder / "catalog.db"
        build_listing_catalog(path, 1, args.versions, seed=7)
        print(f"catalog with {args.versions:,} versions of {ASSET} built in {time.perf_counter() - started:.1f}s")
        env = environment(folder / "home", path)
        startup = statistics.median(run_cli(["--help"], env)[0] for _ in range(args.runs))
        print(f"custody --help (start-up only): median {startup:.2f}s")
        cases = [
            ("first page, table", ["versions", ASSET], None),
            ("first page, JSON", ["versions", ASSET, "--json"], 50),
            ("a page from the middle", ["versions", ASSET, "--before", str(args.versions // 2), "--json"], 50),
            ("every version, streamed JSON", ["versions", ASSET, "--all", "--json"], args.versions),
        ]
        for name, command, expected in cases:
            measured = [run_cli(command, env) for _ in range(args.runs)]
            if expected is not None and len(json.loads(measured[0][1])) != expected:
                raise SystemExit(
                    f"{' '.join(command)} listed {len(json.loads(measured[0][1]))} versions, expected {expected}"
                )
            median = statistics.median(s for s, _ in measured)
            verdict = ""
            if name.startswith("first page"):
                added = median - startup
                verdict = (
                    f"; {added:+.2f}s over start-up (goal <= {GOAL_ADDED_SECONDS} s, "
                    f"{'met' if added <= GOAL_ADDED_SECONDS else 'MISSED'})"
                )
            print(
                f"custody {' '.join(command[:1] + command[2:]):<32} {name:<30} median {median:.2f}s "
                f"({len(measured[0][1]) / 1e6:.2f} MB){verdict}"
            )


if __name__ == "__main__":
    main()
