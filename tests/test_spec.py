"""Spec validation: every problem at once, each with its file, field and line."""

from __future__ import annotations

import pytest

from assets.definitions import build_definitions
from governance.errors import SpecError
from governance.spec import check_specs, load_specs
from governance.zones import AssetKey
from tests.conftest import DATA, DEMO_SPECS

BAD = DATA / "bad_specs"


def test_demo_specs_load_in_dependency_order():
    order = [str(key) for key in load_specs(DEMO_SPECS).specs]
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
        ("transform_missing", "transform: transform module 'no_such_module.sub' cannot be imported"),
        ("invalid_name", "invalid asset name 'Bad-Name'"),
        ("long_name", "invalid asset name 'axxxxxxx"),
    ],
)
def test_each_kind_of_spec_error_is_named_with_file_field_and_line(case, expected):
    problems = [str(p) for p in check_specs(BAD / case)]
    assert any(expected in p for p in problems), problems


def test_every_problem_is_reported_at_once():
    problems = check_specs(BAD / "many")
    assert {p.file.rsplit("/", 2)[-2] + "/" + p.file.rsplit("/", 1)[-1] for p in problems} == {"d/a.yaml", "d/b.yaml", "e/c.yaml"}


def test_loading_a_bad_folder_raises_one_error_listing_them_all():
    with pytest.raises(SpecError) as raised:
        load_specs(BAD / "many")
    assert str(raised.value).startswith("3 problems in asset specs")


def test_the_code_location_refuses_to_load_with_the_same_message():
    with pytest.raises(SpecError) as raised:
        build_definitions(BAD / "many")
    assert str(raised.value) == str(SpecError(check_specs(BAD / "many")))


def test_a_transform_without_a_parameter_per_input_is_refused(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "src.yaml").write_text("description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: landing\nsource: {format: json}\n")
    (folder / "a.yaml").write_text(
        "description: x\nroles: {owner: o, producer: p, consumer: c}\nzone: integration\n"
        "inputs: [d/src]\ntransform: assets.transforms.sales:product_summary\n"
    )
    assert [p.message for p in check_specs(tmp_path)] == ["transform takes no parameter for input(s) src"]


def test_spec_hash_changes_with_content_only(tmp_path):
    spec = load_specs(DEMO_SPECS)[AssetKey("sales", "clients")]
    copy = tmp_path / "sales"
    copy.mkdir()
    (copy / "clients.yaml").write_text("# a comment\n" + spec.file.read_text())
    assert load_specs(tmp_path)[spec.key].hash == spec.hash
