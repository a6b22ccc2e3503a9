"""A run's specs: those of the assets it names and of every asset upstream of them, read from their
own files alone, and judged as a load of the whole folder judges them."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.spec import load_upstream, load_valid_specs
from governance.spec.cache import cache_file
from governance.zones import AssetKey
from tests.conftest import DEMO_SPECS

SUMMARY = AssetKey("sales", "product_summary")
NAMES = AssetKey("sales", "names_and_products")
PRODUCTS = AssetKey("sales", "products")
CLIENTS = AssetKey("sales", "clients")
ALLOWED = DEFAULT_TRANSFORM_PACKAGES


@pytest.fixture
def specs(tmp_path):
    return shutil.copytree(DEMO_SPECS, tmp_path / "specs")


def test_an_asset_s_specs_are_its_own_and_those_upstream_of_it(specs):
    loaded = load_upstream(specs, [NAMES], transform_packages=ALLOWED)

    assert list(loaded.specs.specs) == list(load_valid_specs(specs, transform_packages=ALLOWED).specs.specs)[:3]
    assert set(loaded.specs.specs) == {NAMES, PRODUCTS, CLIENTS}


def test_a_broken_spec_downstream_or_aside_is_not_read(specs):
    (specs / "sales" / "product_summary.yaml").write_text("zone: [")
    (specs / "other").mkdir()
    (specs / "other" / "thing.yaml").write_text("not: a spec")

    loaded = load_upstream(specs, [NAMES], transform_packages=ALLOWED)

    assert (set(loaded.specs.specs), loaded.broken) == ({NAMES, PRODUCTS, CLIENTS}, {})


def test_a_broken_input_breaks_the_asset_as_a_whole_load_says(specs):
    products = specs / "sales" / "products.yaml"
    products.write_text(products.read_text().replace("zone: landing", "zone: lnding"))

    loaded = load_upstream(specs, [SUMMARY], transform_packages=ALLOWED)
    whole = load_valid_specs(specs, transform_packages=ALLOWED)

    assert set(loaded.specs.specs) == {CLIENTS}
    assert loaded.broken == {key: whole.broken[key] for key in (PRODUCTS, NAMES, SUMMARY)}


def test_an_asset_no_file_declares_is_left_out(specs):
    loaded = load_upstream(specs, [AssetKey("sales", "nothing")], transform_packages=ALLOWED)

    assert (len(loaded.specs), loaded.broken) == (0, {})


def test_a_spec_declared_in_yaml_and_yml_is_refused(specs):
    shutil.copy(specs / "sales" / "clients.yaml", specs / "sales" / "clients.yml")

    loaded = load_upstream(specs, [CLIENTS], transform_packages=ALLOWED)

    assert "sales/clients is declared twice" in str(loaded.broken[CLIENTS][0])


def test_a_load_of_a_few_specs_keeps_the_cache_s_other_entries(tmp_path, specs):
    load_valid_specs(specs, tmp_path / "cache", transform_packages=ALLOWED)
    before = cache_file(tmp_path / "cache", specs).read_text()

    load_upstream(specs, [CLIENTS], tmp_path / "cache", transform_packages=ALLOWED)

    assert cache_file(tmp_path / "cache", specs).read_text() == before


def built(settings, selection) -> set[str]:
    from assets.launch import selected

    chosen = selected(settings, selection, {})
    return {key.to_user_string() for key in chosen.defs.resolve_asset_graph().get_all_asset_keys()}


def test_a_run_of_named_assets_builds_only_them_and_what_is_upstream(settings, specs):
    (specs / "sales" / "product_summary.yaml").write_text("zone: [")
    mine = replace(settings, specs=specs)

    assert built(mine, "key:sales/names_and_products") == {
        "sales/names_and_products",
        "sales/products",
        "sales/clients",
    }
    assert built(mine, [CLIENTS]) == {"sales/clients"}


def test_a_run_of_another_selection_builds_every_asset(settings, specs):
    assert len(built(replace(settings, specs=specs), "group:sales")) == 4
