"""One broken spec takes down its own asset and those downstream of it, never the code location."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.definitions import build_definitions
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.demo import drop_demo_batches
from governance.spec import load_specs, load_valid_specs
from governance.zones import AssetKey, Lake
from tests.conftest import DEMO_SPECS
from tests.helpers import cli, edit_spec


@pytest.fixture
def specs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, folder)
    return folder


def test_a_broken_spec_is_an_asset_that_cannot_run_and_says_why(specs_dir):
    path = edit_spec(specs_dir, "sales/product_summary", "zone: integration", "zone: integration\ncolour: blue")
    graph = build_definitions(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES).resolve_asset_graph()
    runnable = {key.to_user_string() for key in graph.get_all_asset_keys() if graph.get(key).is_materializable}
    assert runnable == {"sales/products", "sales/clients", "sales/names_and_products"}
    summary = graph.get(dg.AssetKey(["sales", "product_summary"]))
    assert not summary.is_materializable
    assert summary.tags["custody/spec"] == "invalid"
    assert summary.description.startswith("**Invalid spec:** this asset cannot run until its owner fixes it")
    assert f"{path}:8: colour: unknown key" in summary.description


def test_an_input_with_an_invalid_spec_is_named_as_such_and_takes_its_dependents_down(specs_dir):
    clients = edit_spec(specs_dir, "sales/clients", "format: json", "format: xml")
    loaded = load_valid_specs(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    assert [str(spec.key) for spec in loaded.specs] == ["sales/products"]
    [own] = loaded.broken[AssetKey("sales", "clients")]
    assert own.field == "source.format" and own.file == str(clients)
    [joined] = loaded.broken[AssetKey("sales", "names_and_products")]
    assert joined.message == f"input 'sales/clients' has an invalid spec, {clients}: fix it first"
    [summary] = loaded.broken[AssetKey("sales", "product_summary")]
    assert summary.message == "input sales/names_and_products cannot be loaded: its spec or one upstream is invalid"


def test_the_cli_runs_a_valid_asset_beside_a_broken_one_and_refuses_the_broken_one(
    specs_dir, cli_env, capsys, monkeypatch, spark
):
    monkeypatch.setenv("CUSTODY_SPECS", str(specs_dir))
    summary = edit_spec(specs_dir, "sales/product_summary", "zone: integration", "zone: integration\ncolour: blue")
    dropped = drop_demo_batches(Lake(cli_env.lake))
    code, _, err = cli(capsys, "ingest", "sales/products", "--batch", dropped.products_batch, "--as", "bob")
    assert code == 0, err
    code, _, err = cli(capsys, "materialize", "sales/product_summary", "--as", "bob")
    assert code == 1
    assert f"{summary}:8: colour: unknown key" in err
    code, _, err = cli(capsys, "specs", "check", str(specs_dir))
    assert code == 1 and "colour: unknown key" in err


def applied(catalog, specs_dir: Path) -> None:
    with catalog.session() as session:
        for spec in load_specs(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES):
            catalog.register_spec(session, spec, "alice")


def shown(specs_dir: Path, catalog_url: str | None = None) -> dict:
    graph = build_definitions(
        specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES, catalog_url=catalog_url
    ).resolve_asset_graph()
    return {key.to_user_string(): graph.get(key) for key in graph.get_all_asset_keys()}


@pytest.mark.both_backends
def test_a_broken_spec_keeps_the_edges_owners_and_kinds_of_its_last_applied_definition(specs_dir, catalog, settings):
    applied(catalog, specs_dir)
    edit_spec(specs_dir, "sales/names_and_products", "zone: integration", "zone: integration\ncolour: blue")
    nodes = shown(specs_dir, settings.catalog_url)
    joined = nodes["sales/names_and_products"]
    assert not joined.is_materializable and joined.tags["custody/spec"] == "invalid"
    assert {key.to_user_string() for key in joined.parent_keys} == {"sales/clients", "sales/products"}
    assert {key.to_user_string() for key in joined.child_keys} == {"sales/product_summary"}
    assert joined.owners == ["team:sales-owners"] and set(joined.kinds) == {"spark", "parquet"}
    assert "colour: unknown key" in joined.description


def test_an_asset_held_back_by_a_broken_input_keeps_what_its_own_file_declares(specs_dir):
    edit_spec(specs_dir, "sales/clients", "format: json", "format: xml")
    nodes = shown(specs_dir)
    summary = nodes["sales/product_summary"]
    assert not summary.is_materializable
    assert {key.to_user_string() for key in summary.parent_keys} == {"sales/names_and_products"}
    assert summary.owners == ["team:sales-owners"] and set(summary.kinds) == {"spark", "parquet"}
    joined = nodes["sales/names_and_products"]
    assert {key.to_user_string() for key in joined.parent_keys} == {"sales/clients", "sales/products"}
    assert nodes["sales/clients"].owners == []  # never applied: nothing is known of it but its problems
