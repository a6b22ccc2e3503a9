#!/usr/bin/env python
"""The ledger's write throughput and read latency, against raw SQLite measured in the same run.

1. Appends: --entries entries of about 1 KB each (details padded to --entry-bytes), in batches of 1,
   100 and 1,000, on SQLite in WAL mode with synchronous FULL and NORMAL:

     custody  Catalog.session() + ledger.append_many(): one transaction per batch, each entry's seq
              and chain hash computed, the ledger's indexes kept, and checkpoints written as a
              catalog writes them by default (at a multiple of 1,000 entries or 5 s after the last,
              signed, each with the catalog's record of the file)
     raw      sqlite3.executemany of the same rows (seq and hash computed beforehand, untimed) into a
              fresh file with the same schema and pragmas, one transaction per batch

   Batches of 1 append --single-entries entries (each is a commit, so an fsync with FULL). Prints
   entries per second, the ratio custody/raw (goal >= 0.5 at batch 1,000) and how flat the cost per
   entry stays: the last tenth's cost per entry over the first tenth's (flat is about 1.0), for
   custody, for raw, and for custody's own cost (custody minus raw, where what SQLite's indexes
   cost as they grow cancels out). At batch 1,000, raw also runs without the ledger's secondary
   indexes: the growth that remains with them is the B-trees', which Custody's filters need.

2. Writers: the same entries appended by one process, then split between two processes appending at
   once (batches of 100, checkpoints as above, in one file), --repeats times: aggregate throughput
   of two over one (goal >= 0.8) and every error, "database is locked" included (goal: none); each
   ledger is then checked gap-free and against its checkpoints.
   With --postgres, the same again on a throwaway PostgreSQL server (PostgreSQL's server programs
   needed; under root it runs as `nobody`).

3. Reads on --read-entries entries (about 300 B each, batches of 1,000): ledger.entries() for a page
   of 100 from a random seq, for a random asset (its 100 first entries) and for a random asset and
   version, each in a fresh session; p50 and p95 in ms over --queries queries (goal p95 <= 20 ms).
   Then every entry is rolled over into segment files and the same queries are timed again.

    .venv/bin/python -m benchmarks.ledger
    .venv/bin/python -m benchmarks.ledger --postgres       # the writers on PostgreSQL too
    .venv/bin/python -m benchmarks.ledger --entries 5000 --single-entries 500 --read-entries 20000 --repeats 2   # smoke run
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import event
from sqlmodel import col, select

from governance import ledger
from governance.catalog import Catalog, make_engine
from governance.catalog.models import LedgerEntry
from governance.checkpoints import Checkpoints
from governance.rollover import rollover

ASSETS, VERSIONS, USERS = 200, 47, 20  # coprime counts: every asset has every version
ACTIONS = ("read", "ingest", "ingestion.requested", "ingestion.committed", "materialize", "grant")
GOAL_RAW_RATIO, GOAL_TWO_WRITERS, GOAL_READ_P95_MS = 0.5, 0.8, 20.0


def events(count: int, entry_bytes: int, start: int = 0) -> list[ledger.Event]:
    pad = max(entry_bytes - 300, 0)
    return [
        ledger.Event(
            actor=f"user{i % USERS}",
            action=ACTIONS[i % len(ACTIONS)],
            asset=f"bench/asset_{i % ASSETS:03d}",
            version=i % VERSIONS + 1,
            run_id=f"run-{i // 100:08d}",
            assurance="asserted",
            details={"i": i, "result": "allowed", "reason": "bench is in bench-producers", "note": "x" * pad},
        )
        for i in range(start, start + count)
    ]


def catalog_at(path: Path, synchronous: str) -> Catalog:
    engine = make_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _synchronous(dbapi_connection, _record):
        dbapi_connection.execute(f"PRAGMA synchronous={synchronous}")

    engine.dispose()  # connections made from now on take the pragma
    return Catalog(engine, checkpoints_at(path.with_suffix(".checkpoints.jsonl")))


def checkpoints_at(path: Path) -> Checkpoints:
    """A checkpoint file with the default cadence, signed."""
    return Checkpoints(path, key=b"benchmark key")


def append_all(catalog: Catalog, batches: list[list[ledger.Event]]) -> list[float]:
    """Seconds per batch."""
    seconds = []
    for batch in batches:
        started = time.perf_counter()
        with catalog.session() as session:
            ledger.append_many(session, batch)
        seconds.append(time.perf_counter() - started)
    return seconds


def raw_rows(batch_events: list[ledger.Event]) -> list[tuple]:
    """The rows Custody would write for these events, computed as it does, outside any timing."""
    rows, prev = [], ledger.GENESIS
    for seq, e in enumerate(batch_events, start=1):
        entry = LedgerEntry(
            seq=seq,
            ts=ledger.timestamp(datetime.now(UTC)),
            actor=e.actor,
            action=e.action,
            asset_key=e.asset,
            version=e.version,
            run_id=e.run_id,
            details=json.dumps(e.details, sort_keys=True, separators=(",", ":")),
            prev_hash=prev,
            hash="",
            assurance=e.assurance,
        )
        entry.hash = prev = ledger.entry_hash(prev, entry)  # the hash is computed here, untimed
        rows.append(
            (
                entry.seq,
                entry.ts,
                entry.actor,
                entry.action,
                entry.asset_key,
                entry.version,
                entry.run_id,
                entry.details,
                entry.prev_hash,
                entry.hash,
                entry.assurance,
            )
        )
    return rows


def raw_append(path: Path, rows: list[tuple], batch: int, synchronous: str, indexes: bool = True) -> list[float]:
    make_engine(f"sqlite:///{path}").dispose()  # the same schema, indexes included
    connection = sqlite3.connect(path, isolation_level=None)
    if not indexes:
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'ledger' AND sql IS NOT NULL"
        ).fetchall():
            connection.execute(f"DROP INDEX {name}")
    for pragma in ("journal_mode=WAL", f"synchronous={synchronous}", "busy_timeout=30000"):
        connection.execute(f"PRAGMA {pragma}")
    insert = (
        "INSERT INTO ledger (seq, ts, actor, action, asset_key, version, run_id, details, prev_hash, hash, assurance) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    seconds = []
    for i in range(0, len(rows), batch):
        started = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany(insert, rows[i : i + batch])
        connection.execute("COMMIT")
        seconds.append(time.perf_counter() - started)
    connection.close()
    return seconds


def flatness(seconds: list[float], batch: int) -> float:
    tenth = max(len(seconds) // 10, 1)
    return (sum(seconds[-tenth:]) / (tenth * batch)) / (sum(seconds[:tenth]) / (tenth * batch))


def own_flatness(ours: list[float], theirs: list[float]) -> float:
    """How flat Custody's own cost per entry stays: custody minus raw, last tenth over first tenth.
    Both write the same rows into the same indexes, so what SQLite's B-trees cost as they grow cancels out."""
    tenth = max(len(ours) // 10, 1)
    first = sum(ours[:tenth]) - sum(theirs[:tenth])
    return (sum(ours[-tenth:]) - sum(theirs[-tenth:])) / first if first > 0 else float("nan")


def appends(args: argparse.Namespace, work: Path) -> list[str]:
    verdicts = []
    print(
        f"1. appends of ~{args.entry_bytes} B entries: entries/s, custody/raw, cost per entry last tenth / first tenth"
        " (custody, raw, and custody's own: custody - raw)"
    )
    print(
        f"{'sync':<8}{'batch':>6}{'entries':>9}{'custody/s':>12}{'raw/s':>12}{'ratio':>8}{'flat custody':>14}{'flat raw':>10}"
        f"{'flat own':>10}"
    )
    for synchronous in ("FULL", "NORMAL"):
        for batch in (1, 100, 1000):
            count = args.single_entries if batch == 1 else args.entries
            todo = events(count, args.entry_bytes)
            batches = [todo[i : i + batch] for i in range(0, count, batch)]
            ours = append_all(catalog_at(work / f"custody-{synchronous}-{batch}.db", synchronous), batches)
            theirs = raw_append(work / f"raw-{synchronous}-{batch}.db", raw_rows(todo), batch, synchronous)
            rate, raw_rate = count / sum(ours), count / sum(theirs)
            own = own_flatness(ours, theirs)
            print(
                f"{synchronous:<8}{batch:>6}{count:>9,}{rate:>12,.0f}{raw_rate:>12,.0f}{rate / raw_rate:>8.2f}"
                f"{flatness(ours, batch):>14.2f}{flatness(theirs, batch):>10.2f}{own:>10.2f}"
            )
            if batch == 1000:
                bare = raw_append(work / f"bare-{synchronous}.db", raw_rows(todo), batch, synchronous, indexes=False)
                ours_flat, theirs_flat = flatness(ours, batch), flatness(theirs, batch)
                verdicts.append(
                    f"custody/raw at batch 1,000 ({synchronous}) {rate / raw_rate:.2f} >= {GOAL_RAW_RATIO}: "
                    f"{'met' if rate / raw_rate >= GOAL_RAW_RATIO else 'NOT met'}"
                )
                verdicts.append(
                    f"cost per entry, last tenth / first tenth, batch 1,000 ({synchronous}): custody {ours_flat:.2f}, "
                    f"raw {theirs_flat:.2f} with the same indexes, raw {flatness(bare, batch):.2f} without "
                    f"secondary indexes; custody's own cost {own:.2f}. Custody grows no faster than "
                    f"SQLite's indexes: {'met' if ours_flat <= theirs_flat else 'NOT met'}"
                )
    return verdicts


def writer(url: str, checkpoints: Path, start: int, count: int, entry_bytes: int, errors) -> None:
    catalog = Catalog.from_url(url, checkpoints_at(checkpoints))
    todo = events(count, entry_bytes, start)
    try:
        append_all(catalog, [todo[i : i + 100] for i in range(0, count, 100)])
    except Exception as err:  # reported to the parent, which counts every failure
        errors.put(f"{type(err).__name__}: {err}")
        raise


def writers(args: argparse.Namespace, backend: str, new_database: Callable[[str], str], work: Path) -> list[str]:
    """Two writer processes against one, each run on a new database from `new_database(name)`, with
    its checkpoint file in `work`."""
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    ratios, problems = [], []
    count = args.entries // 2 * 2
    for repeat in range(args.repeats):
        timings = []
        for processes in (1, 2):
            url = new_database(f"writers_{repeat}_{processes}")
            checkpoints = work / f"{backend}-writers_{repeat}_{processes}.checkpoints.jsonl"
            make_engine(url).dispose()
            share = count // processes
            started = time.perf_counter()
            running = [
                context.Process(target=writer, args=(url, checkpoints, p * share, share, args.entry_bytes, errors))
                for p in range(processes)
            ]
            for process in running:
                process.start()
            for process in running:
                process.join()
            timings.append(time.perf_counter() - started)
            problems += [f"exit code {p.exitcode}" for p in running if p.exitcode != 0]
            with Catalog.from_url(url).session() as session:
                seqs = list(session.exec(select(LedgerEntry.seq).order_by(col(LedgerEntry.seq))))
                if seqs != list(range(1, count + 1)) or not ledger.verify(session, checkpoints_at(checkpoints)).ok:
                    problems.append(
                        f"repeat {repeat}, {processes} writer(s): gaps, duplicates, a broken chain or checkpoints"
                    )
        ratios.append(timings[0] / timings[1])
    while not errors.empty():
        problems.append(errors.get())
    ratio = statistics.median(ratios)
    print(
        f"\n2. writers on {backend}: {count:,} entries in batches of 100, one process vs two at once, {args.repeats} repeats"
    )
    print(
        f"aggregate throughput two/one: median {ratio:.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}); "
        f"errors: {len(problems)}{': ' + problems[0] if problems else ''}"
    )
    return [
        f"two writers on {backend} {ratio:.2f} of one >= {GOAL_TWO_WRITERS}: {'met' if ratio >= GOAL_TWO_WRITERS else 'NOT met'}",
        f"lock errors on {backend} over {args.repeats} repeats: {len(problems)} (goal 0): {'met' if not problems else 'NOT met'}",
    ]


def postgres_writers(args: argparse.Namespace, work: Path) -> list[str]:
    """The writers' figures once more on a throwaway PostgreSQL cluster (the one the tests start)."""
    from tests.pg_server import running_postgres

    with running_postgres() as server:
        return writers(args, "PostgreSQL", server.create_database, work)


def reads(args: argparse.Namespace, work: Path) -> list[str]:
    path = work / "reads.db"
    catalog = catalog_at(path, "NORMAL")
    started = time.perf_counter()
    for start in range(0, args.read_entries, 100_000):
        chunk = events(min(100_000, args.read_entries - start), 300, start)
        append_all(catalog, [chunk[i : i + 1000] for i in range(0, len(chunk), 1000)])
    print(
        f"\n3. reads on {args.read_entries:,} entries (built in {time.perf_counter() - started:.0f} s, "
        f"{path.stat().st_size / 1e6:.0f} MB); {args.queries} queries each, a fresh session per query"
    )
    rng = random.Random(7)
    shapes = {
        "page of 100 from a seq": lambda: ledger.LedgerFilter(from_seq=rng.randrange(1, args.read_entries), limit=100),
        "asset, first 100": lambda: ledger.LedgerFilter(asset=f"bench/asset_{rng.randrange(ASSETS):03d}", limit=100),
        "asset and version": lambda: ledger.LedgerFilter(
            asset=f"bench/asset_{rng.randrange(ASSETS):03d}", version=rng.randrange(1, VERSIONS + 1), limit=100
        ),
    }
    verdicts = query_times("hot table", catalog, shapes, args.queries)
    started = time.perf_counter()
    catalog.segments = work / "segments"
    report = rollover(catalog, catalog.segments, timedelta(days=-1))
    size = sum(p.stat().st_size for p in catalog.segments.glob("*.segment"))
    print(
        f"\nrolled every entry into {len(report.segments)} segments in {time.perf_counter() - started:.0f} s "
        f"({size / 1e6:.0f} MB of files)"
    )
    return verdicts + query_times("segments", catalog, shapes, args.queries)


def query_times(where_from: str, catalog: Catalog, shapes: dict, queries: int) -> list[str]:
    verdicts = []
    print(f"{'query, ' + where_from:<36}{'p50 ms':>9}{'p95 ms':>9}{'rows':>7}")
    for label, where in shapes.items():
        times, rows = [], 0
        for _ in range(queries):
            query = where()
            started = time.perf_counter()
            with catalog.session() as session:
                rows = len(ledger.entries(session, query))
            times.append((time.perf_counter() - started) * 1000)
        p95 = statistics.quantiles(times, n=20)[-1]
        print(f"{label + ', ' + where_from:<36}{statistics.median(times):>9.2f}{p95:>9.2f}{rows:>7}")
        verdicts.append(
            f"{label} ({where_from}): p95 {p95:.1f} ms <= {GOAL_READ_P95_MS:.0f}: "
            f"{'met' if p95 <= GOAL_READ_P95_MS else 'NOT met'}"
        )
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--single-entries", type=int, default=10_000, help="entries appended one per transaction")
    parser.add_argument("--entry-bytes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--read-entries", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--postgres", action="store_true", help="also time the writers on a throwaway PostgreSQL server"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="custody-bench-ledger-"))
    started = time.perf_counter()
    try:
        verdicts = appends(args, work) + writers(args, "SQLite", lambda name: f"sqlite:///{work / name}.db", work)
        if args.postgres:
            verdicts += postgres_writers(args, work)
        verdicts += reads(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\ngoals:")
    for verdict in verdicts:
        print(f"  {verdict}")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
