"""Column lineage by version: recorded with each commit, shown in Dagster and OpenLineage, followed back to DropZone fields."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from assets.factory import integration_asset
from governance import ledger
from governance.demo import (
    CLIENTS,
    NAMES_AND_PRODUCTS,
    PRODUCT_SUMMARY,
    PRODUCTS,
    drop_demo_batches,
)
from governance.errors import InvalidInput, NotFound
from governance.ingest import ingest
from governance.integrate import materialize
from governance.lineage.column_trace import Ending, column_tree, origins, overview
from governance.lineage.openlineage import Emitter, transport_config
from governance.lineage.versioned import ColumnOptions
from governance.runs import RunRequest
from governance.spec import Spec
from governance.zones import VersionRef
from tests.openlineage_spec import read_events

BOB = {"custody/requested_by": "bob"}


def bob() -> RunRequest:
    return RunRequest(requested_by="bob")


def deps(found: list) -> set[tuple[str, str, str, str]]:
    return {
        (d.source.ref if d.source else "dropzone", d.input_column, d.edge.kind.value, d.edge.transformation.value)
        for d in found
    }


def test_a_landing_column_comes_from_a_field_of_its_dropzone_batch(catalog, pipeline):
    found = overview(catalog, VersionRef(CLIENTS, 1))
    assert deps(found.columns["order__product_id"]) == {("dropzone", "order.product_id", "DIRECT", "TRANSFORMATION")}
    assert deps(found.columns["name"]) == {("dropzone", "name", "DIRECT", "IDENTITY")}
    assert ("dropzone", "order.product_id", "INDIRECT", "FILTER") in deps(found.every_column)


def test_an_integration_column_names_the_input_versions_and_columns_it_derives_from(catalog, pipeline):
    found = overview(catalog, VersionRef(NAMES_AND_PRODUCTS, 1))
    assert deps(found.columns["amount"]) == {
        ("sales/clients@1", "order__quantity", "DIRECT", "TRANSFORMATION"),
        ("sales/products@1", "unit_price", "DIRECT", "TRANSFORMATION"),
    }
    assert deps(found.columns["product_name"]) == {("sales/products@1", "product_name", "DIRECT", "IDENTITY")}
    assert deps(found.every_column) == {
        ("sales/clients@1", "order__product_id", "INDIRECT", "JOIN"),
        ("sales/products@1", "product_id", "INDIRECT", "JOIN"),
    }


def test_origins_follow_a_column_through_every_version_to_dropzone_fields_and_files(catalog, lake, pipeline):
    found = {
        (o.version.ref, o.field): o
        for o in origins(catalog, VersionRef(PRODUCT_SUMMARY, 1), "revenue", direct_only=True)
    }
    assert set(found) == {("sales/clients@1", "order.quantity"), ("sales/products@1", "unit_price")}
    quantity = found[("sales/clients@1", "order.quantity")]
    assert [(e.kind.value, e.transformation.value) for e in quantity.edges] == [("DIRECT", "AGGREGATION")]
    assert quantity.batch.batch_id == pipeline.client_batches[0]
    assert [f.path for f in quantity.batch.files] == [
        lake.stored(lake.batch_dir(CLIENTS, pipeline.client_batches[0]) / "clients-v15.json")
    ]


def test_origins_include_what_filters_joins_and_groups_the_rows_unless_direct_only(catalog, pipeline):
    everything = {(o.version.ref, o.field): o for o in origins(catalog, VersionRef(PRODUCT_SUMMARY, 1), "revenue")}
    joined_on = everything[("sales/clients@1", "order.product_id")]
    assert {(e.kind.value, e.transformation.value) for e in joined_on.edges} >= {("INDIRECT", "JOIN")}
    assert ("sales/clients@1", "order.product_id") not in {
        (o.version.ref, o.field) for o in origins(catalog, VersionRef(PRODUCT_SUMMARY, 1), "revenue", direct_only=True)
    }


def test_the_column_tree_goes_version_by_version_and_expands_each_column_once(catalog, pipeline):
    tree = column_tree(catalog, VersionRef(PRODUCT_SUMMARY, 1), "revenue").to_dict()
    [amount] = [node for node in tree["inputs"] if node["column"] == "amount"]
    assert amount["version"] == "sales/names_and_products@1"
    assert {node["version"] for node in amount["inputs"]} == {"sales/clients@1", "sales/products@1"}
    flat = json.dumps(tree)
    assert '"expanded_elsewhere": true' in flat
    assert '"dropzone_field"' not in flat and '"field": "order.quantity"' in flat


def test_asking_for_a_column_the_version_lacks_names_its_columns(catalog, pipeline):
    with pytest.raises(NotFound, match=r"sales/product_summary@1 has no column 'price'; its columns are product_id, "):
        column_tree(catalog, VersionRef(PRODUCT_SUMMARY, 1), "price")


def test_with_column_lineage_off_nothing_is_recorded_and_that_is_said(spark, catalog, lake, demo_specs):
    dropped = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], bob(), batch_id=dropped.products_batch, column_lineage=None)
    found = overview(catalog, VersionRef(PRODUCTS, 1))
    assert found.to_dict()["recorded"] is False and all(not d for d in found.columns.values())
    [origin] = origins(catalog, VersionRef(PRODUCTS, 1), "unit_price")
    assert (origin.field, origin.ending) == ("unit_price", Ending.NOT_RECORDED)


@pytest.mark.parametrize(
    ("setting", "cap", "message"),
    [
        ("maybe", None, "CUSTODY_COLUMN_LINEAGE='maybe': use on or off"),
        ("on", "lots", "CUSTODY_COLUMN_LINEAGE_CAP='lots': expected a positive number"),
    ],
)
def test_a_bad_column_lineage_setting_is_refused_by_name(setting, cap, message):
    with pytest.raises(InvalidInput, match=message):
        ColumnOptions.from_settings(setting, cap)


def test_the_commit_entry_of_the_ledger_summarizes_the_column_lineage(catalog, pipeline):
    with catalog.session() as session:
        [entry] = ledger.entries(
            session, ledger.LedgerFilter(asset=str(NAMES_AND_PRODUCTS), action=ledger.Action.MATERIALIZATION_COMMITTED)
        )
    summary = json.loads(entry.details)["column_lineage"]
    assert summary["dependencies"] > 0 and summary["fallbacks"] == [] and summary["notes"] == []


def test_dagster_shows_each_integration_column_s_input_columns(spark, catalog, lake, demo_specs, resources, pipeline):
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [integration_asset(demo_specs[PRODUCT_SUMMARY], demo_specs)],
            resources=resources,
            instance=instance,
            tags=BOB,
        )
    lineage = result.get_asset_materialization_events()[0].materialization.metadata["dagster/column_lineage"].value
    joined = dg.AssetKey(["sales", "names_and_products"])
    assert lineage.deps_by_column["revenue"] == [dg.TableColumnDep(asset_key=joined, column_name="amount")]
    assert lineage.deps_by_column["product_id"] == [dg.TableColumnDep(asset_key=joined, column_name="product_id")]


def test_the_ui_shows_each_column_s_sources_and_how_as_a_table_after_the_version(
    spark, catalog, lake, demo_specs, resources, pipeline
):
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [integration_asset(demo_specs[PRODUCT_SUMMARY], demo_specs)],
            resources=resources,
            instance=instance,
            tags=BOB,
        )
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    assert next(iter(metadata)) == "custody/version"
    table = metadata["custody/column_lineage"].value.splitlines()
    assert table[:2] == ["| column | derives from | how |", "|---|---|---|"]
    assert "| `revenue` | `sales/names_and_products@1.amount` | DIRECT AGGREGATION |" in table
    assert "| `product_id` | `sales/names_and_products@1.product_id` | DIRECT IDENTITY |" in table
    assert (
        table[-1] == "Every column back to where it was read: `custody lineage columns sales/product_summary@2 COLUMN`"
    )


def test_a_fallback_is_reported_in_the_dagster_metadata(spark, catalog, lake, demo_specs, resources, pipeline):
    spec = demo_specs[PRODUCT_SUMMARY]
    spec = Spec(spec.key, spec.file, spec.body.model_copy(update={"transform": "tests.transforms:through_pandas"}))
    with dg.instance_for_test() as instance:
        result = dg.materialize([integration_asset(spec, demo_specs)], resources=resources, instance=instance, tags=BOB)
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    assert "`MapInPandas`" in metadata["custody/column_lineage_fallbacks"].value
    joined = dg.AssetKey(["sales", "names_and_products"])
    assert {d.column_name for d in metadata["dagster/column_lineage"].value.deps_by_column["product_name"]} == {
        "product_id",
        "product_name",
    }
    assert {d.asset_key for d in metadata["dagster/column_lineage"].value.deps_by_column["product_name"]} == {joined}


def test_openlineage_events_carry_the_column_lineage_facet(spark, catalog, lake, demo_specs, pipeline, tmp_path):
    events = tmp_path / "events.jsonl"
    materialize(
        spark,
        catalog,
        lake,
        demo_specs[PRODUCT_SUMMARY],
        bob(),
        events=Emitter(transport_config(f"file:{events}", tmp_path)),
    )
    complete = read_events(events)[-1]
    facet = complete["outputs"][0]["facets"]["columnLineage"]
    [source] = facet["fields"]["revenue"]["inputFields"]
    assert source["name"] == complete["inputs"][0]["name"] and source["field"] == "amount"
    assert source["transformations"] == [{"type": "DIRECT", "subtype": "AGGREGATION", "masking": False}]
    assert {(f["field"], f["transformations"][0]["subtype"]) for f in facet["dataset"]} >= {("product_id", "GROUP_BY")}


def test_the_openlineage_facet_gives_an_input_field_each_way_it_feeds_a_column(
    spark, catalog, lake, demo_specs, pipeline, tmp_path
):
    events = tmp_path / "events.jsonl"
    spec = demo_specs[PRODUCT_SUMMARY]
    spec = Spec(spec.key, spec.file, spec.body.model_copy(update={"transform": "tests.transforms:names_or_unnamed"}))
    materialize(spark, catalog, lake, spec, bob(), events=Emitter(transport_config(f"file:{events}", tmp_path)))
    facet = read_events(events)[-1]["outputs"][0]["facets"]["columnLineage"]
    [source] = facet["fields"]["label"]["inputFields"]
    assert source["field"] == "product_name"
    assert sorted((t["type"], t["subtype"]) for t in source["transformations"]) == [
        ("DIRECT", "TRANSFORMATION"),
        ("INDIRECT", "CONDITIONAL"),
    ]


def test_the_resource_reads_the_switch_and_cap_from_the_environment(settings, monkeypatch):
    from resources import CustodyResource

    monkeypatch.setenv("CUSTODY_COLUMN_LINEAGE_CAP", "500")
    monkeypatch.delenv("CUSTODY_COLUMN_LINEAGE", raising=False)
    monkeypatch.setenv("CUSTODY_HOME", str(settings.home))
    assert CustodyResource().column_options() == ColumnOptions(max_all_to_all=500)
    monkeypatch.setenv("CUSTODY_COLUMN_LINEAGE", "off")
    assert CustodyResource().column_options() is None
    assert CustodyResource(column_lineage="on").column_options() == ColumnOptions(max_all_to_all=500)


def test_a_column_that_reads_no_input_ends_its_origins_there(spark, catalog, lake, demo_specs, pipeline):
    spec = demo_specs[PRODUCT_SUMMARY]
    spec = Spec(spec.key, spec.file, spec.body.model_copy(update={"transform": "tests.transforms:with_a_constant"}))
    materialize(spark, catalog, lake, spec, bob())
    [origin] = origins(catalog, VersionRef(PRODUCT_SUMMARY, 2), "source", direct_only=True)
    assert (origin.version.ref, origin.field, origin.ending) == ("sales/product_summary@2", "source", Ending.NO_INPUT)


def test_a_plan_the_extractor_cannot_read_still_commits_and_says_why(
    spark, catalog, lake, demo_specs, pipeline, monkeypatch
):
    def unreadable(*args, **kwargs):
        raise KeyError("projectList")

    monkeypatch.setattr("governance.lineage.spark.extract", unreadable)
    # Under another code version: the same one would make no new version.
    rebuilt = RunRequest(requested_by="bob", code_version="rebuilt")
    done = materialize(spark, catalog, lake, demo_specs[PRODUCT_SUMMARY], rebuilt)
    assert done.columns.deps == () and done.columns.notes == (
        "column lineage could not be extracted: KeyError: 'projectList'",
    )
    assert json.loads(done.version.column_lineage)["notes"] == list(done.columns.notes)


def test_a_nested_field_of_an_input_version_is_followed_through_its_top_level_column(spark, catalog, lake, demo_specs):
    dropped = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], bob(), batch_id=dropped.products_batch)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], bob(), batch_id=dropped.client_batches[0])
    for key, transform in ((NAMES_AND_PRODUCTS, "nests_the_client"), (PRODUCT_SUMMARY, "reads_a_nested_field")):
        spec = demo_specs[key]
        materialize(
            spark,
            catalog,
            lake,
            Spec(spec.key, spec.file, spec.body.model_copy(update={"transform": f"tests.transforms:{transform}"})),
            bob(),
        )
    assert deps(overview(catalog, VersionRef(PRODUCT_SUMMARY, 1)).columns["first_name"]) == {
        ("sales/names_and_products@1", "client.name", "DIRECT", "IDENTITY"),
    }
    found = {
        (o.version.ref, o.field)
        for o in origins(catalog, VersionRef(PRODUCT_SUMMARY, 1), "first_name", direct_only=True)
    }
    assert found == {("sales/clients@1", "name"), ("sales/clients@1", "surname")}
