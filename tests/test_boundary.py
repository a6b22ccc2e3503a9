"""The core never imports dagster: Dagster code is thin glue around it."""

from __future__ import annotations

import ast
import subprocess
import sys

from governance.catalog import Catalog
from governance.config import Settings
from tests.conftest import ROOT


def imports_of_governance(top: str) -> list[str]:
    """Each import in the core of a module of the package `top`, as `file: module`."""
    offenders = []
    for path in (ROOT / "governance").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0].startswith(top)]
    return offenders


def test_no_module_of_governance_imports_dagster():
    assert imports_of_governance("dagster") == []


def test_no_module_of_governance_imports_the_dagster_glue():
    assert imports_of_governance("assets") == []


def test_the_cli_finds_the_dagster_glue_as_the_installed_orchestrator():
    from assets.orchestrator import DagsterOrchestrator
    from governance.orchestration import orchestrator

    assert isinstance(orchestrator(), DagsterOrchestrator)


def test_importing_every_core_module_loads_no_dagster():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "governance").rglob("*.py")
    )
    code = f"for m in {modules!r}: __import__(m)\nprint(sorted(m for m in sys.modules if m.startswith('dagster')))"
    assert printed_by(code) == "[]"


def test_loading_the_code_location_leaves_ingestion_and_the_catalog_to_the_runs():
    code = (
        "import assets.definitions\n"
        "print(sorted(m for m in ('governance.ingest', 'governance.integrate', 'governance.catalog', 'sqlmodel')"
        " if m in sys.modules))"
    )
    assert printed_by(code) == "[]"


def test_checking_the_demo_specs_transforms_loads_no_dagster():
    code = (
        f"from governance.spec import load_specs\nload_specs({str(ROOT / 'assets' / 'specs')!r}, "
        "transform_packages=('assets.transforms',))\n"
        "print(sorted(m for m in ('assets.transforms.sales', 'dagster') if m in sys.modules))"
    )
    assert printed_by(code) == "['assets.transforms.sales']"


def test_custody_in_process_opens_its_catalog_without_spark_arrow_or_numpy(tmp_path):
    Catalog.from_url(Settings.under(tmp_path / "home").catalog_url)  # made and migrated once, as by its first command
    code = (
        "from pathlib import Path\nfrom governance.api import Custody\nfrom governance.config import Settings\n"
        "from governance.zones import AssetKey\n"
        f"custody = Custody(Settings.under(Path({str(tmp_path / 'home')!r})))\n"
        "assert custody.store.version_count(AssetKey.parse('sales/clients')) == 0\n"
        "print(sorted(m for m in ('pyspark', 'pyarrow', 'numpy') if m in sys.modules))"
    )
    assert printed_by(code) == "[]"


def test_the_cli_s_help_loads_no_database_spec_or_spark_library():
    code = (
        "from governance.cli import run\nrun(['--help'])\n"
        "heavy = ('sqlalchemy', 'sqlmodel', 'pydantic', 'yaml', 'pyarrow', 'pyspark', 'dagster', 'networkx', 'requests')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    assert printed_by(code).splitlines()[-1] == "[]"


def test_a_command_loads_its_libraries_with_the_collector_paused_and_freezes_only_what_they_built():
    code = (
        "import gc\nfrom governance.command import collector_paused\n"
        "before = gc.get_freeze_count()\n"
        "with collector_paused():\n    paused = not gc.isenabled()\n"
        "nothing_loaded = gc.get_freeze_count() == before\n"
        "with collector_paused():\n    import sqlalchemy\n"
        "loaded = gc.get_freeze_count() > before\n"
        "gc.disable()\nwith collector_paused():\n    import sqlmodel\n"
        "print(paused, nothing_loaded, loaded, gc.isenabled())"
    )
    assert printed_by(code).splitlines()[-1] == "True True True False"


def printed_by(code: str) -> str:
    """What `code` prints, run in a fresh interpreter with `sys` imported."""
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}"], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return out.stdout.strip()
