"""The spec cache: validated specs remembered by content, never trusted beyond the code that wrote them."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import SpecError
from governance.spec import check_specs, load_specs
from governance.spec.cache import cache_file
from governance.zones import AssetKey
from tests.conftest import DEMO_SPECS

CLIENTS = AssetKey("sales", "clients")
ALLOWED = DEFAULT_TRANSFORM_PACKAGES


@pytest.fixture
def specs(tmp_path):
    return shutil.copytree(DEMO_SPECS, tmp_path / "specs")


def cached(tmp_path, specs) -> dict:
    return json.loads(cache_file(tmp_path / "cache", specs).read_text())


def test_a_cached_load_gives_the_same_specs(tmp_path, specs):
    first = load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    again = load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    assert len(cached(tmp_path, specs)["specs"]) == len(first) == 4
    assert [(s.key, s.hash, s.body) for s in again] == [(s.key, s.hash, s.body) for s in first]


def test_an_entry_is_used_for_the_same_bytes(tmp_path, specs):
    load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    _rewrite_cached_description(tmp_path, specs, "from the cache")
    assert (
        load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)[CLIENTS].body.description == "from the cache"
    )


def test_entries_written_by_another_version_of_the_model_are_ignored(tmp_path, specs):
    load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    stored = _rewrite_cached_description(tmp_path, specs, "from the cache")
    stored["model"] = "another"
    cache_file(tmp_path / "cache", specs).write_text(json.dumps(stored))
    assert (
        load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)[CLIENTS].body.description != "from the cache"
    )


def test_an_edited_file_is_validated_again(tmp_path, specs):
    load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    clients = specs / "sales" / "clients.yaml"
    clients.write_text(clients.read_text() + "colour: blue\n")
    with pytest.raises(SpecError, match="colour: unknown key"):
        load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)


def test_a_cache_folder_that_cannot_be_written_only_costs_speed(tmp_path, specs):
    (tmp_path / "cache").write_text("a file where the folder should be")
    assert len(load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)) == 4


def test_a_damaged_cache_file_is_replaced(tmp_path, specs):
    (tmp_path / "cache").mkdir()
    cache_file(tmp_path / "cache", specs).write_text("{not json")
    assert len(load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)) == 4
    assert len(cached(tmp_path, specs)["specs"]) == 4


def _rewrite_cached_description(tmp_path, specs, description: str) -> dict:
    stored = cached(tmp_path, specs)
    digest = hashlib.sha256((specs / "sales" / "clients.yaml").read_bytes()).hexdigest()
    body = json.loads(stored["specs"][digest])
    body["description"] = description
    stored["specs"][digest] = json.dumps(body)
    cache_file(tmp_path / "cache", specs).write_text(json.dumps(stored))
    return stored


def test_specs_check_validates_every_file_and_fills_the_cache(tmp_path, specs):
    load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    _rewrite_cached_description(tmp_path, specs, "from the cache")
    assert check_specs(specs, tmp_path / "cache", transform_packages=ALLOWED) == []
    assert (
        load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)[CLIENTS].body.description != "from the cache"
    )


def test_valid_files_are_remembered_when_another_one_is_broken(tmp_path, specs):
    products = specs / "sales" / "products.yaml"
    products.write_text(products.read_text() + "colour: blue\n")
    with pytest.raises(SpecError):
        load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    assert len(cached(tmp_path, specs)["specs"]) == 3


def test_a_spec_cached_under_more_transform_packages_is_refused_under_fewer(tmp_path, specs):
    summary = specs / "sales" / "product_summary.yaml"
    summary.write_text(
        summary.read_text().replace("assets.transforms.sales:product_summary", "tests.transforms:passthrough")
    )
    wider = (*ALLOWED, "tests.transforms")
    assert len(load_specs(specs, tmp_path / "cache", transform_packages=wider)) == 4
    with pytest.raises(
        SpecError, match=r"product_summary.yaml:\d+: transform: transform module 'tests.transforms' is outside"
    ):
        load_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
