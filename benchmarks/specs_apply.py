#!/usr/bin/env python
"""`custody specs diff` and `custody specs apply` on N specs, K of them edited.

Generates N specs as benchmarks/definitions_load.py does, in a fresh CUSTODY_HOME with a file
directory whose user `owner` owns them all; applies them all once (the first application, timed
too); then edits K (half a description, half a column's type) and times, each as the command a
person runs (a fresh process, imports included): `specs diff`, then `specs apply`, then `specs diff`
again (nothing left). Checks that the diff named the K assets, that K applications were recorded,
and prints the medians of --repeat rounds (each round edits K other specs).

    .venv/bin/python benchmarks/specs_apply.py
    .venv/bin/python benchmarks/specs_apply.py --specs 100 --edited 4 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.definitions_load import TRANSFORM_PACKAGE, generate
from governance.runs import os_user

CUSTODY = ROOT / ".venv" / "bin" / "custody"
DIRECTORY = "users: {owner: {}}\ngroups: {o: [owner], p: [owner], c: [owner]}\n"


def custody(env: dict[str, str], *args: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([str(CUSTODY), *args], env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"custody {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


def edit(specs: Path, graph: list[dict], picked: list[int], round_number: int) -> list[str]:
    """Half the picked specs get a new description, half a column of a new type (landing) or a new tag."""
    edited = []
    for n, i in enumerate(picked):
        domain, name = graph[i]["key"]
        path = specs / domain / f"{name}.yaml"
        text = path.read_text(encoding="utf-8")
        if n % 2 == 0:
            text = text.replace("description: ", f"description: (edit {round_number}) ", 1)
        elif "columns:" in text:
            text = text.replace("columns:\n", f"columns:\n  - {{name: added_{round_number}, type: string}}\n", 1)
        else:
            text += f"tags: {{edited: round{round_number}}}\n"
        path.write_text(text, encoding="utf-8")
        edited.append(f"{domain}/{name}")
    return edited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specs", type=int, default=1000)
    parser.add_argument("--edited", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specs-apply-") as tmp:
        root = Path(tmp)
        graph = generate(root, args.specs)
        (root / "directory.yaml").write_text(DIRECTORY, encoding="utf-8")
        env = {
            **os.environ,
            "CUSTODY_HOME": str(root / "home"),
            "CUSTODY_SPECS": str(root / "specs"),
            "CUSTODY_DIRECTORY": f"file:{root / 'directory.yaml'}",
            "CUSTODY_TRANSFORM_PACKAGES": TRANSFORM_PACKAGE,
            "CUSTODY_SPECS_APPROVAL": "on",
            "CUSTODY_OS_USERS": f"{os_user()}=owner",  # whoever runs the benchmark applies as the owner
            "PYTHONPATH": str(ROOT),
        }  # the transforms live in benchmarks/
        first, out = custody(env, "specs", "apply", "--as", "owner", "--json")
        print(f"first apply of {args.specs} new specs: {first:.2f}s ({len(json.loads(out))} applied)", flush=True)
        times: dict[str, list[float]] = {"diff": [], "apply": [], "diff after": []}
        for r in range(args.repeat):
            picked = list(range(r * args.edited, (r + 1) * args.edited))
            edited = edit(root / "specs", graph, picked, r)
            seconds, out = custody(env, "specs", "diff", "--json")
            named = sorted(e["asset"] for e in json.loads(out))
            if named != sorted(edited):
                raise SystemExit(f"diff named {named}, expected {sorted(edited)}")
            times["diff"].append(seconds)
            seconds, out = custody(env, "specs", "apply", "--as", "owner", "--json")
            if len(json.loads(out)) != args.edited:
                raise SystemExit(f"apply applied {len(json.loads(out))}, expected {args.edited}")
            times["apply"].append(seconds)
            seconds, out = custody(env, "specs", "diff", "--json")
            if json.loads(out):
                raise SystemExit("specs left to apply after apply")
            times["diff after"].append(seconds)
            print(f"round {r + 1}: " + "  ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
        _, out = custody(env, "ledger", "show", "--action", "spec.applied", "--json", "--limit", "100000")
        applications = len(json.loads(out))
    expected = args.specs + args.edited * args.repeat
    print(
        f"\n{args.specs} specs, {args.edited} edited per round, {args.repeat} rounds (each a fresh `custody` process)"
    )
    for kind, values in times.items():
        print(
            f"  specs {kind:<11} median {statistics.median(values):.2f}s  (min {min(values):.2f}, max {max(values):.2f})"
        )
    print(f"spec.applied ledger entries: {applications} (expected {expected})")
    if applications != expected:
        raise SystemExit("the ledger does not hold one entry per application")


if __name__ == "__main__":
    main()
