"""The JSON Schema of a spec file, published for owners' editors: generated from the model that
validates specs, named by the demo's spec files, and agreeing with them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

from governance.spec import spec_schema
from tests.conftest import DEMO_SPECS, ROOT
from tests.helpers import cli

PUBLISHED = ROOT / "schemas" / "asset-spec.schema.json"
LANGUAGE_SERVER = "# yaml-language-server: $schema="


def demo_spec_files() -> list[Path]:
    return sorted(DEMO_SPECS.rglob("*.yaml"))


def test_the_published_schema_is_what_custody_specs_schema_prints(capsys):
    code, printed, _ = cli(capsys, "specs", "schema")

    assert code == 0
    assert json.loads(printed) == json.loads(PUBLISHED.read_text()) == spec_schema()


def test_every_demo_spec_names_the_published_schema_on_its_first_line():
    for path in demo_spec_files():
        first = path.read_text().splitlines()[0]
        assert first.startswith(LANGUAGE_SERVER), path
        assert (path.parent / first.removeprefix(LANGUAGE_SERVER)).resolve() == PUBLISHED


def test_the_demo_specs_meet_the_schema():
    validator = Draft202012Validator(spec_schema())
    for path in demo_spec_files():
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == [], path


def test_the_schema_flags_a_misspelt_zone_and_an_unknown_field_as_an_editor_shows_them():
    body = yaml.safe_load((DEMO_SPECS / "sales" / "products.yaml").read_text())
    wrong = {**body, "zone": "lnding", "owner": "sales-owners"}

    flagged = {
        tuple(error.absolute_path) or error.validator
        for error in Draft202012Validator(spec_schema()).iter_errors(wrong)
    }

    assert ("zone",) in flagged and "additionalProperties" in flagged


def test_the_schema_flags_a_column_type_outside_the_list_as_the_check_does():
    body = yaml.safe_load((DEMO_SPECS / "sales" / "products.yaml").read_text())
    body["columns"][0]["type"] = "varchar"

    flagged = [tuple(error.absolute_path) for error in Draft202012Validator(spec_schema()).iter_errors(body)]

    assert flagged == [("columns", 0, "type")]
