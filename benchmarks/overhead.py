#!/usr/bin/env python
"""What Custody adds to one materialization of a trivial integration asset, vs. the same asset in plain Dagster.

Both kinds run in this process, on one Dagster instance (SQLite storage, as a deployment has) and one
Spark session (local[2]), with their resources bound as Custody's code location binds them (one object
for every run, no run config), read the same landing version of --rows rows and apply the same
transform (benchmarks.bench_transforms:passthrough):

  plain:    a `@dg.asset` that reads the landing Parquet folder (Spark finding its schema in a
            file's footer, or given it with --plain-read schema, which leaves the work of governance
            alone in the difference), applies the transform and writes Parquet to a new folder
  plain_checked: the same plain asset with bare Dagster checks of the same names as Custody's (each
            passes at once): what Dagster itself costs for a materialization with that many checks
  custody:  the integration asset built from a spec: checks that the requester may materialize it
            and read its input (a file directory; the decisions go to the ledger), pins its input
            version and reads it with the schema the catalog keeps for it (by default, the plain
            asset has Spark find it in a file's footer), runs the transform, checks the files the
            Spark plan reads against the pins, writes and seals the result, extracts its column
            lineage, and sends OpenLineage START and COMPLETE events to a JSONL file
            (--column-lineage off leaves the column lineage out, to measure what it adds). The
            first run commits the version with its catalog row, lineage edge, column lineage and
            ledger entries; each later run makes the same version again from the same input and
            code, which the ledger records instead of a new version

  checked:  the same, as a run submitted to Custody's instance is: first decided by its run coordinator
            (the policy's decisions at submission, with their ledger entries, and the tags of its
            concurrency limits), then materialized with Custody's asset checks of the new version,
            made in the asset's own step (they read the catalog, the ledger and the manifest, and
            look for each of its files); `custody` leaves the checks out of its selection

Each measurement is one whole `dg.materialize` call, so Dagster's own cost per run is in each. After
--warmup rounds, --rounds rounds interleave the kinds, rotating which goes first. Prints each
time, the medians, the ratios of Custody's kinds to plain Dagster's and the milliseconds they add,
with a 90% bootstrap interval: one run of the same work varies by tens of milliseconds here (Spark's
write, Dagster's storage), so the difference of two medians is uncertain by about as much as the
goal allows unless the rounds are many. A goal counts as met when the interval's upper end meets it. Then checks that the
OpenLineage file holds a START and a COMPLETE for every Custody materialization and counts the
versions committed. Unless --no-profile, ends with a cProfile of one more Custody materialization:
its top functions in governance/, and where materialize() and the asset's step function spend their time.

    .venv/bin/python -m benchmarks.overhead
    .venv/bin/python -m benchmarks.overhead --plain-read schema   # the plain assets given the schema too
    .venv/bin/python -m benchmarks.overhead --rounds 3 --warmup 1 --no-profile   # smoke run
"""

from __future__ import annotations

import argparse
import getpass
import io
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dagster as dg

from assets.coordinator import CustodyRunCoordinator
from assets.definitions import bound
from assets.factory import REQUESTED_BY_TAG, integration_asset, landing_asset
from benchmarks.bench_transforms import passthrough
from benchmarks.stats import interval
from governance.access.local import local_user
from governance.approval import apply
from governance.batches import drop_batch
from governance.checks import checks_for
from governance.spec import SpecSet, load_specs
from governance.zones import AssetKey
from resources import CustodyResource, SparkResource

SOURCE = AssetKey("bench", "source")
TRIVIAL = AssetKey("bench", "trivial")
PLAIN = dg.AssetKey(["bench", "trivial_plain"])
TRANSFORM = "benchmarks.bench_transforms:passthrough"
# The landing version's schema as Spark reads it back (every column nullable).
SCHEMA_DDL = "id BIGINT, name STRING, amount DOUBLE, day DATE"
TRANSFORM_PACKAGES = ("benchmarks.bench_transforms",)
TAGS = {REQUESTED_BY_TAG: "bench"}
# As the CLI launches runs (assets/launch.py): step logs still reach the instance, not the terminal.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
ROLES = "roles: {owner: bench-owners, producer: bench-producers, consumer: bench-consumers}\n"
# The requester holds the producer role, so each Custody run pays for its access check and its
# decisions in the ledger, as in production.
# The benchmark's OS user is the owner who puts the specs in force: a verified identity, as a command
# run as yourself is; `bench` requests the runs.
OWNER = getpass.getuser()
DIRECTORY = (
    f"users: {{bench: {{}}, {OWNER}: {{}}}}\n"
    f"groups: {{bench-owners: [bench, {OWNER}], bench-producers: [bench], bench-consumers: [bench]}}\n"
)
GOAL_RATIO, GOAL_ADDED_MS = 1.25, 50.0
GOAL_LIKE_FOR_LIKE_MS = 30.0  # Custody's coordinator and checks against plain Dagster with the same checks


def write_specs(root: Path) -> SpecSet:
    folder = root / SOURCE.domain
    folder.mkdir(parents=True)
    (folder / f"{SOURCE.name}.yaml").write_text(
        "description: Benchmark input.\n" + ROLES + "zone: landing\nsource: {format: csv, header: true}\n"
        "columns:\n"
        "  - {name: id, type: long, nullable: false}\n"
        "  - {name: name, type: string}\n"
        "  - {name: amount, type: double}\n"
        "  - {name: day, type: date}\n"
        "max_bad_fraction: 0.0\n",
        encoding="utf-8",
    )
    (folder / f"{TRIVIAL.name}.yaml").write_text(
        f"description: Benchmark copy of the input.\n{ROLES}zone: integration\n"
        f"inputs: [{SOURCE}]\ntransform: {TRANSFORM}\n",
        encoding="utf-8",
    )
    return load_specs(root, transform_packages=TRANSFORM_PACKAGES)


def csv_rows(rows: int) -> bytes:
    lines = ["id,name,amount,day"]
    lines += [f"{i},name{i % 97},{i * 1.25:.2f},2024-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def plain_asset(
    landing: str, out_root: Path, checks: tuple[str, ...] = (), schema: str | None = None
) -> dg.AssetsDefinition:
    """What a team without Custody writes: read, transform, write to a folder of its own; with
    `checks`, Dagster checks of those names that pass without looking at anything; with `schema`
    (a DDL string), the input read with it rather than Spark finding it in a file's footer."""
    written = itertools.count(1)

    @dg.asset(
        key=PLAIN,
        deps=[dg.AssetKey([SOURCE.domain, SOURCE.name])],
        required_resource_keys={"spark"},
        check_specs=[dg.AssetCheckSpec(name, asset=PLAIN) for name in checks],
    )
    def _plain(context):
        spark = context.resources.spark.spark_session
        reader = spark.read.schema(schema) if schema else spark.read
        passthrough(spark, reader.parquet(landing)).write.parquet(str(out_root / f"run-{next(written):04d}"))
        # As Custody's asset does: the data is written already, so no IO manager pickles a None.
        return dg.MaterializeResult(
            check_results=[dg.AssetCheckResult(check_name=name, passed=True) for name in checks]
        )

    return _plain


class Bench:
    """One instance, one home, one Spark resource; each run returns its wall seconds."""

    def __init__(
        self,
        work: Path,
        rows: int,
        instance: dg.DagsterInstance,
        column_lineage: str = "on",
        plain_read: str = "infer",
    ):
        self.instance = instance
        self.specs = write_specs(work / "specs")
        (work / "directory.yaml").write_text(DIRECTORY, encoding="utf-8")
        self.custody = CustodyResource(
            home=str(work / "home"), column_lineage=column_lineage, directory=f"file:{work / 'directory.yaml'}"
        )
        # The owner puts the specs in force, so each Custody run also checks it runs what is in force.
        policy = self.custody.policy()
        apply(self.custody.catalog, policy, local_user(policy.os_users).identity("cli"), self.specs)
        # Bound as Custody's code location binds its resources (assets/definitions.py), for both kinds:
        # one object for every run, taking no run config.
        self.spark = bound(SparkResource(master="local[2]"), "Spark, local[2]")
        self.bound_custody = bound(self.custody, "Custody's catalog, lake and directory")
        self.plain_out = work / "plain"
        self.custody_asset = integration_asset(self.specs[TRIVIAL], self.specs)
        self.without_checks = dg.AssetSelection.assets(self.custody_asset).without_checks()
        self.coordinator = coordinator(work, self.custody)
        self.coordinator.register_instance(instance)  # as the instance does for the coordinator it loads
        self.landing = self._ingest(rows)
        # Custody reads its input with the schema the catalog keeps; a plain team may write theirs out.
        schema = SCHEMA_DDL if plain_read == "schema" else None
        self.plain_asset = plain_asset(self.landing, self.plain_out, schema=schema)
        self.check_names = tuple(check.value for check in checks_for(self.specs[TRIVIAL]))
        self.plain_checked_asset = plain_asset(self.landing, self.plain_out, self.check_names, schema)

    def _ingest(self, rows: int) -> str:
        """Land the input once, through Custody, so both kinds read the same committed version."""
        drop_batch(self.custody.lake, SOURCE, "b001", {"source.csv": csv_rows(rows)})
        result = dg.materialize(
            [landing_asset(self.specs[SOURCE])],
            resources=self._resources(),
            instance=self.instance,
            tags=TAGS,
            run_config={**QUIET, "ops": {f"{SOURCE.domain}__{SOURCE.name}": {"config": {"batch": "b001"}}}},
        )
        version = self.custody.catalog.latest(SOURCE)
        if not result.success or version.rows != rows:
            raise SystemExit(f"ingesting {SOURCE} failed or landed {version.rows} rows, expected {rows}")
        return str(self.custody.lake.at(version.path))

    def _resources(self) -> dict:
        return {"custody": self.bound_custody, "spark": self.spark}

    def plain(self) -> float:
        return self._plain(self.plain_asset)

    def plain_checked(self) -> float:
        return self._plain(self.plain_checked_asset)

    def _plain(self, asset: dg.AssetsDefinition) -> float:
        started = time.perf_counter()
        result = dg.materialize(
            [asset], resources={"spark": self.spark}, instance=self.instance, tags=TAGS, run_config=QUIET
        )
        elapsed = time.perf_counter() - started
        if not result.success:
            raise SystemExit("the plain materialization failed")
        shutil.rmtree(self.plain_out, ignore_errors=True)  # not timed: the output is not the point
        return elapsed

    def governed(self) -> float:
        started = time.perf_counter()
        result = dg.materialize(
            [self.custody_asset],
            selection=self.without_checks,
            resources=self._resources(),
            instance=self.instance,
            tags=TAGS,
            run_config=QUIET,
        )
        elapsed = time.perf_counter() - started
        if not result.success or result.get_asset_check_evaluations():
            raise SystemExit("the Custody materialization failed, or ran checks")
        return elapsed

    def checked(self) -> float:
        started = time.perf_counter()
        run = dg.DagsterRun(
            job_name="__ASSET_JOB",
            run_id=str(uuid.uuid4()),
            tags=TAGS,
            asset_selection=frozenset({dg.AssetKey([TRIVIAL.domain, TRIVIAL.name])}),
        )
        self.coordinator.decide(run)
        result = dg.materialize(
            [self.custody_asset], resources=self._resources(), instance=self.instance, tags=TAGS, run_config=QUIET
        )
        elapsed = time.perf_counter() - started
        evaluations = result.get_asset_check_evaluations()
        if not result.success or len(evaluations) != len(self.check_names) or not all(e.passed for e in evaluations):
            raise SystemExit(f"the checked Custody materialization failed: {evaluations}")
        return elapsed

    def events(self) -> Counter[str]:
        """START/COMPLETE/FAIL events the OpenLineage file holds for the measured asset."""
        path = Path(self.custody.settings().home) / "openlineage" / "events.jsonl"
        counts: Counter[str] = Counter()
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["job"]["name"] == str(TRIVIAL):
                counts[event["eventType"]] += 1
        return counts

    def profile(self, top: int) -> str:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        seconds = self.governed()
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
        stats.print_stats(f"{ROOT}/governance/", top)  # full paths here, so the filter sees the folder
        lines = [line.replace(f"{ROOT}/", "") for line in out.getvalue().splitlines()]
        table = lines[next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")) :]
        return (
            f"one Custody materialization under cProfile: {seconds * 1000:.0f} ms (profiling inflates it)\n"
            f"top {top} functions of governance/ by cumulative time:\n"
            + "\n".join(line for line in table if line.strip())
            + "\n\nwhat materialize() spends its time on, Spark calls included (cumulative ms, top 10):\n"
            + direct_callees(stats, "integrate.py", "materialize", 10)
            + "\n\nand the asset's step function around it (assets/factory.py, top 6):\n"
            + direct_callees(stats, "factory.py", "_integration", 6)
        )


def coordinator(work: Path, custody: CustodyResource) -> CustodyRunCoordinator:
    """Custody's run coordinator, reading the benchmark's specs and directory as a deployment's reads its own."""
    os.environ.update(
        {
            "CUSTODY_HOME": custody.home,
            "CUSTODY_SPECS": str(work / "specs"),
            "CUSTODY_DIRECTORY": custody.directory,
            "CUSTODY_TRANSFORM_PACKAGES": TRANSFORM_PACKAGES[0],
        }
    )
    return CustodyRunCoordinator()


def direct_callees(stats, filename: str, function: str, top: int) -> str:
    """The functions `function` calls and the cumulative time of those calls: the list by module
    shows governance/ only, and leaves out what the step waits on in Spark or SQLite."""
    rows = []
    for callee, (*_, callers) in stats.stats.items():
        for (file, _line, name), (_cc, calls, _tt, cumulative) in callers.items():
            if name == function and file.endswith(filename):
                rows.append((cumulative, calls, callee))
    rows.sort(reverse=True)

    def short(func) -> str:
        file, line, name = func
        return f"{Path(file).parent.name}/{Path(file).name}:{line}({name})" if line else name

    return "\n".join(f"{seconds * 1000:8.1f} ms  {calls:>3}x  {short(callee)}" for seconds, calls, callee in rows[:top])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000, help="rows of the landing version both kinds read")
    parser.add_argument("--rounds", type=int, default=120, help="timed rounds, one materialization of each kind")
    # Spark's JIT keeps making each kind faster for several rounds; timing them would measure that.
    parser.add_argument("--warmup", type=int, default=8, help="untimed rounds first")
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="end with a cProfile of one Custody materialization",
    )
    parser.add_argument("--top", type=int, default=15, help="functions the profile shows")
    parser.add_argument("--column-lineage", choices=("on", "off"), default="on", help="Custody's column lineage")
    parser.add_argument(
        "--plain-read",
        choices=("infer", "schema"),
        default="infer",
        help="how the plain assets read their input: finding its schema in a file's footer, as "
        "spark.read.parquet does, or given it in their code, as Custody is given it by the catalog",
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # Dagster's preview/beta notices, once per process

    started_all = time.perf_counter()
    runs: dict[str, list[float]] = {"plain": [], "plain_checked": [], "custody": [], "checked": []}
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        work = Path(tmp)
        (work / "dagster").mkdir()
        (work / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
        with dg.DagsterInstance.from_config(str(work / "dagster")) as instance:
            setup = time.perf_counter()
            bench = Bench(work, args.rows, instance, args.column_lineage, args.plain_read)
            print(f"setup (Spark start, landing {args.rows:,} rows): {time.perf_counter() - setup:.1f}s", flush=True)
            measure = {
                "plain": bench.plain,
                "plain_checked": bench.plain_checked,
                "custody": bench.governed,
                "checked": bench.checked,
            }
            for i in range(args.warmup):
                warm = {kind: run() for kind, run in measure.items()}
                print(f"warm-up {i + 1}  " + "  ".join(f"{k} {t * 1000:6.0f} ms" for k, t in warm.items()), flush=True)
            kinds = list(measure)
            for i in range(args.rounds):  # interleaved, rotating which kind goes first
                for kind in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
                    runs[kind].append(measure[kind]())
                print(
                    f"round {i + 1:>2}  "
                    + "  ".join(f"{k} {runs[k][-1] * 1000:6.0f} ms" for k in kinds)
                    + f"  (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            profile = bench.profile(args.top) if args.profile else None
            events = bench.events()
            versions = len(bench.custody.catalog.versions(TRIVIAL))
    total = time.perf_counter() - started_all

    median = {kind: statistics.median(times) for kind, times in runs.items()}
    print(
        f"\ninput: {args.rows:,} rows, transform {TRANSFORM}; local[2], {args.rounds} rounds after "
        f"{args.warmup} warm-up; the plain assets read it "
        + ("with the schema in their code" if args.plain_read == "schema" else "finding its schema in a file's footer")
        + ", Custody's with the schema its catalog keeps"
    )
    print(f"{'kind':<14}{'median ms':>10}{'min ms':>8}{'max ms':>8}")
    for kind, times in runs.items():
        print(f"{kind:<14}{median[kind] * 1000:>10.0f}{min(times) * 1000:>8.0f}{max(times) * 1000:>8.0f}")
    print(
        f"Dagster's own cost of {len(bench.check_names)} checks (plain_checked - plain): "
        f"{(median['plain_checked'] - median['plain']) * 1000:.0f} ms"
    )
    comparisons = (
        ("custody", "plain", "without checks or coordinator", GOAL_ADDED_MS),
        ("checked", "plain", "with coordinator and checks", GOAL_ADDED_MS),
        (
            "checked",
            "plain_checked",
            "with coordinator and checks, against plain Dagster with the same checks",
            GOAL_LIKE_FOR_LIKE_MS,
        ),
    )
    for kind, baseline, what, goal_ms in comparisons:
        ratio, added = median[kind] / median[baseline], (median[kind] - median[baseline]) * 1000
        (ratio_low, ratio_high), (added_low, added_high) = interval(runs[kind], runs[baseline])
        print(
            f"{kind}/{baseline}, {what}:\n"
            f"  ratio {ratio:.2f} (90% {ratio_low:.2f}-{ratio_high:.2f}; goal <= {GOAL_RATIO}, "
            f"{'met' if ratio_high <= GOAL_RATIO else 'MISSED'})\n"
            f"  adds {added:.0f} ms (90% {added_low:.0f}-{added_high:.0f} ms; goal <= {goal_ms:.0f} ms, "
            f"{'met' if added_high <= goal_ms else 'MISSED'})"
        )

    expected = 2 * (args.warmup + args.rounds) + (1 if args.profile else 0)
    print(
        f"OpenLineage events for {TRIVIAL}: {sum(events.values())} "
        f"({', '.join(f'{n} {state}' for state, n in sorted(events.items()))}); "
        f"{expected} Custody materializations"
    )
    print(f"Custody versions of {TRIVIAL} committed: {versions} (the same input and code make it again)")
    print(f"total runtime: {total:.1f}s")
    if profile:
        print(f"\n{profile}")
    if events != Counter(START=expected, COMPLETE=expected) or versions != 1:
        raise SystemExit(
            f"expected {expected} START and {expected} COMPLETE events, and 1 version, which each later run made again"
        )


if __name__ == "__main__":
    main()
