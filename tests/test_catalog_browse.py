"""The catalog as an auditor browses it: the list, its search and filters, and one asset whole."""

from __future__ import annotations

import json

import pytest

from governance.catalog.entries import Filters
from governance.catalog.listing import detail, listing
from governance.catalog.states import Criticality
from governance.errors import NotFound
from governance.retention.purge import set_status
from governance.zones import AssetKey, VersionRef
from tests.graphs import add_version
from tests.helpers import cli, execute

pytestmark = pytest.mark.both_backends

PRODUCTS, CLIENTS = "sales/products", "sales/clients"
JOINED, SUMMARY = "sales/names_and_products", "sales/product_summary"


@pytest.fixture
def registered(catalog, demo_specs):
    """The demo's four specs registered; products has versions 1 to 3, the joined asset one built from products@3."""
    with catalog.session() as session:
        for spec in demo_specs:
            catalog.register_spec(session, spec, "alice")
    ids = [add_version(catalog, PRODUCTS, number, zone="landing") for number in (1, 2, 3)]
    add_version(catalog, JOINED, 1, inputs=(ids[-1],))
    return catalog


def entries_by_key(catalog, filters: Filters | None = None) -> dict:
    return {entry.key: entry for entry in listing(catalog, filters)}


def test_every_asset_is_listed_with_its_roles_classification_and_newest_version(registered):
    found = entries_by_key(registered)
    assert set(found) == {PRODUCTS, CLIENTS, JOINED, SUMMARY}
    products = found[PRODUCTS]
    assert (products.zone, products.owner, products.producer, products.consumer) == (
        "landing",
        "sales-owners",
        "sales-producers",
        "sales-consumers",
    )
    assert (products.versions, products.newest.number, products.newest.requested_by) == (3, 3, "bob")
    assert found[CLIENTS].pii and found[CLIENTS].classification == "confidential"
    assert found[SUMMARY].newest is None and found[SUMMARY].versions == 0


def test_the_search_finds_names_descriptions_column_names_and_tags_in_any_case(registered):
    assert set(entries_by_key(registered, Filters(search="SUMMARY"))) == {SUMMARY}
    assert set(entries_by_key(registered, Filters(search="Order__Quantity"))) == {CLIENTS}
    assert set(entries_by_key(registered, Filters(search="Shop Front"))) == {CLIENTS}
    execute(
        registered,
        'UPDATE asset SET spec_json = replace(spec_json, \'"tags":{}\', \'"tags":{"desk":"pricing-desk"}\') '
        "WHERE key = 'sales/products'",
    )
    assert set(entries_by_key(registered, Filters(search="PRICING"))) == {PRODUCTS}


def test_filters_by_domain_classification_and_owner_each_must_hold(registered):
    assert set(entries_by_key(registered, Filters(classification="confidential"))) == {
        e.key for e in listing(registered) if e.classification == "confidential"
    }
    assert entries_by_key(registered, Filters(domain="finance")) == {}
    assert len(entries_by_key(registered, Filters(domain="sales", owner="sales-owners"))) == 4
    assert entries_by_key(registered, Filters(owner="hr-owners")) == {}


def test_an_asset_with_a_critical_version_says_so(registered):
    set_status(registered, VersionRef.parse(f"{PRODUCTS}@2"), Criticality.CRITICAL, "alice")
    found = entries_by_key(registered)
    assert found[PRODUCTS].critical and not found[JOINED].critical


def test_a_retired_asset_is_listed_from_its_last_spec_with_its_versions(registered):
    execute(registered, f"DELETE FROM asset WHERE key = '{JOINED}'")
    joined = entries_by_key(registered)[JOINED]
    assert joined.retired and joined.versions == 1 and joined.owner == "sales-owners"


def test_one_asset_whole_has_its_spec_columns_versions_inputs_and_dependents(registered):
    products = detail(registered, AssetKey.parse(PRODUCTS))
    assert [v.number for v in products.versions] == [1, 2, 3]
    assert products.inputs == () and products.dependents == (JOINED,)
    assert "unit_price" in [c["name"] for c in products.spec["columns"]]
    joined = detail(registered, AssetKey.parse(JOINED))
    assert set(joined.inputs) == {CLIENTS, PRODUCTS} and joined.dependents == (SUMMARY,)


def test_an_unknown_asset_is_not_found(registered):
    with pytest.raises(NotFound, match="unknown asset sales/nope"):
        detail(registered, AssetKey.parse("sales/nope"))


def test_the_cli_lists_the_catalog_as_json(registered, cli_env, capsys):
    code, out, _ = cli(capsys, "catalog", "--json", "--search", "products")
    assert code == 0
    listed = {entry["key"]: entry for entry in json.loads(out)}
    assert set(listed) == {PRODUCTS, JOINED, CLIENTS}  # by name, by name, by description
    assert listed[PRODUCTS]["newest"]["number"] == 3 and listed[PRODUCTS]["newest"]["created_at"].startswith(
        "2026-01-01"
    )


def test_the_cli_shows_the_list_and_one_asset_to_people(registered, cli_env, capsys):
    code, out, _ = cli(capsys, "catalog", "--classification", "CONFIDENTIAL")
    assert code == 0 and CLIENTS in out and "Catalog:" in out
    code, out, _ = cli(capsys, "catalog", PRODUCTS)
    assert code == 0
    assert "unit_price" in out and f"built from it: {JOINED}" in out and "Versions of sales/products" in out
    assert "# sales/products, spec " in out and "max_bad_fraction:" in out  # the spec in force, as YAML


def test_an_asset_no_other_takes_as_an_input_says_so_in_plain_words(registered):
    assert detail(registered, AssetKey.parse(SUMMARY)).facts()["built from it"] == "no asset takes it as an input"


def test_the_cli_lists_the_first_line_of_a_markdown_description_as_plain_words(registered, cli_env, capsys):
    markdown = "## Units and **revenue** of [the shop](https://shop.example/x)\\n\\nPer product, from `orders`."
    execute(
        registered,
        f"UPDATE asset SET spec_json = replace(spec_json, 'Units, revenue and distinct buyers per product.', "
        f"'{markdown}') WHERE key = '{SUMMARY}'",
    )
    code, out, _ = cli(capsys, "catalog", "--search", "summary")
    assert code == 0
    assert "\n  Units and revenue of the shop\n" in out and "Per product" not in out


def test_the_cli_names_an_unknown_asset_and_refuses_filters_with_one(registered, cli_env, capsys):
    code, _, err = cli(capsys, "catalog", "sales/nope")
    assert code == 4 and "unknown asset sales/nope" in err
    code, _, err = cli(capsys, "catalog", PRODUCTS, "--domain", "sales")
    assert code == 2 and "give no ASSET with them" in err
