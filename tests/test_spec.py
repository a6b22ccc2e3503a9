"""Spec validation: every problem at once, each with its file, field and line."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.definitions import build_definitions
from governance import yamlsource
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
ROLES = "{owner: o, producer: p, consumer: c}"
DEMO_ROLES = "{owner: sales-owners, producer: sales-producers, consumer: sales-consumers}"
LANDING = f"description: x\nroles: {ROLES}\nzone: landing\nsource: {{format: json}}\n"


def test_demo_specs_load_in_dependency_order():
    order = [str(key) for key in load_specs(DEMO_SPECS, transform_packages=ALLOWED).specs]
    assert order.index("sales/clients") < order.index("sales/names_and_products") < order.index("sales/product_summary")
    assert order.index("sales/products") < order.index("sales/names_and_products")


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unknown_key", "a.yaml:5: colour: unknown key"),
        ("missing_role", "a.yaml:2: roles.consumer: missing required field"),
        (
            "invalid_role",
            (
                "a.yaml:4: roles.producer: must be a group name: lowercase letters, digits, _ and -, "
                "starting with a letter, at most 64 characters, found '*)(uid=*'"
            ),
        ),
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
    assert {p.file.rsplit("/", 2)[-2] + "/" + p.file.rsplit("/", 1)[-1] for p in problems} == {
        "d/a.yaml",
        "d/b.yaml",
        "e/c.yaml",
    }


def test_loading_a_bad_folder_raises_one_error_listing_them_all():
    with pytest.raises(SpecError) as raised:
        load_specs(BAD / "many", transform_packages=ALLOWED)
    assert str(raised.value).startswith("3 problems in asset specs")


def test_the_code_location_shows_each_broken_spec_with_the_same_messages():
    graph = build_definitions(BAD / "many", transform_packages=ALLOWED).resolve_asset_graph()
    for problem in check_specs(BAD / "many", transform_packages=ALLOWED):
        domain, file = Path(problem.file).parts[-2:]
        node = graph.get(dg.AssetKey([domain, Path(file).stem]))
        assert not node.is_materializable
        assert f"`{problem}`" in node.description


BASE = {
    "description": "x",
    "roles": {"owner": "o", "producer": "p", "consumer": "c"},
    "zone": "landing",
    "source": {"format": "csv"},
    "columns": [{"name": "x", "type": "string"}],
}
GROUP_RULE = "a group name: lowercase letters, digits, _ and -, starting with a letter, at most 64 characters"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "roles",
            {"owner": "o", "producer": "p", "consumer": ["a", "b"]},
            "roles.consumer: must be one group name, found a list",
        ),
        ("roles", ["o"], "roles: must be a mapping of fields, found a list"),
        (
            "roles",
            {"owner": "Sales Owners", "producer": "p", "consumer": "c"},
            f"roles.owner: must be {GROUP_RULE}, found 'Sales Owners'",
        ),
        ("zone", "lake", "zone: must be 'landing' or 'integration', found 'lake'"),
        (
            "classification",
            "secret",
            "classification: must be 'public', 'internal', 'confidential' or 'restricted', found 'secret'",
        ),
        ("pii", "maybe", "pii: must be true or false, found 'maybe'"),
        ("max_bad_fraction", 2, "max_bad_fraction: must be at most 1.0, found 2"),
        ("max_bad_fraction", "lots", "max_bad_fraction: must be a number, found 'lots'"),
        ("max_concurrent_runs", 0, "max_concurrent_runs: must be at least 1, found 0"),
        ("max_concurrent_runs", "two", "max_concurrent_runs: must be a whole number, found 'two'"),
        ("description", "", "description: must not be empty"),
        (
            "tags",
            {"Bad Key": "x"},
            "tags.Bad Key: must be a tag name: lowercase letters, digits, _, . and -, starting with a letter",
        ),
        ("columns", "x", "columns: must be a list, found 'x'"),
        ("columns", [{"name": "1x", "type": "string"}], "columns.0.name: must be a column name: letters, digits and _"),
        ("columns", [{"name": "x", "type": "varchar"}], "columns.0: unknown column type 'varchar'"),
        (
            "columns",
            [{"name": "x", "type": "decimal(50,2)"}],
            "columns.0: decimal precision over 38 in 'decimal(50,2)': Spark, Parquet and Iceberg keep at most 38 digits",
        ),
        (
            "columns",
            [{"name": "x", "type": "string", "nullable": "sometimes"}],
            "columns.0.nullable: must be true or false, found 'sometimes'",
        ),
        (
            "source",
            {"format": "xml"},
            "source.format: must be 'csv', 'json', 'parquet', 'raw', 'jdbc' or 'kafka', found 'xml'",
        ),
        ("source", {"format": "csv", "delimiter": ";;"}, "source.delimiter: must have at most 1 character, found ';;'"),
        ("retention", {"keep_versions": 0}, "retention.keep_versions: must be at least 1, found 0"),
        ("bad_rows", "drop", "bad_rows: must be 'quarantine' or 'fail', found 'drop'"),
        ("inputs", ["Sales"], "inputs.0: must be an asset as DOMAIN/NAME, such as sales/clients, found 'Sales'"),
        ("transform", "os.system", "transform: must be a function as module:function"),
        ("colour", "blue", "colour: unknown key"),
    ],
)
def test_each_validation_error_is_in_the_owners_words(tmp_path, field, value, expected):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.yaml").write_text(yaml.safe_dump({**BASE, field: value}), encoding="utf-8")
    problems = [str(p) for p in check_specs(tmp_path, transform_packages=ALLOWED)]
    assert any(expected in p for p in problems), problems
    assert not any("Input should" in p or "String should" in p for p in problems)


def test_a_transform_without_a_parameter_per_input_is_refused(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "src.yaml").write_text(
        "description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: landing\nsource: {format: json}\n"
    )
    (folder / "a.yaml").write_text(
        "description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: integration\n"
        "inputs: [d/src]\ntransform: assets.transforms.sales:product_summary\n"
    )
    assert [p.message for p in check_specs(tmp_path, transform_packages=ALLOWED)] == [
        "transform takes no parameter for input(s) src"
    ]


def test_spec_hash_changes_with_content_only(tmp_path):
    spec = load_specs(DEMO_SPECS, transform_packages=ALLOWED)[AssetKey("sales", "clients")]
    copy = tmp_path / "sales"
    copy.mkdir()
    (copy / "clients.yaml").write_text("# a comment\n" + spec.file.read_text())
    assert load_specs(tmp_path, transform_packages=ALLOWED)[spec.key].hash == spec.hash


def integration_spec(root: Path, transform: str) -> Path:
    """A landing spec d/src and an integration spec d/a reading it, `transform:` on line 5, their
    roles the demo directory's groups (`custody specs check` asks it for them)."""
    folder = root / "d"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "src.yaml").write_text(LANDING.replace(ROLES, DEMO_ROLES))
    spec = folder / "a.yaml"
    spec.write_text(
        f"description: x\nroles: {DEMO_ROLES}\nzone: integration\ninputs: [d/src]\ntransform: {transform}\n"
    )
    return spec


@pytest.mark.parametrize(
    "module",
    ["this", "subprocess", "assets", "assets.transformsx", "assets.transforms..sales", "assets.transforms."],
)
def test_a_transform_outside_the_allowed_packages_is_refused_naming_them(tmp_path, module):
    spec = integration_spec(tmp_path, f"{module}:run")
    [problem] = check_specs(tmp_path, transform_packages=ALLOWED)
    assert str(problem) == (
        f"{spec}:5: transform: transform module {module!r} is outside the allowed "
        "transform packages (assets.transforms); CUSTODY_TRANSFORM_PACKAGES names them"
    )


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


@pytest.mark.parametrize("loader", ["CSafeLoader", "SafeLoader"])
def test_a_spec_nested_too_deep_is_refused_without_composing_it(tmp_path, monkeypatch, loader):
    # libyaml's scanner stops deep flow nesting itself, before the parser's events reach our count.
    monkeypatch.setattr(yamlsource, "Loader", getattr(yaml, loader))
    (tmp_path / "d").mkdir()
    spec = tmp_path / "d" / "a.yaml"
    spec.write_text(LANDING + "columns: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert [str(p) for p in check_specs(tmp_path, transform_packages=ALLOWED)] == [
        f"{spec}:5: YAML nested more than 100 levels deep"
    ]


@pytest.mark.parametrize(
    "nesting",
    ["".join(f"{'  ' * level}a:\n" for level in range(150)) + "  " * 150 + "b\n", "- " * 150 + "x\n"],
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
