#!/usr/bin/env python
"""Provenance and impact closures over the catalog vs. a BFS over an in-memory adjacency.

For each database, shape and size N, generates a layered DAG of N versions (50 layers, mean 2
inputs, one hub landing version bench/hub@1 with 1,000 dependents; fixed seed) in a fresh catalog
(SQLite, or PostgreSQL on a server the run starts on loopback):

  assets  assets in 50 layers, each reading 1 to 3 assets of earlier layers (mostly the layer just
          before); every asset is materialized round after round, each version pinning the newest
          version of each input: the shape runs give a catalog
  stress  each version reads 1 to 3 versions drawn at random from earlier layers, so a closure
          reaches a large share of the graph (tens of thousands of versions at N = 100,000)

Then, for 200 versions drawn with a fixed seed (the hub among them), times

  sql:   governance.lineage.graph.closure(session, [id], direction) with the default depth cap: the
         closure call alone, in a fresh read transaction per query (opening it is not timed); the
         walk reads the hops a level at a time, as a one-shot command does. Its answer holds the
         versions and their distances as arrays: the dict by id that a tree reads is built when
         asked, here by the agreement check, untimed
  held:  the same call where the process keeps the lineage in memory, as the service does
         (governance.lineage.resident): each call still asks the catalog for edges added since
  bfs:   a plain Python BFS over lists of neighbours by version id, from the same edges, same cap

upstream and downstream, and checks that the three agree (distance of every version reached and its
next hops): any difference stops the benchmark. Prints p50/p95 of each, the ratios to bfs, the mean
and max closure size, the hub's own timings, how long the held lineage took to load, and the goals
for both walks: p95 <= 50 ms at 100,000 versions and <= 100 ms at 1,000,000. Last, it times 20 held
walks each right after a new version is committed, which the walk first reads.

On each largest SQLite catalog, it then times `custody provenance ... --all --json` and `custody
impact ... --all --json` end to end (a fresh process each run, stdout to a pipe), and how soon each
prints its first version, for the sampled version of median closure size and for the hub, next to
`custody --help` for the start-up alone. Goals: --help <= 0.3 s, the first version <= 0.5 s, the
hub's 81,585 versions (at 100,000) <= 2 s.

    .venv/bin/python -m benchmarks.provenance                      # both shapes, 10,000 and 100,000 versions
    .venv/bin/python -m benchmarks.provenance --shapes stress --sizes 100000 1000000 --databases sqlite postgresql
    .venv/bin/python -m benchmarks.provenance --shapes assets --sizes 2000 --cli-runs 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.hops import build_from_edges, record_inputs
from governance.catalog.models import LineageEdge, VersionRow
from governance.lineage.graph import MAX_DEPTH, Closure, closure
from governance.lineage.resident import keep_resident, resident
from governance.lineage.terms import Direction

LAYERS = 50
VERSIONS_PER_ASSET = 10  # stress shape
ROUNDS = 100  # assets shape: versions per asset
SKIP_FRACTION = 0.2  # inputs taken from an older layer than the one just before
HUB_ID = 1
HUB_DEPENDENTS = 1_000
GOAL_MS = {100_000: 50, 1_000_000: 100}  # closure p95 at this many versions
HELP_GOAL_SECONDS = 0.3
FIRST_GOAL_SECONDS = 0.5  # until a streamed lineage prints its first version
HUB_GOAL_SECONDS = 2.0  # the hub's whole impact (81,585 versions), end to end
HUB_GOAL_AT = 100_000  # versions in the catalog
INSERT_CHUNK = 20_000
WARM_UP = 5
WRITES = 20  # held walks timed right after a version is committed
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
SCHEMA_JSON = '{"type":"struct","fields":[]}'
DIRECTIONS = (Direction.UPSTREAM, Direction.DOWNSTREAM)
DATABASES = ("sqlite", "postgresql")


@dataclass
class Graph:
    """Versions 1..n (index 0 unused): each version's name, layer and inputs."""

    n: int
    names: list[tuple[str, int]]
    layer_of: list[int]
    inputs: list[list[int]]

    def dependents(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n + 1)]
        for output, found in enumerate(self.inputs):
            for source in found:
                out[source].append(output)
        return out

    def edges(self) -> int:
        return sum(len(found) for found in self.inputs)


def generate_stress(n: int, seed: int) -> Graph:
    """Each version reads 1 to 3 versions picked at random in earlier layers: closures span much of the graph."""
    rng = random.Random(seed)
    per_layer = max(1, n // LAYERS)
    layer_of = [0] + [min((vid - 1) // per_layer, LAYERS - 1) for vid in range(1, n + 1)]
    first_of = [1 + k * per_layer for k in range(LAYERS)] + [n + 1]  # ids grow with the layer: a DAG
    inputs: list[list[int]] = [[] for _ in range(n + 1)]
    for vid in range(first_of[1], n + 1):
        layer, chosen, wanted = layer_of[vid], set(), rng.choice((1, 2, 3))
        while len(chosen) < wanted:
            source = layer - 1 if layer == 1 or rng.random() >= SKIP_FRACTION else rng.randrange(layer - 1)
            chosen.add(rng.randrange(first_of[source], first_of[source + 1]))
        inputs[vid] = sorted(chosen)
    add_hub_dependents(inputs, first_of[1], rng)
    names = [("", 0), ("bench/hub", 1)] + [
        (f"bench/a{(vid - 2) // VERSIONS_PER_ASSET:05d}", (vid - 2) % VERSIONS_PER_ASSET + 1) for vid in range(2, n + 1)
    ]
    return Graph(n, names, layer_of, inputs)


def generate_assets(n: int, seed: int) -> Graph:
    """Assets in 50 layers read 1 to 3 assets of earlier layers; each version reads its inputs' latest versions.

    This is the shape runs give a catalog: every asset is materialized again and again, each time
    pinning the newest version of each input, so a version's closure is about one version per
    upstream asset.
    """
    rng = random.Random(seed)
    per_layer = max(1, (n - 1) // (ROUNDS * LAYERS))
    assets = per_layer * LAYERS
    asset_layer = [a // per_layer for a in range(assets)]
    reads: list[list[int]] = []
    for a in range(assets):
        layer, chosen, wanted = asset_layer[a], set(), rng.choice((1, 2, 3))
        while layer and len(chosen) < min(wanted, layer * per_layer):
            source = layer - 1 if layer == 1 or rng.random() >= SKIP_FRACTION else rng.randrange(layer - 1)
            chosen.add(source * per_layer + rng.randrange(per_layer))
        reads.append(sorted(chosen))
    names, layer_of, inputs = [("", 0), ("bench/hub", 1)], [0, 0], [[], []]
    latest = [0] * assets
    for index in range(n - 1):  # assets in layer order within each round: inputs exist before their readers
        rounds, a = divmod(index, assets)
        vid = index + 2
        names.append((f"bench/a{a:05d}", rounds + 1))
        layer_of.append(asset_layer[a])
        inputs.append([latest[b] for b in reads[a]])
        latest[a] = vid
    add_hub_dependents(inputs, 2 + per_layer, rng)
    return Graph(n, names, layer_of, inputs)


SHAPES = {"assets": generate_assets, "stress": generate_stress}


def add_hub_dependents(inputs: list[list[int]], first_integration: int, rng: random.Random) -> None:
    """Top the hub up to exactly HUB_DEPENDENTS dependents, spread over every later layer."""
    already = {vid for vid in range(first_integration, len(inputs)) if HUB_ID in inputs[vid]}
    candidates = [vid for vid in range(first_integration, len(inputs)) if vid not in already and inputs[vid]]
    for vid in rng.sample(candidates, min(len(candidates), HUB_DEPENDENTS - len(already))):
        inputs[vid] = sorted([HUB_ID, *inputs[vid]])


def version_rows(graph: Graph, rng: random.Random) -> Iterator[dict]:
    for vid in range(1, graph.n + 1):
        asset, number = graph.names[vid]
        yield version_row(vid, asset, number, "landing" if graph.layer_of[vid] == 0 else "integration", rng)


def version_row(vid: int, asset: str, number: int, zone: str, rng: random.Random) -> dict:
    rows = rng.randrange(1_000, 5_000_000)
    return {
        "id": vid,
        "asset_key": asset,
        "number": number,
        "data_version": f"{rng.getrandbits(128):032x}",
        "zone": zone,
        "path": f"/lake/{zone}/{asset}/v={number}",
        "rows": rows,
        "rows_quarantined": 0,
        "bytes": rows * rng.randrange(40, 400),
        "table_schema": SCHEMA_JSON,
        "status": "committed",
        "created_at": EPOCH + timedelta(minutes=vid),
        "run_id": f"run-{vid:07d}",
        "code_version": f"{rng.getrandbits(32):08x}",
        "spec_hash": f"{rng.getrandbits(64):016x}",
        "requested_by": "bench",
        "attempt_id": f"attempt-{vid:07d}",
        "assurance": "asserted",
        "criticality": "normal",
    }


def edge_rows(graph: Graph) -> Iterator[dict]:
    for output, found in enumerate(graph.inputs):
        for source in found:
            yield {"output_version_id": output, "input_version_id": source, "run_id": f"run-{output:07d}"}


def chunks(rows: Iterator[dict]) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for row in rows:
        batch.append(row)
        if len(batch) == INSERT_CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def build_catalog(url: str, graph: Graph, seed: int) -> Catalog:
    catalog = Catalog.from_url(url)
    rng = random.Random(seed)
    with catalog.session() as session:
        connection = session.connection()
        tables = ((VersionRow.__table__, version_rows(graph, rng)), (LineageEdge.__table__, edge_rows(graph)))
        for table, rows in tables:
            for batch in chunks(rows):
                connection.execute(insert(table), batch)
        build_from_edges(connection)  # as a catalog's migration does: the edges went in without them
    if catalog.engine.dialect.name != "sqlite":
        with catalog.engine.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        return catalog
    # Reads then come from the database file, as in a catalog that has been idle for a while.
    raw = catalog.engine.raw_connection()  # outside SQLAlchemy's transaction: a checkpoint cannot run in one
    try:
        raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()
    return catalog


def bfs(adjacency: list[list[int]], root: int, cap: int = MAX_DEPTH) -> dict[int, int]:
    depth_of = {root: 0}
    queue = deque([root])
    while queue:
        current = queue.popleft()
        distance = depth_of[current]
        if distance >= cap:
            continue
        for neighbour in adjacency[current]:
            if neighbour not in depth_of:
                depth_of[neighbour] = distance + 1
                queue.append(neighbour)
    return depth_of


def sql_closure(catalog: Catalog, version_id: int, direction: Direction) -> tuple[Closure, float]:
    with catalog.reading() as session:
        started = time.perf_counter()
        found = closure(session, [version_id], direction, depth=None)
        return found, time.perf_counter() - started


def timed_bfs(adjacency: list[list[int]], version_id: int) -> tuple[dict[int, int], float]:
    started = time.perf_counter()
    found = bfs(adjacency, version_id)
    return found, time.perf_counter() - started


def check_agrees(
    found: Closure,
    expected: dict[int, int],
    adjacency: list[list[int]],
    version_id: int,
    direction: Direction,
    graph: Graph,
) -> None:
    if found.depth_of != expected:
        missing, extra = expected.keys() - found.depth_of.keys(), found.depth_of.keys() - expected.keys()
        wrong = {vid for vid in expected.keys() & found.depth_of.keys() if expected[vid] != found.depth_of[vid]}
        raise SystemExit(
            f"{direction} closure of version {version_id} ({'@'.join(map(str, graph.names[version_id]))}) disagrees with "
            f"the BFS: {len(found.depth_of)} versions vs {len(expected)}; {len(missing)} missing "
            f"{sorted(missing)[:5]}, {len(extra)} extra {sorted(extra)[:5]}, {len(wrong)} at another depth "
            f"{[(vid, found.depth_of[vid], expected[vid]) for vid in sorted(wrong)[:5]]}"
        )
    hops = {vid: sorted(adjacency[vid]) for vid in expected if adjacency[vid]}
    walked = {vid: sorted(found) for vid, found in found.next_of.items()}
    if walked != hops:
        differ = sorted(vid for vid in hops.keys() | walked.keys() if hops.get(vid) != walked.get(vid))
        raise SystemExit(
            f"{direction} closure of version {version_id}: next hops differ for {len(differ)} versions, "
            f"e.g. {[(vid, walked.get(vid), hops.get(vid)) for vid in differ[:3]]}"
        )


def goal_words(n: int) -> str:
    return f"p95 <= {GOAL_MS[n]} ms" if n in GOAL_MS else "no goal at this size"


def verdict(n: int, p95_ms: float) -> str:
    if n not in GOAL_MS:
        return ""
    return "met" if p95_ms <= GOAL_MS[n] else "MISSED"


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass
class Timings:
    sql: list[float]
    held: list[float]
    bfs: list[float]
    sizes: list[int]
    hub: tuple[float, float, float, int] | None = None  # sql s, held s, bfs s, closure size

    def p95_ms(self) -> dict[str, float]:
        return {"sql": percentile(self.sql, 95) * 1e3, "held": percentile(self.held, 95) * 1e3}


def after_writes(catalog: Catalog, held: Catalog, graph: Graph, sample: list[int]) -> list[float]:
    """The held walk upstream of sampled versions, each right after a new version reading two
    others is committed (by another engine, as another process would): the walk first reads the
    edges added. What it reaches is unchanged: nothing old is built from the new versions."""
    rng = random.Random(len(sample))
    timings = []
    for offset, vid in enumerate(sample[:WRITES], start=1):
        new = graph.n + offset
        with catalog.session() as session:
            session.connection().execute(
                insert(VersionRow.__table__), [version_row(new, "bench/new", offset, "integration", rng)]
            )
            record_inputs(session, new, sorted(rng.sample(range(1, graph.n + 1), 2)), f"run-{new:07d}")
        timings.append(sql_closure(held, vid, Direction.UPSTREAM)[1])
    return timings


def load_held(url: str) -> tuple[Catalog, float]:
    """A catalog of its own engine whose lineage this process keeps in memory, and how long the
    first load of every edge took."""
    held = Catalog(make_engine(url))
    keep_resident(held.engine)
    with held.reading() as session:
        started = time.perf_counter()
        resident(session).current(session)  # type: ignore[union-attr]
        return held, time.perf_counter() - started


def measure(catalog: Catalog, held: Catalog, graph: Graph, sample: list[int]) -> dict[Direction, Timings]:
    adjacency = {Direction.UPSTREAM: graph.inputs, Direction.DOWNSTREAM: graph.dependents()}
    for vid in sample[:WARM_UP]:  # page cache and interpreter, every side
        for direction in DIRECTIONS:
            sql_closure(catalog, vid, direction)
            sql_closure(held, vid, direction)
            bfs(adjacency[direction], vid)
    results = {direction: Timings([], [], [], []) for direction in DIRECTIONS}
    for vid in sample:
        for direction in DIRECTIONS:
            found, sql_seconds = sql_closure(catalog, vid, direction)
            from_memory, held_seconds = sql_closure(held, vid, direction)
            expected, bfs_seconds = timed_bfs(adjacency[direction], vid)
            for walked in (found, from_memory):
                check_agrees(walked, expected, adjacency[direction], vid, direction, graph)
            timings = results[direction]
            timings.sql.append(sql_seconds)
            timings.held.append(held_seconds)
            timings.bfs.append(bfs_seconds)
            timings.sizes.append(len(expected))
            if vid == HUB_ID:
                timings.hub = (sql_seconds, held_seconds, bfs_seconds, len(expected))
    return results


def draw_sample(n: int, count: int, seed: int) -> list[int]:
    rng = random.Random(seed + 1)
    drawn = rng.sample(range(HUB_ID + 1, n + 1), min(count - 1, n - 1))
    drawn.insert(rng.randrange(len(drawn) + 1), HUB_ID)  # not first: the hub should not take the warm-up
    return drawn


def print_size(
    where: str,
    shape: str,
    n: int,
    graph: Graph,
    build_seconds: float,
    load_seconds: float,
    results: dict[Direction, Timings],
) -> None:
    landing = sum(1 for vid in range(1, n + 1) if graph.layer_of[vid] == 0)
    edges = graph.edges()
    print(
        f"\n{shape} N={n:,} on {where}: built in {build_seconds:.1f}s; {landing:,} landing, {n - landing:,} integration versions, "
        f"{edges:,} edges ({edges / max(1, n - landing):.2f} inputs per integration version), "
        f"{max(graph.layer_of) + 1} layers; hub bench/hub@1 with {len(graph.dependents()[HUB_ID]):,} dependents; "
        f"the held lineage loaded in {load_seconds:.2f}s"
    )
    print(
        f"{'direction':<11}{'sql p50':>9}{'sql p95':>9}{'held p50':>10}{'held p95':>10}{'bfs p50':>9}{'bfs p95':>9}"
        f"{'sql/bfs p95':>13}{'held/bfs p95':>14}{'mean size':>11}{'max size':>10}   {goal_words(n)} sql, held"
        f"   (ms; {len(results[Direction.UPSTREAM].sql)} versions)"
    )
    for direction, t in results.items():
        sql50, sql95 = percentile(t.sql, 50) * 1e3, percentile(t.sql, 95) * 1e3
        held50, held95 = percentile(t.held, 50) * 1e3, percentile(t.held, 95) * 1e3
        bfs50, bfs95 = percentile(t.bfs, 50) * 1e3, percentile(t.bfs, 95) * 1e3
        print(
            f"{direction.value:<11}{sql50:9.2f}{sql95:9.2f}{held50:10.2f}{held95:10.2f}{bfs50:9.2f}{bfs95:9.2f}"
            f"{sql95 / bfs95:13.2f}{held95 / bfs95:14.2f}{statistics.mean(t.sizes):11,.0f}{max(t.sizes):10,}"
            f"   {verdict(n, sql95)}, {verdict(n, held95)}"
        )
    hub = {direction: t.hub for direction, t in results.items() if t.hub}
    shown = ", ".join(
        f"{direction.value} sql {sql * 1e3:.1f} ms, held {kept * 1e3:.1f} ms, bfs {b * 1e3:.1f} ms, {size:,} versions"
        for direction, (sql, kept, b, size) in hub.items()
    )
    print(f"hub bench/hub@1: {shown}")


# --- the CLI, end to end ---------------------------------------------------------------------------


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    command = [str(Path(sys.executable).with_name("custody")), *args]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr.decode()[-4000:]}")
    return elapsed, done.stdout


def time_cli(catalog_path: Path, home: Path, graph: Graph, cases: list[tuple[str, int, int]], runs: int) -> None:
    """Each command `runs` times, with the goals that hold at this size."""
    env = {**os.environ, "CUSTODY_HOME": str(home), "CUSTODY_CATALOG_URL": f"sqlite:///{catalog_path}"}
    print(
        f"\nCLI end to end on this catalog (wall s of {runs} runs, a fresh process each; goals: --help <= "
        f"{HELP_GOAL_SECONDS} s, first version <= {FIRST_GOAL_SECONDS} s, the hub's impact <= {HUB_GOAL_SECONDS:.0f} s "
        f"at {HUB_GOAL_AT:,} versions)"
    )
    startup = [run_cli(["--help"], env)[0] for _ in range(runs)]
    median = statistics.median(startup)
    print(
        f"  {'custody --help (startup only)':<62}{' '.join(f'{s:.2f}' for s in startup):<{6 * runs + 2}}"
        f"median {median:.2f}  {'met' if median <= HELP_GOAL_SECONDS else 'MISSED'}"
    )
    for command, vid, size in cases:
        asset, number = graph.names[vid]
        args = [command, f"{asset}@{number}", "--all", "--json"]  # every version, streamed, not a summary
        measured = [run_streamed(args, env) for _ in range(runs)]
        streamed = json.loads(measured[0][2])
        root = streamed[0]
        if (root["asset"], root["version"]) != (asset, number) or len(streamed) != size:
            raise SystemExit(f"{' '.join(args)} gave {len(streamed):,} versions from {root['asset']}@{root['version']}")
        seconds, first = [s for s, _, _ in measured], [f for _, f, _ in measured]
        median, first_median = statistics.median(seconds), statistics.median(first)
        whole = ""
        if vid == HUB_ID and graph.n == HUB_GOAL_AT:
            whole = f"{'met' if median <= HUB_GOAL_SECONDS else 'MISSED'}; "
        label = f"{' '.join(args)} ({size:,} versions, {len(measured[0][2]) / 1e6:.1f} MB)"
        print(
            f"  {label:<62}{' '.join(f'{s:.2f}' for s in seconds):<{6 * runs + 2}}median {median:.2f}  {whole}"
            f"first version after {' '.join(f'{f:.2f}' for f in first)} s, median {first_median:.2f} "
            f"{'met' if first_median <= FIRST_GOAL_SECONDS else 'MISSED'}"
        )


def run_streamed(args: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """`custody ARGS` in a fresh process: its wall time, how long until its first version was printed
    (the first line after the array's `[`), and its stdout."""
    command = [str(Path(sys.executable).with_name("custody")), *args]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    chunks, first = [], None
    while chunk := process.stdout.read1(1 << 16):
        chunks.append(chunk)
        if first is None and b"{" in b"".join(chunks):
            first = time.perf_counter() - started
    _, err = process.communicate()
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({process.returncode}):\n{err.decode()[-4000:]}")
    return elapsed, first or elapsed, b"".join(chunks)


def typical(sample: list[int], sizes: list[int]) -> tuple[int, int]:
    """The sampled version (not the hub) whose closure size is the median."""
    ranked = sorted((size, vid) for vid, size in zip(sample, sizes) if vid != HUB_ID)
    size, vid = ranked[len(ranked) // 2]
    return vid, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["assets", "stress"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="versions per catalog")
    parser.add_argument("--databases", nargs="+", choices=DATABASES, default=["sqlite"], help="catalog databases")
    parser.add_argument("--samples", type=int, default=200, help="versions timed per catalog, the hub included")
    parser.add_argument("--cli-runs", type=int, default=5, help="runs of each CLI command on SQLite (0: skip the CLI)")
    parser.add_argument("--seed", type=int, default=20240101)
    args = parser.parse_args()

    started = time.perf_counter()
    p95: dict[tuple[str, str, int], dict[Direction, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="provenance-") as tmp, ExitStack() as servers:
        for database in args.databases:
            url_for = catalog_urls(database, Path(tmp), servers)
            for shape in args.shapes:
                for n in args.sizes:
                    p95[database, shape, n] = run_size(database, url_for, shape, n, args, Path(tmp) / f"{shape}-{n}")

    print()
    for (database, shape, n), found in p95.items():
        if n in GOAL_MS:
            for walk in ("sql", "held"):
                verdicts = ", ".join(
                    f"{direction.value} {ms[walk]:.1f} ms {verdict(n, ms[walk])}" for direction, ms in found.items()
                )
                print(
                    f"goal: closure p95 <= {GOAL_MS[n]} ms at {n:,} versions on {database} ({shape}, {walk}): {verdicts}"
                )
    print(f"total {time.perf_counter() - started:.0f}s")


def catalog_urls(database: str, tmp: Path, servers: ExitStack) -> Callable[[str], str]:
    """A new catalog's URL by name, on `database`: SQLite files in `tmp`, or databases of a
    PostgreSQL server started for the run."""
    if database == "sqlite":
        return lambda name: f"sqlite:///{tmp / name}.db"
    from tests.pg_server import running_postgres

    server = servers.enter_context(running_postgres())
    return server.create_database


def run_size(
    database: str, url_for: Callable[[str], str], shape: str, n: int, args: argparse.Namespace, folder: Path
) -> dict[Direction, dict[str, float]]:
    built = time.perf_counter()
    graph = SHAPES[shape](n, args.seed)
    folder.mkdir(parents=True, exist_ok=True)
    url = url_for(f"{shape}_{n}")
    catalog = build_catalog(url, graph, args.seed)
    build_seconds = time.perf_counter() - built
    sample = draw_sample(n, args.samples, args.seed)
    held, load_seconds = load_held(url)
    results = measure(catalog, held, graph, sample)
    print_size(database, shape, n, graph, build_seconds, load_seconds, results)
    if database == "sqlite" and n == max(args.sizes) and args.cli_runs > 0:
        up = typical(sample, results[Direction.UPSTREAM].sizes)
        down = typical(sample, results[Direction.DOWNSTREAM].sizes)
        hub_size = results[Direction.DOWNSTREAM].hub[3]
        time_cli(
            Path(url.removeprefix("sqlite:///")),
            folder / "home",
            graph,
            [
                ("provenance", *up),
                ("impact", *down),
                ("impact", HUB_ID, hub_size),
            ],
            args.cli_runs,
        )
    written = after_writes(catalog, held, graph, sample)  # last: the CLI's checks know the graph as built
    catalog.engine.dispose()
    held.engine.dispose()
    print(
        f"held walks upstream, each right after a version is committed: p50 {percentile(written, 50) * 1e3:.2f} ms, "
        f"p95 {percentile(written, 95) * 1e3:.2f} ms ({len(written)} walks)"
    )
    sys.stdout.flush()
    return {direction: t.p95_ms() for direction, t in results.items()}


if __name__ == "__main__":
    main()
