#!/usr/bin/env python
"""What access control costs: decisions, their ledger entries, and a governed read vs a plain one.

Everything runs in this process, against a real OpenLDAP `slapd` started on a loopback port with
StartTLS (the test suite's helper: the demo's people and groups, one nested group) and a fresh
SQLite catalog. For --rounds rounds each, after --warmup, it times

  file decide      Policy.decide(read) on the demo's YAML directory
  ldap cached      Policy.decide(read) on LDAP with memberships cached (the default TTL, warm)
  ldap uncached    Policy.decide(read) on LDAP with TTL 0: a StartTLS connection, a bind and the
                   nested-group searches every time
  ldap verify      LdapDirectory.authenticate: what a verified identity costs
  ledger entry     guard.record: one decision appended to the hash-chained ledger (one transaction)
  plain read       pyarrow.dataset over a version's Parquet folder, --rows rows, to a table
  governed read    Custody.read of the same version as a consumer: the version looked up, the
                   decision made and recorded, then the same read

and prints p50/p95 in milliseconds, then the ratio governed/plain and the milliseconds a governed
read adds (goal: the read decision and its entry add at most 10 ms at p50 on the file directory).

    .venv/bin/python -m benchmarks.access
    .venv/bin/python -m benchmarks.access --rounds 50 --warmup 5 --rows 1000   # smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from governance.access.directory import FileDirectory, LdapDirectory, LdapSettings
from governance.access.guard import record
from governance.access.policy import Identity, Policy, Verb
from governance.api import Custody
from governance.catalog import Catalog, utcnow
from governance.catalog.models import VersionRow
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.runs import os_user
from governance.spec import load_specs
from governance.zones import AssetKey, VersionRef
from tests.ldap_server import password_of, populated_slapd

GOAL_ADDED_MS = 10.0
PRODUCTS = AssetKey("sales", "products")


def timed(action: Callable[[], object], rounds: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        action()
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        seconds.append((time.perf_counter() - started) * 1000)
    return seconds


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def fake_version(settings: Settings, rows: int) -> None:
    """A committed version of sales/products written straight to the catalog: what a read needs."""
    folder = settings.lake / "landing" / "sales" / "products" / "v=1"
    folder.mkdir(parents=True)
    table = pa.table({"product_id": [f"P{i}" for i in range(rows)], "unit_price": [float(i) for i in range(rows)]})
    pq.write_table(table, folder / "part-0.parquet")
    catalog = Catalog.from_url(settings.catalog_url)
    with catalog.session() as session:
        session.add(
            VersionRow(
                asset_key=str(PRODUCTS),
                number=1,
                zone="landing",
                path="landing/sales/products/v=1",
                data_version="d" * 64,
                rows=rows,
                bytes=0,
                table_schema="{}",
                spec_hash="s",
                code_version="c",
                requested_by="bench",
                attempt_id="attempt-1",
                created_at=utcnow(),
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="custody-bench-access-"))
    try:
        with populated_slapd(work / "slapd", "bench-service-password") as server:
            run(args, work, server)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path, server) -> None:
    specs = load_specs(ROOT / "assets" / "specs", transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    products = specs[PRODUCTS]
    carol = Identity.asserted("carol")
    ldap_settings = LdapSettings(
        url=server.url,
        base_dn=server.base_dn,
        bind_dn=server.bind_dn,
        password=server.password,
        ca_file=str(server.ca_file),
    )
    file_policy = Policy(FileDirectory.load(ROOT / "assets" / "directory.yaml"))
    cached = Policy(LdapDirectory(ldap_settings))
    uncached = Policy(LdapDirectory(dataclasses.replace(ldap_settings, ttl_seconds=0)))
    # Whoever runs the benchmark reads as carol, a consumer, as the OS user mapping says.
    settings = dataclasses.replace(
        Settings.under(work / "home", specs=ROOT / "assets" / "specs"), os_users=f"{os_user()}=carol"
    )
    fake_version(settings, args.rows)
    custody = Custody(settings, {})
    catalog = custody.store
    row = catalog.version(VersionRef(PRODUCTS, 1))
    decision = file_policy.decide(carol, Verb.READ, products, 1)
    assert decision.allowed and cached.decide(carol, Verb.READ, products).allowed

    few = max(args.rounds // 10, 5)
    results = {
        "file decide": timed(lambda: file_policy.decide(carol, Verb.READ, products, 1), args.rounds, args.warmup),
        "ldap cached": timed(lambda: cached.decide(carol, Verb.READ, products, 1), args.rounds, args.warmup),
        "ldap uncached": timed(lambda: uncached.decide(carol, Verb.READ, products, 1), few, 2),
        "ldap verify": timed(lambda: cached.directory.authenticate("carol", password_of("carol")), few, 2),
        "ledger entry": timed(lambda: record(catalog, decision), args.rounds, args.warmup),
        "plain read": timed(
            lambda: ds.dataset(str(custody.lake.at(row.path)), format="parquet").to_table(), args.rounds, args.warmup
        ),
        "governed read": timed(lambda: custody.read("sales/products@1"), args.rounds, args.warmup),
    }
    print(
        f"access control, {args.rounds} rounds after {args.warmup} warm-up ({few} for the uncached LDAP rows); "
        f"reads of {args.rows:,} rows; slapd on {server.url} with StartTLS"
    )
    print(f"{'':<16}{'p50 ms':>10}{'p95 ms':>10}")
    for label, values in results.items():
        print(f"{label:<16}{statistics.median(values):10.3f}{p95(values):10.3f}")
    plain, governed = statistics.median(results["plain read"]), statistics.median(results["governed read"])
    added = governed - plain
    print(f"\ngoverned/plain read: {governed / plain:.2f}  (+{added:.2f} ms at p50)")
    print(
        f"goal: a governed read adds <= {GOAL_ADDED_MS:.0f} ms at p50 on the file directory: "
        f"{'met' if added <= GOAL_ADDED_MS else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
