"""Custody's specs as a Dagster Component: Dagster's own `dg` command line lists the assets the
project's `defs/` folder declares, and checks them, with Custody's messages for a broken spec."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from governance.catalog import Catalog
from governance.config import Settings
from tests.conftest import DEMO_SPECS, ROOT, plain_environ
from tests.helpers import recorded

DG = Path(sys.executable).with_name("dg")


def environ_of(*settings: dict[str, str]) -> dict[str, str]:
    """This process's environment without its Custody and Dagster settings, with `settings` (later ones win)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))}
    return {k: v for found in (kept, *settings) for k, v in found.items()}


def run(command: list[str], environ: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=300, check=False)


def dg(home: Path, specs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`dg ARGS` in the project, on `home` and the specs in `specs`, as a user runs it."""
    return run([str(DG), *args], environ_of(plain_environ(home), {"CUSTODY_SPECS": str(specs)}))


@pytest.fixture
def broken_specs(tmp_path: Path) -> Path:
    """The demo's specs, with sales/products' zone misspelt."""
    specs = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    products = specs / "sales" / "products.yaml"
    products.write_text(products.read_text().replace("zone: landing", "zone: lnding"))
    return specs


def listed(home: Path, specs: Path) -> dict:
    found = dg(home, specs, "list", "defs", "--json")
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)


def test_dg_lists_the_demo_s_assets_with_their_owners_kinds_and_checks(tmp_path):
    found = listed(tmp_path / "home", DEMO_SPECS)

    assets = {asset["asset_key"]: asset for asset in found["assets"]}
    assert sorted(assets) == ["sales/clients", "sales/names_and_products", "sales/product_summary", "sales/products"]
    assert assets["sales/clients"]["owners"] == [{"team": "sales-owners"}]
    assert set(assets["sales/clients"]["kinds"]) == {"spark", "parquet"}
    assert {"key": "custody/zone", "value": "landing"} in assets["sales/clients"]["tags"]
    checked = {check["asset_key"] for check in found["asset_checks"]}
    assert checked == set(assets)
    # Each asset's code is its own spec file, not the defs.yaml that loads the folder.
    assert assets["sales/clients"]["source"] == "assets/specs/sales/clients.yaml:1"


def test_the_resources_show_as_their_classes(tmp_path):
    found = listed(tmp_path / "home", DEMO_SPECS)

    assert {resource["name"]: resource["type"] for resource in found["resources"]} == {
        "custody": "resources.custody.CustodyResource",
        "spark": "resources.spark.SparkResource",
    }


def test_dg_check_passes_on_the_demo(tmp_path):
    checked = dg(tmp_path / "home", DEMO_SPECS, "check", "defs")

    assert checked.returncode == 0, checked.stderr


def test_dg_check_fails_on_a_broken_spec_naming_its_file_line_and_field(tmp_path, broken_specs):
    checked = dg(tmp_path / "home", broken_specs, "check", "defs")

    assert checked.returncode != 0
    assert (
        f"{broken_specs / 'sales' / 'products.yaml'}:7: zone: must be 'landing' or 'integration'"
        in checked.stdout + checked.stderr
    )


def test_dg_check_shows_a_spec_s_typo_in_a_few_lines_with_its_line_of_the_spec(tmp_path):
    specs = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    summary = specs / "sales" / "product_summary.yaml"
    summary.write_text(summary.read_text().replace("zone: integration", "zone: integraton"))

    checked = dg(tmp_path / "home", specs, "check", "defs")

    said = [line for line in (checked.stdout + checked.stderr).splitlines() if "Warning" not in line]
    where = said.index(f"{summary}:7: zone: must be 'landing' or 'integration', found 'integraton'")
    assert where < 10
    assert said[where + 1 : where + 4] == [
        "    |",
        "  7 | zone: integraton",
        "    | ^ must be 'landing' or 'integration', found 'integraton'",
    ]
    assert "The above exception" not in checked.stdout + checked.stderr


def test_a_broken_spec_still_lets_the_other_assets_load(tmp_path, broken_specs):
    found = listed(tmp_path / "home", broken_specs)

    runnable = {asset["asset_key"]: asset["is_executable"] for asset in found["assets"]}
    assert runnable["sales/clients"] is True
    assert runnable["sales/products"] is False


def test_dg_check_yaml_refuses_an_attribute_the_component_does_not_have(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(ROOT / "assets" / "defs", project / "assets" / "defs")
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    (project / "assets" / "defs" / "specs" / "defs.yaml").write_text(
        "type: assets.component.CustodySpecs\nattributes:\n  spec_folder: elsewhere\n"
    )
    checked = run([str(DG), "check", "yaml"], environ_of(), cwd=project)

    assert checked.returncode != 0
    assert "spec_folder" in checked.stdout + checked.stderr


def test_dg_launch_names_no_user_so_its_materialization_is_refused_and_recorded(tmp_path):
    home = tmp_path / "home"
    (home / "dagster").mkdir(parents=True)
    environ = environ_of(plain_environ(home), {"DAGSTER_HOME": str(home / "dagster")})

    launched = run([str(DG), "launch", "--assets", "sales/products"], environ)

    assert launched.returncode != 0
    assert "the request names no user" in launched.stdout + launched.stderr
    [entry] = recorded(Catalog.from_url(Settings.under(home).catalog_url), action="ingest")
    assert (entry["actor"], entry["details"]["result"]) == ("anonymous", "denied")


LOADS_TWICE = """
import gc, os, sys
from assets.definitions import defs
from governance.errors import SpecError

threshold = gc.get_threshold()
built = defs()
asset = next(iter(built.assets))
walked = {id(found) for found in gc.get_objects()}
os.environ.update(CUSTODY_SPECS=sys.argv[1], DAGSTER_IS_DEFS_VALIDATION_CLI="1")
try:
    defs()
    refused = False
except SpecError:
    refused = True
print(id(asset) in walked, gc.get_threshold() == threshold, refused)
"""


def test_the_code_location_freezes_what_it_built_and_leaves_the_collector_as_it_was(tmp_path, broken_specs):
    # Frozen, the definitions are not walked by the collector while Dagster resolves them, for the
    # life of the process that keeps them; a load that fails leaves the collector's thresholds too.
    environ = environ_of(plain_environ(tmp_path / "home"))

    loaded = run([sys.executable, "-c", LOADS_TWICE, str(broken_specs)], environ)

    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["False", "True", "True"]
