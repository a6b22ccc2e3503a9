#!/usr/bin/env python
"""The auditor's workbench at scale: `custody catalog --json` over a large catalog, and lineage
graphs drawn as SVG.

1. Catalog listing. A fresh SQLite catalog holds --assets asset specs (ten columns and two tags
   each, three classifications, ten domains) and --versions versions spread over them (one in 50
   critical, one in 20 purged). Times `custody catalog --json` end to end, a fresh process each run
   (stdout to a pipe), next to `custody --help` for the start-up alone, and checks that the JSON
   lists every asset with its version count. Goal: <= 1 s.

2. Pictures. A catalog of --graph-versions versions in the stress shape of benchmarks/provenance.py
   (each version reads 1 to 3 versions of earlier layers). For each --impact-sizes N, picks the
   version whose impact is nearest N versions and times `custody lineage graph REF --impact
   --format svg` end to end (Graphviz's dot lays it out), with the SVG's size; then the same graph as
   GraphML, which needs no layout.

    .venv/bin/python -m benchmarks.catalog
    .venv/bin/python -m benchmarks.catalog --assets 300 --versions 5000 --graph-versions 2000 --impact-sizes 100 --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import build_catalog, generate_stress, run_cli
from governance.catalog import Catalog
from governance.catalog.models import AssetRow, VersionRow
from governance.lineage.graph import closure
from governance.lineage.terms import Direction

GOAL_SECONDS = 1.0
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DOMAINS = [f"domain{d:02d}" for d in range(10)]
CLASSIFICATIONS = ("internal", "confidential", "restricted")
SCHEMA_JSON = '{"type":"struct","fields":[]}'
CHUNK = 5_000


def spec_json(index: int, key: str) -> str:
    domain = key.partition("/")[0]
    body = {
        "description": f"Benchmark asset {index} of {domain}, refreshed daily.",
        "roles": {"owner": f"{domain}-owners", "producer": f"{domain}-producers", "consumer": f"{domain}-consumers"},
        "zone": "landing" if index % 4 == 0 else "integration",
        "classification": CLASSIFICATIONS[index % len(CLASSIFICATIONS)],
        "pii": index % 7 == 0,
        "tags": {"tier": f"t{index % 3}", "source": f"system{index % 11}"},
        "columns": [
            {"name": f"column_{c}", "type": "string", "nullable": True, "description": f"Column {c}"} for c in range(10)
        ],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def build_listing_catalog(path: Path, assets: int, versions: int, seed: int) -> Catalog:
    rng = random.Random(seed)
    catalog = Catalog.from_url(f"sqlite:///{path}")
    keys = [f"{DOMAINS[i % len(DOMAINS)]}/asset{i:05d}" for i in range(assets)]
    asset_rows = [
        {
            "key": key,
            "domain": key.partition("/")[0],
            "name": key.partition("/")[2],
            "zone": "integration",
            "spec_hash": f"{rng.getrandbits(64):016x}",
            "spec_json": spec_json(i, key),
            "updated_at": EPOCH,
        }
        for i, key in enumerate(keys)
    ]
    rows, numbers = [], dict.fromkeys(keys, 0)
    for vid in range(1, versions + 1):
        key = keys[(vid - 1) % assets]
        numbers[key] += 1
        rows.append(
            {
                "id": vid,
                "asset_key": key,
                "number": numbers[key],
                "data_version": f"{rng.getrandbits(128):032x}",
                "zone": "integration",
                "path": f"/lake/integration/{key}/v={numbers[key]}",
                "rows": rng.randrange(1, 10**6),
                "rows_quarantined": 0,
                "bytes": rng.randrange(10**3, 10**8),
                "table_schema": SCHEMA_JSON,
                "status": "purged" if rng.random() < 0.05 else "committed",
                "created_at": EPOCH + timedelta(minutes=vid),
                "run_id": f"run-{vid:07d}",
                "code_version": f"{rng.getrandbits(32):08x}",
                "spec_hash": "s",
                "requested_by": "bench",
                "attempt_id": f"attempt-{vid:07d}",
                "assurance": "asserted",
                "criticality": "critical" if rng.random() < 0.02 else "normal",
                "label": f"{numbers[key]}",
            }
        )
    with catalog.session() as session:
        connection = session.connection()
        connection.execute(insert(AssetRow.__table__), asset_rows)
        for start in range(0, len(rows), CHUNK):
            connection.execute(insert(VersionRow.__table__), rows[start : start + CHUNK])
    raw = catalog.engine.raw_connection()
    try:
        raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()
    return catalog


def environment(home: Path, catalog_path: Path) -> dict[str, str]:
    return {**os.environ, "CUSTODY_HOME": str(home), "CUSTODY_CATALOG_URL": f"sqlite:///{catalog_path}"}


def time_listing(folder: Path, args: argparse.Namespace) -> None:
    started = time.perf_counter()
    path = folder / "listing.db"
    build_listing_catalog(path, args.assets, args.versions, args.seed)
    print(
        f"catalog of {args.assets:,} assets and {args.versions:,} versions built in {time.perf_counter() - started:.1f}s"
    )
    env = environment(folder / "home", path)
    startup = [run_cli(["--help"], env)[0] for _ in range(args.runs)]
    measured = [run_cli(["catalog", "--json"], env) for _ in range(args.runs)]
    listed = json.loads(measured[0][1])
    versions = sum(entry["versions"] for entry in listed)
    if len(listed) != args.assets or versions != args.versions:
        raise SystemExit(f"custody catalog --json listed {len(listed)} assets and {versions} versions")
    seconds = [s for s, _ in measured]
    median = statistics.median(seconds)
    print(f"custody --help (start-up only): median {statistics.median(startup):.2f}s")
    print(
        f"custody catalog --json: {' '.join(f'{s:.2f}' for s in seconds)} s, median {median:.2f}s "
        f"({len(measured[0][1]) / 1e6:.1f} MB; goal <= {GOAL_SECONDS:.0f} s, {'met' if median <= GOAL_SECONDS else 'MISSED'})"
    )


def time_pictures(folder: Path, args: argparse.Namespace) -> None:
    path = folder / "graph.db"
    graph = generate_stress(args.graph_versions, args.seed)
    catalog = build_catalog(f"sqlite:///{path}", graph, args.seed)
    env = environment(folder / "home", path)
    with catalog.session() as session:
        sizes = {
            vid: len(closure(session, [vid], Direction.DOWNSTREAM).depth_of)
            for vid in random.Random(args.seed).sample(range(1, graph.n + 1), min(args.sample, graph.n))
        }
    print(f"\nstress catalog of {graph.n:,} versions; impact sizes sampled from {len(sizes)} versions")
    for wanted in args.impact_sizes:
        vid = min(sizes, key=lambda v: abs(sizes[v] - wanted))
        asset, number = graph.names[vid]
        ref = f"{asset}@{number}"
        for kind in ("svg", "graphml"):
            out = folder / f"impact-{wanted}.{kind}"
            seconds = []
            for _ in range(args.runs):
                seconds.append(
                    run_cli(["lineage", "graph", ref, "--impact", "--format", kind, "-o", str(out), "--force"], env)[0]
                )
            print(
                f"  impact of {ref} ({sizes[vid]:,} versions) as {kind}: median {statistics.median(seconds):.2f}s, "
                f"{out.stat().st_size / 1e6:.2f} MB"
            )
            if args.keep:
                keep = Path(args.keep)
                keep.mkdir(parents=True, exist_ok=True)
                out.replace(keep / out.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=int, default=3_000)
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument(
        "--graph-versions", type=int, default=20_000, help="versions of the stress catalog for the pictures"
    )
    parser.add_argument(
        "--impact-sizes", type=int, nargs="+", default=[300, 3_000], help="impact graphs to draw, by node count"
    )
    parser.add_argument("--sample", type=int, default=400, help="versions whose impact size is measured to pick from")
    parser.add_argument("--runs", type=int, default=5, help="end-to-end runs of each command")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", help="keep the pictures in this folder, to look at them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="catalog-bench-") as tmp:
        time_listing(Path(tmp), args)
        time_pictures(Path(tmp), args)


if __name__ == "__main__":
    main()
