"""Spec validation: every problem at once, each with its file, field and line."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from assets.definitions import build_definitions
from governance.cli import run
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.errors import InvalidInput, SpecError
from governance.spec import check_specs, load_specs
from governance.zones import AssetKey
from tests.conftest import DATA, DEMO_SPECS
from tests.helpers import alias_bomb

BAD = DATA / "bad_specs"
ALLOWED = DEFAULT_TRANSFORM_PACKAGES
WITH_TESTS = (*DEFAULT_TRANSFORM_PACKAGES, "tests.transforms")
LANDING = "description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: landing\nsource: {format: json}\n"


def test_demo_specs_load_in_dependency_order():
    order = [str(key) for key in load_specs(DEMO_SPECS, transform_packages=ALLOWED).specs]
    assert order.index("sales/clients") < order.index("sales/names_and_products") < order.index("sales/product_summary")
    assert order.index("sales/products") < order.index("sales/names_and_products")


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unknown_key", "a.yaml:5: colour: unknown key"),
        ("missing_role", "a.yaml:2: roles.consumer: missing required field"),
        ("invalid_role", "a.yaml:4: roles.producer: String should match pattern"),
        ("bad_column_type", "a.yaml:7: columns.1: unknown column type 'datetime'"),
        ("duplicate_key", "a.yaml:5: zone: duplicate key"),
        ("unknown_input", "inputs.0: unknown input 'd/nowhere': no spec declares it"),
        ("cycle", "inputs: dependency cycle among d/a, d/b"),
        ("transform_missing", "transform: transform module 'assets.transforms.no_such_module' cannot be imported"),
        ("invalid_name", "invalid asset name 'Bad-Name'"),
        ("long_name", "invalid asset name 'axxxxxxx"),
    ],
)
def test_each_kind_of_spec_error_is_named_with_file_field_and_line(case, expected):
    problems = [str(p) for p in check_specs(BAD / case, transform_packages=WITH_TESTS)]
    assert any(expected in p for p in problems), problems


def test_every_problem_is_reported_at_once():
    problems = check_specs(BAD / "many", transform_packages=ALLOWED)
    assert {p.file.rsplit("/", 2)[-2] + "/" + p.file.rsplit("/", 1)[-1] for p in problems} == {"d/a.yaml", "d/b.yaml", "e/c.yaml"}


def test_loading_a_bad_folder_raises_one_error_listing_them_all():
    with pytest.raises(SpecError) as raised:
        load_specs(BAD / "many", transform_packages=ALLOWED)
    assert str(raised.value).startswith("3 problems in asset specs")


def test_the_code_location_refuses_to_load_with_the_same_message():
    with pytest.raises(SpecError) as raised:
        build_definitions(BAD / "many", transform_packages=ALLOWED)
    assert str(raised.value) == str(SpecError(check_specs(BAD / "many", transform_packages=ALLOWED)))


def test_a_transform_without_a_parameter_per_input_is_refused(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "src.yaml").write_text("description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: landing\nsource: {format: json}\n")
    (folder / "a.yaml").write_text(
        "description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: integration\n"
        "inputs: [d/src]\ntransform: assets.transforms.sales:product_summary\n"
    )
    assert [p.message for p in check_specs(tmp_path, transform_packages=ALLOWED)] == ["transform takes no parameter for input(s) src"]


def test_spec_hash_changes_with_content_only(tmp_path):
    spec = load_specs(DEMO_SPECS, transform_packages=ALLOWED)[AssetKey("sales", "clients")]
    copy = tmp_path / "sales"
    copy.mkdir()
    (copy / "clients.yaml").write_text("# a comment\n" + spec.file.read_text())
    assert load_specs(tmp_path, transform_packages=ALLOWED)[spec.key].hash == spec.hash


def integration_spec(root: Path, transform: str) -> Path:
    """A landing spec d/src and an integration spec d/a reading it, `transform:` on line 5."""
    folder = root / "d"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "src.yaml").write_text(LANDING)
    spec = folder / "a.yaml"
    spec.write_text(
        "description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: integration\n"
        f"inputs: [d/src]\ntransform: {transform}\n"
    )
    return spec


@pytest.mark.parametrize(
    "module",
    ["this", "subprocess", "assets", "assets.transformsx", "assets.transforms..sales", "assets.transforms."],
)
def test_a_transform_outside_the_allowed_packages_is_refused_naming_them(tmp_path, module):
    spec = integration_spec(tmp_path, f"{module}:run")
    [problem] = check_specs(tmp_path, transform_packages=ALLOWED)
    assert str(problem) == (f"{spec}:5: transform: transform module {module!r} is outside the allowed "
                            "transform packages (assets.transforms); CUSTODY_TRANSFORM_PACKAGES names them")


def test_checking_a_spec_never_imports_a_module_outside_the_allowed_packages(tmp_path, monkeypatch):
    modules = tmp_path / "modules"
    modules.mkdir()
    imported = tmp_path / "imported"
    (modules / "planted.py").write_text(f"open({str(imported)!r}, 'w').close()\ndef run(spark, src): ...\n")
    monkeypatch.syspath_prepend(str(modules))
    integration_spec(tmp_path / "specs", "planted:run")
    assert [p.field for p in check_specs(tmp_path / "specs", transform_packages=ALLOWED)] == ["transform"]
    assert not imported.exists() and "planted" not in sys.modules


def test_a_transform_in_a_package_the_deployment_allows_is_accepted(tmp_path):
    integration_spec(tmp_path, "tests.transforms:passthrough")
    assert check_specs(tmp_path, transform_packages=WITH_TESTS) == []
    assert [p.field for p in check_specs(tmp_path, transform_packages=ALLOWED)] == ["transform"]


def test_the_allowed_transform_packages_come_from_the_environment():
    assert Settings.from_env({}).transform_packages == ("assets.transforms",)
    allowed = Settings.from_env({"CUSTODY_TRANSFORM_PACKAGES": "assets.transforms, acme.transforms"})
    assert allowed.transform_packages == ("assets.transforms", "acme.transforms")


@pytest.mark.parametrize("value", [",", "acme..transforms", ".acme", "acme transforms", "acme.transforms:fn"])
def test_a_malformed_transform_packages_setting_is_refused(value):
    with pytest.raises(InvalidInput, match=re.escape(f"CUSTODY_TRANSFORM_PACKAGES={value!r}: expected package names")):
        Settings.from_env({"CUSTODY_TRANSFORM_PACKAGES": value})


def test_specs_check_allows_the_packages_the_setting_names(tmp_path, monkeypatch, capsys):
    integration_spec(tmp_path / "specs", "tests.transforms:passthrough")
    monkeypatch.setenv("CUSTODY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CUSTODY_TRANSFORM_PACKAGES", raising=False)
    assert run(["specs", "check", str(tmp_path / "specs")]) == 1
    assert "outside the allowed transform packages (assets.transforms)" in capsys.readouterr().err
    monkeypatch.setenv("CUSTODY_TRANSFORM_PACKAGES", "assets.transforms,tests.transforms")
    assert run(["specs", "check", str(tmp_path / "specs")]) == 0


def test_a_spec_with_yaml_aliases_is_refused_at_the_first_alias_without_expanding_them(tmp_path):
    (tmp_path / "d").mkdir()
    spec = tmp_path / "d" / "a.yaml"
    spec.write_text(LANDING + alias_bomb("tags"))
    started = time.perf_counter()
    problems = [str(p) for p in check_specs(tmp_path, transform_packages=ALLOWED)]
    assert time.perf_counter() - started < 5  # the bomb took over 100 s to expand
    assert problems == [f"{spec}:7: YAML aliases (*name) are not accepted: write the value out"]


def test_a_spec_nested_too_deep_is_refused_without_composing_it(tmp_path):
    (tmp_path / "d").mkdir()
    spec = tmp_path / "d" / "a.yaml"
    spec.write_text(LANDING + "columns: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert [str(p) for p in check_specs(tmp_path, transform_packages=ALLOWED)] == [
        f"{spec}:5: YAML nested more than 100 levels deep"
    ]


@pytest.mark.parametrize(
    "nesting",
    ["".join(f"{'  ' * level}a:\n" for level in range(150)) + "  " * 150 + "b\n",
     "- " * 150 + "x\n"],
    ids=["by indentation", "on one line"],
)
def test_block_nesting_too_deep_is_refused_too(tmp_path, nesting):
    (tmp_path / "d").mkdir()
    spec = tmp_path / "d" / "a.yaml"
    spec.write_text(LANDING + "tags:\n" + "".join(f"  {line}\n" for line in nesting.splitlines()))
    problems = [str(p) for p in check_specs(tmp_path, transform_packages=ALLOWED)]
    assert len(problems) == 1 and "YAML nested more than 100 levels deep" in problems[0]


def test_a_spec_file_over_256_kb_is_refused_with_the_limit_and_its_size(tmp_path):
    (tmp_path / "d").mkdir()
    spec = tmp_path / "d" / "a.yaml"
    spec.write_text(LANDING.replace("description: x", "description: " + "x" * 300_000))
    size = spec.stat().st_size
    assert [str(p) for p in check_specs(tmp_path, transform_packages=ALLOWED)] == [
        f"{spec}: {size:,} bytes, more than the 262,144 bytes (256 KB) a spec file may hold"
    ]
