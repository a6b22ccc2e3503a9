"""The catalog from Python, as a notebook uses it: typed DataFrames, graphs Jupyter draws, readable tables."""

from __future__ import annotations

import pandas as pd
import pytest

from governance.api import Custody
from governance.catalog.states import Criticality
from governance.demo import demo_password
from governance.errors import AccessDenied, InvalidInput, NotFound
from governance.frames import Frame
from governance.lineage.pictures import LineageGraph
from governance.retention.purge import set_status
from governance.zones import VersionRef
from tests.graphs import add_version
from tests.helpers import os_user_is, recorded

PRODUCTS, JOINED = "sales/products", "sales/names_and_products"


@pytest.fixture
def custody(settings, demo_specs) -> Custody:
    """The demo's specs registered by alice; products@1 and @2, and names_and_products@1 built from
    products@2; the OS user at the keyboard is dave, an auditor."""
    os_user_is(settings, "dave")
    api = Custody(settings, {})
    with api.store.session() as session:
        for spec in demo_specs:
            api.store.register_spec(session, spec, "alice")
    first = add_version(api.store, PRODUCTS, 1, zone="landing")
    second = add_version(api.store, PRODUCTS, 2, zone="landing")
    add_version(api.store, JOINED, 1, inputs=(first, second))
    set_status(api.store, VersionRef.parse(f"{PRODUCTS}@1"), Criticality.CRITICAL, "alice")
    return api


def test_the_catalog_is_a_dataframe_with_typed_columns(custody):
    frame = custody.catalog()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 4
    assert str(frame["created_at"].dtype) == "datetime64[ns, UTC]"
    assert str(frame["versions"].dtype) == "Int64" and str(frame["critical"].dtype) == "boolean"
    products = frame.set_index("key").loc[PRODUCTS]
    assert (products["newest"], products["versions"], bool(products["critical"])) == (2, 2, True)
    assert list(custody.catalog(search="names")["key"]) == [JOINED]


def test_one_asset_shows_whole_and_gives_its_columns_and_versions_as_frames(custody):
    card = custody.asset(PRODUCTS)
    assert list(card.versions["number"]) == [1, 2] and "unit_price" in list(card.columns["name"])
    html = card._repr_html_()
    assert "built from it" in html and JOINED in html and "<table" in html


def test_versions_of_an_unknown_asset_are_not_found(custody):
    assert list(custody.versions(PRODUCTS)["number"]) == [1, 2]
    with pytest.raises(NotFound, match="unknown asset sales/nope"):
        custody.versions("sales/nope")


def test_provenance_impact_and_columns_are_graphs_jupyter_draws(custody):
    graph = custody.provenance(f"{JOINED}@1")
    assert isinstance(graph, LineageGraph) and set(graph.nodes) == {f"{JOINED}@1", f"{PRODUCTS}@1", f"{PRODUCTS}@2"}
    assert "image/svg+xml" in graph._repr_mimebundle_()
    assert set(custody.impact(f"{PRODUCTS}@2").nodes) == {f"{PRODUCTS}@2", f"{JOINED}@1"}
    assert graph.to_networkx().number_of_edges() == 2
    nodes = graph.to_frame()
    assert isinstance(nodes, Frame) and str(nodes["created_at"].dtype) == "datetime64[ns, UTC]"


def test_tables_show_iso_times_and_shortened_hashes_with_the_whole_value_kept(custody):
    frame = custody.versions(PRODUCTS)
    full = frame["data_version"].iloc[0]
    html = frame._repr_html_()
    assert f">{full[:12]}…<" in html and full in html  # the whole value is the cell's tooltip
    assert "2026-01-01T00:00:00+00:00" in html and frame["data_version"].iloc[0] == full


def test_the_ledger_is_a_frame_of_entries_filtered_as_the_cli_filters_them(custody):
    ledger = custody.ledger()
    assert list(ledger["seq"]) == sorted(ledger["seq"]) and str(ledger["ts"].dtype) == "datetime64[ns, UTC]"
    changed = custody.ledger(action="version.status_changed")
    assert list(changed["actor"]) == ["alice"] and list(changed["asset_key"]) == [PRODUCTS]
    assert custody.ledger(actor="nobody").empty


def test_the_ledger_is_read_by_an_auditor_or_an_admin_only_and_each_read_is_recorded(settings, demo_specs):
    os_user_is(settings, "carol")
    custody = Custody(settings, {})
    with pytest.raises(AccessDenied, match="denied: carol may not read the ledger: it needs the auditor group"):
        custody.ledger()
    assert list(custody.ledger(as_user="dave", password=demo_password("dave"))["action"])[-1] == "ledger.read"
    decided = recorded(custody.store, action="ledger.read")
    assert [(e["actor"], e["details"]["result"], e["details"]["method"]) for e in decided] == [
        ("carol", "denied", "os-user"),
        ("dave", "allowed", "password"),
    ]


def test_access_lists_each_role_from_the_definition_in_force(custody):
    roles = custody.access(PRODUCTS).set_index("role")
    assert roles.loc["owner", "group"] == "sales-owners" and "alice" in roles.loc["owner", "members"]
    with pytest.raises(NotFound, match="no definition of it is in force"):
        custody.access("sales/nope")


def test_verify_holds_the_ledger_against_its_checkpoints(custody):
    entries = len(custody.ledger(limit=None))  # this read's own entry the last
    verification = custody.verify()
    assert verification.ok and verification.result.entries == entries


def test_verify_shows_what_it_verified_and_what_it_could_not_and_why_as_the_cli_does(custody):
    entries = len(custody.ledger(limit=None))
    verification = custody.verify()
    shown = str(verification)
    assert shown.startswith(f"{entries} entries, chain intact, ") and str(custody.store.checkpoints.path) in shown
    assert "notice: checkpoints are not verified: CUSTODY_LEDGER_KEY is not set" in shown
    assert repr(verification) == shown and "Verification(" not in verification._repr_html_()
    assert "CUSTODY_LEDGER_KEY is not set" in verification._repr_html_()


def test_a_long_frame_shows_its_first_and_last_rows_only(custody):
    ledger = custody.ledger()
    with pd.option_context("display.max_rows", 4):
        html = ledger._repr_html_()
    assert f"{len(ledger):,} rows: the first and last 2 shown" in html
    assert html.count("<tr>") <= 1 + 4 + 1


def test_an_empty_answer_keeps_its_column_types(custody):
    empty = custody.catalog(search="no such thing")
    assert empty.empty and str(empty["newest"].dtype) == "Int64" and str(empty["critical"].dtype) == "boolean"


def test_ledger_times_are_read_as_iso_dates_or_datetimes(custody):
    from datetime import UTC, datetime

    everything = custody.ledger()
    since = custody.ledger(since="2000-01-01")
    assert list(since["seq"]) == [*everything["seq"], since["seq"].iloc[-1]]  # and this read's own entry
    assert custody.ledger(until=datetime(2000, 1, 1, tzinfo=UTC)).empty
    with pytest.raises(InvalidInput, match="not an ISO 8601 date"):
        custody.ledger(since="yesterday")
