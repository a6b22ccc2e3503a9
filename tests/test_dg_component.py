"""Custody's specs as a Dagster Component: Dagster's own `dg` command line lists the assets the
project's `defs/` folder declares, and checks them, with Custody's messages for a broken spec; a
domain's folder scaffolded beside the others is an instance of its own, which may translate its
assets' groups and tags but nothing the spec governs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from governance.catalog import Catalog
from governance.config import Settings
from tests.conftest import DEMO_SPECS, ROOT, plain_environ, without_approval
from tests.dagster_servers import dg_dev
from tests.helpers import recorded

DG = Path(sys.executable).with_name("dg")


def environ_of(*settings: dict[str, str]) -> dict[str, str]:
    """This process's environment without its Custody and Dagster settings, with `settings` (later ones win)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))}
    return {k: v for found in (kept, *settings) for k, v in found.items()}


def run(command: list[str], environ: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=300, check=False)


def dg(home: Path, specs: Path, *args: str, project: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`dg ARGS` in the project (or a copy of it, whose modules it then imports), on `home` and the
    specs in `specs`, as a user runs it."""
    modules = {"PYTHONPATH": str(project)} if project != ROOT else {}
    return run([str(DG), *args], environ_of(plain_environ(home), {"CUSTODY_SPECS": str(specs)}, modules), cwd=project)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's pyproject.toml and assets package, whose defs folder a test changes."""
    copy = tmp_path / "project"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy)
    shutil.copytree(ROOT / "assets", copy / "assets", ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEMO_SPECS, tmp_path / "specs"))


@pytest.fixture
def broken_specs(tmp_path: Path) -> Path:
    """The demo's specs, with sales/products' zone misspelt."""
    specs = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    products = specs / "sales" / "products.yaml"
    products.write_text(products.read_text().replace("zone: landing", "zone: lnding"))
    return specs


def listed(home: Path, specs: Path, project: Path = ROOT) -> dict:
    found = dg(home, specs, "list", "defs", "--json", project=project)
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)


def said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())


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


def test_a_scaffolded_domain_folder_loads_beside_the_first_with_an_example_spec(tmp_path, project, specs):
    scaffolded = dg(
        tmp_path / "home", specs, "scaffold", "defs", "assets.component.CustodySpecs", "retail", project=project
    )
    assert scaffolded.returncode == 0, scaffolded.stderr

    declared = yaml.safe_load((project / "assets" / "defs" / "retail" / "defs.yaml").read_text())
    assert declared == {"type": "assets.component.CustodySpecs", "attributes": {"domains": ["retail"]}}
    assert (specs / "retail" / "example.yaml").is_file()
    found = listed(tmp_path / "home", specs, project)
    assert sorted(asset["asset_key"] for asset in found["assets"]) == [
        "retail/example",
        "sales/clients",
        "sales/names_and_products",
        "sales/product_summary",
        "sales/products",
    ]
    assert sorted(resource["name"] for resource in found["resources"]) == ["custody", "spark"]
    assert sorted(sensor["name"] for sensor in found["sensors"]) == ["custody_dropzone"]
    assert dg(tmp_path / "home", specs, "check", "defs", project=project).returncode == 0


def declare(project: Path, folder: str, attributes: str) -> None:
    """An instance of the component in `folder` of the project's defs folder."""
    (project / "assets" / "defs" / folder).mkdir(exist_ok=True)
    (project / "assets" / "defs" / folder / "defs.yaml").write_text(
        f"type: assets.component.CustodySpecs\nattributes:\n{attributes}", encoding="utf-8"
    )


def test_a_translation_names_groups_and_tags_from_each_asset_s_domain_name_and_zone(tmp_path, project, specs):
    declare(
        project,
        "specs",
        '  translation:\n    group_name: "{{ domain }}_team"\n    tags: {shelf: "{{ zone }}-{{ name }}"}\n',
    )

    found = {asset["asset_key"]: asset for asset in listed(tmp_path / "home", specs, project)["assets"]}

    assert found["sales/products"]["group_name"] == "sales_team"
    assert {"key": "shelf", "value": "landing-products"} in found["sales/products"]["tags"]
    assert {"key": "custody/zone", "value": "landing"} in found["sales/products"]["tags"]
    assert found["sales/products"]["owners"] == [{"team": "sales-owners"}]


@pytest.mark.parametrize(
    ("translation", "changed"),
    [
        ('    owners: ["team:everyone"]\n', "owners"),
        ('    key: "{{ name }}"\n', "key"),
        ("    tags: {custody/classification: public}\n", "tags.custody/classification"),
    ],
)
def test_a_translation_of_what_the_spec_governs_is_refused_naming_its_defs_yaml(
    tmp_path, project, specs, translation, changed
):
    declare(project, "specs", f"  translation:\n{translation}")

    checked = dg(tmp_path / "home", specs, "check", "defs", project=project)

    assert checked.returncode != 0
    assert f"{project / 'assets' / 'defs' / 'specs' / 'defs.yaml'}: translation: changes {changed} of sales/" in said(
        checked
    )
    assert "which its spec governs" in said(checked)


def test_a_domain_two_instances_show_is_refused_naming_both(tmp_path, project, specs):
    declare(project, "retail", "  domains: [sales]\n")
    declare(project, "shop", "  domains: [sales]\n")

    checked = dg(tmp_path / "home", specs, "check", "defs", project=project)

    defs = project / "assets" / "defs"
    assert checked.returncode != 0
    assert f"{defs / 'shop' / 'defs.yaml'}: domains: sales is shown by {defs / 'retail' / 'defs.yaml'} too" in said(
        checked
    )


def test_a_domain_no_instance_shows_is_refused(tmp_path, project, specs):
    declare(project, "specs", "  domains: [sales]\n")
    shutil.copytree(specs / "sales", specs / "retail")

    checked = dg(tmp_path / "home", specs, "check", "defs", project=project)

    assert checked.returncode != 0
    assert "the specs of domain retail" in said(checked) and "are shown by no instance" in said(checked)


def test_both_folders_show_in_the_ui(tmp_path, project, specs):
    assert (
        dg(
            tmp_path / "home", specs, "scaffold", "defs", "assets.component.CustodySpecs", "retail", project=project
        ).returncode
        == 0
    )
    declare(project, "retail", '  domains: [retail]\n  translation: {group_name: "retail_team"}\n')
    settings = without_approval(Settings.under(tmp_path / "home", specs=specs))
    env = {**plain_environ(settings.home), "CUSTODY_SPECS": str(specs)}

    with dg_dev(settings, env, tmp_path / "dg-dev.log", project) as (_, port):
        answer = requests.post(f"http://127.0.0.1:{port}/graphql", json={"query": GROUPS}, timeout=60).json()

    groups = {"/".join(node["assetKey"]["path"]): node["groupName"] for node in answer["data"]["assetNodes"]}
    assert groups == {
        "retail/example": "retail_team",
        "sales/clients": "sales",
        "sales/names_and_products": "sales",
        "sales/product_summary": "sales",
        "sales/products": "sales",
    }


GROUPS = "{ assetNodes { assetKey { path } groupName } }"
