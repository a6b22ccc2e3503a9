#!/usr/bin/env python
"""Load time of Custody's Dagster Definitions built from N spec files vs. the same N assets in plain Dagster.

For each N, generates N specs (landing CSV assets and integration assets reading 1-2 earlier
assets) in a temp folder, then times, each in a fresh subprocess after its imports:

  cold:     the code location's entry point, assets.definitions.defs() (the project's defs/ folder
            and the Custody component it declares), + resolve_asset_graph +
            validate_loadable, every spec parsed and validated (a first load, or all edited since)
  cached:   the same with the spec cache filled by an earlier load: how the code location loads
            again for each run, each reload of the UI, each CLI command
  direct:   `cached` without the defs folder and the component: assets.definitions.load_definitions
  plain:    N `@dg.asset`s (same keys, groups, deps, descriptions) in dg.Definitions + the same
  plain_checked: the same with bare Dagster checks of the names Custody declares for each asset
            (`governance.checks.checks_for`): what Dagster itself costs for that many checks
  plain_same: the same assets written in plain Dagster: one `@dg.multi_asset` per asset with the
            AssetSpec Custody declares (key, deps, group, description, owners, kinds, tags, code
            version, the spec's path, its code reference and column schema as metadata), its checks with their
            descriptions, its config schema, retry policy, pool and resource keys, in a dg.Definitions
            with two resources; before timing, each N checks that it agrees with Custody's assets.
            It leaves out what Custody's code location holds besides the assets (the DropZone and
            feeds sensors, the ledger's job and schedule, the resources' descriptions): the ratio
            to it counts them as Custody's cost
  broken:   `cached` on a copy of the folder where one spec (the last, an integration asset) has an
            unknown key: the code location loads the others, and shows that one as an asset that
            cannot run

Prints the medians, the ratios to plain, plain_checked and plain_same (the goal's), each repeat's
ratio to plain_same, and t(3000)/t(1000) and t(10000)/t(1000), Custody's and, for reference, plain
Dagster's. With --profile, also prints the top functions of a cProfile of a cached load of the
largest N.

    .venv/bin/python benchmarks/definitions_load.py
    .venv/bin/python benchmarks/definitions_load.py --sizes 100 --repeat 1   # smoke run
    .venv/bin/python benchmarks/definitions_load.py --sizes 1000 3000 10000   # the component's figures
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRANSFORM = "benchmarks.bench_transforms:any_inputs"
TRANSFORM_PACKAGE = "benchmarks.bench_transforms"
TYPES = ["string", "int", "long", "double", "boolean", "date", "timestamp", "decimal(10,2)"]
DOMAINS = 20
GOAL_RATIO = 1.3
# The size at which `dg list defs` is timed too.
DG_LIST_SIZE = 3000


def generate(root: Path, n: int) -> list[dict]:
    """Write N spec files under root/specs; return each asset as a dict: its key, group, deps and
    description, and what `describe` adds."""
    rng = random.Random(n)
    graph = []
    for i in range(n):
        domain, name = f"d{i % DOMAINS}", f"a{i}"
        folder = root / "specs" / domain
        folder.mkdir(parents=True, exist_ok=True)
        if i < DOMAINS or i % 3 == 0:
            description, deps = f"Landing table {i}.", []
            columns = "\n".join(
                f'  - {{name: c{j}, type: "{rng.choice(TYPES)}", nullable: {"false" if j == 0 else "true"}}}'
                for j in range(rng.randint(5, 10))
            )
            body = (
                f"description: {description}\nroles: {{owner: o, producer: p, consumer: c}}\nzone: landing\n"
                f"source: {{format: csv, header: true}}\ncolumns:\n{columns}\n"
            )
        else:
            description = f"Derived table {i}."
            deps = [graph[j]["key"] for j in rng.sample(range(i), rng.randint(1, 2))]
            body = (
                f"description: {description}\nroles: {{owner: o, producer: p, consumer: c}}\nzone: integration\n"
                f"inputs: [{', '.join('/'.join(d) for d in deps)}]\ntransform: {TRANSFORM}\n"
            )
        (folder / f"{name}.yaml").write_text(body, encoding="utf-8")
        graph.append({"key": [domain, name], "group": domain, "deps": deps, "description": description})
    describe(root, graph)
    (root / "graph.json").write_text(json.dumps(graph), encoding="utf-8")
    return graph


def with_one_broken(root: Path, graph: list[dict]) -> Path:
    """A copy of the specs beside `root`, the last one given a key no spec has."""
    copy = root.with_name(root.name + "-broken")
    shutil.copytree(root / "specs", copy / "specs")
    shutil.copy(root / "graph.json", copy / "graph.json")
    domain, name = graph[-1]["key"]
    with (copy / "specs" / domain / f"{name}.yaml").open("a", encoding="utf-8") as spec:
        spec.write("colour: blue\n")
    return copy


def describe(root: Path, graph: list[dict]) -> None:
    """What each spec declares for its asset besides its key, deps, group and description, for the
    plain_checked and plain_same kinds: its checks, owner, tags, code version and columns."""
    sys.path.insert(0, str(ROOT))
    from governance.checks import DESCRIPTIONS, checks_for
    from governance.spec import code_version, load_specs
    from governance.zones import AssetKey

    specs = load_specs(root / "specs", transform_packages=(TRANSFORM_PACKAGE,))
    for node in graph:
        spec = specs[AssetKey(*node["key"])]
        body = spec.body
        node.update(
            checks=[{"name": check.value, "description": DESCRIPTIONS[check]} for check in checks_for(spec)],
            landing=spec.is_landing,
            file=str(spec.file),
            owner=body.roles.owner,
            tags={
                "custody/zone": body.zone,
                "custody/classification": body.classification.value,
                "custody/pii": str(body.pii).lower(),
                **body.tags,
            },
            code_version=code_version(spec),
            columns=[[column.name, column.type, column.nullable] for column in body.columns],
        )


def dg_list(root: Path) -> float:
    """Seconds `dg list defs --json` takes on the folder's specs, end to end, as a user runs it in
    the project: the specs cache is already filled."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))}
    environ.update(
        {
            "CUSTODY_HOME": str(root / "home"),
            "CUSTODY_SPECS": str(root / "specs"),
            "CUSTODY_TRANSFORM_PACKAGES": TRANSFORM_PACKAGE,
            # The generated specs' transforms live in this folder's package, which is not installed.
            "PYTHONPATH": str(ROOT),
        }
    )
    dg = Path(sys.executable).with_name("dg")
    started = time.perf_counter()
    subprocess.run([str(dg), "list", "defs", "--json"], cwd=ROOT, env=environ, check=True, capture_output=True)
    return time.perf_counter() - started


# --- child side: one measurement in a fresh interpreter --------------------------------------------


def _resolve(defs) -> None:
    import dagster as dg

    defs.resolve_asset_graph()
    dg.Definitions.validate_loadable(defs)


def build_plain(graph: list[dict], checked: bool = False):
    import dagster as dg

    def plain_asset(node: dict):
        key = dg.AssetKey(node["key"])

        @dg.asset(
            key=key,
            group_name=node["group"],
            description=node["description"],
            deps=[dg.AssetKey(d) for d in node["deps"]],
            check_specs=[dg.AssetCheckSpec(check["name"], asset=key) for check in node["checks"]] if checked else None,
        )
        def _asset(context):
            return None

        return _asset

    return dg.Definitions(assets=[plain_asset(node) for node in graph])


def build_same(graph: list[dict]):
    """The same assets as Custody's, in plain Dagster."""
    import dagster as dg

    retry = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL)
    audit = {"audit_version": dg.Field(dg.Noneable(int), default_value=None)}
    ingest = {"batch": dg.Field(dg.Noneable(str), default_value=None), "force": dg.Field(bool, default_value=False)}

    def same_asset(node: dict):
        key = dg.AssetKey(node["key"])
        metadata = {
            "custody/spec": dg.MetadataValue.path(node["file"]),
            "dagster/code_references": dg.CodeReferencesMetadataValue(
                code_references=[dg.LocalFileCodeReference(file_path=node["file"], line_number=1)]
            ),
        }
        if node["columns"]:
            metadata["dagster/column_schema"] = dg.TableSchema(
                columns=[
                    dg.TableColumn(name=name, type=type_, constraints=dg.TableColumnConstraints(nullable=nullable))
                    for name, type_, nullable in node["columns"]
                ]
            )
        spec = dg.AssetSpec(
            key=key,
            deps=[dg.AssetKey(d) for d in node["deps"]],
            group_name=node["group"],
            description=node["description"],
            owners=[f"team:{node['owner']}"],
            kinds={"spark", "parquet"},
            tags=node["tags"],
            code_version=node["code_version"],
            metadata=metadata,
        )

        @dg.multi_asset(
            specs=[spec],
            check_specs=[dg.AssetCheckSpec(c["name"], asset=key, description=c["description"]) for c in node["checks"]],
            can_subset=True,
            name="__".join(node["key"]),
            required_resource_keys={"custody", "spark"},
            retry_policy=retry,
            config_schema={**ingest, **audit} if node["landing"] else audit,
            pool="/".join(node["key"]),
        )
        def _asset(context):
            return None

        return _asset

    return dg.Definitions(
        assets=[same_asset(node) for node in graph],
        resources={"custody": dg.ResourceDefinition.none_resource(), "spark": dg.ResourceDefinition.none_resource()},
        executor=dg.in_process_executor,
    )


# Not in what an asset declares: where the component was declared, which Dagster adds to each of
# its assets (after the link to the asset's own spec, which both declare), and that no owner has applied the spec yet (no catalog has, in these folders), which
# Custody's loads work out and show in a tag and before the description, as a deployment's would.
ADDED_METADATA = {"dagster/code_references", "dagster/component_origin"}
PENDING_TAG = "custody/approval"
# The note a pending asset's description begins with (assets.factory).
PENDING_NOTE = re.compile(r"\A\*\*Pending approval:\*\* [^\n]*\n\n")


def disagreements(ours, same) -> list[str]:
    """Where plain_same's assets differ from Custody's in what they declare."""

    def declared(defs) -> dict:
        graph = defs.resolve_asset_graph()
        return {node.key: _declared(node, graph.assets_def_for_key(node.key)) for node in graph.asset_nodes}

    mine, theirs = declared(ours), declared(same)
    return [str(key) for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key)]


def _declared(node, assets_def) -> tuple:
    return (
        node.parent_keys,
        node.group_name,
        PENDING_NOTE.sub("", node.description),
        tuple(node.owners),
        node.kinds,
        {k: v for k, v in node.tags.items() if k != PENDING_TAG},
        node.code_version,
        {k: v for k, v in node.metadata.items() if k not in ADDED_METADATA},
        node.partitions_def,
        node.freshness_policy,
        sorted((check.key.name, check.description) for check in assets_def.check_specs),
        sorted(assets_def.op.config_schema.as_field().config_type.fields),
        assets_def.op.retry_policy,
        assets_def.op.pool,
        assets_def.required_resource_keys,
    )


def child(kind: str, root: Path) -> dict:
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))
    import dagster  # noqa: F401  (imports are not timed)

    if kind in ("plain", "plain_checked", "plain_same"):
        graph = json.loads((root / "graph.json").read_text(encoding="utf-8"))
        started, cpu = time.perf_counter(), time.process_time()
        _resolve(build_same(graph) if kind == "plain_same" else build_plain(graph, checked=kind == "plain_checked"))
        return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu}
    # Through the entry point Dagster calls, configured as a deployment would be.
    home = (
        root / "home" if kind in ("cached", "direct", "profile") else Path(tempfile.mkdtemp(prefix="cold-", dir=root))
    )
    os.environ.update(
        {
            "CUSTODY_HOME": str(home),
            "CUSTODY_SPECS": str(root / "specs"),
            "CUSTODY_TRANSFORM_PACKAGES": TRANSFORM_PACKAGE,
        }
    )
    from assets.definitions import defs, load_definitions
    from governance.config import Settings

    if kind == "agree":
        graph = json.loads((root / "graph.json").read_text(encoding="utf-8"))
        return {"disagreements": disagreements(defs(), build_same(graph))}

    if kind in ("cold", "cached", "direct"):
        started, cpu = time.perf_counter(), time.process_time()
        # direct: the same definitions without the defs folder and its component around them.
        _resolve(defs() if kind != "direct" else load_definitions(Settings.from_env(), root / "specs"))
        return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu}
    if kind == "profile":  # of a cached load
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        _resolve(defs())
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime")
        stats.print_stats(20)
        stats.sort_stats("cumulative").print_stats(40)
        return {"profile": out.getvalue()}
    raise SystemExit(f"unknown kind {kind}")


def measure(kind: str, root: Path) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(root)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- parent side ------------------------------------------------------------------------------------


def verdict(ratio: float) -> str:
    return f"{ratio:.2f} {'ok' if ratio <= GOAL_RATIO else 'MISSED'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="a cProfile of a cached load of the largest N")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return

    results: dict[int, dict[str, float]] = {}
    # Each repeat's ratio to the plain_same load measured next to it.
    spreads: dict[int, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="defs-load-") as tmp:
        for n in args.sizes:
            root = Path(tmp) / f"n{n}"
            graph = generate(root, n)
            landing = sum(1 for node in graph if not node["deps"])
            broken = with_one_broken(root, graph)
            runs: dict[str, list[dict]] = {
                "cold": [],
                "cached": [],
                "direct": [],
                "plain": [],
                "plain_checked": [],
                "plain_same": [],
                "broken": [],
            }
            differ = measure("agree", root)["disagreements"]
            if differ:
                raise SystemExit(f"plain_same declares {len(differ)} assets otherwise than Custody, e.g. {differ[:3]}")
            measure("cached", root)  # fills the cache
            measure("cached", broken)
            for _ in range(args.repeat):  # interleaved
                for kind, measured in runs.items():
                    measured.append(measure("cached", broken) if kind == "broken" else measure(kind, root))
            results[n] = {
                f"{kind} {what}": statistics.median(r[what] for r in measured)
                for kind, measured in runs.items()
                for what in ("seconds", "cpu")
            }
            spreads[n] = {
                kind: [mine["seconds"] / same["seconds"] for mine, same in zip(runs[kind], runs["plain_same"])]
                for kind in ("cold", "cached")
            }
            shown = {kind: " ".join(f"{r['seconds']:.3f}" for r in measured) for kind, measured in runs.items()}
            print(
                f"N={n:<5} ({landing} landing, {n - landing} integration)  "
                + "  ".join(f"{kind} {times}" for kind, times in shown.items()),
                flush=True,
            )
            if args.profile and n == max(args.sizes):
                print(measure("profile", root)["profile"])
            if n == DG_LIST_SIZE:
                results[n]["dg list"] = dg_list(root)

    print(
        f"\n{'N':>6}{'cold s':>9}{'cached s':>10}{'plain s':>9}{'checked s':>11}{'same s':>9}"
        f"{'cold/same':>13}{'cached/same':>13}{'cached/plain':>14}{'cached/checked':>16}"
        f"   (medians of {args.repeat}; goal: the same assets' ratio <= {GOAL_RATIO})"
    )
    for n, r in results.items():
        cold, cached = r["cold seconds"] / r["plain_same seconds"], r["cached seconds"] / r["plain_same seconds"]
        print(
            f"{n:>6}{r['cold seconds']:>9.3f}{r['cached seconds']:>10.3f}{r['plain seconds']:>9.3f}"
            f"{r['plain_checked seconds']:>11.3f}{r['plain_same seconds']:>9.3f}{verdict(cold):>13}{verdict(cached):>13}"
            f"{r['cached seconds'] / r['plain seconds']:>14.2f}{r['cached seconds'] / r['plain_checked seconds']:>16.2f}"
        )
    for n, r in results.items():
        cold, cached = r["cold cpu"] / r["plain_same cpu"], r["cached cpu"] / r["plain_same cpu"]
        print(
            f"N={n}: CPU time, medians: cold {r['cold cpu']:.3f} s, cached {r['cached cpu']:.3f} s, the same assets in "
            f"plain Dagster {r['plain_same cpu']:.3f} s: cold/same {verdict(cold)}, cached/same {verdict(cached)}"
        )
    for n, spread in spreads.items():
        print(
            f"N={n}: each repeat's ratio to plain_same: "
            + "; ".join(f"{kind} {', '.join(f'{ratio:.2f}' for ratio in ratios)}" for kind, ratios in spread.items())
        )
    for n, r in results.items():
        component = r["cached seconds"] / r["direct seconds"]
        print(f"N={n}: through the defs folder and its component {component:.2f}x the same definitions built directly")
    for n, r in results.items():
        print(
            f"N={n}: one broken spec, cached load {r['broken seconds']:.3f}s vs {r['cached seconds']:.3f}s all valid "
            f"({r['broken seconds'] / r['cached seconds']:.2f}x)"
        )
    if DG_LIST_SIZE in results:
        print(
            f"dg list defs --json on {DG_LIST_SIZE:,} specs (cached): {results[DG_LIST_SIZE]['dg list']:.2f} s end to end"
        )
    for larger, goal in ((3000, 3.5), (10_000, 11.0)):
        if 1000 in results and larger in results:
            for kind in ("cold", "cached"):
                growth = results[larger][f"{kind} seconds"] / results[1000][f"{kind} seconds"]
                met = "met" if growth <= goal else "MISSED"
                print(f"{kind} t({larger})/t(1000): {growth:.2f}  goal <= {goal}  ({met})")
            reference = ", ".join(
                f"{kind} {results[larger][f'{kind} seconds'] / results[1000][f'{kind} seconds']:.2f}"
                for kind in ("plain", "plain_same")
            )
            print(f"  plain Dagster's own t({larger})/t(1000), for reference: {reference}")
            cpu = ", ".join(
                f"{kind} {results[larger][f'{kind} cpu'] / results[1000][f'{kind} cpu']:.2f}"
                for kind in ("cold", "cached", "plain_same")
            )
            print(f"  in CPU time: {cpu}")


if __name__ == "__main__":
    main()
